//! The MPI-IO benchmarks `weft bench atomic`, `collective` and `mpiio-api` end to end on
//! a small real cluster, tiny sizes: not timed, only what issue 36 asks of every
//! benchmark: configurations alternated run by run (min/median/max kept), everything
//! made in the cluster's namespace removed afterwards (and kept with --keep), JSON and a
//! readable SVG written, and `weft bench plot` reading the JSON.

mod common;

use serde_json::Value;
use weft_testkit::TestCluster;

fn bench(cluster: &TestCluster, args: &[&str], json: &std::path::Path, local: &std::path::Path) -> String {
    let out = cluster
        .command("weft")
        .arg("bench")
        .args(args)
        .arg("--json")
        .arg(json)
        .arg("--local-dir")
        .arg(local)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .output()
        .expect("running weft bench");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "weft bench {args:?} failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Before issue 36 atomic ran each configuration's repeats back to back in a fixed
/// order, wrote no SVG and left /bench-atomic behind.
#[test]
fn atomic_alternates_its_runs_cleans_up_and_plots() {
    let cluster = TestCluster::start();
    let scratch = tempfile::tempdir().unwrap();
    let json = scratch.path().join("atomic.json");
    let stdout = bench(
        &cluster,
        &["atomic", "--procs", "2", "--n", "8", "--repeat", "2"],
        &json,
        scratch.path(),
    );
    assert!(stdout.contains("median (min-max) of 2 runs"), "{stdout}");
    let results: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = results["rows"].as_array().unwrap();
    let runs: Vec<&str> = rows.iter().map(|r| r["run"].as_str().unwrap()).collect();
    assert_eq!(runs, ["auto", "independent", "atomic"]);
    for r in rows {
        let s = &r["write_mib_s_spread"];
        let (lo, mid, hi) = (
            s["min"].as_f64().unwrap(),
            s["median"].as_f64().unwrap(),
            s["max"].as_f64().unwrap(),
        );
        assert!(0.0 < lo && lo <= mid && mid <= hi, "{r}");
    }
    common::assert_clean_and_plotted(&cluster, &json);
}

/// --keep keeps the benchmark's directory; without it a directory that exists is
/// refused rather than used (and then removed with the user's files in it).
#[test]
fn collective_keeps_its_directory_with_keep_and_refuses_an_existing_one() {
    let cluster = TestCluster::start();
    let scratch = tempfile::tempdir().unwrap();
    let json = scratch.path().join("collective.json");
    let args = [
        "collective",
        "--procs",
        "2",
        "--n",
        "8",
        "--cyclic-n",
        "64",
        "--k",
        "8",
        "--s3d-n",
        "8",
        "--methods",
        "two_phase",
        "--baselines",
        "romio321",
        "--repeat",
        "2",
        "--path",
        "/c",
    ];
    // No --svg: the SVG goes next to the JSON, as every benchmark's does. Before, its
    // default was bench-results/collective.svg whatever --json said (so nothing was
    // drawn next to the JSON and this check failed).
    bench(&cluster, &args, &json, scratch.path());
    common::assert_clean_and_plotted(&cluster, &json);

    bench(
        &cluster,
        &[&args[..], &["--keep"]].concat(),
        &json,
        scratch.path(),
    );
    assert!(
        !cluster.client().readdir("/c").unwrap().is_empty(),
        "--keep kept nothing"
    );
    let out = cluster
        .command("weft")
        .args(["bench"])
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("/c exists already"),
        "{stderr}"
    );
    assert!(
        !cluster.client().readdir("/c").unwrap().is_empty(),
        "the kept files were removed"
    );
}

#[test]
fn mpiio_api_cleans_up_and_plots() {
    let cluster = TestCluster::start();
    let scratch = tempfile::tempdir().unwrap();
    let json = scratch.path().join("mpiio-api.json");
    bench(
        &cluster,
        &[
            "mpiio-api",
            "--procs",
            "2",
            "--mib",
            "1",
            "--calls",
            "4",
            "--repeat",
            "2",
        ],
        &json,
        scratch.path(),
    );
    common::assert_clean_and_plotted(&cluster, &json);
}

/// Interrupted like Ctrl-C in a terminal (SIGINT to the process group), a benchmark on
/// the user's cluster removes its directory and exits with 128 + 2: before, no handler
/// was installed for it, so it died at once and left the directory behind.
#[test]
fn an_interrupted_benchmark_removes_its_directory() {
    let cluster = TestCluster::start();
    let scratch = tempfile::tempdir().unwrap();
    let mut command = cluster.command("weft");
    command
        .args([
            "bench", "atomic", "--procs", "2", "--n", "32", "--repeat", "100", "--path", "/intr",
        ])
        .arg("--json")
        .arg(scratch.path().join("atomic.json"))
        .arg("--local-dir")
        .arg(scratch.path())
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1");
    let client = cluster.client();
    // Until its directory holds a file: mpirun is running.
    let (code, stderr) = common::interrupt(&mut command, "a write in /intr", || {
        client.readdir("/intr").is_ok_and(|e| !e.is_empty())
    });
    assert_eq!(code, Some(130), "{stderr}");
    common::assert_namespace_empty(&cluster, &stderr);
}
