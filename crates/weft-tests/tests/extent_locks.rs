//! Extent locks (MPI-IO's atomic mode) against real weftd processes: a lock held by a
//! client process keeps others out of its bytes (and only those), a waiter gives up at
//! its timeout rather than hanging, and when the holder is killed its connection
//! closes and the lock goes with it; the counts show in `LockStats`, the metrics and
//! `weft status`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weft_client::{Client, CreateOptions, ErrorCode, LayoutRequest, OpenOptions};
use weft_proto::msg::{Request, Response};
use weft_testkit::TestCluster;

/// The child process that holds a lock finds its file here.
const HOLDER_ENV: &str = "WEFT_TESTS_LOCK_HOLDER";
const STRIPE_BYTES: u64 = 64 << 10;
/// The waiting client's timeout (WEFT_TIMEOUT_MS): short, so that a wait that is not
/// bounded shows as a hang of this test rather than a minute.
const TIMEOUT_MS: u64 = 1500;

/// Child: locks the first MiB of the file exclusively, says so, and sleeps until killed.
fn hold_lock(path: &str) {
    let client = Client::from_env().expect("holder: connecting through WEFT_HOME");
    let file = client.open(path, &OpenOptions::default()).unwrap();
    let lock = file.lock_extents(&[(0, 1 << 20)], true).unwrap();
    assert_eq!(lock.servers(), 4);
    println!("locked");
    std::thread::sleep(Duration::from_secs(600));
    drop(lock);
}

fn lock_stats(cluster: &TestCluster, client: &Client) -> Vec<weft_proto::msg::LockStats> {
    let pool = weft_rpc::ConnectionPool::new("test", cluster.auth(), Default::default());
    client
        .cluster_info()
        .io_servers
        .iter()
        .map(
            |s| match pool.call(&s.addr, &Request::LockStats, &[]).unwrap().0 {
                Response::LockStats(st) => st,
                other => panic!("LockStats answered {other:?}"),
            },
        )
        .collect()
}

#[test]
fn a_killed_holders_extent_lock_goes_with_its_connection_and_waits_are_bounded() {
    if let Ok(path) = std::env::var(HOLDER_ENV) {
        return hold_lock(&path);
    }
    // This process's clients (the waiters) give up after TIMEOUT_MS.
    std::env::set_var("WEFT_TIMEOUT_MS", TIMEOUT_MS.to_string());
    let cluster = TestCluster::start();
    let client = cluster.client();
    let path = "/locked";
    client
        .create(
            path,
            &CreateOptions {
                layout: LayoutRequest {
                    stripe_size_bytes: Some(STRIPE_BYTES),
                    stripe_count: Some(4),
                    ..LayoutRequest::default()
                },
                ..CreateOptions::default()
            },
        )
        .unwrap();
    let mut holder = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_killed_holders_extent_lock_goes_with_its_connection_and_waits_are_bounded",
            "--nocapture",
        ])
        .env(HOLDER_ENV, path)
        .env_remove("WEFT_TIMEOUT_MS")
        .envs(cluster.env())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    BufReader::new(holder.stdout.take().unwrap())
        .lines()
        .map(|l| l.unwrap())
        .find(|l| l.trim() == "locked")
        .unwrap_or_else(|| panic!("the holder never took its lock"));

    let file = client.open(path, &OpenOptions::default()).unwrap();
    // Bytes past the held MiB, on every server: granted at once.
    file.lock_extents(&[(1 << 20, 1 << 20)], true)
        .unwrap()
        .release()
        .unwrap();
    // A reader of one byte inside it waits, and gives up at the timeout with an error
    // naming the wait, holding nothing.
    let started = Instant::now();
    let e = match file.lock_extents(&[(300_000, 1)], false) {
        Ok(_) => panic!("a shared lock was granted inside an exclusive one"),
        Err(e) => e,
    };
    let waited = started.elapsed();
    assert_eq!(e.code(), ErrorCode::TimedOut, "{e}");
    assert!(e.to_string().contains("extent lock"), "{e}");
    assert!(
        waited >= Duration::from_millis(TIMEOUT_MS) && waited < Duration::from_millis(TIMEOUT_MS + 3000),
        "gave up after {waited:?}"
    );
    let stats = lock_stats(&cluster, &client);
    assert!(stats.iter().map(|s| s.conflicts).sum::<u64>() >= 2, "{stats:?}");
    assert_eq!(stats.iter().map(|s| s.held).sum::<u64>(), 4, "{stats:?}");

    // The holder dies: its connections close and its locks go.
    holder.kill().unwrap();
    holder.wait().unwrap();
    let started = Instant::now();
    let lock = loop {
        match file.lock_extents(&[(0, 1 << 20)], true) {
            Ok(lock) => break lock,
            Err(e) if e.code() == ErrorCode::TimedOut && started.elapsed() < Duration::from_secs(10) => {}
            Err(e) => panic!("the killed holder's lock stayed: {e}"),
        }
    };
    assert_eq!(lock.servers(), 4);
    let stats = lock_stats(&cluster, &client);
    assert_eq!(stats.iter().map(|s| s.held).sum::<u64>(), 4, "{stats:?}");
    lock.release().unwrap();
    let stats = lock_stats(&cluster, &client);
    assert_eq!(stats.iter().map(|s| s.held).sum::<u64>(), 0, "{stats:?}");

    // weft status and the metrics show the counts.
    let out = cluster.weft(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("extent locks:")).collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines.iter().any(|l| !l.contains(" 0 conflicts")), "{text}");
    let pool = weft_rpc::ConnectionPool::new("test", cluster.auth(), Default::default());
    let addr = &client.cluster_info().io_servers[0].addr;
    let (_, metrics) = pool.call(addr, &Request::Metrics { text: true }, &[]).unwrap();
    let metrics = String::from_utf8(metrics).unwrap();
    for name in [
        "weft_io_lock_requests_total",
        "weft_io_lock_grants_total",
        "weft_io_lock_conflicts_total",
        "weft_io_lock_waits_total",
        "weft_io_locks_held",
    ] {
        assert!(metrics.contains(name), "{name} missing from:\n{metrics}");
    }
}

#[test]
fn shared_locks_share_and_keep_writers_out_across_clients() {
    let cluster = TestCluster::start();
    let (a, b) = (cluster.client(), cluster.client());
    let path = "/shared";
    a.create(path, &CreateOptions::default()).unwrap();
    let fa = a.open(path, &OpenOptions::default()).unwrap();
    let fb = b.open(path, &OpenOptions::default()).unwrap();
    // Two readers of overlapping noncontiguous ranges share.
    let ra = fa
        .lock_extents(&[(0, 10), (100_000, 10), (500_000, 10)], false)
        .unwrap();
    let rb = fb.lock_extents(&[(5, 10), (500_005, 10)], false).unwrap();
    // The protocol directly: a writer of bytes between the readers' ranges is granted;
    // one overlapping a reader's is answered Busy, never parked.
    let pool = weft_rpc::ConnectionPool::new("test", cluster.auth(), Default::default());
    // Locks taken as a server would (this test is about conflicts, not capabilities).
    pool.set_capability_source(cluster.server_capabilities());
    let server0 = &a.cluster_info().io_servers[0].addr;
    let inode = fa.inode();
    let lock = |offset, len| {
        pool.call(
            server0,
            &Request::ExtentLock {
                inode,
                exclusive: true,
                attempt: 0,
                ranges: vec![weft_proto::Range { offset, len }],
            },
            &[],
        )
    };
    let between = match lock(20, 1000).unwrap().0 {
        Response::Token(t) => t,
        other => panic!("{other:?}"),
    };
    let e = lock(9, 1).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Busy, "{e}");
    pool.call(
        server0,
        &Request::ExtentUnlock {
            inode,
            token: between,
        },
        &[],
    )
    .unwrap();
    // A second unlock of the same token is refused: it is not held.
    let e = pool
        .call(
            server0,
            &Request::ExtentUnlock {
                inode,
                token: between,
            },
            &[],
        )
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Stale, "{e}");
    ra.release().unwrap();
    assert_eq!(lock(9, 1).unwrap_err().code(), ErrorCode::Busy);
    rb.release().unwrap();
    // Both readers gone: the writer gets in.
    assert!(matches!(lock(0, 1 << 30).unwrap().0, Response::Token(_)));
}

/// On servers that are io servers and cache managers at once (`--cache colocated`),
/// the io requests numbered past the cache range (extent locks, their counts, object
/// stamps) reach the io role; the cache role once claimed them and refused them as
/// "not a cache manager operation", so MPI-IO's atomic mode failed on such clusters.
#[test]
fn extent_locks_work_on_servers_that_are_also_cache_managers() {
    let cluster = TestCluster::start_with(&weft_testkit::ClusterOptions::cached("colocated", "64M"));
    let (a, b) = (cluster.client(), cluster.client());
    let path = "/colocated";
    a.create(path, &CreateOptions::default()).unwrap();
    let fa = a.open(path, &OpenOptions::default()).unwrap();
    let fb = b.open(path, &OpenOptions::default()).unwrap();
    let held = fa.lock_extents(&[(0, 1 << 20)], true).unwrap();
    assert_eq!(held.servers(), 4);
    held.release().unwrap();
    fb.lock_extents(&[(4096, 1)], true).unwrap().release().unwrap();
    let stats = lock_stats(&cluster, &a);
    assert!(stats.iter().map(|s| s.grants).sum::<u64>() >= 5, "{stats:?}");
}
