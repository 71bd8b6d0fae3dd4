//! PnetCDF (Debian's libpnetcdf-dev, built with Open MPI) with absolute `weft:/` names
//! through libweft_mpiio.so (issue 28, part 2). PnetCDF strips a `prefix:` and makes its
//! own POSIX calls on the rest (`access` and `truncate` at create, `open`/`read`/
//! `lseek` of the signature at open); for `weft:/d/x.nc` that rest is the local file
//! `/d/x.nc`. Before `src/stripped.rs` a create with NC_CLOBBER truncated that local
//! file to 0 bytes, left the Weft file's old contents in place, and a later
//! `ncmpi_open` failed with NC_ENOENT (no local file) or read the local file's header.
//!
//! - `c/pnetcdf_names.c` (create with NC_CLOBBER and NC_NOCLOBBER, open, redef/enddef,
//!   a 768 KiB variable, ncmpi_inq_file_format, clobber of a larger file, ncmpi_delete)
//!   with a `weft:` name whose stripped path is a local file of known bytes and mtime:
//!   the local file and its directory are never changed, and the Weft file and the
//!   program's output equal the same program's run on a local directory;
//! - the same with a `weft:` name whose stripped directory does not exist locally (the
//!   NC_ENOENT at ncmpi_open of 27 of PnetCDF's own tests);
//! - PnetCDF's own `test/testcases` and `examples/C` (the source of the installed
//!   libpnetcdf-dev, from Debian's source package: `support/fetch-pnetcdf-source.sh`),
//!   each with an absolute `weft:/` name whose stripped path is a local file of known
//!   bytes: every one passes as it does on a local file, and no local file changes;
//! - parallel HDF5 (`c/hdf5_rw.c`, H5FD_MPIO) with a decoy local file: HDF5 does not
//!   strip the prefix; checked so that it stays so;
//! - a program opening the stripped name for writing is refused loudly (ENOTSUP, a line
//!   naming the mount path), the local file untouched.
//!
//! Needs mpicc/mpirun (Open MPI), libpnetcdf-dev, libhdf5-openmpi-dev
//! (scripts/install-deps.sh) and the workspace's release build.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

mod support;

use weft_testkit::mpi::{assert_ok, assert_same, weft_bytes};
use weft_testkit::TestCluster;

const RANKS: usize = 3;

struct Programs {
    names: PathBuf,
    hdf5: PathBuf,
    writer: PathBuf,
}

fn programs() -> &'static Programs {
    static PROGRAMS: OnceLock<Programs> = OnceLock::new();
    PROGRAMS.get_or_init(|| {
        let dir = weft_testkit::mpi::program_dir("weft-mpiio-pnetcdf-");
        let c = |name: &str, extra: &[&str]| {
            let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
            weft_testkit::mpi::compile("mpicc", "MPICC", &dir, name, &source, extra)
        };
        Programs {
            names: c("pnetcdf_names", &["-lpnetcdf"]),
            hdf5: c(
                "hdf5_rw",
                &[
                    "-I/usr/include/hdf5/openmpi",
                    "-L/usr/lib/x86_64-linux-gnu/hdf5/openmpi",
                    "-lhdf5",
                ],
            ),
            writer: support::compile(&dir, "stripped_writer"),
        }
    })
}

/// mpirun of `program`; with a cluster, through libweft_mpiio.so (`support::mpirun`),
/// else through Open MPI's own MPI-IO.
fn mpirun(np: usize, cluster: Option<&TestCluster>, program: &Path, args: &[&str]) -> Output {
    if let Some(cluster) = cluster {
        return support::mpirun(np, cluster, &[], program, args);
    }
    let out = weft_testkit::mpi::mpirun_command(np, support::MPIRUN_TIMEOUT_S)
        .arg(program)
        .args(args)
        .output()
        .expect("running mpirun");
    assert_ne!(
        out.status.code(),
        Some(124),
        "mpirun {} {args:?} hung",
        program.display()
    );
    out
}

/// A local file of known bytes and an old mtime, to be left alone.
struct Decoy {
    path: PathBuf,
    bytes: Vec<u8>,
    mtime: SystemTime,
}

impl Decoy {
    fn new(path: PathBuf) -> Decoy {
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 31 % 251) as u8).collect();
        fs::write(&path, &bytes).unwrap();
        let mtime = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        Decoy { path, bytes, mtime }
    }

    /// How the local file differs from what it was, if it does.
    fn change(&self) -> Option<String> {
        let path = self.path.display();
        let now = match fs::read(&self.path) {
            Ok(now) => now,
            Err(e) => return Some(format!("the local file {path} is gone: {e}")),
        };
        if now != self.bytes {
            return Some(format!(
                "the local file {path} was changed ({} bytes, was {})",
                now.len(),
                self.bytes.len()
            ));
        }
        let mtime = fs::metadata(&self.path).ok()?.modified().ok()?;
        (mtime != self.mtime).then(|| format!("the local file {path}'s mtime changed"))
    }

    fn assert_untouched(&self, what: &str) {
        if let Some(change) = self.change() {
            panic!("{what}: {change}");
        }
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A local directory holding a decoy named `file`, the same directory made in Weft, and
/// its path.
fn decoy_dir(cluster: &TestCluster, file: &str) -> (tempfile::TempDir, Decoy, String) {
    let local = tempfile::tempdir().unwrap();
    let decoy = Decoy::new(local.path().join(file));
    let path = local.path().to_str().unwrap().to_owned();
    weft_mkdir(cluster, &path);
    (local, decoy, path)
}

/// `weft mkdir -p` of a local directory's absolute path, in Weft.
fn weft_mkdir(cluster: &TestCluster, path: &str) {
    let out = cluster.weft(&["mkdir", "-p", path]);
    assert_ok(&out, "weft mkdir -p");
}

/// The reference: the program on a local directory through Open MPI's own MPI-IO.
fn reference() -> &'static (Output, Vec<u8>) {
    static REFERENCE: OnceLock<(Output, Vec<u8>)> = OnceLock::new();
    REFERENCE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let prefix = format!("{}/", dir.path().display());
        let out = mpirun(RANKS, None, &programs().names, &[&prefix]);
        assert_ok(&out, "pnetcdf_names on a local directory");
        let bytes = fs::read(dir.path().join("x.nc")).unwrap();
        (out, bytes)
    })
}

fn assert_like_reference(cluster: &TestCluster, out: &Output, weft_file: &str, what: &str) {
    assert_ok(out, what);
    let (ref_out, ref_bytes) = reference();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&ref_out.stdout),
        "{what}: the program's output (the clobbered size, the verdict) differs from the local run's"
    );
    assert_same(&weft_bytes(cluster, weft_file), ref_bytes, what);
}

/// Failed before the fix: the local decoy was truncated to 0 bytes by the NC_CLOBBER
/// create, and step 3's ncmpi_open read its header (NC_ENOTNC) or, once it was gone,
/// failed with NC_ENOENT.
#[test]
fn pnetcdf_absolute_weft_name_never_touches_the_local_file_of_the_stripped_path() {
    let cluster = TestCluster::start();
    let local = tempfile::tempdir().unwrap();
    let run = local.path().join("run1");
    fs::create_dir(&run).unwrap();
    let decoy = Decoy::new(run.join("x.nc"));
    let path = run.to_str().unwrap();
    weft_mkdir(&cluster, path);
    // A Weft file there already, larger than what the last create leaves: NC_CLOBBER
    // must truncate it (the 412-byte `last_large_var` of PnetCDF's tests).
    let old = cluster
        .client()
        .open(
            &format!("{path}/x.nc"),
            &weft_client::OpenOptions {
                write: true,
                create: Some(Default::default()),
                truncate: false,
            },
        )
        .unwrap();
    old.write_at(0, &vec![7u8; 3 << 20]).unwrap();
    old.close().unwrap();

    let out = mpirun(
        RANKS,
        Some(&cluster),
        &programs().names,
        &[&format!("weft:{path}/")],
    );
    decoy.assert_untouched("pnetcdf_names by the weft: name");
    assert_eq!(entries(&run), ["x.nc"], "a local file was made beside the decoy");
    assert_like_reference(
        &cluster,
        &out,
        &format!("{path}/x.nc"),
        "pnetcdf_names by the weft: name",
    );
}

/// Failed before the fix: with no local directory of the stripped path, ncmpi_open
/// failed with NC_ENOENT (rank 0 opened the local path to read the signature).
#[test]
fn pnetcdf_absolute_weft_name_without_a_local_directory() {
    let cluster = TestCluster::start();
    let gone = tempfile::tempdir().unwrap();
    let path = gone.path().join("nowhere").to_str().unwrap().to_owned();
    weft_mkdir(&cluster, &path);
    let out = mpirun(
        RANKS,
        Some(&cluster),
        &programs().names,
        &[&format!("weft:{path}/")],
    );
    assert!(!Path::new(&path).exists(), "a local {path} was made");
    assert_like_reference(
        &cluster,
        &out,
        &format!("{path}/x.nc"),
        "pnetcdf_names, no local directory",
    );
}

/// HDF5's MPI-IO driver passes the whole name to MPI_File_open and makes no POSIX call
/// on the stripped rest: the decoy stays as it is, and the file is on Weft.
#[test]
fn hdf5_absolute_weft_name_never_touches_the_local_file() {
    let cluster = TestCluster::start();
    let (local, decoy, path) = decoy_dir(&cluster, "data.h5");
    let out = mpirun(
        2,
        Some(&cluster),
        &programs().hdf5,
        &[&format!("weft:{path}/data.h5")],
    );
    assert_ok(&out, "hdf5_rw by an absolute weft: name");
    decoy.assert_untouched("hdf5_rw by the weft: name");
    assert_eq!(entries(local.path()), ["data.h5"]);
    let bytes = weft_bytes(&cluster, &format!("{path}/data.h5"));
    assert_eq!(
        &bytes[..8],
        b"\x89HDF\r\n\x1a\n",
        "the Weft file is not an HDF5 file"
    );
}

/// A library's open of the stripped name for writing (which cannot be served from Weft)
/// is refused with ENOTSUP and a line naming the way out; access, stat, truncate, unlink
/// and reading through open/read/lseek/pread/fstat are served from the Weft file (made
/// through MPI-IO halfway); the local file is untouched. Before the fix the open
/// succeeded on the local file and truncated it.
#[test]
fn writing_the_stripped_name_is_refused_loudly() {
    let cluster = TestCluster::start();
    let (_local, decoy, path) = decoy_dir(&cluster, "w.dat");
    let out = mpirun(
        1,
        Some(&cluster),
        &programs().writer,
        &[&format!("weft:{path}/w.dat")],
    );
    assert_ok(&out, "stripped_writer");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refused") && stderr.contains("Weft mount"),
        "no refusal on stderr:\n{stderr}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "open for writing: ENOTSUP\nopen for creating: ENOTSUP\nfopen: ENOTSUP\n\
         access: ENOENT\ntruncate: ENOENT\nunlink: ENOENT\nstat: ENOENT\nopen for reading: ENOENT\n\
         access: ok\nstat: size 10, regular 1\nread: 10 bytes \"weft bytes\"\nlseek: 5\n\
         read after lseek: \"bytes\"\npread: \"weft\"\nfstat: size 10\nwrite: EBADF\nclose: ok\n\
         truncate: ok\nstat: size 4\nunlink: ok\nMPI_File_open after unlink: MPI_ERR_NO_SUCH_FILE\n",
        "the calls on the stripped name (before and after the Weft file is made through MPI-IO)"
    );
    decoy.assert_untouched("stripped_writer");
}

/// PnetCDF's own tests and examples take the file name as their last argument; each is
/// run with `weft:` + the absolute path of a local decoy. Failed before the fix: 62 of
/// the 65 programs went wrong, 61 of them truncating or removing their decoy and 24
/// failing where they pass on a local file.
#[test]
fn pnetcdf_own_tests_and_examples_with_absolute_weft_names() {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pnetcdf-source");
    fs::create_dir_all(&scratch).unwrap();
    let fetch = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/fetch-pnetcdf-source.sh");
    let fetched = std::process::Command::new(&fetch)
        .arg(&scratch)
        .output()
        .expect("running fetch-pnetcdf-source.sh");
    assert_ok(
        &fetched,
        "fetching PnetCDF's source package (apt-get source pnetcdf)",
    );
    let tree = PathBuf::from(String::from_utf8_lossy(&fetched.stdout).trim());

    // Build: each test case with the tests' own testutils.c and the few configure
    // results it reads; each example alone.
    let build = weft_testkit::mpi::program_dir("weft-mpiio-pnetcdf-suite-");
    fs::write(
        build.join("config.h"),
        "#define HAVE_DECL_MPI_OFFSET 1\n#define HAVE_STRCASECMP 1\n#define HAVE_STRDUP 1\n\
         #define HAVE_ACCESS 1\n#define SIZEOF_MPI_OFFSET 8\n#define SIZEOF_MPI_AINT 8\n",
    )
    .unwrap();
    let include = format!("-I{}", build.display());
    let common = format!("-I{}", tree.join("test/common").display());
    let testutils = tree.join("test/common/testutils.c");
    let mut programs = Vec::new();
    for (dir, with_utils) in [("test/testcases", true), ("examples/C", false)] {
        let mut sources: Vec<PathBuf> = fs::read_dir(tree.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "c"))
            .collect();
        sources.sort();
        for source in sources {
            let text = fs::read_to_string(&source).unwrap();
            // nc_null_args tests netCDF's own library against PnetCDF's (netcdf.h):
            // not PnetCDF on MPI-IO.
            if text.contains("#include <netcdf.h>") {
                continue;
            }
            let name = source.file_stem().unwrap().to_str().unwrap().to_owned();
            let mut extra = vec!["-DHAVE_CONFIG_H", &include, &common];
            let utils = testutils.to_str().unwrap();
            if with_utils {
                extra.push(utils);
            }
            extra.extend(["-lpnetcdf", "-lm", "-lpthread"]);
            let binary = weft_testkit::mpi::compile("mpicc", "MPICC", &build, &name, &source, &extra);
            programs.push((format!("{dir}/{name}"), binary, dir == "examples/C"));
        }
    }
    assert!(
        programs.len() >= 60,
        "only {} of PnetCDF's programs found in {}",
        programs.len(),
        tree.display()
    );

    let cluster = TestCluster::start();
    let local = tempfile::tempdir().unwrap();
    let path = local.path().to_str().unwrap().to_owned();
    weft_mkdir(&cluster, &path);
    let mut failures = Vec::new();
    for (what, binary, example) in &programs {
        let file = format!("{path}/{}.nc", binary.file_name().unwrap().to_str().unwrap());
        let decoy = Decoy::new(PathBuf::from(&file));
        let name = format!("weft:{file}");
        // The examples take -q (quiet) before the name.
        let args: Vec<&str> = if *example { vec!["-q", &name] } else { vec![&name] };
        let out = mpirun(RANKS, Some(&cluster), binary, &args);
        let mut wrong = Vec::new();
        if let Some(change) = decoy.change() {
            wrong.push(change);
        }
        if !out.status.success() {
            // As on a local file? (examples/C/get_vara reads a file put_vara makes under
            // its default name: it fails on a local file too.)
            let dir = tempfile::tempdir().unwrap();
            let local_name = format!("{}/x.nc", dir.path().display());
            let args: Vec<&str> = if *example {
                vec!["-q", &local_name]
            } else {
                vec![&local_name]
            };
            let reference = mpirun(RANKS, None, binary, &args);
            if reference.status.code() != out.status.code() {
                wrong.push(format!(
                    "{} by the weft: name, {} on a local file:\n{}{}",
                    out.status,
                    reference.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        if !wrong.is_empty() {
            failures.push(format!("{what}: {}", wrong.join("; ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of PnetCDF's {} tests and examples went wrong by an absolute weft: name:\n{}",
        failures.len(),
        programs.len(),
        failures.join("\n")
    );
}
