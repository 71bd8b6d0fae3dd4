//! `weft bench concurrent --compare-capabilities`: what capabilities cost on the data
//! path, measured in one run. Two clusters run side by side on this machine, one as
//! `weft up` makes it (authenticated connections and capabilities) and one started
//! with `--insecure-no-capabilities`; the same P worker processes' workload (first
//! write into an emptied file, read back, rewrite in place, read back, every read
//! verified) runs on each in turn, phase by phase (each phase on one cluster, then at
//! once on the other), the order alternating from pair to pair, so that both sides of
//! a phase share the machine's state of the moment. Each phase is reported as the
//! median of the per-pair ratios (on / off) with its spread.
//!
//! Before measuring, both clusters are shown to differ: an io server of the first
//! refuses a read presented without a capability, one of the second serves it. Both
//! authenticate every connection (Weft has no switch to turn that off).

use crate::clusterfile::Cluster;
use crate::concurrent::ConcurrentArgs;
use crate::plot::{Figure, Panel, XAxis};
use crate::procs::Workers;
use crate::report::{
    command_line, host_cpus, mib_per_s, svg_next_to, target_lines, unix_now_s, write_results, Goal, Table,
    MIB,
};
use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use std::ffi::OsString;
use std::path::Path;
use std::process::Command;
use weft_client::{Client, ClientAuth, ClusterKey, CreateOptions, OpenOptions};
use weft_proto::msg::Request;
use weft_proto::{ErrorCode, Range, Striping};
use weft_rpc::RpcError;

/// Most pairs of one comparison.
pub const PAIRS_MAX: u32 = 200;
/// Most io servers of each cluster it starts.
pub const IO_SERVERS_MAX: u32 = 16;
/// What the data path must keep with capabilities on (issue 12).
pub const TARGET: f64 = 0.97;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Mode {
    On,
    Off,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::On => "capabilities on",
            Mode::Off => "capabilities off",
        }
    }
}

/// The phases of one cycle, in the order they run.
const PHASES: [&str; 4] = ["write", "read", "rewrite", "reread"];

/// One cluster of the comparison and what it was shown to be.
#[derive(Debug, Serialize)]
struct ClusterReport {
    mode: Mode,
    home: String,
    up_args: Vec<String>,
    /// `weft status`'s security, identity and capabilities lines.
    status: Vec<String>,
    /// An io server's answer to a read presented without a capability.
    capability_less_read: String,
    capability_less_read_refused: bool,
    /// Per io server, how the benchmark's clients reach it ("shm", "unix", "tcp").
    transports: Vec<String>,
}

struct Side {
    mode: Mode,
    /// Stops the servers when dropped (after the workers and the client).
    cluster: Cluster,
    client: Client,
    /// None between cycles with --fresh-workers.
    workers: Option<Workers>,
    report: ClusterReport,
}

/// How the worker processes are started.
struct WorkerSpec {
    procs: u32,
    block_bytes: u64,
    path: String,
    /// Required by the worker, never touched here.
    unused_local: std::path::PathBuf,
    /// New processes for every cycle (--fresh-workers).
    fresh: bool,
}

impl WorkerSpec {
    fn spawn(&self, home: &Path) -> Result<Workers> {
        Workers::spawn_in("concurrent-worker", self.procs, Some(home), |rank| {
            vec![
                OsString::from("--rank"),
                rank.to_string().into(),
                "--block-bytes".into(),
                self.block_bytes.to_string().into(),
                "--path".into(),
                self.path.clone().into(),
                "--local-path".into(),
                self.unused_local.clone().into(),
            ]
        })
    }
}

/// One side's cycle: per phase, MiB/s and every process's time.
#[derive(Debug, Serialize)]
struct Cycle {
    mode: Mode,
    mib_per_s: Vec<f64>,
    ns: Vec<Vec<u64>>,
    bytes_verified: u64,
}

#[derive(Debug, Serialize)]
struct Pair {
    pair: u32,
    order: [Mode; 2],
    on: Cycle,
    off: Cycle,
    /// Per phase, on / off.
    ratios: Vec<f64>,
}

#[derive(Debug, Serialize)]
struct PhaseSummary {
    phase: &'static str,
    on_median_mib_per_s: f64,
    off_median_mib_per_s: f64,
    /// The median of the per-pair ratios (on / off): the figure reported.
    ratio_median: f64,
    ratio_q1: f64,
    ratio_q3: f64,
    ratio_min: f64,
    ratio_max: f64,
    per_pair_ratios: Vec<f64>,
}

#[derive(Debug, Serialize)]
struct Results {
    benchmark: &'static str,
    command_line: String,
    started_unix_s: u64,
    host_cpus: usize,
    procs: u32,
    block_bytes: u64,
    total_bytes: u64,
    pairs: u32,
    io_servers: u32,
    /// --control-both-off: both clusters run without capabilities; "on" is only the
    /// first cluster's place, and the ratios show the setup's own bias.
    control_both_off: bool,
    /// New worker processes every cycle (--fresh-workers): each cycle's first write
    /// and first read include the capability grants and presents.
    fresh_workers: bool,
    stripe_size_bytes: u64,
    stripe_count: usize,
    /// WEFT_TRANSPORT as set for this run ("auto" when unset).
    transport_asked: String,
    authentication: &'static str,
    clusters: Vec<ClusterReport>,
    /// An unmeasured cycle on each side first (connections, object files).
    warmup: Vec<Cycle>,
    rounds: Vec<Pair>,
    summary: Vec<PhaseSummary>,
    goals: Vec<Goal>,
    notes: Vec<&'static str>,
}

const AUTHENTICATION: &str = "on in both clusters: every connection proves the cluster key both ways; \
weft has no switch to turn that off, so only capabilities differ";

/// Runs the comparison (see the module doc): prints the table, writes the JSON and its
/// plot.
pub fn run(args: &ConcurrentArgs) -> Result<()> {
    let [procs] = args.procs[..] else {
        bail!("--compare-capabilities takes one process count (--procs P)");
    };
    ensure!(
        (1..=crate::concurrent::PROCS_MAX).contains(&procs),
        "--procs must be 1 to {}",
        crate::concurrent::PROCS_MAX
    );
    ensure!(
        (1..=PAIRS_MAX).contains(&args.pairs),
        "--pairs must be 1 to {PAIRS_MAX}"
    );
    ensure!(
        (1..=IO_SERVERS_MAX).contains(&args.io_servers),
        "--io-servers must be 1 to {IO_SERVERS_MAX}"
    );
    ensure!(
        !args.sync && !args.rewrite && !args.keep && args.local_dir.is_none(),
        "--compare-capabilities always measures a first write and a rewrite without sync, on clusters \
         of its own and no local file: --sync, --rewrite, --keep and --local-dir do not apply"
    );
    let block_mib = args.block_mib.unwrap_or((1024 / u64::from(procs)).max(1));
    ensure!(
        (1..=crate::concurrent::BLOCK_MIB_MAX).contains(&block_mib),
        "--block-mib must be 1 to {}",
        crate::concurrent::BLOCK_MIB_MAX
    );
    let block_bytes = block_mib * MIB;
    let total = block_bytes * u64::from(procs);
    let weft = std::env::current_exe().context("finding the weft executable")?;
    let create = crate::cluster::striped(args.stripe_size, args.stripe_count);
    // Workers never touch their local file here; the argument is required.
    let scratch = tempfile::Builder::new().prefix("weft-bench-capcmp-").tempdir()?;
    // Removed by the tie's sweeper if this process is killed where no drop runs.
    let _scratch_tie = weft_config::tie::HomeTie::new(scratch.path())?;
    // And by the signal thread if a signal stops the benchmark (see cluster::scratch).
    let _scratch_on_signal = crate::cluster::scratch(scratch.path());
    let unused_local = scratch.path().join("unused.dat");

    let spec = WorkerSpec {
        procs,
        block_bytes,
        path: args.path.clone(),
        unused_local,
        fresh: args.fresh_workers,
    };
    let mut sides = Vec::new();
    let mut layout = None;
    for mode in [Mode::On, Mode::Off] {
        let mut up_args = vec!["--io".to_owned(), args.io_servers.to_string()];
        if mode == Mode::Off || args.control_both_off {
            up_args.push("--insecure-no-capabilities".into());
        }
        let home = tempfile::Builder::new()
            .prefix("weft-bench-capcmp-home-")
            .tempdir()?;
        let cluster = Cluster::start_with(&weft, home, up_args.clone())
            .with_context(|| format!("starting the cluster with {}", mode.name()))?;
        let client = connect(cluster.home())?;
        let (refused, answer) = capability_less_read(&client, cluster.home(), &args.path)
            .with_context(|| format!("probing the cluster with {}", mode.name()))?;
        let file_layout = crate::cluster::recreate(&client, &args.path, &create)?;
        layout.get_or_insert(file_layout);
        let workers = if spec.fresh {
            None
        } else {
            Some(spec.spawn(cluster.home())?)
        };
        let report = ClusterReport {
            mode,
            home: cluster.home().display().to_string(),
            up_args,
            status: status_lines(&weft, cluster.home()),
            capability_less_read: answer,
            capability_less_read_refused: refused,
            transports: Vec::new(),
        };
        sides.push(Side {
            mode,
            cluster,
            client,
            workers,
            report,
        });
    }
    let layout = layout.expect("two clusters");
    // The comparison means something only if the two really differ (and the control
    // only if neither checks).
    ensure!(
        if args.control_both_off {
            !sides[0].report.capability_less_read_refused && !sides[1].report.capability_less_read_refused
        } else {
            sides[0].report.capability_less_read_refused && !sides[1].report.capability_less_read_refused
        },
        "the two clusters do not differ in mode: without a capability, the one with capabilities \
         answered {:?} and the one without answered {:?}",
        sides[0].report.capability_less_read,
        sides[1].report.capability_less_read
    );
    eprintln!(
        "compare-capabilities: {procs} processes x {block_mib} MiB, {} pairs, two clusters of {} io servers \
         (stripe {} KiB x {}); regime: {}",
        args.pairs,
        args.io_servers,
        layout.stripe_size_bytes / 1024,
        layout.servers.len(),
        crate::regime::describe()
    );

    let warmup = cycles(&mut sides, [Mode::On, Mode::Off], &spec, args.pairs, total)?;
    for side in &mut sides {
        side.report.transports = side
            .client
            .io_transports()
            .into_iter()
            .map(|(id, t)| match t {
                Ok(t) => format!("io {id}: {t}"),
                Err(e) => format!("io {id}: {e}"),
            })
            .collect();
    }
    let mut rounds = Vec::new();
    for pair in 0..args.pairs {
        let order = if pair % 2 == 0 {
            [Mode::On, Mode::Off]
        } else {
            [Mode::Off, Mode::On]
        };
        let mut ran = cycles(&mut sides, order, &spec, pair, total)?;
        if order[0] == Mode::Off {
            ran.reverse();
        }
        let off = ran.pop().expect("two cycles");
        let on = ran.pop().expect("two cycles");
        let ratios: Vec<f64> = on
            .mib_per_s
            .iter()
            .zip(&off.mib_per_s)
            .map(|(a, b)| a / b)
            .collect();
        eprintln!(
            "compare-capabilities: pair {}/{} ({} first) on/off: {}",
            pair + 1,
            args.pairs,
            if order[0] == Mode::On { "on" } else { "off" },
            PHASES
                .iter()
                .zip(&ratios)
                .map(|(p, r)| format!("{p} {r:.3}"))
                .collect::<Vec<_>>()
                .join("  ")
        );
        rounds.push(Pair {
            pair,
            order,
            on,
            off,
            ratios,
        });
    }

    let mut sides_reports = Vec::new();
    for side in sides {
        if let Some(workers) = side.workers {
            workers.finish()?;
        }
        side.client.unlink(&args.path)?;
        sides_reports.push(side.report);
        // The cluster stops here (`Cluster`'s drop).
    }

    let summary: Vec<PhaseSummary> = PHASES
        .iter()
        .enumerate()
        .map(|(i, phase)| {
            let ratios: Vec<f64> = rounds.iter().map(|p| p.ratios[i]).collect();
            let on: Vec<f64> = rounds.iter().map(|p| p.on.mib_per_s[i]).collect();
            let off: Vec<f64> = rounds.iter().map(|p| p.off.mib_per_s[i]).collect();
            let by_size = sorted(&ratios);
            PhaseSummary {
                phase,
                on_median_mib_per_s: quantile(&sorted(&on), 0.5),
                off_median_mib_per_s: quantile(&sorted(&off), 0.5),
                ratio_median: quantile(&by_size, 0.5),
                ratio_q1: quantile(&by_size, 0.25),
                ratio_q3: quantile(&by_size, 0.75),
                ratio_min: by_size[0],
                ratio_max: by_size[by_size.len() - 1],
                per_pair_ratios: ratios,
            }
        })
        .collect();
    let goals = summary
        .iter()
        .map(|s| {
            Goal::new(
                format!("{}: capabilities on (median of pairs)", s.phase),
                "capabilities off",
                TARGET,
                s.ratio_median,
            )
        })
        .collect();
    let results = Results {
        benchmark: "concurrent-compare-capabilities",
        command_line: command_line(),
        started_unix_s: unix_now_s(),
        host_cpus: host_cpus(),
        procs,
        block_bytes,
        total_bytes: total,
        pairs: args.pairs,
        io_servers: args.io_servers,
        control_both_off: args.control_both_off,
        fresh_workers: args.fresh_workers,
        stripe_size_bytes: layout.stripe_size_bytes,
        stripe_count: layout.servers.len(),
        transport_asked: std::env::var("WEFT_TRANSPORT").unwrap_or_else(|_| "auto".into()),
        authentication: AUTHENTICATION,
        clusters: sides_reports,
        warmup,
        rounds,
        summary,
        goals,
        notes: vec![NOTE_PHASES, NOTE_RATIO],
    };
    print!("{}", render(&results));
    let figure = figure(&results);
    write_results(&args.json, &svg_next_to(&args.json), &results, &figure)
}

const NOTE_PHASES: &str = "write: into the emptied file (new object pages); read: reads it back; rewrite: \
writes other data over it in place; reread: reads that back. Every read is compared with what was written; \
no sync";
const NOTE_RATIO: &str =
    "each pair runs the same cycle on both clusters, step by step: every phase runs on one cluster, then at \
once on the other (the order alternates from pair to pair); the ratio of a pair is capabilities-on MiB/s over capabilities-off MiB/s; the figure is the median of the \
pairs' ratios, [q1, q3] its spread";

/// A client of the cluster in `home`, found as a worker finds it.
pub(crate) fn connect(home: &Path) -> Result<Client> {
    let description = home.join(weft_config::CLUSTER_FILE_NAME);
    let config = weft_config::ClusterConfig::load(&description)?;
    let key = ClusterKey::load(&config.key_path(&description))?;
    Ok(Client::connect_with(
        &config.meta().addr,
        ClientAuth::cluster(key),
    )?)
}

/// Writes a byte into a probe file and asks one of its io servers for it over a raw
/// authenticated connection that presents no capability: (refused, what it answered).
fn capability_less_read(client: &Client, home: &Path, path: &str) -> Result<(bool, String)> {
    let probe = format!("{}.probe", path.trim_end_matches('/'));
    let file = client.create(&probe, &CreateOptions::default())?;
    file.write_at(0, b"p")?;
    let layout = file.layout().clone();
    let server = layout.servers[0];
    let addr = client
        .cluster_info()
        .io_servers
        .iter()
        .find(|s| s.id == server)
        .map(|s| s.addr.clone())
        .with_context(|| format!("io server {server} of {probe} is not in the cluster"))?;
    let description = home.join(weft_config::CLUSTER_FILE_NAME);
    let config = weft_config::ClusterConfig::load(&description)?;
    let auth = ClientAuth::cluster(ClusterKey::load(&config.key_path(&description))?);
    let connection =
        weft_rpc::Connection::connect(&addr, "weft bench probe", &auth, weft_rpc::Timeouts::from_env())?;
    let request = Request::Read {
        inode: file.inode(),
        striping: Striping {
            stripe_size_bytes: layout.stripe_size_bytes,
            stripe_count: layout.servers.len() as u32,
            server_index: 0,
        },
        ranges: vec![Range { offset: 0, len: 1 }],
    };
    let answer = match connection.call(&request, &[]) {
        Ok(_) => (false, format!("{addr}: served")),
        Err(RpcError::Remote { error, .. }) if error.code == ErrorCode::CapabilityRequired => {
            (true, format!("refused: {}", error.message))
        }
        Err(e) => bail!("{addr}: a read without a capability failed unexpectedly: {e}"),
    };
    drop(file);
    client.unlink(&probe)?;
    Ok(answer)
}

/// `weft status`'s lines that say how the cluster in `home` is secured.
fn status_lines(weft: &Path, home: &Path) -> Vec<String> {
    match Command::new(weft)
        .arg("status")
        .env("WEFT_HOME", home)
        .env_remove("WEFT_META")
        .output()
    {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| {
                ["security:", "identity:", "capabilities:"]
                    .iter()
                    .any(|p| l.starts_with(p))
            })
            .map(str::to_owned)
            .collect(),
        Err(e) => vec![format!("weft status failed: {e}")],
    }
}

/// Steps of one cycle on one side: the file emptied, then the four phases, each
/// opened untimed first; a pair runs each step on both sides back to back, so that
/// the two sides of a phase are seconds-of-load apart only by one phase's time.
const STEPS: usize = 10;

/// One side's cycle in progress.
struct InCycle {
    ns: Vec<Vec<u64>>,
    bytes_verified: u64,
}

/// Step `k` of cycle `run` on `side` (new worker processes with --fresh-workers).
fn cycle_step(
    side: &mut Side,
    spec: &WorkerSpec,
    k: usize,
    run: u32,
    total: u64,
    acc: &mut InCycle,
) -> Result<()> {
    let name = side.mode.name();
    let path = spec.path.as_str();
    let seed_run = |again: bool| run.wrapping_mul(2).wrapping_add(u32::from(again));
    match k {
        0 => {
            if side.workers.is_none() {
                side.workers = Some(spec.spawn(side.cluster.home())?);
            }
            side.client.open(
                path,
                &OpenOptions {
                    write: true,
                    truncate: true,
                    ..Default::default()
                },
            )?;
        }
        1 | 5 => {
            let w = side.workers.as_mut().expect("spawned at step 0");
            w.step(&format!("open-write weft {}", seed_run(k == 5)))?;
        }
        2 | 6 => {
            let w = side.workers.as_mut().expect("spawned at step 0");
            let (written, _) = w.step("write")?;
            acc.ns.push(
                crate::concurrent::worker_numbers(&written)?
                    .into_iter()
                    .map(|(t, _)| t)
                    .collect(),
            );
            let size = side.client.stat(path)?.size;
            ensure!(
                size == total,
                "{name}: the file holds {size} bytes after a write phase, expected {total}"
            );
        }
        3 | 7 => {
            side.workers
                .as_mut()
                .expect("spawned at step 0")
                .step("open-read weft")?;
        }
        4 | 8 => {
            let (read, _) = side.workers.as_mut().expect("spawned at step 0").step("read")?;
            let read = crate::concurrent::worker_numbers(&read)?;
            let verified: u64 = read.iter().map(|r| r.1).sum();
            ensure!(
                verified == total,
                "{name}: processes verified {verified} bytes, expected {total}"
            );
            acc.bytes_verified += verified;
            acc.ns.push(read.into_iter().map(|(t, _)| t).collect());
        }
        9 => {
            side.workers.as_mut().expect("spawned at step 0").step("close")?;
            if spec.fresh {
                side.workers.take().expect("spawned at step 0").finish()?;
            }
        }
        _ => bail!("no cycle step {k}"),
    }
    Ok(())
}

/// One cycle on each side in `order`, step by step (see `STEPS`).
fn cycles(
    sides: &mut [Side],
    order: [Mode; 2],
    spec: &WorkerSpec,
    run: u32,
    total: u64,
) -> Result<Vec<Cycle>> {
    let mut acc: Vec<InCycle> = order
        .iter()
        .map(|_| InCycle {
            ns: Vec::new(),
            bytes_verified: 0,
        })
        .collect();
    for k in 0..STEPS {
        for (i, mode) in order.iter().enumerate() {
            let side = sides.iter_mut().find(|s| s.mode == *mode).expect("both modes");
            cycle_step(side, spec, k, run, total, &mut acc[i])?;
        }
    }
    Ok(order
        .iter()
        .zip(acc)
        .map(|(mode, a)| Cycle {
            mode: *mode,
            mib_per_s: a
                .ns
                .iter()
                .map(|per_process| mib_per_s(total, per_process.iter().copied().max().unwrap_or(1)))
                .collect(),
            ns: a.ns,
            bytes_verified: a.bytes_verified,
        })
        .collect())
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// The `q` quantile of sorted `values`, interpolated between neighbours.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let at = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo as f64)
}

fn render(r: &Results) -> String {
    let mut out = format!(
        "\nCapabilities on vs off (concurrent read/write): {} processes x {} MiB = {} MiB, {} pairs, \
         two clusters of {} io servers (stripe {} KiB x {})\n",
        r.procs,
        r.block_bytes / MIB,
        r.total_bytes / MIB,
        r.pairs,
        r.io_servers,
        r.stripe_size_bytes / 1024,
        r.stripe_count,
    );
    for c in &r.clusters {
        out.push_str(&format!(
            "{}: {}; without a capability: {}; transports: {}\n",
            c.mode.name(),
            c.status
                .iter()
                .find(|l| l.starts_with("capabilities:"))
                .map_or("?", String::as_str),
            c.capability_less_read,
            c.transports.join(", ")
        ));
    }
    out.push_str(&format!("authentication: {}\n\n", r.authentication));
    if r.control_both_off {
        out.push_str(
            "CONTROL: both clusters run without capabilities; \"on\" is the first cluster's place only, \
             so the ratios show the comparison's own bias\n",
        );
    }
    if r.fresh_workers {
        out.push_str(
            "worker processes: new for every cycle (their first capability grants and presents are timed)\n",
        );
    } else {
        out.push_str("worker processes: the same for every cycle (capabilities granted and presented once, in the warm-up)\n");
    }
    let mut table = Table::new(&[
        "phase",
        "on MiB/s",
        "off MiB/s",
        "on/off",
        "[q1, q3]",
        "[min, max]",
        "per pair",
    ]);
    for s in &r.summary {
        table.row(vec![
            s.phase.into(),
            format!("{:.1}", s.on_median_mib_per_s),
            format!("{:.1}", s.off_median_mib_per_s),
            format!("{:.3}", s.ratio_median),
            format!("[{:.3}, {:.3}]", s.ratio_q1, s.ratio_q3),
            format!("[{:.3}, {:.3}]", s.ratio_min, s.ratio_max),
            per_pair_column(&s.per_pair_ratios),
        ]);
    }
    out.push_str(&table.render());
    out.push('\n');
    out.push_str(&target_lines(&r.goals));
    for n in &r.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
}

/// Pairs whose ratios the table lists one by one; past it, the first ones and a pointer
/// to the JSON and plot, which hold all.
const PAIRS_LISTED_MAX: usize = 12;

fn per_pair_column(ratios: &[f64]) -> String {
    let listed: Vec<String> = ratios
        .iter()
        .take(PAIRS_LISTED_MAX)
        .map(|x| format!("{x:.2}"))
        .collect();
    if ratios.len() > PAIRS_LISTED_MAX {
        format!(
            "{} ... ({} more: --json)",
            listed.join(" "),
            ratios.len() - PAIRS_LISTED_MAX
        )
    } else {
        listed.join(" ")
    }
}

/// Median MiB/s per phase and side as bars; every pair's ratio per phase as lines.
fn figure(r: &Results) -> Figure {
    let mut figure = crate::report::phase_bars(
        &format!(
            "weft bench concurrent --compare-capabilities: {} processes, {} bytes, {} pairs",
            r.procs, r.total_bytes, r.pairs
        ),
        r.summary.iter().flat_map(|s| {
            [
                (Mode::On.name(), s.phase, s.on_median_mib_per_s),
                (Mode::Off.name(), s.phase, s.off_median_mib_per_s),
            ]
        }),
    );
    let mut ratios = Panel::lines("capabilities on / off, per pair", "pair", "ratio", XAxis::Linear);
    for s in &r.summary {
        for (i, x) in s.per_pair_ratios.iter().enumerate() {
            ratios.point(s.phase, (i + 1) as f64, *x);
        }
    }
    figure.panels.push(ratios);
    figure
}
