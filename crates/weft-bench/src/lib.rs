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
//!
//! # Code map
//!
//! `weft bench ...`: benchmark programs, one module per benchmark (`concurrent.rs`:
//! PVFS's concurrent read/write test, once per process count of `--procs`; `capcompare.rs`:
//! its `--compare-capabilities` form, two clusters of its own side by side, capabilities
//! on and off, shown to differ by a capability-less read, the same workers' verified
//! write/read/rewrite/reread alternated between them phase by phase, pair after pair
//! (`--fresh-workers`: new processes per cycle, so grants and presents are timed), the median of the
//! pairs' on/off ratios per phase; `noncontig.rs`: the Clusterfile 2D CYCLIC(k)
//! benchmark, view I/O against contiguous access of the same bytes on Weft, with CPU
//! seconds per GiB of clients and servers; `pack.rs`: the view engine's pack/unpack
//! against memcpy of the same bytes between the same buffers; `cio.rs`: the collective-I/O-aware caching study, the tile, IOR and
//! mpi-io-test workloads of `c/cio_workloads.c` run traced and generated, then simulated;
//! `delegation.rs`: the 3D block, S3D-IO and FLASH-IO written by independent calls
//! through job-scoped delegates 1, 2, 4, 8 and 3 (unaligned) and persistent ones, against
//! the best native collective method, native independent I/O and ROMIO on local files, on
//! clusters it starts with `clusterfile.rs`'s throwaway `Cluster`; `redundancy.rs`: plain
//! against replicas=2 files with concurrent's workers (a Weft path per command), then a
//! server of a copy killed (`Cluster::kill_server`), degraded reads and writes, the
//! restart and the rebuild, and a read from the rebuilt copies alone; `mpiio_api.rs`: MPI-IO
//! nonblocking writes overlapped with computation, the fraction of the I/O time hidden on
//! Weft and through ROMIO locally, and `write_ordered` against `write_at_all`, with
//! `c/mpiio_api.c`; `posix.rs`: `mount --library`, the same work natively, through the
//! mount, with libweft_posix.so and locally (its worker is `posix-worker`); `mount.rs`: dd-style I/O through the mount against the native client,
//! with `--floor` the FUSE floor too; `floor.rs`: `weft bench floor`, the floor mounted for
//! outside tools such as fio),
//! each measuring a baseline in the same run and printing a table; `meta/`: mdtest-style
//! phases and everyday programs (`mod.rs` the benchmark, `workloads.rs` the programs,
//! `worker.rs` its client process). What they share (`report.rs`): targets only where
//! one applies, each naming its baseline (`Goal`); configurations alternated run by run,
//! the order rotating (`alternated`), summarised as median, min and max (`Spread`).
//! What a benchmark makes in the cluster's namespace goes in one directory made fresh
//! and removed when dropped, unless `--keep` (`cluster::WeftDir`; the file benchmarks'
//! one file: `cluster::WeftFile`; a signal's thread removes both too, with `weft rm -r`,
//! and the local scratch directories registered with `cluster::scratch`). The FUSE floor
//! (weft-fuse `floor.rs`, `mount_floor`) is a file system in the benchmark's process that
//! keeps its namespace in memory and stores no data: directories, files and symbolic links
//! with modes, owners, times and sizes (a read-write lock over the tree, taken shared by
//! reads and writes; bounded by `--inodes`), reads answered by a given function with one
//! copy from memory, writes dropped (they only raise the size), on fuser and mounted with
//! the Weft mount's request limits (`fs.rs`'s `request_limits`, shared), readahead and
//! threads, so that what fio, dd or tar reach there is what the mount's FUSE path allows
//! on the machine (a request loop of one's own on /dev/fuse measured the same; FUSE over
//! io_uring, not used by the mount, took 4 KiB writes about 1.4x as fast, in a measurement
//! outside the product). Every benchmark saves
//! through one function, `report::write_results`: its results as JSON with its figure
//! (`plot::Figure`: panels of series, x axes base-2, linear or categories, drawn in a grid
//! that fits a screen, base-2 axes ticked at powers of two, whole-number axes at whole
//! numbers) added under
//! `"plot"`, and the figure drawn as SVG (`plot.rs`, plotters' SVG backend: lines with
//! markers, or grouped bars) next to it; `weft bench plot FILE.json...` reads the figures
//! back, redraws one or overlays several (panels merged by title, series named after
//! their file). Figures read from files are checked (bounded sizes, finite values, x > 0
//! on a log axis). `tests/common/svg_check.rs` parses an SVG (roxmltree) and checks it
//! draws a figure: every title, series and category as text, every point a marker placed
//! in proportion to its value; `readable` renders it with rsvg-convert
//! (librsvg2-bin) and checks the picture fits a screen and no tick label repeats on an
//! axis; `tests/common/mod.rs` checks after a run that nothing is left in the cluster's
//! namespace and that `weft bench plot` reads the JSON. `simulate.rs` is `weft sim` (weft-trace's simulator: table,
//! JSON, the same SVG plot). `regime.rs`: the regime measured (`local`, or the emulated
//! network of the cluster, from its `netemu.toml`), printed by every benchmark and saved
//! as `"regime"` by `write_results`; `weft bench --emulate-network` (a global option)
//! gives a benchmark a throwaway emulated cluster (`clusterfile::start_emulated`), or makes the clusters it starts
//! emulated. Clusters a benchmark starts are recorded (`cluster.rs`): SIGINT, SIGTERM or
//! SIGHUP stop them (`weft down`, from a thread woken by the signal handler through a pipe)
//! before the benchmark exits with 128 + the signal; and each is tied to the benchmark
//! (`clusterfile::Cluster` holds a weft-config `HomeTie`: `weft up --tie-to-stdin`, and a
//! sweeper that removes the home), so that kill -9, where no handler runs, leaves no
//! server and no home either (`tests/compare_capabilities_smoke.rs` kills one). Client processes are real
//! processes: the `weft` binary re-executed as a hidden worker subcommand, driven
//! through pipes, phases started together (`procs.rs`); workers verify what they read
//! against a pattern of (rank, offset, run) (`pattern.rs`). Never a timed test.

pub mod atomic;
pub mod capcompare;
pub mod cio;
mod cluster;
pub use cluster::stopping_on_signal;
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
pub mod redundancy;
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
    /// Plain against replicated (replicas=2) files: write+sync and read, then reads and
    /// writes with a server killed, and the rebuild, on a cluster it starts.
    #[command(long_about = redundancy::LONG_ABOUT)]
    Redundancy(redundancy::RedundancyArgs),
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
                BenchCommand::Clusterfile(_) | BenchCommand::Delegation(_) | BenchCommand::Redundancy(_) => {
                    None
                }
                _ => Some(clusterfile::start_emulated()?),
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
        BenchCommand::Concurrent(a) if a.compare_capabilities => capcompare::run(&a),
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
        BenchCommand::Redundancy(a) => redundancy::run(&a),
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
