//! `weft bench noncontig`: the Clusterfile 2D benchmark (Isaila and Tichy, section
//! 6.3). P client processes on a sqrt(P) x sqrt(P) grid each set a CYCLIC(k) x
//! CYCLIC(k) darray view on one N x N matrix of 1-byte elements and write, then read,
//! their part of it with view I/O, for k = 8 ... 256. In the same run the same
//! processes write and read the same number of bytes contiguously (process r the r-th
//! P-th of the file), the reference the view figures are compared with.

use crate::cluster;
use crate::plot::{Figure, Panel, XAxis};
use crate::procs::Workers;
use crate::report::{
    alternated, command_line, host_cpus, mib_per_s, svg_next_to, unix_now_s, write_results, Goal, Spread,
    Table, MIB,
};
use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Instant;
use weft_client::{Client, CreateOptions, Datatype, Distribution, LayoutRequest, OpenOptions, Order, View};

pub const LONG_ABOUT: &str = "The Clusterfile 2D benchmark (Isaila and Tichy, section 6.3). P client \
processes (separate processes started by this command) on a sqrt(P) x sqrt(P) grid each set a \
CYCLIC(k) x CYCLIC(k) darray view on one N x N matrix of 1-byte elements (N*N = --matrix-mib) and \
write, then read, their part with view I/O: the view is registered once with each io server, requests \
carry only (view id, interval), and each server gathers or scatters its own pieces. For every k the \
file is created afresh; phases start together (a barrier through pipes); bandwidth = matrix bytes / \
slowest process's time. In the same run the same processes write and read the same bytes \
contiguously (process r the r-th P-th of the file): the reference. Every process checks what it \
reads back, and unless --no-verify the whole file is checked after each write phase. Every \
configuration runs --repeat times, all alternated run by run, the order rotating; MiB/s are shown as \
median (min-max) of the runs, ratios are of the medians. The Weft file is removed afterwards, also \
on failure or interrupt. Writes JSON \
to --json and a plot of MiB/s against k next to it (.svg).\n\nTargets: \
view I/O at k >= 32 at least 0.5x the contiguous reference, at k = 8 at least 0.2x.\n\nNeeds a \
running cluster (`weft up`). Example:\n  weft bench noncontig --procs 4 --matrix-mib 256";

pub const PROCS_MAX: u32 = 256;
pub const MATRIX_MIB_MAX: u64 = 16 << 10;
pub const REPEAT_MAX: u32 = 100;
/// CYCLIC block sizes of the paper.
pub const BLOCKS_DEFAULT: &str = "8,16,32,64,128,256";

#[derive(Args, Debug, Clone)]
pub struct NoncontigArgs {
    /// Client processes; a square (4, 9, 16, ...).
    #[arg(long, default_value_t = 4, value_name = "P")]
    pub procs: u32,
    /// Matrix size in MiB; the matrix is N x N bytes with N = floor(sqrt(size)).
    #[arg(long, default_value_t = 256, value_name = "MIB")]
    pub matrix_mib: u64,
    /// CYCLIC block sizes k, comma separated.
    #[arg(long, default_value = BLOCKS_DEFAULT, value_delimiter = ',', value_name = "K,...")]
    pub k: Vec<u64>,
    /// Runs of every configuration, alternated with the others; the median counts.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub repeat: u32,
    /// The Weft file to use (replaced for every configuration; removed afterwards).
    #[arg(long, default_value = "/noncontig.dat", value_name = "PATH")]
    pub path: String,
    /// Stripe size of the file (K, M, G suffixes). Default: the cluster's.
    #[arg(long, value_name = "BYTES", value_parser = crate::parse_size_arg)]
    pub stripe_size: Option<u64>,
    /// Io servers to stripe over (0 = all). Default: the cluster's.
    #[arg(long, value_name = "N")]
    pub stripe_count: Option<u32>,
    /// Skip checking the whole file after each write phase.
    #[arg(long)]
    pub no_verify: bool,
    /// Where to write the JSON results (the directory is created); the SVG plot goes
    /// next to it (.svg for .json).
    #[arg(long, default_value = "bench-results/noncontig.json", value_name = "FILE")]
    pub json: PathBuf,
}

/// Arguments of one worker process (given by the parent).
#[derive(Args, Debug, Clone)]
pub struct WorkerArgs {
    #[arg(long)]
    rank: u32,
    #[arg(long)]
    procs: u32,
    #[arg(long)]
    side: u64,
    #[arg(long)]
    path: String,
}

/// How a process accesses its share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Access {
    /// Its P-th of the file as one contiguous range (the reference).
    Contiguous,
    /// Its CYCLIC(k) x CYCLIC(k) darray view.
    Cyclic(u64),
}

impl Access {
    fn word(self) -> String {
        match self {
            Access::Contiguous => "contiguous".into(),
            Access::Cyclic(k) => format!("cyclic:{k}"),
        }
    }

    fn parse(text: &str) -> Result<Access> {
        if text == "contiguous" {
            return Ok(Access::Contiguous);
        }
        match text.strip_prefix("cyclic:").map(str::parse) {
            Some(Ok(k)) => Ok(Access::Cyclic(k)),
            _ => bail!("unknown access {text:?}"),
        }
    }

    fn label(self) -> String {
        match self {
            Access::Contiguous => "contiguous".into(),
            Access::Cyclic(k) => format!("CYCLIC({k})"),
        }
    }

    fn seed_tag(self) -> u64 {
        match self {
            Access::Contiguous => 0,
            Access::Cyclic(k) => k,
        }
    }
}

/// The side of the process grid, if `procs` is a square.
fn grid_side(procs: u32) -> Option<u64> {
    let g = (f64::from(procs)).sqrt().round() as u64;
    (g * g == u64::from(procs)).then_some(g)
}

/// The darray view of `rank` for CYCLIC(k) in both dimensions.
fn cyclic_view(procs: u32, rank: u32, side: u64, k: u64) -> Result<View> {
    let grid = grid_side(procs).context("the process count must be a square")?;
    let filetype = Datatype::darray(
        u64::from(procs),
        u64::from(rank),
        &[side, side],
        &[Distribution::Cyclic(Some(k)); 2],
        &[grid, grid],
        Order::C,
        &Datatype::bytes(1)?,
    )?;
    Ok(View::new(0, filetype)?)
}

/// Rank `rank`'s contiguous range of a file of `total` bytes.
fn contiguous_range(procs: u32, rank: u32, total: u64) -> (u64, u64) {
    let start = total * u64::from(rank) / u64::from(procs);
    let end = total * (u64::from(rank) + 1) / u64::from(procs);
    (start, end - start)
}

/// The byte every writer puts at `file_offset`: a hash of the offset's word and the
/// seed, so that misplaced, lost or stale bytes show.
fn expected_byte(seed: u64, file_offset: u64) -> u8 {
    splitmix64(seed ^ (file_offset >> 3)).to_le_bytes()[(file_offset & 7) as usize]
}

/// Fills `buf` with the bytes expected at file offsets `file_offset..`.
fn fill_expected(buf: &mut [u8], seed: u64, file_offset: u64) {
    let mut at = 0usize;
    while at < buf.len() {
        let offset = file_offset + at as u64;
        let word = splitmix64(seed ^ (offset >> 3)).to_le_bytes();
        let from = (offset & 7) as usize;
        let n = (8 - from).min(buf.len() - at);
        buf[at..at + n].copy_from_slice(&word[from..from + n]);
        at += n;
    }
}

/// CPU time (user and system, all threads) of this process so far.
fn process_cpu_ns() -> u64 {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    ns(usage.ru_utime) + ns(usage.ru_stime)
}

/// The io servers of the cluster in this machine's cluster home (their pid files),
/// whose CPU time the benchmark reports beside the clients'. Empty when the servers
/// run elsewhere.
fn local_server_pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(weft_config::home_dir().join("run")) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".pid"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok()?.trim().parse().ok())
        .filter(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
        .collect()
}

/// CPU time of processes `pids` so far (from /proc; clock-tick resolution).
fn processes_cpu_ns(pids: &[u32]) -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // Fields after the command name (which may hold spaces): utime is the 12th.
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: u64 = fields.get(11)?.parse().ok()?;
            let stime: u64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) * 1_000_000_000 / ticks_per_s)
        })
        .sum()
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn seed_of(access: Access, run: u32) -> u64 {
    splitmix64(0x6e6f_6e63 ^ (access.seed_tag() << 16) ^ u64::from(run))
}

struct Worker {
    args: WorkerArgs,
    client: Client,
    file: Option<weft_client::File>,
    access: Access,
    /// File offset of a contiguous access.
    offset: u64,
    written: Vec<u8>,
    read_back: Vec<u8>,
}

impl Worker {
    fn handle(&mut self, command: &str) -> Result<String> {
        let words: Vec<&str> = command.split_whitespace().collect();
        match words.as_slice() {
            ["open", access, run] => {
                let access = Access::parse(access)?;
                let seed = seed_of(access, run.parse()?);
                let a = &self.args;
                let file = self.client.open(
                    &a.path,
                    &OpenOptions {
                        write: true,
                        ..Default::default()
                    },
                )?;
                let pieces = match access {
                    Access::Contiguous => {
                        let (offset, len) = contiguous_range(a.procs, a.rank, a.side * a.side);
                        self.offset = offset;
                        self.written.resize(len as usize, 0);
                        fill_expected(&mut self.written, seed, offset);
                        1
                    }
                    Access::Cyclic(k) => {
                        let view = cyclic_view(a.procs, a.rank, a.side, k)?;
                        let len = view.filetype().size_bytes();
                        self.written.resize(len as usize, 0);
                        let mut pieces = 0u64;
                        for piece in view.pieces(0, len)? {
                            let at = piece.view_offset as usize;
                            fill_expected(
                                &mut self.written[at..at + piece.len as usize],
                                seed,
                                piece.file_offset,
                            );
                            pieces += 1;
                        }
                        file.set_view_to(view)?;
                        pieces
                    }
                };
                // Touched now so that page faults stay out of the timed read.
                self.read_back.clear();
                self.read_back.resize(self.written.len(), 0xA5);
                // Connects to every io server now rather than inside the timed phase.
                file.size()?;
                self.file = Some(file);
                self.access = access;
                Ok(format!("{} {pieces}", self.written.len()))
            }
            ["write"] => {
                let file = self.file.as_ref().context("write before open")?;
                let cpu = process_cpu_ns();
                let started = Instant::now();
                match self.access {
                    Access::Contiguous => file.write_at(self.offset, &self.written)?,
                    Access::Cyclic(_) => file.write_view(0, &self.written)?,
                };
                let ns = started.elapsed().as_nanos();
                Ok(format!("{ns} {}", process_cpu_ns() - cpu))
            }
            ["read"] => {
                let file = self.file.as_ref().context("read before open")?;
                let cpu = process_cpu_ns();
                let started = Instant::now();
                let n = match self.access {
                    Access::Contiguous => file.read_at(self.offset, &mut self.read_back)?,
                    Access::Cyclic(_) => file.read_view(0, &mut self.read_back)?,
                };
                let read_ns = started.elapsed().as_nanos();
                let read_cpu_ns = process_cpu_ns() - cpu;
                ensure!(
                    n == self.read_back.len(),
                    "short read: {n} of {} bytes",
                    self.read_back.len()
                );
                // memcmp first; the byte-wise search only on a mismatch.
                if self.written != self.read_back {
                    let at = self
                        .written
                        .iter()
                        .zip(&self.read_back)
                        .position(|(a, b)| a != b)
                        .unwrap_or(0);
                    bail!(
                        "rank {} read back wrong data with {}: view byte {at} is {:#04x}, written {:#04x}",
                        self.args.rank,
                        self.access.label(),
                        self.read_back[at],
                        self.written[at]
                    );
                }
                Ok(format!("{read_ns} {read_cpu_ns}"))
            }
            ["close"] => {
                self.file = None;
                Ok(String::new())
            }
            _ => bail!("unknown command {command:?}"),
        }
    }
}

/// The worker process: set up, then serve the parent's commands.
pub fn worker(args: &WorkerArgs) -> Result<()> {
    crate::procs::serve(
        || {
            Ok(Worker {
                args: args.clone(),
                client: Client::from_env()?,
                file: None,
                access: Access::Contiguous,
                offset: 0,
                written: Vec::new(),
                read_back: Vec::new(),
            })
        },
        |w, command| w.handle(command),
    )
}

/// One run of one access pattern: every process's timings.
#[derive(Debug, Serialize)]
struct Run {
    access: Access,
    run: u32,
    /// Per process (by rank): bytes it moved and pieces of its view (1 when contiguous).
    bytes: Vec<u64>,
    pieces: Vec<u64>,
    write_ns: Vec<u64>,
    read_ns: Vec<u64>,
    /// CPU time of the client processes (summed) and of the local io servers in each
    /// phase: what the access costs, whatever else runs on the machine.
    write_client_cpu_ns: u64,
    write_server_cpu_ns: u64,
    read_client_cpu_ns: u64,
    read_server_cpu_ns: u64,
    /// Bytes of the file checked after the write phase (0 with --no-verify).
    bytes_verified: u64,
}

impl Run {
    fn bandwidth(&self, write: bool) -> f64 {
        let times = if write { &self.write_ns } else { &self.read_ns };
        let total: u64 = self.bytes.iter().sum();
        mib_per_s(total, times.iter().copied().max().expect("at least one process"))
    }

    /// CPU seconds (clients and servers) per GiB moved.
    fn cpu_s_per_gib(&self, write: bool) -> f64 {
        let cpu = if write {
            self.write_client_cpu_ns + self.write_server_cpu_ns
        } else {
            self.read_client_cpu_ns + self.read_server_cpu_ns
        };
        let total: u64 = self.bytes.iter().sum();
        cpu as f64 / 1e9 / (total as f64 / (1u64 << 30) as f64)
    }
}

#[derive(Debug, Serialize)]
struct Summary {
    access: Access,
    pieces_per_process: u64,
    /// Medians of the runs.
    write_mib_per_s: f64,
    read_mib_per_s: f64,
    /// The runs' min, median and max.
    write_mib_per_s_spread: Spread,
    read_mib_per_s_spread: Spread,
    write_vs_contiguous: f64,
    read_vs_contiguous: f64,
    /// CPU seconds (clients and local io servers) per GiB, median over runs.
    write_cpu_s_per_gib: f64,
    read_cpu_s_per_gib: f64,
    per_run_write_mib_per_s: Vec<f64>,
    per_run_read_mib_per_s: Vec<f64>,
}

#[derive(Debug, Serialize)]
struct Results {
    benchmark: &'static str,
    command_line: String,
    started_unix_s: u64,
    host_cpus: usize,
    io_servers: usize,
    procs: u32,
    grid: String,
    matrix_side: u64,
    matrix_bytes: u64,
    repeat: u32,
    repeat_summary: &'static str,
    weft_path: String,
    stripe_size_bytes: u64,
    stripe_count: usize,
    client_processes: &'static str,
    runs: Vec<Run>,
    summary: Vec<Summary>,
    goals: Vec<Goal>,
    notes: Vec<&'static str>,
}

const NOTE_CACHE: &str = "no sync: writes and reads go to and from the io servers' page cache, \
as the paper's buffer-cache columns did; both sides of every ratio are measured alike";

/// Runs the benchmark: prints the table on stdout, progress on stderr, JSON to --json, the
/// plot next to it.
pub fn run(args: &NoncontigArgs) -> Result<()> {
    let procs = args.procs;
    ensure!(
        (1..=PROCS_MAX).contains(&procs),
        "--procs must be 1 to {PROCS_MAX}"
    );
    let grid = grid_side(procs).context("--procs must be a square (1, 4, 9, 16, ...)")?;
    ensure!(
        (1..=MATRIX_MIB_MAX).contains(&args.matrix_mib),
        "--matrix-mib must be 1 to {MATRIX_MIB_MAX}"
    );
    ensure!(
        (1..=REPEAT_MAX).contains(&args.repeat),
        "--repeat must be 1 to {REPEAT_MAX}"
    );
    ensure!(
        !args.k.is_empty() && args.k.iter().all(|&k| k >= 1),
        "--k needs block sizes of at least 1"
    );
    let side = ((args.matrix_mib * MIB) as f64).sqrt() as u64;
    let total = side * side;

    let client = cluster::connect()?;
    let create = CreateOptions {
        layout: LayoutRequest {
            cache: None,
            stripe_size_bytes: args.stripe_size,
            stripe_count: args.stripe_count,
            first_server: None,
            redundancy: None,
        },
        ..Default::default()
    };
    let (weft_file, layout) = cluster::WeftFile::recreate(&client, &args.path, &create, false)?;
    eprintln!(
        "noncontig: {procs} processes on a {grid} x {grid} grid, {side} x {side} matrix ({} MiB), weft {} \
         (stripe {} KiB x {})",
        total / MIB,
        args.path,
        layout.stripe_size_bytes / 1024,
        layout.servers.len()
    );
    let mut workers = Workers::spawn("noncontig-worker", procs, |rank| -> Vec<OsString> {
        vec![
            "--rank".into(),
            rank.to_string().into(),
            "--procs".into(),
            procs.to_string().into(),
            "--side".into(),
            side.to_string().into(),
            "--path".into(),
            args.path.clone().into(),
        ]
    })?;

    let mut accesses = vec![Access::Contiguous];
    accesses.extend(args.k.iter().map(|&k| Access::Cyclic(k)));
    let mut runs = Vec::new();
    // Alternating, the order rotating, keeps any configuration from always running on a
    // warmer (or more fragmented) machine.
    alternated(&accesses, args.repeat, |run, &access| {
        let r = one_run(&client, &mut workers, args, &create, access, run, total)?;
        eprintln!(
            "noncontig: run {}/{} {:<12} write {:>8.1} MiB/s  read {:>8.1} MiB/s",
            run + 1,
            args.repeat,
            access.label(),
            r.bandwidth(true),
            r.bandwidth(false)
        );
        runs.push(r);
        Ok(())
    })?;
    workers.finish()?;
    drop(weft_file);

    let mut summary: Vec<Summary> = accesses
        .iter()
        .map(|&access| {
            let mine: Vec<&Run> = runs.iter().filter(|r| r.access == access).collect();
            let writes: Vec<f64> = mine.iter().map(|r| r.bandwidth(true)).collect();
            let reads: Vec<f64> = mine.iter().map(|r| r.bandwidth(false)).collect();
            let cpu = |write: bool| {
                let mut v: Vec<f64> = mine.iter().map(|r| r.cpu_s_per_gib(write)).collect();
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let (write, read) = (Spread::of(&writes), Spread::of(&reads));
            Summary {
                access,
                pieces_per_process: mine[0].pieces.iter().max().copied().unwrap_or(0),
                write_mib_per_s: write.median,
                read_mib_per_s: read.median,
                write_mib_per_s_spread: write,
                read_mib_per_s_spread: read,
                write_vs_contiguous: 0.0,
                read_vs_contiguous: 0.0,
                write_cpu_s_per_gib: cpu(true),
                read_cpu_s_per_gib: cpu(false),
                per_run_write_mib_per_s: writes,
                per_run_read_mib_per_s: reads,
            }
        })
        .collect();
    let (contiguous_write, contiguous_read) = (summary[0].write_mib_per_s, summary[0].read_mib_per_s);
    for s in &mut summary {
        s.write_vs_contiguous = s.write_mib_per_s / contiguous_write;
        s.read_vs_contiguous = s.read_mib_per_s / contiguous_read;
    }
    let mut goals = Vec::new();
    for s in &summary {
        let Access::Cyclic(k) = s.access else { continue };
        let ratio_min = match k {
            32.. => 0.5,
            8 => 0.2,
            _ => continue,
        };
        for (phase, ratio) in [("write", s.write_vs_contiguous), ("read", s.read_vs_contiguous)] {
            goals.push(Goal::new(
                format!("CYCLIC({k}) {phase}"),
                "contiguous access on Weft",
                ratio_min,
                ratio,
            ));
        }
    }

    let mut table = Table::new(&[
        "access",
        "pieces/proc",
        "write MiB/s median (min-max)",
        "read MiB/s median (min-max)",
        "write/contig",
        "read/contig",
        "target",
        "cpu s/GiB w",
        "cpu s/GiB r",
    ]);
    for s in &summary {
        let target = goals
            .iter()
            .filter(|g| g.what.starts_with(&format!("{} ", s.access.label())))
            .map(|g| g.ratio_min)
            .next();
        let met = goals
            .iter()
            .filter(|g| g.what.starts_with(&format!("{} ", s.access.label())))
            .all(|g| g.met);
        table.row(vec![
            s.access.label(),
            s.pieces_per_process.to_string(),
            s.write_mib_per_s_spread.cell(1),
            s.read_mib_per_s_spread.cell(1),
            format!("{:.2}", s.write_vs_contiguous),
            format!("{:.2}", s.read_vs_contiguous),
            match target {
                Some(t) => format!(">= {t} {}", if met { "met" } else { "MISSED" }),
                None => "-".into(),
            },
            format!("{:.2}", s.write_cpu_s_per_gib),
            format!("{:.2}", s.read_cpu_s_per_gib),
        ]);
    }
    println!(
        "noncontig: {procs} processes ({grid} x {grid}), {side} x {side} bytes, {} io servers, stripe {} KiB, \
         {} alternated runs (ratios of medians)",
        layout.servers.len(),
        layout.stripe_size_bytes / 1024,
        args.repeat
    );
    print!("{}", table.render());

    let results = Results {
        benchmark: "noncontig",
        command_line: command_line(),
        started_unix_s: unix_now_s(),
        host_cpus: host_cpus(),
        io_servers: client.cluster_info().io_servers.len(),
        procs,
        grid: format!("{grid}x{grid}"),
        matrix_side: side,
        matrix_bytes: total,
        repeat: args.repeat,
        repeat_summary: crate::report::REPEAT_SUMMARY,
        weft_path: args.path.clone(),
        stripe_size_bytes: layout.stripe_size_bytes,
        stripe_count: layout.servers.len(),
        client_processes: "separate processes (re-executions of this binary), one Weft client each",
        runs,
        summary,
        goals,
        notes: vec![NOTE_CACHE],
    };
    let figure = figure(
        &format!("weft bench noncontig: {procs} processes, {side} x {side} bytes"),
        &results.summary,
    );
    write_results(&args.json, &svg_next_to(&args.json), &results, &figure)?;
    Ok(())
}

/// Write and read MiB/s against k for the CYCLIC(k) x CYCLIC(k) view, the contiguous
/// access (the baseline) as a flat line over the same k.
fn figure(title: &str, summary: &[Summary]) -> Figure {
    let ks = || {
        summary.iter().filter_map(|s| match s.access {
            Access::Cyclic(k) => Some(k as f64),
            Access::Contiguous => None,
        })
    };
    let (lo, hi) = (ks().fold(f64::INFINITY, f64::min), ks().fold(0f64, f64::max));
    let mut figure = Figure::new(title);
    for (phase, rate) in [
        ("write", (|s: &Summary| s.write_mib_per_s) as fn(&Summary) -> f64),
        ("read", |s: &Summary| s.read_mib_per_s),
    ] {
        let mut panel = Panel::lines(
            format!("{phase} (MiB/s)"),
            "CYCLIC(k) block size k (bytes)",
            "MiB/s",
            XAxis::Log2,
        );
        for s in summary {
            match s.access {
                Access::Cyclic(k) => panel.point("CYCLIC(k) view", k as f64, rate(s)),
                Access::Contiguous if lo <= hi => {
                    panel.point("contiguous (baseline)", lo, rate(s));
                    if hi > lo {
                        panel.point("contiguous (baseline)", hi, rate(s));
                    }
                }
                Access::Contiguous => {}
            }
        }
        figure.panels.push(panel);
    }
    figure
}

fn one_run(
    client: &Client,
    workers: &mut Workers,
    args: &NoncontigArgs,
    create: &CreateOptions,
    access: Access,
    run: u32,
    total: u64,
) -> Result<Run> {
    // A fresh file for every configuration: no run writes over another's blocks.
    client.create(&args.path, create)?;
    let (opened, _) = workers.step(&format!("open {} {run}", access.word()))?;
    let mut bytes = Vec::new();
    let mut pieces = Vec::new();
    for answer in &opened {
        let mut fields = answer.split_whitespace().map(str::parse::<u64>);
        match (fields.next(), fields.next()) {
            (Some(Ok(b)), Some(Ok(p))) => {
                bytes.push(b);
                pieces.push(p);
            }
            _ => bail!("bad answer to open: {answer:?}"),
        }
    }
    ensure!(
        bytes.iter().sum::<u64>() == total,
        "the processes' shares cover {} bytes, not the matrix's {total}",
        bytes.iter().sum::<u64>()
    );
    // Each answer is "<wall ns> <cpu ns>".
    let times = |answers: Vec<String>| -> Result<(Vec<u64>, u64)> {
        let mut wall = Vec::new();
        let mut cpu = 0;
        for a in &answers {
            let mut fields = a.split_whitespace().map(str::parse::<u64>);
            match (fields.next(), fields.next()) {
                (Some(Ok(w)), Some(Ok(c))) => {
                    wall.push(w);
                    cpu += c;
                }
                _ => bail!("bad timing {a:?}"),
            }
        }
        Ok((wall, cpu))
    };
    let servers = local_server_pids();
    let server_cpu = processes_cpu_ns(&servers);
    let (write_ns, write_client_cpu_ns) = times(workers.step("write")?.0)?;
    let write_server_cpu_ns = processes_cpu_ns(&servers) - server_cpu;
    let bytes_verified = if args.no_verify {
        0
    } else {
        verify(client, &args.path, seed_of(access, run), total)?
    };
    let server_cpu = processes_cpu_ns(&servers);
    let (read_ns, read_client_cpu_ns) = times(workers.step("read")?.0)?;
    let read_server_cpu_ns = processes_cpu_ns(&servers) - server_cpu;
    workers.step("close")?;
    Ok(Run {
        access,
        run,
        bytes,
        pieces,
        write_ns,
        read_ns,
        write_client_cpu_ns,
        write_server_cpu_ns,
        read_client_cpu_ns,
        read_server_cpu_ns,
        bytes_verified,
    })
}

/// Reads the whole file contiguously and checks every byte against the pattern.
fn verify(client: &Client, path: &str, seed: u64, total: u64) -> Result<u64> {
    let file = client.open(path, &OpenOptions::default())?;
    const STEP: u64 = 64 << 20;
    let mut got = vec![0u8; STEP.min(total) as usize];
    let mut expected = vec![0u8; got.len()];
    let mut offset = 0;
    while offset < total {
        let n = (total - offset).min(STEP) as usize;
        let read = file.read_at(offset, &mut got[..n])?;
        ensure!(
            read == n,
            "the file ends at {} instead of {total}",
            offset + read as u64
        );
        fill_expected(&mut expected[..n], seed, offset);
        if let Some(at) = got[..n].iter().zip(&expected[..n]).position(|(a, b)| a != b) {
            let at = offset + at as u64;
            bail!(
                "file byte {at} is {:#04x}, expected {:#04x}: a process's bytes did not land where its view says",
                got[(at - offset) as usize],
                expected_byte(seed, at)
            );
        }
        offset += n as u64;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_views_of_all_ranks_partition_the_matrix() {
        let (procs, side, k) = (4u32, 100u64, 8u64);
        let mut owner = vec![u32::MAX; (side * side) as usize];
        for rank in 0..procs {
            let view = cyclic_view(procs, rank, side, k).unwrap();
            for piece in view.pieces(0, view.filetype().size_bytes()).unwrap() {
                for x in piece.file_offset..piece.file_offset + piece.len {
                    assert_eq!(owner[x as usize], u32::MAX, "byte {x} owned twice");
                    owner[x as usize] = rank;
                }
            }
        }
        for (x, &rank) in owner.iter().enumerate() {
            let (i, j) = (x as u64 / side, x as u64 % side);
            assert_eq!(rank as u64, (i / k % 2) * 2 + j / k % 2, "byte {x}");
        }
        let covered: u64 = (0..procs)
            .map(|r| contiguous_range(procs, r, side * side).1)
            .sum();
        assert_eq!(covered, side * side);
    }

    #[test]
    fn the_pattern_is_the_same_word_wise_and_byte_wise() {
        let mut buf = vec![0u8; 37];
        fill_expected(&mut buf, 99, 13);
        for (k, b) in buf.iter().enumerate() {
            assert_eq!(*b, expected_byte(99, 13 + k as u64));
        }
        assert_eq!(
            Access::parse(&Access::Cyclic(64).word()).unwrap(),
            Access::Cyclic(64)
        );
        assert_eq!(Access::parse("contiguous").unwrap(), Access::Contiguous);
        assert_eq!(grid_side(16), Some(4));
        assert_eq!(grid_side(8), None);
    }
}
