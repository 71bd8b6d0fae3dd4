//! `weft mpi-env`: how to run MPI programs on Weft through libweft_mpiio.so (the
//! weft-mpiio crate): the library's path, the environment, and the mpirun / mpiexec
//! and link lines. This crate does not link MPI; it only prints.

use std::path::PathBuf;

/// libweft_mpiio.so: $WEFT_MPIIO_LIB, else next to this executable, else ../lib.
fn library() -> PathBuf {
    if let Some(p) = std::env::var_os("WEFT_MPIIO_LIB") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().map(PathBuf::from).unwrap_or_default();
    for candidate in [dir.join("libweft_mpiio.so"), dir.join("../lib/libweft_mpiio.so")] {
        if candidate.exists() {
            return candidate.canonicalize().unwrap_or(candidate);
        }
    }
    dir.join("libweft_mpiio.so")
}

pub fn print() -> anyhow::Result<()> {
    let lib = library();
    let home = std::env::var("WEFT_HOME")
        .unwrap_or_else(|_| format!("{}/.weft", std::env::var("HOME").unwrap_or_else(|_| "~".into())));
    let lib_dir = lib.parent().map(|d| d.display().to_string()).unwrap_or_default();
    let lib = lib.display();
    if !std::path::Path::new(&lib.to_string()).exists() {
        eprintln!(
            "weft: {lib} is missing: build it with `cargo build --release -p weft-mpiio` (or `make build`)"
        );
    }
    println!(
        "# MPI-IO on Weft: files named weft:/path go to Weft, every other file to the MPI library.
# Unmodified programs need only LD_PRELOAD (and WEFT_HOME when the cluster is not in ~/.weft).
export LD_PRELOAD={lib}
export WEFT_HOME={home}

# Open MPI (pass the variables to every rank with -x):
mpirun -x LD_PRELOAD={lib} -x WEFT_HOME={home} -np 4 ./app weft:/data/out.dat

# MPICH (build the library with MPICC=mpicc.mpich first):
mpiexec -genv LD_PRELOAD {lib} -genv WEFT_HOME {home} -n 4 ./app weft:/data/out.dat

# Linking instead of preloading (the library before -lmpi, which mpicc adds last):
mpicc app.c -L{lib_dir} -Wl,-rpath,{lib_dir} -lweft_mpiio -o app

# Hints: MPI_Info keys (cb_buffer_size, cb_nodes, romio_cb_write, striping_unit, ...,
# weft_cb_method=auto|two_phase|interleaved|pipelined|interleaved_pipelined|stripe_aligned|independent,
# weft_pipeline_depth), or a file of \"key value\" lines named by WEFT_HINTS;
# WEFT_PRINT_HINTS=1 prints the effective hints and each collective call's method;
# WEFT_MPIIO_VERBOSE=1 prints every error's message. See crates/weft-mpiio/README.md."
    );
    Ok(())
}
