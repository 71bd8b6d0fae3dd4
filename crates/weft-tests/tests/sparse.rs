//! A sparse file over 4 GiB: offsets past 32 bits, holes reading as zeros, objects that
//! stay sparse on the io servers, and truncation down and up again.

mod common;

use common::{io_server_ids, object_path};
use std::os::unix::fs::MetadataExt;
use weft_client::{Client, File, OpenOptions};
use weft_testkit::TestCluster;

const GIB: u64 = 1 << 30;

fn read(file: &File, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0xEEu8; len];
    let n = file
        .read_at(offset, &mut buf)
        .unwrap_or_else(|e| panic!("read {len} at {offset}: {e}"));
    buf.truncate(n);
    buf
}

/// Bytes of disk the file's objects take on all io servers (allocated blocks, not
/// their logical length).
fn disk_bytes(cluster: &TestCluster, client: &Client, file: &File) -> u64 {
    io_server_ids(client)
        .into_iter()
        .filter_map(|id| std::fs::metadata(object_path(cluster, id, file.inode())).ok())
        .map(|m| m.blocks() * 512)
        .sum()
}

#[track_caller]
fn assert_zeros(what: &str, bytes: &[u8], len: usize) {
    assert_eq!(bytes.len(), len, "{what}: short read");
    if let Some(k) = bytes.iter().position(|b| *b != 0) {
        panic!("{what}: byte {k} of a hole is {:#04x}, not zero", bytes[k]);
    }
}

#[test]
fn sparse_file_over_4_gib() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    let file = client.create("/sparse", &Default::default()).unwrap();
    let tail = b"tail at five GiB";
    let far = 5 * GIB;
    file.write_at(far, tail).unwrap();
    file.write_at(0, b"head").unwrap();
    file.sync().unwrap();
    let size = far + tail.len() as u64;

    let other = cluster.client();
    assert_eq!(other.stat("/sparse").unwrap().size, size);
    let view = other.open("/sparse", &OpenOptions::default()).unwrap();
    assert_eq!(view.size().unwrap(), size);
    assert_eq!(read(&view, 0, 4), b"head");
    assert_eq!(read(&view, far, 100), tail, "short read at the end");
    assert_eq!(read(&view, far - 3, 5), b"\0\0\0ta");
    // Holes: right after the head, across the 4 GiB (32-bit) boundary, mid-file.
    assert_zeros("after head", &read(&view, 4, 70_000), 70_000);
    assert_zeros("across 4 GiB", &read(&view, 4 * GIB - 65_536, 131_072), 131_072);
    assert_zeros("at 2.5 GiB", &read(&view, 5 * GIB / 2, 1 << 20), 1 << 20);
    assert!(read(&view, size, 10).is_empty(), "read at EOF");

    // The objects are sparse: a few blocks, not gigabytes.
    let used = disk_bytes(&cluster, &client, &file);
    assert!(used < 1 << 20, "the sparse file takes {used} bytes of disk");

    // Bytes across the 4 GiB boundary land and come back.
    file.write_at(4 * GIB - 2, b"WXYZ").unwrap();
    assert_eq!(read(&view, 4 * GIB - 3, 6), b"\0WXYZ\0");

    // Truncate below the tail: it is gone, and stays gone when the file grows again.
    // Handles opened before a truncation by someone else keep their idea of the size
    // (like NFS attribute caching): read through handles opened after it.
    let short = 3 * GIB + 7;
    file.truncate(short).unwrap();
    assert_eq!(other.stat("/sparse").unwrap().size, short);
    let view = other.open("/sparse", &OpenOptions::default()).unwrap();
    assert!(read(&view, far, 10).is_empty(), "read past the new end");
    assert_eq!(read(&view, 0, 4), b"head");
    file.truncate(6 * GIB).unwrap();
    assert_eq!(other.stat("/sparse").unwrap().size, 6 * GIB);
    let view = other.open("/sparse", &OpenOptions::default()).unwrap();
    assert_zeros(
        "old tail after truncate down and up",
        &read(&view, far - 10, 100),
        100,
    );
    assert_zeros("old 4 GiB bytes", &read(&view, 4 * GIB - 3, 6), 6);
    assert_eq!(read(&view, 0, 4), b"head");
    let used = disk_bytes(&cluster, &client, &file);
    assert!(
        used < 1 << 20,
        "after truncation the file takes {used} bytes of disk"
    );

    // `weft df` reports the logical bytes stored without reading them.
    let df = common::weft_ok(&cluster, &["df"]);
    assert!(df.contains("1 files"), "weft df:\n{df}");
}
