//! `weft bench open-close`: the fixed cost of an MPI-IO open/close cycle, as a program
//! that opens one file per step or per variable pays it (`c/open_close.c`, compiled
//! here with mpicc; this crate does not link MPI). Each run times three loops of
//! `--cycles` cycles, every rank accessing its own `--kib` KiB: create + write + close
//! of a fresh file, open + read + close (verified), open + rewrite + close. The same
//! program runs through the MPI library's own MPI-IO on a local directory, alternated
//! with the Weft runs, and the medians are compared. With `--cycles 1 --kib 65536` it
//! measures the first write of a fresh file against rewriting it.

use crate::cluster::WeftDir;
use anyhow::{bail, ensure, Result};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use std::process::Command;

use crate::collective::{compile_mpi, mpirun_procs, MpiPrograms};
use crate::plot::{Figure, Panel};
use crate::report::{median, svg_next_to, target_lines, write_results, Goal, Table};

pub const LONG_ABOUT: &str = "The fixed cost of MPI-IO open/close cycles on Weft against the MPI \
library's MPI-IO on a local directory, in the same run. Each of --procs processes runs three \
loops of --cycles cycles on files PATH/cycle.<i>, accessing its own --kib KiB at rank * KiB: \
MPI_File_open(CREATE|WRONLY) + MPI_File_write_at + MPI_File_close of a fresh file; \
open(RDONLY) + MPI_File_read_at + close (data verified); open(WRONLY) + write_at + close of the \
existing file. The slowest rank's time per cycle counts; --repeat runs alternate the local \
baseline and Weft and the medians are compared. The target: Weft within 3x of the local time \
or under 1 ms per cycle, whichever is larger. `--cycles 1 --kib 65536` measures a fresh file's \
first write (create) against rewriting it, in MiB/s. Writes JSON and an SVG plot next to it; the \
files go in --path, made and removed by the benchmark (--keep keeps it).\n\nNeeds a running cluster (`weft up`), \
mpicc and mpirun, and libweft_mpiio.so next to the weft binary. Example:\n  weft bench \
open-close --procs 4 --cycles 50 --kib 1024";

#[derive(Args, Debug, Clone)]
pub struct OpenCloseArgs {
    /// MPI processes.
    #[arg(long, default_value_t = 4, value_name = "P")]
    pub procs: u32,
    /// Open/close cycles per loop (one file each).
    #[arg(long, default_value_t = 50, value_name = "N")]
    pub cycles: u32,
    /// KiB each process writes and reads per cycle.
    #[arg(long, default_value_t = 1024, value_name = "KIB")]
    pub kib: u64,
    /// Runs of each target, alternated; the medians count.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub repeat: u32,
    /// The MPI library's io component for the local baseline.
    #[arg(long, default_value = "romio321", value_name = "IO")]
    pub baseline: String,
    /// Extra environment for the Weft runs (NAME=VALUE, comma separated), e.g.
    /// WEFT_PROFILE=1.
    #[arg(long, value_delimiter = ',', value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Weft directory for the files: made by the benchmark (it must not exist) and
    /// removed afterwards with all it holds, unless --keep.
    #[arg(long, default_value = "/bench-open-close", value_name = "PATH")]
    pub path: String,
    /// Keep the Weft directory (--path) and what the benchmark wrote in it.
    #[arg(long)]
    pub keep: bool,
    #[command(flatten)]
    pub programs: MpiPrograms,
    /// Where to write the JSON results; the SVG plot goes next to it (.svg for .json).
    #[arg(long, default_value = "bench-results/open-close.json", value_name = "FILE")]
    pub json: PathBuf,
}

const SOURCE: &str = include_str!("../c/open_close.c");
const LOOPS: [&str; 3] = ["create", "read", "rewrite"];

/// One target's runs: seconds per cycle of each loop, per run.
#[derive(Debug, Serialize)]
struct Target {
    target: String,
    command: String,
    /// Per loop (create, read, rewrite): the median seconds per cycle.
    median_s: [f64; 3],
    runs_s: Vec<[f64; 3]>,
}

#[derive(Debug, Serialize)]
struct Report {
    benchmark: &'static str,
    procs: u32,
    cycles: u32,
    kib: u64,
    targets: Vec<Target>,
    /// Weft's median over the baseline's, per loop (lower is better).
    weft_over_local: [f64; 3],
    goals: Vec<Goal>,
}

/// Runs `command`; returns its `cycle` line's seconds per cycle and the command shown.
fn run_one(command: Command) -> Result<([f64; 3], String)> {
    let crate::report::Ran { stdout, shown, .. } = crate::report::run_program(command)?;
    for line in stdout.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() == 7 && w[0] == "cycle" && w[1] == "create_s" && w[3] == "read_s" && w[5] == "rewrite_s" {
            return Ok(([w[2].parse()?, w[4].parse()?, w[6].parse()?], shown));
        }
    }
    bail!("{shown}: no cycle line in\n{stdout}")
}

fn target(name: &str, runs: Vec<[f64; 3]>, command: String) -> Target {
    let col = |i: usize| median(&runs.iter().map(|r| r[i]).collect::<Vec<_>>());
    Target {
        target: name.to_owned(),
        command,
        median_s: [col(0), col(1), col(2)],
        runs_s: runs,
    }
}

pub fn run(a: &OpenCloseArgs) -> Result<()> {
    ensure!((1..=1024).contains(&a.procs), "--procs must be in 1..=1024");
    ensure!(
        (1..=100_000).contains(&a.cycles),
        "--cycles must be in 1..=100000"
    );
    ensure!((1..=1 << 20).contains(&a.kib), "--kib must be in 1..=1048576");
    ensure!((1..=100).contains(&a.repeat), "--repeat must be in 1..=100");
    for e in &a.env {
        ensure!(e.contains('='), "--env {e}: expected NAME=VALUE");
    }
    let (library, local) = a.programs.prepare("weft-bench-open-close-local-")?;
    let work = tempfile::Builder::new()
        .prefix("weft-bench-open-close-")
        .tempdir()?;
    let program = compile_mpi(work.path(), "open_close", SOURCE)?;
    let client = weft_client::Client::from_env()?;
    let weft_dir = WeftDir::make(&client, &a.path, a.keep)?;
    let home = std::env::var("WEFT_HOME").ok();
    let dir = weft_dir.path();
    let args = |prefix: String| vec![prefix, a.cycles.to_string(), a.kib.to_string()];
    let weft = || {
        let mut c = mpirun_procs(a.procs);
        c.arg("-x").arg(format!("LD_PRELOAD={}", library.display()));
        if let Some(h) = &home {
            c.arg("-x").arg(format!("WEFT_HOME={h}"));
        }
        for e in &a.env {
            c.arg("-x").arg(e);
        }
        c.arg(&program).args(args(format!("weft:{dir}/cycle")));
        c
    };
    let baseline = || {
        let mut c = mpirun_procs(a.procs);
        c.args(["--mca", "io", &a.baseline])
            .arg(&program)
            .args(args(format!("{}/cycle", local.path().display())));
        c
    };
    let (mut on_local, mut on_weft) = (Vec::new(), Vec::new());
    let (mut local_cmd, mut weft_cmd) = (String::new(), String::new());
    for run in 1..=a.repeat {
        let (t, c) = run_one(baseline())?;
        eprintln!(
            "run {run}: {} local: create {:.3} ms, read {:.3} ms, rewrite {:.3} ms per cycle",
            a.baseline,
            t[0] * 1e3,
            t[1] * 1e3,
            t[2] * 1e3
        );
        on_local.push(t);
        local_cmd = c;
        let (t, c) = run_one(weft())?;
        eprintln!(
            "run {run}: weft: create {:.3} ms, read {:.3} ms, rewrite {:.3} ms per cycle",
            t[0] * 1e3,
            t[1] * 1e3,
            t[2] * 1e3
        );
        on_weft.push(t);
        weft_cmd = c;
    }
    let local = target(&format!("{} local", a.baseline), on_local, local_cmd);
    let weft = target("weft", on_weft, weft_cmd);
    let over = |i: usize| weft.median_s[i] / local.median_s[i].max(1e-12);
    let weft_over_local = [over(0), over(1), over(2)];
    // Allowed time per cycle: 3x the local time or 1 ms, whichever is larger; the goal's
    // ratio is allowed / Weft's time (>= 1: met).
    let goals: Vec<Goal> = LOOPS
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let allowed = (3.0 * local.median_s[i]).max(1e-3);
            Goal::new(
                format!("{l} cycle: (max of 3x local, 1 ms) / weft time"),
                "(within 3x the local time, or 1 ms)",
                1.0,
                allowed / weft.median_s[i].max(1e-12),
            )
        })
        .collect();
    let bytes = f64::from(a.procs) * a.kib as f64 * 1024.0;
    let mut t = Table::new(&["target", "loop", "ms/cycle", "MiB/s", "weft/local", "runs (ms)"]);
    for tg in [&local, &weft] {
        for (i, l) in LOOPS.iter().enumerate() {
            t.row(vec![
                tg.target.clone(),
                (*l).to_owned(),
                format!("{:.3}", tg.median_s[i] * 1e3),
                format!("{:.0}", bytes / tg.median_s[i].max(1e-12) / (1 << 20) as f64),
                if tg.target == "weft" {
                    format!("{:.2}x", weft_over_local[i])
                } else {
                    "-".into()
                },
                tg.runs_s
                    .iter()
                    .map(|r| format!("{:.3}", r[i] * 1e3))
                    .collect::<Vec<_>>()
                    .join(" "),
            ]);
        }
    }
    println!("{}", t.render());
    print!("{}", target_lines(&goals));
    println!("local: {}\nweft:  {}", local.command, weft.command);
    let report = Report {
        benchmark: "open-close",
        procs: a.procs,
        cycles: a.cycles,
        kib: a.kib,
        targets: vec![local, weft],
        weft_over_local,
        goals,
    };
    let mut panel = Panel::bars("ms per cycle (median)", "loop", "ms", Vec::new());
    for tg in &report.targets {
        for (i, l) in LOOPS.iter().enumerate() {
            panel.bar(&tg.target, l, tg.median_s[i] * 1e3);
        }
    }
    let figure = Figure {
        title: format!(
            "weft bench open-close: {} processes, {} KiB per access",
            a.procs, a.kib
        ),
        panels: vec![panel],
    };
    write_results(&a.json, &svg_next_to(&a.json), &report, &figure)
}
