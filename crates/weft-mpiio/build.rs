//! Compiles the C half of the interposer (csrc/) with the MPI compiler wrapper and links
//! the MPI library. The wrapper is $MPICC, else `mpicc`; its link flags come from
//! `--showme:link` (Open MPI) or `-link_info` (MPICH), whichever it answers.

use std::process::Command;

fn main() {
    let mpicc = std::env::var("MPICC").unwrap_or_else(|_| "mpicc".to_owned());
    println!("cargo:rerun-if-env-changed=MPICC");
    println!("cargo:rerun-if-changed=csrc/weft_mpiio.c");
    println!("cargo:rerun-if-changed=csrc/shim.c");
    println!("cargo:rerun-if-changed=csrc/spawn.c");
    println!("cargo:rerun-if-changed=csrc/shim.h");
    println!("cargo:rerun-if-changed=csrc/real.c");
    println!("cargo:rerun-if-changed=csrc/requests.c");
    println!("cargo:rerun-if-changed=csrc/requests.h");
    println!("cargo:rerun-if-changed=csrc/real.h");

    let (compile, link) = mpi_flags(&mpicc);
    let mut build = cc::Build::new();
    build
        .file("csrc/shim.c")
        .file("csrc/weft_mpiio.c")
        .file("csrc/spawn.c")
        .file("csrc/real.c")
        .file("csrc/requests.c")
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
    panic!("{mpicc} answers neither --showme:link (Open MPI) nor -link_info (MPICH): set MPICC to the MPI C compiler wrapper");
}
