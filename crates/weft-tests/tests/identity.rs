//! `owner` identity mode (the default of `weft up`): every metadata request acts as
//! the user who owns the cluster key, whatever credential it claims. A client holding
//! the key and claiming uid 0, one test step per operation class (resolve, readdir,
//! create, setattr, truncate, unlink, rename), gets no further than the key's owner
//! would, and changes nothing (checksums of the namespace and the data afterwards);
//! what the owner may do it does as the owner (the new directory is the owner's).
//!
//! Before, a raw client claiming uid 0 listed another user's 0700 directory, chowned
//! a file to itself and removed a file from a sticky directory it did not own (issue 12).
//! The io servers still take any holder of the key (capabilities would close that).

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use weft_client::{Client, CreateOptions, Cred, ErrorCode, SetAttr};
use weft_testkit::TestCluster;

/// The key's owner once the test hands the key over: a user that is not root.
const OWNER: u32 = 4242;

fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Every path, kind, owner, mode and size, and the bytes of every file, as one sum.
fn namespace_sum(client: &Client) -> u64 {
    let mut text = String::new();
    let mut dirs = vec!["/".to_string()];
    while let Some(dir) = dirs.pop() {
        for entry in client.readdir(&dir).unwrap() {
            let path = weft_client::path::join(&dir, &entry.name.to_string());
            let attr = client.stat(&path).unwrap();
            text.push_str(&format!(
                "{path} {:?} {} {} {:o} {}\n",
                attr.kind, attr.uid, attr.gid, attr.mode, attr.size
            ));
            match attr.kind {
                weft_client::FileKind::Directory => dirs.push(path),
                weft_client::FileKind::File => {
                    let file = client.open(&path, &Default::default()).unwrap();
                    let mut buf = vec![0u8; attr.size as usize];
                    file.read_at(0, &mut buf).unwrap();
                    text.push_str(&format!("{:x}\n", checksum(&buf)));
                }
                _ => {}
            }
        }
    }
    checksum(text.as_bytes())
}

/// Gives the cluster key to `uid` and restarts the cluster, whose manager then acts
/// as that user.
fn hand_key_to(cluster: &TestCluster, uid: u32) {
    let out = cluster.weft(&["down"]);
    assert!(out.status.success());
    std::os::unix::fs::chown(cluster.key_path(), Some(uid), Some(uid)).unwrap();
    assert_eq!(
        std::fs::metadata(cluster.key_path()).unwrap().mode() & 0o777,
        0o600
    );
    cluster.restart();
}

#[track_caller]
fn refused<T: std::fmt::Debug>(what: &str, result: Result<T, weft_client::ClientError>) {
    match result {
        Err(e) => assert!(
            matches!(e.code(), ErrorCode::PermissionDenied | ErrorCode::NotPermitted),
            "{what}: refused with the wrong error: {e}"
        ),
        Ok(v) => panic!("{what}: a request claiming uid 0 was served as root: {v:?}"),
    }
}

#[test]
fn requests_act_as_the_key_owner_whatever_identity_they_claim() {
    let cluster = TestCluster::start();
    // Set up as root (the key's owner at first): root's private directory and file, a
    // sticky shared directory with root's file in it, a file root alone may write.
    let root = cluster.client();
    root.mkdir("/private", 0o700).unwrap();
    let secret = root
        .create(
            "/private/secret",
            &CreateOptions {
                mode: 0o600,
                ..Default::default()
            },
        )
        .unwrap();
    secret.write_at(0, b"root's secret").unwrap();
    root.mkdir("/shared", 0o777).unwrap();
    root.setattr(
        "/shared",
        &SetAttr {
            mode: Some(0o1777),
            ..Default::default()
        },
    )
    .unwrap();
    let roots = root
        .create(
            "/shared/roots",
            &CreateOptions {
                mode: 0o644,
                ..Default::default()
            },
        )
        .unwrap();
    roots.write_at(0, b"root's file in a sticky directory").unwrap();
    let plain = root
        .create(
            "/rootfile",
            &CreateOptions {
                mode: 0o644,
                ..Default::default()
            },
        )
        .unwrap();
    plain.write_at(0, &common::pattern(1, 0, 100_000)).unwrap();
    drop((secret, roots, plain));
    let before = namespace_sum(&root);

    hand_key_to(&cluster, OWNER);
    let log = std::fs::read_to_string(cluster.home().join("logs/server-0.log")).unwrap();
    assert!(log.contains(&format!("acts as uid {OWNER}")), "{log}");
    let status = common::weft_ok(&cluster, &["status"]);
    assert!(
        status.contains(&format!("identity: owner (every request acts as uid {OWNER}")),
        "{status}"
    );
    // This test process is root and claims so; every request says uid 0, groups 0.
    let forger = cluster.client().with_cred(Cred {
        uid: 0,
        gid: 0,
        groups: vec![0],
    });
    // resolve, readdir: root's 0700 directory is closed to the owner.
    refused("resolve", forger.stat("/private/secret"));
    refused("readdir", forger.readdir("/private"));
    // create: in root's 0755 root directory and in the private one.
    refused("create", forger.create("/planted", &Default::default()).map(drop));
    refused(
        "create",
        forger.create("/private/planted", &Default::default()).map(drop),
    );
    refused("mkdir", forger.mkdir("/planted-dir", 0o755));
    // setattr: chmod, chown to itself, and to root of its own... of root's file.
    refused(
        "chmod",
        forger.setattr(
            "/rootfile",
            &SetAttr {
                mode: Some(0o666),
                ..Default::default()
            },
        ),
    );
    refused(
        "chown",
        forger.setattr(
            "/rootfile",
            &SetAttr {
                uid: Some(OWNER),
                ..Default::default()
            },
        ),
    );
    // truncate: through the manager's permission check.
    refused(
        "truncate",
        forger.setattr(
            "/rootfile",
            &SetAttr {
                size: Some(0),
                ..Default::default()
            },
        ),
    );
    // unlink: root's file from the sticky directory.
    refused("unlink", forger.unlink("/shared/roots"));
    // rename: out of the sticky directory, and within root's directory.
    refused("rename", forger.rename("/shared/roots", "/shared/mine"));
    refused("rename", forger.rename("/rootfile", "/moved"));
    // What the owner may do, it does as the owner, not as the uid 0 it claims.
    let made = forger.mkdir("/shared/owners", 0o755).unwrap();
    assert_eq!(
        (made.uid, made.gid),
        (OWNER, OWNER),
        "a claimed identity was believed"
    );
    let file = forger.create("/shared/owners/file", &Default::default()).unwrap();
    assert_eq!(file.attr().uid, OWNER);
    drop(file);
    forger.unlink("/shared/owners/file").unwrap();
    forger.rmdir("/shared/owners").unwrap();

    // Everything as it was (checked as root again).
    hand_key_to(&cluster, 0);
    let root = cluster.client();
    assert_eq!(namespace_sum(&root), before, "the namespace or the data changed");
    // The key stays private to its owner throughout.
    assert_eq!(
        std::fs::metadata(cluster.key_path())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
}
