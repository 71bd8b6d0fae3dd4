//! Permissions through the mount: every request acts as its caller (the test runs as
//! root, like CI, and runs commands as `nobody` with setpriv).

mod common;

use common::{pattern, read_all, sh, sh_as_nobody, sh_output, Mount};
use std::os::unix::fs::MetadataExt;
use std::time::Duration;
use weft_testkit::{ClusterOptions, TestCluster};

const NOBODY: u32 = 65534;

fn failed_with(out: &std::process::Output, message: &str) -> bool {
    !out.status.success() && String::from_utf8_lossy(&out.stderr).contains(message)
}

#[test]
fn a_user_cannot_write_another_users_file() {
    // SAFETY: no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test runs as root (as in CI) to act as nobody"
    );
    let cluster = TestCluster::start_with(&ClusterOptions::claimed_identity());
    let mount = Mount::new(&cluster);
    let root = mount.path();
    sh(
        root,
        "echo 'root data' > owned && chmod 0644 owned && mkdir shared && chmod 1777 shared",
    );

    // nobody may read root's 0644 file but not write, truncate, chmod or remove it.
    let out = sh_as_nobody(root, "cat owned", &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "root data\n");
    for script in ["echo more >> owned", "echo over > owned", "truncate -s 0 owned"] {
        let out = sh_as_nobody(root, script, &[]);
        assert!(failed_with(&out, "Permission denied"), "{script}: {out:?}");
    }
    assert!(failed_with(
        &sh_as_nobody(root, "chmod 0666 owned", &[]),
        "Operation not permitted"
    ));
    assert!(failed_with(
        &sh_as_nobody(root, "rm -f owned", &[]),
        "Permission denied"
    ));
    assert!(failed_with(
        &sh_as_nobody(root, "mkdir mine", &[]),
        "Permission denied"
    ));
    assert_eq!(std::fs::read(mount.join("owned")).unwrap(), b"root data\n");

    // nobody's own files are nobody's, in a directory open to all.
    let out = sh_as_nobody(
        root,
        "echo hers > shared/hers && chmod 0600 shared/hers && cat shared/hers",
        &[],
    );
    assert!(out.status.success(), "{out:?}");
    let meta = std::fs::metadata(mount.join("shared/hers")).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (NOBODY, NOBODY, 0o600)
    );
    // ... which root may still read, and which in the sticky directory root's file is
    // safe from nobody.
    assert_eq!(std::fs::read(mount.join("shared/hers")).unwrap(), b"hers\n");
    sh(root, "echo r > shared/roots");
    assert!(!sh_as_nobody(root, "rm -f shared/roots", &[]).status.success());

    // Once root makes the file private, nobody cannot read it either.
    sh(root, "chmod 0600 owned");
    assert!(failed_with(
        &sh_as_nobody(root, "cat owned", &[]),
        "Permission denied"
    ));
    // A chown by anyone but root is refused; root's works.
    assert!(failed_with(
        &sh_as_nobody(root, "chown 65534 owned", &[]),
        "Operation not permitted"
    ));
    sh(root, "chown 65534:65534 owned");
    assert_eq!(std::fs::metadata(mount.join("owned")).unwrap().uid(), NOBODY);
    let out = sh_as_nobody(root, "echo now-mine >> owned", &[]);
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn supplementary_groups_reach_the_manager() {
    let cluster = TestCluster::start_with(&ClusterOptions::claimed_identity());
    let mount = Mount::new(&cluster);
    let root = mount.path();
    sh(root, "mkdir team && chown 0:4242 team && chmod 0770 team");
    // Without the group, nobody cannot enter; with it as a supplementary group (not its
    // primary group), it can create files there: the manager saw the group too.
    assert!(!sh_as_nobody(root, "touch team/x", &[]).status.success());
    let out = sh_as_nobody(root, "echo ok > team/x && cat team/x", &[4242]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(std::fs::metadata(mount.join("team/x")).unwrap().uid(), NOBODY);
}

/// A chmod revokes the file's capabilities on every io server at once, and the mount's
/// next call over all of them (a 1 MiB O_DIRECT read or write of a file striped 64 KiB
/// over 4 servers) presents fresh ones on each and succeeds. fsstress's O_DIRECT reads
/// and writes right after its chowns got EACCES: the call was repeated after a refusal,
/// but each repetition had seen only one server's refusal (the other answers in flight
/// were dropped), and 4 servers needed more repetitions than there were.
#[test]
fn direct_io_over_every_server_right_after_a_chmod_succeeds() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let root = mount.path();
    let data = pattern(11, 1 << 20);
    std::fs::write(mount.join("f"), &data).unwrap();
    let copy = mount.scratch().join("copy");
    std::fs::write(&copy, &data).unwrap();
    let write = format!(
        "dd if={} of=f bs=1M count=1 oflag=direct conv=notrunc status=none",
        copy.display()
    );
    let read = "dd if=f of=/dev/null bs=1M count=1 iflag=direct status=none";
    for (round, mode) in ["600", "644", "640", "644"].into_iter().enumerate() {
        // Capabilities presented on the connections to all 4 servers ...
        sh(root, read);
        sh(root, &write);
        sh(root, &format!("chmod {mode} f"));
        // ... revoked there in the background (the chmod does not wait for that).
        std::thread::sleep(Duration::from_millis(300));
        let call = if round % 2 == 0 { read } else { write.as_str() };
        let out = sh_output(root, call);
        assert!(
            out.status.success(),
            "round {round}, right after chmod {mode}: {call}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(read_all(&mount.join("f")), data);
}
