//! `weft bench mpiio-api`: MPI-IO calls beyond blocking access, on Weft, with baselines
//! measured in the same run (`c/mpiio_api.c`, compiled here with mpicc; this crate does
//! not link MPI):
//! - nonblocking writes overlapped with computation: the fraction of the blocking I/O
//!   time that `MPI_File_iwrite_at` + computation + `MPI_Wait` hides, on Weft and, as
//!   the baseline, through ROMIO on the local file system;
//! - `MPI_File_write_ordered` against `MPI_File_write_at_all` of the same bytes at the
//!   same offsets (the ordered call's price: one `MPI_Exscan` and one fetch-and-add at
//!   the metadata manager per call).

use crate::cluster::WeftDir;
use anyhow::{ensure, Result};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use std::process::Command;

use crate::collective::{compile_mpi, mpirun_procs, MpiPrograms};
use crate::plot::{Figure, Panel};
use crate::report::{median, svg_next_to, target_lines, write_results, Goal, Table};

pub const LONG_ABOUT: &str = "Nonblocking writes overlapped with computation and write_ordered \
against write_at_all, on Weft. Overlap: each of --procs processes writes --mib MiB of its own \
block in --chunk-kib chunks with blocking MPI_File_write_at (the I/O time), then runs a compute \
kernel alone for about as long (the computation time), then both at once (per chunk: \
MPI_File_iwrite_at, the chunk's share of the computation, MPI_Wait); the fraction of the I/O time \
hidden is (io + computation - both) / io, on Weft and through ROMIO on the local file system (its \
nonblocking calls block: nothing is hidden). Ordered: --calls calls of MPI_File_write_ordered of \
--ordered-kib KiB per process, against MPI_File_write_at_all of the same bytes at the same \
offsets. Medians of --repeat runs. Prints a table and target lines, writes JSON and an SVG plot next to \
it; the files go in --path, made and removed by the benchmark (--keep keeps it).\n\nNeeds a \
running cluster (`weft up`), mpicc and mpirun, and libweft_mpiio.so next to the weft binary. \
Example:\n  weft bench mpiio-api --procs 4 --mib 64";

#[derive(Args, Debug, Clone)]
pub struct MpiioApiArgs {
    /// MPI processes.
    #[arg(long, default_value_t = 4, value_name = "P")]
    pub procs: u32,
    /// MiB each process writes in the overlap runs.
    #[arg(long, default_value_t = 64, value_name = "MIB")]
    pub mib: u64,
    /// Chunk of each nonblocking write (KiB).
    #[arg(long, default_value_t = 1024, value_name = "KIB")]
    pub chunk_kib: u64,
    /// KiB per process of each ordered call.
    #[arg(long, default_value_t = 1024, value_name = "KIB")]
    pub ordered_kib: u64,
    /// Ordered calls per run.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub calls: u64,
    /// Runs; the medians count.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub repeat: u32,
    /// Weft directory for the files: made by the benchmark (it must not exist) and
    /// removed afterwards with all it holds, unless --keep.
    #[arg(long, default_value = "/bench-mpiio-api", value_name = "PATH")]
    pub path: String,
    /// Keep the Weft directory (--path) and what the benchmark wrote in it.
    #[arg(long)]
    pub keep: bool,
    #[command(flatten)]
    pub programs: MpiPrograms,
    /// Where to write the JSON results; the SVG plot goes next to it (.svg for .json).
    #[arg(long, default_value = "bench-results/mpiio-api.json", value_name = "FILE")]
    pub json: PathBuf,
}

const SOURCE: &str = include_str!("../c/mpiio_api.c");

#[derive(Debug, Serialize)]
struct Overlap {
    target: String,
    io_s: f64,
    compute_s: f64,
    both_s: f64,
    hidden: f64,
    hidden_runs: Vec<f64>,
}

#[derive(Debug, Serialize)]
struct Ordered {
    write_ordered_s: f64,
    write_at_all_s: f64,
    /// write_at_all's time over write_ordered's: write_ordered's speed as a multiple of
    /// write_at_all's.
    ratio: f64,
    ratio_runs: Vec<f64>,
}

#[derive(Debug, Serialize)]
struct Report {
    benchmark: &'static str,
    procs: u32,
    mib_per_process: u64,
    chunk_kib: u64,
    ordered_kib: u64,
    calls: u64,
    overlap: Vec<Overlap>,
    ordered: Ordered,
    goals: Vec<Goal>,
}

/// Runs `command`; returns the numbers of each stdout line starting with `tag`.
fn lines(command: Command, tag: &str) -> Result<Vec<Vec<f64>>> {
    let crate::report::Ran { stdout, shown, .. } = crate::report::run_program(command)?;
    let rows: Vec<Vec<f64>> = stdout
        .lines()
        .filter(|l| l.starts_with(tag))
        .map(|l| {
            l.split_whitespace()
                .skip(2)
                .step_by(2)
                .filter_map(|w| w.parse().ok())
                .collect()
        })
        .collect();
    ensure!(!rows.is_empty(), "{shown}: no '{tag}' lines in\n{stdout}");
    Ok(rows)
}

fn overlap_of(target: &str, runs: &[Vec<f64>]) -> Overlap {
    let hidden_runs: Vec<f64> = runs
        .iter()
        .map(|r| (r[0] + r[1] - r[2]) / r[0].max(1e-9))
        .collect();
    let col = |i: usize| median(&runs.iter().map(|r| r[i]).collect::<Vec<_>>());
    Overlap {
        target: target.to_owned(),
        io_s: col(0),
        compute_s: col(1),
        both_s: col(2),
        hidden: median(&hidden_runs),
        hidden_runs,
    }
}

pub fn run(a: &MpiioApiArgs) -> Result<()> {
    ensure!((1..=1024).contains(&a.procs), "--procs must be in 1..=1024");
    ensure!((1..=4096).contains(&a.mib), "--mib must be in 1..=4096");
    ensure!(
        (1..=65536).contains(&a.chunk_kib) && (a.mib * 1024).is_multiple_of(a.chunk_kib),
        "--chunk-kib must be in 1..=65536 and divide --mib"
    );
    ensure!(
        (1..=65536).contains(&a.ordered_kib),
        "--ordered-kib must be in 1..=65536"
    );
    ensure!((1..=10000).contains(&a.calls), "--calls must be in 1..=10000");
    ensure!((1..=100).contains(&a.repeat), "--repeat must be in 1..=100");
    let (library, local) = a.programs.prepare("weft-bench-mpiio-api-local-")?;
    let work = tempfile::Builder::new()
        .prefix("weft-bench-mpiio-api-")
        .tempdir()?;
    let program = compile_mpi(work.path(), "mpiio_api", SOURCE)?;
    let client = weft_client::Client::from_env()?;
    let weft_dir = WeftDir::make(&client, &a.path, a.keep)?;
    let home = std::env::var("WEFT_HOME").ok();
    let weft = |args: &[String]| {
        let mut c = mpirun_procs(a.procs);
        c.arg("-x").arg(format!("LD_PRELOAD={}", library.display()));
        if let Some(h) = &home {
            c.arg("-x").arg(format!("WEFT_HOME={h}"));
        }
        c.arg(&program).args(args);
        c
    };
    let dir = weft_dir.path();
    let repeat = a.repeat.to_string();
    let overlap_args = |file: String| {
        vec![
            file,
            "overlap".into(),
            a.mib.to_string(),
            a.chunk_kib.to_string(),
            repeat.clone(),
        ]
    };
    eprintln!("overlap on Weft ...");
    let on_weft = lines(weft(&overlap_args(format!("weft:{dir}/overlap"))), "overlap")?;
    eprintln!("overlap through ROMIO on a local file ...");
    let mut romio = mpirun_procs(a.procs);
    romio
        .args(["--mca", "io", "romio321"])
        .arg(&program)
        .args(overlap_args(format!("{}/overlap", local.path().display())));
    let on_romio = lines(romio, "overlap")?;
    eprintln!("write_ordered and write_at_all on Weft ...");
    let ordered_runs = lines(
        weft(&[
            format!("weft:{dir}/ordered"),
            "ordered".into(),
            a.ordered_kib.to_string(),
            a.calls.to_string(),
            repeat.clone(),
        ]),
        "ordered",
    )?;
    let overlap = vec![
        overlap_of("weft", &on_weft),
        overlap_of("romio321 local", &on_romio),
    ];
    let ratio_runs: Vec<f64> = ordered_runs.iter().map(|r| r[1] / r[0].max(1e-9)).collect();
    let ordered = Ordered {
        write_ordered_s: median(&ordered_runs.iter().map(|r| r[0]).collect::<Vec<_>>()),
        write_at_all_s: median(&ordered_runs.iter().map(|r| r[1]).collect::<Vec<_>>()),
        ratio: median(&ratio_runs),
        ratio_runs,
    };
    let goals = vec![
        Goal::new(
            "fraction of the I/O time hidden by nonblocking writes",
            "(of the I/O time alone)",
            0.8,
            overlap[0].hidden,
        ),
        Goal::new("write_ordered speed", "write_at_all's", 0.7, ordered.ratio),
    ];
    let mut t = Table::new(&["overlap", "io s", "compute s", "both s", "I/O hidden", "runs"]);
    for o in &overlap {
        t.row(vec![
            o.target.clone(),
            format!("{:.3}", o.io_s),
            format!("{:.3}", o.compute_s),
            format!("{:.3}", o.both_s),
            format!("{:.2}", o.hidden),
            o.hidden_runs
                .iter()
                .map(|h| format!("{h:.2}"))
                .collect::<Vec<_>>()
                .join(" "),
        ]);
    }
    println!("{}", t.render());
    let mut t = Table::new(&["ordered", "write_ordered s", "write_at_all s", "ratio", "runs"]);
    t.row(vec![
        "weft".into(),
        format!("{:.3}", ordered.write_ordered_s),
        format!("{:.3}", ordered.write_at_all_s),
        format!("{:.2}x", ordered.ratio),
        ordered
            .ratio_runs
            .iter()
            .map(|h| format!("{h:.2}"))
            .collect::<Vec<_>>()
            .join(" "),
    ]);
    println!("{}", t.render());
    print!("{}", target_lines(&goals));
    let report = Report {
        benchmark: "mpiio-api",
        procs: a.procs,
        mib_per_process: a.mib,
        chunk_kib: a.chunk_kib,
        ordered_kib: a.ordered_kib,
        calls: a.calls,
        overlap,
        ordered,
        goals,
    };
    let mut hidden = Panel::bars(
        "nonblocking writes: I/O time hidden",
        "where",
        "fraction",
        Vec::new(),
    );
    let mut times = Panel::bars("overlap: seconds (median)", "where", "s", Vec::new());
    for o in &report.overlap {
        hidden.bar("hidden", &o.target, o.hidden);
        times.bar("I/O alone", &o.target, o.io_s);
        times.bar("computation alone", &o.target, o.compute_s);
        times.bar("both overlapped", &o.target, o.both_s);
    }
    let mut ordered = Panel::bars("ordered writes: seconds (median)", "call", "s", Vec::new());
    ordered.bar("weft", "write_ordered", report.ordered.write_ordered_s);
    ordered.bar("weft", "write_at_all", report.ordered.write_at_all_s);
    let figure = Figure {
        title: format!("weft bench mpiio-api: {} processes", a.procs),
        panels: vec![hidden, times, ordered],
    };
    write_results(&a.json, &svg_next_to(&a.json), &report, &figure)
}
