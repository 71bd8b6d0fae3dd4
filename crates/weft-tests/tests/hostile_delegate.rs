//! A hostile key holder against another user's delegate (issue 29, finding 1), in
//! `munge` mode with two real users: every user holds the cluster key, so holding it
//! proves membership and nothing more. Alice runs a job-scoped delegate (a `weftd
//! --role cache --delegate --meta ...` as her own uid, with her job's key) and her job
//! writes and reads through it; Bob, with his own copy of the cluster key, his own
//! MUNGE identity and a raw client of the real protocol, runs a fixed list of named
//! attacks on her delegate and on the cluster's persistent cache manager against her
//! 0600 file, which her job never opened. Every attack must be refused (a refused
//! handshake, or `CapabilityRequired` / `PermissionDenied`); any other answer fails
//! the test, so an attack that stops being well formed cannot pass unnoticed.
//!
//! What failed before: the delegate served every holder of the cluster key and
//! checked no capability (it held no capability key), so the first attacks read her
//! secret and overwrote its start.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::Duration;
use weft_client::{Client, ClientAuth, ClusterKey, CreateOptions, InodeId, OpenOptions, SetAttr};
use weft_proto::capability::rights::{READ, WRITE};
use weft_proto::handshake::Identity;
use weft_proto::msg::{CacheFile, Request, Response};
use weft_proto::{Capability, ErrorCode, Range, Striping};
use weft_rpc::{CapabilityKey, Connection, RpcError, Timeouts};
use weft_testkit::munge::{Munged, User};
use weft_testkit::{ClusterOptions, TestCluster};

const ALICE: u32 = 4111;
const BOB: u32 = 4112;
const SECRET: &[u8] = b"alice's secret, mode 0600, never opened by her job\n";

fn timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(5),
        request: Duration::from_secs(20),
    }
}

/// What an attack got.
enum Outcome {
    /// The server did it (the attack succeeded): what came back.
    Served(String),
    /// Refused as it must be: by the handshake, or for want of a valid capability.
    Refused(String),
    /// Anything else (a malformed attack, a crash): fails the test too.
    Other(String),
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Served(what) => write!(f, "SERVED: {what}"),
            Outcome::Refused(why) => write!(f, "refused: {why}"),
            Outcome::Other(what) => write!(f, "neither served nor refused: {what}"),
        }
    }
}

fn outcome(result: Result<(Response, Vec<u8>), RpcError>) -> Outcome {
    match result {
        Ok((response, data)) => {
            Outcome::Served(format!("{response:?} with {:?}", String::from_utf8_lossy(&data)))
        }
        Err(RpcError::Remote { error, .. })
            if matches!(
                error.code,
                ErrorCode::CapabilityRequired | ErrorCode::PermissionDenied
            ) =>
        {
            Outcome::Refused(error.message)
        }
        Err(e) => Outcome::Other(e.to_string()),
    }
}

/// A connection as Bob makes one with `key`; a refused handshake is the outcome.
fn connect(addr: &str, key: &ClusterKey) -> Result<Arc<Connection>, Outcome> {
    match Connection::connect(addr, "bob", &ClientAuth::cluster(key.clone()), timeouts()) {
        Ok(c) => Ok(c),
        Err(e) if e.to_string().contains("authentication failed") => Err(Outcome::Refused(e.to_string())),
        Err(e) => Err(Outcome::Other(e.to_string())),
    }
}

/// The file `inode` as a cache manager with one block column sees it.
struct Target {
    inode: InodeId,
    layout: weft_layout::Layout,
    block_bytes: u64,
}

impl Target {
    fn via_cache(&self, connection: &Connection, request: Request) -> Request {
        Request::ViaCache {
            file: CacheFile {
                inode: self.inode,
                layout: self.layout.clone(),
                incarnation: connection.incarnation(),
            },
            request: Box::new(request),
        }
    }

    fn striping(&self) -> Striping {
        Striping {
            stripe_size_bytes: self.block_bytes,
            stripe_count: 1,
            server_index: 0,
        }
    }

    fn read(&self, connection: &Connection) -> Outcome {
        let read = Request::Read {
            inode: self.inode,
            striping: self.striping(),
            ranges: vec![Range {
                offset: 0,
                len: SECRET.len() as u64,
            }],
        };
        outcome(connection.call(&self.via_cache(connection, read), &[]))
    }

    fn overwrite(&self, connection: &Connection) -> Outcome {
        let write = Request::Write {
            inode: self.inode,
            striping: self.striping(),
            ranges: vec![Range { offset: 0, len: 6 }],
        };
        outcome(connection.call(&self.via_cache(connection, write), b"BOB!!!"))
    }

    fn truncate(&self, connection: &Connection) -> Outcome {
        let request = Request::CacheTruncate {
            file: CacheFile {
                inode: self.inode,
                layout: self.layout.clone(),
                incarnation: connection.incarnation(),
            },
            size: 0,
        };
        outcome(connection.call(&request, &[]))
    }
}

fn present(connection: &Connection, cap: &Capability) -> Result<(), Outcome> {
    let request = Request::PresentCapability {
        cap: cap.clone(),
        reset: false,
    };
    match outcome(connection.call(&request, &[])) {
        Outcome::Served(_) => Ok(()),
        refused => Err(refused),
    }
}

/// Alice's job-scoped delegate, run as her uid with her job's key; stopped on drop.
struct Delegate {
    child: Child,
    addr: String,
    job_key: ClusterKey,
    _dir: tempfile::TempDir,
}

impl Delegate {
    fn start(user: &User, cluster: &TestCluster, munged: &Munged) -> Delegate {
        let dir = tempfile::Builder::new()
            .prefix("weft-alice-delegate-")
            .tempdir()
            .unwrap();
        std::os::unix::fs::chown(dir.path(), Some(user.uid), Some(user.uid)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let key_path = dir.path().join("job.key");
        let (job_key, _) = ClusterKey::load_or_create(&key_path).unwrap();
        std::os::unix::fs::chown(&key_path, Some(user.uid), Some(user.uid)).unwrap();
        let ready = dir.path().join("ready");
        let log = std::fs::File::create(dir.path().join("weftd.log")).unwrap();
        let (key, ready_arg, data) = (
            user.key.display().to_string(),
            ready.display().to_string(),
            dir.path().join("data").display().to_string(),
        );
        let meta = cluster.meta_addr();
        let job_key_arg = key_path.display().to_string();
        let weftd = weft_testkit::bin("weftd");
        let child = user
            .command(
                cluster,
                &munged.socket(),
                weftd.as_os_str(),
                &[
                    "--role",
                    "cache",
                    "--delegate",
                    "--exit-on-stdin-eof",
                    "--meta",
                    &meta,
                    "--key",
                    &key,
                    "--job-key",
                    &job_key_arg,
                    "--data",
                    &data,
                    "--ready-file",
                    &ready_arg,
                    "--cache-memory",
                    "8M",
                    "--id",
                    "1073741824",
                ],
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut delegate = Delegate {
            child,
            addr: String::new(),
            job_key,
            _dir: dir,
        };
        let log_path = delegate._dir.path().join("weftd.log");
        delegate.addr = common::wait_for("alice's delegate's address", Duration::from_secs(20), || {
            if let Ok(Some(status)) = delegate.child.try_wait() {
                panic!(
                    "alice's delegate exited ({status}): {}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                );
            }
            std::fs::read_to_string(&ready).ok()
        })
        .trim()
        .to_owned();
        delegate
    }
}

impl Drop for Delegate {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// A client acting as `user` (a fresh MUNGE credential for its connections).
fn client_as(user: &User, cluster: &TestCluster, munged: &Munged) -> Client {
    let auth = ClientAuth {
        key: Arc::new(ClusterKey::load(&user.key).unwrap()),
        identity: Identity::Munge(user.credential(cluster, &munged.socket())),
    };
    Client::connect_with(&cluster.meta_addr(), auth).unwrap()
}

/// Alice's job through her delegate: written, read back through it, synced to the io
/// servers (the delegate writes back with her own capabilities), read plain.
fn alices_job_works(alice: &Client, delegate: &Delegate, path: &str) {
    let data: Vec<u8> = (0..300_000u32).map(|x| (x * 7 + 3) as u8).collect();
    let mut file = alice.create(path, &CreateOptions::default()).unwrap();
    file.use_delegates(std::slice::from_ref(&delegate.addr), &delegate.job_key)
        .unwrap();
    file.write_at(0, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(file.read_at(0, &mut back).unwrap(), data.len());
    assert!(back == data, "{path}: read back through the delegate differs");
    file.sync().unwrap();
    drop(file);
    let plain = alice.open(path, &OpenOptions::default()).unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(plain.read_at(0, &mut back).unwrap(), data.len());
    assert!(back == data, "{path}: written back differs");
}

#[test]
fn another_users_delegate_and_cache_manager_serve_no_key_holder_without_a_capability() {
    let munged = Munged::start();
    std::env::set_var("WEFT_MUNGE_SOCKET", munged.socket());
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 2,
        extra: ["--identity", "munge", "--cache", "1", "--cache-memory", "16M"]
            .map(String::from)
            .to_vec(),
        ..Default::default()
    });
    let root = cluster.client();
    root.mkdir("/shared", 0o777).unwrap();
    let files = tempfile::Builder::new()
        .prefix("weft-hostile-delegate-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(files.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (alice_user, bob_user) = (
        User::new(ALICE, &cluster, files.path()),
        User::new(BOB, &cluster, files.path()),
    );
    // Alice's private directory and her 0600 secret in it (made by root, given to her).
    let home = format!("/shared/{ALICE}");
    root.mkdir(&home, 0o700).unwrap();
    let own = |path: &str| {
        root.setattr(
            path,
            &SetAttr {
                uid: Some(ALICE),
                gid: Some(ALICE),
                ..Default::default()
            },
        )
        .unwrap()
    };
    own(&home);
    let secret_path = format!("{home}/secret");
    let secret = root
        .create(
            &secret_path,
            &CreateOptions {
                mode: 0o600,
                ..Default::default()
            },
        )
        .unwrap();
    secret.write_at(0, SECRET).unwrap();
    secret.sync().unwrap();
    own(&secret_path);
    let target = Target {
        inode: secret.inode(),
        layout: secret.layout().clone(),
        block_bytes: secret.layout().stripe_size_bytes,
    };
    drop(secret);

    let delegate = Delegate::start(&alice_user, &cluster, &munged);
    let alice = client_as(&alice_user, &cluster, &munged);
    alices_job_works(&alice, &delegate, &format!("{home}/job-1"));

    // What Bob holds: the cluster key (every user's), his MUNGE identity, a file of his
    // own and its capability, and (as if leaked) Alice's job key.
    let cluster_key = ClusterKey::load(&bob_user.key).unwrap();
    let bob = client_as(&bob_user, &cluster, &munged);
    let mine = bob.create("/shared/bob-file", &CreateOptions::default()).unwrap();
    mine.write_at(0, b"bob's own").unwrap();
    let bob_meta = Connection::connect(
        &cluster.meta_addr(),
        "bob",
        &ClientAuth {
            key: Arc::new(cluster_key.clone()),
            identity: Identity::Munge(bob_user.credential(&cluster, &munged.socket())),
        },
        timeouts(),
    )
    .unwrap();
    let grant = |inode: InodeId| {
        let request = Request::GrantCapability {
            cred: weft_proto::Cred {
                uid: ALICE,
                gid: ALICE,
                groups: vec![ALICE],
            },
            inode,
            rights: READ | WRITE,
        };
        match bob_meta.call(&request, &[]) {
            Ok((Response::Capability(cap), _)) => Ok(cap),
            other => Err(format!("{other:?}")),
        }
    };
    let bobs_cap = grant(mine.inode()).expect("bob's capability for his own file");
    // The manager is no way round: it refuses Bob a capability for Alice's file,
    // whatever uid his request claims.
    assert!(
        grant(target.inode).is_err(),
        "the manager granted bob alice's file"
    );
    let job_key = delegate.job_key.clone();
    let manager_addr = cluster.addr(cluster.config().cache_managers()[0].id);
    // The persistent tier's blocks: the description's block size, else the stripe.
    let persistent = Target {
        inode: target.inode,
        layout: target.layout.clone(),
        block_bytes: match cluster.config().cache.block_size {
            0 => target.layout.stripe_size_bytes,
            bytes => bytes,
        },
    };

    type Attack<'a> = (&'static str, Box<dyn Fn() -> Outcome + 'a>);
    let on_delegate =
        |key: &ClusterKey, act: &dyn Fn(&Connection) -> Outcome| match connect(&delegate.addr, key) {
            Ok(c) => act(&c),
            Err(refused) => refused,
        };
    let attacks: Vec<Attack> = vec![
        (
            "read alice's file through her delegate with the cluster key",
            Box::new(|| on_delegate(&cluster_key, &|c| target.read(c))),
        ),
        (
            "overwrite alice's file through her delegate with the cluster key",
            Box::new(|| on_delegate(&cluster_key, &|c| target.overwrite(c))),
        ),
        (
            "read alice's file through her delegate with her job key and no capability",
            Box::new(|| on_delegate(&job_key, &|c| target.read(c))),
        ),
        (
            "overwrite alice's file through her delegate with her job key and no capability",
            Box::new(|| on_delegate(&job_key, &|c| target.overwrite(c))),
        ),
        (
            "truncate alice's file in her delegate with her job key and no capability",
            Box::new(|| on_delegate(&job_key, &|c| target.truncate(c))),
        ),
        (
            "read alice's file through her delegate with bob's own capability for his file",
            Box::new(|| {
                on_delegate(&job_key, &|c| match present(c, &bobs_cap) {
                    Ok(()) => target.read(c),
                    Err(refused) => Outcome::Other(format!("bob's own capability was refused: {refused}")),
                })
            }),
        ),
        (
            "present bob's capability relabelled to alice's file at her delegate",
            Box::new(|| {
                on_delegate(&job_key, &|c| {
                    let mut relabelled = bobs_cap.clone();
                    relabelled.inode = target.inode;
                    match present(c, &relabelled) {
                        Ok(()) => target.overwrite(c),
                        Err(refused) => refused,
                    }
                })
            }),
        ),
        (
            "present a capability made with the cluster key's derived key at her delegate",
            Box::new(|| {
                on_delegate(&job_key, &|c| {
                    let forged = CapabilityKey::new(&cluster_key).issue(
                        target.inode,
                        READ | WRITE,
                        weft_rpc::capability::now_ms(),
                        60_000,
                    );
                    match present(c, &forged) {
                        Ok(()) => target.read(c),
                        Err(refused) => refused,
                    }
                })
            }),
        ),
        (
            "read alice's file through the persistent cache manager with no capability",
            Box::new(|| match connect(&manager_addr, &cluster_key) {
                Ok(c) => persistent.read(&c),
                Err(refused) => Outcome::Other(format!("the cluster key was refused: {refused}")),
            }),
        ),
        (
            "overwrite alice's file through the persistent cache manager with no capability",
            Box::new(|| match connect(&manager_addr, &cluster_key) {
                Ok(c) => persistent.overwrite(&c),
                Err(refused) => Outcome::Other(format!("the cluster key was refused: {refused}")),
            }),
        ),
    ];
    let mut failures = Vec::new();
    for (name, attack) in &attacks {
        let got = attack();
        eprintln!("attack: {name}: {got}");
        if !matches!(got, Outcome::Refused(_)) {
            failures.push(format!("{name}: {got}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} attacks were not refused:\n{}",
        failures.len(),
        attacks.len(),
        failures.join("\n")
    );
    // Her secret is as she left it, and her job still works through the delegate.
    let reread = root.open(&secret_path, &OpenOptions::default()).unwrap();
    let mut back = vec![0u8; SECRET.len()];
    reread.read_at(0, &mut back).unwrap();
    assert_eq!(back, SECRET, "alice's secret changed");
    alices_job_works(&alice, &delegate, &format!("{home}/job-2"));
}
