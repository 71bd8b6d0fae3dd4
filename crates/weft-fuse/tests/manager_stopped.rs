//! A mount whose metadata manager stops answering (a hung or unreachable manager) fails
//! each name lookup after one client timeout, not two: the lookup an open checks
//! (`checked_lookup` in fs.rs) used to fall back to a plain lookup when the check could
//! not reach the manager, which waited the whole timeout again.
//!
//! Its own test binary: it stops the manager (SIGSTOP) and uses a short client timeout
//! for the mount daemon only.

mod common;

use common::Mount;
use std::time::{Duration, Instant};
use weft_testkit::TestCluster;

/// The mount daemon's request timeout (`WEFT_TIMEOUT_MS`).
const TIMEOUT_MS: u64 = 2000;

/// The metadata manager's server id in a test cluster.
const MANAGER: u32 = 0;

#[test]
fn a_lookup_with_the_manager_stopped_waits_one_timeout() {
    let cluster = TestCluster::start();
    let mount = Mount::with_env(&cluster, &[], &[("WEFT_TIMEOUT_MS", &TIMEOUT_MS.to_string())]);
    let file = mount.join("f");
    std::fs::write(&file, b"hello").unwrap();
    assert_eq!(std::fs::read(&file).unwrap(), b"hello");
    // Let the kernel's entry of `f` time out (1 s), then refresh the root's attributes
    // so that the next open's walk asks only for `f`: the lookup whose check is tested.
    std::thread::sleep(Duration::from_millis(1300));
    std::fs::metadata(mount.path()).unwrap();

    cluster.signal(MANAGER, libc::SIGSTOP);
    let started = Instant::now();
    let opened = std::fs::File::open(&file);
    let waited = started.elapsed();
    cluster.signal(MANAGER, libc::SIGCONT);

    assert!(opened.is_err(), "an open with the manager stopped succeeded");
    // The kernel asks twice (its walk, then once more); each lookup used to wait two
    // timeouts (4 in all), now one (2 in all).
    let limit = Duration::from_millis(3 * TIMEOUT_MS + TIMEOUT_MS / 2);
    assert!(
        waited < limit,
        "the open took {waited:?} with the manager stopped (timeout {TIMEOUT_MS} ms): a lookup waited more than one timeout\n{}",
        mount.log_text()
    );
    // Once the manager answers again, the mount works.
    assert_eq!(std::fs::read(&file).unwrap(), b"hello");
}
