//! `weft mpi-env` prints an environment to evaluate (`eval "$(weft mpi-env)"`). When the
//! library it would name is missing it must fail and print nothing to evaluate: before,
//! it printed `export LD_PRELOAD=<missing path>` with a warning on stderr and exit 0, so
//! a script went on and ran every MPI program without Weft (ld.so only warns about a
//! missing preload). A library that exists is printed as it is.

use std::process::Command;

fn mpi_env(lib: &std::path::Path, mpi: &str) -> std::process::Output {
    Command::new(weft_testkit::bin("weft"))
        .args(["mpi-env", "--mpi", mpi])
        .env("WEFT_MPIIO_LIB", lib)
        .output()
        .expect("running weft mpi-env")
}

#[test]
fn a_missing_library_is_an_error_and_nothing_to_evaluate() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("libweft_mpiio.so");
    for mpi in ["openmpi", "mpich"] {
        let out = mpi_env(&missing, mpi);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "weft mpi-env --mpi {mpi} succeeded:\n{stdout}"
        );
        assert!(
            stdout.trim().is_empty(),
            "printed something to evaluate:\n{stdout}"
        );
        assert!(
            stderr.contains(&missing.display().to_string()) && stderr.contains("WEFT_MPIIO_LIB"),
            "the error does not name the missing library and where it came from:\n{stderr}"
        );
    }

    // The same path once a library is there (any file: mpi-env does not load it).
    std::fs::write(&missing, b"").unwrap();
    let out = mpi_env(&missing, "openmpi");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout
            .lines()
            .any(|l| l == format!("export LD_PRELOAD={}", missing.display())),
        "{stdout}"
    );
}
