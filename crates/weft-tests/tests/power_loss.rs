//! Issue 30's power-loss test: every server's data directory (the manager's database,
//! the io servers' objects) lies on the power-loss layer (weft-faultfs, crate
//! weft-testkit's faultfs: what was not fsynced is undone at a cut, ext4's model),
//! 8 storm clients run, then the power goes: every weftd and every client is killed
//! with SIGKILL and the layer drops what was not durable. weftd restarts on the backing
//! directories directly, and the checker walks the namespace against every client's
//! log: what a client synced (its data, and every operation before the sync) is there;
//! each client's part of the namespace is a prefix of its log; every entry is whole
//! (weft_testkit::storm).
//!
//! Rounds: `WEFT_POWER_ROUNDS` (default 3); the seed: `WEFT_TEST_SEED`. Needs root
//! (mount(2) of a FUSE file system), as CI has.

mod common;

use common::Rng;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};
use weft_testkit::storm::{self, ClientLog, ClientSpec, Fate};
use weft_testkit::{ClusterOptions, TestCluster, TiedDir};

const CLIENTS: u32 = 8;
const TEST: &str = "power_cut_in_a_storm_keeps_what_was_synced";

fn rounds() -> u64 {
    std::env::var("WEFT_POWER_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
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

/// The cluster's data directory served by weft-faultfs from `<home>/data.backing`.
/// Unmounted (lazily) and ended on drop unless cut: a failing test leaves no mount.
struct PowerLayer<'a> {
    tied: &'a TiedDir,
    process: Child,
    data: PathBuf,
    backing: PathBuf,
    control: PathBuf,
    cut: bool,
}

impl Drop for PowerLayer<'_> {
    fn drop(&mut self) {
        if !self.cut {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.data)
                .status();
            self.tied.stop(&mut self.process);
        }
    }
}

impl<'a> PowerLayer<'a> {
    fn over(tied: &'a TiedDir, home: &Path, round: u64) -> PowerLayer<'a> {
        let data = home.join("data");
        let backing = home.join("data.backing");
        std::fs::rename(&data, &backing).unwrap();
        std::fs::create_dir(&data).unwrap();
        let control = tied.path().join(format!("cut-{round}"));
        let process = tied.spawn(
            std::process::Command::new(weft_testkit::bin("weft-faultfs"))
                .arg(&backing)
                .arg(&data)
                .arg(&control)
                .stderr(std::fs::File::create(tied.path().join(format!("faultfs-{round}.log"))).unwrap()),
        );
        wait(
            "the power-loss layer to be mounted",
            Duration::from_secs(30),
            || weft_testkit::is_mounted(&data),
        );
        PowerLayer {
            tied,
            process,
            data,
            backing,
            control,
            cut: false,
        }
    }

    /// Drops what was not durable, unmounts, and puts the backing directory back in
    /// place. Every process using the layer must be dead.
    fn cut(mut self) -> String {
        let tied = self.tied;
        std::fs::write(&self.control, b"").unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = self.process.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "weft-faultfs did not end after the cut"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        tied.forget(&self.process);
        self.cut = true;
        assert!(status.success(), "weft-faultfs: {status}");
        let mut done = self.control.clone().into_os_string();
        done.push(".done");
        let outcome = std::fs::read_to_string(&done).unwrap();
        assert!(!outcome.starts_with("error"), "the power cut failed: {outcome}");
        wait("the layer to be unmounted", Duration::from_secs(30), || {
            !weft_testkit::is_mounted(&self.data)
        });
        std::fs::remove_dir(&self.data).unwrap();
        std::fs::rename(&self.backing, &self.data).unwrap();
        outcome.trim().to_owned()
    }
}

#[test]
fn power_cut_in_a_storm_keeps_what_was_synced() {
    if storm::client_main_if_asked() {
        return;
    }
    let seed = common::seed(TEST);
    let mut rng = Rng::new(seed);
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 2,
        ..ClusterOptions::default()
    });
    let ids: Vec<u32> = cluster.config().servers.iter().map(|s| s.id).collect();
    let tied = TiedDir::new("weft-power-loss-");
    let env = cluster.env();
    let mut synced_total = 0;
    for round in 0..rounds() {
        // Servers stop, their directories go under the layer, they start again there.
        let out = cluster.weft(&["down"]);
        assert!(
            out.status.success(),
            "weft down: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let layer = PowerLayer::over(&tied, cluster.home(), round);
        cluster.restart();
        let admin = cluster.client();
        let root = format!("/r{round}");
        admin.mkdir(&root, 0o755).unwrap();
        admin.mkdir(&format!("{root}/shared"), 0o755).unwrap();
        for k in 0..CLIENTS {
            admin.mkdir(&format!("{root}/c{k}"), 0o755).unwrap();
        }
        let dir = tied.path().join(format!("r{round}"));
        std::fs::create_dir(&dir).unwrap();
        let specs: Vec<ClientSpec> = (0..CLIENTS)
            .map(|k| ClientSpec {
                id: k,
                root: root.clone(),
                log: dir.join(format!("c{k}.log")),
                stop: dir.join("stop"),
                seed: rng.next_u64(),
                sync_percent: 20,
                mount: None,
            })
            .collect();
        let mut children: Vec<_> = specs
            .iter()
            .map(|s| storm::spawn_client(&tied, &env, TEST, s))
            .collect();
        wait(
            "every client's first operations and syncs",
            Duration::from_secs(60),
            || {
                specs.iter().all(|s| {
                    let log = ClientLog::read(&s.log);
                    log.acknowledged() >= 10 && !log.syncs.is_empty()
                })
            },
        );
        std::thread::sleep(Duration::from_millis(rng.between(0, 400)));
        // The power goes: everything dies at once, then the disk loses what it had not
        // made durable.
        for child in &mut children {
            tied.stop(child);
        }
        for &id in &ids {
            cluster.kill9(id);
        }
        let undone = layer.cut();
        cluster.restart();

        let found = storm::walk(&admin, &root).unwrap_or_else(|e| panic!("round {round} (seed {seed}): {e}"));
        let mut summary = Vec::new();
        for (k, spec) in specs.iter().enumerate() {
            let log = ClientLog::read(&spec.log);
            let held = storm::check_client(k as u32, &log, Fate::PowerCut, &found).unwrap_or_else(|e| {
                panic!("round {round} (seed {seed}, WEFT_TEST_SEED replays it; the cut {undone}):\n{e}")
            });
            synced_total += log.syncs.len();
            summary.push(format!(
                "c{k}: {} ok/{} synced/{} held",
                log.acknowledged(),
                log.syncs.len(),
                held
            ));
        }
        eprintln!("round {round}: the cut {undone}; {}", summary.join(", "));
    }
    let admin = cluster.client();
    let everything = storm::walk(&admin, "/").unwrap();
    let files = everything
        .values()
        .filter(|f| matches!(f, storm::Found::File { .. }))
        .count();
    let stats = admin.statfs().unwrap();
    assert_eq!(stats.meta.files as usize, files, "file count");
    assert_eq!(
        stats.meta.directories as usize,
        everything.len() - files + 1,
        "directory count (with the root)"
    );
    assert!(synced_total > 0);
}
