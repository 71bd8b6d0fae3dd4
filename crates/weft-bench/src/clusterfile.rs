//! `weft bench clusterfile`: the Clusterfile paper's collective I/O comparison in one
//! command. It starts its own throwaway clusters (`weft up` in temporary homes: no
//! tier, a colocated tier, and 1, 2, 4 separate cache managers), and runs the patterns
//! program of weft-mpiio's tests (3D block, 2D CYCLIC(k) x CYCLIC(k)) under mpirun:
//!
//! - ROMIO (Open MPI's romio321) on the local file system, the baseline;
//! - Weft's exchange methods (two_phase, ...) on an uncached file;
//! - `server_directed` on a cached file, colocated tier (disk-directed, "DD") and
//!   separate cache managers (Clusterfile's two-phase, "2P"), in each cache manager
//!   schedule (`weft_cm_schedule`) for the patterns chosen by --schedule-k.
//!
//! Each configuration is measured `--repeat` times, the configurations of a pattern
//! alternated run by run with the order rotating (the median counts, min and max are
//! kept): a run writes collectively (timed), syncs (timed), and reads back right away
//! (the hot read: from the tier for a cached file, from the page cache otherwise); then
//! its cluster is restarted (an empty tier), the kernel's caches are dropped (`echo 3 >
//! /proc/sys/vm/drop_caches`, where permitted) and the file read again (the cold read).
//! Every cluster is started first and runs until the end.
//! Prints a table and the targets, writes JSON and an SVG plot.

use crate::collective::{compile, library, mpirun_procs, run_timed, Timing};
use crate::plot::{Figure, Panel, XAxis};
use crate::report::{median, target_lines, write_results, Goal, Table, MIB};
use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use weft_config::tie::HomeTie;

pub const LONG_ABOUT: &str = "The Clusterfile paper's collective I/O comparison on this machine, \
in one command: ROMIO on the local file system, Weft's two_phase (and the other exchange methods \
given) on uncached files, and server_directed on cached files with a colocated cache tier \
(disk-directed) and with 1, 2, 4 separate cache managers (Clusterfile's two-phase), for the 3D \
block pattern and 2D CYCLIC(k) x CYCLIC(k) for each --k; write, sync, hot read (right after the \
write) and cold read (after restarting the cluster and dropping the kernel's caches, where \
permitted). The cache manager schedule (weft_cm_schedule) is varied for the CYCLIC sizes in \
--schedule-k and the 3D block. Starts its own clusters (weft up in temporary homes), so no \
cluster is needed; needs mpicc, mpirun, and libweft_mpiio.so and weft next to this executable. \
Prints a table and the targets, and writes JSON and an SVG plot.\n\nExample:\n  weft bench \
clusterfile --procs 4 --cyclic-n 4096 --k 8,16,32,64,128,256 --repeat 3";

/// Largest edge of the 3D block array (16-byte elements: 1024 is 16 GiB).
const N_MAX: u64 = 1024;
/// Largest edge of the CYCLIC matrix (8-byte elements: 32768 is 8 GiB).
const CYCLIC_N_MAX: u64 = 32768;
/// Tries of `weft up` after `weft down` in a restart.
const RESTART_ATTEMPTS_MAX: u32 = 20;
const SCHEDULES: [&str; 3] = ["decentralised", "all_at_once", "in_order"];

#[derive(Args, Debug, Clone)]
pub struct ClusterfileArgs {
    /// MPI processes.
    #[arg(long, default_value_t = 4, value_name = "P")]
    pub procs: u32,
    /// io servers of each cluster.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub io_servers: u32,
    /// Stripe size (= cache block size) of the files, K/M suffixes.
    #[arg(long, default_value = "64K", value_parser = crate::parse_size_arg, value_name = "BYTES")]
    pub stripe: u64,
    /// Edge of the 3D block array (N^3 elements of 16 bytes); 0 leaves it out.
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub n: u64,
    /// Edge of the CYCLIC(k) matrix (8-byte elements).
    #[arg(long, default_value_t = 4096, value_name = "M")]
    pub cyclic_n: u64,
    /// CYCLIC block sizes, comma separated.
    #[arg(
        long,
        default_value = "8,16,32,64,128,256",
        value_delimiter = ',',
        value_name = "K"
    )]
    pub k: Vec<u64>,
    /// Separate cache manager counts for server_directed 2P, comma separated.
    #[arg(long, default_value = "1,2,4", value_delimiter = ',', value_name = "N")]
    pub cms: Vec<u32>,
    /// CYCLIC block sizes on which every cache manager schedule is run (and on the 3D
    /// block); the other sizes use the decentralised one.
    #[arg(long, default_value = "32", value_delimiter = ',', value_name = "K")]
    pub schedule_k: Vec<u64>,
    /// Weft methods on uncached files, comma separated (`auto` shows what it picks: the
    /// "ran" column).
    #[arg(
        long,
        default_value = "two_phase,interleaved,independent,auto",
        value_delimiter = ','
    )]
    pub methods: Vec<String>,
    /// Memory of each cache manager (must hold a file and a half).
    #[arg(long, default_value = "1G", value_parser = crate::parse_size_arg, value_name = "BYTES")]
    pub cache_memory: u64,
    /// Runs of each configuration; the table shows the median.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub repeat: u32,
    /// Skip the cold reads (they restart the cluster once per repeat).
    #[arg(long)]
    pub no_cold: bool,
    /// Directory for ROMIO's files. Default: the system temporary directory.
    #[arg(long, value_name = "DIR")]
    pub local_dir: Option<PathBuf>,
    /// libweft_mpiio.so. Default: next to this executable.
    #[arg(long, value_name = "FILE")]
    pub library: Option<PathBuf>,
    #[arg(long, default_value = "bench-results/clusterfile.json", value_name = "FILE")]
    pub json: PathBuf,
    /// The SVG plot. Default: next to --json (.svg for .json).
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

/// Where a configuration's file lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Tier {
    /// ROMIO on the local file system.
    Local,
    /// A Weft cluster without cache managers.
    Uncached,
    /// A cache manager in every io server (disk-directed).
    Colocated,
    /// This many separate cache managers (Clusterfile's two-phase).
    Separate(u32),
}

impl Tier {
    fn label(self) -> String {
        match self {
            Tier::Local => "local".into(),
            Tier::Uncached => "uncached".into(),
            Tier::Colocated => "DD (colocated)".into(),
            Tier::Separate(n) => format!("2P ({n} CM)"),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
struct Row {
    pattern: String,
    /// "romio321", or a Weft method.
    method: String,
    tier: Tier,
    /// weft_cm_schedule of server_directed runs.
    schedule: Option<String>,
    bytes: u64,
    write_s: f64,
    sync_s: f64,
    hot_read_s: f64,
    cold_read_s: Option<f64>,
    write_mib_s: f64,
    write_sync_mib_s: f64,
    hot_read_mib_s: f64,
    cold_read_mib_s: Option<f64>,
    /// Every run's (write, sync, hot read) seconds and cold read seconds.
    runs: Vec<[f64; 3]>,
    cold_runs: Vec<f64>,
    command: String,
    /// The methods the collective write and read ran with, as WEFT_PRINT_HINTS says
    /// ("write/read"; what `auto` chose).
    chosen: Option<String>,
}

impl Row {
    fn label(&self) -> String {
        match &self.schedule {
            Some(s) => format!("{} {} {s}", self.method, self.tier.label()),
            None => format!("{} {}", self.method, self.tier.label()),
        }
    }
}

#[derive(Serialize)]
struct Report<'a> {
    command: String,
    procs: u32,
    io_servers: u32,
    stripe_bytes: u64,
    caches_dropped: bool,
    rows: &'a [Row],
    goals: &'a [Goal],
}

struct Case {
    name: String,
    only: &'static str,
    args: Vec<String>,
    bytes: u64,
    /// Whether every cache manager schedule is run on it.
    schedules: bool,
}

fn cases(a: &ClusterfileArgs) -> Vec<Case> {
    let mut out = Vec::new();
    if a.n > 0 {
        out.push(Case {
            name: format!("block3d N={}", a.n),
            only: "block3d",
            args: vec!["--n".into(), a.n.to_string()],
            bytes: a.n.pow(3) * 16,
            schedules: true,
        });
    }
    for &k in &a.k {
        out.push(Case {
            name: format!("cyclic k={k}"),
            only: "cyclic2d",
            args: vec!["--cyclic".into(), a.cyclic_n.to_string(), k.to_string()],
            bytes: a.cyclic_n.pow(2) * 8,
            schedules: a.schedule_k.contains(&k),
        });
    }
    out
}

/// A throwaway cluster in a temporary home, stopped on drop, and tied to this process
/// (weft_config::tie): its servers run with `weft up --tie-to-stdin` on a pipe only
/// this process writes, so that a benchmark killed where no handler runs (kill -9)
/// leaves no server running, and the tie's sweeper removes the home.
pub(crate) struct Cluster {
    weft: PathBuf,
    home: tempfile::TempDir,
    up_args: Vec<String>,
    tie: HomeTie,
}

impl Cluster {
    fn start(weft: &Path, a: &ClusterfileArgs, tier: Tier) -> Result<Cluster> {
        let home = tempfile::Builder::new().prefix("weft-bench-cf-").tempdir()?;
        let mut up_args: Vec<String> = vec![
            "--io".into(),
            a.io_servers.to_string(),
            "--stripe-size".into(),
            a.stripe.to_string(),
        ];
        let cache = match tier {
            Tier::Colocated => Some("colocated".to_owned()),
            Tier::Separate(n) => Some(n.to_string()),
            _ => None,
        };
        if let Some(c) = cache {
            up_args.extend([
                "--cache".into(),
                c,
                "--cache-memory".into(),
                a.cache_memory.to_string(),
            ]);
        }
        Cluster::start_with(weft, home, up_args)
    }

    /// A cluster of `weft up` with `up_args` in `home`.
    /// In the emulated network asked with `weft bench --emulate-network`, if it was.
    pub(crate) fn start_with(
        weft: &Path,
        home: tempfile::TempDir,
        mut up_args: Vec<String>,
    ) -> Result<Cluster> {
        up_args.extend(crate::regime::up_args());
        let tie = HomeTie::new(home.path())
            .with_context(|| format!("tying the cluster in {} to this benchmark", home.path().display()))?;
        let cluster = Cluster {
            weft: weft.to_path_buf(),
            home,
            up_args,
            tie,
        };
        crate::cluster::started(&cluster.weft, cluster.home());
        cluster.up()?;
        crate::regime::record(cluster.home())?;
        Ok(cluster)
    }

    pub(crate) fn home(&self) -> &Path {
        self.home.path()
    }

    fn weft(&self, args: &[&str]) -> Result<()> {
        let mut command = Command::new(&self.weft);
        command.args(args).env("WEFT_HOME", self.home());
        if args.first() == Some(&"up") {
            command
                .arg("--tie-to-stdin")
                .stdin(self.tie.stdin().context("duplicating the cluster's tie")?);
        }
        let out = command.output().context("running weft")?;
        ensure!(
            out.status.success(),
            "weft {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    /// Starts the servers (again, with the same description, after `down`; only those
    /// not running).
    fn up(&self) -> Result<()> {
        let mut args = vec![
            "up".to_owned(),
            "--home".into(),
            self.home().display().to_string(),
        ];
        args.extend(self.up_args.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.weft(&args)
    }

    fn down(&self) -> Result<()> {
        self.weft(&["down", "--home", &self.home().display().to_string()])
    }

    /// Down and up again: the cache managers come back empty. A server restarts on
    /// the port recorded at its first start, an ephemeral one that may be taken
    /// meanwhile (the local port of some connection: the restarted server then fails
    /// with EADDRINUSE, seen here about once in fifty restarts), so `up` is retried for
    /// a while; each retry starts only the servers still down.
    fn restart(&self) -> Result<()> {
        self.down()?;
        self.start_stopped()
    }

    /// Starts the servers that are not running, retrying as `restart` says.
    pub(crate) fn start_stopped(&self) -> Result<()> {
        let mut attempt = 0;
        loop {
            match self.up() {
                Ok(()) => return Ok(()),
                Err(e) if attempt >= RESTART_ATTEMPTS_MAX => return Err(e),
                Err(e) => {
                    eprintln!("restart attempt {attempt} failed ({e}); retrying");
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_millis(500));
                }
            }
        }
    }
}

impl Cluster {
    /// Kills server `id` (SIGKILL: a crash, nothing written back or said goodbye) and
    /// waits until it is gone.
    pub(crate) fn kill_server(&self, id: u32) -> Result<()> {
        let pid_file = self.home().join("run").join(format!("server-{id}.pid"));
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .with_context(|| format!("reading {}", pid_file.display()))?
            .trim()
            .parse()
            .with_context(|| format!("{} holds no pid", pid_file.display()))?;
        // SAFETY: a signal to a server this benchmark started (its pid file is in the
        // benchmark's own temporary home).
        if unsafe { libc::kill(pid, libc::SIGKILL) } != 0 {
            bail!(
                "killing server {id} (pid {pid}): {}",
                std::io::Error::last_os_error()
            );
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        // Gone, or a zombie waiting for its reaper: either way it serves nothing.
        let gone = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
                stat.rsplit(')')
                    .next()
                    .is_some_and(|rest| rest.trim_start().starts_with('Z'))
            })
        };
        while !gone() {
            ensure!(
                std::time::Instant::now() < deadline,
                "server {id} (pid {pid}) still runs 10 s after SIGKILL"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.down();
        crate::cluster::stopped(self.home());
        self.tie.release();
    }
}

/// "write/read" methods from WEFT_PRINT_HINTS lines ("weft-mpiio: write /p: method m
/// (why)"), if the run printed them.
fn chosen_methods(stderr: &str) -> Option<String> {
    let method = |phase: &str| {
        stderr.lines().find_map(|line| {
            let rest = line.strip_prefix("weft-mpiio: ")?.strip_prefix(phase)?;
            let after = rest.split_once(": method ")?.1;
            Some(after.split_whitespace().next()?.to_owned())
        })
    };
    Some(format!("{}/{}", method("write ")?, method("read ")?))
}

/// Drops the kernel's page cache; false when this process may not.
fn drop_caches() -> bool {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// One configuration to measure: how to start mpirun on a file prefix.
struct Run<'a> {
    method: String,
    tier: Tier,
    schedule: Option<&'a str>,
    /// The file prefix and the environment and hints of the Weft runs.
    prefix: String,
    weft: Option<(&'a Path, &'a Path)>,
}

struct Bench<'a> {
    a: &'a ClusterfileArgs,
    program: PathBuf,
    caches_dropped: bool,
}

impl Bench<'_> {
    fn command(&self, run: &Run<'_>, case: &Case, phase: &str) -> Command {
        let mut c = mpirun_procs(self.a.procs);
        match run.weft {
            None => {
                c.args(["--mca", "io", "romio321"]);
            }
            Some((library, home)) => {
                c.arg("-x").arg(format!("LD_PRELOAD={}", library.display()));
                c.arg("-x").arg(format!("WEFT_HOME={}", home.display()));
                c.env("WEFT_PRINT_HINTS", "1").args(["-x", "WEFT_PRINT_HINTS"]);
            }
        }
        c.arg(&self.program).arg(&run.prefix);
        c.args(["--only", case.only, "--timing", "--phase", phase])
            .args(&case.args);
        if run.weft.is_some() {
            c.arg(format!("weft_cb_method={}", run.method));
            if let Some(s) = run.schedule {
                c.arg(format!("weft_cm_schedule={s}"));
            }
        }
        c
    }

    /// One run of `run` on `case`: write, sync and hot read (seconds), then, unless
    /// --no-cold, a cold read after `restart` emptied the tier and the kernel's caches
    /// were dropped; with the command line and the methods the library chose.
    fn measure_once(&mut self, run: &Run<'_>, case: &Case, restart: &dyn Fn() -> Result<()>) -> Result<Once> {
        let (t, command, stderr): (Timing, String, String) =
            run_timed(self.command(run, case, "both"), case.only)?;
        let cold = match self.a.no_cold {
            true => None,
            false => {
                restart()?;
                self.caches_dropped = drop_caches();
                Some(run_timed(self.command(run, case, "read"), case.only)?.0.read_s)
            }
        };
        Ok(Once {
            hot: [t.write_s, t.sync_s, t.read_s],
            cold,
            command,
            chosen: chosen_methods(&stderr),
        })
    }
}

/// What one run of a configuration measured.
struct Once {
    hot: [f64; 3],
    cold: Option<f64>,
    command: String,
    chosen: Option<String>,
}

/// The row of `run` on `case` from its runs (medians).
fn row_of(run: &Run<'_>, case: &Case, ones: Vec<Once>) -> Row {
    let runs: Vec<[f64; 3]> = ones.iter().map(|o| o.hot).collect();
    let cold_runs: Vec<f64> = ones.iter().filter_map(|o| o.cold).collect();
    let column = |i: usize| median(&runs.iter().map(|r| r[i]).collect::<Vec<_>>());
    let (write_s, sync_s, hot_read_s) = (column(0), column(1), column(2));
    let cold_read_s = (!cold_runs.is_empty()).then(|| median(&cold_runs));
    let mib = case.bytes as f64 / MIB as f64;
    let rate = |s: f64| mib / s.max(1e-9);
    let last = ones.into_iter().last();
    let row = Row {
        pattern: case.name.clone(),
        method: run.method.clone(),
        tier: run.tier,
        schedule: run.schedule.map(str::to_owned),
        bytes: case.bytes,
        write_s,
        sync_s,
        hot_read_s,
        cold_read_s,
        write_mib_s: rate(write_s),
        write_sync_mib_s: rate(write_s + sync_s),
        hot_read_mib_s: rate(hot_read_s),
        cold_read_mib_s: cold_read_s.map(rate),
        runs,
        cold_runs,
        command: last.as_ref().map(|o| o.command.clone()).unwrap_or_default(),
        chosen: last.and_then(|o| o.chosen),
    };
    eprintln!(
        "{}: {}: write {:.1} MiB/s, write+sync {:.1}, hot read {:.1}, cold read {}",
        row.pattern,
        row.label(),
        row.write_mib_s,
        row.write_sync_mib_s,
        row.hot_read_mib_s,
        row.cold_read_mib_s.map_or("-".into(), |v| format!("{v:.1}"))
    );
    row
}

pub fn run(a: &ClusterfileArgs) -> Result<()> {
    ensure!((1..=1024).contains(&a.procs), "--procs must be in 1..=1024");
    ensure!((1..=64).contains(&a.io_servers), "--io-servers must be in 1..=64");
    ensure!(a.n <= N_MAX, "--n must be at most {N_MAX}");
    ensure!(
        (1..=CYCLIC_N_MAX).contains(&a.cyclic_n),
        "--cyclic-n must be in 1..={CYCLIC_N_MAX}"
    );
    ensure!((1..=100).contains(&a.repeat), "--repeat must be in 1..=100");
    ensure!(
        a.k.iter().all(|k| (1..=a.cyclic_n).contains(k)),
        "every --k must be in 1..=--cyclic-n"
    );
    ensure!(
        a.cms.iter().all(|n| (1..=64).contains(n)),
        "every --cms must be in 1..=64"
    );
    let library = library(a.library.as_deref())?;
    let weft = std::env::current_exe()?.with_file_name("weft");
    ensure!(
        weft.exists(),
        "{} not found: build the workspace first",
        weft.display()
    );
    let work = tempfile::Builder::new().prefix("weft-bench-cf-").tempdir()?;
    let local = tempfile::Builder::new()
        .prefix("weft-bench-cf-local-")
        .tempdir_in(a.local_dir.clone().unwrap_or_else(std::env::temp_dir))?;
    let mut bench = Bench {
        a,
        program: compile(work.path())?,
        caches_dropped: false,
    };
    let cases = cases(a);
    let mut rows: Vec<Row> = Vec::new();

    // Every tier in a cluster of its own, all started first, so that each case's
    // configurations (ROMIO on the local file system and every Weft one) run
    // alternated, round after round, the order rotating (`report::alternated`), rather
    // than each repeat in a row.
    let mut tiers = vec![Tier::Uncached, Tier::Colocated];
    tiers.extend(a.cms.iter().map(|&n| Tier::Separate(n)));
    let mut clusters = Vec::new();
    for tier in &tiers {
        let cluster = Cluster::start(&weft, a, *tier)?;
        cluster.weft(&["mkdir", "/bench"])?;
        clusters.push(cluster);
    }
    for case in &cases {
        // (configuration, its cluster: none for ROMIO)
        let mut configs: Vec<(Run<'_>, Option<&Cluster>)> = vec![(
            Run {
                method: "romio321".into(),
                tier: Tier::Local,
                schedule: None,
                prefix: format!("{}/", local.path().display()),
                weft: None,
            },
            None,
        )];
        for (tier, cluster) in tiers.iter().zip(&clusters) {
            let mut runs: Vec<(String, Option<&str>)> = Vec::new();
            match tier {
                Tier::Uncached => runs.extend(a.methods.iter().map(|m| (m.clone(), None))),
                _ if case.schedules => {
                    runs.extend(SCHEDULES.iter().map(|s| ("server_directed".to_owned(), Some(*s))))
                }
                _ => runs.push(("server_directed".into(), Some(SCHEDULES[0]))),
            }
            for (method, schedule) in runs {
                let run = Run {
                    method,
                    tier: *tier,
                    schedule,
                    prefix: "weft:/bench/".into(),
                    weft: Some((&library, cluster.home())),
                };
                configs.push((run, Some(cluster)));
            }
        }
        let measured = crate::report::alternated(&configs, a.repeat, |_, (run, cluster)| {
            let once = match cluster {
                None => bench.measure_once(run, case, &|| Ok(())),
                Some(c) => bench.measure_once(run, case, &|| c.restart()),
            }?;
            // The next run starts from a new file.
            match cluster {
                None => {
                    std::fs::remove_file(local.path().join(case.only)).ok();
                }
                Some(c) => c.weft(&["rm", &format!("/bench/{}", case.only)])?,
            }
            Ok(once)
        })?;
        for ((run, _), ones) in configs.iter().zip(measured) {
            rows.push(row_of(run, case, ones));
        }
    }
    drop(clusters);

    let goals = goals(&rows);
    print_table(&rows);
    print!("{}", target_lines(&goals));
    if !a.no_cold && !bench.caches_dropped {
        println!("note: cold reads ran WITHOUT dropping the kernel's caches (no permission to write /proc/sys/vm/drop_caches)");
    }
    let report = Report {
        command: crate::report::command_line(),
        procs: a.procs,
        io_servers: a.io_servers,
        stripe_bytes: a.stripe,
        caches_dropped: bench.caches_dropped,
        rows: &rows,
        goals: &goals,
    };
    let svg = a
        .svg
        .clone()
        .unwrap_or_else(|| crate::report::svg_next_to(&a.json));
    write_results(&a.json, &svg, &report, &figure(&rows))?;
    Ok(())
}

/// The targets, from this run's rows: server_directed (decentralised) in each
/// placement against Weft's two_phase and ROMIO on the local file system.
fn goals(rows: &[Row]) -> Vec<Goal> {
    let find =
        |pattern: &str, pick: &dyn Fn(&Row) -> bool| rows.iter().find(|r| r.pattern == pattern && pick(r));
    let mut goals = Vec::new();
    let server_directed: Vec<&Row> = rows
        .iter()
        .filter(|r| r.method == "server_directed" && r.schedule.as_deref() == Some(SCHEDULES[0]))
        .collect();
    for sd in &server_directed {
        let romio = find(&sd.pattern, &|r| r.tier == Tier::Local);
        let two_phase = find(&sd.pattern, &|r| r.method == "two_phase");
        let who = format!("{} {}", sd.pattern, sd.tier.label());
        if sd.pattern == "cyclic k=32" {
            for (phase, mine, base_two, base_romio) in [
                (
                    "write",
                    sd.write_mib_s,
                    two_phase.map(|r| r.write_mib_s),
                    romio.map(|r| r.write_mib_s),
                ),
                (
                    "hot read",
                    sd.hot_read_mib_s,
                    two_phase.map(|r| r.hot_read_mib_s),
                    romio.map(|r| r.hot_read_mib_s),
                ),
            ] {
                if let Some(b) = base_two {
                    goals.push(Goal::new(format!("{who} {phase}"), "two_phase", 2.0, mine / b));
                }
                if let Some(b) = base_romio {
                    goals.push(Goal::new(
                        format!("{who} {phase}"),
                        "ROMIO on local files",
                        4.0,
                        mine / b,
                    ));
                }
            }
        }
        if sd.pattern.starts_with("block3d") {
            if let Some(r) = romio {
                goals.push(Goal::new(
                    format!("{who} hot read"),
                    "ROMIO on local files",
                    1.0,
                    sd.hot_read_mib_s / r.hot_read_mib_s,
                ));
            }
            // Where the tier cannot help: within 0.9x of the best uncached method (issue 32).
            let uncached = rows
                .iter()
                .filter(|r| r.pattern == sd.pattern && r.tier == Tier::Uncached);
            let best_write = uncached.clone().map(|r| r.write_sync_mib_s).fold(0.0, f64::max);
            let best_cold = uncached.filter_map(|r| r.cold_read_mib_s).fold(0.0, f64::max);
            if best_write > 0.0 {
                goals.push(Goal::new(
                    format!("{who} write+sync"),
                    "the best uncached method",
                    0.9,
                    sd.write_sync_mib_s / best_write,
                ));
            }
            if let (Some(cold), true) = (sd.cold_read_mib_s, best_cold > 0.0) {
                goals.push(Goal::new(
                    format!("{who} cold read"),
                    "the best uncached method",
                    0.9,
                    cold / best_cold,
                ));
            }
        }
    }
    goals
}

fn print_table(rows: &[Row]) {
    let mut t = Table::new(&[
        "pattern",
        "method",
        "tier",
        "schedule",
        "ran (w/r)",
        "write MiB/s",
        "write+sync",
        "hot read",
        "cold read",
        "write/2ph",
        "hot/2ph",
        "write/romio",
        "hot/romio",
        "cold/romio",
    ]);
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}", a / b.max(1e-9)),
        _ => "-".into(),
    };
    for r in rows {
        let romio = rows
            .iter()
            .find(|x| x.pattern == r.pattern && x.tier == Tier::Local);
        let two = rows
            .iter()
            .find(|x| x.pattern == r.pattern && x.method == "two_phase");
        t.row(vec![
            r.pattern.clone(),
            r.method.clone(),
            r.tier.label(),
            r.schedule.clone().unwrap_or_else(|| "-".into()),
            r.chosen.clone().unwrap_or_else(|| "-".into()),
            format!("{:.1}", r.write_mib_s),
            format!("{:.1}", r.write_sync_mib_s),
            format!("{:.1}", r.hot_read_mib_s),
            r.cold_read_mib_s.map_or("-".into(), |v| format!("{v:.1}")),
            ratio(Some(r.write_mib_s), two.map(|x| x.write_mib_s)),
            ratio(Some(r.hot_read_mib_s), two.map(|x| x.hot_read_mib_s)),
            ratio(Some(r.write_mib_s), romio.map(|x| x.write_mib_s)),
            ratio(Some(r.hot_read_mib_s), romio.map(|x| x.hot_read_mib_s)),
            ratio(r.cold_read_mib_s, romio.and_then(|x| x.cold_read_mib_s)),
        ]);
    }
    print!("{}", t.render());
}

/// Write, hot read and cold read MiB/s against the CYCLIC block size, one line per
/// configuration (server_directed in the decentralised schedule only, ROMIO on local
/// files the baseline); the other patterns' write+sync MiB/s as bars; write and hot
/// read against the number of separate cache managers.
fn figure(rows: &[Row]) -> Figure {
    let cyclic: Vec<&Row> = rows
        .iter()
        .filter(|r| {
            r.pattern.starts_with("cyclic") && r.schedule.as_deref().is_none_or(|s| s == SCHEDULES[0])
        })
        .collect();
    let mut labels: Vec<String> = Vec::new();
    for r in &cyclic {
        if !labels.contains(&r.label()) {
            labels.push(r.label());
        }
    }
    let k_of = |r: &Row| -> f64 {
        r.pattern
            .trim_start_matches("cyclic k=")
            .parse::<f64>()
            .unwrap_or(1.0)
    };
    let mut panels: Vec<Panel> = [
        ("write (MiB/s)", 0usize),
        ("hot read (MiB/s)", 1),
        ("cold read (MiB/s)", 2),
    ]
    .into_iter()
    .map(|(title, phase)| Panel {
        title: title.into(),
        x_label: "CYCLIC(k) block size k (elements)".into(),
        y_label: "MiB/s".into(),
        x_axis: XAxis::Log2,
        series: labels
            .iter()
            .map(|label| crate::plot::Series {
                name: label.clone(),
                points: cyclic
                    .iter()
                    .filter(|r| &r.label() == label)
                    .filter_map(|r| {
                        let y = match phase {
                            0 => Some(r.write_mib_s),
                            1 => Some(r.hot_read_mib_s),
                            _ => r.cold_read_mib_s,
                        };
                        y.map(|y| (k_of(r), y))
                    })
                    .collect(),
            })
            .collect(),
    })
    .collect();
    let mut others = Panel::bars(
        "other patterns, write+sync (MiB/s)",
        "pattern",
        "MiB/s",
        Vec::new(),
    );
    for r in rows.iter().filter(|r| {
        !r.pattern.starts_with("cyclic") && r.schedule.as_deref().is_none_or(|s| s == SCHEDULES[0])
    }) {
        others.bar(&r.label(), &r.pattern, r.write_sync_mib_s);
    }
    panels.push(others);
    // Clusterfile's two-phase against the number of separate cache managers.
    for (title, rate) in [
        (
            "2P write vs cache managers (MiB/s)",
            (|r: &Row| r.write_mib_s) as fn(&Row) -> f64,
        ),
        ("2P hot read vs cache managers (MiB/s)", |r: &Row| {
            r.hot_read_mib_s
        }),
    ] {
        let mut panel = Panel::lines(title, "separate cache managers", "MiB/s", XAxis::Log2);
        for r in rows {
            if let Tier::Separate(n) = r.tier {
                if r.schedule.as_deref().is_none_or(|s| s == SCHEDULES[0]) {
                    panel.point(&format!("{} {}", r.method, r.pattern), f64::from(n), rate(r));
                }
            }
        }
        panels.push(panel);
    }
    Figure {
        title: "Collective I/O, CYCLIC(k) x CYCLIC(k)".into(),
        panels,
    }
}

/// A throwaway emulated cluster for a benchmark that uses the environment's cluster:
/// started now, named to this process through WEFT_HOME, stopped (and its network
/// removed) on drop.
pub(crate) fn start_emulated() -> Result<Cluster> {
    let weft = std::env::current_exe()?.with_file_name("weft");
    let home = tempfile::Builder::new().prefix("weft-bench-netemu-").tempdir()?;
    let args = vec!["--io".to_owned(), crate::regime::EMULATED_IO_SERVERS.to_string()];
    let cluster = Cluster::start_with(&weft, home, args)
        .context("starting the emulated cluster for --emulate-network")?;
    // The benchmark, its workers and its mpirun children find it through WEFT_HOME.
    std::env::set_var("WEFT_HOME", cluster.home());
    std::env::remove_var("WEFT_META");
    Ok(cluster)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pattern: &str, method: &str, tier: Tier, schedule: Option<&str>, mib_s: f64) -> Row {
        Row {
            pattern: pattern.into(),
            method: method.into(),
            tier,
            schedule: schedule.map(String::from),
            bytes: 1 << 20,
            write_s: 1.0,
            sync_s: 1.0,
            hot_read_s: 1.0,
            cold_read_s: None,
            write_mib_s: mib_s,
            write_sync_mib_s: mib_s / 2.0,
            hot_read_mib_s: mib_s * 2.0,
            cold_read_mib_s: None,
            runs: Vec::new(),
            cold_runs: Vec::new(),
            command: String::new(),
            chosen: None,
        }
    }

    #[test]
    fn the_figure_plots_bandwidth_against_k_per_configuration_and_the_other_patterns_as_bars() {
        let mut rows = Vec::new();
        for (k, v) in [(4, 10.0), (16, 40.0)] {
            let pattern = format!("cyclic k={k}");
            rows.push(row(&pattern, "romio321", Tier::Local, None, v));
            rows.push(row(
                &pattern,
                "server_directed",
                Tier::Separate(2),
                Some(SCHEDULES[0]),
                v * 3.0,
            ));
            rows.push(row(
                &pattern,
                "server_directed",
                Tier::Separate(2),
                Some(SCHEDULES[1]),
                1.0,
            ));
        }
        rows[1].cold_read_mib_s = Some(7.0);
        rows.push(row("block3d N=16", "two_phase", Tier::Uncached, None, 5.0));
        rows.push(row(
            "block3d N=16",
            "server_directed",
            Tier::Separate(4),
            Some(SCHEDULES[0]),
            8.0,
        ));
        let f = figure(&rows);
        let names: Vec<&str> = f.panels[0].series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["romio321 local", "server_directed 2P (2 CM) decentralised"]
        );
        assert_eq!(f.panels[0].series[1].points, [(4.0, 30.0), (16.0, 120.0)]);
        assert_eq!(f.panels[1].series[0].points, [(4.0, 20.0), (16.0, 80.0)]);
        assert_eq!(f.panels[2].series[1].points, [(4.0, 7.0)]);
        assert_eq!(f.panels[3].series[0].points, [(0.0, 2.5)]);
        assert_eq!(f.panels[3].series[1].points, [(0.0, 4.0)]);
        let by_cms: Vec<(&str, &[(f64, f64)])> = f.panels[4]
            .series
            .iter()
            .map(|s| (s.name.as_str(), &s.points[..]))
            .collect();
        assert_eq!(
            by_cms,
            [
                ("server_directed cyclic k=4", &[(2.0, 30.0)][..]),
                ("server_directed cyclic k=16", &[(2.0, 120.0)][..]),
                ("server_directed block3d N=16", &[(4.0, 8.0)][..]),
            ]
        );
        crate::plot::assert_draws(&f);
    }
}
