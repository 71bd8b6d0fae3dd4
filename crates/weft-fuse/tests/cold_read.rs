//! Cold reads through the mount: the kernel asks for what its page cache lacks (4 MiB
//! readahead requests for sequential reads), and each FUSE worker answers from its own
//! reused read buffer (huge-page backed, never cleared between requests). Checks that
//! every byte arrives as written whatever the offsets, that holes and truncated tails
//! read as zeros even right after a buffer held other data, that concurrent readers on
//! several workers never see each other's bytes, and that an io server killed during a
//! read gives an error (EHOSTDOWN), never garbage. The mount reads into buffers of its
//! read pool, where the io servers place the replies (`ShmScatter`): the tests check
//! by the servers' `weft_io_pool_placed_bytes` that they did, that without the pool
//! (`WEFT_READ_POOL=0`, `WEFT_TRANSPORT=unix`) nothing is placed and reads are still
//! exact, and that a mount killed with SIGKILL leaves its pool in no io server.

mod common;

use common::{native_write, pattern, Mount};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use weft_testkit::TestCluster;

const MIB: usize = 1 << 20;

/// Drops the kernel's cached pages of `path` (a mount file), so the next read is cold.
fn evict(path: &Path) {
    let file = std::fs::File::open(path).unwrap();
    // SAFETY: an open descriptor; the call only drops clean cached pages.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "fadvise {}", path.display());
}

/// Reads all of `path` in `chunk`-byte calls (as dd does).
fn read_in_chunks(path: &Path, chunk: usize) -> Vec<u8> {
    let mut file = std::fs::File::open(path).unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; chunk];
    loop {
        let n = file
            .read(&mut buf)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// Bytes the cluster's io servers placed straight into read pools so far (their
/// `weft_io_pool_placed_bytes` metric).
fn pool_placed(cluster: &TestCluster) -> u64 {
    let pool = weft_rpc::ConnectionPool::new("test", cluster.auth(), Default::default());
    cluster
        .config()
        .io_servers()
        .map(|server| {
            let (_, text) = pool
                .call(
                    &server.addr,
                    &weft_proto::msg::Request::Metrics { text: true },
                    &[],
                )
                .unwrap();
            let text = String::from_utf8(text).unwrap();
            text.lines()
                .find_map(|l| l.strip_prefix("weft_io_pool_placed_bytes_total "))
                .unwrap_or_else(|| panic!("no weft_io_pool_placed_bytes_total in:\n{text}"))
                .trim()
                .parse::<u64>()
                .unwrap()
        })
        .sum()
}

/// Mappings and descriptors of read pools in process `pid`.
fn pools_in(pid: i32) -> usize {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let mapped = maps.lines().filter(|l| l.contains("weft-shm-pool")).count();
    let open = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter(|t| t.to_string_lossy().contains("weft-shm-pool"))
                .count()
        })
        .unwrap_or(0);
    mapped + open
}

fn assert_same(got: &[u8], expected: &[u8], what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}: length");
    if let Some(at) = got.iter().zip(expected).position(|(a, b)| a != b) {
        panic!(
            "{what}: differs at byte {at}: read {:#04x}, expected {:#04x}",
            got[at], expected[at]
        );
    }
}

#[test]
fn cold_reads_are_byte_exact_at_any_offset_and_from_concurrent_readers() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let client = cluster.client();
    let placed_before = pool_placed(&cluster);
    // Several whole 4 MiB requests, a tail that is no whole page, over every server.
    let sizes = [24 * MIB + 4321, 9 * MIB, 5 * MIB + 1];
    let mut files = Vec::new();
    for (i, size) in sizes.iter().enumerate() {
        let data = pattern(10 + i as u64, *size);
        native_write(&client, &format!("/f{i}"), 0, &data);
        files.push((mount.join(&format!("f{i}")), data));
    }
    for (path, data) in &files {
        evict(path);
        assert_same(&read_in_chunks(path, MIB), data, "sequential 1 MiB reads");
        evict(path);
        assert_same(
            &read_in_chunks(path, 3 * MIB + 7),
            data,
            "sequential odd-sized reads",
        );
    }
    // Reads at odd offsets, cold each time: the kernel asks for page-aligned ranges
    // around them; each must land at its place.
    let (path, data) = &files[0];
    let file = std::fs::File::open(path).unwrap();
    for (offset, len) in [
        (0, 1),
        (4095, 2),
        (MIB - 3, 6 * MIB),
        (7 * MIB + 12345, 4 * MIB + 1),
        (data.len() - 10, 10),
    ] {
        evict(path);
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, offset as u64).unwrap();
        assert_same(
            &buf,
            &data[offset..offset + len],
            &format!("pread of {len} at {offset}"),
        );
    }
    // Past the end: nothing, no error.
    let mut buf = vec![0u8; 100];
    assert_eq!(file.read_at(&mut buf, data.len() as u64).unwrap(), 0);
    // The io servers placed (at least) every byte of the cold sequential reads in the
    // mount's read pool: the daemon copied none of them.
    let placed = pool_placed(&cluster) - placed_before;
    let cold: usize = sizes.iter().sum::<usize>() * 2;
    assert!(
        placed >= cold as u64,
        "the io servers placed {placed} bytes in the read pool, less than the {cold} read cold"
    );
    // Four readers at once, each reading every file cold: several workers, each with
    // its own buffer, serving interleaved requests.
    std::thread::scope(|scope| {
        for reader in 0..4 {
            let files = &files;
            scope.spawn(move || {
                for round in 0..2 {
                    for (path, data) in files.iter().cycle().skip(reader).take(files.len()) {
                        evict(path);
                        let got = read_in_chunks(path, MIB);
                        assert_same(
                            &got,
                            data,
                            &format!("reader {reader} round {round} {}", path.display()),
                        );
                    }
                }
            });
        }
    });
}

#[test]
fn holes_and_truncated_tails_read_as_zeros_after_buffers_held_data() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let client = cluster.client();
    // Fill every worker's buffer with non-zero bytes first: a reply built from a reused
    // buffer that left a hole or a tail unwritten would show them.
    let full = pattern(3, 32 * MIB);
    native_write(&client, "/full", 0, &full);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                evict(&mount.join("full"));
                assert_same(&read_in_chunks(&mount.join("full"), MIB), &full, "full file");
            });
        }
    });

    // Sparse: data at the start, one byte 20 MiB on; whole stripes and whole servers'
    // objects in between were never written.
    let head = pattern(4, 100_000);
    native_write(&client, "/sparse", 0, &head);
    native_write(&client, "/sparse", 20 * MIB as u64, b"z");
    let mut expected = vec![0u8; 20 * MIB + 1];
    expected[..head.len()].copy_from_slice(&head);
    expected[20 * MIB] = b'z';
    let sparse = mount.join("sparse");
    evict(&sparse);
    let placed_before = pool_placed(&cluster);
    assert_same(&read_in_chunks(&sparse, MIB), &expected, "sparse file");
    assert!(
        pool_placed(&cluster) - placed_before >= expected.len() as u64,
        "the sparse file's holes were not placed in the read pool"
    );

    // Truncated down by the native client, then extended again: the tail is zeros.
    native_write(&client, "/cut", 0, &full[..12 * MIB]);
    let options = weft_client::OpenOptions {
        write: true,
        ..Default::default()
    };
    let handle = client.open("/cut", &options).unwrap();
    handle.truncate(5 * MIB as u64 + 333).unwrap();
    handle.truncate(9 * MIB as u64).unwrap();
    handle.close().unwrap();
    let mut expected = full[..9 * MIB].to_vec();
    expected[5 * MIB + 333..].fill(0);
    let cut = mount.join("cut");
    evict(&cut);
    assert_same(
        &read_in_chunks(&cut, MIB),
        &expected,
        "truncated and extended file",
    );

    // Truncated down only: the read ends at the new size.
    let handle = client.open("/cut", &options).unwrap();
    handle.truncate(MIB as u64 + 1).unwrap();
    handle.close().unwrap();
    evict(&cut);
    assert_same(&read_in_chunks(&cut, MIB), &full[..MIB + 1], "truncated file");
}

#[test]
fn an_io_server_killed_during_a_read_gives_an_error_and_never_wrong_bytes() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let client = cluster.client();
    let data = pattern(5, 96 * MIB);
    native_write(&client, "/big", 0, &data);
    let path = mount.join("big");
    evict(&path);
    let mut file = std::fs::File::open(&path).unwrap();
    let mut buf = vec![0u8; MIB];
    let mut at = 0;
    let mut killed = false;
    let error = loop {
        if at >= 8 * MIB && !killed {
            cluster.kill9(2);
            killed = true;
        }
        match file.read(&mut buf) {
            Ok(0) => panic!("read the whole file with io server 2 killed after {} MiB", 8),
            Ok(n) => {
                assert_same(&buf[..n], &data[at..at + n], &format!("{n} bytes at {at}"));
                at += n;
            }
            Err(e) => break e,
        }
    };
    // EHOSTDOWN is the errno of an unavailable server (weft-proto `ErrorCode::errno`);
    // a failure inside the read path would be EIO.
    assert!(
        matches!(error.raw_os_error(), Some(libc::EHOSTDOWN | libc::EIO)),
        "{error:?} after {at} bytes"
    );
    // Readahead may have fetched some of what follows before the kill; nothing past
    // what one readahead window holds can have been read.
    assert!(at < 8 * MIB + 32 * MIB, "read {at} bytes with a server down");
}

#[test]
fn without_the_read_pool_reads_are_exact_and_nothing_is_placed() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    let data = pattern(6, 13 * MIB + 77);
    native_write(&client, "/plain", 0, &data);
    for env in [("WEFT_READ_POOL", "0"), ("WEFT_TRANSPORT", "unix")] {
        let mount = Mount::with_env(&cluster, &[], &[env]);
        let path = mount.join("plain");
        let before = pool_placed(&cluster);
        evict(&path);
        assert_same(&read_in_chunks(&path, MIB), &data, &format!("{env:?}"));
        assert_eq!(
            pool_placed(&cluster),
            before,
            "bytes were placed in a read pool with {env:?}"
        );
        assert_eq!(pools_in(mount.pid() as i32), 0, "a pool was made with {env:?}");
    }
}

#[test]
fn a_mount_killed_with_sigkill_leaves_its_read_pool_in_no_io_server() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let client = cluster.client();
    let data = pattern(7, 17 * MIB);
    native_write(&client, "/k", 0, &data);
    let path = mount.join("k");
    evict(&path);
    assert_same(&read_in_chunks(&path, MIB), &data, "before the kill");
    let io: Vec<i32> = cluster
        .config()
        .io_servers()
        .map(|s| cluster.pid(s.id).expect("io server running"))
        .collect();
    assert!(pools_in(mount.pid() as i32) > 0, "the mount made no read pool");
    for pid in &io {
        assert!(
            pools_in(*pid) > 0,
            "io server {pid} has not mapped the mount's pool"
        );
    }
    // A reader in flight when the daemon dies (its pages evicted first, here: in the
    // thread, a slow start under load met the dead mount at the open, ECONNABORTED).
    evict(&path);
    let reader = {
        let path = path.clone();
        std::thread::spawn(move || {
            let _ = std::fs::read(&path);
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(20));
    // SAFETY: killing the mount daemon this test started.
    unsafe { libc::kill(mount.pid() as i32, libc::SIGKILL) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    for pid in &io {
        while pools_in(*pid) > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "io server {pid} still holds the killed mount's pool"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    drop(mount);
    reader.join().unwrap();
}
