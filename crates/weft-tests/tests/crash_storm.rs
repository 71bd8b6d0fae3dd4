//! Issue 30's crash test: 8 client processes (7 native clients, one through a Weft
//! mount) storm the metadata manager (creates,
//! mkdirs, renames, unlinks, chmods and appends, in their own and a shared directory,
//! with and without syncs among them) while the test kills the manager with SIGKILL at a
//! random moment, in some rounds with two clients beside it, restarts it on the same
//! directory and lets the survivors carry on. Then a checker walks the namespace against
//! every client's log (weft_testkit::storm): what a surviving client got an answer for
//! is there exactly once; what a killed client synced is there, and its part of the
//! namespace is a prefix of its log; no dangling entry, every file readable, link
//! counts right, the manager's counters agree.
//!
//! Rounds: `WEFT_CRASH_ROUNDS` (default 20, about a minute on 2 cores); the seed:
//! `WEFT_TEST_SEED`.

mod common;

use common::Rng;
use std::time::{Duration, Instant};
use weft_testkit::storm::{self, ClientLog, ClientSpec, Fate};
use weft_testkit::{ClusterOptions, TestCluster, TiedDir, WeftMount};

const CLIENTS: u32 = 8;
const TEST: &str = "manager_killed_in_a_storm_of_8_clients_keeps_what_it_answered";

fn rounds() -> u64 {
    std::env::var("WEFT_CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20)
}

/// Acknowledged operations in each log so far.
fn acknowledged(logs: &[std::path::PathBuf]) -> Vec<usize> {
    logs.iter().map(|l| ClientLog::read(l).acknowledged()).collect()
}

/// Operations with an outcome (acknowledged, or failed and looked at) in each log.
fn resolved(logs: &[std::path::PathBuf]) -> Vec<usize> {
    logs.iter().map(|l| ClientLog::read(l).resolved()).collect()
}

fn wait(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn manager_killed_in_a_storm_of_8_clients_keeps_what_it_answered() {
    if storm::client_main_if_asked() {
        return;
    }
    storm_rounds(TEST, 0, rounds());
}

const TEST_INTERVAL: &str = "with_a_commit_interval_a_killed_manager_loses_nothing_survivors_were_answered";

/// The same storm with acknowledgement at apply (a 20 ms commit interval): what the
/// manager answered and had not made durable dies with it, and the surviving clients
/// replay it after the restart (issue 30 item 2). Without replay this fails at once
/// (an acknowledged mkdir or rename of a survivor lost). Fewer rounds: each waits for
/// the replay window of the clients killed with the manager (`WEFT_CRASH_ROUNDS`
/// divided by 4, at least 2).
#[test]
fn with_a_commit_interval_a_killed_manager_loses_nothing_survivors_were_answered() {
    if storm::client_main_if_asked() {
        return;
    }
    storm_rounds(TEST_INTERVAL, 20, (rounds() / 4).max(2));
}

fn storm_rounds(test: &str, interval_ms: u64, rounds: u64) {
    let seed = common::seed(test);
    let mut rng = Rng::new(seed);
    // Two io servers: the storm is about the manager, and fewer servers leave CI's two
    // cores to it.
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 2,
        extra: vec!["--commit-interval-ms".into(), interval_ms.to_string()],
        ..ClusterOptions::default()
    });
    let admin = cluster.client();
    let tied = TiedDir::new("weft-crash-storm-");
    let mount = WeftMount::start(&cluster, &tied, "mnt");
    let env = cluster.env();
    let (mut answered, mut failed, mut killed_total) = (0, 0, 0);
    for round in 0..rounds {
        let root = format!("/r{round}");
        admin.mkdir(&root, 0o755).unwrap();
        admin.mkdir(&format!("{root}/shared"), 0o755).unwrap();
        for k in 0..CLIENTS {
            admin.mkdir(&format!("{root}/c{k}"), 0o755).unwrap();
        }
        let dir = tied.path().join(format!("r{round}"));
        std::fs::create_dir(&dir).unwrap();
        let stop = dir.join("stop");
        // One round in three without syncs, the others with a sync after a creation or
        // an append now and then.
        let sync_percent = if round % 3 == 0 { 0 } else { 15 };
        let specs: Vec<ClientSpec> = (0..CLIENTS)
            .map(|k| ClientSpec {
                id: k,
                root: root.clone(),
                log: dir.join(format!("c{k}.log")),
                stop: stop.clone(),
                seed: rng.next_u64(),
                sync_percent,
                // The last client works through a Weft mount.
                mount: (k == CLIENTS - 1).then(|| mount.path().to_owned()),
            })
            .collect();
        let logs: Vec<_> = specs.iter().map(|s| s.log.clone()).collect();
        let mut children: Vec<_> = specs
            .iter()
            .map(|s| storm::spawn_client(&tied, &env, test, s))
            .collect();
        // The crash comes after every client did a few operations and a random while.
        wait("every client's first operations", Duration::from_secs(60), || {
            acknowledged(&logs).iter().all(|&n| n >= 5)
        });
        std::thread::sleep(Duration::from_millis(rng.between(0, 400)));
        // Odd rounds: two clients die with the manager.
        let victims: Vec<usize> = if round % 2 == 1 {
            let a = rng.below(CLIENTS as u64) as usize;
            vec![
                a,
                (a + 1 + rng.below(CLIENTS as u64 - 1) as usize) % CLIENTS as usize,
            ]
        } else {
            Vec::new()
        };
        for &v in &victims {
            tied.stop(&mut children[v]);
        }
        cluster.kill9(0);
        let at_kill = resolved(&logs);
        std::thread::sleep(Duration::from_millis(rng.between(0, 300)));
        cluster.restart();
        // The survivors carry on past the restart before they stop. (Operations, not
        // successes: a client whose acknowledged operations were lost fails every one
        // that builds on them; the checker then says what was lost.)
        wait("operations after the restart", Duration::from_secs(60), || {
            resolved(&logs)
                .iter()
                .enumerate()
                .all(|(k, &n)| victims.contains(&k) || n >= at_kill[k] + 10)
        });
        std::fs::write(&stop, b"").unwrap();
        for (k, child) in children.iter_mut().enumerate() {
            if victims.contains(&k) {
                continue;
            }
            let deadline = Instant::now() + Duration::from_secs(60);
            let status = loop {
                if let Some(status) = child.try_wait().unwrap() {
                    break status;
                }
                assert!(Instant::now() < deadline, "client {k} did not stop");
                std::thread::sleep(Duration::from_millis(20));
            };
            tied.forget(child);
            assert!(
                status.success(),
                "client {k} failed ({status}):\n{}",
                std::fs::read_to_string(specs[k].log.with_extension("stderr")).unwrap_or_default()
            );
        }

        let found = storm::walk(&admin, &root).unwrap_or_else(|e| {
            panic!("round {round} (seed {seed}): the walk of {root}, whose directories were made (and acknowledged) before the storm, failed: {e}")
        });
        let mut summary = Vec::new();
        for k in 0..CLIENTS {
            let log = ClientLog::read(&logs[k as usize]);
            let fate = if victims.contains(&(k as usize)) {
                Fate::Killed
            } else {
                Fate::Survived
            };
            let held = storm::check_client(k, &log, fate, &found)
                .unwrap_or_else(|e| panic!("round {round} (seed {seed}, WEFT_TEST_SEED replays it):\n{e}"));
            answered += log.acknowledged();
            failed += log.failed();
            summary.push(format!(
                "c{k}{}: {} ok/{} err/{} held",
                if fate == Fate::Killed { " (killed)" } else { "" },
                log.acknowledged(),
                log.failed(),
                held
            ));
        }
        killed_total += victims.len();
        eprintln!("round {round}: {}", summary.join(", "));
    }
    // The manager's counters agree with the whole namespace.
    let everything = storm::walk(&admin, "/").unwrap();
    let files = everything
        .values()
        .filter(|f| matches!(f, storm::Found::File { .. }))
        .count();
    let dirs = everything.len() - files;
    let stats = admin.statfs().unwrap();
    assert_eq!(stats.meta.files as usize, files, "file count");
    assert_eq!(
        stats.meta.directories as usize,
        dirs + 1,
        "directory count (with the root)"
    );
    eprintln!(
        "{rounds} rounds (commit interval {interval_ms} ms): {answered} operations answered, {failed} failed across restarts, {killed_total} clients killed"
    );
    // No assertion on `failed`: with replay (issue 30 item 2) a surviving client sees no
    // error at all. That every kill came mid-storm is by construction: each survivor
    // worked before it (the first wait) and after the restart (the second).
}
