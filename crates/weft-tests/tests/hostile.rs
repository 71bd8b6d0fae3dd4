//! A hostile client that holds the cluster key, run against a cluster in `munge` mode
//! with two real users: alice (the victim) and bob (the attacker). Bob speaks the real
//! protocol (`weft_rpc::Connection`: the HMAC handshake, his own MUNGE credential, raw
//! requests), not the well-behaved client library, and names alice's inodes by number
//! (they are sequential: an attacker finds them by counting).
//!
//! `ATTACKS` is a fixed list of named attacks, each a function that returns what it got;
//! the test fails on any attack that succeeds (and says which). Every attack is refused
//! with an expected error code, never by accident: a control list (`CONTROLS`) runs the
//! same requests on bob's own files first and must succeed. To add an attack, write a
//! function `fn(&Scene) -> Attempt` and add it to `ATTACKS` with the codes a refusal
//! may carry.
//!
//! What each attack did on the code before issue 29's fixes (git 10a0475), all served:
//! the `in_private_dir` ones (GrantCapability, Readdir, GetAttr, Lookup, xattrs, Link
//! and locks by inode number inside alice's 0700 directory: finding 4); `read_removed`
//! and `read_replaced` (a read capability for an unlinked, not yet purged inode:
//! finding 2); `handle_*` (`SetAttr { by_handle }` stripped setuid/setgid and truncated:
//! finding 5); `lock_*` (write and read locks on alice's 0600 file and on a missing
//! inode: finding 6).

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use weft_client::{Client, ClientAuth, ClusterKey, CreateOptions, Cred, ErrorCode, OpenOptions, SetAttr};
use weft_layout::InodeId;
use weft_proto::capability::rights;
use weft_proto::handshake::Identity;
use weft_proto::msg::Request;
use weft_proto::{LockKind, LockRequest, Name, WireError};
use weft_rpc::{Connection, RpcError, Timeouts};
use weft_testkit::munge::{Munged, User};
use weft_testkit::{ClusterOptions, TestCluster};

const ALICE: u32 = 4201;
const BOB: u32 = 4202;

/// What an attack sees: the cluster, the two users, and the numbers of the files it
/// goes after.
struct Scene {
    cluster: TestCluster,
    munge_socket: std::path::PathBuf,
    alice: User,
    bob: User,
    /// Root's client (sets up and, for some attacks, plays alice's part).
    root: Client,
    /// Alice's 0700 directory and, inside it, a 0644 file, a 0666 file and a 0755
    /// subdirectory holding a 0644 file.
    private_dir: InodeId,
    private_644: InodeId,
    private_666: InodeId,
    private_sub: InodeId,
    /// Alice's files in the 0777 directory /shared: 0600, 0644, and 06755.
    shared_600: InodeId,
    shared_644: InodeId,
    shared_setuid: InodeId,
    /// Bob's own: a 0700 directory with a 0600 file, for the controls.
    bob_dir: InodeId,
    bob_600: InodeId,
    shared_dir: InodeId,
}

/// What one attack got: `Ok` (the attack succeeded: what it obtained) or the refusal.
type Attempt = Result<String, WireError>;

/// A named attempt and how a refusal of it may look.
struct Attack {
    name: &'static str,
    run: fn(&Scene) -> Attempt,
    /// The codes a refusal may carry (anything else is a bug in the attack or the server).
    refused_with: &'static [ErrorCode],
}

const DENIED: &[ErrorCode] = &[ErrorCode::PermissionDenied, ErrorCode::NotPermitted];
const GONE: &[ErrorCode] = &[ErrorCode::Stale, ErrorCode::NotFound];

/// The attacks run every time; append new ones here.
const ATTACKS: &[Attack] = &[
    // Finding 4: by inode number inside alice's 0700 directory.
    Attack {
        name: "grant_read_in_private_dir",
        run: |s| grant(s, s.private_644, rights::READ),
        refused_with: DENIED,
    },
    Attack {
        name: "grant_write_in_private_dir",
        run: |s| grant(s, s.private_666, rights::WRITE),
        refused_with: DENIED,
    },
    Attack {
        name: "readdir_in_private_dir",
        run: |s| {
            bob_call(
                s,
                Request::Readdir {
                    cred: bob_cred(),
                    dir: s.private_sub,
                    after: Name::from(""),
                    max_entries: 100,
                },
            )
        },
        refused_with: DENIED,
    },
    Attack {
        name: "readdir_plus_in_private_dir",
        run: |s| {
            bob_call(
                s,
                Request::ReaddirPlus {
                    cred: bob_cred(),
                    dir: s.private_sub,
                    after: Name::from(""),
                    max_entries: 100,
                },
            )
        },
        refused_with: DENIED,
    },
    Attack {
        name: "getattr_in_private_dir",
        run: |s| {
            bob_call(
                s,
                Request::GetAttr {
                    cred: bob_cred(),
                    inode: s.private_644,
                },
            )
        },
        refused_with: DENIED,
    },
    Attack {
        name: "lookup_in_private_dir",
        run: |s| {
            bob_call(
                s,
                Request::Lookup {
                    cred: bob_cred(),
                    parent: s.private_sub,
                    name: Name::from("file"),
                },
            )
        },
        refused_with: DENIED,
    },
    Attack {
        name: "listxattr_in_private_dir",
        run: |s| {
            bob_call(
                s,
                Request::ListXattr {
                    cred: bob_cred(),
                    inode: s.private_644,
                },
            )
        },
        refused_with: DENIED,
    },
    Attack {
        name: "link_out_of_private_dir",
        run: |s| {
            bob_call(
                s,
                Request::Link {
                    cred: bob_cred(),
                    inode: s.private_644,
                    parent: s.shared_dir,
                    name: Name::from("stolen-link"),
                },
            )
        },
        refused_with: DENIED,
    },
    Attack {
        name: "lock_in_private_dir",
        run: |s| lock(s, s.private_644, LockKind::Read),
        refused_with: DENIED,
    },
    // Finding 2: a read capability for a removed or replaced file, by its old number.
    Attack {
        name: "read_removed",
        run: |s| {
            let victim = alice_file(s, "/shared/removed", 0o600);
            let connection = bob_connection(s);
            s.root.unlink("/shared/removed").unwrap();
            call(&connection, grant_request(victim, rights::READ))
        },
        refused_with: GONE,
    },
    Attack {
        name: "read_replaced",
        run: |s| {
            let victim = alice_file(s, "/shared/replaced", 0o600);
            alice_file(s, "/shared/replacement", 0o600);
            let connection = bob_connection(s);
            s.root.rename("/shared/replacement", "/shared/replaced").unwrap();
            call(&connection, grant_request(victim, rights::READ))
        },
        refused_with: GONE,
    },
    // Finding 5: claiming to hold alice's files open for writing.
    Attack {
        name: "handle_strips_setuid",
        run: |s| {
            let got = setattr(
                s,
                s.shared_setuid,
                SetAttr {
                    kill_privileges: true,
                    by_handle: true,
                    ..Default::default()
                },
            );
            match s.root.getattr(s.shared_setuid).unwrap().mode & 0o7777 {
                0o6755 => got,
                mode => Ok(format!("the mode is {mode:o} now (the answer: {got:?})")),
            }
        },
        refused_with: DENIED,
    },
    Attack {
        name: "handle_truncates",
        run: |s| {
            setattr(
                s,
                s.shared_644,
                SetAttr {
                    size: Some(0),
                    by_handle: true,
                    ..Default::default()
                },
            )
        },
        refused_with: DENIED,
    },
    // Finding 6: locks on files bob may not open so, and on no file at all.
    Attack {
        name: "lock_write_unwritable",
        run: |s| lock(s, s.shared_644, LockKind::Write),
        refused_with: DENIED,
    },
    Attack {
        name: "lock_read_unreadable",
        run: |s| lock(s, s.shared_600, LockKind::Read),
        refused_with: DENIED,
    },
    Attack {
        name: "lock_missing_inode",
        run: |s| lock(s, InodeId(0x7fff_0000_0000), LockKind::Write),
        refused_with: GONE,
    },
];

/// The same requests on bob's own files (or files he may use): they must be served,
/// so that a refused attack was refused for what it attempted.
type Control = (&'static str, fn(&Scene) -> Attempt);

const CONTROLS: &[Control] = &[
    ("grant_own", |s| grant(s, s.bob_600, rights::READ | rights::WRITE)),
    ("readdir_own", |s| {
        bob_call(
            s,
            Request::Readdir {
                cred: bob_cred(),
                dir: s.bob_dir,
                after: Name::from(""),
                max_entries: 100,
            },
        )
    }),
    ("getattr_shared", |s| {
        bob_call(
            s,
            Request::GetAttr {
                cred: bob_cred(),
                inode: s.shared_644,
            },
        )
    }),
    ("grant_read_shared", |s| grant(s, s.shared_644, rights::READ)),
    ("lock_read_shared", |s| lock(s, s.shared_644, LockKind::Read)),
    ("lock_write_own", |s| lock(s, s.bob_600, LockKind::Write)),
    ("truncate_own", |s| {
        setattr(
            s,
            s.bob_600,
            SetAttr {
                size: Some(0),
                ..Default::default()
            },
        )
    }),
];

fn bob_cred() -> Cred {
    // Claimed, and ignored: the manager acts as the uid bob's MUNGE credential says.
    Cred {
        uid: 0,
        gid: 0,
        groups: vec![0, ALICE],
    }
}

/// A fresh connection to the manager as bob (a MUNGE credential is good for one).
fn bob_connection(s: &Scene) -> Arc<Connection> {
    let auth = ClientAuth {
        key: Arc::new(ClusterKey::load(&s.bob.key).unwrap()),
        identity: Identity::Munge(s.bob.credential(&s.cluster, &s.munge_socket)),
    };
    Connection::connect(&s.cluster.meta_addr(), "hostile", &auth, Timeouts::default()).unwrap()
}

fn call(connection: &Connection, request: Request) -> Attempt {
    match connection.call(&request, &[]) {
        Ok((response, _)) => Ok(format!("{response:?}")),
        Err(RpcError::Remote { error, .. }) => Err(error),
        Err(other) => panic!("{request:?}: not an answer: {other}"),
    }
}

fn bob_call(s: &Scene, request: Request) -> Attempt {
    call(&bob_connection(s), request)
}

fn grant_request(inode: InodeId, rights: u8) -> Request {
    Request::GrantCapability {
        cred: bob_cred(),
        inode,
        rights,
    }
}

fn grant(s: &Scene, inode: InodeId, rights: u8) -> Attempt {
    bob_call(s, grant_request(inode, rights))
}

fn setattr(s: &Scene, inode: InodeId, changes: SetAttr) -> Attempt {
    bob_call(
        s,
        Request::SetAttr {
            cred: bob_cred(),
            inode,
            changes,
        },
    )
}

fn lock(s: &Scene, inode: InodeId, kind: LockKind) -> Attempt {
    let request = LockRequest {
        session: 0xb0b,
        owner: 1,
        inode,
        pid: 1,
        kind,
        start: 0,
        end: u64::MAX,
    };
    let connection = bob_connection(s);
    let got = call(&connection, Request::FileLock(request));
    if got.is_ok() {
        // Let go, so that the next attempt on the file is not refused for the conflict.
        let _ = call(
            &connection,
            Request::FileLock(LockRequest {
                kind: LockKind::Unlock,
                ..request
            }),
        );
    }
    match got {
        Ok(answer) if answer.contains("grace_left_ms: 0") || answer == "Done" => Ok(answer),
        Ok(answer) => panic!("lock of inode {inode}: held back ({answer}): the attack decides nothing"),
        Err(e) => Err(e),
    }
}

/// A file of alice's with some content and `mode`; its inode.
fn alice_file(s: &Scene, path: &str, mode: u32) -> InodeId {
    let file = s
        .root
        .create(
            path,
            &CreateOptions {
                mode: 0o600,
                ..Default::default()
            },
        )
        .unwrap();
    file.write_at(0, format!("alice's {path}\n").as_bytes()).unwrap();
    let inode = file.inode();
    file.close().unwrap();
    s.root
        .setattr_inode(
            inode,
            &SetAttr {
                uid: Some(ALICE),
                gid: Some(ALICE),
                ..Default::default()
            },
        )
        .unwrap();
    s.root
        .setattr_inode(
            inode,
            &SetAttr {
                mode: Some(mode),
                ..Default::default()
            },
        )
        .unwrap();
    inode
}

fn owned_dir(root: &Client, path: &str, uid: u32, mode: u32) -> InodeId {
    let attr = root.mkdir(path, mode).unwrap();
    root.setattr_inode(
        attr.inode,
        &SetAttr {
            uid: Some(uid),
            gid: Some(uid),
            ..Default::default()
        },
    )
    .unwrap();
    attr.inode
}

#[test]
fn a_key_holding_user_gets_nothing_of_another_users() {
    let munged = Munged::start();
    std::env::set_var("WEFT_MUNGE_SOCKET", munged.socket());
    let cluster = TestCluster::start_with(&ClusterOptions {
        extra: vec!["--identity".into(), "munge".into()],
        ..Default::default()
    });
    let keys = tempfile::Builder::new()
        .prefix("weft-hostile-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(keys.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let alice = User::new(ALICE, &cluster, keys.path());
    let bob = User::new(BOB, &cluster, keys.path());
    let root = cluster.client();
    let shared_dir = root.mkdir("/shared", 0o777).unwrap().inode;
    let private_dir = owned_dir(&root, "/alice", ALICE, 0o700);
    let bob_dir = owned_dir(&root, "/bob", BOB, 0o700);
    let mut scene = Scene {
        cluster,
        munge_socket: munged.socket(),
        alice,
        bob,
        root,
        private_dir,
        private_644: InodeId(0),
        private_666: InodeId(0),
        private_sub: InodeId(0),
        shared_600: InodeId(0),
        shared_644: InodeId(0),
        shared_setuid: InodeId(0),
        bob_dir,
        bob_600: InodeId(0),
        shared_dir,
    };
    scene.private_644 = alice_file(&scene, "/alice/open644", 0o644);
    scene.private_666 = alice_file(&scene, "/alice/open666", 0o666);
    scene.private_sub = owned_dir(&scene.root, "/alice/sub", ALICE, 0o755);
    alice_file(&scene, "/alice/sub/file", 0o644);
    scene.shared_600 = alice_file(&scene, "/shared/secret600", 0o600);
    scene.shared_644 = alice_file(&scene, "/shared/public644", 0o644);
    scene.shared_setuid = alice_file(&scene, "/shared/setuid", 0o6755);
    scene.bob_600 = alice_file(&scene, "/bob/own600", 0o600);
    scene
        .root
        .setattr_inode(
            scene.bob_600,
            &SetAttr {
                uid: Some(BOB),
                gid: Some(BOB),
                ..Default::default()
            },
        )
        .unwrap();
    assert_ne!(scene.private_dir, scene.shared_dir);

    for (name, run) in CONTROLS {
        if let Err(e) = run(&scene) {
            panic!("control {name}: bob was refused what he may do: {e}");
        }
    }
    let mut succeeded = Vec::new();
    for attack in ATTACKS {
        match (attack.run)(&scene) {
            Ok(got) => succeeded.push(format!("{}: {got}", attack.name)),
            Err(e) => assert!(
                attack.refused_with.contains(&e.code),
                "attack {}: refused with {:?}, not one of {:?}: {e}",
                attack.name,
                e.code,
                attack.refused_with
            ),
        }
    }
    assert!(
        succeeded.is_empty(),
        "attacks that succeeded:\n{}",
        succeeded.join("\n")
    );

    // What the victim may do still works through the client library as alice: her own
    // private files by path, and a write handle's truncate (the manager finds the
    // grant the client holds).
    let as_alice = Client::connect_with(
        &scene.cluster.meta_addr(),
        ClientAuth {
            key: Arc::new(ClusterKey::load(&scene.alice.key).unwrap()),
            identity: Identity::Munge(scene.alice.credential(&scene.cluster, &scene.munge_socket)),
        },
    )
    .unwrap();
    let file = as_alice.open("/alice/sub/file", &OpenOptions::default()).unwrap();
    let mut buf = vec![0; 64];
    let n = file.read_at(0, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"alice's /alice/sub/file\n");
    // Bob, as a well-behaved client: writes alice's 0666 file in /shared through a
    // handle and truncates it through the same handle.
    let open666 = alice_file(&scene, "/shared/open666", 0o666);
    let as_bob = Client::connect_with(
        &scene.cluster.meta_addr(),
        ClientAuth {
            key: Arc::new(ClusterKey::load(&scene.bob.key).unwrap()),
            identity: Identity::Munge(scene.bob.credential(&scene.cluster, &scene.munge_socket)),
        },
    )
    .unwrap();
    let file = as_bob
        .open(
            "/shared/open666",
            &OpenOptions {
                write: true,
                ..Default::default()
            },
        )
        .unwrap();
    file.write_at(0, b"bob was here").unwrap();
    file.truncate(3).unwrap();
    assert_eq!(file.size().unwrap(), 3);
    assert_eq!(scene.root.getattr(open666).unwrap().size, 3);
}
