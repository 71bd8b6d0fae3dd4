//! Creates through the mount without O_EXCL (a shell's `>`, mdtest, `open(O_CREAT)`):
//! the mount makes the name exclusively first, so a new file costs no truncate and no
//! size request; a name another client made meanwhile is opened as it is (truncated
//! only for O_TRUNC), and such an open never fails with EEXIST.

mod common;

use common::Mount;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use weft_testkit::TestCluster;

/// `> file` of new files: no manager setattr (the truncate of a file known to be new
/// was one durable commit and one request per io server each), and the files are as
/// a local directory has them.
#[test]
fn shell_truncating_creates_of_new_files_send_no_truncate() {
    let _alone = common::one_at_a_time();
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let before = cluster.manager_requests("set_attr");
    common::sh(
        &mount.join("."),
        "for i in $(seq 1 40); do echo line $i > f$i; done; : > empty",
    );
    let set_attrs = cluster.manager_requests("set_attr") - before;
    assert!(
        set_attrs <= 2.0,
        "{set_attrs} manager setattrs for 41 new files made with `>`"
    );
    for i in 1..=40 {
        assert_eq!(
            std::fs::read(mount.join(&format!("f{i}"))).unwrap(),
            format!("line {i}\n").into_bytes()
        );
    }
    assert_eq!(std::fs::metadata(mount.join("empty")).unwrap().len(), 0);
    // `>` over an existing file still truncates it, `>>` keeps it.
    common::sh(&mount.join("."), "echo new > f1; echo more >> f2");
    assert_eq!(std::fs::read(mount.join("f1")).unwrap(), b"new\n");
    assert_eq!(std::fs::read(mount.join("f2")).unwrap(), b"line 2\nmore\n");
}

/// New files written through the mount ask the manager for no capability: the
/// create's answer carries the one the first write needs (`CreateGranted`). Before, each
/// new file cost a `GrantCapability` round trip between its create and its first write
/// (40 here). What was written reads back through another mount.
#[test]
fn new_files_written_through_the_mount_ask_for_no_capability() {
    let _alone = common::one_at_a_time();
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let other = Mount::new(&cluster);
    let grants = cluster.manager_requests("grant_capability");
    let creates = cluster.manager_requests("create");
    common::sh(
        &mount.join("."),
        "for i in $(seq 1 40); do echo line $i > g$i; done",
    );
    let asked = cluster.manager_requests("grant_capability") - grants;
    assert_eq!(
        cluster.manager_requests("create") - creates,
        40.0,
        "one create request per new file"
    );
    assert!(
        asked <= 1.0,
        "{asked} capability grants for 40 new files written through the mount"
    );
    for i in 1..=40 {
        assert_eq!(
            std::fs::read(other.join(&format!("g{i}"))).unwrap(),
            format!("line {i}\n").into_bytes()
        );
    }
}

/// Threads of two mounts open the same new names with O_CREAT (no O_EXCL) at once and
/// each writes its own 8 bytes: every open succeeds, and no writer's bytes are lost
/// (an open of a name another made meanwhile does not truncate it). With O_TRUNC too,
/// every open succeeds and the file ends with at most what was written after it.
#[test]
fn racing_creates_of_one_name_all_open_it_and_keep_each_others_bytes() {
    const THREADS: usize = 4;
    const NAMES: usize = 60;
    let cluster = TestCluster::start();
    let mounts = [Mount::new(&cluster), Mount::new(&cluster)];
    for (round, truncate) in [(0, false), (1, true)] {
        let start = std::sync::Barrier::new(2 * THREADS);
        std::thread::scope(|s| {
            for (m, mount) in mounts.iter().enumerate() {
                for t in 0..THREADS {
                    let start = &start;
                    s.spawn(move || {
                        let writer = (m * THREADS + t) as u64;
                        start.wait();
                        for k in 0..NAMES {
                            let path = mount.join(&format!("r{round}-{k}"));
                            let f = std::fs::OpenOptions::new()
                                .write(true)
                                .create(true)
                                .truncate(truncate)
                                .mode(0o644)
                                .open(&path)
                                .unwrap_or_else(|e| {
                                    panic!("writer {writer}: open(O_CREAT) of {}: {e}", path.display())
                                });
                            f.write_all_at(&(writer + 1).to_le_bytes(), writer * 8).unwrap();
                        }
                    });
                }
            }
        });
        for k in 0..NAMES {
            let name = format!("r{round}-{k}");
            let bytes = std::fs::read(mounts[0].join(&name)).unwrap();
            assert!(bytes.len() <= 8 * 2 * THREADS, "{name}: {} bytes", bytes.len());
            let marks: Vec<u64> = bytes
                .chunks(8)
                .map(|c| {
                    let mut b = [0u8; 8];
                    b[..c.len()].copy_from_slice(c);
                    u64::from_le_bytes(b)
                })
                .collect();
            for (w, mark) in marks.iter().enumerate() {
                assert!(
                    *mark == 0 || *mark == w as u64 + 1,
                    "{name}: writer {w}'s slot holds {mark}"
                );
            }
            if !truncate {
                assert_eq!(
                    marks.iter().filter(|m| **m != 0).count(),
                    2 * THREADS,
                    "{name}: some writer's bytes were lost (slots {marks:?})"
                );
            }
        }
    }
}
