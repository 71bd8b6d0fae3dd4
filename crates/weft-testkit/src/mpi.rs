//! What the MPI-IO tests of several crates share: the library of this build, and checks
//! of a run's outcome and of a file's bytes against a reference run's.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::TestCluster;

/// libweft_mpiio.so (the Open MPI build) of this build; fails the test, saying which
/// command builds it, when it is missing or older than a source it is built from (see
/// [`check_up_to_date`]).
pub fn library() -> PathBuf {
    let dir = crate::bin_dir();
    let lib = [dir.join("libweft_mpiio.so"), dir.join("deps/libweft_mpiio.so")]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!(
                "libweft_mpiio.so not found in {}: build it first ({})",
                dir.display(),
                build_command("weft-mpiio")
            )
        });
    check_up_to_date(&lib, "weft-mpiio");
    lib
}

/// The cargo command that builds `package` in this test's profile.
pub fn build_command(package: &str) -> String {
    let release = crate::bin_dir().ends_with("release");
    format!(
        "`cargo build{} -p {package}`, or `make test`",
        if release { " --release" } else { "" }
    )
}

/// Fails the test if `artifact`, a library of the workspace that the tests load
/// without cargo test building it (a cdylib: `cargo test -p weft-mpiio` builds the
/// crate's tests, not libweft_mpiio.so), is older than any source file cargo's
/// dep-info (`<name>.d` beside it) says it is built from: the crate's and its
/// workspace dependencies' Rust sources and the C sources its build script names.
/// Paths in a dep-info written in another copy of the workspace (a copied target
/// directory) are taken in this one. Without a dep-info nothing is checked.
pub fn check_up_to_date(artifact: &Path, package: &str) {
    if let Some(newer) = newer_source(artifact) {
        panic!(
            "{} is older than {}, which it is built from: the tests would run the old code. \
             Build it with {}",
            artifact.display(),
            newer.display(),
            build_command(package)
        );
    }
}

/// A source of `artifact` (from its dep-info) modified after it, if any.
pub fn newer_source(artifact: &Path) -> Option<PathBuf> {
    let built = std::fs::metadata(artifact).and_then(|m| m.modified()).ok()?;
    let stem = artifact.file_stem()?.to_str()?;
    let dir = crate::bin_dir();
    let info = std::fs::read_to_string(dir.join(format!("{stem}.d"))).ok()?;
    let workspace = workspace();
    dep_info_sources(&info)
        .into_iter()
        .map(|source| here(&workspace, &source))
        .find(|source| {
            std::fs::metadata(source)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t > built)
        })
}

/// The workspace's root directory.
fn workspace() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::canonicalize(&root).unwrap_or(root)
}

/// The sources of a dep-info's first rule (`out: src src ...`, spaces in names
/// escaped with a backslash).
fn dep_info_sources(info: &str) -> Vec<PathBuf> {
    let line = info.lines().next().unwrap_or("");
    // The target ends at the first colon followed by a space (a path may hold colons).
    let Some((_, deps)) = line.split_once(": ") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut current = String::new();
    let mut chars = deps.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => current.extend(chars.next()),
            ' ' => {
                if !current.is_empty() {
                    out.push(PathBuf::from(std::mem::take(&mut current)));
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        out.push(PathBuf::from(current));
    }
    out
}

/// `source` in this workspace: a path under another copy's `crates/` is taken under
/// this one's when the file exists here; anything else (registry sources) as it is.
fn here(workspace: &Path, source: &Path) -> PathBuf {
    if source.starts_with(workspace) {
        return source.to_path_buf();
    }
    let text = source.to_string_lossy();
    match text.rfind("/crates/") {
        Some(at) => {
            let mapped = workspace.join(&text[at + 1..]);
            if mapped.exists() {
                mapped
            } else {
                source.to_path_buf()
            }
        }
        None => source.to_path_buf(),
    }
}

/// Compiles `source` into `dir/name` with the compiler `$env` names, else `compiler`
/// (mpicc, mpif90, mpicc.mpich), -O2 -Wall and `extra` after the source; a compiler
/// that is missing or fails stops the test with its messages and what to install.
/// Directories of compiled test programs, removed when the test process exits.
static PROGRAM_DIRS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

extern "C" fn remove_program_dirs() {
    if let Ok(dirs) = PROGRAM_DIRS.lock() {
        for dir in dirs.iter() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A temporary directory for a test binary's compiled C programs, kept for the whole
/// run (held in a static, which is never dropped) and removed when the process
/// exits (`atexit`): a `TempDir` in a static alone left one directory per run behind.
pub fn program_dir(prefix: &str) -> PathBuf {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: registers a plain function with no captured state; it runs at exit.
        unsafe { libc::atexit(remove_program_dirs) };
    });
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("a temporary directory for the test programs")
        .keep();
    PROGRAM_DIRS.lock().unwrap().push(dir.clone());
    dir
}

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
    own_session_dir(&mut c);
    c
}

/// Gives an Open MPI run its own session directory. Runs at once (a test binary's tests
/// run in parallel) otherwise share /tmp/ompi.HOST.UID, which one run removes once it is
/// empty while another makes it: that one fails to start ("A call to mkdir was unable
/// to create the desired directory ... File exists", seen in CI). Removed when the test
/// process exits.
pub fn own_session_dir(command: &mut Command) {
    let session = program_dir("weft-ompi-session-");
    command
        .env("OMPI_MCA_orte_tmpdir_base", &session)
        .env("PRTE_MCA_prte_tmpdir_base", &session);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dep_info_sources_are_read_with_escaped_spaces() {
        let info = "/w/target/release/libx.so: /w/crates/a/src/lib.rs /w/crates/a/my\\ file.c\n\n/w/crates/a/src/lib.rs:\n";
        assert_eq!(
            dep_info_sources(info),
            vec![
                PathBuf::from("/w/crates/a/src/lib.rs"),
                PathBuf::from("/w/crates/a/my file.c")
            ]
        );
        assert!(dep_info_sources("").is_empty());
    }

    #[test]
    fn sources_of_another_copy_are_taken_in_this_one() {
        let workspace = workspace();
        let mine = here(&workspace, Path::new("/elsewhere/crates/weft-testkit/src/mpi.rs"));
        assert_eq!(mine, workspace.join("crates/weft-testkit/src/mpi.rs"));
        let registry = Path::new("/root/.cargo/registry/src/x/lib.rs");
        assert_eq!(here(&workspace, registry), registry);
    }
}
