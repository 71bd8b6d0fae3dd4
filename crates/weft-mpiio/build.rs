//! Compiles the C half of the interposer (csrc/) with the MPI compiler wrapper and links
//! the MPI library. Two packages run this script on the same sources:
//! - weft-mpiio (libweft_mpiio.so, Open MPI): the wrapper is $MPICC, else
//!   `mpicc.openmpi` when it is on PATH (Debian's name, whatever the mpicc alternative
//!   points to), else `mpicc`;
//! - weft-mpiio-mpich (libweft_mpiio_mpich.so): $MPICC_MPICH, else `mpicc.mpich`.
//!
//! The link flags come from `--showme:link` (Open MPI) or `-link_info` (MPICH),
//! whichever the wrapper answers. The C half is all that sees mpi.h: Rust handles MPI
//! objects as opaque integers (csrc/shim.h), so compiling it against the other
//! implementation's mpi.h is the whole port.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let mpich = std::env::var("CARGO_PKG_NAME").as_deref() == Ok("weft-mpiio-mpich");
    let (mpicc, csrc) = if mpich {
        println!("cargo:rerun-if-env-changed=MPICC_MPICH");
        let mpicc = std::env::var("MPICC_MPICH").unwrap_or_else(|_| "mpicc.mpich".to_owned());
        (mpicc, manifest.join("../weft-mpiio/csrc"))
    } else {
        println!("cargo:rerun-if-env-changed=MPICC");
        let mpicc = std::env::var("MPICC").unwrap_or_else(|_| {
            if on_path("mpicc.openmpi") {
                "mpicc.openmpi"
            } else {
                "mpicc"
            }
            .to_owned()
        });
        (mpicc, manifest.join("csrc"))
    };
    let sources = ["shim.c", "weft_mpiio.c", "spawn.c", "real.c", "requests.c"];
    for name in sources.iter().chain(&["shim.h", "real.h", "requests.h"]) {
        println!("cargo:rerun-if-changed={}", csrc.join(name).display());
    }

    let (compile, link) = mpi_flags(&mpicc);
    let mut build = cc::Build::new();
    build
        .files(sources.iter().map(|name| csrc.join(name)))
        .flag_if_supported("-std=c11")
        .warnings(true)
        .extra_warnings(true)
        .flag_if_supported("-Wno-unused-parameter");
    for flag in &compile {
        if let Some(dir) = flag.strip_prefix("-I") {
            build.include(dir);
        } else if let Some(def) = flag.strip_prefix("-D") {
            let (k, v) = def.split_once('=').map_or((def, None), |(k, v)| (k, Some(v)));
            build.define(k, v);
        } else if flag.starts_with("-pthread") {
            build.flag(flag);
        }
    }
    build.compile("weft_mpiio_c");

    // The library's link flags reach the library (and its tests) only: the
    // weft-delegate program links the same archive (its spawn.c part) and MPI by
    // arguments of its own.
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    println!("cargo:rustc-link-arg-bins={out}/libweft_mpiio_c.a");
    for flag in &link {
        if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        } else if let Some(lib) = flag.strip_prefix("-l") {
            println!("cargo:rustc-link-lib=dylib={lib}");
            println!("cargo:rustc-link-arg-bins=-l{lib}");
        } else if let Some(rpath) = flag.strip_prefix("-Wl,-rpath,") {
            println!("cargo:rustc-cdylib-link-arg=-Wl,-rpath,{rpath}");
            println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{rpath}");
        }
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// (compile flags, link flags) of the MPI wrapper.
fn mpi_flags(mpicc: &str) -> (Vec<String>, Vec<String>) {
    let words = |args: &[&str]| -> Option<Vec<String>> {
        let out = Command::new(mpicc).args(args).output().ok()?;
        if !out.status.success() {
            return None;
        }
        Some(
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(str::to_owned)
                .collect(),
        )
    };
    // Open MPI.
    if let (Some(c), Some(l)) = (words(&["--showme:compile"]), words(&["--showme:link"])) {
        return (c, l);
    }
    // MPICH: "<cc> <flags...>" for both.
    if let (Some(c), Some(l)) = (words(&["-compile_info"]), words(&["-link_info"])) {
        return (c.into_iter().skip(1).collect(), l.into_iter().skip(1).collect());
    }
    panic!(
        "{mpicc} answers neither --showme:link (Open MPI) nor -link_info (MPICH): set {} to the MPI C \
         compiler wrapper (Debian: {})",
        if std::env::var("CARGO_PKG_NAME").as_deref() == Ok("weft-mpiio-mpich") {
            "MPICC_MPICH"
        } else {
            "MPICC"
        },
        if std::env::var("CARGO_PKG_NAME").as_deref() == Ok("weft-mpiio-mpich") {
            "apt-get install mpich libmpich-dev"
        } else {
            "apt-get install openmpi-bin libopenmpi-dev"
        }
    );
}
