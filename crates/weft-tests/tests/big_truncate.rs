//! Emptying a big file (truncate to nothing, O_TRUNC open) is answered without waiting
//! for its objects' blocks to be freed: an io server puts a fresh empty object in
//! place of a big one and frees the old one's blocks in the background (weft-iod's
//! reaper). Freeing costs in proportion to the blocks: on ext4 mounted with `discard`
//! (the VM's root) the truncate of a written 4 GiB file discards every extent
//! synchronously, 7 s measured, and HDF5's H5Fcreate of a just-written 4 GB file
//! failed with "no answer ... within 60000 ms" under load.
//!
//! This file is its own test binary: it shortens the client timeout (`WEFT_TIMEOUT_MS`)
//! and starts clusters with weftd's test hook `WEFT_FAULT_SLOW_FREE_MS`, which makes
//! freeing a big object's blocks take twice that timeout longer, wherever it happens.
//! Without the replacement (the truncate freeing the blocks in place) every test here
//! failed with `TimedOut`.

mod common;

use common::{io_server_ids, object_path, pattern};
use std::sync::Once;
use std::time::Instant;
use weft_client::{Client, CreateOptions, File, LayoutRequest};
use weft_testkit::{ClusterOptions, TestCluster};

const TIMEOUT_MS: u64 = 4000;
/// Freeing one big object's blocks: longer than the client waits for an answer.
const SLOW_FREE_MS: u64 = 2 * TIMEOUT_MS;
/// Io servers per file.
const SERVERS: u32 = 2;

fn init() -> TestCluster {
    static ENV: Once = Once::new();
    // Every test calls this first, before any thread of its own or any child exists.
    ENV.call_once(|| std::env::set_var("WEFT_TIMEOUT_MS", TIMEOUT_MS.to_string()));
    TestCluster::start_with_env(
        &ClusterOptions::default(),
        &[("WEFT_FAULT_SLOW_FREE_MS", &SLOW_FREE_MS.to_string())],
    )
}

fn options() -> CreateOptions {
    CreateOptions {
        layout: LayoutRequest {
            stripe_count: Some(SERVERS),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A synced file whose every object holds more than `REAP_MIN_BYTES`.
fn big_file(client: &Client, path: &str) -> (File, u64) {
    let file = client.create(path, &options()).unwrap();
    assert_eq!(file.layout().servers.len(), SERVERS as usize);
    let len = u64::from(SERVERS) * (weft_iod::REAP_MIN_BYTES + (4 << 20));
    let chunk = 8 << 20;
    let mut at = 0;
    while at < len {
        file.write_at(at, &pattern(1, at, chunk)).unwrap();
        at += chunk as u64;
    }
    file.sync().unwrap();
    (file, at)
}

/// Every object of `file` is an empty file under its name, and no old one is left
/// beside it.
fn objects_empty(cluster: &TestCluster, file: &File) {
    let client = cluster.client();
    for server in io_server_ids(&client) {
        if !file.layout().servers.contains(&server) {
            continue;
        }
        let path = object_path(cluster, server, file.attr().inode);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), 0, "{} is not empty", path.display());
        let old = path.with_extension("fresh");
        assert!(!old.exists(), "{} was left behind", old.display());
    }
}

/// Written again after the truncate and read back: the writes went to the objects in
/// place (no server kept writing to the old ones).
fn rewritten(file: &File) {
    let data = pattern(2, 0, 4 << 20);
    file.write_at(0, &data).unwrap();
    file.sync().unwrap();
    let mut back = vec![0u8; data.len() + 4096];
    assert_eq!(file.read_at(0, &mut back).unwrap(), data.len());
    assert!(
        back[..data.len()] == data[..],
        "the bytes written after the truncate differ"
    );
    assert_eq!(file.size().unwrap(), data.len() as u64);
}

#[test]
fn truncating_a_big_file_to_nothing_answers_before_its_blocks_are_freed() {
    let cluster = init();
    let client = cluster.client();
    let (file, len) = big_file(&client, "/big");
    assert_eq!(file.size().unwrap(), len);
    let started = Instant::now();
    file.truncate(0).expect(
        "the truncate is answered although freeing each object's blocks takes longer than the client waits",
    );
    eprintln!("truncate of {len} bytes answered in {:?}", started.elapsed());
    assert_eq!(file.size().unwrap(), 0);
    let mut back = vec![0u8; 4096];
    assert_eq!(file.read_at(0, &mut back).unwrap(), 0, "bytes read past the end");
    objects_empty(&cluster, &file);
    rewritten(&file);
}

#[test]
fn an_o_trunc_open_of_a_big_file_answers_before_its_blocks_are_freed() {
    let cluster = init();
    let client = cluster.client();
    let (file, _) = big_file(&client, "/h5.dat");
    file.close().unwrap();
    let truncating = CreateOptions {
        truncate: true,
        exclusive: false,
        ..options()
    };
    let again = client.create("/h5.dat", &truncating).expect(
        "the O_TRUNC open is answered although freeing the blocks takes longer than the client waits",
    );
    assert_eq!(again.size().unwrap(), 0);
    objects_empty(&cluster, &again);
    rewritten(&again);
    // Emptied twice while the first one's blocks may still be waiting to be freed.
    again.truncate(0).unwrap();
    assert_eq!(again.size().unwrap(), 0);
}
