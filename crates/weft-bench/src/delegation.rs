//! `weft bench delegation`: I/O delegation. The patterns program's coll_perf 3D block,
//! S3D-IO and FLASH-IO checkpoints written and read back with each process going its
//! own way (independent calls: no exchange) through job-scoped delegates the MPI-IO
//! layer spawns (`weft_delegates=D`, the aligned counts 1, 2, 4, 8 and the unaligned 3
//! with `weft_delegate_mapping=any`) and through persistent ones (`weft up --cache D
//! --cache-mapping aligned`, files `delegated`), against Weft's native collective I/O
//! (the better of two_phase and interleaved_pipelined), Weft's native independent I/O
//! (no delegates) and ROMIO on the local file system, all in one run on clusters it
//! starts itself (all up at once, so that every configuration of a pattern alternates
//! with the others run by run, the order rotating; MiB/s as median (min-max)). Times are
//! the program's write (with sync) and read phases; spawning the delegates happens at
//! open, outside them (said in the closing line).

use anyhow::{ensure, Result};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use std::process::Command;

use crate::clusterfile::Cluster;
use crate::collective::{compile, mpirun_procs, run_one, Case, MpiPrograms};
use crate::plot::{Figure, Panel, Series, XAxis};
use crate::report::{alternated, svg_next_to, write_results, Spread, Table, MIB};

pub const LONG_ABOUT: &str = "I/O delegation: the coll_perf 3D block, the S3D-IO checkpoint and \
the FLASH-IO checkpoint written (with sync) and read back by --procs processes with independent \
calls (romio_cb_write/read disable: each process straight to the delegates owning its bytes, no \
exchange), through job-scoped delegates the MPI-IO layer spawns for each D of --delegates \
(weft_delegates=D; counts that are neither a factor nor a multiple of the io servers with \
weft_delegate_mapping=any) and through persistent delegates (weft up --cache D --cache-mapping \
aligned, files delegated) for each D of --persistent, against Weft's best native collective \
method, Weft's native independent I/O and ROMIO on the local file system, in the same run. \
Starts its own clusters (weft up in temporary homes), all up at once: every configuration of a \
pattern runs --repeat times, alternated with the others run by run, the order rotating. Prints \
MiB/s as median (min-max) of the runs and ratios of the medians, writes JSON and an SVG plot.\n\nExample:\n  weft bench delegation --procs 4 --delegates 1,2,4,8,3";

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
    /// Runs of each configuration, alternated with the others; the median counts.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub repeat: u32,
    #[command(flatten)]
    pub programs: MpiPrograms,
    #[arg(long, default_value = "bench-results/delegation.json", value_name = "FILE")]
    pub json: PathBuf,
    /// The SVG plot. Default: next to --json (.svg for .json).
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

#[derive(Serialize, Clone)]
struct Row {
    pattern: String,
    /// "romio local", "native collective (METHOD)", "native independent", "delegates D".
    config: String,
    /// Delegates the client used (0 without delegates).
    delegates_used: u32,
    bytes: u64,
    /// Medians of the runs.
    write_mib_s: f64,
    read_mib_s: f64,
    /// The runs' min, median and max.
    write_mib_s_spread: Spread,
    read_mib_s_spread: Spread,
    command: String,
}

/// Where a configuration runs: ROMIO on the local directory, or through
/// libweft_mpiio.so on one of the clusters (an index into the clusters started).
#[derive(Clone, Copy, Debug, PartialEq)]
enum On {
    Local,
    Cluster(usize),
}

/// One configuration of the comparison.
#[derive(Clone, Debug, PartialEq)]
struct Config {
    name: String,
    /// Delegates the client uses (0 without delegates).
    used: u32,
    on: On,
    hints: Vec<String>,
}

/// Every configuration, the baselines first: ROMIO on the local file system, Weft's
/// native collective methods and its independent I/O (cluster 0, which also serves the
/// job-scoped delegates), then the persistent delegates (cluster 1 on, one per count of
/// --persistent).
fn configs(a: &DelegationArgs, memory_bytes: u64) -> Vec<Config> {
    let config = |name: String, used, on, hints: Vec<String>| Config {
        name,
        used,
        on,
        hints,
    };
    let independent = || INDEPENDENT.iter().map(|h| h.to_string()).collect::<Vec<_>>();
    let mut out = vec![config("romio local".into(), 0, On::Local, Vec::new())];
    for method in NATIVE_COLLECTIVE {
        let hint = format!("weft_cb_method={method}");
        out.push(config(
            format!("native collective ({method})"),
            0,
            On::Cluster(0),
            vec![hint],
        ));
    }
    let hint = "weft_cb_method=independent".to_string();
    out.push(config("native independent".into(), 0, On::Cluster(0), vec![hint]));
    for &d in &a.delegates {
        let aligned = weft_client::aligned_count(d as usize, a.io_servers as usize) as u32 == d;
        let mut hints = independent();
        hints.push(format!("weft_delegates={d}"));
        hints.push(format!("weft_delegate_memory={memory_bytes}"));
        if !aligned {
            hints.push("weft_delegate_mapping=any".into());
        }
        let unaligned = if aligned { "" } else { ", unaligned" };
        out.push(config(
            format!("job delegates {d}{unaligned}"),
            d,
            On::Cluster(0),
            hints,
        ));
    }
    for (i, &d) in a.persistent.iter().enumerate() {
        let used = weft_client::aligned_count(d as usize, a.io_servers as usize) as u32;
        let mut hints = independent();
        hints.push("weft_cache=delegated".into());
        out.push(config(
            format!("persistent delegates {d}"),
            used,
            On::Cluster(1 + i),
            hints,
        ));
    }
    out
}

/// The rows of one pattern: every configuration run `repeat` times, alternated (see
/// `report::alternated`); `run` gives one run's write and read seconds and the command.
fn measure(
    case: &Case,
    configs: &[Config],
    repeat: u32,
    mut run: impl FnMut(&Config) -> Result<(f64, f64, String)>,
) -> Result<Vec<Row>> {
    let runs = alternated(configs, repeat, |_, config| {
        let (w, r, command) = run(config)?;
        eprintln!("{}: {}: write {w:.3} s, read {r:.3} s", case.name, config.name);
        Ok((w, r, command))
    })?;
    Ok(configs
        .iter()
        .zip(runs)
        .map(|(config, ran)| {
            let rate = |f: &dyn Fn(&(f64, f64, String)) -> f64| {
                Spread::of(&ran.iter().map(|r| mib_s(case.bytes, f(r))).collect::<Vec<_>>())
            };
            let (write, read) = (rate(&|r| r.0), rate(&|r| r.1));
            Row {
                pattern: case.name.clone(),
                config: config.name.clone(),
                delegates_used: config.used,
                bytes: case.bytes,
                write_mib_s: write.median,
                read_mib_s: read.median,
                write_mib_s_spread: write,
                read_mib_s_spread: read,
                command: ran.last().map(|r| r.2.clone()).unwrap_or_default(),
            }
        })
        .collect())
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
    // Every cluster up at once, so that the configurations alternate: the native one
    // (native methods and job-scoped delegates), then one per persistent count.
    let mut clusters = Vec::new();
    let home = tempfile::Builder::new().prefix("weft-bench-deleg-").tempdir()?;
    clusters.push(Cluster::start_with(&weft, home, base_args.clone())?);
    for &d in &a.persistent {
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
        clusters.push(Cluster::start_with(&weft, home, up)?);
    }
    let configs = configs(a, memory_bytes);
    let mut rows = Vec::new();
    for case in cases(a) {
        rows.extend(measure(&case, &configs, a.repeat, |config| {
            let mut c: Command = mpirun_procs(a.procs);
            match config.on {
                On::Local => {
                    c.args(["--mca", "io", "romio321"]).arg(&program);
                    c.arg(format!("{}/", local.path().display()));
                }
                On::Cluster(i) => {
                    c.arg("-x").arg(format!("LD_PRELOAD={}", library.display()));
                    c.arg("-x")
                        .arg(format!("WEFT_HOME={}", clusters[i].home().display()));
                    c.arg(&program).arg("weft:/");
                }
            }
            c.args(["--only", case.only, "--timing"])
                .args(&case.args)
                .args(&config.hints);
            run_one(c, case.only)
        })?);
    }
    drop(clusters);
    print_table(&rows);
    let results = serde_json::json!({
        "benchmark": "delegation",
        "command_line": crate::report::command_line(),
        "procs": a.procs,
        "rows": rows,
    });
    let svg = a.svg.clone().unwrap_or_else(|| svg_next_to(&a.json));
    write_results(&a.json, &svg, &results, &figure(&rows))?;
    println!(
        "(MiB/s: median (min-max) of {} runs, every configuration of a pattern alternated with the \
         others, the order rotating; ratios of medians; times are the write+sync and read phases; \
         job-scoped delegates are spawned at open, outside them)",
        a.repeat
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
        "write MiB/s median (min-max)",
        "read MiB/s median (min-max)",
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
            r.write_mib_s_spread.cell(1),
            r.read_mib_s_spread.cell(1),
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
            write_mib_s_spread: Spread::of(&[w]),
            read_mib_s_spread: Spread::of(&[w * 2.0]),
            command: String::new(),
        }
    }

    fn args(delegates: Vec<u32>, persistent: Vec<u32>) -> DelegationArgs {
        DelegationArgs {
            procs: 2,
            io_servers: 4,
            stripe: 65536,
            delegates,
            persistent,
            cache_memory: "1M".into(),
            n: 8,
            s3d_n: 4,
            flash_blocks: 1,
            repeat: 3,
            programs: MpiPrograms {
                local_dir: None,
                library: None,
            },
            json: "d.json".into(),
            svg: None,
        }
    }

    /// Every configuration of a pattern alternates with the others, the order rotating
    /// round by round, and each row keeps the median, min and max of its runs. Before,
    /// each configuration's repeats ran back to back (the baselines first, the
    /// persistent delegates last, on clusters started one after the other) and only the
    /// median was kept.
    #[test]
    fn configurations_alternate_round_by_round_and_rows_keep_their_spread() {
        let a = args(vec![1, 3], vec![4]);
        let configs = configs(&a, 1 << 20);
        let names: Vec<&str> = configs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "romio local",
                "native collective (two_phase)",
                "native collective (interleaved_pipelined)",
                "native independent",
                "job delegates 1",
                "job delegates 3, unaligned",
                "persistent delegates 4"
            ]
        );
        assert_eq!(configs[0].on, On::Local);
        assert!(configs[1..6].iter().all(|c| c.on == On::Cluster(0)));
        assert_eq!((configs[6].on, configs[6].used), (On::Cluster(1), 4));
        assert!(configs[5]
            .hints
            .contains(&"weft_delegate_mapping=any".to_string()));

        let case = Case::block3d(8);
        let mut order = Vec::new();
        let rows = measure(&case, &configs, 3, |c| {
            order.push(c.name.clone());
            let s = order.len() as f64;
            Ok((s, 2.0 * s, String::new()))
        })
        .unwrap();
        // Each round runs every configuration once, starting one further along.
        assert_eq!(order.len(), 21);
        for (round, first) in [(0, 0), (1, 1), (2, 2)] {
            assert_eq!(order[round * 7], names[first], "{order:?}");
            let mut this_round = order[round * 7..round * 7 + 7].to_vec();
            this_round.sort();
            let mut all: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            all.sort();
            assert_eq!(this_round, all);
        }
        // romio ran 1st, 14th (last of round 1) and 20th (sixth of round 2).
        let rate = |s: f64| mib_s(case.bytes, s);
        assert_eq!(rows.len(), 7);
        assert_eq!(
            rows[0].write_mib_s_spread,
            Spread {
                min: rate(20.0),
                median: rate(14.0),
                max: rate(1.0)
            }
        );
        assert_eq!(rows[0].write_mib_s, rate(14.0));
        assert_eq!(rows[0].read_mib_s_spread.max, rate(2.0));
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
