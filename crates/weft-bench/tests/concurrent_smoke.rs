//! `weft bench concurrent` end to end on a small real cluster: not timed, only that the
//! benchmark runs its worker processes, moves and verifies every byte, and reports it,
//! and draws its figure next to its JSON.

mod common;

use serde_json::Value;
use weft_testkit::TestCluster;

const MIB: u64 = 1 << 20;

#[test]
fn the_concurrent_benchmark_moves_and_verifies_every_byte_and_writes_json() {
    let cluster = TestCluster::start();
    let scratch = tempfile::tempdir().unwrap();
    let json = scratch.path().join("out").join("concurrent.json");
    let out = cluster
        .command("weft")
        .args(["bench", "concurrent", "--procs", "2", "--block-mib", "4"])
        .args(["--repeat", "1", "--stripe-size", "64K"])
        .arg("--json")
        .arg(&json)
        .arg("--local-dir")
        .arg(scratch.path())
        .output()
        .expect("running weft bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "weft bench failed:\n{stdout}{stderr}");
    assert!(stdout.contains("weft    read"), "no table:\n{stdout}");

    let results: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    // The regime measured is said and recorded: a cluster on this machine's loopback.
    assert_eq!(results["regime"]["kind"], "local", "{}", results["regime"]);
    assert!(stderr.contains("regime: local"), "{stderr}");
    let total = 2 * 4 * MIB;
    assert_eq!(results["total_bytes"], total);
    assert_eq!(results["block_bytes"], 4 * MIB);
    assert_eq!(results["stripe_size_bytes"], 64 * 1024);
    let runs = results["runs"].as_array().unwrap();
    let methods: Vec<&str> = runs.iter().map(|r| r["method"].as_str().unwrap()).collect();
    assert_eq!(methods, ["weft", "local"]);
    for run in runs {
        assert_eq!(run["size_after_write"], total, "{run}");
        assert_eq!(run["bytes_read"], total, "{run}");
        assert_eq!(run["bytes_verified"], total, "{run}");
        for key in ["write_ns", "sync_ns", "read_ns"] {
            let per_process = run[key].as_array().unwrap();
            assert_eq!(per_process.len(), 2, "{key}: one timing per process");
            assert!(
                per_process.iter().all(|t| t.as_u64().unwrap() > 0),
                "{key}: {run}"
            );
        }
    }
    let phases: Vec<(&str, &str)> = results["summary"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["method"].as_str().unwrap(), s["phase"].as_str().unwrap()))
        .collect();
    assert_eq!(
        phases,
        [
            ("local", "write"),
            ("local", "write+sync"),
            ("local", "read"),
            ("weft", "write"),
            ("weft", "write+sync"),
            ("weft", "read"),
        ]
    );

    // The SVG next to the JSON draws the summary: one bar per method and phase.
    let plot = common::svg_check::assert_draws(&json, &json.with_extension("svg"));
    assert!(stdout.contains("concurrent.svg"), "{stdout}");
    let panel = &plot["panels"][0];
    assert_eq!(
        panel["x_axis"]["categories"],
        serde_json::json!(["write", "write+sync", "read"])
    );
    for s in results["summary"].as_array().unwrap() {
        let phase = ["write", "write+sync", "read"]
            .iter()
            .position(|p| s["phase"] == *p)
            .unwrap();
        let series = panel["series"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == s["method"])
            .unwrap_or_else(|| panic!("no series for {s}"));
        assert!(
            series["points"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p[0].as_f64() == Some(phase as f64) && p[1] == s["mib_per_s"]),
            "{s} not plotted: {series}"
        );
    }

    // Without --keep both files are gone.
    let stat = cluster.weft(&["stat", "/bench.dat"]);
    assert!(!stat.status.success(), "the Weft file was left behind");
    common::assert_clean_and_plotted(&cluster, &json);
    // On one machine the local file is the page cache: no target against it (issue 36:
    // "MISSED (0.06x)" was printed where no target applies), the ratio shown instead.
    assert!(!stdout.contains("target: "), "{stdout}");
    assert!(stdout.contains("note: no target on one machine"), "{stdout}");
    let left: Vec<_> = std::fs::read_dir(scratch.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "out")
        .collect();
    assert!(left.is_empty(), "local files left behind: {left:?}");
}

/// A run that fails after making its Weft file removes it: before, the file was removed
/// only at the end of a successful run (here the local directory cannot be made, after
/// the Weft file was, and /fail.dat stayed in the namespace).
#[test]
fn a_failed_run_removes_its_weft_file() {
    let cluster = TestCluster::start();
    let scratch = tempfile::tempdir().unwrap();
    let out = cluster
        .command("weft")
        .args([
            "bench",
            "concurrent",
            "--procs",
            "1",
            "--block-mib",
            "1",
            "--path",
            "/fail.dat",
        ])
        .arg("--json")
        .arg(scratch.path().join("c.json"))
        .arg("--local-dir")
        .arg(scratch.path().join("missing"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("missing"), "{stderr}");
    common::assert_namespace_empty(&cluster, &stderr);
}

/// Interrupted like Ctrl-C in a terminal (SIGINT to the process group), a file benchmark
/// on the user's cluster removes its Weft file and its local directory and exits with
/// 128 + 2: before, it installed no handler, died at once and left /intr.dat behind.
#[test]
fn an_interrupted_file_benchmark_removes_its_weft_file_and_local_directory() {
    let cluster = TestCluster::start();
    let scratch = tempfile::tempdir().unwrap();
    let mut command = cluster.command("weft");
    command
        .args(["bench", "concurrent", "--procs", "2", "--block-mib", "8"])
        .args(["--repeat", "100", "--path", "/intr.dat", "--json"])
        .arg(scratch.path().join("out").join("c.json"))
        .arg("--local-dir")
        .arg(scratch.path());
    let client = cluster.client();
    // Until the file holds data: the runs are under way.
    let (code, stderr) = common::interrupt(&mut command, "a write in /intr.dat", || {
        client.stat("/intr.dat").is_ok_and(|a| a.size > 0)
    });
    assert_eq!(code, Some(130), "{stderr}");
    common::assert_namespace_empty(&cluster, &stderr);
    let left: Vec<_> = std::fs::read_dir(scratch.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "local files left behind: {left:?}\n{stderr}");
}

#[test]
fn the_benchmark_fails_clearly_without_a_cluster() {
    let home = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(weft_testkit::bin("weft"))
        .args(["bench", "concurrent", "--procs", "1", "--block-mib", "1"])
        .env("WEFT_HOME", home.path())
        .env_remove("WEFT_META")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("weft up"), "{stderr}");
}

#[test]
fn a_sweep_of_process_counts_plots_bandwidth_against_the_processes() {
    let cluster = TestCluster::start();
    let scratch = tempfile::tempdir().unwrap();
    let json = scratch.path().join("sweep.json");
    let out = cluster
        .command("weft")
        .args(["bench", "concurrent", "--procs", "1,2", "--block-mib", "2"])
        .args(["--repeat", "1", "--stripe-size", "64K", "--json"])
        .arg(&json)
        .arg("--local-dir")
        .arg(scratch.path())
        .output()
        .expect("running weft bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "weft bench failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let sweep = results["sweep"].as_array().unwrap();
    let procs: Vec<u64> = sweep.iter().map(|r| r["procs"].as_u64().unwrap()).collect();
    assert_eq!(procs, [1, 2]);
    assert_eq!(sweep[1]["total_bytes"], 2 * 2 * MIB);
    let plot = common::svg_check::assert_draws(&json, &json.with_extension("svg"));
    let titles: Vec<&str> = plot["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    assert_eq!(titles, ["write (MiB/s)", "write+sync (MiB/s)", "read (MiB/s)"]);
    for (panel, phase) in ["write", "write+sync", "read"].iter().enumerate() {
        for series in plot["panels"][panel]["series"].as_array().unwrap() {
            let points = series["points"].as_array().unwrap();
            for (point, results) in points.iter().zip(sweep) {
                assert_eq!(point[0], results["procs"].as_f64().unwrap());
                let row = results["summary"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|s| s["method"] == series["name"] && s["phase"] == *phase)
                    .unwrap();
                assert_eq!(point[1], row["mib_per_s"], "{phase} {}", series["name"]);
            }
            assert_eq!(points.len(), 2);
        }
    }
}

/// Why `--emulate-network` cannot run here (not root, no iproute2), if it cannot.
fn cannot_emulate() -> Option<String> {
    for program in ["ip", "tc"] {
        if std::process::Command::new(program).arg("-V").output().is_err() {
            return Some(format!("`{program}` not found (iproute2 is not installed)"));
        }
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    let needed = (1u64 << 12) | (1u64 << 21);
    (effective & needed != needed).then(|| "not root: CAP_NET_ADMIN and CAP_SYS_ADMIN are needed".into())
}

#[test]
fn with_emulate_network_the_benchmark_runs_behind_shaped_links_and_says_so() {
    if let Some(why) = cannot_emulate() {
        eprintln!("SKIPPED with_emulate_network_the_benchmark_runs_behind_shaped_links_and_says_so (not run, not passed): {why}");
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let json = scratch.path().join("concurrent.json");
    let out = std::process::Command::new(weft_testkit::bin("weft"))
        .args([
            "bench",
            "--emulate-network",
            "400mbit",
            "concurrent",
            "--procs",
            "2",
            "--block-mib",
            "8",
        ])
        .args(["--repeat", "1", "--no-sync"])
        .arg("--json")
        .arg(&json)
        .arg("--local-dir")
        .arg(scratch.path())
        .env_remove("WEFT_META")
        .env("WEFT_HOME", scratch.path().join("no-cluster-here"))
        .output()
        .expect("running weft bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "weft bench failed:\n{stdout}{stderr}");
    let results: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let regime = &results["regime"];
    assert_eq!(regime["kind"], "emulated-network", "{regime}");
    assert_eq!(regime["rate_bits_per_s"], 400_000_000u64, "{regime}");
    assert_eq!(regime["io_servers"], 4, "{regime}");
    assert!(stderr.contains("regime: emulated network"), "{stderr}");
    // The table compares with the links' total rate, and the bytes were verified.
    assert!(
        stdout.contains("target: weft read >= 0.85x the emulated links ("),
        "{stdout}"
    );
    let baselines: Vec<&str> = results["goals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["baseline"].as_str().unwrap())
        .collect();
    assert!(
        baselines.len() == 2 && baselines.iter().all(|g| g.starts_with("the emulated links")),
        "{baselines:?}"
    );
    for run in results["runs"].as_array().unwrap() {
        assert_eq!(run["bytes_verified"], 2 * 8 * MIB, "{run}");
    }
    // The throwaway cluster and its network are gone.
    let id = regime["cluster_id"]
        .as_str()
        .expect("the regime names its cluster id");
    let listed = |args: &[&str]| {
        let out = std::process::Command::new("ip").args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for (what, text) in [
        ("namespaces", listed(&["netns", "list"])),
        ("links", listed(&["-o", "link", "show"])),
    ] {
        assert!(
            !text.contains(&format!("weft-{id}")),
            "{what} of weft-{id} left:\n{text}"
        );
    }
}
