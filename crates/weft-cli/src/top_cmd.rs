//! `weft top`: a live view of the cluster a client uses (every server's throughput,
//! operations, latency, cache hit rate, dirty bytes; the busiest files and jobs), from
//! the servers' metrics endpoints, refreshed every interval; `--once` prints one view
//! (rates over one interval) for scripts.

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use std::io::Write;
use std::time::{Duration, Instant};
use weft_metrics::collect::{targets, Watch};
use weft_metrics::top::View;
use weft_rpc::{ClientAuth, ClusterKey, ConnectionPool, Timeouts};

#[derive(ClapArgs, Debug)]
pub struct TopArgs {
    /// Print one view, with rates over one interval, and exit (2 if a server is down).
    #[arg(long)]
    once: bool,
    /// Print the view as JSON (what the status page reads).
    #[arg(long)]
    json: bool,
    /// Milliseconds between views.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    interval_ms: u64,
}

/// Longest wait for one server's metrics.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

pub fn run(args: TopArgs) -> Result<()> {
    let meta = weft_config::meta_address()?;
    let key = weft_config::client_key_path()?;
    let auth = ClientAuth::cluster(ClusterKey::load(&key)?);
    let pool = ConnectionPool::new(
        "weft top",
        auth,
        Timeouts {
            connect: SCRAPE_TIMEOUT,
            request: SCRAPE_TIMEOUT,
        },
    );
    let (cluster, servers) = targets(&pool, &meta)
        .with_context(|| format!("asking the metadata manager at {meta} for its servers"))?;
    let mut watch = Watch::new(&pool, servers, true);
    let interval = Duration::from_millis(args.interval_ms.max(100));
    watch.round(&pool, SCRAPE_TIMEOUT);
    let mut last = Instant::now();
    loop {
        std::thread::sleep(interval.saturating_sub(last.elapsed()));
        let observed = watch.round(&pool, SCRAPE_TIMEOUT);
        let seconds = last.elapsed().as_secs_f64();
        last = Instant::now();
        let view = View::between(&cluster, &observed, seconds);
        let text = if args.json {
            view.to_json() + "\n"
        } else {
            view.render_text()
        };
        let mut out = std::io::stdout().lock();
        if args.once {
            out.write_all(text.as_bytes())?;
            if view.servers.iter().any(|s| s.state != "up") {
                std::process::exit(2);
            }
            return Ok(());
        }
        // Home and clear, then the view: a terminal shows it in place.
        write!(out, "\x1b[H\x1b[2J{text}")?;
        out.flush()?;
    }
}
