//! `weft bench`: benchmark programs, one module per benchmark, each comparing Weft
//! with a baseline measured in the same run and printing a table; each saves its
//! results as JSON and its figure as SVG next to it through one function
//! (`report::write_results`), and `weft bench plot` redraws or overlays saved results.
//!
//! This crate is the body of the `weft bench` command rather than a library for
//! others, so it reports errors with `anyhow` as binaries do.
//!
//! Client processes are real processes: the benchmark re-executes the running binary
//! as `<exe> bench <name>-worker ...` (hidden subcommands) and drives the workers
//! through their standard input and output (see `procs`). Any binary that embeds
//! [`BenchArgs`] under a `bench` subcommand therefore works as its own worker.

pub mod atomic;
pub mod capcompare;
pub mod cio;
mod cluster;
pub mod clusterfile;
pub mod collective;
pub mod concurrent;
pub mod delegation;
pub mod floor;
pub mod meta;
pub mod mount;
pub mod mpiio_api;
pub mod noncontig;
pub mod open_close;
pub mod pack;
mod pattern;
pub mod plot;
pub mod posix;
mod procs;
pub mod regime;
mod report;
pub mod simulate;
pub mod small_io;

use anyhow::Result;
use clap::{Args, Subcommand};

/// `weft bench ...`
#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
    /// Measure in a cluster-like regime: the benchmark's cluster is started with `weft
    /// up --emulate-network RATE[,LATENCY]` (each server in its own network namespace
    /// behind a link shaped to RATE each direction; LATENCY where the kernel has netem),
    /// clients over TCP. Benchmarks that start their own clusters start them so; the
    /// others get a throwaway one of 4 io servers instead of the running cluster.
    /// Needs root and iproute2. The regime measured is printed and saved in the JSON
    /// either way (a cluster started by `weft up --emulate-network` is recognised).
    #[arg(long, global = true, value_name = "RATE[,LATENCY]")]
    pub emulate_network: Option<weft_config::netemu::NetworkSpec>,
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// PVFS's concurrent read/write test, against a local file baseline.
    #[command(long_about = concurrent::LONG_ABOUT)]
    Concurrent(concurrent::ConcurrentArgs),
    /// MPI-IO collective methods on Weft against the MPI library's MPI-IO on local files.
    #[command(long_about = collective::LONG_ABOUT)]
    Collective(collective::CollectiveArgs),
    /// MPI-IO's atomic mode against non-atomic runs of the 3D block, with lock counts.
    #[command(long_about = atomic::LONG_ABOUT)]
    Atomic(atomic::AtomicArgs),
    /// I/O delegation: independent I/O through 1, 2, 4, 8, 3 delegates against native
    /// collective, native independent and ROMIO on local files, on clusters it starts.
    #[command(long_about = delegation::LONG_ABOUT)]
    Delegation(delegation::DelegationArgs),
    /// The Clusterfile comparison: ROMIO, two_phase, server_directed DD and 2P, on clusters it starts.
    #[command(long_about = clusterfile::LONG_ABOUT)]
    Clusterfile(clusterfile::ClusterfileArgs),
    /// The Clusterfile 2D CYCLIC(k) benchmark: view I/O against contiguous access on Weft.
    #[command(long_about = noncontig::LONG_ABOUT)]
    Noncontig(noncontig::NoncontigArgs),
    /// Metadata operations (mdtest style): native client, mount and a local directory.
    #[command(long_about = meta::LONG_ABOUT)]
    Meta(meta::MetaArgs),
    /// Sequential write and read through a FUSE mount, against the native client.
    #[command(long_about = mount::LONG_ABOUT)]
    Mount(mount::MountArgs),
    /// Mounts the FUSE floor (a file system on the mount's FUSE library that stores no
    /// data) for tools such as fio: what the mount's FUSE path allows on this machine.
    #[command(long_about = floor::LONG_ABOUT)]
    Floor(floor::FloorArgs),
    /// Collective-I/O-aware caching: the tile, IOR and mpi-io-test workloads traced and
    /// simulated, aggregated against original streams, per policy and cache size.
    #[command(long_about = cio::LONG_ABOUT)]
    Cio(cio::CioArgs),
    /// Run one workload of `weft bench cio` on the cluster and keep its traces.
    CioRecord(cio::CioRecordArgs),
    /// Nonblocking writes overlapped with computation, and write_ordered against
    /// write_at_all, on Weft (MPI-IO).
    #[command(long_about = mpiio_api::LONG_ABOUT)]
    MpiioApi(mpiio_api::MpiioApiArgs),
    /// Small and independent MPI-IO (BT-IO-like rows, IOR-like 100,000-byte transfers,
    /// an HDF5-like mix) on Weft with write-behind off and on, against ROMIO locally.
    #[command(long_about = small_io::LONG_ABOUT)]
    SmallIo(small_io::SmallIoArgs),
    /// MPI-IO open + access + close cycles on Weft against the MPI library's MPI-IO on a
    /// local directory (the fixed cost per open), and a fresh file's first write.
    #[command(long_about = open_close::LONG_ABOUT)]
    OpenClose(open_close::OpenCloseArgs),
    /// Pack/unpack and piece iteration of the view engine, against memcpy.
    #[command(long_about = pack::LONG_ABOUT)]
    Pack(pack::PackArgs),
    /// Redraws a saved result's plot from its JSON, or overlays several for comparison.
    #[command(long_about = plot::LONG_ABOUT)]
    Plot(plot::PlotArgs),
    /// One client process of `weft bench concurrent` (started by it, not by hand).
    #[command(hide = true)]
    ConcurrentWorker(concurrent::WorkerArgs),
    /// One client process of `weft bench meta` (started by it, not by hand).
    #[command(hide = true)]
    MetaWorker(meta::WorkerArgs),
    /// One client process of `weft bench noncontig` (started by it, not by hand).
    #[command(hide = true)]
    NoncontigWorker(noncontig::WorkerArgs),
    /// One workload of `weft bench mount --library` (started by it, not by hand).
    #[command(hide = true)]
    PosixWorker(posix::WorkerArgs),
}

/// Runs a benchmark (or, in a worker process, a worker).
pub fn run(args: BenchArgs) -> Result<()> {
    let _emulated = match (&args.emulate_network, &args.command) {
        (None, _) => None,
        (Some(_), BenchCommand::Pack(_) | BenchCommand::Plot(_)) => {
            anyhow::bail!("--emulate-network: this benchmark uses no cluster, so no network to emulate")
        }
        (
            Some(_),
            BenchCommand::ConcurrentWorker(_)
            | BenchCommand::MetaWorker(_)
            | BenchCommand::NoncontigWorker(_)
            | BenchCommand::PosixWorker(_),
        ) => None,
        (Some(spec), command) => {
            regime::ask(&spec_text(spec));
            match command {
                BenchCommand::Clusterfile(_) | BenchCommand::Delegation(_) => None,
                _ => Some(regime::start_cluster()?),
            }
        }
    };
    let is_worker = matches!(
        args.command,
        BenchCommand::ConcurrentWorker(_)
            | BenchCommand::MetaWorker(_)
            | BenchCommand::NoncontigWorker(_)
            | BenchCommand::PosixWorker(_)
    );
    if !is_worker && !matches!(args.command, BenchCommand::Plot(_) | BenchCommand::Pack(_)) {
        eprintln!("regime: {}", regime::describe());
    }
    match args.command {
        BenchCommand::Concurrent(a) => concurrent::run(&a),
        BenchCommand::Collective(a) => collective::run(&a),
        BenchCommand::Delegation(a) => delegation::run(&a),
        BenchCommand::Atomic(a) => atomic::run(&a),
        BenchCommand::Clusterfile(a) => clusterfile::run(&a),
        BenchCommand::ConcurrentWorker(a) => concurrent::worker(&a),
        BenchCommand::Noncontig(a) => noncontig::run(&a),
        BenchCommand::Mount(a) => mount::run(&a),
        BenchCommand::PosixWorker(a) => posix::worker(&a),
        BenchCommand::Floor(a) => floor::run(&a),
        BenchCommand::Meta(a) => meta::run(&a),
        BenchCommand::MetaWorker(a) => meta::worker(&a),
        BenchCommand::Pack(a) => pack::run(&a),
        BenchCommand::MpiioApi(a) => mpiio_api::run(&a),
        BenchCommand::SmallIo(a) => small_io::run(&a),
        BenchCommand::OpenClose(a) => open_close::run(&a),
        BenchCommand::Cio(a) => cio::run(&a),
        BenchCommand::CioRecord(a) => cio::run_record(&a),
        BenchCommand::Plot(a) => plot::run(&a),
        BenchCommand::NoncontigWorker(a) => noncontig::worker(&a),
    }
}

/// `--emulate-network` again as `weft up` takes it.
fn spec_text(spec: &weft_config::netemu::NetworkSpec) -> String {
    format!("{}bit,{}us", spec.rate_bits, spec.latency_us)
}

fn parse_size_arg(s: &str) -> std::result::Result<u64, String> {
    // "-1" or "-1M": say what a size is.
    weft_config::parse_size(s).map_err(|e| match s.trim_start().starts_with('-') {
        true => format!("{e}: a size is 0 or more bytes, with a K, M or G suffix if wanted"),
        false => e,
    })
}
