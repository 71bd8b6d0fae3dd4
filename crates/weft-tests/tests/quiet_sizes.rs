//! A stat of a file nobody is writing is one round trip to the manager: once the last
//! writer of a file gives its capabilities back, the manager asks the file's io
//! servers for its size once and answers stats with it under its vouch (`AttrSized`);
//! any write, truncate or time change moves the vouch, and the next stat asks the io
//! servers again. The sizes seen are checked against what was written, by a client
//! that did not write them.

use std::time::{Duration, Instant};
use weft_client::{Client, CreateOptions, OpenOptions, SetAttr};
use weft_testkit::TestCluster;

const FILES: u64 = 40;

fn size_of(k: u64) -> usize {
    // Across stripe boundaries and servers: 1 byte to about 300 KB.
    1 + (k as usize * 7919) % 300_000
}

fn io_stats(cluster: &TestCluster) -> f64 {
    cluster.io_requests("obj_stamp") + cluster.io_requests("obj_stat")
}

/// Stats every file from `reader` until each shows `expected(k)`; the io servers'
/// stat requests counted meanwhile.
fn stat_all(cluster: &TestCluster, reader: &Client, expected: impl Fn(u64) -> u64) -> f64 {
    let before = io_stats(cluster);
    for k in 0..FILES {
        let path = format!("/q/f{k}");
        let attr = reader.stat(&path).unwrap_or_else(|e| panic!("stat {path}: {e}"));
        assert_eq!(attr.size, expected(k), "{path}: size");
    }
    io_stats(cluster) - before
}

#[test]
fn stats_of_quiet_files_skip_the_io_servers_and_never_show_an_old_size() {
    let cluster = TestCluster::start();
    let writer = cluster.client();
    writer.mkdir("/q", 0o755).unwrap();
    for k in 0..FILES {
        let file = writer
            .create(&format!("/q/f{k}"), &CreateOptions::default())
            .unwrap();
        file.write_at(0, &vec![k as u8; size_of(k)]).unwrap();
        file.close().unwrap();
    }
    // The releases and the manager's measure take a moment: wait until a whole pass of
    // stats asks the io servers nothing (bounded: a manager that never learns the
    // sizes fails here). Each pass by a new client (another process would be the
    // same), which never read these sizes itself.
    let started = Instant::now();
    let deadline = started + Duration::from_secs(20);
    let mut reader;
    loop {
        reader = cluster.client();
        let asked = stat_all(&cluster, &reader, |k| size_of(k) as u64);
        if asked == 0.0 {
            eprintln!("sizes known {:?} after the last close", started.elapsed());
            break;
        }
        assert!(
            Instant::now() < deadline,
            "stats of {FILES} quiet files still asked the io servers {asked} times after 20 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let skipped = reader.vouched_skips();
    assert!(
        skipped >= FILES,
        "only {skipped} stats answered without the io servers"
    );

    // A writer appends to file 3 and holds it open: the stat sees its bytes at once.
    let f3 = writer
        .open(
            "/q/f3",
            &OpenOptions {
                write: true,
                ..OpenOptions::default()
            },
        )
        .unwrap();
    let grown = size_of(3) as u64 + 70_000;
    f3.write_at(size_of(3) as u64, &vec![9u8; 70_000]).unwrap();
    assert_eq!(reader.stat("/q/f3").unwrap().size, grown, "while written");
    f3.close().unwrap();
    // Right after the close (before any new measure): still the new size.
    assert_eq!(reader.stat("/q/f3").unwrap().size, grown, "just after the close");
    // A truncate by path: the next stat shows it.
    writer
        .setattr(
            "/q/f5",
            &SetAttr {
                size: Some(10),
                ..SetAttr::default()
            },
        )
        .unwrap();
    assert_eq!(reader.stat("/q/f5").unwrap().size, 10, "after a truncate");
    // And once quiet again, the new sizes are the ones answered without the io servers.
    let expected = |k: u64| match k {
        3 => grown,
        5 => 10,
        k => size_of(k) as u64,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while stat_all(&cluster, &cluster.client(), expected) != 0.0 {
        assert!(Instant::now() < deadline, "the new sizes were never learnt");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A removed file is gone, not answered from what was known of it.
    writer.unlink("/q/f7").unwrap();
    assert!(reader.stat("/q/f7").is_err(), "a removed file still stat");
}
