//! libweft_mpiio_mpich.so under MPICH: weft-mpiio's own test programs compiled with
//! `mpicc.mpich`, run with `mpirun.mpich` (never the `mpicc`/`mpirun` alternatives,
//! which stay Open MPI's) against a real cluster (4 io servers, 64 KiB stripes), each
//! file compared byte for byte with the same program on the local file system through
//! MPICH's own ROMIO:
//! - `c/patterns.c` (every access pattern) through several collective methods, with 1,
//!   3 and 4 processes;
//! - `c/api.c` (nonblocking calls, split collectives, shared file pointers, ordered
//!   calls, MPI_MODE_SEQUENTIAL) with 1, 3 and 4 processes; MPICH's ROMIO has the
//!   nonblocking collectives, so the reference runs them too;
//! - `c/datarep.c`: `internal` served as native, `external32` served (big-endian; a
//!   memory type whose external32 size differs from its native size refused with
//!   MPI_ERR_UNSUPPORTED_DATAREP on every rank), the file as the writes left it;
//! - `c/atomic.c`: atomic mode's overlapping writers never mix, a reader never sees a
//!   partial write (extent locks), as under Open MPI;
//! - the library is the one `weft mpi-env --mpi mpich` names.
//!
//! Needs Debian's mpich and libmpich-dev (scripts/install-deps.sh) and the workspace's
//! release build (weftd, weft, libweft_mpiio_mpich.so).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use weft_testkit::mpi::{assert_appended_once, assert_ok, assert_same, weft_bytes};
use weft_testkit::{ClusterOptions, TestCluster};

/// Seconds one mpirun may take before it counts as hung.
const MPIRUN_TIMEOUT_S: &str = "120";
const PATTERNS: [&str; 10] = [
    "block3d",
    "block3d_ghost",
    "cyclic2d",
    "cyclic2d_mem",
    "cyclic2d_bytes",
    "overlap",
    "s3d",
    "flash",
    "indexed",
    "mixed",
];
const METHODS: [&str; 5] = [
    "two_phase",
    "interleaved_pipelined",
    "independent",
    "server_directed",
    "auto",
];
/// Files of `c/api.c` whose bytes do not depend on timing.
const API_FILES: [&str; 4] = ["nb", "split", "ordered", "seq"];

struct Programs {
    patterns: PathBuf,
    api: PathBuf,
    datarep: PathBuf,
    atomic: PathBuf,
}

fn mpirun_program() -> String {
    std::env::var("MPIRUN_MPICH").unwrap_or_else(|_| "mpirun.mpich".into())
}

fn compile(dir: &Path, name: &str) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../weft-mpiio/tests/c/{name}.c"));
    weft_testkit::mpi::compile("mpicc.mpich", "MPICC_MPICH", dir, name, &source, &[])
}

fn programs() -> &'static Programs {
    static PROGRAMS: OnceLock<Programs> = OnceLock::new();
    PROGRAMS.get_or_init(|| {
        let dir = weft_testkit::mpi::program_dir("weft-mpiio-mpich-");
        Programs {
            patterns: compile(&dir, "patterns"),
            api: compile(&dir, "api"),
            datarep: compile(&dir, "datarep"),
            atomic: compile(&dir, "atomic"),
        }
    })
}

/// The library `weft mpi-env --mpi mpich` names on its LD_PRELOAD line.
fn library() -> PathBuf {
    static LIBRARY: OnceLock<PathBuf> = OnceLock::new();
    LIBRARY
        .get_or_init(|| {
            let out = Command::new(weft_testkit::bin("weft"))
                .args(["mpi-env", "--mpi", "mpich"])
                .env_remove("WEFT_MPIIO_LIB")
                .output()
                .expect("running weft mpi-env");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "weft mpi-env --mpi mpich: {text}");
            let lib = text
                .lines()
                .find_map(|l| l.strip_prefix("export LD_PRELOAD="))
                .unwrap_or_else(|| panic!("no LD_PRELOAD line in weft mpi-env --mpi mpich:\n{text}"));
            let lib = PathBuf::from(lib);
            assert!(
                lib.ends_with("libweft_mpiio_mpich.so") && lib.exists(),
                "weft mpi-env --mpi mpich names {} (build weft-mpiio-mpich first)",
                lib.display()
            );
            weft_testkit::mpi::check_up_to_date(&lib, "weft-mpiio-mpich");
            lib
        })
        .clone()
}

/// mpirun.mpich of `program` with `np` processes; with a cluster, LD_PRELOAD and the
/// cluster's environment go to every rank.
fn mpirun(np: usize, cluster: Option<&TestCluster>, program: &Path, args: &[&str]) -> Output {
    let mut c = Command::new("timeout");
    c.args([
        "-k",
        "5",
        MPIRUN_TIMEOUT_S,
        &mpirun_program(),
        "-launcher",
        "fork",
    ])
    .args(["-n", &np.to_string()]);
    if let Some(cluster) = cluster {
        c.arg("-genv").arg("LD_PRELOAD").arg(library());
        for (k, v) in cluster.env() {
            c.arg("-genv").arg(k).arg(v);
        }
        c.args(["-genv", "WEFT_MPIIO_VERBOSE", "1"]);
    }
    c.arg(program).args(args);
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("running {} (install mpich): {e}", mpirun_program()));
    assert_ne!(
        out.status.code(),
        Some(124),
        "mpirun.mpich {} {args:?} hung (killed after {MPIRUN_TIMEOUT_S} s):\n{}",
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

fn patterns_match_romio(np: usize, methods: &[&str]) {
    let p = programs();
    let cluster = cluster();
    let reference = tempfile::tempdir().unwrap();
    let prefix = format!("{}/", reference.path().display());
    let local_prefix = format!("{prefix}local_");
    let local = mpirun(np, None, &p.patterns, &[&prefix, "--local-prefix", &local_prefix]);
    assert_ok(
        &local,
        &format!("patterns through MPICH's ROMIO with {np} processes"),
    );
    for method in methods {
        let dir = format!("/np{np}_{method}");
        cluster.client().mkdir(&dir, 0o755).unwrap();
        let weft_prefix = format!("weft:{dir}/");
        let hint = format!("weft_cb_method={method}");
        let out = mpirun(
            np,
            Some(&cluster),
            &p.patterns,
            &[
                &weft_prefix,
                "--local-prefix",
                &local_prefix,
                "cb_buffer_size=65536",
                &hint,
            ],
        );
        assert_ok(
            &out,
            &format!("patterns on weft: under MPICH, {method}, {np} processes"),
        );
        for pattern in PATTERNS {
            let expected = std::fs::read(reference.path().join(pattern)).unwrap();
            let got = weft_bytes(&cluster, &format!("{dir}/{pattern}"));
            assert_same(&got, &expected, &format!("{pattern}, {method}, {np} processes"));
        }
    }
}

fn api_matches_romio(np: usize) {
    let p = programs();
    let cluster = cluster();
    let reference = tempfile::tempdir().unwrap();
    let prefix = format!("{}/", reference.path().display());
    let local = mpirun(np, None, &p.api, &[&prefix]);
    assert_ok(
        &local,
        &format!("api.c through MPICH's ROMIO with {np} processes"),
    );
    let dir = format!("/api{np}");
    cluster.client().mkdir(&dir, 0o755).unwrap();
    let weft = mpirun(np, Some(&cluster), &p.api, &[&format!("weft:{dir}/")]);
    assert_ok(&weft, &format!("api.c on weft: under MPICH with {np} processes"));
    assert_eq!(
        String::from_utf8_lossy(&weft.stdout),
        String::from_utf8_lossy(&local.stdout),
        "rank 0's output (shared file pointer positions) differs from MPICH's ROMIO"
    );
    for name in API_FILES {
        let expected = std::fs::read(reference.path().join(name)).unwrap();
        let got = weft_bytes(&cluster, &format!("{dir}/{name}"));
        assert_same(&got, &expected, &format!("{name} with {np} processes"));
    }
    assert_appended_once(
        &weft_bytes(&cluster, &format!("{dir}/append")),
        np,
        &format!("weft: under MPICH, {np} processes"),
    );
}

#[test]
fn mpi_env_names_the_mpich_library_and_it_links_mpich_only() {
    let lib = library();
    let out = Command::new("ldd").arg(&lib).output().expect("running ldd");
    let deps = String::from_utf8_lossy(&out.stdout);
    assert!(
        deps.contains("libmpich"),
        "{} does not link MPICH:\n{deps}",
        lib.display()
    );
    assert!(
        !deps.contains("libmpi.so"),
        "{} links Open MPI's libmpi too:\n{deps}",
        lib.display()
    );
}

#[test]
fn patterns_match_mpich_romio_with_1_process() {
    patterns_match_romio(1, &["auto"]);
}

#[test]
fn patterns_match_mpich_romio_with_3_processes() {
    patterns_match_romio(3, &["two_phase", "auto"]);
}

#[test]
fn patterns_match_mpich_romio_with_4_processes_through_several_methods() {
    patterns_match_romio(4, &METHODS);
}

#[test]
fn api_calls_match_mpich_romio_with_1_process() {
    api_matches_romio(1);
}

#[test]
fn api_calls_match_mpich_romio_with_3_processes() {
    api_matches_romio(3);
}

#[test]
fn api_calls_match_mpich_romio_with_4_processes() {
    api_matches_romio(4);
}

#[test]
fn data_representations_under_mpich() {
    let p = programs();
    let cluster = cluster();
    let out = mpirun(3, Some(&cluster), &p.datarep, &["weft:/"]);
    assert_ok(&out, "datarep.c on weft: under MPICH");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in [
        "set_view internal: ok",
        "set_view no_such_representation: unsupported",
        "set_view external32: ok",
        "get_view after external32: ok external32 disp 0",
        "read_at_all external32: ok",
        "iread_at external32: ok",
        "read_at_all_begin/end external32: ok",
        "read_at_all MPI_LONG external32 as its size says: ok",
        "values ok",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "no line {line:?} in:\n{stdout}"
        );
    }
    // Three rows of 3 ranks × 64 ints: nothing lost to the refused set_view and write;
    // the external32 row big-endian.
    let bytes = weft_bytes(&cluster, "/datarep");
    assert_eq!(bytes.len(), 3 * 3 * 64 * 4);
    let first_x32 = i32::from_be_bytes(bytes[2 * 3 * 64 * 4..][..4].try_into().unwrap());
    assert_eq!(first_x32, 50_000, "rank 0's first external32 int, big-endian");
}

#[test]
fn atomic_mode_never_mixes_nor_tears_under_mpich() {
    let p = programs();
    let cluster = cluster();
    for (mode, rounds) in [("writers", "40"), ("reader", "60")] {
        let out = mpirun(
            4,
            Some(&cluster),
            &p.atomic,
            &[mode, &format!("weft:/{mode}"), rounds, "1"],
        );
        assert_ok(&out, &format!("atomic.c {mode} under MPICH"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("atomic OK"),
            "atomic.c {mode} under MPICH:\n{stdout}"
        );
    }
}
