//! MPI programs on `weft:` files through libweft_mpiio.so, under mpirun with 1, 3 and 4
//! processes against a real cluster (4 io servers, 64 KiB stripes):
//! - every collective method on every pattern of `c/patterns.c`, each file compared
//!   byte for byte with the same program run on the local file system through the MPI
//!   library's own MPI-IO (ROMIO, `--mca io romio321`); the same for `server_directed`
//!   (each schedule) and the other methods on cached files, with a colocated tier and
//!   with two separate cache managers;
//! - errors agreed on every rank, nothing hanging (`c/errors.c`), uncached and cached;
//! - a cached file written through one method and read through another, and coherent
//!   across MPI-IO, the native client and `weft get` with no sync in between;
//! - the `weft_cache` hint setting a new file's caching mode;
//! - parallel HDF5 (`c/hdf5_rw.c`) and h5dump of the file after `weft get`;
//! - hints from $WEFT_HINTS, WEFT_PRINT_HINTS, striping hints setting the layout;
//! - trace capture (WEFT_TRACE): the same file bytes with and without it, and traces
//!   holding every rank's original requests and the aggregators' sent ones per call;
//! - weft_cio_aware on a cached file: the same bytes with and without it.
//!
//! Needs mpicc/mpirun (Open MPI), libhdf5-openmpi-dev and hdf5-tools
//! (scripts/install-deps.sh), and the workspace's release build.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use weft_testkit::mpi::{assert_ok, library, weft_bytes};
use weft_testkit::{ClusterOptions, TestCluster};

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
const METHODS: [&str; 8] = [
    "two_phase",
    "interleaved",
    "pipelined",
    "interleaved_pipelined",
    "stripe_aligned",
    "independent",
    "server_directed",
    "auto",
];
/// Method hints run on cached files: server_directed in each schedule, and the others
/// that route through the tier in their own ways.
const CACHED_RUNS: [&[&str]; 6] = [
    &["weft_cb_method=server_directed"],
    &["weft_cb_method=server_directed", "weft_cm_schedule=all_at_once"],
    &["weft_cb_method=server_directed", "weft_cm_schedule=in_order"],
    &["weft_cb_method=two_phase"],
    &["weft_cb_method=independent"],
    &["weft_cb_method=auto"],
];
/// Seconds one mpirun may take before it counts as hung.
const MPIRUN_TIMEOUT_S: &str = "120";

struct Programs {
    patterns: PathBuf,
    errors: PathBuf,
    hdf5: PathBuf,
    delegates: PathBuf,
}

fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(name)
}

fn compile(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    compile_source(dir, name, &source(&format!("{name}.c")), extra)
}

/// Compiles a C program elsewhere in the workspace (`relative` to this crate).
fn compile_at(dir: &Path, name: &str, relative: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    compile_source(dir, name, &path, &["-lm"])
}

fn compile_source(dir: &Path, name: &str, source: &Path, extra: &[&str]) -> PathBuf {
    weft_testkit::mpi::compile("mpicc", "MPICC", dir, name, source, extra)
}

fn programs() -> &'static Programs {
    static PROGRAMS: OnceLock<Programs> = OnceLock::new();
    PROGRAMS.get_or_init(|| {
        let dir = weft_testkit::mpi::program_dir("weft-mpiio-c-");
        Programs {
            patterns: compile(&dir, "patterns", &[]),
            errors: compile(&dir, "errors", &[]),
            delegates: compile(&dir, "delegates", &[]),
            hdf5: compile(
                &dir,
                "hdf5_rw",
                &[
                    "-I/usr/include/hdf5/openmpi",
                    "-L/usr/lib/x86_64-linux-gnu/hdf5/openmpi",
                    "-lhdf5",
                ],
            ),
        }
    })
}

/// mpirun of `program` with `np` processes; with a cluster, LD_PRELOAD and WEFT_HOME
/// are passed to every rank.
fn mpirun(
    np: usize,
    cluster: Option<&TestCluster>,
    env: &[(&str, &str)],
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
    }
    for (k, v) in env {
        c.env(k, v).arg("-x").arg(k);
    }
    c.arg(program).args(args);
    let out = c.output().expect("running mpirun");
    if out.status.code() == Some(124) {
        panic!(
            "mpirun {} {args:?} hung (killed after {MPIRUN_TIMEOUT_S} s):\n{}",
            program.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
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

/// The same cluster with a cache tier: `placement` "colocated" or a number of separate
/// cache managers; new files are cached.
fn cached_cluster(placement: &str) -> TestCluster {
    TestCluster::start_with(&ClusterOptions {
        io_servers: 4,
        stripe_size: 64 * 1024,
        stripe_count: 0,
        ..ClusterOptions::cached(placement, "64M")
    })
}

/// The patterns run through ROMIO on the local file system with `np` processes: the
/// reference files, and the prefix of the local files of the `mixed` pattern.
fn romio_reference(np: usize) -> (tempfile::TempDir, String) {
    let p = programs();
    let reference = tempfile::tempdir().unwrap();
    let prefix = format!("{}/", reference.path().display());
    let local_prefix = format!("{prefix}local_");
    let out = mpirun(
        np,
        None,
        &[],
        &["--mca", "io", "romio321"],
        &p.patterns,
        &[&prefix, "--local-prefix", &local_prefix],
    );
    assert_ok(&out, "reference run through ROMIO");
    (reference, local_prefix)
}

/// Panics unless the weft: file `path` holds exactly the bytes of `expected`.
fn assert_same_bytes(cluster: &TestCluster, path: &str, expected: &[u8], what: &str) {
    let got = weft_bytes(cluster, path);
    assert!(
        got == expected,
        "{what}: the weft: file {path} ({} bytes) differs from ROMIO's ({} bytes){}",
        got.len(),
        expected.len(),
        got.iter()
            .zip(expected)
            .position(|(a, b)| a != b)
            .map_or(String::new(), |i| format!(" first at byte {i}"))
    );
}

/// Every pattern with `np` processes and each of `runs` (hint lists) against ROMIO on
/// the local file system. cb_buffer_size 64 KiB makes every collective call of the
/// exchange methods take several rounds.
fn runs_match_romio(cluster: &TestCluster, np: usize, runs: &[&[&str]]) {
    let p = programs();
    let (reference, local_prefix) = romio_reference(np);
    for (k, hints) in runs.iter().enumerate() {
        let dir = format!("/np{np}_{k}");
        cluster.client().mkdir(&dir, 0o755).unwrap();
        let weft_prefix = format!("weft:{dir}/");
        let mut args = vec![
            &weft_prefix[..],
            "--local-prefix",
            &local_prefix,
            "cb_buffer_size=65536",
        ];
        args.extend_from_slice(hints);
        let out = mpirun(
            np,
            Some(cluster),
            &[("WEFT_MPIIO_VERBOSE", "1")],
            &[],
            &p.patterns,
            &args,
        );
        assert_ok(&out, &format!("{hints:?} with {np} processes"));
        for pattern in PATTERNS {
            let expected = std::fs::read(reference.path().join(pattern)).unwrap();
            let what = format!("{hints:?}, {np} processes, {pattern}");
            assert_same_bytes(cluster, &format!("{dir}/{pattern}"), &expected, &what);
        }
    }
}

/// Every method on every pattern with `np` processes, against ROMIO.
fn methods_match_romio(np: usize) {
    let hints: Vec<String> = METHODS.iter().map(|m| format!("weft_cb_method={m}")).collect();
    let runs: Vec<Vec<&str>> = hints.iter().map(|h| vec![h.as_str()]).collect();
    let runs: Vec<&[&str]> = runs.iter().map(Vec::as_slice).collect();
    runs_match_romio(&cluster(), np, &runs);
}

/// server_directed in each schedule, and the other methods, on cached files with 1, 3
/// and 4 processes, against ROMIO.
fn cached_methods_match_romio(placement: &str) {
    let cluster = cached_cluster(placement);
    for np in [1, 3, 4] {
        runs_match_romio(&cluster, np, &CACHED_RUNS);
    }
    // Every file went through the tier: the managers hold (or held) its blocks.
    let file = cluster
        .client()
        .open("/np4_0/cyclic2d", &Default::default())
        .unwrap();
    assert_eq!(file.cache_mode(), weft_client::CacheMode::Cached);
    let status = cluster.weft(&["status"]);
    assert_ok(&status, "weft status");
}

#[test]
fn server_directed_matches_romio_on_a_colocated_tier() {
    cached_methods_match_romio("colocated");
}

#[test]
fn server_directed_matches_romio_on_two_separate_cache_managers() {
    cached_methods_match_romio("2");
}

#[test]
fn every_method_matches_romio_with_1_process() {
    methods_match_romio(1);
}

// Regression: with 3 processes some ranks send nothing to some aggregators in a
// round; an empty Vec's pointer (0x1) reached MPI_Alltoallv, which Open MPI reads as
// MPI_IN_PLACE, and interleaved/stripe_aligned hung. Every method must pass here.
#[test]
fn every_method_matches_romio_with_3_processes() {
    methods_match_romio(3);
}

#[test]
fn every_method_matches_romio_with_4_processes() {
    methods_match_romio(4);
}

#[test]
fn errors_are_the_same_on_every_rank_and_nothing_hangs() {
    errors_agree(&cluster(), &[]);
}

#[test]
fn server_directed_errors_are_the_same_on_every_rank_on_a_cached_file() {
    let dir = tempfile::tempdir().unwrap();
    let hints = dir.path().join("hints");
    std::fs::write(&hints, "weft_cb_method server_directed\n").unwrap();
    errors_agree(
        &cached_cluster("colocated"),
        &[("WEFT_HINTS", hints.to_str().unwrap())],
    );
}

fn errors_agree(cluster: &TestCluster, env: &[(&str, &str)]) {
    let p = programs();
    cluster.client().mkdir("/errors", 0o755).unwrap();
    for np in [1, 4] {
        let out = mpirun(np, Some(cluster), env, &[], &p.errors, &["weft:/errors/"]);
        assert_ok(&out, &format!("errors with {np} processes"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("errors OK"), "{stdout}");
    }
    // Under MPI_ERRORS_ARE_FATAL the job ends, and what it prints says why, not
    // only the class MPI_Error_string gives.
    let out = mpirun(2, Some(cluster), env, &[], &p.errors, &["weft:/errors/", "fatal"]);
    assert!(!out.status.success(), "a fatal error ended the job well");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("the open returned"),
        "MPI_ERRORS_ARE_FATAL returned"
    );
    assert!(
        stderr.contains("error on a weft: file: ") && stderr.contains("/errors/missing"),
        "the fatal report does not say why:\n{stderr}"
    );
}

// Regression: HDF5's filetypes span more data than their extent; set_view refused
// them with MPI_ERR_TYPE (MPI allows them while no access reaches a second tile).
// Regression: a point selection of 2^20 points per rank (HDF5's testpar/t_bigio)
// crashed the library (its datatype's 8 MiB of addresses were copied on the stack),
// then failed with MPI_ERR_TYPE (more blocks than a server view takes).
#[test]
fn hdf5_writes_and_reads_chunked_and_contiguous_datasets() {
    let p = programs();
    let cluster = cluster();
    cluster.client().mkdir("/h5", 0o755).unwrap();
    let out = mpirun(4, Some(&cluster), &[], &[], &p.hdf5, &["weft:/h5/data.h5"]);
    assert_ok(&out, "hdf5_rw on weft:");
    assert!(String::from_utf8_lossy(&out.stdout).contains("hdf5 OK"));
    let local = tempfile::tempdir().unwrap();
    let copy = local.path().join("data.h5");
    let got = cluster.weft(&["get", "/h5/data.h5", copy.to_str().unwrap()]);
    assert_ok(&got, "weft get");
    let dump = Command::new("h5dump")
        .args(["-d", "/chunked", "-s", "5,7", "-c", "1,3"])
        .arg(&copy)
        .output()
        .expect("running h5dump (install hdf5-tools)");
    assert_ok(&dump, "h5dump");
    // chunked[i][j] = 200000 + i * 48 + j (see hdf5_rw.c).
    let text = String::from_utf8_lossy(&dump.stdout);
    assert!(text.contains("(5,7): 200247, 200248, 200249"), "{text}");
    let dump = Command::new("h5dump")
        .args(["-d", "/contiguous", "-s", "63,47", "-c", "1,1"])
        .arg(&copy)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&dump.stdout);
    assert!(text.contains("(63,47): 103071"), "{text}");
    // points[k] = -k, written by the interleaved point selections (one block per point).
    let dump = Command::new("h5dump")
        .args(["-d", "/points", "-s", "4194301", "-c", "3"])
        .arg(&copy)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&dump.stdout);
    assert!(text.contains("(4194301): -4194301, -4194302, -4194303"), "{text}");
}

#[test]
fn hints_come_from_weft_hints_and_striping_sets_the_layout() {
    let p = programs();
    let cluster = cluster();
    cluster.client().mkdir("/hints", 0o755).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let hints = dir.path().join("hints");
    std::fs::write(
        &hints,
        "# ROMIO_HINTS format\nweft_cb_method stripe_aligned\ncb_buffer_size 131072\n",
    )
    .unwrap();
    let out = mpirun(
        3,
        Some(&cluster),
        &[("WEFT_HINTS", hints.to_str().unwrap()), ("WEFT_PRINT_HINTS", "1")],
        &[],
        &p.patterns,
        &[
            "weft:/hints/",
            "--only",
            "block3d",
            "striping_unit=131072",
            "striping_factor=2",
        ],
    );
    assert_ok(&out, "patterns with WEFT_HINTS");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("weft_cb_method=stripe_aligned"), "{stderr}");
    assert!(stderr.contains("cb_buffer_size=131072"), "{stderr}");
    assert!(stderr.contains("method stripe_aligned"), "{stderr}");
    let file = cluster
        .client()
        .open("/hints/block3d", &Default::default())
        .unwrap();
    assert_eq!(file.layout().stripe_size_bytes, 131072);
    assert_eq!(file.layout().servers.len(), 2);
}

#[test]
fn auto_follows_interleaving_and_the_bytes_per_rank_and_server() {
    let p = programs();
    let cluster = cluster();
    cluster.client().mkdir("/auto", 0o755).unwrap();
    // One process: nothing interleaves, so ROMIO's rule picks independent I/O.
    let cases: [(usize, &[&str], &str); 3] = [
        // One process: nothing interleaves, so ROMIO's rule picks independent I/O.
        (
            1,
            &["--only", "block3d"],
            "method independent (requests do not interleave",
        ),
        // Four processes on a small CYCLIC darray interleave, a few KiB per rank and
        // server: the exchange (two_phase).
        (
            4,
            &["--only", "cyclic2d"],
            "write /auto/cyclic2d: method two_phase (small accesses",
        ),
        // An 8 MiB matrix: 512 KiB per rank and server, view I/O.
        (
            4,
            &["--only", "cyclic2d", "--cyclic", "1024", "8"],
            "write /auto/cyclic2d: method independent (views registered",
        ),
    ];
    for (np, args, expected) in cases {
        let mut all = vec!["weft:/auto/"];
        all.extend_from_slice(args);
        let out = mpirun(
            np,
            Some(&cluster),
            &[("WEFT_PRINT_HINTS", "1")],
            &[],
            &p.patterns,
            &all,
        );
        assert_ok(&out, "auto");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[test]
fn a_cached_file_written_through_one_method_reads_back_through_another() {
    let p = programs();
    let cluster = cached_cluster("2");
    let pairs = [
        ("server_directed", "two_phase"),
        ("two_phase", "server_directed"),
        ("independent", "server_directed"),
        ("server_directed", "independent"),
    ];
    for (k, (write, read)) in pairs.into_iter().enumerate() {
        let dir = format!("/pair{k}");
        cluster.client().mkdir(&dir, 0o755).unwrap();
        for pattern in ["cyclic2d", "block3d_ghost"] {
            // No sync between the write and the read: the read sees the tier's blocks.
            let out = mpirun(
                4,
                Some(&cluster),
                &[("WEFT_MPIIO_VERBOSE", "1")],
                &[],
                &p.patterns,
                &[
                    &format!("weft:{dir}/"),
                    "--only",
                    pattern,
                    "--no-sync",
                    "--read-method",
                    read,
                    &format!("weft_cb_method={write}"),
                ],
            );
            assert_ok(&out, &format!("{pattern}: written by {write}, read by {read}"));
        }
    }
}

#[test]
fn a_cached_file_is_coherent_across_mpiio_the_native_client_and_weft_get_without_sync() {
    let p = programs();
    let cluster = cached_cluster("colocated");
    let (reference, _) = romio_reference(4);
    let expected = std::fs::read(reference.path().join("cyclic2d")).unwrap();
    cluster.client().mkdir("/coherent", 0o755).unwrap();
    // MPI-IO writes (server_directed, no sync); the native client and `weft get` read.
    let out = mpirun(
        4,
        Some(&cluster),
        &[],
        &[],
        &p.patterns,
        &[
            "weft:/coherent/",
            "--only",
            "cyclic2d",
            "--phase",
            "write",
            "--no-sync",
            "weft_cb_method=server_directed",
        ],
    );
    assert_ok(&out, "collective write without sync");
    assert_same_bytes(
        &cluster,
        "/coherent/cyclic2d",
        &expected,
        "native client after MPI-IO",
    );
    let local = tempfile::tempdir().unwrap();
    let copy = local.path().join("cyclic2d");
    assert_ok(
        &cluster.weft(&["get", "/coherent/cyclic2d", copy.to_str().unwrap()]),
        "weft get",
    );
    assert!(
        std::fs::read(&copy).unwrap() == expected,
        "weft get differs from ROMIO's file"
    );
    // The native client writes (no sync, handle kept open); MPI-IO reads and checks
    // every element.
    cluster.client().mkdir("/coherent2", 0o755).unwrap();
    let file = cluster
        .client()
        .create("/coherent2/cyclic2d", &Default::default())
        .unwrap();
    assert_eq!(file.cache_mode(), weft_client::CacheMode::Cached);
    file.write_at(0, &expected).unwrap();
    let out = mpirun(
        4,
        Some(&cluster),
        &[],
        &[],
        &p.patterns,
        &[
            "weft:/coherent2/",
            "--only",
            "cyclic2d",
            "--phase",
            "read",
            "weft_cb_method=server_directed",
        ],
    );
    assert_ok(&out, "collective read of what the native client wrote");
    drop(file);
}

#[test]
fn the_weft_cache_hint_sets_a_new_files_caching_mode_and_auto_follows_it() {
    let p = programs();
    let cluster = TestCluster::start_with(&ClusterOptions {
        extra: [
            "--cache",
            "colocated",
            "--cache-memory",
            "64M",
            "--cache-default",
            "none",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        ..Default::default()
    });
    for (dir, hint, mode) in [
        (
            "/hinted",
            Some("weft_cache=cached"),
            weft_client::CacheMode::Cached,
        ),
        ("/default", None, weft_client::CacheMode::None),
    ] {
        cluster.client().mkdir(dir, 0o755).unwrap();
        let prefix = format!("weft:{dir}/");
        let mut args = vec![&prefix[..], "--only", "cyclic2d"];
        args.extend(hint);
        let out = mpirun(
            4,
            Some(&cluster),
            &[("WEFT_PRINT_HINTS", "1")],
            &[],
            &p.patterns,
            &args,
        );
        assert_ok(&out, &format!("patterns with {hint:?}"));
        let file = cluster
            .client()
            .open(&format!("{dir}/cyclic2d"), &Default::default())
            .unwrap();
        assert_eq!(file.cache_mode(), mode, "{dir}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("weft_cache={}", mode.name())),
            "{stderr}"
        );
        if mode == weft_client::CacheMode::Cached {
            assert!(
                stderr.contains("write /hinted/cyclic2d: method server_directed"),
                "{stderr}"
            );
        } else {
            assert!(!stderr.contains("method server_directed"), "{stderr}");
        }
    }
}

/// Runs the overlap and cyclic2d patterns (4 processes, two_phase, 64 KiB windows) into
/// `dir` with `env` and `hints`.
fn overlap_and_cyclic(cluster: &TestCluster, dir: &str, env: &[(&str, &str)], hints: &[&str]) {
    let p = programs();
    cluster.client().mkdir(dir, 0o755).unwrap();
    for only in ["overlap", "cyclic2d"] {
        let prefix = format!("weft:{dir}/");
        let mut args = vec![
            prefix.as_str(),
            "--only",
            only,
            "weft_cb_method=two_phase",
            "cb_buffer_size=65536",
        ];
        args.extend_from_slice(hints);
        let out = mpirun(4, Some(cluster), env, &[], &p.patterns, &args);
        assert_ok(&out, &format!("{only} in {dir} with {env:?} {hints:?}"));
    }
}

/// Tracing changes nothing in the files, and the traces hold what the simulator needs:
/// one per rank, every rank's original request of every collective call, and the
/// aggregators' sent requests under the same call ids.
#[test]
fn tracing_leaves_the_files_unchanged_and_records_both_sides() {
    let cluster = cluster();
    let traces = tempfile::tempdir().unwrap();
    overlap_and_cyclic(&cluster, "/untraced", &[], &[]);
    overlap_and_cyclic(
        &cluster,
        "/traced",
        &[("WEFT_TRACE", traces.path().to_str().unwrap())],
        &[],
    );
    for name in ["overlap", "cyclic2d"] {
        let a = weft_bytes(&cluster, &format!("/untraced/{name}"));
        let b = weft_bytes(&cluster, &format!("/traced/{name}"));
        assert!(!a.is_empty());
        assert!(a == b, "{name}: tracing changed the file");
    }
    // Two runs of 4 ranks: 8 traces, each named by its rank.
    let mut files: Vec<PathBuf> = std::fs::read_dir(traces.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 8, "{files:?}");
    let bytes: Vec<(String, Vec<u8>)> = files
        .iter()
        .map(|f| (f.display().to_string(), std::fs::read(f).unwrap()))
        .collect();
    use weft_trace::format::{Reader, Record, Side};
    let mut originals = std::collections::BTreeMap::new();
    let mut sent_calls = std::collections::BTreeSet::new();
    let mut calls = std::collections::BTreeSet::new();
    for (name, b) in &bytes {
        let reader = Reader::new(b).unwrap();
        let rank = reader.header().rank.expect("an MPI rank");
        let mut sent = 0;
        for record in reader {
            if let Record::Request(r) = record.unwrap_or_else(|e| panic!("{name}: {e}")) {
                let call = r.call.expect("MPI-IO requests carry a call id");
                match r.flags.side() {
                    Side::Original => {
                        assert_eq!(r.rank, Some(rank), "{name}");
                        calls.insert(call);
                        if r.flags.collective() {
                            *originals.entry(call).or_insert(0) += 1;
                        }
                    }
                    Side::Sent => {
                        sent += 1;
                        sent_calls.insert(call);
                    }
                }
            }
        }
        assert!(sent > 0, "{name}: every rank aggregates, so every rank sends");
    }
    // Every collective call has one original request per rank, under one id: the
    // overlap pattern's collective read, cyclic2d's write and read.
    assert!(originals.len() >= 3, "{originals:?}");
    assert!(originals.values().all(|&n| n == 4), "{originals:?}");
    // Every sent request belongs to a call some rank made (the overlap pattern's
    // independent write included).
    assert!(sent_calls.is_subset(&calls), "{sent_calls:?} {calls:?}");
    // Both streams come out of them, and the text form reads.
    let inputs: Vec<(String, &[u8])> = bytes.iter().map(|(n, b)| (n.clone(), &b[..])).collect();
    let refs = weft_trace::refs::build(
        &inputs,
        &weft_trace::refs::RefOptions {
            ops: weft_trace::refs::Ops::All,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(!refs.original.is_empty() && !refs.aggregated.is_empty());
    let show = Command::new(weft_testkit::bin_dir().join("weft"))
        .args(["trace", "show"])
        .arg(&files[0])
        .output()
        .unwrap();
    assert_ok(&show, "weft trace show");
    assert!(String::from_utf8_lossy(&show.stdout).contains("original"));
}

/// Collective reads of a cached file with the original pattern attached read the same
/// bytes as without it (with managers that do not take patterns yet, through the
/// client's fallback to ordinary requests).
#[test]
fn cio_aware_reads_of_a_cached_file_read_the_same_bytes() {
    let cluster = TestCluster::start_with(&ClusterOptions::cached("colocated", "16M"));
    overlap_and_cyclic(&cluster, "/plain", &[], &[]);
    overlap_and_cyclic(&cluster, "/aware", &[], &["weft_cio_aware=true"]);
    for name in ["overlap", "cyclic2d"] {
        let a = weft_bytes(&cluster, &format!("/plain/{name}"));
        let b = weft_bytes(&cluster, &format!("/aware/{name}"));
        assert!(!a.is_empty());
        assert!(a == b, "{name}: weft_cio_aware changed what was read or written");
    }
}

/// The first number after `"key":` in `json`.
fn json_number(json: &str, key: &str) -> u64 {
    let at = json
        .find(&format!("\"{key}\":"))
        .unwrap_or_else(|| panic!("no {key} in {json}"));
    json[at + key.len() + 3..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("{key} is not a number in {json}"))
}

/// Collective-I/O-aware caching online: the MPI-Tile-IO workload reads a tile dataset
/// with two_phase aggregation and `weft_cio_aware=true` through one cache manager
/// holding half the dataset (ARC); the manager applies the processes' original
/// references, and its hits are exactly what `weft sim` predicts from the recorded trace
/// for the original stream; and they beat, by a margin that holds whatever order the
/// ranks enter their calls in, what the same cache gets from the aggregated requests
/// alone (the benefit the pattern is for). The program checks every word it reads.
/// The manager records the references it applied (weftd's test hook `WEFT_CIO_RECORD`),
/// and they are the trace's original stream, block for block in the simulator's order.
///
/// Why exactly: each rank's pattern carries the time its trace gave the request, and
/// the manager applies a call's references in (time, rank) order, which is the order
/// `weft sim` merges the traces in; with one aggregator a call's requests reach the
/// manager one after another, so no block is pinned by a fetch or a reply in flight
/// when references evict; and the manager sizes its policy for the blocks its memory
/// holds (225 here, as the simulator's cache). The ranks' order inside a call is not
/// deterministic (it moves the hits by hundreds: 188 to 601 over all 331,776 orders of
/// the four calls' ranks, simulated), which is why the figure itself is never compared
/// with a constant; and since this workload is symmetric, some wrong orders (each
/// call's references reversed) give the same hits as the right one, hence the record.
#[test]
fn cio_aware_caching_online_matches_the_simulator() {
    // 225 blocks of 64 KiB: half the 450 blocks of the 4-process tile dataset; each
    // block is charged its bytes, 256 bytes of bookkeeping and a small extent list, and
    // the store keeps room for one block's extents to grow.
    let capacity_blocks = 225u64;
    let memory = capacity_blocks * (65_536 + 256 + 32) + 16_384 + 1_000;
    let dir = tempfile::tempdir().unwrap();
    // The manager records the references it applies, in order (weftd's test hook).
    let record = dir.path().join("record");
    std::fs::create_dir(&record).unwrap();
    let record_env = record.display().to_string();
    let cluster = TestCluster::start_with_env(
        &ClusterOptions {
            extra: [
                "--cache",
                "1",
                "--cache-policy",
                "arc",
                "--cache-memory",
                &memory.to_string(),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            ..Default::default()
        },
        &[("WEFT_CIO_RECORD", &record_env)],
    );
    let program = compile_at(dir.path(), "cio_workloads", "../weft-bench/c/cio_workloads.c");
    let traces = dir.path().join("traces");
    std::fs::create_dir(&traces).unwrap();
    let trace_env = traces.display().to_string();
    let run = |env: &[(&str, &str)]| {
        let out = mpirun(
            4,
            Some(&cluster),
            env,
            &[],
            &program,
            &[
                "weft:/tiles",
                "--tile",
                "1024",
                "1024",
                "128",
                "128",
                "4",
                "weft_cio_aware=true",
                "weft_cb_method=two_phase",
                // One aggregator: its requests reach the manager one after another, so
                // no block is held by a reply in flight or pinned by a fetch.
                "cb_nodes=1",
            ],
        );
        assert_ok(&out, "the tile workload");
    };
    // Write (and sync) the dataset, then restart the manager empty: the traced read
    // phase starts from an empty cache and a fresh policy, as the simulator does.
    run(&[]);
    let manager = cluster.config().cache_managers()[0].id;
    cluster.kill9(manager);
    cluster.restart();
    run(&[("WEFT_TRACE", &trace_env), ("CIO_SKIP_WRITE", "1")]);
    let timeouts = weft_rpc::Timeouts {
        connect: std::time::Duration::from_secs(5),
        request: std::time::Duration::from_secs(10),
    };
    let connection =
        weft_rpc::Connection::connect(&cluster.addr(manager), "test", &cluster.auth(), timeouts).unwrap();
    let online = match connection
        .call(&weft_proto::Request::CacheCioStats, &[])
        .unwrap()
        .0
    {
        weft_proto::Response::CacheCioStats(stats) => stats,
        other => panic!("{other:?}"),
    };
    // (references, hits, capacity in blocks) that `weft sim` gives for one policy and
    // stream of the trace, with the manager's cache size.
    let sim = |policy: &str, stream: &str| {
        let out = Command::new(weft_testkit::bin("weft"))
            .args(["sim", &trace_env, "--policy", policy, "--stream", stream])
            .args(["--unrequested", "cold"])
            .args(["--cache-sizes", &(capacity_blocks * 65_536).to_string()])
            .args(["--managers", "1", "--json", "--no-svg"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let json = String::from_utf8(out.stdout).unwrap();
        (
            json_number(&json, "references"),
            json_number(&json, "hits"),
            json_number(&json, "capacity_blocks_per_manager"),
        )
    };
    let (references, hits, capacity) = sim("arc", "original");
    let (aggregated_references, aggregated_arc) = {
        let (r, h, _) = sim("arc", "aggregated");
        (r, h)
    };
    let (_, aggregated_lru, _) = sim("lru", "aggregated");
    eprintln!(
        "online {online:?}; simulated: original stream {hits} hits of {references}, \
         aggregated stream {aggregated_arc} (arc) and {aggregated_lru} (lru) of {aggregated_references}"
    );
    assert_eq!(
        capacity, capacity_blocks,
        "the simulated cache holds what the manager holds"
    );
    // The order: the blocks the manager referenced, one after another, are the blocks
    // of the trace's original stream in the simulator's order.
    let recorded = recorded_references(&record);
    let expected: Vec<u64> = {
        let bytes: Vec<(String, Vec<u8>)> = std::fs::read_dir(&traces)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
            .collect();
        let inputs: Vec<(String, &[u8])> = bytes.iter().map(|(n, b)| (n.clone(), &b[..])).collect();
        let refs = weft_trace::refs::build(&inputs, &Default::default()).unwrap();
        refs.original
            .iter()
            .filter(|r| r.kind == weft_trace::refs::RefKind::Asked)
            .map(|r| r.block())
            .collect()
    };
    let calls: std::collections::BTreeSet<&str> = recorded.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(calls.len(), 4, "one call per pass, each applied once");
    let blocks: Vec<u64> = recorded.iter().map(|r| r.1).collect();
    if let Some(at) = (0..blocks.len().max(expected.len())).find(|&i| blocks.get(i) != expected.get(i)) {
        panic!(
            "the manager's reference {at} (of {}) is block {:?}, the trace's original stream has {:?} \
             (of {}): the manager applied another order than the simulator replays",
            blocks.len(),
            blocks.get(at),
            expected.get(at),
            expected.len()
        );
    }
    assert!(references > 0, "no references: {online:?}");
    assert_eq!(
        online.references, references,
        "every (request, block) pair counted once"
    );
    // Exactly: any difference is the manager applying references in another order than
    // the trace's, or evicting other blocks than the policy alone would (see above).
    assert_eq!(
        online.hits, hits,
        "the manager hit {} times, the simulator replaying the trace in the manager's order predicts {hits}",
        online.hits
    );
    // The benefit: without the pattern, the manager sees the aggregator's requests, a
    // scan of the whole dataset per pass through a cache of half of it (no hits, with
    // ARC or LRU). With it, at least 4% of the references hit whatever the ranks' order
    // (the fewest over every order of the ranks in the four calls: 188 of 3,840, 4.9%).
    let baseline = aggregated_arc.max(aggregated_lru);
    assert!(
        online.hits >= baseline + references / 25,
        "the pattern gave {} hits, the aggregated requests alone {baseline}: less than {} more",
        online.hits,
        references / 25
    );
}

/// The references a cache manager recorded under `WEFT_CIO_RECORD=dir` (one manager):
/// (call, block) in the order it applied them.
fn recorded_references(dir: &Path) -> Vec<(String, u64)> {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "one manager, one record: {files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    text.lines()
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            assert_eq!(f.len(), 4, "a record line is `inode call rank block`: {line:?}");
            (f[1].to_owned(), f[3].parse().unwrap())
        })
        .collect()
}

/// A cluster whose `count` separate cache managers are delegates (aligned mapping,
/// small memory so that the patterns write through eviction).
fn delegated_cluster(count: &str) -> TestCluster {
    TestCluster::start_with(&ClusterOptions::delegates(count, "2M"))
}

/// Every pattern on delegated files (hint weft_cache=delegated at create) through 1, 2,
/// 4 and 8 delegates for 4 io servers and through 3 (unaligned), with 4 processes,
/// byte for byte against ROMIO on the local file system; collective calls go without
/// an exchange, and so do independent calls (romio_cb_write/read disable).
#[test]
fn delegated_files_match_romio_through_1_2_4_8_and_3_delegates() {
    for count in ["1", "2", "4", "8", "3"] {
        let cluster = delegated_cluster(count);
        runs_match_romio(
            &cluster,
            4,
            &[
                &["weft_cache=delegated"],
                &[
                    "weft_cache=delegated",
                    "romio_cb_write=disable",
                    "romio_cb_read=disable",
                ],
            ],
        );
        let file = cluster
            .client()
            .open("/np4_0/block3d", &Default::default())
            .unwrap();
        assert_eq!(
            file.cache_mode(),
            weft_client::CacheMode::Delegated,
            "{count} delegates"
        );
    }
}

/// On a delegated file `auto` sends each rank straight to its delegates (said by
/// WEFT_PRINT_HINTS, with the delegates in use), with no exchange among the processes.
#[test]
fn delegated_collectives_skip_the_exchange() {
    let p = programs();
    let cluster = delegated_cluster("2");
    cluster.client().mkdir("/d", 0o755).unwrap();
    let out = mpirun(
        4,
        Some(&cluster),
        &[("WEFT_PRINT_HINTS", "1")],
        &[],
        &p.patterns,
        &["weft:/d/", "--only", "cyclic2d", "weft_cache=delegated"],
    );
    assert_ok(&out, "cyclic2d on a delegated file");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("weft_cache=delegated"), "{stderr}");
    assert!(
        stderr.contains("weft:/d/cyclic2d: 2 persistent delegates: "),
        "{stderr}"
    );
    assert!(
        stderr.contains("write /d/cyclic2d: method server_directed (delegated file: static file domains"),
        "{stderr}"
    );
}

/// The weft-delegate processes and their weftds serving `cluster` (their command lines
/// name its metadata manager).
fn delegate_processes(cluster: &TestCluster) -> Vec<(i32, String)> {
    let meta = cluster.meta_addr();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let state = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // A zombie has exited: its parent has not reaped it yet.
        let zombie = state
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        if cmdline.contains("--delegate") && cmdline.contains(&meta) && !zombie {
            found.push((pid, cmdline));
        }
    }
    found
}

/// Waits until no delegate of `cluster` runs; panics naming those left after 30 s.
fn assert_delegates_gone(cluster: &TestCluster, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let left = delegate_processes(cluster);
        if left.is_empty() {
            return;
        }
        if std::time::Instant::now() > deadline {
            for (pid, _) in &left {
                // SAFETY: kill(2) of delegates this test's job started, left behind.
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
            panic!("{what}: delegates still running 30 s after the job: {left:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Every pattern through 1, 2, 4 and 8 job-scoped delegates (hint weft_delegates, 4
/// io servers) and through 3 (weft_delegate_mapping=any: unaligned), collective and
/// independent (romio_cb_write/read disable), with 4 processes, byte for byte against
/// ROMIO on the local file system; the delegates are gone when the program is. One
/// set of delegates serves all nine files of a run, one after another.
#[test]
fn job_scoped_delegates_match_romio_through_1_2_4_8_and_3() {
    for count in ["1", "2", "4", "8", "3"] {
        let cluster = cluster();
        let delegates = format!("weft_delegates={count}");
        let mut hints = vec![delegates.as_str(), "weft_delegate_memory=4194304"];
        if count == "3" {
            hints.push("weft_delegate_mapping=any");
        }
        let mut independent = hints.clone();
        independent.extend(["romio_cb_write=disable", "romio_cb_read=disable"]);
        runs_match_romio(&cluster, 4, &[&hints, &independent]);
        assert_delegates_gone(&cluster, &format!("{count} delegates"));
        // Nothing of a job-scoped delegate stays with the file.
        let file = cluster
            .client()
            .open("/np4_0/block3d", &Default::default())
            .unwrap();
        assert_eq!(file.cache_mode(), weft_client::CacheMode::None);
    }
}

/// A file four times larger than the delegates' memory (two delegates of 1 MiB, a 4
/// MiB 3D block array): written and read back through eviction, byte for byte against
/// ROMIO; WEFT_PRINT_HINTS shows the job's delegates, the count adjusted to the stripe
/// count (3 asked, 2 used for 4 io servers), evictions and fully dirty blocks written
/// back whole. $WEFT_DELEGATES asks as the hint does.
#[test]
fn job_scoped_delegates_under_memory_pressure_match_romio() {
    let p = programs();
    let cluster = cluster();
    cluster.client().mkdir("/big", 0o755).unwrap();
    let reference = tempfile::tempdir().unwrap();
    let prefix = format!("{}/", reference.path().display());
    let romio = mpirun(
        4,
        None,
        &[],
        &["--mca", "io", "romio321"],
        &p.patterns,
        &[&prefix, "--only", "block3d", "--n", "64"],
    );
    assert_ok(&romio, "block3d through ROMIO");
    let out = mpirun(
        4,
        Some(&cluster),
        &[("WEFT_PRINT_HINTS", "1"), ("WEFT_DELEGATES", "3")],
        &[],
        &p.patterns,
        &[
            "weft:/big/",
            "--only",
            "block3d",
            "--n",
            "64",
            "weft_delegate_memory=1048576",
            "romio_cb_write=disable",
        ],
    );
    assert_ok(&out, "block3d through 2 delegates of 1 MiB");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("weft_delegates=3: starting 2"), "{stderr}");
    assert!(
        stderr.contains("/big/block3d: 2 job-scoped delegates: "),
        "{stderr}"
    );
    let evictions: u64 = stderr
        .lines()
        .filter(|l| l.contains(": delegate ") && l.contains(" evictions"))
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words[words.len() - 2].parse::<u64>().unwrap()
        })
        .sum();
    assert!(evictions > 0, "no evictions under pressure:\n{stderr}");
    assert!(stderr.contains(" full, "), "{stderr}");
    let expected = std::fs::read(reference.path().join("block3d")).unwrap();
    assert_same_bytes(
        &cluster,
        "/big/block3d",
        &expected,
        "block3d, 2 delegates of 1 MiB",
    );
    assert_delegates_gone(&cluster, "memory pressure");
}

/// A spawned job's delegates disappear however the job ends: close then MPI_Finalize,
/// MPI_Finalize with the file open, MPI_Abort, and a rank killed. What the job wrote,
/// synced (part A) or not (part B), is in the file afterwards: the delegates write
/// back before they leave, even when their job died. And ("share") interleaved
/// writers of one page see each other's pieces after a barrier with no sync (one
/// replica per block), then in the file after close.
#[test]
fn job_scoped_delegates_end_with_their_job_however_it_ends() {
    let p = programs();
    let cluster = cluster();
    // The delegates' scratch directories go here (TMPDIR), to be counted.
    let scratch = tempfile::tempdir().unwrap();
    let tmpdir = scratch.path().to_str().unwrap();
    for end in ["close", "finalize", "abort", "crash", "share"] {
        let path = format!("/ends_{end}");
        let name = format!("weft:{path}");
        let out = mpirun(
            4,
            Some(&cluster),
            &[("TMPDIR", tmpdir)],
            &[],
            &p.delegates,
            &[&name, end, "weft_delegates=2"],
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("ready"),
            "{end}: the job did not get to its end:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if matches!(end, "close" | "finalize" | "share") {
            assert_ok(&out, end);
        } else {
            assert!(!out.status.success(), "{end}: mpirun succeeded");
        }
        assert_delegates_gone(&cluster, end);
        // Nor do their scratch directories stay, even when the job killed their
        // launchers (abort, crash): a later launcher given the same pid once took
        // such a directory's stale address as its delegate's.
        assert_eq!(
            delegate_dirs(scratch.path()),
            Vec::<String>::new(),
            "{end}: scratch directories left"
        );
        let bytes = weft_bytes(&cluster, &path);
        let part = 65536;
        let size = if end == "share" {
            (2 << 20) + part
        } else {
            (1 << 20) + 4 * part
        };
        assert_eq!(bytes.len(), size, "{end}: file size");
        for (start, tag) in [(0usize, 0u64), (1 << 20, 1)] {
            for x in 0..4 * part {
                let want = ((x as u64 * 7 + tag) & 0xff) as u8;
                assert_eq!(bytes[start + x], want, "{end}: part {tag}, byte {x}");
            }
        }
        if end == "share" {
            for (k, piece) in bytes[2 << 20..].chunks(8).enumerate() {
                let want = k as u64 * 1000 + k as u64 % 4;
                assert_eq!(
                    u64::from_le_bytes(piece.try_into().unwrap()),
                    want,
                    "share: piece {k}"
                );
            }
        }
    }
}

// Issue 32: the first open of a file with weft_delegates spawns the set (0.7 s); a second
// file opened while the first was open spawned a second set. Now it shares the first:
// both files' closes (WEFT_PRINT_HINTS) name the same delegates.
#[test]
fn job_scoped_delegates_are_shared_by_the_files_a_job_has_open_at_once() {
    let p = programs();
    let cluster = cluster();
    let out = mpirun(
        4,
        Some(&cluster),
        &[("WEFT_PRINT_HINTS", "1")],
        &[],
        &p.delegates,
        &["weft:/two", "two", "weft_delegates=2"],
    );
    assert_ok(&out, "two files");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // "weft-mpiio: PATH: delegate K at ADDR: ..." at each close.
    let delegates_of = |path: &str| -> Vec<String> {
        let prefix = format!("weft-mpiio: {path}: delegate ");
        stderr
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .filter_map(|rest| rest.split(' ').nth(2))
            .map(|a| a.trim_end_matches(':').to_owned())
            .collect()
    };
    let first = delegates_of("/two");
    let second = delegates_of("/two-2");
    assert_eq!(first.len(), 2, "delegate lines of /two:\n{stderr}");
    assert_eq!(
        first, second,
        "the second file had delegates of its own:\n{stderr}"
    );
    assert_delegates_gone(&cluster, "two");
    for path in ["/two", "/two-2"] {
        let bytes = weft_bytes(&cluster, path);
        let part = 65536;
        assert_eq!(bytes.len(), (1 << 20) + 4 * part, "{path}: file size");
        for (start, tag) in [(0usize, 0u64), (1 << 20, 1)] {
            for x in 0..4 * part {
                let want = ((x as u64 * 7 + tag) & 0xff) as u8;
                assert_eq!(bytes[start + x], want, "{path}: part {tag}, byte {x}");
            }
        }
    }
}

/// The names of delegate scratch directories in `dir`.
fn delegate_dirs(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("weft-delegate-"))
        .collect();
    names.sort();
    names
}

/// Pids covered from the last one given out: all of them where pid_max is 32,768
/// (this machine, CI), the next 65,536 where it is larger (systemd sets 4,194,304),
/// far more than the machine starts during the test.
const PIDS_COVERED_MAX: u64 = 1 << 16;
/// Linux gives pids from here again after reaching pid_max.
const PID_WRAP_TO: u64 = 300;

fn proc_number(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Scratch directories left by earlier jobs, one for every pid a launcher can get
/// next, each with a `ready` file naming a port nobody listens on: a new job's
/// delegates never take one for theirs (they did: a delegate "refused connections"
/// mid-job).
#[test]
fn job_scoped_delegates_never_reuse_a_stale_scratch_directory() {
    let p = programs();
    let cluster = cluster();
    // On tmpfs, with one `ready` file linked into every directory: 65,536 of them
    // are made in seconds (minutes on this machine's disk).
    let scratch = tempfile::tempdir_in("/dev/shm").unwrap();
    let ready = scratch.path().join("ready");
    std::fs::write(&ready, "127.0.0.1:1").unwrap();
    let pid_max = proc_number("/proc/sys/kernel/pid_max");
    let mut pid = proc_number("/proc/sys/kernel/ns_last_pid");
    for _ in 0..PIDS_COVERED_MAX.min(pid_max) {
        pid = if pid + 1 >= pid_max { PID_WRAP_TO } else { pid + 1 };
        // The name one directory per pid had, and the first name of each pid now.
        for name in [format!("weft-delegate-{pid}"), format!("weft-delegate-{pid}-0")] {
            let dir = scratch.path().join(name);
            if std::fs::create_dir(&dir).is_ok() {
                std::fs::hard_link(&ready, dir.join("ready")).unwrap();
            }
        }
    }
    let stale = delegate_dirs(scratch.path()).len();
    let out = mpirun(
        4,
        Some(&cluster),
        &[("TMPDIR", scratch.path().to_str().unwrap())],
        &[],
        &p.delegates,
        &["weft:/stale", "close", "weft_delegates=2"],
    );
    assert_ok(&out, "delegates beside stale scratch directories");
    assert_delegates_gone(&cluster, "stale scratch directories");
    assert_eq!(
        delegate_dirs(scratch.path()).len(),
        stale,
        "the delegates' own scratch directories stayed"
    );
    assert_eq!(weft_bytes(&cluster, "/stale").len(), (1 << 20) + 4 * 65536);
}

/// Where spawning cannot work (an Open MPI singleton has a slot per core, and 1024
/// delegates do not fit), the open fails on a clear error naming the persistent
/// alternative; and weft-delegate run by hand says what it is for.
#[test]
fn job_scoped_delegates_say_clearly_when_they_cannot_start() {
    let p = programs();
    let cluster = cluster();
    cluster.client().mkdir("/s", 0o755).unwrap();
    let mut singleton = Command::new("timeout");
    singleton
        .args(["-k", "5", MPIRUN_TIMEOUT_S])
        .arg(&p.patterns)
        .args(["weft:/s/", "--only", "block3d", "weft_delegates=1024"])
        .env("LD_PRELOAD", library())
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "0");
    for (k, v) in cluster.env() {
        singleton.env(k, v);
    }
    let out = singleton.output().unwrap();
    assert_ne!(out.status.code(), Some(124), "the singleton hung");
    assert!(
        !out.status.success(),
        "a singleton started delegates without slots"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("weft_delegates=1024: cannot start job-scoped delegates: MPI_Comm_spawn")
            && stderr.contains("--cache-mapping aligned")
            && stderr.contains("--cache delegated"),
        "{stderr}"
    );
    assert_delegates_gone(&cluster, "singleton");
    let by_hand = Command::new(weft_testkit::bin("weft-delegate"))
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .unwrap();
    assert_eq!(by_hand.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&by_hand.stderr).contains("not started by MPI_Comm_spawn"),
        "{}",
        String::from_utf8_lossy(&by_hand.stderr)
    );
}
