//! `weft bench redundancy`: what a replicated layout costs and what it survives. On a
//! cluster of its own, P processes (`weft bench concurrent`'s workers) write (then
//! sync) and read back disjoint blocks of one plain file and of one `replicas=2` file
//! of the same size, alternated run by run; then one io server holding a copy is killed
//! (SIGKILL), the replicated file is read and rewritten without it (degraded), the
//! server is started again, its stale pieces are rebuilt (timed), and the server
//! holding the other copy of the same stripes is killed in turn, so that the last read
//! can only be served by the rebuilt copies. Every read checks every byte.

use crate::clusterfile::Cluster;
use crate::concurrent::{worker_numbers, PROCS_MAX};
use crate::procs::Workers;
use crate::report::{
    check_range, command_line, host_cpus, mib_per_s, summarise, summary_text, svg_next_to, unix_now_s,
    write_results, Goal, Spread, MIB, REPEAT_SUMMARY,
};
use anyhow::{ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Instant;
use weft_client::{Client, CreateOptions, LayoutRequest, RebuildOptions, Redundancy};

pub const LONG_ABOUT: &str = "What a replicated layout costs and what it survives, on a cluster this \
command starts (and removes). P client processes (separate processes) each write one block of B MiB \
into disjoint regions of one shared file, sync, and read it back, every byte checked; once on a plain \
file and once on a replicas=2 file of the same stripe size and servers' count, alternated run by run \
(--repeat), after one unmeasured round of each. Then, on the replicated file: one io server holding a copy is killed (SIGKILL) and the file \
is read (degraded read: the other copies serve) and rewritten with new bytes (degraded write: the dead \
server's pieces are marked stale); the server is started again and `weft rebuild` copies its stale \
pieces back, unpaced (timed; the cluster runs with --auto-rebuild off); then the server holding the other copy of those stripes is killed in turn and \
the file read once more, so that the rebuilt copies alone serve it, every byte checked.\n\nTargets \
(issue 33): replicas=2 write+sync >= 0.45x plain, reads of a healthy replicated file >= 0.95x plain. \
Prints a table, writes every timing to --json and a plot next to it (.svg). Example:\n  weft bench \
redundancy --procs 4 --block-mib 64";

/// Largest block per process (each worker holds two blocks in memory).
pub const BLOCK_MIB_MAX: u64 = 4 << 10;
pub const REPEAT_MAX: u32 = 50;
/// More io servers than this is a typo on one machine.
pub const IO_SERVERS_MAX: u32 = 16;

#[derive(Args, Debug, Clone)]
pub struct RedundancyArgs {
    /// Client processes.
    #[arg(long, default_value_t = 4, value_name = "P")]
    pub procs: u32,
    /// MiB each process writes and reads.
    #[arg(long, default_value_t = 64, value_name = "B")]
    pub block_mib: u64,
    /// Runs of each layout (alternated), and of each degraded phase; the median counts.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub repeat: u32,
    /// Io servers of the cluster started (at least 2: each stripe's two copies are on
    /// distinct servers).
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub io_servers: u32,
    /// Stripe size of both files (K, M, G suffixes).
    #[arg(long, default_value = "64K", value_name = "BYTES", value_parser = crate::parse_size_arg)]
    pub stripe_size: u64,
    /// Where to write the JSON results (the directory is created); the SVG plot goes
    /// next to it (.svg for .json).
    #[arg(long, default_value = "bench-results/redundancy.json", value_name = "FILE")]
    pub json: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
enum Kind {
    #[serde(rename = "plain")]
    Plain,
    #[serde(rename = "replicas=2")]
    Replicas2,
    /// The replicated file with one server of a copy dead.
    #[serde(rename = "replicas=2, one server down")]
    Degraded,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Replicas2 => "replicas=2",
            Kind::Degraded => "replicas=2, one server down",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
enum Phase {
    #[serde(rename = "write+sync")]
    WriteSync,
    #[serde(rename = "read")]
    Read,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::WriteSync => "write+sync",
            Phase::Read => "read",
        }
    }
}

/// One measured phase: every process's time.
#[derive(Debug, Serialize)]
struct Run {
    kind: Kind,
    phase: Phase,
    run: u32,
    /// Per process (by rank): its write and sync, or its read.
    ns: Vec<u64>,
    /// Bytes the processes compared with what they wrote (reads).
    bytes_verified: u64,
}

impl Run {
    fn mib_per_s(&self, total: u64) -> f64 {
        mib_per_s(total, self.ns.iter().copied().max().unwrap_or(0))
    }
}

#[derive(Debug, Serialize)]
struct Summary {
    kind: Kind,
    phase: Phase,
    mib_per_s: f64,
    mib_per_s_spread: Spread,
    /// Over the plain file's (healthy rows) or the healthy replicated file's (degraded
    /// rows) median in the same phase.
    ratio: f64,
    per_run_mib_per_s: Vec<f64>,
}

#[derive(Debug, Serialize)]
struct Rebuild {
    /// The server killed, whose pieces were rebuilt.
    server: u32,
    pieces: u64,
    bytes: u64,
    seconds: f64,
    mib_per_s: f64,
    /// The server of the other copy, killed for the last read.
    other_copy_server: u32,
    /// Bytes that last read checked, served by the rebuilt copies where the killed
    /// server's were.
    bytes_verified_after: u64,
}

#[derive(Debug, Serialize)]
struct Results {
    benchmark: &'static str,
    command_line: String,
    started_unix_s: u64,
    host_cpus: usize,
    io_servers: u32,
    procs: u32,
    block_bytes: u64,
    total_bytes: u64,
    repeat: u32,
    repeat_summary: &'static str,
    stripe_size_bytes: u64,
    plain_servers: usize,
    replicated_slots: usize,
    runs: Vec<Run>,
    summary: Vec<Summary>,
    rebuild: Rebuild,
    goals: Vec<Goal>,
    notes: Vec<&'static str>,
}

const DIR: &str = "/bench-redundancy";
const PLAIN: &str = "/bench-redundancy/plain.dat";
const REPLICATED: &str = "/bench-redundancy/replicas2.dat";

const NOTE_CACHE: &str = "reads are likely served from the io servers' page cache (one machine, no \
caches dropped), alike for every layout; writes include the sync, so every copy reached its server's disk";

const NOTE_ONE_MACHINE: &str = "on one machine every copy shares the same disk and cores: a replicated \
write moves twice the bytes through them, where on a cluster the copies go to different machines' links \
and disks in parallel";

/// Write (+sync) then read targets, of the replicated file over the plain one.
const WRITE_TARGET: f64 = 0.45;
const READ_TARGET: f64 = 0.95;

/// Runs the benchmark: prints the table, writes the JSON and its plot.
pub fn run(args: &RedundancyArgs) -> Result<()> {
    check_range("--procs", args.procs, 1..=PROCS_MAX)?;
    check_range("--block-mib", args.block_mib, 1..=BLOCK_MIB_MAX)?;
    check_range("--repeat", args.repeat, 1..=REPEAT_MAX)?;
    ensure!(
        (2..=IO_SERVERS_MAX).contains(&args.io_servers),
        "--io-servers must be 2 to {IO_SERVERS_MAX} (two copies need two servers)"
    );
    let block_bytes = args.block_mib * MIB;
    let total = block_bytes * u64::from(args.procs);
    let weft = std::env::current_exe().context("finding the running executable")?;
    let home = tempfile::Builder::new()
        .prefix("weft-bench-redundancy-")
        .tempdir()?;
    // The rebuild is this benchmark's to time: the manager's own rebuilder (paced) is off.
    let up_args = vec![
        "--io".to_owned(),
        args.io_servers.to_string(),
        "--stripe-size".into(),
        args.stripe_size.to_string(),
        "--auto-rebuild".into(),
        "off".into(),
    ];
    eprintln!("redundancy: starting a cluster of {} io servers", args.io_servers);
    let cluster = Cluster::start_with(&weft, home, up_args)?;
    let client =
        crate::capcompare::connect(cluster.home()).context("connecting to the benchmark's cluster")?;
    client.mkdir(DIR, 0o755)?;
    let create = |redundancy| CreateOptions {
        layout: LayoutRequest {
            stripe_size_bytes: Some(args.stripe_size),
            redundancy,
            ..Default::default()
        },
        exclusive: true,
        ..Default::default()
    };
    let plain = crate::cluster::recreate(&client, PLAIN, &create(None))?;
    let replicated = crate::cluster::recreate(&client, REPLICATED, &create(Some(Redundancy::Replicas(2))))?;
    ensure!(
        replicated.replica_count() == 2,
        "the replicated file has {} copies of each stripe, not 2",
        replicated.replica_count()
    );
    eprintln!(
        "redundancy: {} processes x {} MiB; plain over {} servers, replicas=2 over {} slots x 2 copies",
        args.procs,
        args.block_mib,
        plain.servers.len(),
        replicated.width()
    );
    let workers = Workers::spawn_in("concurrent-worker", args.procs, Some(cluster.home()), |rank| {
        vec![
            OsString::from("--rank"),
            rank.to_string().into(),
            "--block-bytes".into(),
            block_bytes.to_string().into(),
            "--path".into(),
            PLAIN.into(),
            // Required by the worker, never opened here.
            "--local-path".into(),
            "/nonexistent/weft-bench-redundancy".into(),
            "--sync".into(),
        ]
    })?;
    let mut bench = Bench {
        client: &client,
        workers,
        total,
        runs: Vec::new(),
    };

    // One unmeasured round of each first: connections, the servers' threads, the
    // object files' first allocation (slower by several times on a VM, for both).
    for (kind, path) in [(Kind::Plain, PLAIN), (Kind::Replicas2, REPLICATED)] {
        bench.write(kind, path, u32::MAX)?;
        bench.read(kind, path, u32::MAX)?;
    }
    bench.runs.clear();
    eprintln!("redundancy: one unmeasured round of each layout done");

    // Healthy: both layouts, alternated.
    crate::report::alternated(&[Kind::Plain, Kind::Replicas2], args.repeat, |run, &kind| {
        let path = if kind == Kind::Plain { PLAIN } else { REPLICATED };
        bench.write(kind, path, run)?;
        bench.read(kind, path, run)?;
        Ok(())
    })?;

    // Degraded: the primary of the replicated file's first slot killed.
    let victim = replicated.servers[0];
    let other = replicated.replica_server(1, 0);
    eprintln!(
        "redundancy: killing io server {} (a copy of the replicated file)",
        victim.0
    );
    cluster.kill_server(victim.0)?;
    for run in 0..args.repeat {
        bench.read(Kind::Degraded, REPLICATED, run)?;
    }
    for run in 0..args.repeat {
        // New bytes (another run number), so that a rebuild that copied nothing would
        // leave the old ones on the killed server's copy, and the last read fail.
        bench.write(Kind::Degraded, REPLICATED, 1000 + run)?;
    }
    let layout = stat_layout(&client, REPLICATED)?;
    ensure!(
        layout.is_stale(victim),
        "after writes with io server {} dead, its copy of the replicated file is not marked stale",
        victim.0
    );

    eprintln!(
        "redundancy: starting io server {} again; rebuilding its pieces",
        victim.0
    );
    cluster.start_stopped()?;
    let started = Instant::now();
    let options = RebuildOptions {
        rate_bytes_per_sec: None,
        server: Some(victim),
        missing: false,
    };
    let done = client.rebuild_path(REPLICATED, &options, &mut |_| {})?;
    let seconds = started.elapsed().as_secs_f64();
    ensure!(
        done.failed.is_empty(),
        "the rebuild left pieces stale: {}",
        done.failed.join("; ")
    );
    ensure!(
        !stat_layout(&client, REPLICATED)?.is_stale(victim),
        "after the rebuild io server {}'s copy is still marked stale",
        victim.0
    );
    eprintln!(
        "redundancy: rebuilt {} pieces, {} MiB in {seconds:.2} s; killing io server {} (the other copy)",
        done.pieces,
        done.bytes / MIB,
        other.0
    );
    cluster.kill_server(other.0)?;
    let after = bench.read(Kind::Degraded, REPLICATED, u32::MAX)?;
    let bytes_verified_after = after.bytes_verified;
    let Bench { workers, runs, .. } = bench;
    workers.finish()?;

    let per_run = |kind: Kind, phase: Phase| -> Vec<f64> {
        runs.iter()
            .filter(|r| r.kind == kind && r.phase == phase && r.run != u32::MAX)
            .map(|r| r.mib_per_s(total))
            .collect()
    };
    let phases = [Phase::WriteSync, Phase::Read];
    let mut summary: Vec<Summary> = summarise(&[Kind::Plain, Kind::Replicas2], &phases, Kind::Plain, per_run)
        .into_iter()
        .chain(
            summarise(
                &[Kind::Replicas2, Kind::Degraded],
                &phases,
                Kind::Replicas2,
                per_run,
            )
            .into_iter()
            .filter(|s| s.method == Kind::Degraded),
        )
        .map(|s| Summary {
            kind: s.method,
            phase: s.phase,
            mib_per_s: s.mib_per_s,
            mib_per_s_spread: s.spread,
            ratio: s.ratio,
            per_run_mib_per_s: s.per_run_mib_per_s,
        })
        .collect();
    summary.sort_by_key(|s| (s.phase as u8, s.kind as u8));
    let ratio = |kind, phase| {
        summary
            .iter()
            .find(|s| s.kind == kind && s.phase == phase)
            .map_or(0.0, |s| s.ratio)
    };
    let goals = vec![
        Goal::new(
            "replicas=2 write+sync",
            "plain",
            WRITE_TARGET,
            ratio(Kind::Replicas2, Phase::WriteSync),
        ),
        Goal::new(
            "replicas=2 read",
            "plain",
            READ_TARGET,
            ratio(Kind::Replicas2, Phase::Read),
        ),
    ];
    let results = Results {
        benchmark: "redundancy",
        command_line: command_line(),
        started_unix_s: unix_now_s(),
        host_cpus: host_cpus(),
        io_servers: args.io_servers,
        procs: args.procs,
        block_bytes,
        total_bytes: total,
        repeat: args.repeat,
        repeat_summary: REPEAT_SUMMARY,
        stripe_size_bytes: args.stripe_size,
        plain_servers: plain.servers.len(),
        replicated_slots: replicated.width(),
        runs,
        summary,
        rebuild: Rebuild {
            server: victim.0,
            pieces: done.pieces,
            bytes: done.bytes,
            seconds,
            mib_per_s: done.bytes as f64 / MIB as f64 / seconds.max(1e-9),
            other_copy_server: other.0,
            bytes_verified_after,
        },
        goals,
        notes: vec![NOTE_CACHE, NOTE_ONE_MACHINE],
    };
    print!("{}", render(&results));
    let mut figure = crate::report::phase_bars(
        &format!(
            "weft bench redundancy: {} processes, {} MiB, plain against replicas=2",
            args.procs,
            total / MIB
        ),
        results
            .summary
            .iter()
            .map(|s| (s.kind.name(), s.phase.name(), s.mib_per_s)),
    );
    figure.panels[0].bar("replicas=2, rebuild", "rebuild", results.rebuild.mib_per_s);
    write_results(&args.json, &svg_next_to(&args.json), &results, &figure)?;
    // The client before its cluster's servers stop.
    drop(client);
    drop(cluster);
    Ok(())
}

/// A file's layout as the manager has it now (stale marks included).
fn stat_layout(client: &Client, path: &str) -> Result<weft_client::Layout> {
    client
        .stat(path)?
        .layout
        .with_context(|| format!("{path} has no layout"))
}

/// The workers and the runs measured so far.
struct Bench<'a> {
    client: &'a Client,
    workers: Workers,
    total: u64,
    runs: Vec<Run>,
}

impl Bench<'_> {
    /// Every process writes its block of `path` (emptied first) with the bytes of
    /// `run`, and syncs; checks the size.
    fn write(&mut self, kind: Kind, path: &str, run: u32) -> Result<()> {
        self.client.open(
            path,
            &weft_client::OpenOptions {
                write: true,
                truncate: true,
                ..Default::default()
            },
        )?;
        self.workers.step(&format!("open-write weft {run} {path}"))?;
        let (written, _) = self.workers.step("write")?;
        self.workers.step("close")?;
        let size = self.client.stat(path)?.size;
        ensure!(
            size == self.total,
            "{path} holds {size} bytes after the write phase, expected {}",
            self.total
        );
        let ns = worker_numbers(&written)?.iter().map(|(w, s)| w + s).collect();
        self.record(Run {
            kind,
            phase: Phase::WriteSync,
            run,
            ns,
            bytes_verified: 0,
        });
        Ok(())
    }

    /// Every process reads its block of `path` back and checks it against what it
    /// wrote last.
    fn read(&mut self, kind: Kind, path: &str, run: u32) -> Result<&Run> {
        self.workers.step(&format!("open-read weft {path}"))?;
        let (read, _) = self.workers.step("read")?;
        self.workers.step("close")?;
        let read = worker_numbers(&read)?;
        let bytes_verified: u64 = read.iter().map(|r| r.1).sum();
        ensure!(
            bytes_verified == self.total,
            "{path}: processes verified {bytes_verified} bytes, expected {}",
            self.total
        );
        self.record(Run {
            kind,
            phase: Phase::Read,
            run,
            ns: read.iter().map(|r| r.0).collect(),
            bytes_verified,
        });
        Ok(self.runs.last().expect("just pushed"))
    }

    fn record(&mut self, run: Run) {
        if run.run != u32::MAX {
            eprintln!(
                "redundancy: {:<28} {:<10} run {:<4} {:>8.1} MiB/s",
                run.kind.name(),
                run.phase.name(),
                run.run % 1000 + 1,
                run.mib_per_s(self.total)
            );
        }
        self.runs.push(run);
    }
}

fn render(r: &Results) -> String {
    let mut out = format!(
        "\nRedundancy: {} processes x {} MiB = {} MiB in one shared file, write+sync and read, every byte \
         checked\nplain: striped {} KiB over {} io servers; replicas=2: {} slots x 2 copies; {} io servers\n\
         {} run(s) of each; {}\n\n",
        r.procs,
        r.block_bytes / MIB,
        r.total_bytes / MIB,
        r.stripe_size_bytes / 1024,
        r.plain_servers,
        r.replicated_slots,
        r.io_servers,
        r.repeat,
        r.repeat_summary,
    );
    let rows = r.summary.iter().map(|s| {
        (
            s.kind.name(),
            s.phase.name(),
            s.mib_per_s_spread,
            s.ratio,
            &s.per_run_mib_per_s[..],
        )
    });
    out.push_str(&summary_text(
        "plain (degraded rows: vs replicas=2 healthy)",
        rows,
        &r.goals,
        &r.notes,
    ));
    let b = &r.rebuild;
    out.push_str(&format!(
        "rebuild: io server {} killed during the degraded phases, started again: {} pieces, {} MiB copied \
         in {:.2} s ({:.1} MiB/s); then io server {} (the other copy) killed: {} MiB read back right from \
         the rebuilt copies\n",
        b.server,
        b.pieces,
        b.bytes / MIB,
        b.seconds,
        b.mib_per_s,
        b.other_copy_server,
        b.bytes_verified_after / MIB
    ));
    out
}
