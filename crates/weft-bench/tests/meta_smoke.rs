//! `weft bench meta --quick` end to end on a small real cluster and a real FUSE mount:
//! not timed, only that every phase and program runs on every method it applies to,
//! in alternating order, with min/median/max and ratios to the local directory, and
//! that nothing is left behind (no mount, no temporary directory, nothing in Weft).

mod common;

use serde_json::Value;
use weft_testkit::TestCluster;

#[test]
fn the_metadata_benchmark_runs_every_phase_and_program_and_leaves_nothing() {
    let cluster = TestCluster::start();
    let scratch = tempfile::tempdir().unwrap();
    let tmp = scratch.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let json = scratch.path().join("out").join("meta.json");
    let out = cluster
        .command("weft")
        .args(["bench", "meta", "--quick", "--procs", "2", "--json"])
        .arg(&json)
        .env("TMPDIR", &tmp)
        .output()
        .expect("running weft bench meta");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "weft bench meta failed:\n{stdout}{stderr}");
    assert!(stdout.contains("git clone"), "no programs table:\n{stdout}");
    assert!(
        stdout.contains("target: mount create (shared) >= 0.50x a local directory: "),
        "{stdout}"
    );

    let results: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(results["repeats"], 2);
    assert_eq!(results["files"], 50, "25 files per process with --quick");
    // Methods alternate between repeats: forwards, then backwards.
    let mut order: Vec<(u64, String)> = Vec::new();
    for run in results["phase_runs"].as_array().unwrap() {
        let key = (
            run["repeat"].as_u64().unwrap(),
            run["method"].as_str().unwrap().to_owned(),
        );
        if order.last() != Some(&key) {
            order.push(key);
        }
        assert!(run["ops_per_s"].as_f64().unwrap() > 0.0, "{run}");
    }
    let methods: Vec<&str> = order.iter().map(|(_, m)| m.as_str()).collect();
    assert_eq!(methods, ["native", "mount", "local", "local", "mount", "native"]);
    // Every phase of every method in both directory layouts, each with a ratio.
    let phases = results["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 3 * 2 * 7);
    for p in phases {
        let (lo, mid, hi) = (
            p["ops_per_s_min"].as_f64().unwrap(),
            p["ops_per_s_median"].as_f64().unwrap(),
            p["ops_per_s_max"].as_f64().unwrap(),
        );
        assert!(0.0 < lo && lo <= mid && mid <= hi, "{p}");
        assert!(p["vs_local"].as_f64().unwrap() > 0.0, "{p}");
    }
    // The programs on the mount and locally; only the scan natively.
    let workloads: Vec<(&str, &str)> = results["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["method"].as_str().unwrap(), w["workload"].as_str().unwrap()))
        .collect();
    for method in ["mount", "local"] {
        for w in ["tar", "find", "du", "cp", "git", "scan", "rm"] {
            assert!(workloads.contains(&(method, w)), "{method} {w}: {workloads:?}");
        }
    }
    assert!(workloads.contains(&("native", "scan")), "{workloads:?}");
    assert!(!workloads.contains(&("native", "tar")), "{workloads:?}");

    // Unmounted and every temporary directory gone; nothing left in Weft.
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind in TMPDIR: {left:?}");
    let stat = cluster.weft(&["stat", "/bench-meta"]);
    assert!(
        !stat.status.success(),
        "the benchmark's Weft directory was left behind"
    );
    // A readable SVG next to the JSON, which `weft bench plot` reads (before issue 36:
    // no SVG, and "not written by `weft bench`").
    common::assert_clean_and_plotted(&cluster, &json);
}
