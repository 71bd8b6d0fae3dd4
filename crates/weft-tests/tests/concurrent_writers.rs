//! Concurrent writers to disjoint regions of one file, from separate connections: threads
//! of this process, each with its own `Client`, and child processes at the same time.
//! Region boundaries fall inside stripes, so writers share stripes and servers.

mod common;

use common::{byte_at, pattern, Rng};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use weft_client::{Client, CreateOptions, LayoutRequest, OpenOptions};
use weft_testkit::TestCluster;

const STRIPE_BYTES: u64 = 16 << 10;
/// Child processes find their job in this variable: "path,start,end,tag,seed".
const CHILD_ENV: &str = "WEFT_TESTS_CHILD_REGION";

/// Writes `[start, end)` of `path` with `pattern(tag)`, in chunks of random sizes sent
/// in random order, then syncs.
fn write_region(client: &Client, path: &str, start: u64, end: u64, tag: u64, seed: u64) {
    let mut rng = Rng::new(seed);
    let file = client
        .open(
            path,
            &OpenOptions {
                write: true,
                ..OpenOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("open {path}: {e}"));
    let mut chunks = Vec::new();
    let mut at = start;
    while at < end {
        let n = rng.between(1, 100_000).min(end - at);
        chunks.push((at, n));
        at += n;
    }
    rng.shuffle(&mut chunks);
    for (offset, len) in chunks {
        let data = pattern(tag, offset, len as usize);
        file.write_at(offset, &data)
            .unwrap_or_else(|e| panic!("write {len} at {offset}: {e}"));
    }
    file.sync().unwrap();
}

/// The body of the child processes the test starts: they run this test binary again
/// with their region in `CHILD_ENV` (so no separate, "ignored" entry point exists).
fn child_writer(job: &str) {
    let f: Vec<&str> = job.split(',').collect();
    let num = |k: usize| f[k].parse::<u64>().unwrap();
    let client = Client::from_env().expect("child: connecting through WEFT_HOME");
    write_region(&client, f[0], num(1), num(2), num(3), num(4));
}

#[test]
fn concurrent_writers_to_one_file() {
    if let Ok(job) = std::env::var(CHILD_ENV) {
        return child_writer(&job);
    }
    let seed = common::seed("concurrent_writers_to_one_file");
    let mut rng = Rng::new(seed);
    let cluster = TestCluster::start();
    let path = "/shared";
    let tag = rng.next_u64();
    cluster
        .client()
        .create(
            path,
            &CreateOptions {
                layout: LayoutRequest {
                    cache: None,
                    stripe_size_bytes: Some(STRIPE_BYTES),
                    stripe_count: Some(4),
                    first_server: None,
                    redundancy: None,
                },
                ..CreateOptions::default()
            },
        )
        .unwrap();
    const THREADS: usize = 4;
    const PROCESSES: usize = 3;
    // Regions of uneven sizes whose boundaries are not stripe aligned.
    let mut bounds = vec![0u64];
    for _ in 0..THREADS + PROCESSES {
        let last = *bounds.last().unwrap();
        bounds.push(last + 1_000_000 + rng.below(500_000));
    }
    let total = *bounds.last().unwrap();

    let exe = std::env::current_exe().unwrap();
    let mut children = Vec::new();
    for p in 0..PROCESSES {
        let region = THREADS + p;
        let mut command = Command::new(&exe);
        command
            .args(["--exact", "concurrent_writers_to_one_file", "--test-threads=1"])
            .env(
                CHILD_ENV,
                format!(
                    "{path},{},{},{tag},{}",
                    bounds[region],
                    bounds[region + 1],
                    seed.wrapping_add(region as u64)
                ),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in cluster.env() {
            command.env(k, v);
        }
        children.push(command.spawn().expect("starting a child writer"));
    }
    let barrier = Arc::new(Barrier::new(THREADS));
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (start, end) = (bounds[t], bounds[t + 1]);
            let barrier = barrier.clone();
            let meta = cluster.meta_addr();
            let auth = cluster.auth();
            scope.spawn(move || {
                // Its own client: its own connections to every server.
                let client = Client::connect_with(&meta, auth.clone()).unwrap();
                barrier.wait();
                write_region(&client, path, start, end, tag, seed.wrapping_add(t as u64));
            });
        }
    });
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "a child writer failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // The child really ran the writer (the filter matched one test).
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("1 passed"),
            "a child did not run the writer:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }

    let reader = cluster.client();
    assert_eq!(reader.stat(path).unwrap().size, total);
    let file = reader.open(path, &OpenOptions::default()).unwrap();
    let mut back = vec![0u8; total as usize];
    assert_eq!(file.read_at(0, &mut back).unwrap(), total as usize);
    if let Some(x) = (0..total).find(|&x| back[x as usize] != byte_at(tag, x)) {
        let region = bounds.iter().rposition(|&b| b <= x).unwrap();
        panic!(
            "byte {x} (region {region}, written by {}) is wrong",
            if region < THREADS {
                "a thread"
            } else {
                "a child process"
            }
        );
    }
}
