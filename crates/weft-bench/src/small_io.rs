//! `weft bench small-io`: small and independent MPI-IO (`c/small_io.c`, compiled here
//! with mpicc; this crate does not link MPI) on a local directory through ROMIO and on
//! Weft with write-behind and read-ahead off and on, in the same run, repeats
//! alternating between the three: a BT-IO-like pattern (NAS BT-IO "simple": one
//! `MPI_File_write_at` per row of a 3D block of 5-double cells, appended every step,
//! then read back the same way), IOR-like 100,000-byte transfers (independent and
//! collective, written then read by the next rank), and an HDF5-like mix of small
//! metadata writes and large collective data writes.

use crate::cluster::WeftDir;
use anyhow::{ensure, Result};
use clap::Args;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::collective::{compile_mpi, mpirun_procs, MpiPrograms};
use crate::plot::{Figure, Panel};
use crate::report::{median, svg_next_to, target_lines, write_results, Goal, Table};

pub const LONG_ABOUT: &str = "Small and independent MPI-IO on Weft with write-behind and \
read-ahead off and on, against ROMIO on a local directory, in the same run (repeats alternate \
between the three). Workloads (each phase timed from its first call to its close, the slowest \
rank's): btio, the NAS BT-IO \"simple\" pattern (an N^3 grid of 5-double cells, 3D block \
decomposition, one MPI_File_write_at per row of a rank's block, the solution appended every \
step for --steps steps, then read back row by row); ior_ind and ior_coll, IOR-like 100,000-byte \
transfers over --ior-mib MiB per rank, written to a fresh file (write), written again (rewrite), \
then read by the next rank, independent and collective; h5mix, --datasets datasets each of 16 small metadata writes by rank 0 and a 1 MiB \
collective write per rank. Prints per workload and phase the min/median/max seconds and the \
speed ratio to ROMIO (ROMIO's time over Weft's, per repeat), target lines, writes JSON and an SVG \
plot next to it. The three targets alternate, the order rotating from repeat to repeat. \
The write targets apply to rewrites: a first write's time is mostly the kernel allocating \
page-cache pages, which swings about tenfold from run to run on a VM for any file system, and \
ROMIO's file, unlinked just before, gets pages freed a moment ago while Weft's objects are \
freed later in the background; first writes are shown beside them without a target.\n\n\
Needs a running cluster (`weft up`), mpicc and mpirun (Open MPI, for ROMIO through --mca io \
romio321), and libweft_mpiio.so next to the weft binary. Example:\n  weft bench small-io \
--procs 4 --repeat 3";

#[derive(Args, Debug, Clone)]
pub struct SmallIoArgs {
    /// MPI processes.
    #[arg(long, default_value_t = 4, value_name = "P")]
    pub procs: u32,
    /// Edge of the BT-IO-like grid (cells).
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub n: u32,
    /// BT-IO-like output steps (each appends the whole grid).
    #[arg(long, default_value_t = 20, value_name = "STEPS")]
    pub steps: u32,
    /// MiB per rank of the IOR-like runs.
    #[arg(long, default_value_t = 16, value_name = "MIB")]
    pub ior_mib: u32,
    /// Datasets of the HDF5-like mix.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub datasets: u32,
    /// Runs of each target; min, median and max count.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub repeat: u32,
    /// Weft directory for the files: made by the benchmark (it must not exist) and
    /// removed afterwards with all it holds, unless --keep.
    #[arg(long, default_value = "/bench-small-io", value_name = "PATH")]
    pub path: String,
    /// Keep the Weft directory (--path) and what the benchmark wrote in it.
    #[arg(long)]
    pub keep: bool,
    #[command(flatten)]
    pub programs: MpiPrograms,
    /// Where to write the JSON results; the SVG plot goes next to it (.svg for .json).
    #[arg(long, default_value = "bench-results/small-io.json", value_name = "FILE")]
    pub json: PathBuf,
}

const SOURCE: &str = include_str!("../c/small_io.c");
const TARGETS: [&str; 3] = ["romio local", "weft write-behind off", "weft write-behind on"];

#[derive(Debug, Serialize)]
struct Row {
    workload: String,
    phase: String,
    target: String,
    seconds: Vec<f64>,
    min_s: f64,
    median_s: f64,
    max_s: f64,
    /// ROMIO's time over this target's, per repeat (speed as a multiple of ROMIO's).
    ratios: Vec<f64>,
    ratio_min: f64,
    ratio_median: f64,
    ratio_max: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    benchmark: &'static str,
    procs: u32,
    n: u32,
    steps: u32,
    ior_mib: u32,
    datasets: u32,
    repeat: u32,
    rows: Vec<Row>,
    goals: Vec<Goal>,
}

/// (workload, phase) → seconds, from the program's "<name> write_s X read_s Y" lines.
fn parse(stdout: &str) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for line in stdout.lines() {
        let mut words = line.split_whitespace();
        let Some(name) = words.next() else { continue };
        let rest: Vec<&str> = words.collect();
        for pair in rest.chunks(2) {
            if let [key, value] = pair {
                if let (Some(phase), Ok(v)) = (key.strip_suffix("_s"), value.parse::<f64>()) {
                    out.insert((name.to_owned(), phase.to_owned()), v);
                }
            }
        }
    }
    out
}

fn spread(v: &[f64]) -> (f64, f64, f64) {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(0.0, f64::max);
    (min, median(v), max)
}

pub fn run(a: &SmallIoArgs) -> Result<()> {
    ensure!((1..=1024).contains(&a.procs), "--procs must be in 1..=1024");
    ensure!((1..=512).contains(&a.n), "--n must be in 1..=512");
    ensure!((1..=1000).contains(&a.steps), "--steps must be in 1..=1000");
    ensure!((1..=4096).contains(&a.ior_mib), "--ior-mib must be in 1..=4096");
    ensure!((1..=1000).contains(&a.datasets), "--datasets must be in 1..=1000");
    ensure!((1..=100).contains(&a.repeat), "--repeat must be in 1..=100");
    let (library, local) = a.programs.prepare("weft-bench-small-io-local-")?;
    let work = tempfile::Builder::new()
        .prefix("weft-bench-small-io-")
        .tempdir()?;
    let program = compile_mpi(work.path(), "small_io", SOURCE)?;
    let off = work.path().join("hints-off");
    std::fs::write(&off, "weft_write_behind disable\nweft_read_ahead disable\n")?;
    let on = work.path().join("hints-on");
    std::fs::write(&on, "weft_write_behind enable\nweft_read_ahead enable\n")?;
    let client = weft_client::Client::from_env()?;
    let weft_dir = WeftDir::make(&client, &a.path, a.keep)?;
    let home = std::env::var("WEFT_HOME").ok();
    let dir = weft_dir.path();
    let args = [a.n, a.steps, a.ior_mib, a.datasets].map(|v| v.to_string());
    let command = |target: usize| {
        let mut c = mpirun_procs(a.procs);
        let prefix = if target == 0 {
            c.args(["--mca", "io", "romio321"]);
            format!("{}/", local.path().display())
        } else {
            c.arg("-x").arg(format!("LD_PRELOAD={}", library.display()));
            if let Some(h) = &home {
                c.arg("-x").arg(format!("WEFT_HOME={h}"));
            }
            let hints = if target == 1 { &off } else { &on };
            c.env("WEFT_HINTS", hints).arg("-x").arg("WEFT_HINTS");
            format!("weft:{dir}/")
        };
        c.arg(&program).arg(prefix).args(&args);
        c
    };
    // runs[target][repeat]: (workload, phase) → seconds.
    let targets: Vec<usize> = (0..TARGETS.len()).collect();
    let runs: Vec<Vec<BTreeMap<(String, String), f64>>> =
        crate::report::alternated(&targets, a.repeat, |_, &t| {
            eprintln!("{} ...", TARGETS[t]);
            let ran = crate::report::run_program(command(t))?;
            let parsed = parse(&ran.stdout);
            ensure!(!parsed.is_empty(), "{}: no figures in\n{}", ran.shown, ran.stdout);
            Ok(parsed)
        })?;
    let keys: Vec<(String, String)> = runs[0][0].keys().cloned().collect();
    let mut rows = Vec::new();
    for key in &keys {
        for (t, name) in TARGETS.iter().enumerate() {
            let seconds: Vec<f64> = runs[t]
                .iter()
                .map(|m| m.get(key).copied().unwrap_or(f64::NAN))
                .collect();
            let ratios: Vec<f64> = seconds
                .iter()
                .zip(&runs[0])
                .map(|(s, romio)| romio.get(key).copied().unwrap_or(f64::NAN) / s.max(1e-9))
                .collect();
            let (min_s, median_s, max_s) = spread(&seconds);
            let (ratio_min, ratio_median, ratio_max) = spread(&ratios);
            rows.push(Row {
                workload: key.0.clone(),
                phase: key.1.clone(),
                target: (*name).to_owned(),
                seconds,
                min_s,
                median_s,
                max_s,
                ratios,
                ratio_min,
                ratio_median,
                ratio_max,
            });
        }
    }
    let ratio_of = |workload: &str, phase: &str| {
        rows.iter()
            .find(|r| r.workload == workload && r.phase == phase && r.target == TARGETS[2])
            .map_or(0.0, |r| r.ratio_median)
    };
    let goals = vec![
        Goal::new(
            "BT-IO-like simple write phase",
            "ROMIO on local files",
            0.5,
            ratio_of("btio", "write"),
        ),
        Goal::new(
            "100,000-byte independent rewrites",
            "ROMIO on local files",
            0.7,
            ratio_of("ior_ind", "rewrite"),
        ),
        Goal::new(
            "100,000-byte independent reads",
            "ROMIO on local files",
            0.7,
            ratio_of("ior_ind", "read"),
        ),
        Goal::new(
            "100,000-byte collective rewrites",
            "ROMIO on local files",
            0.7,
            ratio_of("ior_coll", "rewrite"),
        ),
        Goal::new(
            "100,000-byte collective reads",
            "ROMIO on local files",
            0.7,
            ratio_of("ior_coll", "read"),
        ),
    ];
    let mut t = Table::new(&[
        "workload",
        "phase",
        "target",
        "min s",
        "median s",
        "max s",
        "x ROMIO (min/med/max)",
    ]);
    for r in &rows {
        t.row(vec![
            r.workload.clone(),
            r.phase.clone(),
            r.target.clone(),
            format!("{:.4}", r.min_s),
            format!("{:.4}", r.median_s),
            format!("{:.4}", r.max_s),
            format!("{:.2} / {:.2} / {:.2}", r.ratio_min, r.ratio_median, r.ratio_max),
        ]);
    }
    println!("{}", t.render());
    print!("{}", target_lines(&goals));
    let report = Report {
        benchmark: "small-io",
        procs: a.procs,
        n: a.n,
        steps: a.steps,
        ior_mib: a.ior_mib,
        datasets: a.datasets,
        repeat: a.repeat,
        rows,
        goals,
    };
    // One panel per workload: the phases' median seconds, one bar per target.
    let mut panels: Vec<Panel> = Vec::new();
    for r in &report.rows {
        let at = match panels.iter().position(|p| p.title == r.workload) {
            Some(i) => i,
            None => {
                panels.push(Panel::bars(r.workload.clone(), "phase", "s (median)", Vec::new()));
                panels.len() - 1
            }
        };
        panels[at].bar(&r.target, &r.phase, r.median_s);
    }
    let figure = Figure {
        title: format!(
            "weft bench small-io: {} processes, medians of {} alternated runs",
            a.procs, a.repeat
        ),
        panels,
    };
    write_results(&a.json, &svg_next_to(&a.json), &report, &figure)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn figures_are_read_per_workload_and_phase() {
        let m = parse("btio write_s 1.5 read_s 0.25\nnoise\nh5mix write_s 2\n");
        assert_eq!(m[&("btio".into(), "write".into())], 1.5);
        assert_eq!(m[&("btio".into(), "read".into())], 0.25);
        assert_eq!(m[&("h5mix".into(), "write".into())], 2.0);
        assert_eq!(m.len(), 3);
    }
}
