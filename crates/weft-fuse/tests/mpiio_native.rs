//! One path for POSIX and MPI-IO: with libweft_mpiio.so preloaded, an MPI-IO open of a
//! path inside the mount is served natively (the library reads the mount's
//! `user.weft.cluster` attribute and /proc/self/mountinfo), exactly as the same file
//! named `weft:/...`:
//! - weft-mpiio's `patterns.c` on a directory of the mount, byte for byte against ROMIO
//!   on a local directory, served natively (the library's own hint report names each
//!   file), the same bytes through the mount and the native client; written by the
//!   mount path and read back by the `weft:` name and the other way round; and with an
//!   environment that names no cluster (the mount's attribute alone finds it);
//! - a PnetCDF program (`c/pnetcdf_rw.c`: blocking puts and gets, `iput`/`iget` +
//!   `wait_all`, independent gets; `ncmpi_open` checks the header with POSIX calls on
//!   the path) on the mount path and by the `weft:` name of a file whose path is the
//!   same below the working directory, against the same program on a local directory.
//!
//! Needs Open MPI (mpicc.openmpi, mpirun.openmpi), libpnetcdf-dev
//! (scripts/install-deps.sh) and the workspace's release build (libweft_mpiio.so).

mod common;

use common::Mount;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use weft_testkit::mpi::{assert_ok, assert_same, library, weft_bytes as native_bytes};
use weft_testkit::TestCluster;

const RANKS: usize = 3;
const PATTERNS: [&str; 9] = [
    "block3d",
    "block3d_ghost",
    "cyclic2d",
    "cyclic2d_mem",
    "cyclic2d_bytes",
    "overlap",
    "s3d",
    "flash",
    "indexed",
];

fn compile(dir: &Path, source: &Path, name: &str, libs: &[&str]) -> PathBuf {
    let binary = dir.join(name);
    let compiler = std::env::var("MPICC").unwrap_or_else(|_| "mpicc.openmpi".into());
    let out = Command::new(&compiler)
        .args(["-O2", "-o"])
        .arg(&binary)
        .arg(source)
        .args(libs)
        .output()
        .unwrap_or_else(|e| panic!("{compiler} (install openmpi-bin, libopenmpi-dev): {e}"));
    assert!(
        out.status.success(),
        "{compiler} {}: {}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    binary
}

/// mpirun.openmpi of `program`; with `preload`, libweft_mpiio.so and `env` go to every
/// rank. `cwd`: the ranks' working directory.
fn mpirun(
    program: &Path,
    args: &[&str],
    preload: bool,
    env: &[(String, String)],
    cwd: Option<&Path>,
) -> Output {
    let mut c = Command::new("timeout");
    c.args([
        "-k",
        "5",
        "120",
        "mpirun.openmpi",
        "--oversubscribe",
        "--bind-to",
        "none",
    ])
    .args(["-np", &RANKS.to_string()])
    .args([
        "--mca",
        "btl",
        "self,vader",
        "--mca",
        "btl_vader_single_copy_mechanism",
        "none",
    ])
    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    // Only the cluster `env` names: mpirun hands its own environment to the ranks, and
    // one naming a developer's cluster would be used instead of the mount's.
    for name in ["WEFT_HOME", "WEFT_META", "WEFT_KEY", "WEFT_CWD"] {
        c.env_remove(name);
    }
    if preload {
        c.arg("-x").arg(format!("LD_PRELOAD={}", library().display()));
        c.args(["-x", "WEFT_PRINT_HINTS=1", "-x", "WEFT_MPIIO_VERBOSE=1"]);
    }
    for (k, v) in env {
        c.arg("-x").arg(format!("{k}={v}"));
    }
    if let Some(dir) = cwd {
        c.arg("--wdir").arg(dir);
    }
    c.arg(program).args(args);
    let out = c.output().expect("running mpirun.openmpi");
    assert_ne!(
        out.status.code(),
        Some(124),
        "mpirun {} {args:?} hung",
        program.display()
    );
    out
}

/// The library reported the effective hints of `name`: it served the file itself.
fn assert_native(out: &Output, name: &str, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("weft-mpiio: {name}: hints ")),
        "{what}: {name} was not served by libweft_mpiio (no hint report):\n{stderr}"
    );
}

fn weft_mpiio_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../weft-mpiio/tests/c/{name}.c"))
}

fn cluster_env(cluster: &TestCluster) -> Vec<(String, String)> {
    cluster.env()
}

#[test]
fn mpi_io_on_a_path_in_the_mount_is_served_natively_as_the_weft_name() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let scratch = tempfile::tempdir().unwrap();
    let patterns = compile(scratch.path(), &weft_mpiio_source("patterns"), "patterns", &[]);

    // The attribute the library reads names the cluster.
    let cluster_attr = Command::new("getfattr")
        .args(["--only-values", "-n", weft_fuse::CLUSTER_XATTR])
        .arg(mount.path())
        .output()
        .expect("getfattr (install attr)");
    let cluster_attr = String::from_utf8_lossy(&cluster_attr.stdout).to_string();
    assert!(
        cluster_attr.contains(&format!("meta={}", cluster.meta_addr())),
        "{}: {cluster_attr:?}",
        weft_fuse::CLUSTER_XATTR
    );

    let reference = scratch.path().join("ref");
    std::fs::create_dir(&reference).unwrap();
    let local = mpirun(
        &patterns,
        &[&format!("{}/", reference.display())],
        false,
        &[],
        None,
    );
    assert_ok(&local, "patterns through ROMIO on a local directory");

    let env = cluster_env(&cluster);
    std::fs::create_dir(mount.join("pat")).unwrap();
    let prefix = format!("{}/", mount.join("pat").display());
    let out = mpirun(&patterns, &[&prefix, "cb_buffer_size=65536"], true, &env, None);
    assert_ok(&out, "patterns on the mount path");
    for pattern in PATTERNS {
        assert_native(&out, &format!("{prefix}{pattern}"), "patterns on the mount path");
        let expected = std::fs::read(reference.join(pattern)).unwrap();
        let what = format!("{pattern} by the mount path");
        assert_same(
            &native_bytes(&cluster, &format!("/pat/{pattern}")),
            &expected,
            &what,
        );
        assert_same(
            &std::fs::read(mount.join(&format!("pat/{pattern}"))).unwrap(),
            &expected,
            &what,
        );
    }

    // One file, two names: written by one, read back and checked by the other.
    for (k, (write, read)) in [("mount", "weft"), ("weft", "mount")].into_iter().enumerate() {
        let dir = format!("cross{k}");
        std::fs::create_dir(mount.join(&dir)).unwrap();
        let name = |how: &str| match how {
            "mount" => format!("{}/", mount.join(&dir).display()),
            _ => format!("weft:/{dir}/"),
        };
        for (phase, how) in [("write", write), ("read", read)] {
            let out = mpirun(
                &patterns,
                &[&name(how), "--only", "block3d", "--phase", phase],
                true,
                &env,
                None,
            );
            assert_ok(&out, &format!("block3d, {phase} by the {how} name"));
        }
        let expected = std::fs::read(reference.join("block3d")).unwrap();
        assert_same(
            &native_bytes(&cluster, &format!("/{dir}/block3d")),
            &expected,
            &dir,
        );
    }

    // An environment that names no cluster (an empty HOME, no WEFT_*): the mount's
    // attribute alone leads the library to the cluster.
    let empty_home = tempfile::tempdir().unwrap();
    std::fs::create_dir(mount.join("bare")).unwrap();
    let prefix = format!("{}/", mount.join("bare").display());
    let bare_env = vec![("HOME".to_owned(), empty_home.path().display().to_string())];
    let out = mpirun(&patterns, &[&prefix, "--only", "cyclic2d"], true, &bare_env, None);
    assert_ok(
        &out,
        "cyclic2d on the mount path with no cluster in the environment",
    );
    assert_native(
        &out,
        &format!("{prefix}cyclic2d"),
        "no cluster in the environment",
    );
    let expected = std::fs::read(reference.join("cyclic2d")).unwrap();
    assert_same(
        &native_bytes(&cluster, "/bare/cyclic2d"),
        &expected,
        "bare environment",
    );
}

#[test]
fn pnetcdf_runs_unmodified_on_the_mount_path_and_by_the_weft_name() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let scratch = tempfile::tempdir().unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/pnetcdf_rw.c");
    let program = compile(scratch.path(), &source, "pnetcdf_rw", &["-lpnetcdf"]);
    let env = cluster_env(&cluster);

    let local = scratch.path().join("local.nc");
    let out = mpirun(&program, &[local.to_str().unwrap()], false, &[], None);
    assert_ok(&out, "pnetcdf_rw on a local directory");
    let expected = std::fs::read(&local).unwrap();

    // By the mount path: every MPI-IO call native, PnetCDF's POSIX calls through the mount.
    std::fs::create_dir(mount.join("nc")).unwrap();
    let by_path = mount.join("nc/by_path.nc");
    let out = mpirun(&program, &[by_path.to_str().unwrap()], true, &env, None);
    assert_ok(&out, "pnetcdf_rw on the mount path");
    assert!(String::from_utf8_lossy(&out.stdout).contains("pnetcdf ok"));
    assert_native(&out, by_path.to_str().unwrap(), "pnetcdf_rw on the mount path");
    assert_same(
        &native_bytes(&cluster, "/nc/by_path.nc"),
        &expected,
        "by the mount path",
    );
    assert_same(
        &std::fs::read(&by_path).unwrap(),
        &expected,
        "by the mount path, read through the mount",
    );

    // By the weft: name. PnetCDF strips a "prefix:" and checks the header with POSIX
    // calls on the rest, which libweft_mpiio serves from Weft (weft-mpiio's
    // src/stripped.rs; absolute weft:/ names are tested by its tests/pnetcdf.rs); run
    // from the mount's root, the relative name is the same file through the mount too.
    let out = mpirun(&program, &["weft:nc/by_name.nc"], true, &env, Some(mount.path()));
    assert_ok(&out, "pnetcdf_rw by the weft: name");
    assert_native(&out, "weft:nc/by_name.nc", "pnetcdf_rw by the weft: name");
    assert_same(
        &native_bytes(&cluster, "/nc/by_name.nc"),
        &expected,
        "by the weft: name",
    );
}
