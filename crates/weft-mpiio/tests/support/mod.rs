//! What the MPI test programs of `atomic.rs` and `robust.rs` share: compiling a program
//! of `c/`, and mpirun of it through libweft_mpiio.so against a test cluster.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

pub use weft_testkit::mpi::library;
use weft_testkit::TestCluster;

/// Seconds one mpirun may take before it counts as hung.
pub const MPIRUN_TIMEOUT_S: &str = "180";

pub fn compile(dir: &Path, name: &str) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    weft_testkit::mpi::compile("mpicc", "MPICC", dir, name, &source, &[])
}

/// The mpirun command for `program` with `np` ranks, the cluster's environment and
/// `env` passed to every rank.
pub fn command(
    np: usize,
    cluster: &TestCluster,
    env: &[(&str, &str)],
    program: &Path,
    args: &[&str],
) -> Command {
    let mut c = weft_testkit::mpi::mpirun_command(np, MPIRUN_TIMEOUT_S);
    c.arg("-x").arg(format!("LD_PRELOAD={}", library().display()));
    for (k, v) in cluster.env() {
        c.arg("-x").arg(format!("{k}={v}"));
    }
    for (k, v) in env {
        c.env(k, v).arg("-x").arg(k);
    }
    c.arg(program).args(args);
    c
}

pub fn mpirun(
    np: usize,
    cluster: &TestCluster,
    env: &[(&str, &str)],
    program: &Path,
    args: &[&str],
) -> Output {
    let out = command(np, cluster, env, program, args)
        .output()
        .expect("running mpirun");
    assert_ne!(
        out.status.code(),
        Some(124),
        "mpirun {} {args:?} hung:\n{}",
        program.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// mpirun in the background, its stdout piped.
#[allow(dead_code)]
pub fn spawn(np: usize, cluster: &TestCluster, env: &[(&str, &str)], program: &Path, args: &[&str]) -> Child {
    command(np, cluster, env, program, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running mpirun")
}
