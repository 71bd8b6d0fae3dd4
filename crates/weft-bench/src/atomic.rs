//! `weft bench atomic`: what MPI-IO's atomic mode costs. The patterns program's coll_perf
//! 3D block written (with sync) and read back by --procs processes three ways on the
//! running cluster: without atomic mode through `auto` (what a program gets by default),
//! without atomic mode through `independent` (the data path atomic mode takes, so that
//! the difference is the locks alone), and in atomic mode (every access under extent
//! locks at the io servers). The io servers' lock counts (requests, grants, conflicts,
//! waits) are read before and after each run and shown as the run's share.

use anyhow::{ensure, Result};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;

use crate::collective::{compile, mpirun_procs, run_median, Case, MpiPrograms};
use crate::report::{write_json, Table, MIB};

pub const LONG_ABOUT: &str = "What MPI-IO's atomic mode costs: coll_perf's 3D block (N^3 elements \
of 16 bytes) written (with sync) and read back collectively by --procs processes through \
LD_PRELOAD of libweft_mpiio.so on the running cluster, without atomic mode through auto and \
through independent (the path atomic mode takes), and with MPI_File_set_atomicity(fh, 1) (every \
access under extent locks at the io servers). Prints MiB/s, the ratio of atomic to each \
non-atomic run, and the extent-lock requests, grants, conflicts and waits the io servers counted \
during each run; writes JSON.\n\nNeeds a running cluster (`weft up`), mpicc and mpirun, and \
libweft_mpiio.so next to the weft binary. Example:\n  weft bench atomic --procs 4 --n 128,256";

#[derive(Args, Debug, Clone)]
pub struct AtomicArgs {
    /// MPI processes.
    #[arg(long, default_value_t = 4, value_name = "P")]
    pub procs: u32,
    /// Edges of the 3D block array to run (N^3 elements of 16 bytes), comma separated.
    #[arg(long, default_value = "128,256", value_delimiter = ',', value_name = "N")]
    pub n: Vec<u64>,
    /// Runs of each configuration; the median counts.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub repeat: u32,
    /// Weft directory for the files (created).
    #[arg(long, default_value = "/bench-atomic", value_name = "PATH")]
    pub path: String,
    #[command(flatten)]
    pub programs: MpiPrograms,
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
    write_s: f64,
    read_s: f64,
    write_mib_s: f64,
    read_mib_s: f64,
    /// Extent-lock counts of all io servers during the run's repeats, per repeat.
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
    crate::report::make_dir(&client, &a.path)?;
    let home = std::env::var("WEFT_HOME").ok();
    let mut rows = Vec::new();
    for &n in &a.n {
        let case = Case::block3d(n);
        for (run, extra) in RUNS {
            let before = lock_totals(&client)?;
            let (w, r, command) = run_median(a.repeat, case.only, || {
                let mut c = mpirun_procs(a.procs);
                c.arg("-x").arg(format!("LD_PRELOAD={}", library.display()));
                if let Some(h) = &home {
                    c.arg("-x").arg(format!("WEFT_HOME={h}"));
                }
                c.arg(&program)
                    .arg(format!("weft:{}/", a.path.trim_end_matches('/')));
                c.args(["--only", case.only, "--timing"])
                    .args(&case.args)
                    .args(extra);
                c
            })?;
            let after = lock_totals(&client)?;
            let per = |i: usize| (after[i] - before[i]) as f64 / a.repeat as f64;
            let mib = case.bytes as f64 / MIB as f64;
            eprintln!("{}: {run}: write {w:.3} s, read {r:.3} s", case.name);
            rows.push(Row {
                pattern: case.name.clone(),
                run: run.to_owned(),
                bytes: case.bytes,
                write_s: w,
                read_s: r,
                write_mib_s: mib / w,
                read_mib_s: mib / r,
                lock_requests: per(0),
                lock_grants: per(1),
                lock_conflicts: per(2),
                lock_waits: per(3),
                command,
            });
        }
    }
    print_table(&rows);
    write_json(&a.json, &rows)?;
    println!("JSON: {}", a.json.display());
    Ok(())
}

fn print_table(rows: &[Row]) {
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
            format!("{:.1}", row.write_mib_s),
            format!("{:.1}", row.read_mib_s),
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
        "(lock counts per run, summed over the io servers: a run is one write with sync and one read back)"
    );
}
