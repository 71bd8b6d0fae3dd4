//! `weft bench delegation`: I/O delegation. The patterns program's coll_perf 3D block,
//! S3D-IO and FLASH-IO checkpoints written and read back with each process going its
//! own way (independent calls: no exchange) through job-scoped delegates the MPI-IO
//! layer spawns (`weft_delegates=D`, the aligned counts 1, 2, 4, 8 and the unaligned 3
//! with `weft_delegate_mapping=any`) and through persistent ones (`weft up --cache D
//! --cache-mapping aligned`, files `delegated`), against Weft's native collective I/O
//! (the better of two_phase and interleaved_pipelined), Weft's native independent I/O
//! (no delegates) and ROMIO on the local file system, all in one run on clusters it
//! starts itself. Times are the program's write (with sync) and read phases; spawning
//! the delegates happens at open, outside them (said in the closing line).

use anyhow::{ensure, Result};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use std::process::Command;

use crate::clusterfile::Cluster;
use crate::collective::{compile, mpirun_procs, run_median, Case, MpiPrograms};
use crate::plot::{Figure, Panel, Series, XAxis};
use crate::report::{write_results, Table, MIB};

pub const LONG_ABOUT: &str = "I/O delegation: the coll_perf 3D block, the S3D-IO checkpoint and \
the FLASH-IO checkpoint written (with sync) and read back by --procs processes with independent \
calls (romio_cb_write/read disable: each process straight to the delegates owning its bytes, no \
exchange), through job-scoped delegates the MPI-IO layer spawns for each D of --delegates \
(weft_delegates=D; counts that are neither a factor nor a multiple of the io servers with \
weft_delegate_mapping=any) and through persistent delegates (weft up --cache D --cache-mapping \
aligned, files delegated) for each D of --persistent, against Weft's best native collective \
method, Weft's native independent I/O and ROMIO on the local file system, in the same run. \
Starts its own clusters (weft up in temporary homes). Prints MiB/s and ratios, writes JSON and \
an SVG plot.\n\nExample:\n  weft bench delegation --procs 4 --delegates 1,2,4,8,3";

/// Weft's native collective methods; the best of them is the baseline.
const NATIVE_COLLECTIVE: [&str; 2] = ["two_phase", "interleaved_pipelined"];

/// Hints of every run through delegates: independent calls, each process on its own.
const INDEPENDENT: [&str; 2] = ["romio_cb_write=disable", "romio_cb_read=disable"];

#[derive(Args, Debug, Clone)]
pub struct DelegationArgs {
    /// MPI processes.
    #[arg(long, default_value_t = 4, value_name = "P")]
    pub procs: u32,
    /// io servers of every cluster.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub io_servers: u32,
    /// Stripe size (bytes) of every cluster.
    #[arg(long, default_value_t = 65536, value_name = "BYTES")]
    pub stripe: u64,
    /// Job-scoped delegate counts to run, comma separated (used as given: counts that
    /// are neither a factor nor a multiple of --io-servers measure the unaligned case).
    #[arg(long, default_value = "1,2,4,8,3", value_delimiter = ',', value_name = "D")]
    pub delegates: Vec<u32>,
    /// Persistent delegate counts to run (a cluster each; the client uses the aligned
    /// count); empty: none.
    #[arg(long, default_value = "4", value_delimiter = ',', value_name = "D")]
    pub persistent: Vec<u32>,
    /// Memory of each delegate (suffixes K, M, G).
    #[arg(long, default_value = "256M", value_name = "BYTES")]
    pub cache_memory: String,
    /// Edge of the 3D block array (N^3 elements of 16 bytes).
    #[arg(long, default_value_t = 128, value_name = "N")]
    pub n: u64,
    /// Edge of the S3D grid (16 values of 8 bytes per point).
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub s3d_n: u64,
    /// FLASH blocks per process (process r has B + r % 3; 8^3 cells of 24 doubles).
    #[arg(long, default_value_t = 64, value_name = "B")]
    pub flash_blocks: u64,
    /// Runs of each configuration; the median counts.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub repeat: u32,
    #[command(flatten)]
    pub programs: MpiPrograms,
    #[arg(long, default_value = "bench-results/delegation.json", value_name = "FILE")]
    pub json: PathBuf,
    #[arg(long, default_value = "bench-results/delegation.svg", value_name = "FILE")]
    pub svg: PathBuf,
}

#[derive(Serialize, Clone)]
struct Row {
    pattern: String,
    /// "romio local", "native collective (METHOD)", "native independent", "delegates D".
    config: String,
    /// Delegates the client used (0 without delegates).
    delegates_used: u32,
    bytes: u64,
    write_mib_s: f64,
    read_mib_s: f64,
    command: String,
}

fn cases(a: &DelegationArgs) -> Vec<Case> {
    vec![
        Case::block3d(a.n),
        Case::s3d(a.s3d_n),
        Case::flash(a.flash_blocks, a.procs as u64),
    ]
}

fn mib_s(bytes: u64, s: f64) -> f64 {
    bytes as f64 / MIB as f64 / s.max(1e-9)
}

pub fn run(a: &DelegationArgs) -> Result<()> {
    ensure!((1..=1024).contains(&a.procs), "--procs must be in 1..=1024");
    ensure!((1..=64).contains(&a.io_servers), "--io-servers must be in 1..=64");
    ensure!((1..=1024).contains(&a.n), "--n must be in 1..=1024");
    ensure!((1..=512).contains(&a.s3d_n), "--s3d-n must be in 1..=512");
    ensure!(
        (1..=4096).contains(&a.flash_blocks),
        "--flash-blocks must be in 1..=4096"
    );
    ensure!((1..=100).contains(&a.repeat), "--repeat must be in 1..=100");
    ensure!(
        a.delegates
            .iter()
            .chain(&a.persistent)
            .all(|d| (1..=64).contains(d)),
        "--delegates and --persistent must list counts in 1..=64"
    );
    let memory_bytes = weft_config::parse_size(&a.cache_memory).map_err(anyhow::Error::msg)?;
    let (library, local) = a.programs.prepare("weft-bench-deleg-local-")?;
    let weft = std::env::current_exe()?.with_file_name("weft");
    let work = tempfile::Builder::new().prefix("weft-bench-deleg-").tempdir()?;
    let program = compile(work.path())?;
    let base_args = vec![
        "--io".to_string(),
        a.io_servers.to_string(),
        "--stripe-size".into(),
        a.stripe.to_string(),
    ];
    let weft_run = |cluster: &Cluster, case: &Case, hints: &[String]| {
        run_median(a.repeat, case.only, || {
            let mut c = mpirun_procs(a.procs);
            c.arg("-x").arg(format!("LD_PRELOAD={}", library.display()));
            c.arg("-x").arg(format!("WEFT_HOME={}", cluster.home().display()));
            c.arg(&program).arg("weft:/");
            c.args(["--only", case.only, "--timing"])
                .args(&case.args)
                .args(hints);
            c
        })
    };
    let mut rows = Vec::new();
    let mut push = |case: &Case, config: String, used: u32, (w, r, command): (f64, f64, String)| {
        eprintln!("{}: {config}: write {w:.3} s, read {r:.3} s", case.name);
        rows.push(Row {
            pattern: case.name.clone(),
            config,
            delegates_used: used,
            bytes: case.bytes,
            write_mib_s: mib_s(case.bytes, w),
            read_mib_s: mib_s(case.bytes, r),
            command,
        });
    };
    for case in cases(a) {
        let romio = run_median(a.repeat, case.only, || {
            let mut c: Command = mpirun_procs(a.procs);
            c.args(["--mca", "io", "romio321"]).arg(&program);
            c.arg(format!("{}/", local.path().display()));
            c.args(["--only", case.only, "--timing"]).args(&case.args);
            c
        })?;
        push(&case, "romio local".into(), 0, romio);
    }
    {
        let home = tempfile::Builder::new().prefix("weft-bench-deleg-").tempdir()?;
        let cluster = Cluster::start_with(&weft, home, base_args.clone())?;
        for case in cases(a) {
            for method in NATIVE_COLLECTIVE {
                let t = weft_run(&cluster, &case, &[format!("weft_cb_method={method}")])?;
                push(&case, format!("native collective ({method})"), 0, t);
            }
            let t = weft_run(&cluster, &case, &["weft_cb_method=independent".to_string()])?;
            push(&case, "native independent".into(), 0, t);
            for &d in &a.delegates {
                let aligned = weft_client::aligned_count(d as usize, a.io_servers as usize) as u32 == d;
                let mut hints: Vec<String> = INDEPENDENT.iter().map(|h| h.to_string()).collect();
                hints.push(format!("weft_delegates={d}"));
                hints.push(format!("weft_delegate_memory={memory_bytes}"));
                if !aligned {
                    hints.push("weft_delegate_mapping=any".into());
                }
                let t = weft_run(&cluster, &case, &hints)?;
                let unaligned = if aligned { "" } else { ", unaligned" };
                push(&case, format!("job delegates {d}{unaligned}"), d, t);
            }
        }
    }
    for &d in &a.persistent {
        let used = weft_client::aligned_count(d as usize, a.io_servers as usize) as u32;
        let home = tempfile::Builder::new().prefix("weft-bench-deleg-").tempdir()?;
        let mut up = base_args.clone();
        up.extend([
            "--cache".into(),
            d.to_string(),
            "--cache-memory".into(),
            a.cache_memory.clone(),
            "--cache-mapping".into(),
            "aligned".into(),
        ]);
        let cluster = Cluster::start_with(&weft, home, up)?;
        for case in cases(a) {
            let mut hints: Vec<String> = INDEPENDENT.iter().map(|h| h.to_string()).collect();
            hints.push("weft_cache=delegated".into());
            let t = weft_run(&cluster, &case, &hints)?;
            push(&case, format!("persistent delegates {d}"), used, t);
        }
    }
    print_table(&rows);
    let results = serde_json::json!({
        "benchmark": "delegation",
        "command_line": crate::report::command_line(),
        "procs": a.procs,
        "rows": rows,
    });
    write_results(&a.json, &a.svg, &results, &figure(&rows))?;
    println!(
        "(times are the write+sync and read phases; job-scoped delegates are spawned at open, outside them)"
    );
    Ok(())
}

/// A row's write and read rates over `base`'s (the same pattern), "x.xx/y.yy".
fn ratio(r: &Row, base: Option<&Row>) -> String {
    match base {
        Some(b) => format!(
            "{:.2}/{:.2}",
            r.write_mib_s / b.write_mib_s.max(1e-9),
            r.read_mib_s / b.read_mib_s.max(1e-9)
        ),
        None => "-".into(),
    }
}

fn print_table(rows: &[Row]) {
    let mut t = Table::new(&[
        "pattern",
        "config",
        "used",
        "write MiB/s",
        "read MiB/s",
        "w/r vs best coll",
        "w/r vs native ind",
        "w/r vs romio",
    ]);
    for r in rows {
        let same: Vec<&Row> = rows.iter().filter(|x| x.pattern == r.pattern).collect();
        let best_collective = same
            .iter()
            .filter(|x| x.config.starts_with("native collective"))
            .max_by(|x, y| x.write_mib_s.total_cmp(&y.write_mib_s))
            .copied();
        let independent = same.iter().find(|x| x.config == "native independent").copied();
        let romio = same.iter().find(|x| x.config == "romio local").copied();
        t.row(vec![
            r.pattern.clone(),
            r.config.clone(),
            r.delegates_used.to_string(),
            format!("{:.1}", r.write_mib_s),
            format!("{:.1}", r.read_mib_s),
            ratio(r, best_collective),
            ratio(r, independent),
            ratio(r, romio),
        ]);
    }
    println!("{}", t.render());
}

/// Write and read rate against the delegates used, per pattern; the baselines as
/// flat lines over the same range.
fn figure(rows: &[Row]) -> Figure {
    let mut patterns: Vec<&str> = Vec::new();
    for r in rows {
        if !patterns.contains(&r.pattern.as_str()) {
            patterns.push(&r.pattern);
        }
    }
    let mut panels = Vec::new();
    for pattern in patterns {
        for (phase, rate) in [
            ("write", (|r: &Row| r.write_mib_s) as fn(&Row) -> f64),
            ("read", |r: &Row| r.read_mib_s),
        ] {
            let of = |p: &dyn Fn(&Row) -> bool| -> Vec<&Row> {
                rows.iter().filter(|r| r.pattern == pattern && p(r)).collect()
            };
            let points = |prefix: &str| -> Vec<(f64, f64)> {
                let mut p: Vec<(f64, f64)> = of(&|r| r.config.starts_with(prefix))
                    .iter()
                    .map(|r| (r.delegates_used as f64, rate(r)))
                    .collect();
                p.sort_by(|x, y| x.0.total_cmp(&y.0));
                p
            };
            let job = points("job delegates");
            let persistent = points("persistent delegates");
            let xs = || job.iter().chain(&persistent).map(|p| p.0);
            let (lo, hi) = (
                xs().fold(f64::INFINITY, f64::min).min(1.0),
                xs().fold(1.0, f64::max),
            );
            let mut series = vec![
                Series {
                    name: "job-scoped delegates (independent)".into(),
                    points: job,
                },
                Series {
                    name: "persistent delegates (independent)".into(),
                    points: persistent,
                },
            ];
            for r in of(&|r| r.delegates_used == 0) {
                series.push(Series {
                    name: r.config.clone(),
                    points: vec![(lo, rate(r)), (hi, rate(r))],
                });
            }
            panels.push(Panel {
                title: format!("{pattern} {phase} (MiB/s)"),
                x_label: "delegates used".into(),
                y_label: "MiB/s".into(),
                x_axis: XAxis::Log2,
                series,
            });
        }
    }
    Figure {
        title: "I/O delegation".into(),
        panels,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(config: &str, used: u32, w: f64) -> Row {
        Row {
            pattern: "flash B=4".into(),
            config: config.into(),
            delegates_used: used,
            bytes: 1 << 20,
            write_mib_s: w,
            read_mib_s: w * 2.0,
            command: String::new(),
        }
    }

    #[test]
    fn the_figure_plots_bandwidth_against_delegates_with_the_baselines_flat() {
        let rows = vec![
            row("romio local", 0, 50.0),
            row("native independent", 0, 20.0),
            row("job delegates 4", 4, 80.0),
            row("job delegates 1", 1, 30.0),
            row("persistent delegates 2", 2, 60.0),
        ];
        let f = figure(&rows);
        assert_eq!(f.panels.len(), 2);
        let read = &f.panels[1];
        assert_eq!(read.series[0].points, [(1.0, 60.0), (4.0, 160.0)]);
        assert_eq!(read.series[1].points, [(2.0, 120.0)]);
        assert_eq!(read.series[2].name, "romio local");
        assert_eq!(read.series[2].points, [(1.0, 100.0), (4.0, 100.0)]);
        crate::plot::assert_draws(&f);
    }
}
