//! `weft bench atomic`: what MPI-IO's atomic mode costs. The patterns program's coll_perf
//! 3D block written (with sync) and read back by --procs processes three ways on the
//! running cluster: without atomic mode through `auto` (what a program gets by default),
//! without atomic mode through `independent` (the data path atomic mode takes, so that
//! the difference is the locks alone), and in atomic mode (every access under extent
//! locks at the io servers). The io servers' lock counts (requests, grants, conflicts,
//! waits) are read before and after each run and shown per run. The three alternate run
//! by run, the order rotating; MiB/s as median (min-max), ratios of medians; files in a
//! directory it makes and removes (`--keep`); JSON and an SVG.

use crate::cluster::WeftDir;
use anyhow::{ensure, Result};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;

use crate::collective::{compile, mpirun_procs, run_one, Case, MpiPrograms};
use crate::plot::{Figure, Panel};
use crate::report::{alternated, command_line, svg_next_to, write_results, Spread, Table, MIB};

pub const LONG_ABOUT: &str = "What MPI-IO's atomic mode costs: coll_perf's 3D block (N^3 elements \
of 16 bytes) written (with sync) and read back collectively by --procs processes through \
LD_PRELOAD of libweft_mpiio.so on the running cluster, without atomic mode through auto and \
through independent (the path atomic mode takes), and with MPI_File_set_atomicity(fh, 1) (every \
access under extent locks at the io servers). Prints MiB/s, the ratio of atomic to each \
non-atomic run, and the extent-lock requests, grants, conflicts and waits the io servers counted \
during each run. The three run --repeat times alternated, the order rotating from round to round; \
MiB/s are shown as median (min-max), ratios are of the medians. The files go in --path, made and \
removed by the benchmark (--keep keeps it). Writes JSON and an SVG plot next to it.\n\nNeeds a running cluster (`weft up`), mpicc and mpirun, and \
libweft_mpiio.so next to the weft binary. Example:\n  weft bench atomic --procs 4 --n 128,256";

#[derive(Args, Debug, Clone)]
pub struct AtomicArgs {
    /// MPI processes.
    #[arg(long, default_value_t = 4, value_name = "P")]
    pub procs: u32,
    /// Edges of the 3D block array to run (N^3 elements of 16 bytes), comma separated.
    #[arg(long, default_value = "128,256", value_delimiter = ',', value_name = "N")]
    pub n: Vec<u64>,
    /// Runs of each configuration, alternated with the others; the median counts.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub repeat: u32,
    /// Weft directory for the files: made by the benchmark (it must not exist) and
    /// removed afterwards with all it holds, unless --keep.
    #[arg(long, default_value = "/bench-atomic", value_name = "PATH")]
    pub path: String,
    /// Keep the Weft directory (--path) and what the benchmark wrote in it.
    #[arg(long)]
    pub keep: bool,
    #[command(flatten)]
    pub programs: MpiPrograms,
    /// Where to write the JSON results; the SVG plot goes next to it (.svg for .json).
    #[arg(long, default_value = "bench-results/atomic.json", value_name = "FILE")]
    pub json: PathBuf,
}

/// The runs of each size: (name, extra arguments of the patterns program).
const RUNS: [(&str, &[&str]); 3] = [
    ("auto", &["weft_cb_method=auto"]),
    ("independent", &["weft_cb_method=independent"]),
    ("atomic", &["--atomic"]),
];

#[derive(Debug, Clone, Serialize)]
struct Row {
    pattern: String,
    run: String,
    bytes: u64,
    /// Medians over the --repeat runs (the runs of the three alternated, the order
    /// rotating round by round).
    write_s: f64,
    read_s: f64,
    write_mib_s: f64,
    read_mib_s: f64,
    /// MiB/s of the runs: min, median, max.
    write_mib_s_spread: Spread,
    read_mib_s_spread: Spread,
    /// Extent-lock counts of all io servers during the configuration's runs, per run.
    lock_requests: f64,
    lock_grants: f64,
    lock_conflicts: f64,
    lock_waits: f64,
    command: String,
}

fn lock_totals(client: &weft_client::Client) -> Result<[u64; 4]> {
    let mut t = [0u64; 4];
    for (_, s) in client.lock_stats()? {
        t[0] += s.requests;
        t[1] += s.grants;
        t[2] += s.conflicts;
        t[3] += s.waits;
    }
    Ok(t)
}

/// One run of one configuration: write and read seconds, its command, and the lock
/// counts the io servers added meanwhile.
struct Ran {
    write_s: f64,
    read_s: f64,
    command: String,
    locks: [u64; 4],
}

pub fn run(a: &AtomicArgs) -> Result<()> {
    ensure!((1..=1024).contains(&a.procs), "--procs must be in 1..=1024");
    ensure!((1..=100).contains(&a.repeat), "--repeat must be in 1..=100");
    ensure!(
        a.n.iter().all(|n| (1..=1024).contains(n)),
        "--n must be in 1..=1024"
    );
    let (library, _local) = a.programs.prepare("weft-bench-atomic-local-")?;
    let work = tempfile::Builder::new().prefix("weft-bench-atomic-").tempdir()?;
    let program = compile(work.path())?;
    let client = weft_client::Client::from_env()?;
    let dir = WeftDir::make(&client, &a.path, a.keep)?;
    let home = std::env::var("WEFT_HOME").ok();
    let mut rows = Vec::new();
    for &n in &a.n {
        let case = Case::block3d(n);
        // The three alternate run by run, so that none always runs first, after the same
        // one, or on a warmer machine.
        let runs = alternated(&RUNS, a.repeat, |_, (run, extra)| {
            let mut c = mpirun_procs(a.procs);
            c.arg("-x").arg(format!("LD_PRELOAD={}", library.display()));
            if let Some(h) = &home {
                c.arg("-x").arg(format!("WEFT_HOME={h}"));
            }
            c.arg(&program).arg(format!("weft:{}/", dir.path()));
            c.args(["--only", case.only, "--timing"])
                .args(&case.args)
                .args(*extra);
            let before = lock_totals(&client)?;
            let (write_s, read_s, command) = run_one(c, case.only)?;
            let after = lock_totals(&client)?;
            eprintln!("{}: {run}: write {write_s:.3} s, read {read_s:.3} s", case.name);
            Ok(Ran {
                write_s,
                read_s,
                command,
                locks: [0, 1, 2, 3].map(|i| after[i] - before[i]),
            })
        })?;
        for ((run, _), ran) in RUNS.iter().zip(runs) {
            let mib = case.bytes as f64 / MIB as f64;
            let spread = |f: &dyn Fn(&Ran) -> f64| Spread::of(&ran.iter().map(f).collect::<Vec<_>>());
            let per = |i: usize| ran.iter().map(|r| r.locks[i]).sum::<u64>() as f64 / ran.len() as f64;
            let (write_s, read_s) = (spread(&|r| r.write_s).median, spread(&|r| r.read_s).median);
            rows.push(Row {
                pattern: case.name.clone(),
                run: (*run).to_owned(),
                bytes: case.bytes,
                write_s,
                read_s,
                write_mib_s: mib / write_s,
                read_mib_s: mib / read_s,
                write_mib_s_spread: spread(&|r| mib / r.write_s),
                read_mib_s_spread: spread(&|r| mib / r.read_s),
                lock_requests: per(0),
                lock_grants: per(1),
                lock_conflicts: per(2),
                lock_waits: per(3),
                command: ran.last().map(|r| r.command.clone()).unwrap_or_default(),
            });
        }
    }
    print_table(&rows, a.repeat);
    let results = serde_json::json!({
        "benchmark": "atomic",
        "command_line": command_line(),
        "procs": a.procs,
        "repeat": a.repeat,
        "repeat_summary": "median of the runs, min and max kept; the three configurations alternated, the order rotating",
        "rows": rows,
    });
    write_results(&a.json, &svg_next_to(&a.json), &results, &figure(a, &rows))
}

/// MiB/s per pattern (groups) and run (bars), write and read side by side.
fn figure(a: &AtomicArgs, rows: &[Row]) -> Figure {
    let mut write = Panel::bars("write+sync (MiB/s, median)", "3D block", "MiB/s", Vec::new());
    let mut read = Panel::bars("read (MiB/s, median)", "3D block", "MiB/s", Vec::new());
    for r in rows {
        write.bar(&r.run, &r.pattern, r.write_mib_s);
        read.bar(&r.run, &r.pattern, r.read_mib_s);
    }
    Figure {
        title: format!(
            "weft bench atomic: {} processes, medians of {} alternated runs",
            a.procs, a.repeat
        ),
        panels: vec![write, read],
    }
}

fn print_table(rows: &[Row], repeat: u32) {
    let mut t = Table::new(&[
        "pattern",
        "run",
        "write MiB/s",
        "read MiB/s",
        "atomic/auto w,r",
        "atomic/indep w,r",
        "lock req",
        "grants",
        "conflicts",
        "waits",
    ]);
    for row in rows {
        let of = |run: &str| rows.iter().find(|r| r.pattern == row.pattern && r.run == run);
        let ratio = |base: Option<&Row>| match (row.run.as_str(), base) {
            ("atomic", Some(b)) => format!(
                "{:.2}, {:.2}",
                row.write_mib_s / b.write_mib_s,
                row.read_mib_s / b.read_mib_s
            ),
            _ => "-".into(),
        };
        t.row(vec![
            row.pattern.clone(),
            row.run.clone(),
            row.write_mib_s_spread.cell(1),
            row.read_mib_s_spread.cell(1),
            ratio(of("auto")),
            ratio(of("independent")),
            format!("{:.0}", row.lock_requests),
            format!("{:.0}", row.lock_grants),
            format!("{:.0}", row.lock_conflicts),
            format!("{:.0}", row.lock_waits),
        ]);
    }
    print!("{}", t.render());
    println!(
        "(MiB/s: median (min-max) of {repeat} runs, the three configurations alternated; ratios of \
         medians; lock counts per run, summed over the io servers: a run is one write with sync and \
         one read back)"
    );
}
