//! `weft rebuild`: copies replicated files' stale pieces back from fresh copies
//! (`Client::rebuild_path`, `Client::rebuild_all`), with a progress line on stderr
//! and a summary on stdout.

use crate::cluster::human_bytes;
use anyhow::Result;
use std::io::Write;
use std::time::{Duration, Instant};
use weft_client::{Client, RebuildOptions, RebuildProgress, ServerId};

#[derive(clap::Args, Debug)]
pub struct RebuildArgs {
    /// A replicated file whose stale pieces to rebuild (default: every replicated
    /// file with a stale piece, which needs root).
    pub path: Option<String>,
    /// Only the pieces on io server N (as `weft status` numbers them).
    #[arg(long, value_name = "N")]
    pub server: Option<u32>,
    /// Also the pieces whose object is missing on --server, stale or not: after that
    /// server's disk was replaced by an empty one (or its data directory lost).
    #[arg(long, requires = "server")]
    pub missing: bool,
    /// Most bytes copied per second (K, M, G suffixes), so that a rebuild leaves
    /// bandwidth to the applications; default: as fast as it goes.
    #[arg(long, value_name = "BYTES", value_parser = crate::parse_size_arg)]
    pub rate: Option<u64>,
    /// No progress line on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

pub fn run(client: &Client, args: RebuildArgs) -> Result<()> {
    let options = RebuildOptions {
        rate_bytes_per_sec: args.rate,
        server: args.server.map(ServerId),
        missing: args.missing,
    };
    let started = Instant::now();
    let mut last = Instant::now();
    let quiet = args.quiet;
    let mut show = |p: &RebuildProgress| {
        if quiet || last.elapsed() < Duration::from_millis(500) {
            return;
        }
        last = Instant::now();
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\rrebuild: {} files, {} pieces, {} copied ({}/s), {} retries   ",
            p.files,
            p.pieces,
            human_bytes(p.bytes),
            human_bytes((p.bytes as f64 / started.elapsed().as_secs_f64().max(1e-3)) as u64),
            p.retries
        );
        let _ = err.flush();
    };
    let done = match &args.path {
        Some(path) => client.rebuild_path(path, &options, &mut show)?,
        None => client.rebuild_all(&options, &mut show)?,
    };
    if !quiet && last.elapsed() < started.elapsed() {
        eprintln!();
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "rebuilt {} pieces of {} files: {} copied in {:.2} s ({}/s), {} retries",
        done.pieces,
        done.files,
        human_bytes(done.bytes),
        secs,
        human_bytes((done.bytes as f64 / secs.max(1e-3)) as u64),
        done.retries
    );
    for why in &done.failed {
        eprintln!("weft: left stale: {why}");
    }
    if !done.failed.is_empty() {
        anyhow::bail!(
            "{} pieces could not be rebuilt now (run `weft rebuild` again once their servers answer)",
            done.failed.len()
        );
    }
    Ok(())
}
