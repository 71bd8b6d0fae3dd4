//! `weft bench collective`: MPI-IO collective I/O on Weft, method by method, against
//! the MPI library's own MPI-IO on the local file system in the same run. The
//! patterns are those of weft-mpiio's tests (`crates/weft-mpiio/tests/c/patterns.c`,
//! compiled here with mpicc): ROMIO coll_perf's 3D block (N^3 elements of 16 bytes),
//! a 2D CYCLIC(k) darray and an S3D-like struct of four 4D arrays. Each run writes
//! collectively (with MPI_File_sync), reads back collectively and checks the data.
//! This crate does not link MPI: it runs mpirun.

use crate::cluster::WeftDir;
use crate::plot::{Figure, Panel};
use crate::report::{alternated, command_line, median, svg_next_to, write_results, Table, MIB};
use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const LONG_ABOUT: &str = "MPI-IO collective I/O on Weft against the MPI library's own MPI-IO \
(Open MPI's romio321 and ompio) on the local file system, in the same run. Runs, under mpirun with \
--procs processes, ROMIO coll_perf's 3D block pattern (N^3 elements of 16 bytes), the 2D CYCLIC(k) \
matrix for each --k, and an S3D-like struct of four 4D arrays, once per Weft method (weft_cb_method) \
through LD_PRELOAD of libweft_mpiio.so and once per baseline (--repeat times; the median counts). Each run writes collectively (and \
syncs), reads back collectively and checks every element. Prints MiB/s and ratios to ROMIO and to \
two_phase, and writes JSON and an SVG plot.\n\nNeeds a running cluster (`weft up`), mpicc and mpirun, \
and libweft_mpiio.so next to the weft binary. Example:\n  weft bench collective --procs 4 --n 256 --k 8,32,256";

const METHODS: [&str; 8] = [
    "two_phase",
    "interleaved",
    "pipelined",
    "interleaved_pipelined",
    "stripe_aligned",
    "independent",
    "server_directed",
    "auto",
];
/// Where the MPI benchmarks find the interposition library and keep the local files.
#[derive(Args, Debug, Clone)]
pub struct MpiPrograms {
    /// Directory for the baselines' files. Default: the system temporary directory.
    #[arg(long, value_name = "DIR")]
    pub local_dir: Option<PathBuf>,
    /// libweft_mpiio.so. Default: next to this executable.
    #[arg(long, value_name = "FILE")]
    pub library: Option<PathBuf>,
}

impl MpiPrograms {
    /// The library, and a fresh directory (named `prefix`...) for the local files.
    pub(crate) fn prepare(&self, prefix: &str) -> Result<(PathBuf, tempfile::TempDir)> {
        let library = library(self.library.as_deref())?;
        let local = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(self.local_dir.clone().unwrap_or_else(std::env::temp_dir))?;
        Ok((library, local))
    }
}

const PATTERN_SOURCE: &str = include_str!("../../weft-mpiio/tests/c/patterns.c");
/// Largest edge of the 3D block array (16-byte elements: 1024 is 16 GiB).
const N_MAX: u64 = 1024;

#[derive(Args, Debug, Clone)]
pub struct CollectiveArgs {
    /// MPI processes.
    #[arg(long, default_value_t = 4, value_name = "P")]
    pub procs: u32,
    /// Edge of the 3D block array (N^3 elements of 16 bytes).
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub n: u64,
    /// Edge of the CYCLIC(k) matrix (8-byte elements).
    #[arg(long, default_value_t = 4096, value_name = "M")]
    pub cyclic_n: u64,
    /// CYCLIC block sizes to run, comma separated.
    #[arg(long, default_value = "32", value_delimiter = ',', value_name = "K")]
    pub k: Vec<u64>,
    /// Edge of the S3D-like grid (16 values of 8 bytes per point).
    #[arg(long, default_value_t = 128, value_name = "N")]
    pub s3d_n: u64,
    /// Weft methods to run, comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = METHODS.map(String::from))]
    pub methods: Vec<String>,
    /// Open MPI io components for the local baselines, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "romio321,ompio")]
    pub baselines: Vec<String>,
    /// Extra hints for every Weft run (key=value, comma separated), e.g. cb_buffer_size=4194304.
    #[arg(long, value_delimiter = ',')]
    pub hints: Vec<String>,
    /// Runs of each configuration, alternated with the others; the table shows the
    /// median time.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub repeat: u32,
    /// Weft directory for the files: made by the benchmark (it must not exist) and
    /// removed afterwards with all it holds, unless --keep.
    #[arg(long, default_value = "/bench-collective", value_name = "PATH")]
    pub path: String,
    /// Keep the Weft directory (--path) and what the benchmark wrote in it.
    #[arg(long)]
    pub keep: bool,
    #[command(flatten)]
    pub programs: MpiPrograms,
    #[arg(long, default_value = "bench-results/collective.json", value_name = "FILE")]
    pub json: PathBuf,
    /// The SVG plot. Default: next to --json (.svg for .json).
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
struct Row {
    pattern: String,
    /// A Weft method, or "romio321" / "ompio" on the local file system.
    method: String,
    bytes: u64,
    write_s: f64,
    read_s: f64,
    write_mib_s: f64,
    read_mib_s: f64,
    command: String,
}

/// One pattern of the patterns program at one size.
pub(crate) struct Case {
    pub name: String,
    pub only: &'static str,
    pub args: Vec<String>,
    pub bytes: u64,
}

impl Case {
    /// coll_perf's 3D block, N^3 elements of 16 bytes.
    pub(crate) fn block3d(n: u64) -> Case {
        Case {
            name: format!("block3d N={n}"),
            only: "block3d",
            args: vec!["--n".into(), n.to_string()],
            bytes: n.pow(3) * 16,
        }
    }

    /// FLASH-IO's checkpoint: per rank r, `blocks + r % 3` blocks of 8^3 cells of 24
    /// variables of 8 bytes, with `procs` ranks.
    pub(crate) fn flash(blocks: u64, procs: u64) -> Case {
        let total: u64 = (0..procs).map(|r| blocks + r % 3).sum();
        Case {
            name: format!("flash B={blocks}"),
            only: "flash",
            args: vec!["--flash".into(), blocks.to_string()],
            bytes: total * 512 * 24 * 8,
        }
    }

    /// S3D-IO's checkpoint, 16 values of 8 bytes per point of an N^3 grid.
    pub(crate) fn s3d(n: u64) -> Case {
        Case {
            name: format!("s3d N={n}"),
            only: "s3d",
            args: vec!["--s3d".into(), n.to_string()],
            bytes: n.pow(3) * 16 * 8,
        }
    }
}

fn cases(a: &CollectiveArgs) -> Vec<Case> {
    let mut out = vec![Case::block3d(a.n)];
    for &k in &a.k {
        out.push(Case {
            name: format!("cyclic2d M={} k={k}", a.cyclic_n),
            only: "cyclic2d",
            args: vec!["--cyclic".into(), a.cyclic_n.to_string(), k.to_string()],
            bytes: a.cyclic_n.pow(2) * 8,
        });
    }
    out.push(Case::s3d(a.s3d_n));
    out
}

/// libweft_mpiio.so: `explicit`, else next to this executable.
pub(crate) fn library(explicit: Option<&Path>) -> Result<PathBuf> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()?
            .parent()
            .context("executable directory")?
            .join("libweft_mpiio.so"),
    };
    ensure!(
        path.exists(),
        "{} not found: build it (cargo build --release -p weft-mpiio) or pass --library",
        path.display()
    );
    Ok(path)
}

/// The patterns program, compiled with mpicc into `dir`.
pub(crate) fn compile(dir: &Path) -> Result<PathBuf> {
    compile_mpi(dir, "patterns", PATTERN_SOURCE)
}

/// Compiles the MPI C program `source` as `dir/name` with $MPICC (default mpicc).
pub(crate) fn compile_mpi(dir: &Path, name: &str, source: &str) -> Result<PathBuf> {
    let file = dir.join(format!("{name}.c"));
    std::fs::write(&file, source)?;
    let exe = dir.join(name);
    let out = Command::new(std::env::var("MPICC").unwrap_or_else(|_| "mpicc".into()))
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&file)
        .arg("-lm")
        .output()
        .context("running mpicc")?;
    ensure!(
        out.status.success(),
        "mpicc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(exe)
}

/// Runs one mpirun; returns (write s, read s) from the program's --timing line, the
/// write including its sync.
pub(crate) fn run_one(command: Command, only: &str) -> Result<(f64, f64, String)> {
    let (t, shown, _) = run_timed(command, only)?;
    Ok((t.write_s + t.sync_s, t.read_s, shown))
}

/// The times of one run of the patterns program (its --timing line).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub write_s: f64,
    pub sync_s: f64,
    pub read_s: f64,
}

/// Runs one mpirun of the patterns program; returns its --timing line for `only`, the
/// command as shown, and its standard error.
pub(crate) fn run_timed(command: Command, only: &str) -> Result<(Timing, String, String)> {
    let crate::report::Ran {
        stdout,
        stderr,
        shown,
    } = crate::report::run_program(command)?;
    for line in stdout.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() == 7 && w[0] == only && w[1] == "write_s" && w[3] == "read_s" && w[5] == "sync_s" {
            let timing = Timing {
                write_s: w[2].parse()?,
                read_s: w[4].parse()?,
                sync_s: w[6].parse()?,
            };
            return Ok((timing, shown, stderr));
        }
    }
    bail!("{shown}: no timing line in\n{stdout}")
}

/// mpirun with `procs` processes, as root if need be, oversubscribed.
pub(crate) fn mpirun_procs(procs: u32) -> Command {
    let mut c = Command::new("mpirun");
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .args(["--oversubscribe", "--bind-to", "none", "-np", &procs.to_string()]);
    c
}

fn mpirun(a: &CollectiveArgs) -> Command {
    mpirun_procs(a.procs)
}

pub fn run(a: &CollectiveArgs) -> Result<()> {
    ensure!((1..=1024).contains(&a.procs), "--procs must be in 1..=1024");
    ensure!((1..=N_MAX).contains(&a.n), "--n must be in 1..={N_MAX}");
    ensure!((1..=100).contains(&a.repeat), "--repeat must be in 1..=100");
    for m in &a.methods {
        ensure!(
            METHODS.contains(&m.as_str()),
            "unknown method {m} (one of {METHODS:?})"
        );
    }
    let (library, local) = a.programs.prepare("weft-bench-collective-local-")?;
    let work = tempfile::Builder::new()
        .prefix("weft-bench-collective-")
        .tempdir()?;
    let program = compile(work.path())?;
    let client = weft_client::Client::from_env()?;
    let dir = WeftDir::make(&client, &a.path, a.keep)?;
    let home = std::env::var("WEFT_HOME").ok();
    let mut rows: Vec<Row> = Vec::new();
    for case in cases(a) {
        // The local baselines and the Weft methods alternate run by run, the order
        // rotating, so that none always runs first or on a warmer machine.
        let configs: Vec<(bool, &String)> = a
            .baselines
            .iter()
            .map(|io| (true, io))
            .chain(a.methods.iter().map(|m| (false, m)))
            .collect();
        let runs = alternated(&configs, a.repeat, |_, &(local_io, name)| {
            let mut c = mpirun(a);
            if local_io {
                c.args(["--mca", "io", name]).arg(&program);
                c.arg(format!("{}/", local.path().display()));
                c.args(["--only", case.only, "--timing"]).args(&case.args);
            } else {
                c.arg("-x").arg(format!("LD_PRELOAD={}", library.display()));
                if let Some(h) = &home {
                    c.arg("-x").arg(format!("WEFT_HOME={h}"));
                }
                c.arg(&program).arg(format!("weft:{}/", dir.path()));
                c.args(["--only", case.only, "--timing"]).args(&case.args);
                c.arg(format!("weft_cb_method={name}")).args(&a.hints);
            }
            run_one(c, case.only)
        })?;
        for ((_, name), ran) in configs.iter().zip(runs) {
            let w = median(&ran.iter().map(|r| r.0).collect::<Vec<_>>());
            let r = median(&ran.iter().map(|r| r.1).collect::<Vec<_>>());
            let command = ran.last().map(|r| r.2.clone()).unwrap_or_default();
            eprintln!(
                "{}: {name}: write {w:.3} s, read {r:.3} s (median of {})",
                case.name,
                ran.len()
            );
            rows.push(row(&case, name, w, r, command));
        }
    }
    print_table(&rows);
    let results = serde_json::json!({
        "benchmark": "collective",
        "command_line": command_line(),
        "procs": a.procs,
        "rows": rows,
    });
    let svg = a.svg.clone().unwrap_or_else(|| svg_next_to(&a.json));
    write_results(&a.json, &svg, &results, &figure(a, &rows))?;
    Ok(())
}

fn row(case: &Case, method: &str, w: f64, r: f64, command: String) -> Row {
    let mib = case.bytes as f64 / MIB as f64;
    Row {
        pattern: case.name.clone(),
        method: method.to_owned(),
        bytes: case.bytes,
        write_s: w,
        read_s: r,
        write_mib_s: mib / w.max(1e-9),
        read_mib_s: mib / r.max(1e-9),
        command,
    }
}

fn print_table(rows: &[Row]) {
    let mut t = Table::new(&[
        "pattern",
        "method",
        "write MiB/s",
        "read MiB/s",
        "write/romio",
        "read/romio",
        "write/two_phase",
        "read/two_phase",
    ]);
    let find = |pattern: &str, method: &str| rows.iter().find(|r| r.pattern == pattern && r.method == method);
    let ratio = |a: f64, b: Option<f64>| b.map_or("-".to_owned(), |b| format!("{:.2}", a / b));
    for r in rows {
        let romio = find(&r.pattern, "romio321");
        let two = find(&r.pattern, "two_phase");
        t.row(vec![
            r.pattern.clone(),
            r.method.clone(),
            format!("{:.1}", r.write_mib_s),
            format!("{:.1}", r.read_mib_s),
            ratio(r.write_mib_s, romio.map(|x| x.write_mib_s)),
            ratio(r.read_mib_s, romio.map(|x| x.read_mib_s)),
            ratio(r.write_mib_s, two.map(|x| x.write_mib_s)),
            ratio(r.read_mib_s, two.map(|x| x.read_mib_s)),
        ]);
    }
    print!("{}", t.render());
}

/// Write and read MiB/s as grouped bars: one group per pattern, one bar per method
/// (the MPI library's own MPI-IO on local files, the baseline, among them).
fn figure(a: &CollectiveArgs, rows: &[Row]) -> Figure {
    let mut write = Panel::bars("write (MiB/s)", "pattern", "MiB/s", Vec::new());
    let mut read = Panel::bars("read (MiB/s)", "pattern", "MiB/s", Vec::new());
    for r in rows {
        write.bar(&r.method, &r.pattern, r.write_mib_s);
        read.bar(&r.method, &r.pattern, r.read_mib_s);
    }
    Figure {
        title: format!("weft bench collective: {} processes", a.procs),
        panels: vec![write, read],
    }
}
