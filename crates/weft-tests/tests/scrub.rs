//! `weft scrub` (issue 33): the fresh copies of a replicated file are compared, a copy
//! changed behind the file system's back is found at the right offset (and copies that
//! differ for a moment while a write reaches them one after the other are not), and `--repair` rebuilds it from the slot's primary.

mod common;

use common::{pattern, weft_ok};
use std::os::unix::fs::FileExt;
use weft_client::CreateOptions;
use weft_testkit::TestCluster;

const STRIPE: u64 = 65_536;

#[test]
fn a_copy_changed_behind_the_file_systems_back_is_found_and_repaired() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    client.mkdir("/r", 0o755).unwrap();
    let options = weft_testkit::replicated(STRIPE, 2);
    let data = pattern(5, 0, 3 << 20);
    let file = client.create("/r/f", &options).unwrap();
    file.write_at(0, &data).unwrap();
    file.sync().unwrap();
    let layout = file.layout().clone();
    file.close().unwrap();
    // A plain file beside it is passed over.
    let plain = client.create("/r/plain", &CreateOptions::default()).unwrap();
    plain.write_at(0, b"plain").unwrap();
    plain.close().unwrap();

    // Another replicated file rewritten with new bytes all through the scrub: its
    // copies differ for moments, which must not count.
    let busy = client.create("/r/g", &options).unwrap();
    busy.write_at(0, &pattern(6, 0, 2 << 20)).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut round = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                round += 1;
                let at = (round * 300_007) % (2 << 20);
                busy.write_at(at, &pattern(100 + round, at, 200_000)).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            busy.close().unwrap();
            round
        })
    };
    let out = weft_ok(&cluster, &["scrub", "/r"]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = writer.join().unwrap();
    assert!(rounds > 1, "the writer did not run during the scrub");
    assert!(
        out.contains("scrubbed 2 replicated files") && out.contains(" 0 differences"),
        "{out}"
    );

    // Slot 1's second copy gets other bytes at the object's local offset 70,000: file
    // offset 65,536 * (width + 1) + (70,000 - 65,536), stripe rows being width stripes.
    let width = layout.width() as u64;
    let slot = 1;
    let copy = layout.replica_server(1, slot);
    let object = cluster.home().join(format!(
        "data/server-{}/objects/{:02x}/{:016x}",
        copy.0,
        inode_of(&client) & 0xff,
        inode_of(&client)
    ));
    let local = 70_000u64;
    let handle = std::fs::OpenOptions::new().write(true).open(&object).unwrap();
    handle.write_all_at(b"not the data", local).unwrap();
    handle.sync_all().unwrap();
    let offset = (local / STRIPE) * STRIPE * width + slot as u64 * STRIPE + local % STRIPE;

    let out = cluster.weft(&["scrub", "/r"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "a scrub that found a difference succeeded:\n{stdout}"
    );
    let primary = layout.replica_server(0, slot);
    let want = format!(
        "/r/f: stripe slot {slot}: the copies on io servers {} and {} differ from offset {offset}",
        primary.0, copy.0
    );
    assert!(stdout.contains(&want), "wanted {want:?} in:\n{stdout}");

    let out = weft_ok(&cluster, &["scrub", "--repair", "/r/f"]);
    assert!(out.contains("differ from offset"), "{out}");
    assert!(out.contains("rebuilt from io server"), "{out}");
    let out = weft_ok(&cluster, &["scrub", "/r/f"]);
    assert!(out.contains(" 0 differences"), "{out}");
    // The scrub gave back the write capability its stamps asked for: the manager
    // vouches for the file again within seconds, not when the capability expires (60 s).
    let probe = cluster.client();
    let dir = probe.resolve("/r").unwrap().inode;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while probe.vouched_skips() == 0 {
        probe.lookup_sized(dir, "f", None).unwrap();
        assert!(
            std::time::Instant::now() < deadline,
            "the file is not vouched for 10 s after the scrub: its write capability is still counted live"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut back = vec![0u8; data.len()];
    let file = client.open("/r/f", &Default::default()).unwrap();
    assert_eq!(file.read_at(0, &mut back).unwrap(), data.len());
    assert!(back == data, "the repaired file reads other bytes");
    // Both copies hold the data again: read from the copy alone.
    let mut on_copy = vec![0u8; 12];
    std::fs::File::open(&object)
        .unwrap()
        .read_exact_at(&mut on_copy, local)
        .unwrap();
    assert_eq!(on_copy, data[offset as usize..offset as usize + 12].to_vec());
}

fn inode_of(client: &weft_client::Client) -> u64 {
    client.stat("/r/f").unwrap().inode.0
}
