//! A write that timed out at the client after its io servers had begun it never lands
//! over a newer write (or truncate) of the same bytes that was acknowledged after the
//! timeout was reported: an io server applies overlapping data-changing requests in the
//! order they arrived. Requests touching other bytes of the same object are not held
//! up by a stuck one.
//!
//! Before, the timed-out write, stuck in an io server's worker, finished after the
//! newer one and put its stale bytes over acknowledged ones (the first two tests failed
//! on every run).
//!
//! This file is its own test binary: it shortens the client timeout (`WEFT_TIMEOUT_MS`)
//! and sets weftd's test hook `WEFT_FAULT_STALL_WRITE`, which make each io server hold
//! its first write at `AT` for `STALL_MS` after it began, before it writes a byte (as
//! a pwrite stuck under writeback throttling, or a stopped process, would).

mod common;

use common::pattern;
use std::sync::Once;
use std::time::{Duration, Instant};
use weft_client::{ErrorCode, File, OpenOptions};
use weft_testkit::TestCluster;

const TIMEOUT_MS: u64 = 1500;
/// Longer than the timeout, so that the client gives up on the stalled write; shorter
/// than two, so that a newer write waiting behind it is answered within its own.
const STALL_MS: u64 = 2500;
/// Where the stalled write starts.
const AT: u64 = 1 << 20;
/// A write of 64 KiB on each of the four io servers: run by a worker, not inline.
const LEN: usize = 256 << 10;

fn init() -> TestCluster {
    static ENV: Once = Once::new();
    // Every test calls this first, before any thread of its own or any child exists.
    ENV.call_once(|| {
        std::env::set_var("WEFT_TIMEOUT_MS", TIMEOUT_MS.to_string());
        std::env::set_var("WEFT_FAULT_STALL_WRITE", format!("{AT}:{STALL_MS}"));
    });
    TestCluster::start()
}

/// The io servers' logs (server 0 is the metadata manager).
fn io_logs(cluster: &TestCluster) -> Vec<String> {
    (1..=4)
        .map(|id| {
            let path = cluster.home().join(format!("logs/server-{id}.log"));
            std::fs::read_to_string(&path).unwrap_or_default()
        })
        .collect()
}

/// Io servers whose log has `line`'s text.
fn servers_saying(cluster: &TestCluster, text: &str) -> usize {
    io_logs(cluster).iter().filter(|log| log.contains(text)).count()
}

const BEGAN: &str = "test hook: the write of inode";
const WENT_ON: &str = "test hook: the stalled write of inode";

/// A file over all four io servers, written through, and a write at `AT` that every io
/// server began and holds, which timed out at the client (its error reported).
fn stalled_write_timed_out(cluster: &TestCluster) -> File {
    let client = cluster.client();
    let file = client.create("/f", &Default::default()).unwrap();
    assert_eq!(file.layout().servers.len(), 4);
    file.write_at(0, &pattern(1, 0, 4 << 20)).unwrap();
    let started = Instant::now();
    let error = file
        .write_at(AT, &pattern(2, AT, LEN))
        .expect_err("a write held past the timeout must fail");
    eprintln!("stalled write: failed after {:?}: {error}", started.elapsed());
    assert!(
        matches!(error.code(), ErrorCode::TimedOut | ErrorCode::Unavailable),
        "{error}"
    );
    assert_eq!(
        servers_saying(cluster, BEGAN),
        4,
        "every io server began the write before the client gave up:\n{:#?}",
        io_logs(cluster)
    );
    assert_eq!(
        servers_saying(cluster, WENT_ON),
        0,
        "the stall ended before the test went on: the machine is too slow for it"
    );
    std::mem::drop(client);
    file
}

/// Waits until every io server finished the stalled write (it is done or dropped).
fn stall_over(cluster: &TestCluster) {
    common::wait_for(
        "the stalled writes to go on",
        Duration::from_millis(STALL_MS + 10_000),
        || (servers_saying(cluster, WENT_ON) == 4).then_some(()),
    );
    // What the worker does after the hook's line: the pwrite.
    std::thread::sleep(Duration::from_millis(300));
}

#[test]
fn a_timed_out_write_never_lands_over_a_newer_write_of_the_same_bytes() {
    let cluster = init();
    let file = stalled_write_timed_out(&cluster);
    // The application writes the same bytes anew (on new connections): acknowledged.
    let newer = pattern(3, AT, LEN);
    file.write_at(AT, &newer).unwrap();
    stall_over(&cluster);
    let mut back = vec![0u8; 4 << 20];
    assert_eq!(file.read_at(0, &mut back).unwrap(), back.len());
    let at = AT as usize;
    let stale = pattern(2, AT, LEN);
    let stale_bytes = back[at..at + LEN]
        .iter()
        .zip(&stale)
        .zip(&newer)
        .filter(|((b, s), n)| b == s && s != n)
        .count();
    assert_eq!(
        stale_bytes, 0,
        "{stale_bytes} bytes of the write that timed out landed over the newer one"
    );
    assert!(back[at..at + LEN] == newer[..], "the newer write's bytes differ");
    let mut expected = pattern(1, 0, 4 << 20);
    expected[at..at + LEN].copy_from_slice(&newer);
    assert!(back == expected, "bytes outside the rewritten range changed");
}

#[test]
fn a_timed_out_write_never_lands_after_a_newer_truncate() {
    let cluster = init();
    let file = stalled_write_timed_out(&cluster);
    // Cut the file where the stalled write starts: acknowledged.
    file.truncate(AT).unwrap();
    stall_over(&cluster);
    assert_eq!(
        file.size().unwrap(),
        AT,
        "the write that timed out grew the file again after the truncate"
    );
    let mut back = vec![0u8; AT as usize + LEN];
    assert_eq!(file.read_at(0, &mut back).unwrap(), AT as usize);
    assert!(back[..AT as usize] == pattern(1, 0, AT as usize)[..]);
}

/// A stuck write holds up only requests that touch its bytes: writes to other bytes of
/// the same objects, by worker or inline, are answered while it is still held.
#[test]
fn writes_to_other_bytes_of_the_object_do_not_wait_for_a_stuck_write() {
    let cluster = init();
    let client = cluster.client();
    let file = client.create("/g", &Default::default()).unwrap();
    assert_eq!(file.layout().servers.len(), 4);
    file.write_at(0, &pattern(1, 0, 4 << 20)).unwrap();
    let stuck = std::thread::spawn(move || file.write_at(AT, &pattern(2, AT, LEN)));
    common::wait_for(
        "every io server to begin the write",
        Duration::from_secs(10),
        || (servers_saying(&cluster, BEGAN) == 4).then_some(()),
    );
    // Another client (other connections); the same objects, other bytes: a large
    // write on each server (workers), then a small one on one server (event loop).
    let other = cluster.client();
    let writable = OpenOptions {
        write: true,
        ..Default::default()
    };
    let again = other.open("/g", &writable).unwrap();
    let started = Instant::now();
    let after = AT + LEN as u64;
    again.write_at(after, &pattern(4, after, LEN)).unwrap();
    again.write_at(AT - 4096, &pattern(5, AT - 4096, 4096)).unwrap();
    eprintln!("disjoint writes answered in {:?}", started.elapsed());
    assert_eq!(
        servers_saying(&cluster, WENT_ON),
        0,
        "the writes to other bytes were answered only after the stuck write went on"
    );
    let _ = stuck.join().unwrap();
    stall_over(&cluster);
    let mut back = vec![0u8; LEN];
    again.read_at(after, &mut back).unwrap();
    assert!(back == pattern(4, after, LEN));
    let mut back = vec![0u8; 4096];
    again.read_at(AT - 4096, &mut back).unwrap();
    assert!(back == pattern(5, AT - 4096, 4096));
}
