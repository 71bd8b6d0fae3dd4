//! `weft bench concurrent`: PVFS's concurrent read/write test. P client processes each
//! write, then read back, one contiguous block of B MiB in disjoint regions of one
//! shared file; bandwidth is total bytes over the slowest process's time. The same P
//! processes do the same on one shared local file (pwrite/pread) as the baseline.

use crate::cluster;
use crate::pattern;
use crate::plot::{Figure, Panel, XAxis};
use crate::procs::{self, Workers};
use crate::report::{
    alternated, command_line, host_cpus, mib_per_s, summarise, summary_text, svg_next_to, unix_now_s,
    write_results, Goal, Spread, MIB,
};
use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use std::ffi::OsString;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;
use weft_client::{Client, OpenOptions};

pub const LONG_ABOUT: &str = "PVFS's concurrent read/write test. P client processes (separate \
processes, started by this command) each write one contiguous block of B MiB into disjoint regions of \
one shared Weft file, then read it back; bandwidth = total bytes / slowest process's time. Phases \
start together (a barrier through pipes). In the same run the same processes do the same with \
pwrite/pread on one shared local file, the baseline. Every process checks the data it read back; \
a mismatch fails the benchmark.\n\nEach configuration runs --repeat times, the two alternated run by \
run, the order rotating; MiB/s are shown as median (min-max) of the runs, ratios are of the \
medians. The Weft file is removed afterwards, also on failure or interrupt, unless --keep. Prints a table and writes every \
timing to --json, and a plot of the summary next to it (.svg).\n\nNeeds a running cluster (`weft up`). Example:\n  weft bench concurrent --procs 4 \
--block-mib 256";

/// More client processes than this is a typo, not a benchmark.
pub const PROCS_MAX: u32 = 1024;
/// Largest block per process (each worker holds two blocks in memory).
pub const BLOCK_MIB_MAX: u64 = 16 << 10;
pub const REPEAT_MAX: u32 = 100;

#[derive(Args, Debug, Clone)]
pub struct ConcurrentArgs {
    /// Client processes; several (comma separated) run the benchmark once for each and
    /// plot bandwidth against the number of processes.
    #[arg(long, default_value = "4", value_delimiter = ',', value_name = "P,...")]
    pub procs: Vec<u32>,
    /// MiB each process writes and reads. Default: 1024 / P (1 GiB in all).
    #[arg(long, value_name = "B")]
    pub block_mib: Option<u64>,
    /// Sync (fsync) at the end of the write phase; the default. The table then shows
    /// the write phase without and with the sync.
    #[arg(long, overrides_with = "no_sync")]
    pub sync: bool,
    /// Do not sync at the end of the write phase.
    #[arg(long)]
    pub no_sync: bool,
    /// Runs of each method, alternated with the other; the median counts.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub repeat: u32,
    /// The Weft file to create (replaced if it exists; removed afterwards unless --keep).
    #[arg(long, default_value = "/bench.dat", value_name = "PATH")]
    pub path: String,
    /// Directory for the local baseline file. Default: the cluster home (the io
    /// servers' disk) if it exists here, else the system temporary directory.
    #[arg(long, value_name = "DIR")]
    pub local_dir: Option<PathBuf>,
    /// Stripe size of the Weft file (K, M, G suffixes). Default: the cluster's.
    #[arg(long, value_name = "BYTES", value_parser = crate::parse_size_arg)]
    pub stripe_size: Option<u64>,
    /// Io servers to stripe over (0 = all). Default: the cluster's.
    #[arg(long, value_name = "N")]
    pub stripe_count: Option<u32>,
    /// Where to write the JSON results (the directory is created); the SVG plot goes
    /// next to it (.svg for .json).
    #[arg(long, default_value = "bench-results/concurrent.json", value_name = "FILE")]
    pub json: PathBuf,
    /// Keep the Weft file and the local file afterwards.
    #[arg(long)]
    pub keep: bool,
    /// Rewrite both files in place each run instead of truncating them first, after
    /// one unmeasured run that fills them: measures the transport and the servers
    /// rather than the page cache's cost of new pages (which swings tenfold from run
    /// to run on a virtual machine, for the local file too).
    #[arg(long)]
    pub rewrite: bool,
    /// Measure what capabilities cost instead of comparing with a local file: start
    /// two clusters side by side, one as `weft up` makes it and one with
    /// `--insecure-no-capabilities`, show that they differ (a read without a
    /// capability is refused by one and served by the other), run the same workload on
    /// each in turn for --pairs pairs, phase by phase (first write, read, rewrite, reread, every read
    /// verified; the order alternates) and report per phase the median of the pairs'
    /// on/off ratios with its spread. Needs no running cluster.
    #[arg(long)]
    pub compare_capabilities: bool,
    /// Pairs of cycles with --compare-capabilities.
    #[arg(long, default_value_t = 9, value_name = "N")]
    pub pairs: u32,
    /// Io servers of each cluster --compare-capabilities starts.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub io_servers: u32,
    /// With --compare-capabilities: new worker processes for every cycle, so that each
    /// cycle's first write and first read pay the capability grants and presents
    /// (connections are made before the timed phases). Without it the same processes
    /// serve every cycle and hold their capabilities from the warm-up on.
    #[arg(long)]
    pub fresh_workers: bool,
    /// With --compare-capabilities: a control run, both clusters without
    /// capabilities (checked: both serve a capability-less read); the "on" side is
    /// then only the first cluster's place, and the ratios show the method's own bias.
    #[arg(long)]
    pub control_both_off: bool,
}

/// Arguments of one worker process (given by the parent).
#[derive(Args, Debug, Clone)]
pub struct WorkerArgs {
    #[arg(long)]
    rank: u32,
    #[arg(long)]
    block_bytes: u64,
    #[arg(long)]
    path: String,
    #[arg(long)]
    local_path: PathBuf,
    #[arg(long)]
    sync: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Method {
    Weft,
    Local,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Weft => "weft",
            Method::Local => "local",
        }
    }

    fn parse(text: &str) -> Result<Method> {
        match text {
            "weft" => Ok(Method::Weft),
            "local" => Ok(Method::Local),
            other => bail!("unknown method {other:?}"),
        }
    }
}

/// What one worker has open.
enum Target {
    Weft(Box<weft_client::File>),
    Local(std::fs::File),
}

struct Worker {
    args: WorkerArgs,
    client: Client,
    written: Vec<u8>,
    read_back: Vec<u8>,
    target: Option<Target>,
}

impl Worker {
    fn offset(&self) -> u64 {
        u64::from(self.args.rank) * self.args.block_bytes
    }

    /// Opens the local file or a Weft file: `path` if given (another file of the same
    /// size, as `weft bench redundancy` compares layouts), else `--path`.
    fn open(&self, method: Method, write: bool, path: Option<&str>) -> Result<Target> {
        Ok(match method {
            Method::Weft => {
                let options = OpenOptions {
                    write,
                    ..Default::default()
                };
                let path = path.unwrap_or(&self.args.path);
                Target::Weft(Box::new(self.client.open(path, &options)?))
            }
            Method::Local => Target::Local(
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(write)
                    .open(&self.args.local_path)
                    .with_context(|| format!("opening {}", self.args.local_path.display()))?,
            ),
        })
    }

    fn handle(&mut self, command: &str) -> Result<String> {
        let words: Vec<&str> = command.split_whitespace().collect();
        match words.as_slice() {
            ["open-write", method, run, path @ ..] if path.len() <= 1 => {
                let method = Method::parse(method)?;
                let target = self.open(method, true, path.first().copied())?;
                if let Target::Weft(f) = &target {
                    // Connects to every io server now rather than inside the timed phase.
                    f.size()?;
                }
                self.target = Some(target);
                let seed = pattern::seed(self.args.rank, run.parse()?, method as u32);
                let offset = self.offset();
                pattern::fill(&mut self.written, offset, seed);
                Ok(String::new())
            }
            ["write"] => {
                let offset = self.offset();
                let target = self.target.as_ref().context("write before open-write")?;
                let started = Instant::now();
                match target {
                    Target::Weft(f) => {
                        f.write_at(offset, &self.written)?;
                    }
                    Target::Local(f) => f.write_all_at(&self.written, offset)?,
                }
                let write_ns = started.elapsed().as_nanos() as u64;
                let started = Instant::now();
                if self.args.sync {
                    match target {
                        Target::Weft(f) => f.sync()?,
                        Target::Local(f) => f.sync_all()?,
                    }
                }
                let sync_ns = if self.args.sync {
                    started.elapsed().as_nanos() as u64
                } else {
                    0
                };
                Ok(format!("{write_ns} {sync_ns}"))
            }
            // PVFS closes the file after writing and reopens it to read.
            ["open-read", method, path @ ..] if path.len() <= 1 => {
                self.target = None;
                self.target = Some(self.open(Method::parse(method)?, false, path.first().copied())?);
                Ok(String::new())
            }
            ["read"] => {
                let offset = self.offset();
                let target = self.target.as_ref().context("read before open-read")?;
                let started = Instant::now();
                let n = match target {
                    Target::Weft(f) => f.read_at(offset, &mut self.read_back)?,
                    Target::Local(f) => {
                        f.read_exact_at(&mut self.read_back, offset)?;
                        self.read_back.len()
                    }
                };
                let read_ns = started.elapsed().as_nanos() as u64;
                ensure!(
                    n == self.read_back.len(),
                    "short read at offset {offset}: {n} of {} bytes",
                    self.read_back.len()
                );
                if let Some((at, expected, got)) =
                    pattern::first_mismatch(&self.written, &self.read_back, offset)
                {
                    bail!(
                        "rank {} read back wrong data: byte at file offset {at} is {got:#04x}, \
                         written {expected:#04x}",
                        self.args.rank
                    );
                }
                Ok(format!("{read_ns} {n}"))
            }
            ["close"] => {
                self.target = None;
                Ok(String::new())
            }
            _ => bail!("unknown command {command:?}"),
        }
    }
}

/// The worker process: set up, then serve the parent's commands.
pub fn worker(args: &WorkerArgs) -> Result<()> {
    procs::serve(
        || {
            let block = usize::try_from(args.block_bytes)?;
            Ok(Worker {
                args: args.clone(),
                client: Client::from_env()?,
                written: vec![0u8; block],
                // Touched now so that page faults stay out of the timed read.
                read_back: vec![0xA5u8; block],
                target: None,
            })
        },
        |w, command| w.handle(command),
    )
}

/// One run of one method: every process's timings.
#[derive(Debug, Serialize)]
struct Run {
    method: Method,
    run: u32,
    /// Per process (by rank): time of its write calls.
    write_ns: Vec<u64>,
    /// Per process: time of its sync after writing (0 without --sync).
    sync_ns: Vec<u64>,
    /// Per process: time of its read calls.
    read_ns: Vec<u64>,
    /// The parent's time from sending "go" to the last process's answer.
    write_wall_ns: u64,
    read_wall_ns: u64,
    /// File size seen after the write phase.
    size_after_write: u64,
    bytes_read: u64,
    /// Bytes every process compared with what it wrote (equal to bytes_read).
    bytes_verified: u64,
}

impl Run {
    fn bandwidth(&self, phase: Phase, total: u64) -> f64 {
        let per_process: Vec<u64> = match phase {
            Phase::Write => self.write_ns.clone(),
            Phase::WriteSync => self
                .write_ns
                .iter()
                .zip(&self.sync_ns)
                .map(|(w, s)| w + s)
                .collect(),
            Phase::Read => self.read_ns.clone(),
        };
        let slowest = per_process.into_iter().max().expect("at least one process");
        mib_per_s(total, slowest)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
enum Phase {
    #[serde(rename = "write")]
    Write,
    #[serde(rename = "write+sync")]
    WriteSync,
    #[serde(rename = "read")]
    Read,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Write => "write",
            Phase::WriteSync => "write+sync",
            Phase::Read => "read",
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
    ratio_vs_local: f64,
    per_run_mib_per_s: Vec<f64>,
}

#[derive(Debug, Serialize)]
struct Results {
    benchmark: &'static str,
    command_line: String,
    started_unix_s: u64,
    host_cpus: usize,
    io_servers: usize,
    procs: u32,
    block_bytes: u64,
    total_bytes: u64,
    repeat: u32,
    repeat_summary: &'static str,
    sync: bool,
    /// The files were rewritten in place each run (`--rewrite`), not truncated.
    rewrite: bool,
    weft_path: String,
    stripe_size_bytes: u64,
    stripe_count: usize,
    local_path: String,
    runs: Vec<Run>,
    summary: Vec<Summary>,
    goals: Vec<Goal>,
    notes: Vec<&'static str>,
}

const NOTE_CACHE: &str = "reads on both sides are likely served from the page cache (the local \
file's, and the io servers' object files'): this benchmark drops no caches, so both sides read alike";

const NOTE_NO_TARGET: &str = "no target on one machine: the local file is the page cache's speed, \
shown for comparison (targets apply behind --emulate-network, against the links)";

/// Most process counts of one sweep.
pub const SWEEP_MAX: usize = 16;

/// Runs the benchmark for each process count: prints the tables on stdout, progress on
/// stderr, JSON to --json and the plot next to it: bars per method and phase for one
/// count, bandwidth against the process count for several (the JSON's `sweep` then
/// holds one result per count). Its `--compare-capabilities` form is `capcompare::run`
/// (`run` in lib.rs chooses), which builds on this module, never the other way round.
pub fn run(args: &ConcurrentArgs) -> Result<()> {
    ensure!(
        (1..=SWEEP_MAX).contains(&args.procs.len()),
        "--procs: 1 to {SWEEP_MAX} process counts"
    );
    let mut all = Vec::new();
    for &procs in &args.procs {
        all.push(measure(args, procs)?);
    }
    let svg = svg_next_to(&args.json);
    if let [results] = &all[..] {
        let figure = crate::report::phase_bars(
            &format!(
                "weft bench concurrent: {} processes, {} bytes, baseline local",
                results.procs, results.total_bytes
            ),
            results
                .summary
                .iter()
                .map(|s| (s.method.name(), s.phase.name(), s.mib_per_s)),
        );
        return write_results(&args.json, &svg, results, &figure);
    }
    let figure = sweep_figure(&all);
    let sweep = serde_json::json!({
        "benchmark": "concurrent",
        "command_line": command_line(),
        "procs": args.procs,
        "sweep": all,
    });
    write_results(&args.json, &svg, &sweep, &figure)
}

/// MiB/s against the number of processes, a panel per phase, a line per method.
fn sweep_figure(all: &[Results]) -> Figure {
    let mut panels: Vec<Panel> = Vec::new();
    for results in all {
        for s in &results.summary {
            let title = format!("{} (MiB/s)", s.phase.name());
            let at = match panels.iter().position(|p| p.title == title) {
                Some(i) => i,
                None => {
                    panels.push(Panel::lines(title, "client processes", "MiB/s", XAxis::Log2));
                    panels.len() - 1
                }
            };
            panels[at].point(s.method.name(), f64::from(results.procs), s.mib_per_s);
        }
    }
    Figure {
        title: "weft bench concurrent: bandwidth against the number of processes (baseline local)".into(),
        panels,
    }
}

/// One process count: measures, prints the table, returns the results.
fn measure(args: &ConcurrentArgs, procs: u32) -> Result<Results> {
    ensure!(
        (1..=PROCS_MAX).contains(&procs),
        "--procs must be 1 to {PROCS_MAX}"
    );
    let block_mib = args.block_mib.unwrap_or((1024 / u64::from(procs)).max(1));
    ensure!(
        (1..=BLOCK_MIB_MAX).contains(&block_mib),
        "--block-mib must be 1 to {BLOCK_MIB_MAX}"
    );
    ensure!(
        (1..=REPEAT_MAX).contains(&args.repeat),
        "--repeat must be 1 to {REPEAT_MAX}"
    );
    let sync = !args.no_sync;
    let block_bytes = block_mib * MIB;
    let total = block_bytes * u64::from(procs);

    let client = cluster::connect()?;
    let create = crate::cluster::striped(args.stripe_size, args.stripe_count);
    // A fresh file, so that the layout asked for is the one measured.
    let (weft_file, layout) = cluster::WeftFile::recreate(&client, &args.path, &create, args.keep)?;

    let local_base = args.local_dir.clone().unwrap_or_else(default_local_dir);
    let local_dir = tempfile::Builder::new()
        .prefix("weft-bench-")
        .tempdir_in(&local_base)
        .with_context(|| format!("creating a directory under {}", local_base.display()))?;
    // An interrupted run removes it too (the signal thread; see `cluster::scratch`).
    let _local_scratch = (!args.keep).then(|| cluster::scratch(local_dir.path()));
    let local_path = local_dir.path().join("concurrent.dat");

    eprintln!(
        "concurrent: {procs} processes x {block_mib} MiB, weft {} (stripe {} KiB x {}), local {}",
        args.path,
        layout.stripe_size_bytes / 1024,
        layout.servers.len(),
        local_path.display()
    );
    let mut workers = Workers::spawn("concurrent-worker", procs, |rank| {
        let mut a: Vec<OsString> = vec![
            "--rank".into(),
            rank.to_string().into(),
            "--block-bytes".into(),
            block_bytes.to_string().into(),
            "--path".into(),
            args.path.clone().into(),
            "--local-path".into(),
            local_path.clone().into(),
        ];
        if sync {
            a.push("--sync".into());
        }
        a
    })?;

    if args.rewrite {
        for method in [Method::Weft, Method::Local] {
            one_run(&client, &mut workers, method, u32::MAX, args, &local_path, total)?;
        }
        eprintln!("concurrent: files filled (unmeasured); every run rewrites them in place");
    }
    let mut runs = Vec::new();
    // Alternating, the order rotating, keeps either method from always running on a
    // warmer (or more fragmented) machine.
    alternated(&[Method::Weft, Method::Local], args.repeat, |run, &method| {
        let r = one_run(&client, &mut workers, method, run, args, &local_path, total)?;
        eprintln!(
            "concurrent: run {}/{} {:<5} write {:>8.1} MiB/s{}  read {:>8.1} MiB/s",
            run + 1,
            args.repeat,
            method.name(),
            r.bandwidth(Phase::Write, total),
            if sync {
                format!("  write+sync {:>8.1} MiB/s", r.bandwidth(Phase::WriteSync, total))
            } else {
                String::new()
            },
            r.bandwidth(Phase::Read, total),
        );
        runs.push(r);
        Ok(())
    })?;
    workers.finish()?;

    if args.keep {
        let kept = local_dir.keep();
        eprintln!(
            "concurrent: kept {} and {}",
            args.path,
            kept.join("concurrent.dat").display()
        );
    } else {
        local_dir.close()?;
    }
    drop(weft_file);

    let mut phases = vec![Phase::Write];
    if sync {
        phases.push(Phase::WriteSync);
    }
    phases.push(Phase::Read);
    let summary: Vec<Summary> = summarise(
        &[Method::Local, Method::Weft],
        &phases,
        Method::Local,
        |method, phase| {
            runs.iter()
                .filter(|r| r.method == method)
                .map(|r| r.bandwidth(phase, total))
                .collect()
        },
    )
    .into_iter()
    .map(|s| Summary {
        method: s.method,
        phase: s.phase,
        mib_per_s: s.mib_per_s,
        mib_per_s_spread: s.spread,
        ratio_vs_local: s.ratio,
        per_run_mib_per_s: s.per_run_mib_per_s,
    })
    .collect();
    let mut goals = Vec::new();
    let mut notes = vec![NOTE_CACHE];
    if let Some(emu) = crate::regime::emulation() {
        // Behind emulated links the file's servers' links bound a contiguous transfer,
        // as on a cluster: that is the baseline, not this machine's page cache.
        let links = emu.rate_bits as f64 / 8.0 * layout.servers.len() as f64 / MIB as f64;
        for s in summary.iter().filter(|s| s.method == Method::Weft) {
            goals.push(Goal::new(
                format!("weft {}", s.phase.name()),
                format!("the emulated links ({links:.1} MiB/s)"),
                LINKS_TARGET,
                s.mib_per_s / links,
            ));
        }
    } else {
        // On one machine the local file is the page cache's speed, which no network file
        // system is asked to reach: the ratio is shown, no target (issue 36).
        notes.push(NOTE_NO_TARGET);
    }

    let results = Results {
        benchmark: "concurrent",
        command_line: command_line(),
        started_unix_s: unix_now_s(),
        host_cpus: host_cpus(),
        io_servers: client.cluster_info().io_servers.len(),
        procs,
        block_bytes,
        total_bytes: total,
        repeat: args.repeat,
        repeat_summary: crate::report::REPEAT_SUMMARY,
        sync,
        rewrite: args.rewrite,
        weft_path: args.path.clone(),
        stripe_size_bytes: layout.stripe_size_bytes,
        stripe_count: layout.servers.len(),
        local_path: local_path.display().to_string(),
        runs,
        summary,
        goals,
        notes,
    };
    print!("{}", render(&results));
    Ok(results)
}

/// One method's write phase and read phase, with the file reset first (unless
/// `--rewrite`: then written over in place).
fn one_run(
    client: &Client,
    workers: &mut Workers,
    method: Method,
    run: u32,
    args: &ConcurrentArgs,
    local_path: &Path,
    total: u64,
) -> Result<Run> {
    match method {
        Method::Weft => {
            client.open(
                &args.path,
                &OpenOptions {
                    write: true,
                    truncate: !args.rewrite,
                    ..Default::default()
                },
            )?;
        }
        Method::Local => {
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(!args.rewrite)
                .open(local_path)
                .with_context(|| format!("creating {}", local_path.display()))?;
        }
    }
    let name = method.name();
    workers.step(&format!("open-write {name} {run}"))?;
    let (written, write_wall) = workers.step("write")?;
    let size_after_write = match method {
        Method::Weft => client.stat(&args.path)?.size,
        Method::Local => std::fs::metadata(local_path)?.len(),
    };
    ensure!(
        size_after_write == total,
        "{name}: the file holds {size_after_write} bytes after the write phase, expected {total}"
    );
    workers.step(&format!("open-read {name}"))?;
    let (read, read_wall) = workers.step("read")?;
    workers.step("close")?;

    let written = worker_numbers(&written)?;
    let read = worker_numbers(&read)?;
    let bytes_verified: u64 = read.iter().map(|r| r.1).sum();
    ensure!(
        bytes_verified == total,
        "{name}: processes verified {bytes_verified} bytes, expected {total}"
    );
    Ok(Run {
        method,
        run,
        write_ns: written.iter().map(|w| w.0).collect(),
        sync_ns: written.iter().map(|w| w.1).collect(),
        read_ns: read.iter().map(|r| r.0).collect(),
        write_wall_ns: write_wall.as_nanos() as u64,
        read_wall_ns: read_wall.as_nanos() as u64,
        size_after_write,
        bytes_read: bytes_verified,
        bytes_verified,
    })
}

/// The cluster home when it exists on this machine (the io servers' disk), else the
/// system temporary directory.
fn default_local_dir() -> PathBuf {
    let home = weft_config::home_dir();
    if home.is_dir() {
        home
    } else {
        std::env::temp_dir()
    }
}

fn render(r: &Results) -> String {
    let mut out = format!(
        "\nConcurrent read/write (PVFS): {} processes x {} MiB = {} MiB in one shared file{}\n\
         weft: {} striped {} KiB x {} of {} io servers; local: {}\n\
         {} run(s) of each; {}\n\n",
        r.procs,
        r.block_bytes / MIB,
        r.total_bytes / MIB,
        if r.rewrite { ", rewritten in place" } else { "" },
        r.weft_path,
        r.stripe_size_bytes / 1024,
        r.stripe_count,
        r.io_servers,
        r.local_path,
        r.repeat,
        r.repeat_summary,
    );
    let rows = r.summary.iter().map(|s| {
        (
            s.method.name(),
            s.phase.name(),
            s.mib_per_s_spread,
            s.ratio_vs_local,
            &s.per_run_mib_per_s[..],
        )
    });
    out.push_str(&summary_text("local", rows, &r.goals, &r.notes));
    if let Some(emu) = crate::regime::emulation() {
        // The file's servers' links bound a contiguous transfer, as on a cluster.
        let links = emu.rate_bits as f64 / 8.0 * r.stripe_count as f64 / MIB as f64;
        out.push_str(&format!(
            "emulated links: {} x {} = {links:.1} MiB/s each direction (the targets' baseline)\n",
            r.stripe_count,
            weft_config::netemu::rate_text(emu.rate_bits)
        ));
    }
    out
}

/// What a contiguous transfer should reach of the emulated links' total rate.
const LINKS_TARGET: f64 = 0.85;

/// The first two numbers of each worker's answer to a step (nanoseconds and bytes).
pub(crate) fn worker_numbers(replies: &[String]) -> Result<Vec<(u64, u64)>> {
    replies
        .iter()
        .map(|line| {
            let mut it = line.split_whitespace().map(str::parse::<u64>);
            match (it.next(), it.next()) {
                (Some(Ok(a)), Some(Ok(b))) => Ok((a, b)),
                _ => bail!("malformed worker answer {line:?}"),
            }
        })
        .collect()
}
