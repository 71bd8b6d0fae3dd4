//! `weft bench`: benchmark programs, one module per benchmark, each comparing Weft
//! with a baseline measured in the same run and printing a table plus JSON.
//!
//! This crate is the body of the `weft bench` command rather than a library for
//! others, so it reports errors with `anyhow` as binaries do.
//!
//! Client processes are real processes: the benchmark re-executes the running binary
//! as `<exe> bench <name>-worker ...` (hidden subcommands) and drives the workers
//! through their standard input and output (see `procs`). Any binary that embeds
//! [`BenchArgs`] under a `bench` subcommand therefore works as its own worker.

mod cluster;
pub mod collective;
pub mod concurrent;
pub mod mount;
pub mod noncontig;
pub mod pack;
mod pattern;
mod procs;
mod report;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

/// `weft bench ...`
#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// PVFS's concurrent read/write test, against a local file baseline.
    #[command(long_about = concurrent::LONG_ABOUT)]
    Concurrent(concurrent::ConcurrentArgs),
    /// MPI-IO collective methods on Weft against the MPI library's MPI-IO on local files.
    #[command(long_about = collective::LONG_ABOUT)]
    Collective(collective::CollectiveArgs),
    /// The Clusterfile 2D CYCLIC(k) benchmark: view I/O against contiguous access on Weft.
    #[command(long_about = noncontig::LONG_ABOUT)]
    Noncontig(noncontig::NoncontigArgs),
    /// Sequential write and read through a FUSE mount, against the native client.
    #[command(long_about = mount::LONG_ABOUT)]
    Mount(mount::MountArgs),
    /// Pack/unpack and piece iteration of the view engine, against memcpy.
    #[command(long_about = pack::LONG_ABOUT)]
    Pack(pack::PackArgs),
    /// One client process of `weft bench concurrent` (started by it, not by hand).
    #[command(hide = true)]
    ConcurrentWorker(concurrent::WorkerArgs),
    /// One client process of `weft bench noncontig` (started by it, not by hand).
    #[command(hide = true)]
    NoncontigWorker(noncontig::WorkerArgs),
}

/// Runs a benchmark (or, in a worker process, a worker).
pub fn run(args: BenchArgs) -> Result<()> {
    match args.command {
        BenchCommand::Concurrent(a) => concurrent::run(&a),
        BenchCommand::Collective(a) => collective::run(&a),
        BenchCommand::ConcurrentWorker(a) => concurrent::worker(&a),
        BenchCommand::Noncontig(a) => noncontig::run(&a),
        BenchCommand::Mount(a) => mount::run(&a),
        BenchCommand::Pack(a) => pack::run(&a),
        BenchCommand::NoncontigWorker(a) => noncontig::worker(&a),
    }
}

/// Parses sizes like 65536, 64K, 64KiB, 4M, 1G.
pub fn parse_size(text: &str) -> Result<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits.parse().with_context(|| format!("invalid size {text:?}"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        other => bail!("invalid size unit {other:?} in {text:?} (use K, M, G)"),
    };
    n.checked_mul(1u64 << shift)
        .with_context(|| format!("size {text:?} is too large"))
}

fn parse_size_arg(s: &str) -> std::result::Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("65536").unwrap(), 65536);
        assert_eq!(parse_size("64K").unwrap(), 64 << 10);
        assert_eq!(parse_size("4MiB").unwrap(), 4 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("M").is_err());
    }
}
