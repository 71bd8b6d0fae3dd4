//! `weft bench open-close` end to end on a small real cluster: not timed, only that the
//! MPI program runs its three loops on Weft and on the local baseline, verifies what it
//! read, removes its directory, writes JSON and a readable SVG, and reports per-loop
//! times and the target lines with their baseline; and that
//! bad arguments are refused before anything runs.

mod common;

use serde_json::Value;
use weft_testkit::TestCluster;

#[test]
fn the_open_close_benchmark_runs_every_loop_on_both_targets_and_cleans_up() {
    let cluster = TestCluster::start();
    let scratch = tempfile::tempdir().unwrap();
    let json = scratch.path().join("open-close.json");
    let out = cluster
        .command("weft")
        .args([
            "bench",
            "open-close",
            "--procs",
            "2",
            "--cycles",
            "3",
            "--kib",
            "64",
        ])
        .args(["--repeat", "2", "--path", "/oc"])
        .arg("--json")
        .arg(&json)
        .arg("--local-dir")
        .arg(scratch.path())
        .output()
        .expect("running weft bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "weft bench open-close failed:\n{stdout}{stderr}"
    );
    assert_eq!(
        stdout.matches("target: ").count(),
        3,
        "one target line per loop:\n{stdout}"
    );
    assert!(
        stdout.contains("x (within 3x the local time, or 1 ms): "),
        "the baseline named:\n{stdout}"
    );

    let results: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(results["procs"], 2);
    assert_eq!(results["cycles"], 3);
    let targets = results["targets"].as_array().unwrap();
    let names: Vec<&str> = targets.iter().map(|t| t["target"].as_str().unwrap()).collect();
    assert_eq!(names, ["romio321 local", "weft"]);
    for t in targets {
        let runs = t["runs_s"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{t}");
        for run in runs {
            let loops = run.as_array().unwrap();
            assert_eq!(loops.len(), 3);
            assert!(loops.iter().all(|s| s.as_f64().unwrap() > 0.0), "{t}");
        }
        assert!(t["command"].as_str().unwrap().contains("mpirun"), "{t}");
    }
    // Its directory removed (it made /oc, so the namespace is empty again), the JSON
    // drawn as a readable SVG, and `weft bench plot` reads the JSON: before issue 36 /oc
    // stayed behind and open-close wrote no SVG.
    let plot = common::assert_clean_and_plotted(&cluster, &json);
    assert_eq!(plot["panels"][0]["series"].as_array().unwrap().len(), 2, "{plot}");
}

#[test]
fn bad_arguments_are_refused_before_anything_runs() {
    let home = tempfile::tempdir().unwrap();
    for args in [
        ["--cycles", "0"],
        ["--kib", "0"],
        ["--procs", "0"],
        ["--env", "NOEQUALS"],
    ] {
        let out = std::process::Command::new(weft_testkit::bin("weft"))
            .args(["bench", "open-close"])
            .args(args)
            .env("WEFT_HOME", home.path())
            .env_remove("WEFT_META")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} was accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(args[0]), "{args:?}: {stderr}");
    }
}
