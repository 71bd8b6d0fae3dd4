//! `munge` identity mode: every connection to the metadata manager brings a MUNGE
//! credential, and its requests act as the uid and gid that credential vouches for,
//! whatever they claim. The test starts its own munged with its own key (it runs as
//! root, as CI does), a cluster in munge mode, and `weft` processes as two users that
//! are not root. Each user reads the 0600 file it wrote (in its 0700 directory) and is
//! refused the other's; a
//! client whose credential says one user and whose requests claim the other is served
//! as the first; a credential used twice is refused; a uid the cluster trusts
//! (`munge_trusted_uids`, root's FUSE daemon) acts with what it claims and no other
//! does; without munged a client gets an error that says so.

use std::os::unix::fs::PermissionsExt;
use std::process::Output;
use weft_client::{Client, ClientAuth, ClusterKey, Cred, ErrorCode, SetAttr};
use weft_proto::handshake::Identity;
use weft_testkit::munge::{text, Munged, User};
use weft_testkit::{ClusterOptions, TestCluster};

const ALICE: u32 = 4101;
const BOB: u32 = 4102;

#[track_caller]
fn denied(out: &Output, what: &str) {
    assert!(!out.status.success(), "{what}: served:\n{}", text(out));
    let stderr = String::from_utf8_lossy(&out.stderr).to_lowercase();
    assert!(
        stderr.contains("permission denied"),
        "{what}: not EACCES:\n{}",
        text(out)
    );
}

#[test]
fn munge_identities_are_verified_per_connection() {
    let mut munged = Munged::start();
    // weftd (started by `weft up` from this process) and this process's own clients
    // use the test's munged.
    std::env::set_var("WEFT_MUNGE_SOCKET", munged.socket());
    let cluster = TestCluster::start_with(&ClusterOptions {
        extra: vec!["--identity".into(), "munge".into()],
        ..Default::default()
    });
    let status = cluster.weft(&["status"]);
    let status_text = String::from_utf8_lossy(&status.stdout);
    assert!(status_text.contains("identity: munge"), "{}", text(&status));
    let log = std::fs::read_to_string(cluster.home().join("logs/server-0.log")).unwrap();
    assert!(log.contains("identity munge"), "{log}");

    // Root (its MUNGE credential says uid 0) makes a directory everyone may write.
    let root = cluster.client();
    root.mkdir("/shared", 0o777).unwrap();

    let files = tempfile::Builder::new()
        .prefix("weft-munge-users-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(files.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = munged.socket();
    let users = [
        User::new(ALICE, &cluster, files.path()),
        User::new(BOB, &cluster, files.path()),
    ];
    for user in &users {
        let local = files.path().join(format!("local-{}", user.uid));
        std::fs::write(&local, format!("secret of uid {}\n", user.uid)).unwrap();
        std::os::unix::fs::chown(&local, Some(user.uid), Some(user.uid)).unwrap();
        std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o600)).unwrap();
        // A private directory (0700), given to the user by root (whose credential
        // says uid 0), to hold the user's 0600 file.
        let dir = format!("/shared/{}", user.uid);
        root.mkdir(&dir, 0o700).unwrap();
        root.setattr(
            &dir,
            &SetAttr {
                uid: Some(user.uid),
                gid: Some(user.uid),
                ..Default::default()
            },
        )
        .unwrap();
        let attr = root.stat(&dir).unwrap();
        assert_eq!(
            (attr.uid, attr.gid, attr.mode & 0o7777),
            (user.uid, user.uid, 0o700)
        );
        let remote = format!("{dir}/secret");
        let out = user.weft(&cluster, &socket, &["put", local.to_str().unwrap(), &remote]);
        assert!(out.status.success(), "put as {}:\n{}", user.uid, text(&out));
        // The file belongs to the user MUNGE vouched for, with the mode asked for.
        let attr = root.stat(&remote).unwrap();
        assert_eq!(
            (attr.uid, attr.gid, attr.mode & 0o7777),
            (user.uid, user.uid, 0o600)
        );
    }
    for user in &users {
        for owner in &users {
            let remote = format!("/shared/{}/secret", owner.uid);
            let out = user.weft(&cluster, &socket, &["cat", &remote]);
            if owner.uid == user.uid {
                assert!(
                    out.status.success(),
                    "uid {} reading its own file:\n{}",
                    user.uid,
                    text(&out)
                );
                assert_eq!(
                    String::from_utf8_lossy(&out.stdout),
                    format!("secret of uid {}\n", user.uid)
                );
            } else {
                // The manager refuses to resolve through the other's 0700 directory.
                denied(&out, &format!("uid {} reading {remote}", user.uid));
                let out = user.weft(&cluster, &socket, &["ls", &format!("/shared/{}", owner.uid)]);
                denied(&out, &format!("uid {} listing the other's directory", user.uid));
                // The admin commands act as the user MUNGE vouched for too: nothing of
                // the other's may be changed, touched or walked.
                let dir = format!("/shared/{}", owner.uid);
                for args in [
                    vec!["chmod", "777", dir.as_str()],
                    vec!["chown", "-R", &user.uid.to_string(), dir.as_str()],
                    vec!["touch", "-c", dir.as_str()],
                ] {
                    let out = user.weft(&cluster, &socket, &args);
                    assert!(
                        !out.status.success(),
                        "uid {} ran {args:?}:\n{}",
                        user.uid,
                        text(&out)
                    );
                    let said = String::from_utf8_lossy(&out.stderr);
                    assert!(
                        said.contains("ermission denied")
                            || said.contains("not permitted")
                            || said.contains("may not"),
                        "uid {} ran {args:?}:\n{}",
                        user.uid,
                        text(&out)
                    );
                }
                let out = user.weft(&cluster, &socket, &["find", dir.as_str()]);
                assert!(
                    !String::from_utf8_lossy(&out.stdout).contains("secret"),
                    "{}",
                    text(&out)
                );
                let attr = root.stat(&dir).unwrap();
                assert_eq!(
                    (attr.uid, attr.mode & 0o7777),
                    (owner.uid, 0o700),
                    "{dir} changed"
                );
            }
        }
    }

    // Batch creates (`weft touch` of missing files: `CreateMany`) act as the user MUNGE
    // vouched for too: Bob may not make files in Alice's directory he can search but
    // not write; Alice's are hers, whatever the requests claim.
    let open_dir = "/shared/alices-open";
    root.mkdir(open_dir, 0o755).unwrap();
    root.setattr(
        open_dir,
        &SetAttr {
            uid: Some(ALICE),
            gid: Some(ALICE),
            ..Default::default()
        },
    )
    .unwrap();
    let bobs: Vec<String> = (0..3).map(|i| format!("{open_dir}/by-bob-{i}")).collect();
    let mut args = vec!["touch"];
    args.extend(bobs.iter().map(String::as_str));
    denied(
        &users[1].weft(&cluster, &socket, &args),
        "Bob making files in Alice's directory",
    );
    assert_eq!(
        root.readdir(open_dir).unwrap().len(),
        0,
        "Bob made files in Alice's directory"
    );
    let alices: Vec<String> = (0..3).map(|i| format!("{open_dir}/by-alice-{i}")).collect();
    let mut args = vec!["touch"];
    args.extend(alices.iter().map(String::as_str));
    let out = users[0].weft(&cluster, &socket, &args);
    assert!(out.status.success(), "Alice making files:\n{}", text(&out));
    for path in &alices {
        let attr = root.stat(path).unwrap();
        assert_eq!((attr.uid, attr.gid), (ALICE, ALICE), "{path}");
    }

    // The administration commands, as a second user: Bob may not restripe Alice's file
    // (its layout stays), take a backup of the whole namespace, run the check that lists
    // every server's objects, or drain a server; Alice may restripe her own file (so the
    // refusals are Bob's, not the commands').
    let alice_file = format!("/shared/{ALICE}/secret");
    let before = root.stat(&alice_file).unwrap().layout.unwrap();
    let out = users[1].weft(
        &cluster,
        &socket,
        &["migrate", "--stripe-count", "1", &alice_file],
    );
    denied(&out, "Bob migrating Alice's file");
    assert_eq!(root.stat(&alice_file).unwrap().layout.unwrap(), before);
    let bobs = files.path().join("bob-local");
    std::fs::create_dir(&bobs).unwrap();
    std::os::unix::fs::chown(&bobs, Some(BOB), Some(BOB)).unwrap();
    let backup_file = bobs.join("by-bob.backup");
    let out = users[1].weft(
        &cluster,
        &socket,
        &["backup", "-q", backup_file.to_str().unwrap()],
    );
    assert!(!out.status.success(), "Bob took a backup:\n{}", text(&out));
    assert!(text(&out).contains("only root"), "{}", text(&out));
    assert_eq!(
        std::fs::read_dir(&bobs).unwrap().count(),
        0,
        "a refused backup left a file behind"
    );
    for args in [vec!["check"], vec!["server", "drain", "1"]] {
        let out = users[1].weft(&cluster, &socket, &args);
        assert!(!out.status.success(), "Bob ran {args:?}:\n{}", text(&out));
        assert!(
            text(&out).contains("only root") || text(&out).to_lowercase().contains("permission denied"),
            "Bob ran {args:?}:\n{}",
            text(&out)
        );
    }
    let out = users[0].weft(
        &cluster,
        &socket,
        &["migrate", "--stripe-count", "1", &alice_file],
    );
    assert!(out.status.success(), "Alice migrating her file:\n{}", text(&out));
    assert_eq!(root.stat(&alice_file).unwrap().layout.unwrap().servers.len(), 1);
    let out = users[0].weft(&cluster, &socket, &["cat", &alice_file]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("secret of uid {ALICE}\n")
    );
    let out = cluster.weft(&["server", "list"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        !text(&out).contains("drain"),
        "Bob's drain took hold:\n{}",
        text(&out)
    );

    // A client whose credential says Bob and whose requests claim Alice (and root)
    // acts as Bob.
    let bob_credential = users[1].credential(&cluster, &socket);
    let key = ClusterKey::load(&cluster.key_path()).unwrap();
    let forged = ClientAuth {
        key: std::sync::Arc::new(key),
        identity: Identity::Munge(bob_credential.clone()),
    };
    let forger = Client::connect_with(&cluster.meta_addr(), forged.clone())
        .unwrap()
        .with_cred(Cred {
            uid: ALICE,
            gid: ALICE,
            groups: vec![ALICE, 0],
        });
    let err = forger
        .readdir(&format!("/shared/{ALICE}"))
        .expect_err("a claimed uid was believed");
    assert_eq!(err.code(), ErrorCode::PermissionDenied, "{err}");
    let err = forger
        .stat(&format!("/shared/{ALICE}/secret"))
        .expect_err("a claimed uid was believed");
    assert_eq!(err.code(), ErrorCode::PermissionDenied, "{err}");
    // What Bob may do it does as Bob: resolving through Bob's 0700 directory, which the
    // claimed Alice could not.
    assert_eq!(forger.stat(&format!("/shared/{BOB}/secret")).unwrap().uid, BOB);
    let made = forger.mkdir("/shared/by-forger", 0o755);
    assert!(made.is_ok(), "{made:?}");
    assert_eq!(root.stat("/shared/by-forger").unwrap().uid, BOB);

    // An open's check carries a read capability (`VouchedReadable`) only for what the
    // verified user may read: Bob checking Alice's 0600 file in a directory he may search
    // gets its attributes, and no capability to read it with.
    let private = format!("{open_dir}/private");
    let made = root.create(&private, &Default::default()).unwrap();
    made.write_at(0, b"Alice's eyes only").unwrap();
    made.close().unwrap();
    root.setattr(
        &private,
        &SetAttr {
            mode: Some(0o600),
            uid: Some(ALICE),
            gid: Some(ALICE),
            ..Default::default()
        },
    )
    .unwrap();
    let dir_attr = root.stat(open_dir).unwrap();
    let file_attr = root.stat(&private).unwrap();
    let steps = vec![
        weft_client::PathStep {
            parent: root.stat("/").unwrap().inode,
            name: "shared".into(),
            child: root.stat("/shared").unwrap().inode,
        },
        weft_client::PathStep {
            parent: root.stat("/shared").unwrap().inode,
            name: "alices-open".into(),
            child: dir_attr.inode,
        },
        weft_client::PathStep {
            parent: dir_attr.inode,
            name: "private".into(),
            child: file_attr.inode,
        },
    ];
    let checked = forger.revalidate(steps, None).unwrap();
    assert_eq!((checked.inode, checked.uid), (file_attr.inode, ALICE));
    let handle = forger.open_attr(checked, false).unwrap();
    let err = handle
        .read_at(0, &mut [0u8; 16])
        .expect_err("Bob read Alice's 0600 file after checking it");
    assert_eq!(err.code(), ErrorCode::PermissionDenied, "{err}");

    // The same credential on another connection is a replay.
    let replayed = Client::connect_with(&cluster.meta_addr(), forged).unwrap();
    let err = replayed
        .stat(&format!("/shared/{BOB}/secret"))
        .expect_err("a replayed credential was accepted");
    assert!(err.to_string().contains("replayed"), "{err}");

    // A credential made with another key than munged's does not decode.
    let garbage = Client::connect_with(
        &cluster.meta_addr(),
        ClientAuth {
            key: std::sync::Arc::new(ClusterKey::load(&cluster.key_path()).unwrap()),
            identity: Identity::Munge(b"MUNGE:not-a-credential:".to_vec()),
        },
    )
    .unwrap();
    let err = garbage
        .stat("/shared")
        .expect_err("a bad credential was accepted");
    assert_eq!(err.code(), ErrorCode::PermissionDenied, "{err}");
    assert!(err.to_string().contains("munge credential refused"), "{err}");

    // Trusting root's uid (a FUSE daemon run by root acting for the calling user):
    // root's connections act with the credentials their requests claim, here Alice's,
    // so Alice's directory opens and Bob's does not, even to root.
    let out = cluster.weft(&["down"]);
    assert!(out.status.success(), "{}", text(&out));
    let description = cluster.home().join(weft_config::CLUSTER_FILE_NAME);
    let mut config = cluster.config();
    config.munge_trusted_uids = vec![0];
    config.save(&description).unwrap();
    cluster.restart();
    let status = cluster.weft(&["status"]);
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("uids [0] are trusted"),
        "{}",
        text(&status)
    );
    let for_alice = cluster.client().with_cred(Cred {
        uid: ALICE,
        gid: ALICE,
        groups: vec![ALICE],
    });
    assert_eq!(
        for_alice.stat(&format!("/shared/{ALICE}/secret")).unwrap().uid,
        ALICE
    );
    let err = for_alice
        .readdir(&format!("/shared/{BOB}"))
        .expect_err("a trusted connection acted as root, not as the uid it claimed");
    assert_eq!(err.code(), ErrorCode::PermissionDenied, "{err}");
    // Bob is not trusted: what he claims is still ignored.
    let forger = Client::connect_with(
        &cluster.meta_addr(),
        ClientAuth {
            key: std::sync::Arc::new(ClusterKey::load(&cluster.key_path()).unwrap()),
            identity: Identity::Munge(users[1].credential(&cluster, &socket)),
        },
    )
    .unwrap()
    .with_cred(Cred {
        uid: 0,
        gid: 0,
        groups: vec![0],
    });
    let err = forger
        .readdir(&format!("/shared/{ALICE}"))
        .expect_err("an untrusted uid's claim was believed");
    assert_eq!(err.code(), ErrorCode::PermissionDenied, "{err}");

    // Without munged a client cannot get a credential and is told why.
    munged.stop();
    let out = users[0].weft(&cluster, &socket, &["cat", &format!("/shared/{ALICE}/secret")]);
    assert!(!out.status.success(), "served without munged:\n{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("munge credential required: is munged running?"),
        "{}",
        text(&out)
    );
}
