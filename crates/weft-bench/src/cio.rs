//! `weft bench cio`: the collective-I/O-aware caching study in one command. Runs the
//! MPI-Tile-IO, IOR and mpi-io-test workloads (`c/cio_workloads.c`, compiled here with
//! mpicc) on a Weft cluster with tracing on, generates the same workloads' traces for
//! a larger number of processes (weft-trace's generators), and simulates every trace
//! set: hit rate against cache size for LRU, LFU, FIFO, ARC and S3-FIFO, fed the
//! aggregated stream and the original (collective-I/O-aware) one. The baseline is
//! aggregated LRU, measured in the same run. `weft bench cio-record` runs one workload
//! and keeps its traces.

use crate::cluster::WeftDir;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use weft_trace::synth::{self, Setup, Workload};

use crate::collective::{compile_mpi, library, mpirun_procs};
use crate::plot::{Figure, Panel};
use crate::report::{target_lines, write_results, Goal, Table};
use crate::simulate::{self, Report, SimArgs};

const PROGRAM_SOURCE: &str = include_str!("../c/cio_workloads.c");
const WORKLOADS: [&str; 3] = ["tile", "ior", "mpiio-test"];
/// The seed's figure: collective-I/O-aware ARC over aggregated LRU on MPI-Tile-IO.
const TILE_ARC_IMPROVEMENT_MIN: f64 = 0.60;

pub const LONG_ABOUT: &str = "The collective-I/O-aware caching study: runs MPI-Tile-IO (overlapping \
tiles of a 2D dataset read collectively, several passes), IOR-like segmented and strided rereads and \
mpi-io-test-like rereads with --procs processes on the running cluster (LD_PRELOAD of libweft_mpiio.so, \
weft_cb_method=two_phase, every process traced with WEFT_TRACE), generates the same workloads' traces \
for --synthetic-procs processes without running them, and simulates each trace set (`weft sim`): hit rate \
against cache size (nine sizes from 1/16 to 2x the data touched) for LRU, LFU, FIFO, ARC and S3-FIFO, \
fed the aggregated requests and the processes' original ones. Prints per trace set the hit rates and each \
series' mean against aggregated LRU, a summary, and the target (CIO-aware ARC >= +60% over aggregated LRU \
on the tile workload); writes the traces, JSON, one SVG plot per trace set and cio.svg (mean hit rates) under --out.\n\nNeeds a \
running cluster (`weft up`), mpicc and mpirun, and libweft_mpiio.so next to the weft binary (--no-run: \
the generated traces only). Example:\n  weft bench cio --procs 4 --synthetic-procs 32";

#[derive(Args, Debug, Clone)]
pub struct CioArgs {
    /// MPI processes of the recorded runs.
    #[arg(long, default_value_t = 4, value_name = "P")]
    pub procs: u32,
    /// Processes of the generated traces (0: none).
    #[arg(long, default_value_t = 32, value_name = "P")]
    pub synthetic_procs: u32,
    /// Workloads, comma separated: tile, ior, mpiio-test.
    #[arg(long, value_delimiter = ',', default_values_t = WORKLOADS.map(String::from))]
    pub workloads: Vec<String>,
    /// Passes (tile) or iterations (ior, mpiio-test). Default: each workload's own.
    #[arg(long)]
    pub passes: Option<u32>,
    /// Generate traces only: run nothing on a cluster.
    #[arg(long)]
    pub no_run: bool,
    /// Directory for traces, JSON and plots.
    #[arg(long, default_value = "bench-results/cio", value_name = "DIR")]
    pub out: PathBuf,
    #[command(flatten)]
    pub run: RunArgs,
}

/// How a workload runs on the cluster.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Weft directory for the workloads' files: made for each run (it must not exist)
    /// and removed afterwards with all it holds, unless --keep.
    #[arg(long, default_value = "/bench-cio", value_name = "PATH")]
    pub path: String,
    /// Keep the Weft directory (--path) and the workload's file in it.
    #[arg(long)]
    pub keep: bool,
    /// libweft_mpiio.so. Default: next to this executable.
    #[arg(long, value_name = "FILE")]
    pub library: Option<PathBuf>,
    /// Extra hints (key=value, comma separated); weft_cb_method=two_phase is always set
    /// first (the seed aggregates with ROMIO's two-phase I/O).
    #[arg(long, value_delimiter = ',')]
    pub hints: Vec<String>,
}

#[derive(Args, Debug, Clone)]
pub struct CioRecordArgs {
    /// tile, ior or mpiio-test.
    pub workload: String,
    #[arg(long, default_value_t = 4, value_name = "P")]
    pub procs: u32,
    /// Passes (tile) or iterations (ior, mpiio-test).
    #[arg(long)]
    pub passes: Option<u32>,
    /// Directory for the traces (one *.wtrace per process; old ones are removed).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    #[command(flatten)]
    pub run: RunArgs,
}

/// One trace set and what was found in it.
#[derive(Debug, Serialize)]
struct TraceSet {
    workload: String,
    procs: u32,
    /// "recorded" on the cluster or "generated".
    source: String,
    traces: String,
    /// Recorded runs: the read phase.
    read_s: Option<f64>,
    read_mib_s: Option<f64>,
    command: Option<String>,
    report: Report,
}

#[derive(Debug, Serialize)]
struct Output {
    command: String,
    sets: Vec<TraceSet>,
    goals: Vec<Goal>,
}

fn workload_of(name: &str, passes: Option<u32>) -> Result<Workload> {
    let w = Workload::named(name)
        .with_context(|| format!("unknown workload {name} (one of {})", WORKLOADS.join(", ")))?;
    Ok(match passes {
        Some(p) => w.with_passes(p),
        None => w,
    })
}

/// Runs `workload` under mpirun with every process tracing into `traces`; returns the
/// read phase's seconds and bytes and the command line.
fn record(
    workload: &Workload,
    procs: u32,
    run: &RunArgs,
    traces: &Path,
    program: &Path,
) -> Result<(f64, u64, String)> {
    let library = library(run.library.as_deref())?;
    let client = weft_client::Client::from_env()?;
    let dir = WeftDir::make(&client, &run.path, run.keep)?;
    let file = format!("{}/{}", dir.path(), workload.name());
    simulate::write_traces(traces, &[])?;
    let traces = std::fs::canonicalize(traces)?;
    let mut c: Command = mpirun_procs(procs);
    c.arg("-x").arg(format!("LD_PRELOAD={}", library.display()));
    if let Ok(h) = std::env::var("WEFT_HOME") {
        c.arg("-x").arg(format!("WEFT_HOME={h}"));
    }
    c.arg("-x").arg(format!("WEFT_TRACE={}", traces.display()));
    c.arg(program).arg(format!("weft:{file}"));
    c.args(workload.program_args());
    c.arg("weft_cb_method=two_phase").args(&run.hints);
    let crate::report::Ran { stdout, shown, .. } = crate::report::run_program(c)?;
    for line in stdout.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() == 6 && w[0] == "cio" && w[2] == "read_s" && w[4] == "bytes" {
            return Ok((w[3].parse()?, w[5].parse()?, shown));
        }
    }
    bail!("{shown}: no timing line in\n{stdout}")
}

fn sim_args(traces: &Path, svg: PathBuf) -> SimArgs {
    SimArgs {
        trace_dir: traces.to_owned(),
        policy: ["lru", "lfu", "fifo", "arc", "s3fifo"].map(String::from).to_vec(),
        stream: ["aggregated", "original"].map(String::from).to_vec(),
        unrequested: ["cold", "none"].map(String::from).to_vec(),
        cache_sizes: Vec::new(),
        block_size: None,
        managers: 1,
        mapping: "hashed".into(),
        ops: "reads".into(),
        json: false,
        svg,
        no_svg: false,
        threads: None,
    }
}

/// Simulates one trace set; prints its hit rates per size and series.
fn simulate_set(traces: &Path, svg: &Path, title: &str) -> Result<Report> {
    let args = sim_args(traces, svg.to_owned());
    let files = simulate::read_traces(traces)?;
    let mut report = simulate::simulate(&files, &args)?;
    report.traces = traces.display().to_string();
    simulate::write_svg(svg, title, &report.results)?;
    println!("\n== {title} ==");
    print!("{}", hit_rate_grid(&report));
    Ok(report)
}

/// Hit rates as a grid: one row per series, one column per cache size (as a fraction
/// of the data touched), then the series' mean and its improvement over aggregated LRU.
fn hit_rate_grid(report: &Report) -> String {
    let mut sizes: Vec<(u64, f64)> = Vec::new();
    for r in &report.results {
        if !sizes.iter().any(|s| s.0 == r.cache_bytes) {
            sizes.push((r.cache_bytes, r.cache_fraction));
        }
    }
    let mut header: Vec<String> = vec!["series".into()];
    header.extend(sizes.iter().map(|s| format!("{:.3}x", s.1)));
    header.extend(["mean".into(), "vs agg LRU".into(), "per size".into()]);
    let header_refs: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t = Table::new(&header_refs);
    for s in &report.summary {
        let mut row = vec![s.series.clone()];
        for (bytes, _) in &sizes {
            let r = report
                .results
                .iter()
                .find(|r| r.series() == s.series && r.cache_bytes == *bytes);
            row.push(r.map_or("-".into(), |r| format!("{:.3}", r.hit_rate)));
        }
        row.push(format!("{:.3}", s.mean_hit_rate));
        row.push(
            s.improvement_of_mean
                .map_or("-".into(), |x| format!("{:+.1}%", x * 100.0)),
        );
        row.push(
            s.mean_improvement
                .map_or("-".into(), |x| format!("{:+.1}%", x * 100.0)),
        );
        t.row(row);
    }
    format!(
        "{} processes, {} MiB touched in {} B blocks; cache sizes as multiples of the data touched\n{}",
        report.processes,
        report.touched_bytes >> 20,
        report.block_size_bytes,
        t.render()
    )
}

/// Aggregated LRU's mean hit rate, the baseline of the tile target (0 if not simulated).
fn baseline_hits(report: &Report) -> f64 {
    report
        .summary
        .iter()
        .find(|s| s.series == "lru aggregated")
        .map_or(0.0, |s| s.mean_hit_rate)
}

fn improvement(report: &Report, series: &str) -> (Option<f64>, Option<f64>) {
    report
        .summary
        .iter()
        .find(|s| s.series == series)
        .map_or((None, None), |s| (s.improvement_of_mean, s.mean_improvement))
}

pub fn run(a: &CioArgs) -> Result<()> {
    ensure!((1..=1024).contains(&a.procs), "--procs must be in 1..=1024");
    ensure!(
        a.synthetic_procs <= synth::PROCS_MAX,
        "--synthetic-procs at most {}",
        synth::PROCS_MAX
    );
    let workloads: Vec<Workload> = a
        .workloads
        .iter()
        .map(|w| workload_of(w, a.passes))
        .collect::<Result<_>>()?;
    let work = tempfile::Builder::new().prefix("weft-bench-cio-").tempdir()?;
    let program = if a.no_run {
        None
    } else {
        Some(compile_mpi(work.path(), "cio_workloads", PROGRAM_SOURCE)?)
    };
    let mut sets = Vec::new();
    for w in &workloads {
        if let Some(program) = &program {
            let name = format!("{}-p{}", w.name(), a.procs);
            let traces = a.out.join("traces").join(&name);
            let (seconds, bytes, command) = record(w, a.procs, &a.run, &traces, program)?;
            eprintln!(
                "{name}: read {:.1} MiB in {seconds:.3} s; traces in {}",
                bytes as f64 / (1u64 << 20) as f64,
                traces.display()
            );
            let report = simulate_set(
                &traces,
                &a.out.join(format!("{name}.svg")),
                &format!("{} recorded, {} processes", w.name(), a.procs),
            )?;
            sets.push(TraceSet {
                workload: w.name().into(),
                procs: a.procs,
                source: "recorded".into(),
                traces: traces.display().to_string(),
                read_s: Some(seconds),
                read_mib_s: Some(bytes as f64 / (1u64 << 20) as f64 / seconds.max(1e-9)),
                command: Some(command),
                report,
            });
        }
        if a.synthetic_procs > 0 {
            let name = format!("{}-p{}-generated", w.name(), a.synthetic_procs);
            let traces = a.out.join("traces").join(&name);
            let generated = synth::generate(w, &Setup::new(a.synthetic_procs)).map_err(anyhow::Error::msg)?;
            simulate::write_traces(&traces, &generated)?;
            let report = simulate_set(
                &traces,
                &a.out.join(format!("{name}.svg")),
                &format!("{} generated, {} processes", w.name(), a.synthetic_procs),
            )?;
            sets.push(TraceSet {
                workload: w.name().into(),
                procs: a.synthetic_procs,
                source: "generated".into(),
                traces: traces.display().to_string(),
                read_s: None,
                read_mib_s: None,
                command: None,
                report,
            });
        }
    }
    println!("\n== summary: mean hit rate over the cache sizes, and over aggregated LRU (of the means / mean per size) ==");
    let mut t = Table::new(&[
        "workload",
        "procs",
        "source",
        "agg LRU",
        "CIO LRU",
        "CIO LFU",
        "CIO ARC",
        "CIO S3-FIFO",
        "CIO ARC vs agg LRU",
        "CIO S3-FIFO vs agg LRU",
    ]);
    let mean = |r: &Report, s: &str| {
        r.summary
            .iter()
            .find(|x| x.series == s)
            .map_or("-".into(), |x| format!("{:.3}", x.mean_hit_rate))
    };
    let both = |v: (Option<f64>, Option<f64>)| {
        let p = |x: Option<f64>| x.map_or("-".into(), |x| format!("{:+.1}%", x * 100.0));
        format!("{} / {}", p(v.0), p(v.1))
    };
    let mut goals = Vec::new();
    let mut not_applicable = Vec::new();
    for s in &sets {
        let r = &s.report;
        t.row(vec![
            s.workload.clone(),
            s.procs.to_string(),
            s.source.clone(),
            mean(r, "lru aggregated"),
            mean(r, "lru original (cold)"),
            mean(r, "lfu original (cold)"),
            mean(r, "arc original (cold)"),
            mean(r, "s3fifo original (cold)"),
            both(improvement(r, "arc original (cold)")),
            both(improvement(r, "s3fifo original (cold)")),
        ]);
        if s.workload == "tile" {
            let what = format!(
                "tile ({} processes, {}): CIO-aware ARC mean hit rate",
                s.procs, s.source
            );
            // An improvement over a hit rate of 0 is no ratio: no target applies.
            match improvement(r, "arc original (cold)").0 {
                Some(of_means) if baseline_hits(r) > 0.0 => goals.push(Goal::new(
                    what,
                    "aggregated LRU's",
                    1.0 + TILE_ARC_IMPROVEMENT_MIN,
                    1.0 + of_means,
                )),
                _ => not_applicable.push(format!(
                    "no target: {what}: aggregated LRU's hit rate is 0 (no reuse at this cache size to improve on)"
                )),
            }
        }
    }
    print!("{}", t.render());
    print!("{}", target_lines(&goals));
    for line in &not_applicable {
        println!("{line}");
    }
    println!("note: the online target (the cache tier with CIO-aware ARC reading the tile workload >= 1.3x faster than aggregated LRU at half the data) needs the cache managers to apply the attached pattern; not measured here");
    let figure = summary_figure(&sets);
    write_results(
        &a.out.join("cio.json"),
        &a.out.join("cio.svg"),
        &Output {
            command: crate::report::command_line(),
            sets,
            goals,
        },
        &figure,
    )?;
    println!(
        "hit rate vs cache size per trace set: {}/<set>.svg",
        a.out.display()
    );
    Ok(())
}

/// Mean hit rate over the cache sizes per trace set: aggregated LRU (the baseline) and
/// the collective-I/O-aware policies.
fn summary_figure(sets: &[TraceSet]) -> Figure {
    let mut panel = Panel::bars(
        "mean hit rate over the cache sizes",
        "trace set",
        "hit rate",
        Vec::new(),
    );
    for s in sets {
        let set = format!("{} p{} {}", s.workload, s.procs, s.source);
        for (label, series) in SUMMARY_SERIES {
            if let Some(x) = s.report.summary.iter().find(|x| x.series == series) {
                panel.bar(label, &set, x.mean_hit_rate);
            }
        }
    }
    Figure {
        title: "weft bench cio: collective-I/O-aware caching".into(),
        panels: vec![panel],
    }
}

/// The series of the summary, as labelled in its table and figure.
const SUMMARY_SERIES: [(&str, &str); 5] = [
    ("agg LRU", "lru aggregated"),
    ("CIO LRU", "lru original (cold)"),
    ("CIO LFU", "lfu original (cold)"),
    ("CIO ARC", "arc original (cold)"),
    ("CIO S3-FIFO", "s3fifo original (cold)"),
];

/// `weft bench cio-record`: one workload on the cluster, traced.
pub fn run_record(a: &CioRecordArgs) -> Result<()> {
    ensure!((1..=1024).contains(&a.procs), "--procs must be in 1..=1024");
    let w = workload_of(&a.workload, a.passes)?;
    let work = tempfile::Builder::new().prefix("weft-bench-cio-").tempdir()?;
    let program = compile_mpi(work.path(), "cio_workloads", PROGRAM_SOURCE)?;
    let (seconds, bytes, command) = record(&w, a.procs, &a.run, &a.out, &program)?;
    println!("{command}");
    println!(
        "{}: {} processes read {:.1} MiB in {seconds:.3} s; traces in {} (weft sim {})",
        w.name(),
        a.procs,
        bytes as f64 / (1u64 << 20) as f64,
        a.out.display(),
        a.out.display()
    );
    Ok(())
}
