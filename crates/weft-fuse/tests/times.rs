//! Modification times as a local file system keeps them: a write moves a file's mtime
//! and ctime whichever client wrote it (writes reach only the io servers, so the time a
//! stat shows is the latest of the objects' and the manager's), and an explicitly set
//! time (utimensat, `touch -d`, what tar and `cp -p` do after writing) is the time
//! shown afterwards, not the objects' later one. Checked through the native client and
//! the mount, each against the other, and `touch`/`stat` against a local directory.

mod common;

use common::{native_write, pattern, sh, Mount};
use std::os::unix::fs::MetadataExt;
use std::time::Duration;
use weft_client::{SetAttr, TimeSet, Timespec};
use weft_testkit::TestCluster;

fn mount_mtime(path: &std::path::Path) -> Timespec {
    let m = std::fs::metadata(path).unwrap();
    Timespec {
        secs: m.mtime(),
        nanos: m.mtime_nsec() as u32,
    }
}

/// Longer than a coarse file-system clock's tick, so that a later write has a later time.
fn tick() {
    std::thread::sleep(Duration::from_millis(30));
}

#[test]
fn writes_move_the_modification_time_and_set_times_stick() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    // Attributes are asked for at every stat: what the mount shows is what the cluster says.
    let mount = Mount::with_args(&cluster, &["--attr-timeout-ms", "0"]);
    let data = pattern(7, 300_000);

    // The native client writes: the native stat and the mount's both move.
    native_write(&client, "/n.bin", 0, &data);
    let created = client.stat("/n.bin").unwrap();
    tick();
    native_write(&client, "/n.bin", 1000, &data[..5000]);
    let written = client.stat("/n.bin").unwrap();
    assert_eq!(
        written.size,
        data.len() as u64,
        "a rewrite inside the file keeps its size"
    );
    assert!(
        written.mtime > created.mtime,
        "a same-size rewrite moves mtime: {:?} then {:?}",
        created.mtime,
        written.mtime
    );
    assert!(written.ctime >= written.mtime, "ctime follows a write too");
    assert_eq!(
        mount_mtime(&mount.path().join("n.bin")),
        written.mtime,
        "the mount shows the same time"
    );

    // The mount writes: the native client sees it.
    let m = mount.path().join("m.bin");
    std::fs::write(&m, &data).unwrap();
    let before = client.stat("/m.bin").unwrap();
    tick();
    sh(
        mount.path(),
        "printf 'XYZ' | dd of=m.bin bs=1 seek=70000 conv=notrunc status=none",
    );
    let after = client.stat("/m.bin").unwrap();
    assert_eq!(after.size, data.len() as u64);
    assert!(
        after.mtime > before.mtime,
        "a write through the mount moves mtime: {:?} then {:?}",
        before.mtime,
        after.mtime
    );

    // An explicit time in the past, set after the data was written (as tar and cp -p
    // do), is what both show; the same command on a local file gives the same.
    let local = tempfile::tempdir().unwrap();
    std::fs::write(local.path().join("m.bin"), &data).unwrap();
    let stamp = "export TZ=UTC; touch -m -d '2001-02-03 04:05:06.789' m.bin && stat -c '%Y.%y' m.bin";
    let want = sh(local.path(), stamp);
    let got = sh(mount.path(), stamp);
    assert_eq!(got, want, "touch -d then stat, through the mount and locally");
    let set = client.stat("/m.bin").unwrap();
    assert_eq!(
        (set.mtime.secs, set.mtime.nanos),
        (981_173_106, 789_000_000),
        "{want}"
    );

    // The native client's own setattr, then a write: the write's time wins again.
    let past = Timespec {
        secs: 1_000_000_000,
        nanos: 5,
    };
    client
        .setattr(
            "/n.bin",
            &SetAttr {
                mtime: Some(TimeSet::At(past)),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(client.stat("/n.bin").unwrap().mtime, past);
    assert_eq!(mount_mtime(&mount.path().join("n.bin")), past);
    native_write(&client, "/n.bin", 0, b"new");
    let again = client.stat("/n.bin").unwrap();
    assert!(
        again.mtime > written.mtime,
        "a write after an explicit time moves it to now: {:?}",
        again.mtime
    );
}
