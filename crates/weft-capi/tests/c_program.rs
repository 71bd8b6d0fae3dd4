//! The C test program (c/weft_capi_test.c, built by `make build` into
//! target/release/c/) passes against a real cluster, connecting both ways: through the
//! environment (weft_connect(NULL)) and to the manager's address.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weft_testkit::TestCluster;

/// Longest a run may take; the program does a few thousand metadata calls and moves a
/// few MiB, which takes seconds.
const RUN_TIMEOUT: Duration = Duration::from_secs(180);

fn c_program(name: &str) -> PathBuf {
    let path = weft_testkit::bin_dir().join("c").join(name);
    assert!(
        path.exists(),
        "{} not found: the C test programs are built by `make build` (after `cargo build \
         --release --workspace`); run it before `cargo test --release -p weft-capi`",
        path.display()
    );
    path
}

/// Runs the program with the cluster's environment and returns its stdout; panics with
/// its output if it fails or hangs.
fn run(program: &Path, cluster: &TestCluster, args: &[&str]) -> String {
    let out_dir = tempfile::tempdir().expect("tempdir");
    let stdout_path = out_dir.path().join("stdout");
    let stderr_path = out_dir.path().join("stderr");
    let mut command = Command::new(program);
    command
        .args(args)
        .env_remove("WEFT_META")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).unwrap())
        .stderr(std::fs::File::create(&stderr_path).unwrap());
    for (k, v) in cluster.env() {
        command.env(k, v);
    }
    let mut child = command.spawn().expect("starting weft_capi_test");
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for weft_capi_test") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(&stdout_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    match status {
        Some(s) if s.success() => stdout,
        Some(s) => panic!("weft_capi_test {args:?} failed ({s}):\n{stdout}{stderr}"),
        None => panic!("weft_capi_test {args:?} did not finish in {RUN_TIMEOUT:?}:\n{stdout}{stderr}"),
    }
}

#[test]
fn c_program_passes_against_a_cluster() {
    // Before starting a cluster: a missing program fails at once.
    let program = c_program("weft_capi_test");
    let cluster = TestCluster::start();
    for args in [vec![], vec![cluster.meta_addr()]] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let stdout = run(&program, &cluster, &args);
        assert!(stdout.contains("checks passed"), "unexpected output: {stdout}");
    }
    // Each run removed what it made.
    let root = cluster.client().readdir("/").expect("readdir /");
    assert!(root.is_empty(), "left behind: {root:?}");
}
