//! Helpers shared by the end-to-end tests: a seeded random generator, content that
//! both sides of a test can compute, waiting with a deadline, object files on disk.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};
use weft_client::{Client, ClientError, ErrorCode, InodeId, ServerId};
use weft_testkit::TestCluster;

#[allow(unused_imports)] // not every test uses it
pub use weft_testkit::Rng;

/// The seed of this run: `WEFT_TEST_SEED` if set, else from the clock. Printed with
/// the test's name so that a failure can be replayed.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("WEFT_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("{test}: seed {seed} (WEFT_TEST_SEED={seed} replays it)");
    seed
}

/// The byte a test expects at file offset `x` of content `tag`: computable by any
/// process without sharing buffers.
pub fn byte_at(tag: u64, x: u64) -> u8 {
    let mut z = x
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(tag.rotate_left(17));
    z = (z ^ (z >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (z ^ (z >> 29)) as u8
}

pub fn pattern(tag: u64, offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|k| byte_at(tag, offset + k)).collect()
}

/// Polls `probe` until it returns `Some`, failing the test after `limit`.
pub fn wait_for<T>(what: &str, limit: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Waits until the manager has purged every removed file's objects.
pub fn wait_orphans_purged(client: &Client) {
    wait_for("orphans to be purged", Duration::from_secs(20), || {
        (client.statfs().expect("statfs").meta.orphans == 0).then_some(())
    });
}

/// Asserts that `result` failed with `code`, and returns the error's message.
#[track_caller]
pub fn expect_code<T>(result: Result<T, ClientError>, code: ErrorCode) -> String {
    match result {
        Ok(_) => panic!("expected {code:?}, got success"),
        Err(e) => {
            assert_eq!(e.code(), code, "wrong error code; message: {e}");
            e.to_string()
        }
    }
}

/// Where io server `id` of a `weft up` cluster keeps the object of `inode` (the io
/// daemon's documented naming: `objects/<low byte hex>/<16 hex digits>`).
pub fn object_path(cluster: &TestCluster, id: ServerId, inode: InodeId) -> PathBuf {
    cluster
        .home()
        .join("data")
        .join(format!("server-{}", id.0))
        .join("objects")
        .join(format!("{:02x}", inode.0 & 0xff))
        .join(format!("{:016x}", inode.0))
}

/// The ids of the io servers of a cluster, in the cluster's order.
pub fn io_server_ids(client: &Client) -> Vec<ServerId> {
    client.cluster_info().io_servers.iter().map(|s| s.id).collect()
}

/// Output of a `weft` command as text, failing the test if it did not succeed.
#[track_caller]
pub fn weft_ok(cluster: &TestCluster, args: &[&str]) -> String {
    output_ok(cluster.weft(args), &format!("weft {args:?}"))
}

/// Standard output of a finished command as text, failing the test if it did not succeed.
#[track_caller]
pub fn output_ok(out: std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// Output of a `weft` command that must fail: (exit code, stderr).
#[track_caller]
pub fn weft_err(cluster: &TestCluster, args: &[&str]) -> (i32, String) {
    let out = cluster.weft(args);
    assert!(
        !out.status.success(),
        "weft {args:?} should have failed but printed:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What one cache manager reports (`weft status` prints the same).
pub fn manager_stats(cluster: &TestCluster, id: u32) -> weft_proto::msg::CacheStats {
    let timeouts = weft_rpc::Timeouts {
        connect: std::time::Duration::from_secs(5),
        request: std::time::Duration::from_secs(10),
    };
    let connection =
        weft_rpc::Connection::connect(&cluster.addr(id), "test", &cluster.auth(), timeouts).unwrap();
    match connection.call(&weft_proto::Request::CacheStats, &[]).unwrap().0 {
        weft_proto::Response::CacheStats(stats) => stats,
        other => panic!("{other:?}"),
    }
}

/// The server rows of `weft status` output: the lines that start with a server id.
pub fn server_rows(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|w| w.parse::<u32>().is_ok())
        })
        .collect()
}

/// Stops server `id` (SIGSTOP) and waits until every thread of it is stopped: the
/// signal is delivered asynchronously, and a thread already running could still
/// answer a request.
pub fn hang(cluster: &TestCluster, id: u32) {
    let pid = cluster.pid(id).expect("server running");
    cluster.signal(id, libc::SIGSTOP);
    wait_for("the server to stop", Duration::from_secs(10), || {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
            .all(|stat| {
                stat.rsplit(')')
                    .next()
                    .is_some_and(|rest| rest.trim_start().starts_with(['T', 't']))
            })
            .then_some(())
    });
}

/// Runs `weft put - PATH` fed `data` through a pipe, killing io server `victim` with
/// SIGKILL when half of it has been taken: the put is then in the middle for certain (it
/// waits for the rest), however fast the machine. It must succeed. (A fixed delay
/// before the kill let a quiet machine finish first.)
pub fn put_killing(cluster: &TestCluster, path: &str, data: &[u8], victim: u32) {
    use std::io::Write;
    let mut child = cluster
        .command("weft")
        .args(["put", "-", path])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let (first, rest) = data.split_at(data.len() / 2);
    input.write_all(first).unwrap();
    cluster.kill9(victim);
    input.write_all(rest).unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "weft put with io server {victim} killed halfway failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
