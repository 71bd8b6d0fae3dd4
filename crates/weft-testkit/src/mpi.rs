//! What the MPI-IO tests of several crates share: the library of this build, and checks
//! of a run's outcome and of a file's bytes against a reference run's.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::TestCluster;

/// libweft_mpiio.so (the Open MPI build) of this build.
pub fn library() -> PathBuf {
    let dir = crate::bin_dir();
    [dir.join("libweft_mpiio.so"), dir.join("deps/libweft_mpiio.so")]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!(
                "libweft_mpiio.so not found in {}: build the workspace first",
                dir.display()
            )
        })
}

/// Compiles `source` into `dir/name` with the compiler `$env` names, else `compiler`
/// (mpicc, mpif90, mpicc.mpich), -O2 -Wall and `extra` after the source; a compiler
/// that is missing or fails stops the test with its messages and what to install.
pub fn compile(compiler: &str, env: &str, dir: &Path, name: &str, source: &Path, extra: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let program = std::env::var(env).unwrap_or_else(|_| compiler.into());
    let result = Command::new(&program)
        .args(["-O2", "-Wall", "-o"])
        .arg(&out)
        .arg(source)
        .args(extra)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "running {program} (install openmpi-bin, libopenmpi-dev, gfortran; mpich, libmpich-dev): {e}"
            )
        });
    assert!(
        result.status.success(),
        "{program} {name} failed:\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

/// Fails with the run's output unless it succeeded.
pub fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The whole file `path` of `cluster`, read through the native client.
pub fn weft_bytes(cluster: &TestCluster, path: &str) -> Vec<u8> {
    let file = cluster
        .client()
        .open(path, &weft_client::OpenOptions::default())
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut bytes = vec![0u8; file.size().unwrap() as usize];
    let n = file.read_at(0, &mut bytes).unwrap();
    bytes.truncate(n);
    bytes
}

/// Fails, saying where they first differ, unless the bytes of a file on Weft equal the
/// reference run's (ROMIO on a local file).
pub fn assert_same(got: &[u8], expected: &[u8], what: &str) {
    assert!(
        got == expected,
        "{what}: the weft: file ({} bytes) differs from the reference ({} bytes){}",
        got.len(),
        expected.len(),
        got.iter()
            .zip(expected)
            .position(|(a, b)| a != b)
            .map_or(String::new(), |i| format!(" first at byte {i}"))
    );
}

/// Open MPI's `mpirun -np NP` (oversubscribed, unbound: CI has 2 cores; allowed to run
/// as root), killed after `timeout_s` seconds by timeout(1), which then exits 124.
pub fn mpirun_command(np: usize, timeout_s: &str) -> Command {
    let mut c = Command::new("timeout");
    c.args([
        "-k",
        "5",
        timeout_s,
        "mpirun",
        "--oversubscribe",
        "--bind-to",
        "none",
    ])
    .args(["-np", &np.to_string()])
    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    c
}

/// Records each rank appends in the api test programs.
pub const APPENDED: usize = 60;
/// Bytes of one appended record.
pub const RECORD_BYTES: usize = 64;

/// Every record of the api test programs' "append" file exactly once: `np` ranks ×
/// [`APPENDED`] records of [`RECORD_BYTES`], each 16 copies of rank * 1000 + k (the
/// programs for Open MPI and for MPICH write the same).
pub fn assert_appended_once(bytes: &[u8], np: usize, what: &str) {
    assert_eq!(
        bytes.len(),
        np * APPENDED * RECORD_BYTES,
        "{what}: append file size"
    );
    let mut seen = vec![0u32; np * APPENDED];
    for record in bytes.chunks(RECORD_BYTES) {
        let ints: Vec<i32> = record
            .chunks(4)
            .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert!(
            ints.iter().all(|&v| v == ints[0]),
            "{what}: a torn record {ints:?}"
        );
        let (rank, k) = ((ints[0] / 1000) as usize, (ints[0] % 1000) as usize);
        assert!(
            rank < np && k < APPENDED,
            "{what}: a record that nobody wrote: {}",
            ints[0]
        );
        seen[rank * APPENDED + k] += 1;
    }
    assert!(
        seen.iter().all(|&n| n == 1),
        "{what}: records lost or duplicated: {seen:?}"
    );
}
