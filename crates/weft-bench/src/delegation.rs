//! `weft bench delegation`: I/O delegation. The patterns program's coll_perf 3D block
//! and S3D-IO checkpoint written and read back with each process going its own way
//! (no exchange) through persistent delegates (`weft up --cache D --cache-mapping
//! aligned`, files `delegated`) for each delegate count, against Weft's native
//! collective I/O (the better of two_phase and interleaved_pipelined), Weft's native
//! independent I/O (no delegates) and ROMIO on the local file system, all in one run
//! on clusters it starts itself.

use anyhow::{ensure, Result};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use std::process::Command;

use crate::clusterfile::Cluster;
use crate::collective::{compile, mpirun_procs, run_median, Case, MpiPrograms};
use crate::plot::{log2_x_panels, Panel, Series};
use crate::report::{write_json, Table, MIB};

pub const LONG_ABOUT: &str = "I/O delegation: the coll_perf 3D block and the S3D-IO checkpoint \
written (with sync) and read back by --procs processes, each going straight to the delegates \
owning its bytes (romio_cb_write/read disable: Weft's independent path, no exchange), through \
persistent delegates (weft up --cache D --cache-mapping aligned, files delegated) for each D of \
--delegates, against Weft's best native collective method, Weft's native independent I/O and \
ROMIO on the local file system, in the same run. Starts its own clusters (weft up in temporary \
homes). Prints MiB/s and ratios, writes JSON and an SVG plot.\n\nExample:\n  weft bench \
delegation --procs 4 --delegates 1,2,4,8,3";

/// Weft's native collective methods; the best of them is the baseline.
const NATIVE_COLLECTIVE: [&str; 2] = ["two_phase", "interleaved_pipelined"];

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
    /// Delegate counts to run, comma separated (the client uses the aligned count: a
    /// factor or multiple of the stripe count).
    #[arg(long, default_value = "1,2,4,8,3", value_delimiter = ',', value_name = "D")]
    pub delegates: Vec<u32>,
    /// Memory of each delegate (suffixes K, M, G).
    #[arg(long, default_value = "256M", value_name = "BYTES")]
    pub cache_memory: String,
    /// Edge of the 3D block array (N^3 elements of 16 bytes).
    #[arg(long, default_value_t = 128, value_name = "N")]
    pub n: u64,
    /// Edge of the S3D grid (16 values of 8 bytes per point).
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub s3d_n: u64,
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
    vec![Case::block3d(a.n), Case::s3d(a.s3d_n)]
}

fn mib_s(bytes: u64, s: f64) -> f64 {
    bytes as f64 / MIB as f64 / s.max(1e-9)
}

pub fn run(a: &DelegationArgs) -> Result<()> {
    ensure!((1..=1024).contains(&a.procs), "--procs must be in 1..=1024");
    ensure!((1..=64).contains(&a.io_servers), "--io-servers must be in 1..=64");
    ensure!((1..=1024).contains(&a.n), "--n must be in 1..=1024");
    ensure!((1..=512).contains(&a.s3d_n), "--s3d-n must be in 1..=512");
    ensure!((1..=100).contains(&a.repeat), "--repeat must be in 1..=100");
    ensure!(
        !a.delegates.is_empty() && a.delegates.iter().all(|d| (1..=64).contains(d)),
        "--delegates must list counts in 1..=64"
    );
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
        }
    }
    for &d in &a.delegates {
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
            let hints = [
                "weft_cache=delegated".to_string(),
                "romio_cb_write=disable".into(),
                "romio_cb_read=disable".into(),
            ];
            let t = weft_run(&cluster, &case, &hints)?;
            push(&case, format!("delegates {d}"), used, t);
        }
    }
    print_table(&rows);
    write_json(&a.json, &rows)?;
    write_svg(&a.svg, &rows)?;
    println!("JSON: {}  plot: {}", a.json.display(), a.svg.display());
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
fn write_svg(path: &std::path::Path, rows: &[Row]) -> Result<()> {
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
            let mut delegated: Vec<(f64, f64)> = of(&|r| r.delegates_used > 0)
                .iter()
                .map(|r| (r.delegates_used as f64, rate(r)))
                .collect();
            delegated.sort_by(|x, y| x.0.total_cmp(&y.0));
            let (lo, hi) = (
                delegated.first().map_or(1.0, |p| p.0),
                delegated.last().map_or(1.0, |p| p.0),
            );
            let mut series = vec![Series {
                name: "delegates (independent)".into(),
                points: delegated,
            }];
            for r in of(&|r| r.delegates_used == 0) {
                series.push(Series {
                    name: r.config.clone(),
                    points: vec![(lo, rate(r)), (hi, rate(r))],
                });
            }
            panels.push(Panel {
                title: format!("{pattern} {phase} (MiB/s)"),
                x_label: "delegates used".into(),
                series,
            });
        }
    }
    log2_x_panels(path, "I/O delegation", &panels)
}
