//! `weft bench mount`: a dd-style sequential write (ending with fsync) and read of one
//! large Weft file through a FUSE mount, against the native client doing what
//! `weft put` and `weft get` do (16 MiB blocks) on the same file, in the same run.

use crate::cluster;
use crate::pattern;
use crate::report::{
    alternated, command_line, host_cpus, mib_per_s, summarise, summary_text, svg_next_to, unix_now_s,
    write_results, Goal, Spread, MIB,
};
use anyhow::{anyhow, bail, ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use weft_client::{Client, OpenOptions};

pub const LONG_ABOUT: &str = "Sequential write and read of one large file through a Weft FUSE mount, \
dd style (1 MiB read and write calls, the write ending with fsync), against the native client on \
the same file in the same run (16 MiB blocks, as `weft put` and `weft get`, the write ending with a \
sync). Each reads the file twice, opening it anew: the mount's re-read is served from the page \
cache its kernel kept (the file is unchanged; the native client has no cache). The order of the \
methods rotates from run to run. Both sides check every byte they read \
back; a mismatch fails the benchmark.\n\nWithout --mountpoint the benchmark mounts the cluster \
itself on a temporary directory (`weft mount --foreground` as a child process) and unmounts it at \
the end, also on failure; the Weft file is removed afterwards, also on failure or interrupt, unless \
--keep. Each method runs --repeat times, the methods alternated run by run, the order rotating; \
MiB/s are shown as median (min-max) of the runs, ratios are of the medians. Prints a table, writes every timing to --json and a plot of the summary next to it (.svg).\n\n\
With --floor, the FUSE floor runs in turn with the two: a file system in this process that \
stores nothing, mounted with the Weft mount's request size, readahead and threads, answering \
reads with the expected bytes by one copy from memory, on the same FUSE library as the mount \
(fuser): it shows which part of the gap to the native client is the mount's FUSE path.\n\n\
With --library, a second table: the same work natively (in this process), through the mount, \
through the mount with libweft_posix.so preloaded (`weft run`) and on a local directory, each \
mount, library and local run a worker process making plain read/pread/pwrite/open/close calls: a \
sequential read (1 MiB calls) of a --size file written just before (cold), random 4 KiB reads of \
a fresh 64 MiB file, random 4 KiB first writes to a new file then fsync, random 4 KiB rewrites of it then fsync, and open+read+close of \
small (4 KiB) files; with ratios of the library to the native client, the mount and local.\n\n\
Needs a running cluster (`weft up`) and FUSE (/dev/fuse). Example:\n  weft bench mount --size 1G \
--repeat 3 --floor --library";

/// Bytes per read and write call through the mount (dd bs=1M; the mount's largest request).
pub const MOUNT_REQUEST_BYTES: u64 = MIB;
/// Bytes per native call, as `weft put` and `weft get` move them.
pub const NATIVE_BLOCK_BYTES: u64 = 16 * MIB;
/// Largest file: it streams through two blocks of memory, so this is only a typo guard.
pub const SIZE_MAX_BYTES: u64 = 1 << 40;
pub const REPEAT_MAX: u32 = 100;
/// How long the mount may take to appear, and the daemon to end after unmounting.
const MOUNT_WAIT: Duration = Duration::from_secs(30);
const UNMOUNT_WAIT: Duration = Duration::from_secs(10);
/// Every page of the data carries its own file offset (see `Source`).
const PAGE_BYTES: usize = 4096;

#[derive(Args, Debug, Clone)]
pub struct MountArgs {
    /// Bytes to write and read (K, M, G suffixes; a multiple of 1 MiB).
    #[arg(long, default_value = "1G", value_name = "BYTES", value_parser = crate::parse_size_arg)]
    pub size: u64,
    /// Runs of each method, alternated with the others; the median counts.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub repeat: u32,
    /// A Weft mount of the cluster to use. Default: mount it on a temporary directory
    /// for the benchmark's duration.
    #[arg(long, value_name = "DIR")]
    pub mountpoint: Option<PathBuf>,
    /// The Weft file to create (replaced if it exists), used by both methods.
    #[arg(long, default_value = "/bench-mount.dat", value_name = "PATH")]
    pub path: String,
    /// Stripe size of the Weft file (K, M, G suffixes). Default: the cluster's.
    #[arg(long, value_name = "BYTES", value_parser = crate::parse_size_arg)]
    pub stripe_size: Option<u64>,
    /// Io servers to stripe over (0 = all). Default: the cluster's.
    #[arg(long, value_name = "N")]
    pub stripe_count: Option<u32>,
    /// Where to write the JSON results (the directory is created); the SVG plot goes
    /// next to it (.svg for .json).
    #[arg(long, default_value = "bench-results/mount.json", value_name = "FILE")]
    pub json: PathBuf,
    /// Keep the Weft file afterwards (and, with --library, the /bench-posix directory).
    #[arg(long)]
    pub keep: bool,
    /// Also measure the FUSE floor: a file system in this process that stores nothing
    /// (reads answered from memory with one copy, writes dropped), mounted with the Weft
    /// mount's settings and FUSE library; what the mount's FUSE path allows here.
    #[arg(long)]
    pub floor: bool,
    /// Also the library column: sequential cold read (--size), random 4 KiB reads and
    /// first writes, and small-file open+read+close, natively, through the mount, through
    /// the mount with libweft_posix.so preloaded ($WEFT_POSIX_LIB, else beside this
    /// program or in ../lib) and on a local directory.
    #[arg(long)]
    pub library: bool,
    /// Random calls (and small files, at most 2000) of the library column.
    #[arg(long, default_value_t = 4000, value_name = "N")]
    pub library_calls: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Method {
    Mount,
    Native,
    /// The FUSE floor (`weft_fuse::mount_floor`).
    Floor,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Mount => "mount",
            Method::Native => "native",
            Method::Floor => "floor",
        }
    }

    fn request_bytes(self) -> u64 {
        match self {
            Method::Mount | Method::Floor => MOUNT_REQUEST_BYTES,
            Method::Native => NATIVE_BLOCK_BYTES,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
enum Phase {
    #[serde(rename = "write+sync")]
    WriteSync,
    #[serde(rename = "read")]
    Read,
    /// The file read again, opened anew: through the mount, served from the page cache
    /// the kernel kept (the file did not change since the read's open).
    #[serde(rename = "re-read")]
    Reread,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::WriteSync => "write+sync",
            Phase::Read => "read",
            Phase::Reread => "re-read",
        }
    }
}

/// The data of one run of one method, produced and checked a request at a time without
/// holding the file in memory: a 16 MiB block of the shared pattern repeats along the
/// file, and the first word of every 4 KiB page is overwritten with a hash of its file
/// offset, so that a block read from the wrong place (or run, or method) never passes.
struct Source {
    seed: u64,
    base: PageBuf,
}

impl Source {
    fn new(run: u32, method: Method) -> Source {
        let seed = pattern::seed(0, run, method as u32);
        let mut base = PageBuf::new(NATIVE_BLOCK_BYTES as usize, 0);
        pattern::fill(&mut base, 0, seed);
        Source { seed, base }
    }

    /// The `len` bytes that belong at `file_offset` (stamped in place, so no copy).
    fn data(&mut self, file_offset: u64, len: usize) -> &[u8] {
        let at = self.block_start(file_offset, len);
        let block = &mut self.base[at..at + len];
        stamp_pages(block, file_offset, self.seed);
        block
    }

    /// Copies the bytes that belong at `file_offset` into `out`: what the FUSE floor
    /// answers a read with (one copy, as a daemon holding the data makes).
    fn copy_to(&self, file_offset: u64, out: &mut [u8]) {
        let at = self.block_start(file_offset, out.len());
        out.copy_from_slice(&self.base[at..at + out.len()]);
        stamp_pages(out, file_offset, self.seed);
    }

    fn block_start(&self, file_offset: u64, len: usize) -> usize {
        let at = (file_offset % self.base.len() as u64) as usize;
        assert!(
            file_offset.is_multiple_of(PAGE_BYTES as u64) && at + len <= self.base.len(),
            "requests are page aligned and divide the pattern block"
        );
        at
    }
}

/// Overwrites the first word of every page of `block` (at `file_offset`) with a value of
/// its offset.
fn stamp_pages(block: &mut [u8], file_offset: u64, seed: u64) {
    for (k, page) in block.chunks_mut(PAGE_BYTES).enumerate() {
        let page_offset = file_offset + (k * PAGE_BYTES) as u64;
        // xor with a constant then multiplication by an odd number: one value per offset.
        let stamp = (page_offset ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let n = page.len().min(8);
        page[..n].copy_from_slice(&stamp.to_le_bytes()[..n]);
    }
}

/// The floor's data is the same in every run (it keeps nothing that could be stale).
const FLOOR_RUN: u32 = 0;

/// Mounts the FUSE floor with one file of `size` bytes whose reads give `Source`'s data
/// for the floor.
fn mount_floor(size: u64) -> Result<(tempfile::TempDir, weft_fuse::FloorMount)> {
    let dir = tempfile::Builder::new()
        .prefix("weft-bench-floor-")
        .tempdir()
        .context("creating the floor's mount point")?;
    let source = Source::new(FLOOR_RUN, Method::Floor);
    let fill = std::sync::Arc::new(move |_file: u64, offset: u64, out: &mut [u8]| {
        // Reads come page aligned and within a pattern block (requests divide it).
        let mut done = 0;
        while done < out.len() {
            let at = offset + done as u64;
            let room = NATIVE_BLOCK_BYTES - at % NATIVE_BLOCK_BYTES;
            let n = (out.len() - done).min(room as usize);
            source.copy_to(at, &mut out[done..done + n]);
            done += n;
        }
    });
    let floor = weft_fuse::mount_floor(
        dir.path(),
        &[("f0", size)],
        2,
        weft_fuse::THREADS_DEFAULT,
        weft_fuse::READAHEAD_KIB_DEFAULT,
        fill,
    )
    .context("mounting the FUSE floor (needs /dev/fuse)")?;
    Ok((dir, floor))
}

/// One run of one method.
#[derive(Debug, Serialize)]
struct Run {
    method: Method,
    run: u32,
    /// From the first write call to the last one's return.
    write_ns: u64,
    /// The fsync (mount) or sync (native) after the last write.
    sync_ns: u64,
    /// From the first read call to the last byte checked (checking overlaps reading).
    read_ns: u64,
    /// The same again, the file opened anew.
    reread_ns: u64,
    /// File size the native client sees after the write phase.
    size_after_write: u64,
    bytes_read: u64,
    bytes_verified: u64,
}

impl Run {
    fn bandwidth(&self, phase: Phase, size: u64) -> f64 {
        match phase {
            Phase::WriteSync => mib_per_s(size, self.write_ns + self.sync_ns),
            Phase::Read => mib_per_s(size, self.read_ns),
            Phase::Reread => mib_per_s(size, self.reread_ns),
        }
    }
}

#[derive(Debug, Serialize)]
struct Summary {
    method: Method,
    phase: Phase,
    /// The median of the runs (see `repeat_summary`).
    mib_per_s: f64,
    /// The runs' min, median and max.
    mib_per_s_spread: Spread,
    ratio_vs_native: f64,
    per_run_mib_per_s: Vec<f64>,
}

#[derive(Debug, Serialize)]
struct Results {
    benchmark: &'static str,
    command_line: String,
    started_unix_s: u64,
    host_cpus: usize,
    io_servers: usize,
    size_bytes: u64,
    mount_request_bytes: u64,
    native_block_bytes: u64,
    repeat: u32,
    repeat_summary: &'static str,
    weft_path: String,
    mountpoint: String,
    /// Whether the benchmark mounted (and unmounted) the cluster itself.
    mounted_by_benchmark: bool,
    stripe_size_bytes: u64,
    stripe_count: usize,
    runs: Vec<Run>,
    summary: Vec<Summary>,
    goals: Vec<Goal>,
    notes: Vec<String>,
    /// `--library`: the same work natively, through the mount, with libweft_posix.so
    /// and on a local directory.
    library: Option<Vec<crate::posix::Row>>,
}

const GOAL_RATIO: f64 = 0.5;

const NOTE_CACHE: &str = "reads on both sides may be served from the io servers' page cache (dropping \
caches is not done); the read phase starts with the mount's page cache of the file empty (its \
writes changed the file since the previous open), so mount reads cross FUSE; the re-read phase \
opens the unchanged file again, and the mount's kernel keeps the pages it cached (close-to-open \
with kept pages), while the native client has no cache and reads from the io servers again";
const NOTE_SETTLE: &str = "between the write and the read phase both methods wait 1 s (untimed): \
the mount keeps a file's pages across opens only once the file has been unchanged for that long";
const NOTE_FLOOR: &str = "floor: the FUSE floor, a file system in this process that stores nothing \
(each read answered with the expected bytes by one copy from memory, writes dropped), mounted with \
the Weft mount's request size, readahead and worker threads; it opens without kept pages, so its \
re-read crosses FUSE again";
const NOTE_CHECK: &str = "both read phases include checking every byte, in a second thread that \
overlaps the next read";

/// Runs the benchmark: prints the table on stdout, progress on stderr, JSON to --json, the
/// plot next to it.
pub fn run(args: &MountArgs) -> Result<()> {
    ensure!(
        args.size > 0 && args.size.is_multiple_of(MIB) && args.size <= SIZE_MAX_BYTES,
        "--size must be a positive multiple of 1 MiB, at most {} GiB",
        SIZE_MAX_BYTES >> 30
    );
    ensure!(
        (1..=REPEAT_MAX).contains(&args.repeat),
        "--repeat must be 1 to {REPEAT_MAX}"
    );
    ensure!(args.path.starts_with('/'), "--path must be absolute in Weft");
    let size = args.size;

    let client = cluster::connect()?;
    let mount = match &args.mountpoint {
        Some(dir) => MountGuard::existing(dir)?,
        None => MountGuard::start()?,
    };
    let mounted_path = mount.path().join(args.path.trim_start_matches('/'));

    let create = crate::cluster::striped(args.stripe_size, args.stripe_count);
    // A fresh file, so that the layout asked for is the one measured.
    let (weft_file, layout) = cluster::WeftFile::recreate(&client, &args.path, &create, args.keep)?;
    // The mount must show the file the native client created: the same cluster.
    ensure!(
        mounted_path.is_file(),
        "{} does not show {} just created in the cluster: is {} a mount of this cluster?",
        mounted_path.display(),
        args.path,
        mount.path().display()
    );

    eprintln!(
        "mount: {} MiB, weft {} (stripe {} KiB x {}) through {}",
        size / MIB,
        args.path,
        layout.stripe_size_bytes / 1024,
        layout.servers.len(),
        mount.path().display()
    );
    let floor = if args.floor {
        Some(mount_floor(size)?)
    } else {
        None
    };
    let floor_file = floor.as_ref().map(|(dir, _)| dir.path().join("f0"));
    let mut methods = vec![Method::Mount, Method::Native];
    if floor.is_some() {
        methods.push(Method::Floor);
    }
    let mut runs = Vec::new();
    // Rotating the order keeps any method from always running on a warmer (or more
    // fragmented) machine.
    alternated(&methods, args.repeat, |run, &method| {
        let file = match method {
            Method::Floor => floor_file.as_deref().expect("the floor is mounted"),
            _ => &mounted_path,
        };
        let r = one_run(&client, method, run, &args.path, file, size)?;
        eprintln!(
            "mount: run {}/{} {:<6} write+sync {:>8.1} MiB/s  read {:>8.1} MiB/s  re-read {:>8.1} MiB/s",
            run + 1,
            args.repeat,
            method.name(),
            r.bandwidth(Phase::WriteSync, size),
            r.bandwidth(Phase::Read, size),
            r.bandwidth(Phase::Reread, size),
        );
        runs.push(r);
        Ok(())
    })?;

    if args.keep {
        eprintln!("mount: kept {}", args.path);
    }
    drop(weft_file);
    let library = if args.library {
        let lib = weft_interpose::find_library("WEFT_POSIX_LIB", "libweft_posix.so");
        let sizes = crate::posix::Sizes {
            seq_bytes: size,
            random_calls: args.library_calls,
            random_span: 64 * MIB,
            small_files: args.library_calls.min(2000),
        };
        eprintln!("library column: {} ({sizes:?})", lib.display());
        Some(crate::posix::run(&client, mount.path(), &lib, sizes, args.keep)?)
    } else {
        None
    };
    let mountpoint = mount.path().display().to_string();
    let mounted_by_benchmark = mount.owned();
    mount.finish()?;
    if let Some((_dir, floor)) = floor {
        floor.unmount().context("unmounting the FUSE floor")?;
    }

    // Rows: the baseline first.
    methods.swap(0, 1);
    let phases = [Phase::WriteSync, Phase::Read, Phase::Reread];
    let summary: Vec<Summary> = summarise(&methods, &phases, Method::Native, |method, phase| {
        runs.iter()
            .filter(|r| r.method == method)
            .map(|r| r.bandwidth(phase, size))
            .collect()
    })
    .into_iter()
    .map(|s| Summary {
        method: s.method,
        phase: s.phase,
        mib_per_s: s.mib_per_s,
        mib_per_s_spread: s.spread,
        ratio_vs_native: s.ratio,
        per_run_mib_per_s: s.per_run_mib_per_s,
    })
    .collect();
    let goal = |what, phase| {
        let ratio = summary
            .iter()
            .find(|s| s.method == Method::Mount && s.phase == phase)
            .map(|s| s.ratio_vs_native)
            .expect("mount row");
        Goal::new(what, "the native client", GOAL_RATIO, ratio)
    };
    let goals = vec![
        goal("mount write+sync", Phase::WriteSync),
        goal("mount read", Phase::Read),
    ];
    let mut notes: Vec<String> = [NOTE_CACHE, NOTE_SETTLE, NOTE_CHECK].map(String::from).into();
    if args.floor {
        let figure = |method, phase| {
            summary
                .iter()
                .find(|s| s.method == method && s.phase == phase)
                .map_or(0.0, |s| s.mib_per_s)
        };
        notes.push(NOTE_FLOOR.into());
        notes.push(format!(
            "mount read vs floor read: {:.2}x; floor read vs native read: {:.2}x (the floor: the mount's \
             FUSE path with a daemon that does no work)",
            figure(Method::Mount, Phase::Read) / figure(Method::Floor, Phase::Read),
            figure(Method::Floor, Phase::Read) / figure(Method::Native, Phase::Read),
        ));
    }

    let results = Results {
        benchmark: "mount",
        command_line: command_line(),
        started_unix_s: unix_now_s(),
        host_cpus: host_cpus(),
        io_servers: client.cluster_info().io_servers.len(),
        size_bytes: size,
        mount_request_bytes: MOUNT_REQUEST_BYTES,
        native_block_bytes: NATIVE_BLOCK_BYTES,
        repeat: args.repeat,
        repeat_summary: crate::report::REPEAT_SUMMARY,
        weft_path: args.path.clone(),
        mountpoint,
        mounted_by_benchmark,
        stripe_size_bytes: layout.stripe_size_bytes,
        stripe_count: layout.servers.len(),
        runs,
        summary,
        goals,
        notes,
        library,
    };
    print!("{}", render(&results));
    if let Some(rows) = &results.library {
        print!("{}", crate::posix::render(rows));
    }
    let figure = crate::report::phase_bars(
        &format!("weft bench mount ({} bytes, baseline native)", results.size_bytes),
        results
            .summary
            .iter()
            .map(|s| (s.method.name(), s.phase.name(), s.mib_per_s)),
    );
    write_results(&args.json, &svg_next_to(&args.json), &results, &figure)?;
    Ok(())
}

/// One method's write phase and read phase of the whole file, emptied first.
fn one_run(
    client: &Client,
    method: Method,
    run: u32,
    path: &str,
    mounted_path: &Path,
    size: u64,
) -> Result<Run> {
    let name = method.name();
    let request = method.request_bytes();
    let mut source = match method {
        Method::Floor => Source::new(FLOOR_RUN, method),
        _ => Source::new(run, method),
    };
    let (write_ns, sync_ns) = match method {
        Method::Mount | Method::Floor => {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(mounted_path)
                .with_context(|| format!("opening {}", mounted_path.display()))?;
            let started = Instant::now();
            let mut offset = 0;
            while offset < size {
                let len = request.min(size - offset);
                file.write_all(source.data(offset, len as usize))
                    .with_context(|| format!("writing {} at {offset}", mounted_path.display()))?;
                offset += len;
            }
            let write_ns = started.elapsed().as_nanos() as u64;
            let started = Instant::now();
            file.sync_all()
                .with_context(|| format!("fsync of {}", mounted_path.display()))?;
            (write_ns, started.elapsed().as_nanos() as u64)
        }
        Method::Native => {
            let options = OpenOptions {
                write: true,
                truncate: true,
                ..Default::default()
            };
            let file = client.open(path, &options)?;
            // Connects to every io server now rather than inside the timed phase.
            file.size()?;
            let started = Instant::now();
            let mut offset = 0;
            while offset < size {
                let len = request.min(size - offset);
                let n = file.write_at(offset, source.data(offset, len as usize))?;
                ensure!(n as u64 == len, "native: wrote {n} of {len} bytes at {offset}");
                offset += len;
            }
            let write_ns = started.elapsed().as_nanos() as u64;
            let started = Instant::now();
            file.sync()?;
            let sync_ns = started.elapsed().as_nanos() as u64;
            file.close()?;
            (write_ns, sync_ns)
        }
    };
    let size_after_write = match method {
        // Its size is fixed; it kept nothing.
        Method::Floor => size,
        _ => client.stat(path)?.size,
    };
    ensure!(
        size_after_write == size,
        "{name}: the file holds {size_after_write} bytes after the write phase, expected {size}"
    );

    if method != Method::Floor {
        // The mount keeps pages only of files whose objects' stamps settled (see
        // NOTE_SETTLE).
        std::thread::sleep(
            Duration::from_nanos(weft_client::ObjStamped::SETTLE_NS) + Duration::from_millis(100),
        );
    }
    let mut read_phase = |phase: Phase| -> Result<u64> {
        let (ns, bytes_verified) = match method {
            Method::Mount | Method::Floor => {
                // Reopened, as dd would be.
                let mut file = std::fs::File::open(mounted_path)
                    .with_context(|| format!("opening {}", mounted_path.display()))?;
                read_verified(&mut source, size, request, |_, buf| {
                    file.read(buf)
                        .with_context(|| format!("reading {}", mounted_path.display()))
                })?
            }
            Method::Native => {
                let file = client.open(path, &OpenOptions::default())?;
                file.size()?;
                read_verified(&mut source, size, request, |offset, buf| {
                    Ok(file.read_at(offset, buf)?)
                })?
            }
        };
        ensure!(
            bytes_verified == size,
            "{name} {}: verified {bytes_verified} bytes, expected {size}",
            phase.name()
        );
        Ok(ns)
    };
    let read_ns = read_phase(Phase::Read)?;
    let reread_ns = read_phase(Phase::Reread)?;
    let bytes_verified = size;
    Ok(Run {
        method,
        run,
        write_ns,
        sync_ns,
        read_ns,
        reread_ns,
        size_after_write,
        bytes_read: bytes_verified,
        bytes_verified,
    })
}

/// Reads `size` bytes in `request`-byte calls of `read` (given the file offset; it may
/// return short counts, 0 at the end of the file) while a second thread checks each
/// block against `source`, so that checking overlaps reading on both sides. Returns the
/// time from the first call to the last block checked, and the bytes checked.
fn read_verified(
    source: &mut Source,
    size: u64,
    request: u64,
    mut read: impl FnMut(u64, &mut [u8]) -> Result<usize>,
) -> Result<(u64, u64)> {
    let request = request as usize;
    // Two buffers, touched now so that page faults stay out of the timed phase.
    let (full_tx, full_rx) = mpsc::sync_channel::<(u64, PageBuf)>(2);
    let (empty_tx, empty_rx) = mpsc::sync_channel::<PageBuf>(2);
    for _ in 0..2 {
        empty_tx
            .send(PageBuf::new(request, 0xA5))
            .expect("receiver alive");
    }
    std::thread::scope(|scope| {
        let checker = scope.spawn(move || -> Result<u64> {
            let mut verified = 0u64;
            for (offset, buf) in full_rx {
                let expected = source.data(offset, buf.len());
                if let Some((at, want, got)) = pattern::first_mismatch(expected, &buf, offset) {
                    bail!(
                        "read back wrong data: byte at file offset {at} is {got:#04x}, written {want:#04x}"
                    );
                }
                verified += buf.len() as u64;
                // The reader may have stopped; the count is returned either way.
                let _ = empty_tx.send(buf);
            }
            Ok(verified)
        });
        let started = Instant::now();
        let reading = (|| -> Result<()> {
            let mut offset = 0u64;
            while offset < size {
                let len = (request as u64).min(size - offset) as usize;
                let Ok(mut buf) = empty_rx.recv() else {
                    return Ok(()); // the checker failed: its error is the one to report
                };
                buf.set_len(len);
                let mut filled = 0;
                while filled < len {
                    let n = read(offset + filled as u64, &mut buf[filled..])?;
                    ensure!(
                        n > 0,
                        "the file ends at {} bytes, expected {size}",
                        offset + filled as u64
                    );
                    filled += n;
                }
                if full_tx.send((offset, buf)).is_err() {
                    return Ok(());
                }
                offset += len as u64;
            }
            Ok(())
        })();
        drop(full_tx);
        let verified = checker
            .join()
            .map_err(|_| anyhow!("the checking thread panicked"))?;
        let elapsed = started.elapsed().as_nanos() as u64;
        // A read error first; then a wrong byte.
        reading?;
        Ok((elapsed, verified?))
    })
}

/// A page-aligned buffer, as dd and cp use: the kernel copies FUSE reads and writes to
/// and from aligned memory faster (about 10% on a 1 MiB read here).
struct PageBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl PageBuf {
    fn new(len: usize, byte: u8) -> PageBuf {
        let storage = vec![byte; len + PAGE_BYTES];
        // Moving the Vec moves no bytes, so the alignment found here holds for good.
        let start = storage.as_ptr().align_offset(PAGE_BYTES);
        PageBuf { storage, start, len }
    }

    /// Shortens the buffer, or lengthens it again up to the length it was made with.
    fn set_len(&mut self, len: usize) {
        assert!(
            self.start + len <= self.storage.len(),
            "beyond the buffer's capacity"
        );
        self.len = len;
    }
}

impl std::ops::Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }
}

impl std::ops::DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// The mount the benchmark reads and writes through. One it started itself (a `weft
/// mount --foreground` child on a temporary directory) is unmounted and its process
/// ended when the guard is finished or dropped, on every path out of the benchmark.
pub(crate) struct MountGuard {
    path: PathBuf,
    started: Option<Started>,
}

struct Started {
    child: Child,
    log: PathBuf,
    /// Holds the mountpoint; removed only once nothing is mounted on it (see `teardown`).
    dir: Option<tempfile::TempDir>,
}

impl MountGuard {
    pub(crate) fn existing(dir: &Path) -> Result<MountGuard> {
        let path = std::path::absolute(dir).with_context(|| format!("resolving {}", dir.display()))?;
        ensure!(
            weft_fuse::is_weft_mount(&path)
                .with_context(|| format!("looking for a mount at {}", path.display()))?,
            "{} is not a Weft mount (mount one with `weft mount {}`, or leave out --mountpoint)",
            path.display(),
            path.display()
        );
        Ok(MountGuard { path, started: None })
    }

    /// Mounts the cluster (found as every client finds it, from the environment this
    /// process inherited) on a new temporary directory and waits until it is mounted.
    pub(crate) fn start() -> Result<MountGuard> {
        let dir = tempfile::Builder::new()
            .prefix("weft-bench-mount-")
            .tempdir()
            .context("creating a temporary mountpoint")?;
        let path = dir.path().join("mnt");
        std::fs::create_dir(&path).with_context(|| format!("creating {}", path.display()))?;
        let log = dir.path().join("mount.log");
        let log_file = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let exe = std::env::current_exe().context("finding the running executable")?;
        let mut command = Command::new(&exe);
        // If the benchmark dies without dropping the guard, the daemon gets SIGTERM,
        // which unmounts: the mount never outlives the benchmark.
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = command
            .arg("mount")
            .arg(&path)
            .arg("--foreground")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .with_context(|| format!("starting {} mount", exe.display()))?;
        let mut guard = MountGuard {
            path,
            started: Some(Started {
                child,
                log,
                dir: Some(dir),
            }),
        };
        guard.wait_mounted()?;
        eprintln!("mount: mounted the cluster on {}", guard.path.display());
        Ok(guard)
    }

    fn wait_mounted(&mut self) -> Result<()> {
        let started = self.started.as_mut().expect("a mount this guard started");
        let deadline = Instant::now() + MOUNT_WAIT;
        loop {
            if weft_fuse::is_weft_mount(&self.path)? {
                return Ok(());
            }
            if let Some(status) = started.child.try_wait()? {
                bail!(
                    "weft mount exited ({status}) before mounting {}: {}",
                    self.path.display(),
                    std::fs::read_to_string(&started.log).unwrap_or_default().trim()
                );
            }
            ensure!(
                Instant::now() < deadline,
                "{} not mounted after {} s: {}",
                self.path.display(),
                MOUNT_WAIT.as_secs(),
                std::fs::read_to_string(&started.log).unwrap_or_default().trim()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn owned(&self) -> bool {
        self.started.is_some()
    }

    /// Unmounts a mount the benchmark started and checks that its daemon ended cleanly.
    pub(crate) fn finish(mut self) -> Result<()> {
        let Some(mut started) = self.started.take() else {
            return Ok(());
        };
        let result = (|| -> Result<()> {
            weft_fuse::unmount(&self.path, false)?;
            let deadline = Instant::now() + UNMOUNT_WAIT;
            loop {
                if let Some(status) = started.child.try_wait()? {
                    ensure!(
                        status.success(),
                        "weft mount exited with {status}: {}",
                        std::fs::read_to_string(&started.log).unwrap_or_default().trim()
                    );
                    return Ok(());
                }
                ensure!(
                    Instant::now() < deadline,
                    "weft mount still running {} s after unmounting",
                    UNMOUNT_WAIT.as_secs()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        })();
        teardown(&self.path, &mut started);
        result
    }
}

impl Drop for MountGuard {
    fn drop(&mut self) {
        if let Some(mut started) = self.started.take() {
            teardown(&self.path, &mut started);
        }
    }
}

/// Whatever `finish` did not get to: unmount (lazily if busy), give the daemon time to
/// end, kill it if it does not, and detach a mount a killed daemon left behind.
fn teardown(path: &Path, started: &mut Started) {
    let mounted = || weft_fuse::is_weft_mount(path).unwrap_or(false);
    if mounted() && weft_fuse::unmount(path, false).is_err() {
        let _ = weft_fuse::unmount(path, true);
    }
    let deadline = Instant::now() + UNMOUNT_WAIT;
    loop {
        match started.child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = started.child.kill();
                let _ = started.child.wait();
                break;
            }
        }
    }
    if mounted() {
        let _ = weft_fuse::unmount(path, true);
    }
    // Removing the directory while still mounted would delete files in the cluster.
    if let Some(dir) = started.dir.take() {
        if mounted() {
            let kept = dir.keep();
            eprintln!(
                "mount: could not unmount {}; left {} in place",
                path.display(),
                kept.display()
            );
        } else {
            let _ = dir.close();
        }
    }
}

fn render(r: &Results) -> String {
    let mut out = format!(
        "\nSequential write+fsync, read and re-read of one {} MiB file: mount ({} KiB calls) vs native ({} MiB blocks)\n\
         weft: {} striped {} KiB x {} of {} io servers; mount: {}{}\n\
         {} run(s) of each; {}\n\n",
        r.size_bytes / MIB,
        r.mount_request_bytes / 1024,
        r.native_block_bytes / MIB,
        r.weft_path,
        r.stripe_size_bytes / 1024,
        r.stripe_count,
        r.io_servers,
        r.mountpoint,
        if r.mounted_by_benchmark {
            " (mounted for this run)"
        } else {
            ""
        },
        r.repeat,
        r.repeat_summary,
    );
    let rows = r.summary.iter().map(|s| {
        (
            s.method.name(),
            s.phase.name(),
            s.mib_per_s_spread,
            s.ratio_vs_native,
            &s.per_run_mib_per_s[..],
        )
    });
    let notes: Vec<&str> = r.notes.iter().map(String::as_str).collect();
    out.push_str(&summary_text("native", rows, &r.goals, &notes));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_depends_on_offset_run_and_method_and_requests_of_any_size_agree() {
        let mut a = Source::new(0, Method::Mount);
        let mut b = Source::new(0, Method::Mount);
        assert_eq!(a.base.as_ptr() as usize % PAGE_BYTES, 0, "page aligned");
        // One 16 MiB block equals sixteen 1 MiB requests at the same offsets.
        let big = a
            .data(3 * NATIVE_BLOCK_BYTES, NATIVE_BLOCK_BYTES as usize)
            .to_vec();
        for k in 0..16 {
            let at = 3 * NATIVE_BLOCK_BYTES + k * MIB;
            let small = b.data(at, MIB as usize);
            assert_eq!(small, &big[(k * MIB) as usize..((k + 1) * MIB) as usize]);
        }
        // The same place of the pattern block one period later is other data.
        let later = a.data(4 * NATIVE_BLOCK_BYTES, MIB as usize).to_vec();
        assert_ne!(later, big[..MIB as usize]);
        assert_ne!(a.data(0, 4096), Source::new(1, Method::Mount).data(0, 4096));
        assert_ne!(a.data(0, 4096), Source::new(0, Method::Native).data(0, 4096));
    }

    #[test]
    fn a_read_with_one_wrong_byte_fails_and_a_short_file_fails() {
        let size = 3 * MIB;
        let mut file = Vec::new();
        let mut writer = Source::new(2, Method::Native);
        for k in 0..3 {
            file.extend_from_slice(writer.data(k * MIB, MIB as usize));
        }
        let read_from = |data: &[u8]| {
            let data = data.to_vec();
            move |offset: u64, buf: &mut [u8]| -> Result<usize> {
                let at = (offset as usize).min(data.len());
                // Short reads, as a pipe or FUSE may return.
                let n = buf.len().min(data.len() - at).min(100_000);
                buf[..n].copy_from_slice(&data[at..at + n]);
                Ok(n)
            }
        };
        let mut reader = Source::new(2, Method::Native);
        let (_, verified) = read_verified(&mut reader, size, MIB, read_from(&file)).unwrap();
        assert_eq!(verified, size);

        let mut bad = file.clone();
        bad[2 * MIB as usize + 5] ^= 1;
        let e = read_verified(&mut reader, size, MIB, read_from(&bad)).unwrap_err();
        assert!(e.to_string().contains(&format!("offset {}", 2 * MIB + 5)), "{e}");
        let e = read_verified(&mut reader, size, MIB, read_from(&file[..(2 * MIB) as usize])).unwrap_err();
        assert!(e.to_string().contains("ends at"), "{e}");
    }
}
