//! Shared by the tests of libweft_posix.so: programs run with the library preloaded,
//! and the counters it writes at exit (`WEFT_POSIX_STATS`).

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// target/release/libweft_posix.so of this build.
pub fn library() -> PathBuf {
    let lib = weft_testkit::bin_dir().join("libweft_posix.so");
    assert!(
        lib.exists(),
        "{} missing: cargo build --release --workspace",
        lib.display()
    );
    lib
}

/// Runs `script` with sh in `dir` (sh and everything it starts with the library
/// preloaded and counting into `stats`); panics with its output unless it succeeds.
pub fn sh_lib(dir: &Path, script: &str, stats: &Path) -> String {
    let out = sh_lib_output(dir, script, stats);
    assert!(
        out.status.success(),
        "failed with the library in {}: {script}\n{}{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn sh_lib_output(dir: &Path, script: &str, stats: &Path) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("LD_PRELOAD", library())
        .env("WEFT_POSIX_STATS", stats)
        .stdin(Stdio::null())
        .output()
        .expect("running sh")
}

/// The counters of every process that wrote to `stats`, summed.
pub fn totals(stats: &Path) -> HashMap<String, u64> {
    let text = std::fs::read_to_string(stats).unwrap_or_default();
    let mut sum = HashMap::new();
    for line in text.lines() {
        for field in line.split_whitespace().skip(1) {
            if let Some((k, v)) = field.split_once('=') {
                if k != "pid" {
                    *sum.entry(k.to_owned()).or_insert(0) += v.parse::<u64>().unwrap_or(0);
                }
            }
        }
    }
    sum
}

/// Compiles the test program `tests/c/NAME.c` (its text, `source`) with `compiler`
/// into `dir/NAME`; panics with the compiler's output when it fails.
pub fn compile(compiler: &str, dir: &Path, name: &str, source: &str, extra: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let out = dir.join(name);
    let result = Command::new(compiler)
        .args(["-O2", "-Wall", "-o"])
        .arg(&out)
        .arg(&src)
        .args(extra)
        .output()
        .unwrap_or_else(|e| panic!("running {compiler} (scripts/install-deps.sh installs it): {e}"));
    assert!(
        result.status.success(),
        "{compiler} {name}.c failed:\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    out
}
