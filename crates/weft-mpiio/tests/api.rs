//! The MPI-IO calls beyond blocking access, through libweft_mpiio.so under mpirun with
//! 1, 3 and 4 processes against a real cluster (4 io servers, 64 KiB stripes), each
//! file compared byte for byte with the same program on the local file system through
//! ROMIO (`--mca io romio321`):
//! - `c/api.c`: nonblocking calls completed by MPI_Wait, Waitall, Test, Testany and
//!   Waitsome, split collectives and their misuse errors, shared file pointers
//!   (ordered calls, seek_shared, get_position_shared, read/write_shared,
//!   iwrite_shared) and MPI_MODE_SEQUENTIAL, over contiguous and noncontiguous views
//!   and memory types; processes appending with write_shared lose and duplicate
//!   nothing;
//! - `fortran/rw.f90` (`use mpi`) and `fortran/rw_f08.f90` (`use mpi_f08`): Fortran
//!   programs (Open MPI's bindings reach the C library
//!   through the `PMPI_File_*` names) on a weft: file and, with the library preloaded,
//!   on a local file (the pass-through);
//! - the metadata manager killed and restarted under an open file: its shared pointer
//!   is gone, and the next shared access fails clearly on every rank;
//! - an io server killed under nonblocking writes: `MPI_Wait` returns `MPI_ERR_IO`
//!   through the file's error handler, `MPI_Waitall` `MPI_ERR_IN_STATUS` with
//!   `MPI_ERR_IO` in the statuses, and nothing aborts.
//!
//! Needs mpicc, mpif90 and mpirun (Open MPI: openmpi-bin, libopenmpi-dev, gfortran;
//! scripts/install-deps.sh) and the workspace's release build.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use weft_testkit::mpi::{assert_appended_once, assert_ok, assert_same, library, weft_bytes, RECORD_BYTES};
use weft_testkit::{ClusterOptions, TestCluster};

/// Seconds one mpirun may take before it counts as hung.
const MPIRUN_TIMEOUT_S: &str = "120";
/// Files of `c/api.c` whose bytes do not depend on timing.
const API_FILES: [&str; 4] = ["nb", "split", "ordered", "seq"];

struct Programs {
    api: PathBuf,
    fortran: PathBuf,
    fortran_f08: PathBuf,
}

fn build(compiler: &str, env: &str, dir: &Path, name: &str, source: &str) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(source);
    weft_testkit::mpi::compile(compiler, env, dir, name, &source, &[])
}

fn programs() -> &'static Programs {
    static PROGRAMS: OnceLock<Programs> = OnceLock::new();
    PROGRAMS.get_or_init(|| {
        let dir = weft_testkit::mpi::program_dir("weft-mpiio-api-");
        Programs {
            api: build("mpicc", "MPICC", &dir, "api", "c/api.c"),
            fortran: build("mpif90", "MPIF90", &dir, "rw", "fortran/rw.f90"),
            fortran_f08: build("mpif90", "MPIF90", &dir, "rw_f08", "fortran/rw_f08.f90"),
        }
    })
}

/// mpirun of `program` with `np` processes; with a cluster, LD_PRELOAD and WEFT_HOME
/// go to every rank.
fn mpirun(
    np: usize,
    cluster: Option<&TestCluster>,
    mpi_args: &[&str],
    program: &Path,
    args: &[&str],
) -> Output {
    let mut c = weft_testkit::mpi::mpirun_command(np, MPIRUN_TIMEOUT_S);
    c.args(mpi_args);
    if let Some(cluster) = cluster {
        c.arg("-x").arg(format!("LD_PRELOAD={}", library().display()));
        for (k, v) in cluster.env() {
            c.arg("-x").arg(format!("{k}={v}"));
        }
        c.args(["-x", "WEFT_MPIIO_VERBOSE=1"]);
    }
    c.arg(program).args(args);
    let out = c.output().expect("running mpirun");
    assert_ne!(
        out.status.code(),
        Some(124),
        "mpirun {} {args:?} hung (killed after {MPIRUN_TIMEOUT_S} s):\n{}",
        program.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn cluster() -> TestCluster {
    TestCluster::start_with(&ClusterOptions {
        io_servers: 4,
        stripe_size: 64 * 1024,
        stripe_count: 0,
        ..Default::default()
    })
}

fn api_matches_romio(np: usize) {
    let p = programs();
    let cluster = cluster();
    let reference = tempfile::tempdir().unwrap();
    let prefix = format!("{}/", reference.path().display());
    let local = mpirun(
        np,
        None,
        &["--mca", "io", "romio321"],
        &p.api,
        &[&prefix, "--no-icoll"],
    );
    assert_ok(&local, &format!("api.c through ROMIO with {np} processes"));
    let dir = format!("/api{np}");
    cluster.client().mkdir(&dir, 0o755).unwrap();
    let weft = mpirun(np, Some(&cluster), &[], &p.api, &[&format!("weft:{dir}/")]);
    assert_ok(&weft, &format!("api.c on weft: with {np} processes"));
    assert_eq!(
        String::from_utf8_lossy(&weft.stdout),
        String::from_utf8_lossy(&local.stdout),
        "rank 0's output (shared file pointer positions) differs from ROMIO's"
    );
    for name in API_FILES {
        let expected = std::fs::read(reference.path().join(name)).unwrap();
        let got = weft_bytes(&cluster, &format!("{dir}/{name}"));
        assert_same(&got, &expected, &format!("{name} with {np} processes"));
    }
    assert_appended_once(
        &weft_bytes(&cluster, &format!("{dir}/append")),
        np,
        &format!("weft:, {np} processes"),
    );
    let local_append = std::fs::read(reference.path().join("append")).unwrap();
    assert_appended_once(&local_append, np, &format!("ROMIO, {np} processes"));
}

#[test]
fn nonblocking_split_and_shared_pointer_calls_match_romio_with_1_process() {
    api_matches_romio(1);
}

#[test]
fn nonblocking_split_and_shared_pointer_calls_match_romio_with_3_processes() {
    api_matches_romio(3);
}

#[test]
fn nonblocking_split_and_shared_pointer_calls_match_romio_with_4_processes() {
    api_matches_romio(4);
}

#[test]
fn a_fortran_program_reaches_weft_through_the_pmpi_names() {
    let p = programs();
    let cluster = cluster();
    for np in [1, 3, 4] {
        let reference = tempfile::tempdir().unwrap();
        let local = reference.path().join("rw");
        let out = mpirun(
            np,
            None,
            &["--mca", "io", "romio321"],
            &p.fortran,
            &[local.to_str().unwrap()],
        );
        assert_ok(&out, &format!("rw.f90 through ROMIO with {np} processes"));
        let expected = std::fs::read(&local).unwrap();
        let path = format!("/rw{np}");
        let out = mpirun(np, Some(&cluster), &[], &p.fortran, &[&format!("weft:{path}")]);
        assert_ok(&out, &format!("rw.f90 on weft: with {np} processes"));
        assert!(String::from_utf8_lossy(&out.stdout).contains("fortran mpi-io ok"));
        assert_same(
            &weft_bytes(&cluster, &path),
            &expected,
            &format!("rw.f90 with {np} processes"),
        );
        // With the library preloaded, a local file still goes to the MPI library.
        let passed = reference.path().join("passed");
        let out = mpirun(np, Some(&cluster), &[], &p.fortran, &[passed.to_str().unwrap()]);
        assert_ok(
            &out,
            &format!("rw.f90 on a local file, preloaded, with {np} processes"),
        );
        assert_same(
            &std::fs::read(&passed).unwrap(),
            &expected,
            "the passed-through local file",
        );

        // The mpi_f08 bindings, with shared file pointer calls.
        let local = reference.path().join("rw_f08");
        let out = mpirun(
            np,
            None,
            &["--mca", "io", "romio321"],
            &p.fortran_f08,
            &[local.to_str().unwrap()],
        );
        assert_ok(&out, &format!("rw_f08.f90 through ROMIO with {np} processes"));
        let path = format!("/rw_f08_{np}");
        let out = mpirun(
            np,
            Some(&cluster),
            &[],
            &p.fortran_f08,
            &[&format!("weft:{path}")],
        );
        assert_ok(&out, &format!("rw_f08.f90 on weft: with {np} processes"));
        assert!(String::from_utf8_lossy(&out.stdout).contains("fortran mpi_f08 mpi-io ok"));
        assert_same(
            &weft_bytes(&cluster, &path),
            &std::fs::read(&local).unwrap(),
            &format!("rw_f08.f90 with {np} processes"),
        );
    }
}

/// Runs `api weft:/DIR/ MODE MARKERS` with `np` processes, doing `between` once the
/// program is ready (DIR/ready) and letting it go on after (DIR/go).
fn with_handshake(cluster: &TestCluster, np: usize, dir: &str, mode: &str, between: impl FnOnce()) -> Output {
    let p = programs();
    let markers = tempfile::tempdir().unwrap();
    cluster.client().mkdir(dir, 0o755).unwrap();
    let mut c = weft_testkit::mpi::mpirun_command(np, MPIRUN_TIMEOUT_S);
    c.arg("-x").arg(format!("LD_PRELOAD={}", library().display()));
    for (k, v) in cluster.env() {
        c.arg("-x").arg(format!("{k}={v}"));
    }
    c.args(["-x", "WEFT_MPIIO_VERBOSE=1"])
        .arg(&p.api)
        .args([&format!("weft:{dir}/"), mode, markers.path().to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = c.spawn().expect("running mpirun");
    let ready = markers.path().join("ready");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !ready.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the program never got ready"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    between();
    std::fs::write(markers.path().join("go"), b"").unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn a_shared_pointer_lost_in_a_manager_restart_fails_clearly_and_writes_nothing() {
    let cluster = cluster();
    let np = 3;
    // The metadata manager (server 0) crashes and comes back without the pointer.
    let out = with_handshake(&cluster, np, "/lost", "--lost", || {
        cluster.kill9(0);
        cluster.restart();
    });
    assert_ok(&out, "the program around the restart");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("lost: MPI_ERR_IO on every rank"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("/lost/lost: shared file pointer") && stderr.contains("restarted"),
        "the error does not say what happened:\n{stderr}"
    );
    // Only the records of before the restart: nothing written at a forgotten offset.
    let bytes = weft_bytes(&cluster, "/lost/lost");
    assert_eq!(bytes.len(), np * RECORD_BYTES);
    let mut firsts: Vec<i32> = bytes
        .chunks(RECORD_BYTES)
        .map(|r| i32::from_ne_bytes(r[..4].try_into().unwrap()))
        .collect();
    firsts.sort_unstable();
    assert_eq!(firsts, (0..np as i32).map(|r| r * 1000).collect::<Vec<_>>());
}

#[test]
fn background_io_errors_reach_mpi_wait_and_waitall_without_aborting() {
    let cluster = cluster();
    // An io server dies after the open; the nonblocking writes span every server.
    let out = with_handshake(&cluster, 2, "/ioerr", "--ioerr", || cluster.kill9(1));
    assert_ok(&out, "the program around the io server's death");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("ioerr: MPI_ERR_IO through MPI_Wait and MPI_Waitall"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
