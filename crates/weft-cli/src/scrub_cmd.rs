//! `weft scrub`: compares the fresh copies of replicated files (`Client::scrub_path`),
//! with a progress line on stderr, each difference on stdout and a summary.

use crate::cluster::human_bytes;
use anyhow::Result;
use std::io::Write;
use std::time::{Duration, Instant};
use weft_client::{Client, ScrubProgress};

#[derive(clap::Args, Debug)]
pub struct ScrubArgs {
    /// Replicated files, or directories whose replicated files (at any depth) to compare.
    #[arg(required = true)]
    pub paths: Vec<String>,
    /// Most bytes read per second (K, M, G suffixes; every copy counts), so that a
    /// scrub leaves bandwidth to the applications; default: as fast as it goes.
    #[arg(long, value_name = "BYTES", value_parser = crate::parse_size_arg)]
    pub rate: Option<u64>,
    /// Repair each difference found: the copy that differs from the slot's first fresh
    /// copy (its primary, unless that is stale) is marked stale and rebuilt from it.
    #[arg(long)]
    pub repair: bool,
    /// No progress line on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

pub fn run(client: &Client, args: ScrubArgs) -> Result<()> {
    let started = Instant::now();
    let mut last = Instant::now();
    let quiet = args.quiet;
    let mut total = ScrubProgress::default();
    for path in &args.paths {
        let before = total.clone();
        let mut show = |p: &ScrubProgress| {
            if quiet || last.elapsed() < Duration::from_millis(500) {
                return;
            }
            last = Instant::now();
            let bytes = before.bytes + p.bytes;
            let mut err = std::io::stderr().lock();
            let _ = write!(
                err,
                "\rscrub: {} files, {} read ({}/s), {} differences   ",
                before.files + p.files,
                human_bytes(bytes),
                human_bytes((bytes as f64 / started.elapsed().as_secs_f64().max(1e-3)) as u64),
                before.mismatches.len() + p.mismatches.len()
            );
            let _ = err.flush();
        };
        let done = client.scrub_path(path, args.rate, &mut show)?;
        total.files += done.files;
        total.bytes += done.bytes;
        total.retries += done.retries;
        total.mismatches.extend(done.mismatches);
        total.failed.extend(done.failed);
    }
    if !quiet && last.elapsed() < started.elapsed() {
        eprintln!();
    }
    for m in &total.mismatches {
        println!(
            "{}: stripe slot {}: the copies on io servers {} and {} differ from offset {}",
            m.path, m.slot, m.servers.0, m.servers.1, m.offset
        );
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "scrubbed {} replicated files: {} read in {:.2} s ({}/s), {} retries, {} differences",
        total.files,
        human_bytes(total.bytes),
        secs,
        human_bytes((total.bytes as f64 / secs.max(1e-3)) as u64),
        total.retries,
        total.mismatches.len()
    );
    for why in &total.failed {
        eprintln!("weft: not compared: {why}");
    }
    if !total.mismatches.is_empty() && args.repair {
        let mut repaired = 0;
        for m in &total.mismatches {
            match client.scrub_repair(m, args.rate, &mut |_| {}) {
                Ok(done) if done.failed.is_empty() => {
                    repaired += 1;
                    println!(
                        "{}: stripe slot {}: io server {}'s copy rebuilt from io server {}'s ({})",
                        m.path,
                        m.slot,
                        m.servers.1,
                        m.servers.0,
                        human_bytes(done.bytes)
                    );
                }
                Ok(done) => total.failed.extend(done.failed),
                Err(e) => total.failed.push(format!("{}: repair: {e}", m.path)),
            }
        }
        if repaired < total.mismatches.len() {
            anyhow::bail!(
                "{} of {} differences repaired; run `weft rebuild` once the servers answer",
                repaired,
                total.mismatches.len()
            );
        }
    } else if !total.mismatches.is_empty() {
        anyhow::bail!(
            "{} stripe slots have copies that differ; `weft scrub --repair` keeps each slot's first \
             fresh copy (its primary unless stale) and rebuilds the other from it",
            total.mismatches.len()
        );
    }
    if !total.failed.is_empty() {
        anyhow::bail!("{} files could not be compared now", total.failed.len());
    }
    Ok(())
}
