//! fsx (fsx-rs, the Rust port of the classic file system exerciser; installed by
//! scripts/install-deps.sh) with mapped reads and writes on a cached file while another
//! process reads the file in a loop through a second mount (issue 28, part 1).
//!
//! Before the fix, xfstests' fsx failed this way in 6 of 6 runs (`READ BAD DATA`, or
//! non-zero data past the end of a mapped read) after 419 to 2,272 operations: bytes a
//! truncate removed came back, fetched by a cache manager for the concurrent reader.
//!
//! Several seeds, a bounded number of operations each; `WEFT_FSX_OPS` changes it. A
//! missing `fsx` fails the test (run scripts/install-deps.sh), never skips it.

mod common;

use common::Mount;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use weft_testkit::{ClusterOptions, TestCluster};

const OPS_DEFAULT: u64 = 1500;
const SEEDS: [u64; 3] = [11, 28, 4242];

/// fsx's defaults (reads, writes, mapped reads and writes, 256 KiB file) with more
/// truncates, holes punched, fallocate, fsync and reopening.
const CONFIG: &str = "\
flen = 262144
[weights]
read = 10
write = 10
mapread = 10
mapwrite = 10
truncate = 10
punch_hole = 2
posix_fallocate = 1
fsync = 1
fdatasync = 1
close_open = 1
invalidate = 1
";

/// The `fsx` program: on PATH or in cargo's bin directory (where install-deps.sh puts it).
fn fsx() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")));
    dirs.extend(cargo_home.map(|c| c.join("bin")));
    dirs.into_iter()
        .map(|d| d.join("fsx"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("fsx not found on PATH or in cargo's bin directory: run scripts/install-deps.sh")
        })
}

#[test]
fn fsx_with_mapped_io_on_a_cached_file_with_a_concurrent_reader() {
    let fsx = fsx();
    let ops: u64 = std::env::var("WEFT_FSX_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(OPS_DEFAULT);
    let cluster = TestCluster::start_with(&ClusterOptions::cached("colocated", "64M"));
    let a = Mount::new(&cluster);
    let b = Mount::new(&cluster);
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("fsx.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let mut failures = Vec::new();
    for seed in SEEDS {
        let name = format!("fsx-{seed}.dat");
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let stop = stop.clone();
            let other = b.join(&name);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // The file may not exist yet, or shrink under the read: only the
                    // bytes fsx reads are checked.
                    if std::fs::read(&other).is_err() {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
            })
        };
        let out = Command::new(&fsx)
            .arg("-N")
            .arg(ops.to_string())
            .arg("-S")
            .arg(seed.to_string())
            .arg("-f")
            .arg(&config)
            .arg("-P")
            .arg(work.path())
            .arg(a.join(&name))
            .output()
            .expect("run fsx");
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap();
        if !out.status.success() {
            let text =
                String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
            let tail: Vec<&str> = text.lines().rev().take(25).collect();
            failures.push(format!(
                "seed {seed}: fsx -N {ops} failed ({}):\n{}",
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
