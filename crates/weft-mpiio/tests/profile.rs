//! WEFT_PROFILE with real MPI processes (mpirun, LD_PRELOAD of libweft_mpiio.so) on a
//! real cluster: the profile written at MPI_Finalize counts exactly the calls and
//! bytes of a known workload (tests/c/profile.c), per weft: file, with the methods
//! run and the time split; without WEFT_PROFILE nothing is written; a directory that
//! cannot be written is reported and the program still ends well.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use weft_testkit::mpi::library;
use weft_testkit::{ClusterOptions, TestCluster};

const MPIRUN_TIMEOUT_S: &str = "120";

fn program(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/profile.c");
    let out = dir.join("profile");
    let result = Command::new(std::env::var("MPICC").unwrap_or_else(|_| "mpicc".into()))
        .args(["-O2", "-Wall", "-o"])
        .arg(&out)
        .arg(&source)
        .output()
        .expect("running mpicc (install openmpi-bin and libopenmpi-dev)");
    assert!(
        result.status.success(),
        "mpicc failed:\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

/// mpirun of the profile program with `np` processes in `cwd`, the cluster's
/// environment, LD_PRELOAD and `env` passed to every rank.
fn run(np: usize, cluster: &TestCluster, cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let work = tempfile::tempdir().unwrap();
    let program = program(work.path());
    let mut c = weft_testkit::mpi::mpirun_command(np, MPIRUN_TIMEOUT_S);
    c.env_remove("WEFT_PROFILE").current_dir(cwd);
    c.arg("-x").arg(format!("LD_PRELOAD={}", library().display()));
    for (k, v) in cluster.env() {
        c.arg("-x").arg(format!("{k}={v}"));
    }
    for (k, v) in env {
        c.env(k, v).arg("-x").arg(k);
    }
    c.arg(&program).args(args);
    let out = c.output().expect("running mpirun");
    assert_ne!(
        out.status.code(),
        Some(124),
        "mpirun hung:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "mpirun failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn cluster() -> TestCluster {
    TestCluster::start_with(&ClusterOptions {
        io_servers: 2,
        stripe_size: 64 * 1024,
        stripe_count: 0,
        ..Default::default()
    })
}

/// The profile files in `dir`.
fn profiles(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("weft-profile-")
        })
        .collect();
    found.sort();
    found
}

/// (count, bytes) of every function called on a file.
fn calls(file: &Value) -> Vec<(String, u64, u64)> {
    file["calls"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, c)| {
            (
                name.clone(),
                c["count"].as_u64().unwrap(),
                c["bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn owned(v: &[(&str, u64, u64)]) -> Vec<(String, u64, u64)> {
    v.iter().map(|&(n, c, b)| (n.to_owned(), c, b)).collect()
}

#[test]
fn the_profile_counts_every_call_and_byte_per_file_of_all_processes() {
    let cluster = cluster();
    cluster.weft(&["mkdir", "/prof"]);
    let out_dir = tempfile::tempdir().unwrap();
    let local = tempfile::tempdir().unwrap();
    let np = 3u64;
    let out = run(
        np as usize,
        &cluster,
        local.path(),
        &[("WEFT_PROFILE", out_dir.path().to_str().unwrap())],
        &[
            "weft:/prof/",
            local.path().to_str().unwrap(),
            "weft_cb_method=two_phase",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    let found = profiles(out_dir.path());
    assert_eq!(found.len(), 1, "one merged profile: {found:?}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "weft-mpiio profile: 3 processes, 2 weft: files; JSON: {}",
            found[0].display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("weft:/prof/a: 3 processes, 9300 bytes written, 3000 bytes read"),
        "{stderr}"
    );
    let job: Value = serde_json::from_slice(&std::fs::read(&found[0]).unwrap()).unwrap();
    assert_eq!(job["processes"], np);
    let files = job["files"].as_array().unwrap();
    let names: Vec<&str> = files.iter().map(|f| f["file"].as_str().unwrap()).collect();
    // The local file passed through to the MPI library and is not profiled.
    assert_eq!(names, ["weft:/prof/a", "weft:/prof/b"]);

    let a = &files[0];
    assert_eq!(
        calls(a),
        owned(&[
            ("MPI_File_close", np, 0),
            ("MPI_File_open", np, 0),
            ("MPI_File_read_at", 2 * np, 2 * 500 * np),
            ("MPI_File_seek", np, 0),
            ("MPI_File_sync", np, 0),
            ("MPI_File_write", np, 100 * np),
            ("MPI_File_write_at_all", 3 * np, 3 * 1000 * np),
        ])
    );
    assert_eq!(a["processes"], np);
    assert_eq!(a["bytes_written"], 3100 * np);
    assert_eq!(a["bytes_read"], 1000 * np);
    // Every rank ran each collective call with the method the hint asked for.
    assert_eq!(a["methods"], serde_json::json!({"two_phase": 3 * np}));

    let b = &files[1];
    assert_eq!(
        calls(b),
        owned(&[
            ("MPI_File_close", np, 0),
            ("MPI_File_open", np, 0),
            ("MPI_File_set_view", np, 0),
            ("MPI_File_write_all", np, 64 * np),
        ])
    );
    assert_eq!(b["bytes_written"], 64 * np);
    assert_eq!(b["bytes_read"], 0);
    assert_eq!(b["methods"], serde_json::json!({"two_phase": np}));

    for f in files {
        let t = &f["time"];
        let part = |k: &str| t[k].as_f64().unwrap();
        let total = part("total_s");
        assert!(total > 0.0, "{t}");
        // The collective calls exchanged among 3 processes.
        assert!(part("exchange_s") > 0.0 && part("io_s") > 0.0, "{t}");
        let sum = part("exchange_s") + part("io_s") + part("waiting_s");
        assert!(
            (sum - total).abs() <= total * 1e-6 + 1e-9,
            "parts {sum} of {total}: {t}"
        );
        let by_call: f64 = f["calls"]
            .as_object()
            .unwrap()
            .values()
            .map(|c| c["time_s"].as_f64().unwrap())
            .sum();
        assert!(
            (by_call - total).abs() <= total * 1e-6 + 1e-9,
            "{by_call} vs {total}"
        );
    }
    let per_process = job["per_process"].as_array().unwrap();
    let ranks: Vec<u64> = per_process.iter().map(|p| p["rank"].as_u64().unwrap()).collect();
    assert_eq!(ranks, [0, 1, 2]);
    for p in per_process {
        // a: open, 3 write_at_all, sync, 2 read_at, seek, write, close; b: 4 calls.
        assert_eq!(p["calls"], 10 + 4, "{p}");
        assert_eq!(p["bytes_written"], 3100 + 64, "{p}");
        assert_eq!(p["bytes_read"], 1000, "{p}");
    }
}

#[test]
fn the_profile_goes_to_the_working_directory_only_when_asked_for() {
    let cluster = cluster();
    cluster.weft(&["mkdir", "/p2"]);
    let cwd = tempfile::tempdir().unwrap();
    let args = ["weft:/p2/", cwd.path().to_str().unwrap()];

    let out = run(2, &cluster, cwd.path(), &[], &args);
    assert!(profiles(cwd.path()).is_empty());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("weft-mpiio profile"));
    let out = run(2, &cluster, cwd.path(), &[("WEFT_PROFILE", "0")], &args);
    assert!(profiles(cwd.path()).is_empty());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("weft-mpiio profile"));

    let out = run(2, &cluster, cwd.path(), &[("WEFT_PROFILE", "1")], &args);
    let found = profiles(cwd.path());
    assert_eq!(found.len(), 1, "{}", String::from_utf8_lossy(&out.stderr));
    let job: Value = serde_json::from_slice(&std::fs::read(&found[0]).unwrap()).unwrap();
    assert_eq!(job["files"][1]["calls"]["MPI_File_write_all"]["bytes"], 128);
    // Without the hint, auto chose: some method for each of the 2 ranks' call.
    let methods = job["files"][1]["methods"].as_object().unwrap();
    assert_eq!(
        methods.values().map(|n| n.as_u64().unwrap()).sum::<u64>(),
        2,
        "{methods:?}"
    );

    // A directory that cannot be written: said, and the program still ends well.
    let out = run(
        2,
        &cluster,
        cwd.path(),
        &[("WEFT_PROFILE", "/nonexistent/profiles")],
        &args,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("JSON: not written (writing /nonexistent/profiles/weft-profile-"),
        "{stderr}"
    );
    assert!(stderr.contains("weft:/p2/a: 2 processes"), "{stderr}");
}

/// Job-scoped delegates are separate MPI processes (spawned at open, stopped at close):
/// with them the profile is the same, and nothing waits at MPI_Finalize.
#[test]
fn the_profile_of_a_job_with_job_scoped_delegates_counts_the_same() {
    let cluster = cluster();
    cluster.weft(&["mkdir", "/pd"]);
    let out_dir = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let out = run(
        2,
        &cluster,
        cwd.path(),
        &[
            ("WEFT_PROFILE", out_dir.path().to_str().unwrap()),
            ("WEFT_PRINT_HINTS", "1"),
        ],
        &[
            "weft:/pd/",
            cwd.path().to_str().unwrap(),
            "weft_delegates=2",
            "weft_delegate_memory=4194304",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    // The delegates ran: WEFT_PRINT_HINTS names them at the open.
    assert!(stderr.contains("delegates"), "{stderr}");
    let found = profiles(out_dir.path());
    assert_eq!(found.len(), 1, "{found:?}");
    let job: Value = serde_json::from_slice(&std::fs::read(&found[0]).unwrap()).unwrap();
    assert_eq!(job["processes"], 2);
    let a = &job["files"][0];
    assert_eq!(a["file"], "weft:/pd/a");
    assert_eq!(a["calls"]["MPI_File_write_at_all"]["count"], 6);
    assert_eq!(a["bytes_written"], 2 * 3100);
    assert_eq!(a["bytes_read"], 2 * 1000);
    let methods = a["methods"].as_object().unwrap();
    assert_eq!(
        methods.values().map(|n| n.as_u64().unwrap()).sum::<u64>(),
        6,
        "{methods:?}"
    );
}
