//! `weft mpi-env`: how to run MPI programs on Weft through libweft_mpiio.so (the
//! weft-mpiio crate, built against Open MPI) or libweft_mpiio_mpich.so (the
//! weft-mpiio-mpich crate, the same sources built against MPICH): the library's path,
//! the environment, and the mpirun / mpiexec and link lines. The two MPI ABIs differ
//! (MPI_Comm is a pointer in Open MPI, an int in MPICH), so the library must match the
//! MPI the program was built with. This crate does not link MPI; it only prints.

use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mpi {
    OpenMpi,
    Mpich,
}

impl Mpi {
    fn parse(s: &str) -> anyhow::Result<Mpi> {
        match s.to_ascii_lowercase().as_str() {
            "openmpi" | "open-mpi" | "ompi" => Ok(Mpi::OpenMpi),
            "mpich" => Ok(Mpi::Mpich),
            other => anyhow::bail!("unknown MPI {other:?}: say openmpi or mpich"),
        }
    }

    fn library_name(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "libweft_mpiio.so",
            Mpi::Mpich => "libweft_mpiio_mpich.so",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "Open MPI",
            Mpi::Mpich => "MPICH",
        }
    }
}

/// The MPI of `program` (an mpiexec/mpirun path) from what it resolves to: Debian's
/// alternatives end in orterun/prterun (Open MPI) or mpiexec.hydra (MPICH).
fn mpi_of_launcher(program: &Path) -> Option<Mpi> {
    let real = program.canonicalize().ok()?;
    let name = real.file_name()?.to_string_lossy().to_ascii_lowercase();
    if name.contains("hydra") || name.contains("mpich") {
        Some(Mpi::Mpich)
    } else if name.contains("orterun") || name.contains("prterun") || name.contains("openmpi") {
        Some(Mpi::OpenMpi)
    } else {
        None
    }
}

/// The MPI to print for: `--mpi`, else $WEFT_MPI, else the `mpiexec` on PATH, else Open
/// MPI. The second value says how it was chosen.
fn choose(flag: Option<&str>) -> anyhow::Result<(Mpi, String)> {
    if let Some(flag) = flag {
        return Ok((Mpi::parse(flag)?, "--mpi".into()));
    }
    if let Some(env) = std::env::var("WEFT_MPI").ok().filter(|v| !v.is_empty()) {
        return Ok((Mpi::parse(&env)?, "$WEFT_MPI".into()));
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let launcher = dir.join("mpiexec");
            if launcher.is_file() {
                if let Some(mpi) = mpi_of_launcher(&launcher) {
                    return Ok((mpi, format!("{} on PATH", launcher.display())));
                }
                break;
            }
        }
    }
    Ok((Mpi::OpenMpi, "the default".into()))
}

/// The library for `mpi`: $WEFT_MPIIO_LIB, else next to this executable, else ../lib.
fn library(mpi: Mpi) -> PathBuf {
    weft_interpose::find_library("WEFT_MPIIO_LIB", mpi.library_name())
}

pub fn print(flag: Option<&str>) -> anyhow::Result<()> {
    let (mpi, why) = choose(flag)?;
    let lib = library(mpi);
    let home = std::env::var("WEFT_HOME")
        .unwrap_or_else(|_| format!("{}/.weft", std::env::var("HOME").unwrap_or_else(|_| "~".into())));
    let lib_dir = lib.parent().map(|d| d.display().to_string()).unwrap_or_default();
    if !lib.is_file() {
        let (package, deb) = match mpi {
            Mpi::OpenMpi => ("weft-mpiio", "weft-mpiio-openmpi"),
            Mpi::Mpich => ("weft-mpiio-mpich", "weft-mpiio-mpich"),
        };
        let how = if std::env::var_os("WEFT_MPIIO_LIB").is_some() {
            "$WEFT_MPIIO_LIB names it".to_owned()
        } else {
            format!(
                "build it with `cargo build --release -p {package}` (or `make build`), or install \
                 the Debian package {deb}, or name a built library with WEFT_MPIIO_LIB"
            )
        };
        // An environment naming a missing library would make every MPI program fail to
        // start (ld.so ignores a missing LD_PRELOAD with only a warning, so worse: run
        // without Weft): print nothing to evaluate and fail.
        anyhow::bail!(
            "the MPI-IO library for {} is not installed: {} is missing ({how})",
            mpi.name(),
            lib.display()
        );
    }
    let lib = lib.display();
    let mpi_name = mpi.name();
    println!(
        "# MPI-IO on Weft for {mpi_name} (chosen by {why}; `weft mpi-env --mpi openmpi|mpich`):
# files named weft:/path, and files inside a Weft mount, go to Weft; every other file to
# the MPI library. Unmodified programs need only LD_PRELOAD (and WEFT_HOME when the
# cluster is not in ~/.weft). The library must match the MPI the program was built with.
export LD_PRELOAD={lib}
export WEFT_HOME={home}
"
    );
    match mpi {
        Mpi::OpenMpi => println!(
            "# Open MPI (pass the variables to every rank with -x):
mpirun -x LD_PRELOAD={lib} -x WEFT_HOME={home} -np 4 ./app weft:/data/out.dat

# Linking instead of preloading (the library before -lmpi, which mpicc adds last):
mpicc app.c -L{lib_dir} -Wl,-rpath,{lib_dir} -lweft_mpiio -o app"
        ),
        Mpi::Mpich => println!(
            "# MPICH (Debian: mpicc.mpich, mpiexec.mpich; -genv passes a variable to every rank):
mpiexec.mpich -genv LD_PRELOAD {lib} -genv WEFT_HOME {home} -n 4 ./app weft:/data/out.dat

# Linking instead of preloading (the library before -lmpich, which mpicc adds last):
mpicc.mpich app.c -L{lib_dir} -Wl,-rpath,{lib_dir} -lweft_mpiio_mpich -o app"
        ),
    }
    println!(
        "
# Hints: MPI_Info keys (cb_buffer_size, cb_nodes, romio_cb_write, striping_unit, ...,
# weft_cb_method=auto|two_phase|interleaved|pipelined|interleaved_pipelined|stripe_aligned|independent,
# weft_pipeline_depth), or a file of \"key value\" lines named by WEFT_HINTS;
# WEFT_PRINT_HINTS=1 prints the effective hints and each collective call's method;
# WEFT_MPIIO_VERBOSE=1 prints every error's message. See docs/src/mpi-io.md."
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_unknown_ones_fail_clearly() {
        assert_eq!(Mpi::parse("mpich").unwrap(), Mpi::Mpich);
        assert_eq!(Mpi::parse("OpenMPI").unwrap(), Mpi::OpenMpi);
        let err = Mpi::parse("intel").unwrap_err().to_string();
        assert!(err.contains("openmpi or mpich"), "{err}");
    }

    #[test]
    fn launchers_are_recognised_by_what_they_resolve_to() {
        let dir = tempfile::tempdir().unwrap();
        for (target, mpi) in [
            ("mpiexec.hydra", Some(Mpi::Mpich)),
            ("orterun", Some(Mpi::OpenMpi)),
            ("something", None),
        ] {
            let real = dir.path().join(target);
            std::fs::write(&real, "").unwrap();
            let link = dir.path().join(format!("mpiexec-{target}"));
            std::os::unix::fs::symlink(&real, &link).unwrap();
            assert_eq!(mpi_of_launcher(&link), mpi, "{target}");
        }
    }
}
