//! `weft bench mount --library`: the third column of the mount benchmark. The same work
//! done four ways: with the native client (in this process), through the mount, through
//! the mount with libweft_posix.so preloaded (crates/weft-posix), and on a local
//! directory; the mount, library and local runs are a worker process (`weft bench
//! posix-worker`, plain read/pread/pwrite/open/close calls), started with or without
//! LD_PRELOAD. Four workloads: a sequential read of a file written just before by the
//! native client (cold: the mount drops its pages of a file changed since its last
//! open), random 4 KiB reads of another fresh file, random 4 KiB first writes to a new
//! file (then fsync), and open+read+close of many small files.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use weft_client::{Client, CreateOptions, OpenOptions};

const MIB: u64 = 1 << 20;
const SMALL_BYTES: usize = 4096;

#[derive(Args, Debug, Clone)]
pub struct WorkerArgs {
    /// seq, rand-read, rand-write or small.
    #[arg(long)]
    pub work: String,
    /// The file (seq, rand-read, rand-write) or directory (small).
    #[arg(long)]
    pub path: PathBuf,
    /// Calls (random work) or files (small).
    #[arg(long, default_value_t = 0)]
    pub count: u64,
    /// Bytes the random offsets span.
    #[arg(long, default_value_t = 0)]
    pub span: u64,
}

/// What a worker measured.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Measured {
    pub seconds: f64,
    pub bytes: u64,
    pub ops: u64,
}

/// A fixed sequence of 4 KiB-aligned offsets below `span`, distinct for writes.
fn offsets(count: u64, span: u64, seed: u64) -> Vec<u64> {
    let blocks = (span / SMALL_BYTES as u64).max(1);
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(count as usize);
    let mut seen = std::collections::HashSet::new();
    while (out.len() as u64) < count.min(blocks) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x % blocks;
        if seen.insert(b) {
            out.push(b * SMALL_BYTES as u64);
        }
    }
    out
}

fn do_work(args: &WorkerArgs) -> Result<Measured> {
    let start = Instant::now();
    let (bytes, ops) = match args.work.as_str() {
        "seq" => {
            let f = std::fs::File::open(&args.path)?;
            let mut buf = vec![0u8; MIB as usize];
            let (mut total, mut calls) = (0u64, 0u64);
            loop {
                let n = std::io::Read::read(&mut &f, &mut buf)?;
                if n == 0 {
                    break;
                }
                total += n as u64;
                calls += 1;
            }
            (total, calls)
        }
        "rand-read" => {
            let f = std::fs::File::open(&args.path)?;
            let mut buf = vec![0u8; SMALL_BYTES];
            for &o in &offsets(args.count, args.span, 7) {
                f.read_exact_at(&mut buf, o)?;
            }
            (args.count * SMALL_BYTES as u64, args.count)
        }
        "rand-write" => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&args.path)?;
            let buf = vec![0x5au8; SMALL_BYTES];
            for &o in &offsets(args.count, args.span, 11) {
                f.write_all_at(&buf, o)?;
            }
            f.sync_all()?;
            (args.count * SMALL_BYTES as u64, args.count)
        }
        "rand-rewrite" => {
            let f = std::fs::OpenOptions::new().write(true).open(&args.path)?;
            let buf = vec![0xa5u8; SMALL_BYTES];
            for &o in &offsets(args.count, args.span, 13) {
                f.write_all_at(&buf, o)?;
            }
            f.sync_all()?;
            (args.count * SMALL_BYTES as u64, args.count)
        }
        "small" => {
            let mut buf = vec![0u8; SMALL_BYTES];
            for i in 0..args.count {
                let f = std::fs::File::open(args.path.join(format!("s{i}")))?;
                let n = std::io::Read::read(&mut &f, &mut buf)?;
                ensure!(n == SMALL_BYTES, "a small file read {n} bytes");
            }
            (args.count * SMALL_BYTES as u64, args.count)
        }
        other => bail!("unknown work {other:?}"),
    };
    Ok(Measured {
        seconds: start.elapsed().as_secs_f64(),
        bytes,
        ops,
    })
}

/// `weft bench posix-worker`: one workload, its measure as JSON on stdout.
pub fn worker(args: &WorkerArgs) -> Result<()> {
    let m = do_work(args)?;
    println!("{}", serde_json::to_string(&m)?);
    Ok(())
}

fn spawn_worker(work: &str, path: &Path, count: u64, span: u64, library: Option<&Path>) -> Result<Measured> {
    let exe = std::env::current_exe().context("finding the running executable")?;
    let mut command = Command::new(exe);
    command.args(["bench", "posix-worker", "--work", work, "--path"]);
    command
        .arg(path)
        .args(["--count", &count.to_string(), "--span", &span.to_string()]);
    command.env_remove("LD_PRELOAD").stderr(Stdio::inherit());
    if let Some(lib) = library {
        command.env("LD_PRELOAD", lib);
    }
    let out = command.output().context("running the posix worker")?;
    ensure!(out.status.success(), "the {work} worker failed ({})", out.status);
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// The workloads' sizes.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sizes {
    pub seq_bytes: u64,
    pub random_calls: u64,
    pub random_span: u64,
    pub small_files: u64,
}

/// One workload's rates per method (MiB/s for seq, operations/s otherwise).
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub work: &'static str,
    pub unit: &'static str,
    pub native: f64,
    pub mount: f64,
    pub library: f64,
    pub local: f64,
}

fn rate(m: &Measured, seq: bool) -> f64 {
    if seq {
        m.bytes as f64 / MIB as f64 / m.seconds
    } else {
        m.ops as f64 / m.seconds
    }
}

/// Writes a fresh Weft file of `bytes` natively (as the data every method reads).
fn fresh(client: &Client, path: &str, bytes: u64) -> Result<()> {
    let _ = client.unlink(path);
    let f = client.create(path, &CreateOptions::default())?;
    let block = vec![0xa5u8; (4 * MIB).min(bytes.max(1)) as usize];
    let mut at = 0;
    while at < bytes {
        let n = block.len().min((bytes - at) as usize);
        f.write_at(at, &block[..n])?;
        at += n as u64;
    }
    f.close()?;
    Ok(())
}

/// Runs the four workloads the four ways; `mount` is the mount's directory, `library`
/// the libweft_posix.so to preload.
pub fn run(client: &Client, mount: &Path, library: &Path, sizes: Sizes, keep: bool) -> Result<Vec<Row>> {
    ensure!(
        library.exists(),
        "{} is missing: build weft-posix (cargo build --release -p weft-posix)",
        library.display()
    );
    let local = tempfile::Builder::new().prefix("weft-bench-posix-").tempdir()?;
    let weft_dir = crate::cluster::WeftDir::make(client, "/bench-posix", keep)?;
    let dir = weft_dir.path();
    let weft = |name: &str| format!("{dir}/{name}");
    let mounted = |name: &str| mount.join(dir.trim_start_matches('/')).join(name);
    let mut rows = Vec::new();

    // Sequential cold read, then random reads: a fresh file per method.
    for (work, seq, count, span, bytes) in [
        ("seq", true, 0, 0, sizes.seq_bytes),
        (
            "rand-read",
            false,
            sizes.random_calls,
            sizes.random_span,
            sizes.random_span,
        ),
    ] {
        let mut row = [0f64; 4];
        for (k, lib) in [(1usize, None), (2, Some(library))] {
            let name = format!("{work}-{k}");
            fresh(client, &weft(&name), bytes)?;
            row[k] = rate(&spawn_worker(work, &mounted(&name), count, span, lib)?, seq);
        }
        // Native: the same calls in this process.
        let name = format!("{work}-0");
        fresh(client, &weft(&name), bytes)?;
        let f = client.open(&weft(&name), &Default::default())?;
        let start = Instant::now();
        let moved = if seq {
            let mut buf = vec![0u8; MIB as usize];
            let mut at = 0;
            loop {
                let n = f.read_at(at, &mut buf)?;
                if n == 0 {
                    break;
                }
                at += n as u64;
            }
            at
        } else {
            let mut buf = vec![0u8; SMALL_BYTES];
            for &o in &offsets(count, span, 7) {
                f.read_at(o, &mut buf)?;
            }
            count * SMALL_BYTES as u64
        };
        let m = Measured {
            seconds: start.elapsed().as_secs_f64(),
            bytes: moved,
            ops: count,
        };
        row[0] = rate(&m, seq);
        let local_file = local.path().join(&name);
        std::fs::write(&local_file, vec![0xa5u8; bytes as usize])?;
        // Local: the page cache holds the file just written, dropped first to be cold.
        drop_cache(&local_file);
        row[3] = rate(&spawn_worker(work, &local_file, count, span, None)?, seq);
        rows.push(Row {
            work: if seq {
                "sequential cold read"
            } else {
                "random 4 KiB reads"
            },
            unit: if seq { "MiB/s" } else { "reads/s" },
            native: row[0],
            mount: row[1],
            library: row[2],
            local: row[3],
        });
    }

    // Random 4 KiB first writes to a new file, then fsync.
    let (count, span) = (sizes.random_calls, sizes.random_span);
    let mut row = [0f64; 4];
    for (k, lib) in [(1usize, None), (2, Some(library))] {
        // A new file: the O_TRUNC of an earlier run's file (about 1 s here for 3000
        // scattered pieces) is not part of first writes.
        let _ = client.unlink(&weft(&format!("w-{k}")));
        row[k] = rate(
            &spawn_worker("rand-write", &mounted(&format!("w-{k}")), count, span, lib)?,
            false,
        );
    }
    {
        let path = weft("w-0");
        let _ = client.unlink(&path);
        let start = Instant::now();
        let f = client.create(&path, &CreateOptions::default())?;
        let buf = vec![0x5au8; SMALL_BYTES];
        for &o in &offsets(count, span, 11) {
            f.write_at(o, &buf)?;
        }
        f.sync()?;
        f.close()?;
        row[0] = count as f64 / start.elapsed().as_secs_f64();
    }
    // (The local directory is new for every run.)
    row[3] = rate(
        &spawn_worker("rand-write", &local.path().join("w"), count, span, None)?,
        false,
    );
    rows.push(Row {
        work: "random 4 KiB first writes",
        unit: "writes/s",
        native: row[0],
        mount: row[1],
        library: row[2],
        local: row[3],
    });

    // Random 4 KiB rewrites of the files just written (other offsets), then fsync.
    let mut row = [0f64; 4];
    for (k, lib) in [(1usize, None), (2, Some(library))] {
        row[k] = rate(
            &spawn_worker("rand-rewrite", &mounted(&format!("w-{k}")), count, span, lib)?,
            false,
        );
    }
    {
        let start = Instant::now();
        let writable = OpenOptions {
            write: true,
            ..Default::default()
        };
        let f = client.open(&weft("w-0"), &writable)?;
        let buf = vec![0xa5u8; SMALL_BYTES];
        for &o in &offsets(count, span, 13) {
            f.write_at(o, &buf)?;
        }
        f.sync()?;
        f.close()?;
        row[0] = count as f64 / start.elapsed().as_secs_f64();
    }
    row[3] = rate(
        &spawn_worker("rand-rewrite", &local.path().join("w"), count, span, None)?,
        false,
    );
    rows.push(Row {
        work: "random 4 KiB rewrites",
        unit: "writes/s",
        native: row[0],
        mount: row[1],
        library: row[2],
        local: row[3],
    });

    // Small files: open + read + close, each made once per method.
    let mut row = [0f64; 4];
    for k in 0..3usize {
        let sub = format!("{dir}/small-{k}");
        let _ = client.mkdir(&sub, 0o755);
        for i in 0..sizes.small_files {
            fresh(client, &format!("{sub}/s{i}"), SMALL_BYTES as u64)?;
        }
    }
    for (k, lib) in [(1usize, None), (2, Some(library))] {
        let sub = mounted(&format!("small-{k}"));
        row[k] = rate(&spawn_worker("small", &sub, sizes.small_files, 0, lib)?, false);
    }
    {
        let start = Instant::now();
        let mut buf = vec![0u8; SMALL_BYTES];
        for i in 0..sizes.small_files {
            let f = client.open(&format!("{dir}/small-0/s{i}"), &Default::default())?;
            f.read_at(0, &mut buf)?;
        }
        row[0] = sizes.small_files as f64 / start.elapsed().as_secs_f64();
    }
    let small_local = local.path().join("small");
    std::fs::create_dir(&small_local)?;
    for i in 0..sizes.small_files {
        std::fs::write(small_local.join(format!("s{i}")), vec![1u8; SMALL_BYTES])?;
    }
    row[3] = rate(
        &spawn_worker("small", &small_local, sizes.small_files, 0, None)?,
        false,
    );
    rows.push(Row {
        work: "small file open+read+close",
        unit: "files/s",
        native: row[0],
        mount: row[1],
        library: row[2],
        local: row[3],
    });
    Ok(rows)
}

/// Drops a local file's pages from the page cache (fdatasync, then DONTNEED).
fn drop_cache(path: &Path) {
    if let Ok(f) = std::fs::File::open(path) {
        use std::os::fd::AsRawFd;
        let _ = f.sync_all();
        // SAFETY: a valid descriptor; advice only.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

/// The table: rates, then the ratios the issue sets targets for.
pub fn render(rows: &[Row]) -> String {
    let mut out = String::from(
        "\nThe same calls four ways (library = the mount with libweft_posix.so; native = weft-client in this \
         process with the same call sizes: 1 MiB sequential reads, no read-ahead)\n",
    );
    out.push_str(&format!(
        "{:<28} {:>10} {:>10} {:>10} {:>10}  {:>11} {:>11} {:>11}\n",
        "work", "native", "mount", "library", "local", "lib/native", "lib/mount", "lib/local"
    ));
    for r in rows {
        out.push_str(&format!(
            "{:<28} {:>10.0} {:>10.0} {:>10.0} {:>10.0}  {:>10.2}x {:>10.2}x {:>10.2}x  ({})\n",
            r.work,
            r.native,
            r.mount,
            r.library,
            r.local,
            r.library / r.native,
            r.library / r.mount,
            r.library / r.local,
            r.unit
        ));
    }
    out
}
