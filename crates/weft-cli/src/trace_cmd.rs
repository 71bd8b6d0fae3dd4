//! `weft trace show FILE` (a trace as text) and `weft trace synth WORKLOAD` (traces of
//! a workload generated without running it, e.g. with 32 processes on a laptop).

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use weft_trace::synth::{self, Setup, Workload};

/// Largest trace `show` reads (whole, into memory).
const TRACE_FILE_BYTES_MAX: u64 = 4 << 30;

#[derive(Args, Debug)]
pub struct TraceArgs {
    #[command(subcommand)]
    pub command: TraceCommand,
}

#[derive(Subcommand, Debug)]
pub enum TraceCommand {
    /// Print a trace (one process's *.wtrace file) as text, one line per record.
    Show {
        /// One process's trace (a *.wtrace file).
        file: PathBuf,
        /// Pieces or runs listed per request.
        #[arg(long, default_value_t = 8, value_name = "N")]
        pieces: usize,
    },
    /// Generate the traces of a workload without running it: one file per process, the
    /// original requests and the requests weft-mpiio's two_phase method would send.
    #[command(
        long_about = "Generate the traces of a workload without running it: one *.wtrace file per process in \
--out, with each process's original requests and the requests weft-mpiio's two_phase method would send \
for them (even file domains over all processes, --cb-buffer-size windows). The workloads are those of \
`weft bench cio` (MPI-Tile-IO: overlapping tiles of a 2D dataset read in passes; IOR: segmented and \
strided reads, reread; mpi-io-test: contiguous blocks reread), with the same parameters.\n\nExample:\n  \
weft trace synth tile --procs 32 --out traces/tile-32 && weft sim traces/tile-32"
    )]
    Synth(SynthArgs),
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadName {
    Tile,
    Ior,
    MpiioTest,
}

#[derive(Args, Debug, Clone)]
pub struct SynthArgs {
    pub workload: WorkloadName,
    /// Processes.
    #[arg(long, default_value_t = 32)]
    pub procs: u32,
    /// Directory for the traces (created; existing *.wtrace files in it are replaced).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Aggregators (cb_nodes). Default: every process.
    #[arg(long)]
    pub aggregators: Option<u32>,
    /// Collective buffer per aggregator and round.
    #[arg(long, default_value = "16M", value_parser = crate::parse_size_arg)]
    pub cb_buffer_size: u64,
    /// Stripe size of the file (the simulator's default block size).
    #[arg(long, default_value = "64K", value_parser = crate::parse_size_arg)]
    pub stripe_size: u64,
    /// Tile: passes over the dataset; IOR and mpi-io-test: reads of the whole file.
    #[arg(long)]
    pub passes: Option<u32>,
}

pub fn run(args: TraceArgs) -> Result<()> {
    match args.command {
        TraceCommand::Show { file, pieces } => show(&file, pieces),
        TraceCommand::Synth(a) => synth_cmd(&a),
    }
}

fn show(file: &Path, pieces: usize) -> Result<()> {
    let len = std::fs::metadata(file)
        .with_context(|| format!("reading {}", file.display()))?
        .len();
    ensure!(
        len <= TRACE_FILE_BYTES_MAX,
        "{}: {len} bytes, more than {TRACE_FILE_BYTES_MAX}",
        file.display()
    );
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut failed = None;
    let summary = weft_trace::text::show(&bytes, pieces, &mut |line| {
        use std::io::Write;
        if failed.is_none() {
            if let Err(e) = writeln!(out, "{line}") {
                failed = Some(e);
            }
        }
    })
    .with_context(|| file.display().to_string())?;
    if let Some(e) = failed {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(e.into());
        }
    }
    if let Some(e) = summary.error {
        anyhow::bail!("{}: {e} (the records before it are shown)", file.display());
    }
    Ok(())
}

/// The workload with its defaults (the seed's setups), passes overridden.
pub fn workload(name: WorkloadName, passes: Option<u32>) -> Workload {
    let w = Workload::named(match name {
        WorkloadName::Tile => "tile",
        WorkloadName::Ior => "ior",
        WorkloadName::MpiioTest => "mpiio-test",
    })
    .expect("every name has a workload");
    match passes {
        Some(p) => w.with_passes(p),
        None => w,
    }
}

fn synth_cmd(a: &SynthArgs) -> Result<()> {
    let w = workload(a.workload, a.passes);
    let setup = Setup {
        aggregators: a.aggregators.unwrap_or(a.procs),
        cb_buffer_bytes: a.cb_buffer_size,
        stripe_size_bytes: a.stripe_size,
        ..Setup::new(a.procs)
    };
    let traces = synth::generate(&w, &setup).map_err(anyhow::Error::msg)?;
    weft_bench::simulate::write_traces(&a.out, &traces)?;
    println!(
        "{} traces of {} ({} processes, {} MiB file) in {}",
        traces.len(),
        w.name(),
        a.procs,
        w.file_bytes(a.procs) >> 20,
        a.out.display()
    );
    Ok(())
}
