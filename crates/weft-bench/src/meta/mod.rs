//! `weft bench meta`: metadata operations and small files in the manner of mdtest, then
//! the everyday programs that live on them. P client processes create (and write)
//! files, stat them, open+read+close them, list them (names, then `ls -l`), rename and
//! unlink them, first in one shared directory, then in one directory per process; then
//! one process runs `tar x`, `find`, `du`, `cp -r`, `git clone`, an import-like scan
//! of small files and `rm -rf`. Each through the native client (where it applies),
//! through a FUSE mount and on a local directory, in the same run, repeated with the
//! methods' order alternating; ratios are to the local directory of the same repeat.

mod worker;
mod workloads;
pub use worker::{worker, WorkerArgs};
use workloads::{prepare_sources, run_workloads, WorkloadCtx};

use crate::cluster;
use crate::mount::MountGuard;
use crate::plot::{Figure, Panel};
use crate::procs::{self, Workers};
use crate::report::{command_line, host_cpus, median, svg_next_to, unix_now_s, write_results, Goal, Table};
use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;
use weft_client::{Client, CreateOptions, FileKind, InodeId, Name};

pub const LONG_ABOUT: &str = "Metadata operations and small files in the manner of mdtest, then \
the programs that live on them. P client processes (separate processes, started by this command) \
create N files in all (O_CREAT|O_EXCL, each written with --bytes bytes), stat each of them, open, \
read and close each, list the directory (names only, then names and attributes as `ls -l` does), \
rename each file within its directory and unlink it, first in one directory shared by all processes, \
then in one directory per process. Phases start together (a barrier through pipes); a figure is all \
processes' operations over the wall time from the start to the last process's answer. A listing \
counts one operation per entry listed.\n\n\
Then, one program at a time: `tar x` of an archive of --tar-source (made once, on local disk), \
`find` and `du -s` of what it extracted, `cp -r` of the repository's crates/ directory, `git clone \
--no-hardlinks` of the repository, an import-like scan (a directory listing, then stat and \
open+read+close of each of --scan-files small files, as `python3 -c 'import ...'` scans \
site-packages; the files are made beforehand by the native client, so the scanning side has \
seen none of them) and `rm -rf` of the extracted tree. These are timed in seconds; only the \
scan has a native form.\n\n\
Three methods in the same run: the native client, a FUSE mount of the cluster (std::fs calls and \
the programs as any user runs them) and a local directory (the baseline). Each repeat runs every \
method, in an order that alternates between repeats; every ratio is to the local directory in the \
same repeat, and the table shows the median ratio with each figure's min/median/max. Every process \
checks what it sees (sizes, bytes, entry counts); a mismatch fails the benchmark. Prints a table \
and writes every figure to --json, with an SVG plot next to it. What the benchmark makes in Weft and locally is removed at the \
end (the Weft directory too, if the benchmark made it).\n\n\
Without --mountpoint the benchmark mounts the cluster itself on a temporary directory and \
unmounts it at the end. Needs a running cluster (`weft up`), FUSE (/dev/fuse), tar, find, du, cp, \
rm and git. --quick (for tests): 25 files per process, 2 repeats, a 200-file scan, and small \
generated trees in place of --tar-source and the repository. Example:\n  \
weft bench meta --files 4000 --procs 4";

/// More client processes than this is a typo, not a benchmark.
pub const PROCS_MAX: u32 = 256;
/// Most files in all (each listing holds a whole directory's names in memory).
pub const FILES_MAX: u64 = 10_000_000;
/// Largest file the phases write (each process holds one in memory).
pub const BYTES_MAX: u64 = 1 << 20;
/// Most repeats.
pub const REPEATS_MAX: u32 = 100;
/// Most files of the import-like scan.
pub const SCAN_FILES_MAX: u64 = 1_000_000;
/// Entries asked per native directory page.
const NATIVE_PAGE_ENTRIES: u32 = 1024;
/// Files per directory of the scanned tree (a package's modules).
const SCAN_PER_DIR: u64 = 100;
/// Files per process with --quick.
const QUICK_FILES_PER_PROC: u64 = 25;
/// Files of the scan with --quick.
const QUICK_SCAN_FILES: u64 = 200;

#[derive(Args, Debug, Clone)]
pub struct MetaArgs {
    /// Files in all, shared out evenly among the processes.
    #[arg(long, default_value_t = 4_000, value_name = "N")]
    pub files: u64,
    /// Client processes.
    #[arg(long, default_value_t = 4, value_name = "P")]
    pub procs: u32,
    /// Bytes written into each file at its create (read back by the read phase).
    #[arg(long, default_value_t = 4096, value_name = "B")]
    pub bytes: u64,
    /// Repeats of every method (the order of methods alternates between repeats).
    #[arg(long, default_value_t = 3, value_name = "R")]
    pub repeats: u32,
    /// Methods to run, comma separated: native, mount, local (the baseline, always run).
    #[arg(
        long,
        default_value = "native,mount,local",
        value_delimiter = ',',
        value_name = "LIST"
    )]
    pub methods: Vec<String>,
    /// Programs to run after the phases, comma separated: tar, find, du, cp, git, scan,
    /// rm (rm and find/du need tar); `none` for none.
    #[arg(
        long,
        default_value = "tar,find,du,cp,git,scan,rm",
        value_delimiter = ',',
        value_name = "LIST"
    )]
    pub workloads: Vec<String>,
    /// The tree `tar x` extracts (archived once to local disk first).
    #[arg(long, default_value = "/usr/share/doc", value_name = "DIR")]
    pub tar_source: PathBuf,
    /// The git repository cloned, whose crates/ directory `cp -r` copies. Default: the
    /// one the current directory is in.
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// Files of the import-like scan.
    #[arg(long, default_value_t = 5_000, value_name = "N")]
    pub scan_files: u64,
    /// The native method makes each process's files of a directory with batch creates
    /// (`Client::create_many`, 256 files per request, each batch durable when
    /// answered) and then writes them, where by default it creates, writes and closes
    /// each file in turn as mdtest does. The mount and the local directory have no
    /// batch create: they run as without it.
    #[arg(long)]
    pub batch_creates: bool,
    /// A short run for tests (see the description).
    #[arg(long)]
    pub quick: bool,
    /// A Weft mount of the cluster to use. Default: mount it on a temporary directory.
    #[arg(long, value_name = "DIR")]
    pub mountpoint: Option<PathBuf>,
    /// The Weft directory to work in (made if missing; what the benchmark makes in it is
    /// removed at the end, and the directory too if the benchmark made it, also on
    /// failure or interrupt).
    #[arg(long, default_value = "/bench-meta", value_name = "PATH")]
    pub path: String,
    /// Directory for the local baseline. Default: the system temporary directory.
    #[arg(long, value_name = "DIR")]
    pub local_dir: Option<PathBuf>,
    /// Where to write the JSON results (the directory is created); the SVG plot goes
    /// next to it (.svg for .json).
    #[arg(long, default_value = "bench-results/meta.json", value_name = "FILE")]
    pub json: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Method {
    Native,
    Mount,
    Local,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Native => "native",
            Method::Mount => "mount",
            Method::Local => "local",
        }
    }

    fn parse(s: &str) -> Result<Method> {
        Ok(match s.trim() {
            "native" => Method::Native,
            "mount" => Method::Mount,
            "local" => Method::Local,
            other => bail!("unknown method {other:?} (native, mount, local)"),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Layout {
    /// One directory for all processes.
    Shared,
    /// One directory per process.
    Private,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::Shared => "shared",
            Layout::Private => "per-process",
        }
    }
}

const LAYOUTS: [Layout; 2] = [Layout::Shared, Layout::Private];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Phase {
    Create,
    Stat,
    /// open + read of the whole file + close.
    Read,
    Readdir,
    #[serde(rename = "ls-l")]
    LsL,
    Rename,
    Unlink,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Create => "create",
            Phase::Stat => "stat",
            Phase::Read => "read",
            Phase::Readdir => "readdir",
            Phase::LsL => "ls-l",
            Phase::Rename => "rename",
            Phase::Unlink => "unlink",
        }
    }

    fn parse(s: &str) -> Result<Phase> {
        Ok(match s {
            "create" => Phase::Create,
            "stat" => Phase::Stat,
            "read" => Phase::Read,
            "readdir" => Phase::Readdir,
            "ls-l" => Phase::LsL,
            "rename" => Phase::Rename,
            "unlink" => Phase::Unlink,
            other => bail!("unknown phase {other:?}"),
        })
    }
}

const PHASES: [Phase; 7] = [
    Phase::Create,
    Phase::Stat,
    Phase::Read,
    Phase::Readdir,
    Phase::LsL,
    Phase::Rename,
    Phase::Unlink,
];

/// A program run after the phases, timed whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Workload {
    Tar,
    Find,
    Du,
    Cp,
    Git,
    Scan,
    Rm,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Tar => "tar x",
            Workload::Find => "find",
            Workload::Du => "du -s",
            Workload::Cp => "cp -r",
            Workload::Git => "git clone",
            Workload::Scan => "import scan",
            Workload::Rm => "rm -rf",
        }
    }

    /// As --workloads names it.
    fn key(self) -> &'static str {
        match self {
            Workload::Tar => "tar",
            Workload::Find => "find",
            Workload::Du => "du",
            Workload::Cp => "cp",
            Workload::Git => "git",
            Workload::Scan => "scan",
            Workload::Rm => "rm",
        }
    }

    fn parse(s: &str) -> Result<Workload> {
        Ok(match s.trim() {
            "tar" => Workload::Tar,
            "find" => Workload::Find,
            "du" => Workload::Du,
            "cp" => Workload::Cp,
            "git" => Workload::Git,
            "scan" => Workload::Scan,
            "rm" => Workload::Rm,
            other => bail!(
                "unknown workload {other:?} ({})",
                WORKLOADS.map(Workload::key).join(", ")
            ),
        })
    }

    /// Whether `method` runs it (programs need a path in the file system tree).
    fn runs_on(self, method: Method) -> bool {
        method != Method::Native || self == Workload::Scan
    }
}

/// In the order they run.
const WORKLOADS: [Workload; 7] = [
    Workload::Tar,
    Workload::Find,
    Workload::Du,
    Workload::Cp,
    Workload::Git,
    Workload::Scan,
    Workload::Rm,
];

/// One phase of one method in one repeat.
#[derive(Debug, Serialize)]
struct PhaseRun {
    repeat: u32,
    method: Method,
    layout: Layout,
    phase: Phase,
    operations: u64,
    seconds: f64,
    ops_per_s: f64,
}

/// One program of one method in one repeat.
#[derive(Debug, Serialize)]
struct WorkloadRun {
    repeat: u32,
    method: Method,
    workload: Workload,
    seconds: f64,
}

/// A phase of a method over the repeats.
#[derive(Debug, Serialize)]
struct PhaseSummary {
    method: Method,
    layout: Layout,
    phase: Phase,
    ops_per_s_min: f64,
    ops_per_s_median: f64,
    ops_per_s_max: f64,
    /// The median over repeats of `ops_per_s` over the local directory's in the same
    /// repeat, layout and phase (higher is better).
    vs_local: f64,
}

/// A program of a method over the repeats.
#[derive(Debug, Serialize)]
struct WorkloadSummary {
    method: Method,
    workload: Workload,
    seconds_min: f64,
    seconds_median: f64,
    seconds_max: f64,
    /// The median over repeats of `seconds` over the local directory's in the same
    /// repeat (lower is better: 2.0 takes twice the local time).
    time_vs_local: f64,
}

#[derive(Debug, Serialize)]
struct Results {
    benchmark: &'static str,
    command_line: String,
    started_unix_s: u64,
    host_cpus: usize,
    io_servers: usize,
    files: u64,
    procs: u32,
    bytes: u64,
    repeats: u32,
    batch_creates: bool,
    quick: bool,
    scan_files: u64,
    tar_source: String,
    repo: Option<String>,
    weft_path: String,
    mountpoint: Option<String>,
    local_dir: String,
    phase_runs: Vec<PhaseRun>,
    workload_runs: Vec<WorkloadRun>,
    phases: Vec<PhaseSummary>,
    workloads: Vec<WorkloadSummary>,
    goals: Vec<Goal>,
    notes: Vec<&'static str>,
}

const NOTE_LOCAL: &str = "the local directory is on the machine's own file system (no network, no \
FUSE); the mount and the cluster share the same cores as the clients";
const NOTE_BATCH: &str = "--batch-creates: the native method made its files with batch creates \
(256 per request, durable when answered), then wrote each; the others created them one by one";
const NOTE_ORDER: &str = "methods run in an order that alternates between repeats; each ratio is \
to the local directory in the same repeat, and the median ratio over repeats is shown";

pub fn run(args: &MetaArgs) -> Result<()> {
    ensure!(
        (1..=PROCS_MAX).contains(&args.procs),
        "--procs must be 1 to {PROCS_MAX}"
    );
    ensure!(
        args.files >= u64::from(args.procs) && args.files <= FILES_MAX,
        "--files must be at least --procs and at most {FILES_MAX}"
    );
    ensure!(args.bytes <= BYTES_MAX, "--bytes must be at most {BYTES_MAX}");
    ensure!(
        (1..=REPEATS_MAX).contains(&args.repeats),
        "--repeats must be 1 to {REPEATS_MAX}"
    );
    ensure!(
        (1..=SCAN_FILES_MAX).contains(&args.scan_files),
        "--scan-files must be 1 to {SCAN_FILES_MAX}"
    );
    ensure!(
        args.path.starts_with('/') && args.path != "/",
        "--path must be an absolute Weft directory other than /"
    );
    let mut methods = parse_list(&args.methods, Method::parse)?;
    if !methods.contains(&Method::Local) {
        methods.push(Method::Local);
    }
    let mut workloads = parse_list(&args.workloads, Workload::parse)?;
    for needs_tar in [Workload::Find, Workload::Du, Workload::Rm] {
        ensure!(
            !workloads.contains(&needs_tar) || workloads.contains(&Workload::Tar),
            "workload {} works on what tar extracted: add tar",
            needs_tar.name()
        );
    }
    workloads.sort_by_key(|w| WORKLOADS.iter().position(|x| x == w));
    let (per_proc, repeats, scan_files) = if args.quick {
        (QUICK_FILES_PER_PROC, args.repeats.min(2), QUICK_SCAN_FILES)
    } else {
        (args.files / u64::from(args.procs), args.repeats, args.scan_files)
    };
    let started_unix_s = unix_now_s();

    let client = cluster::connect()?;
    let weft_root = args.path.trim_end_matches('/').to_owned();
    // A directory the benchmark makes is removed with all it holds at the end, also on
    // failure or interrupt (`WeftDir`); in one of the user's only what it made goes.
    let made_root = match client.resolve(&weft_root) {
        Ok(_) => None,
        Err(e) if e.code() == weft_client::ErrorCode::NotFound => {
            if let Some((parent, _)) = weft_root.rsplit_once('/').filter(|(p, _)| !p.is_empty()) {
                client
                    .mkdir_all(parent, 0o755)
                    .with_context(|| format!("making {parent}"))?;
            }
            Some(cluster::WeftDir::make(&client, &weft_root, false)?)
        }
        Err(e) => return Err(anyhow::Error::new(e).context(format!("looking up {weft_root}"))),
    };
    let mount = if methods.contains(&Method::Mount) {
        Some(match &args.mountpoint {
            Some(dir) => MountGuard::existing(dir)?,
            None => MountGuard::start()?,
        })
    } else {
        None
    };
    let local_parent = args.local_dir.clone().unwrap_or_else(std::env::temp_dir);
    let local = tempfile::Builder::new()
        .prefix("weft-bench-meta-")
        .tempdir_in(&local_parent)
        .with_context(|| format!("making a directory in {}", local_parent.display()))?;
    let sources = prepare_sources(args, &workloads, &local_parent)?;

    let mut phase_runs = Vec::new();
    let mut workload_runs = Vec::new();
    for repeat in 0..repeats {
        // Alternate: forwards on even repeats, backwards on odd ones.
        let mut order = methods.clone();
        if repeat % 2 == 1 {
            order.reverse();
        }
        for &method in &order {
            // Each method works in a directory of its own, made and removed here.
            let root = match method {
                Method::Native => format!("{weft_root}/native"),
                Method::Mount => mount
                    .as_ref()
                    .expect("mounted for the mount method")
                    .path()
                    .join(weft_root.trim_start_matches('/'))
                    .join("mount")
                    .display()
                    .to_string(),
                Method::Local => local.path().join("local").display().to_string(),
            };
            run_phases(
                &client,
                method,
                &root,
                args.procs,
                per_proc,
                args.bytes,
                args.batch_creates && method == Method::Native,
                repeat,
                &mut phase_runs,
            )?;
            let ctx = WorkloadCtx {
                client: &client,
                method,
                repeat,
                sources: sources.as_ref(),
                scan_files,
                weft_root: &weft_root,
                mount_root: mount.as_ref().map(|m| m.path()),
                local_root: local.path(),
            };
            run_workloads(&ctx, &workloads, &mut workload_runs)?;
        }
    }
    let phases = summarise_phases(&methods, &phase_runs);
    let workload_summary = summarise_workloads(&methods, &workloads, &workload_runs);
    let goals = goals(&phases, &workload_summary);
    let mountpoint = mount.as_ref().map(|m| m.path().display().to_string());
    if let Some(m) = mount {
        m.finish()?;
    }
    drop(made_root);
    let results = Results {
        benchmark: "meta",
        command_line: command_line(),
        started_unix_s,
        host_cpus: host_cpus(),
        io_servers: client.cluster_info().io_servers.len(),
        files: per_proc * u64::from(args.procs),
        procs: args.procs,
        bytes: args.bytes,
        repeats,
        batch_creates: args.batch_creates,
        quick: args.quick,
        scan_files,
        tar_source: if args.quick {
            "(generated)".into()
        } else {
            args.tar_source.display().to_string()
        },
        repo: sources.as_ref().map(|s| s.repo.display().to_string()),
        weft_path: weft_root,
        mountpoint,
        local_dir: local.path().display().to_string(),
        phase_runs,
        workload_runs,
        phases,
        workloads: workload_summary,
        goals,
        notes: if args.batch_creates {
            vec![NOTE_LOCAL, NOTE_ORDER, NOTE_BATCH]
        } else {
            vec![NOTE_LOCAL, NOTE_ORDER]
        },
    };
    print!("{}", render(&results, &methods));
    write_results(&args.json, &svg_next_to(&args.json), &results, &figure(&results))
}

/// Operations per second (median) per phase, a panel per layout, and the workloads'
/// median seconds; a bar per method.
fn figure(r: &Results) -> Figure {
    let mut panels: Vec<Panel> = Vec::new();
    for p in &r.phases {
        let title = format!("{} files: operations/s (median)", p.layout.name());
        let at = match panels.iter().position(|x| x.title == title) {
            Some(i) => i,
            None => {
                panels.push(Panel::bars(title, "phase", "ops/s", Vec::new()));
                panels.len() - 1
            }
        };
        panels[at].bar(p.method.name(), p.phase.name(), p.ops_per_s_median);
    }
    let mut workloads = Panel::bars("workloads: seconds (median)", "workload", "s", Vec::new());
    for w in &r.workloads {
        workloads.bar(w.method.name(), w.workload.name(), w.seconds_median);
    }
    panels.push(workloads);
    Figure {
        title: format!("weft bench meta: {} processes, {} files", r.procs, r.files),
        panels,
    }
}

/// The mdtest phases of one method in one repeat, by `procs` worker processes.
#[allow(clippy::too_many_arguments)]
fn run_phases(
    client: &Client,
    method: Method,
    root: &str,
    procs: u32,
    per_proc: u64,
    bytes: u64,
    batch_creates: bool,
    repeat: u32,
    out: &mut Vec<PhaseRun>,
) -> Result<()> {
    make_dirs(client, method, root, procs)?;
    let mut workers = Workers::spawn("meta-worker", procs, |rank| {
        let batch = batch_creates.then_some("--batch-creates");
        [
            "--method",
            method.name(),
            "--root",
            root,
            "--rank",
            &rank.to_string(),
            "--procs",
            &procs.to_string(),
            "--files",
            &per_proc.to_string(),
            "--bytes",
            &bytes.to_string(),
        ]
        .iter()
        .copied()
        .chain(batch)
        .map(OsString::from)
        .collect()
    })?;
    for layout in LAYOUTS {
        for phase in PHASES {
            let (replies, elapsed) = workers.step(&format!("{} {}", phase.name(), layout.name()))?;
            let mut operations = 0u64;
            for r in &replies {
                operations += r
                    .parse::<u64>()
                    .with_context(|| format!("worker answered {r:?}"))?;
            }
            let seconds = elapsed.as_secs_f64();
            let ops_per_s = operations as f64 / seconds.max(1e-9);
            eprintln!(
                "meta: #{repeat} {:<6} {:<11} {:<7} {:>9} ops {:>8.3} s {:>11.0} ops/s",
                method.name(),
                layout.name(),
                phase.name(),
                operations,
                seconds,
                ops_per_s
            );
            out.push(PhaseRun {
                repeat,
                method,
                layout,
                phase,
                operations,
                seconds,
                ops_per_s,
            });
        }
    }
    workers.finish()?;
    remove_dirs(client, method, root, procs)
}

fn summarise_phases(methods: &[Method], runs: &[PhaseRun]) -> Vec<PhaseSummary> {
    let mut out = Vec::new();
    for &method in methods {
        for layout in LAYOUTS {
            for phase in PHASES {
                let mine: Vec<&PhaseRun> = runs
                    .iter()
                    .filter(|r| r.method == method && r.layout == layout && r.phase == phase)
                    .collect();
                if mine.is_empty() {
                    continue;
                }
                let rates: Vec<f64> = mine.iter().map(|r| r.ops_per_s).collect();
                let ratios: Vec<f64> = mine
                    .iter()
                    .filter_map(|r| {
                        runs.iter()
                            .find(|l| {
                                l.method == Method::Local
                                    && l.repeat == r.repeat
                                    && l.layout == layout
                                    && l.phase == phase
                            })
                            .map(|l| r.ops_per_s / l.ops_per_s.max(1e-9))
                    })
                    .collect();
                out.push(PhaseSummary {
                    method,
                    layout,
                    phase,
                    ops_per_s_min: rates.iter().copied().fold(f64::INFINITY, f64::min),
                    ops_per_s_median: median(&rates),
                    ops_per_s_max: rates.iter().copied().fold(0.0, f64::max),
                    vs_local: median(&ratios),
                });
            }
        }
    }
    out
}

fn summarise_workloads(
    methods: &[Method],
    workloads: &[Workload],
    runs: &[WorkloadRun],
) -> Vec<WorkloadSummary> {
    let mut out = Vec::new();
    for &method in methods {
        for &workload in workloads {
            let mine: Vec<&WorkloadRun> = runs
                .iter()
                .filter(|r| r.method == method && r.workload == workload)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let times: Vec<f64> = mine.iter().map(|r| r.seconds).collect();
            let ratios: Vec<f64> = mine
                .iter()
                .filter_map(|r| {
                    runs.iter()
                        .find(|l| l.method == Method::Local && l.repeat == r.repeat && l.workload == workload)
                        .map(|l| r.seconds / l.seconds.max(1e-9))
                })
                .collect();
            out.push(WorkloadSummary {
                method,
                workload,
                seconds_min: times.iter().copied().fold(f64::INFINITY, f64::min),
                seconds_median: median(&times),
                seconds_max: times.iter().copied().fold(0.0, f64::max),
                time_vs_local: median(&ratios),
            });
        }
    }
    out
}

/// Open+read+close of small files through the mount, per second (the issue's target).
const READ_RATE_TARGET: f64 = 10_000.0;

/// The issue's targets, each as a ratio that must be at least its minimum.
fn goals(phases: &[PhaseSummary], workloads: &[WorkloadSummary]) -> Vec<Goal> {
    let mut goals = Vec::new();
    for p in phases.iter().filter(|p| p.method == Method::Mount) {
        match p.phase {
            Phase::Create | Phase::Stat => goals.push(Goal::new(
                format!("mount {} ({})", p.phase.name(), p.layout.name()),
                "a local directory",
                0.5,
                p.vs_local,
            )),
            Phase::Read => goals.push(Goal::new(
                format!("mount open+read+close ({})", p.layout.name()),
                format!("{READ_RATE_TARGET:.0}/s"),
                1.0,
                p.ops_per_s_median / READ_RATE_TARGET,
            )),
            _ => {}
        }
    }
    for w in workloads
        .iter()
        .filter(|w| w.method == Method::Mount && matches!(w.workload, Workload::Tar | Workload::Cp))
    {
        // Within 2x local time: local's time over the mount's at least 0.5.
        goals.push(Goal::new(
            format!("mount {} speed", w.workload.name()),
            "a local directory's",
            0.5,
            1.0 / w.time_vs_local.max(1e-9),
        ));
    }
    goals
}

fn dir_of(root: &str, layout: Layout, rank: u32) -> String {
    match layout {
        Layout::Shared => format!("{root}/shared"),
        Layout::Private => format!("{root}/p{rank}"),
    }
}

fn make_dirs(client: &Client, method: Method, root: &str, procs: u32) -> Result<()> {
    let mut dirs = vec![dir_of(root, Layout::Shared, 0)];
    dirs.extend((0..procs).map(|r| dir_of(root, Layout::Private, r)));
    for dir in dirs {
        match method {
            Method::Native => {
                client
                    .mkdir_all(&dir, 0o755)
                    .with_context(|| format!("making {dir}"))?;
            }
            _ => std::fs::create_dir_all(&dir).with_context(|| format!("making {dir}"))?,
        }
    }
    Ok(())
}

fn remove_dirs(client: &Client, method: Method, root: &str, procs: u32) -> Result<()> {
    let mut dirs = vec![dir_of(root, Layout::Shared, 0)];
    dirs.extend((0..procs).map(|r| dir_of(root, Layout::Private, r)));
    dirs.push(root.to_owned());
    for dir in dirs {
        match method {
            Method::Native => client.rmdir(&dir).with_context(|| format!("removing {dir}"))?,
            _ => std::fs::remove_dir(&dir).with_context(|| format!("removing {dir}"))?,
        }
    }
    Ok(())
}

fn min_med_max(min: f64, med: f64, max: f64, digits: usize) -> String {
    format!("{min:.digits$}/{med:.digits$}/{max:.digits$}")
}

fn render(r: &Results, methods: &[Method]) -> String {
    let mut out = format!(
        "\nMetadata and small files: {} files of {} bytes by {} processes, {} repeat(s); ops/s \
         (all processes) min/median/max, median ratio to the local directory of the same repeat\n\
         weft: {} on {} io servers; mount: {}; local: {}\n\n",
        r.files,
        r.bytes,
        r.procs,
        r.repeats,
        r.weft_path,
        r.io_servers,
        r.mountpoint.as_deref().unwrap_or("not run"),
        r.local_dir
    );
    let mut header: Vec<String> = vec!["directory".into(), "phase".into()];
    for m in methods {
        header.push(format!("{} ops/s", m.name()));
    }
    for m in methods.iter().filter(|m| **m != Method::Local) {
        header.push(format!("{} vs local", m.name()));
    }
    let header_refs: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = Table::new(&header_refs);
    for layout in LAYOUTS {
        for phase in PHASES {
            let find = |m: Method| {
                r.phases
                    .iter()
                    .find(|f| f.method == m && f.layout == layout && f.phase == phase)
                    .expect("every method ran every phase")
            };
            let mut row = vec![layout.name().to_owned(), phase.name().to_owned()];
            for &m in methods {
                let f = find(m);
                row.push(min_med_max(
                    f.ops_per_s_min,
                    f.ops_per_s_median,
                    f.ops_per_s_max,
                    0,
                ));
            }
            for &m in methods.iter().filter(|m| **m != Method::Local) {
                row.push(format!("{:.3}", find(m).vs_local));
            }
            table.row(row);
        }
    }
    out.push_str(&table.render());
    if !r.workloads.is_empty() {
        out.push_str(&format!(
            "\nPrograms, one at a time: seconds min/median/max, median time ratio to local (lower is \
             better); tar source {}, repository {}, scan of {} files\n\n",
            r.tar_source,
            r.repo.as_deref().unwrap_or("-"),
            r.scan_files
        ));
        let mut header: Vec<String> = vec!["program".into()];
        for m in methods {
            header.push(format!("{} s", m.name()));
        }
        for m in methods.iter().filter(|m| **m != Method::Local) {
            header.push(format!("{} time vs local", m.name()));
        }
        let header_refs: Vec<&str> = header.iter().map(String::as_str).collect();
        let mut table = Table::new(&header_refs);
        let ran = |w: &Workload| r.workloads.iter().any(|s| s.workload == *w);
        for workload in WORKLOADS.into_iter().filter(ran) {
            let find = |m: Method| {
                r.workloads
                    .iter()
                    .find(|w| w.method == m && w.workload == workload)
            };
            let mut row = vec![workload.name().to_owned()];
            for &m in methods {
                row.push(find(m).map_or("-".into(), |w| {
                    min_med_max(w.seconds_min, w.seconds_median, w.seconds_max, 3)
                }));
            }
            for &m in methods.iter().filter(|m| **m != Method::Local) {
                row.push(find(m).map_or("-".into(), |w| format!("{:.2}", w.time_vs_local)));
            }
            table.row(row);
        }
        out.push_str(&table.render());
    }
    out.push('\n');
    out.push_str(&crate::report::target_lines(&r.goals));
    for n in &r.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
}

fn parse_list<T: PartialEq>(items: &[String], parse: impl Fn(&str) -> Result<T>) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for item in items {
        if item.trim() == "none" {
            continue;
        }
        let x = parse(item)?;
        if !out.contains(&x) {
            out.push(x);
        }
    }
    Ok(out)
}

/// The bytes of the `i`th scanned file: 100 to 8,000 of them, as Python modules are.
fn scan_bytes(i: u64) -> Vec<u8> {
    let len = 100 + (i * 7919) % 7900;
    (0..len).map(|k| b'a' + ((k + i) % 26) as u8).collect()
}

/// Opens a file the caller just looked up (sizes filled in), reads it whole, closes it.
fn native_read(client: &Client, attr: weft_client::Attr) -> Result<Vec<u8>> {
    let size = attr.size as usize;
    let file = client.open_attr(attr, false)?;
    let mut buf = vec![0u8; size];
    let mut at = 0;
    while at < size {
        let n = file.read_at(at as u64, &mut buf[at..])?;
        ensure!(n > 0, "{}: short read at {at}", file.path());
        at += n;
    }
    file.close()?;
    Ok(buf)
}
