//! Which regime a benchmark measured: servers on this machine's loopback (the figures
//! describe its page cache and memory copies), or the emulated network of `weft up
//! --emulate-network` (each server behind a shaped link; the figures are bounded by
//! the links as on a cluster). Every result file records it (`report::write_results`)
//! and every benchmark prints it.
//!
//! `weft bench --emulate-network RATE[,LATENCY] <benchmark>` runs any benchmark in the
//! emulated regime: benchmarks that start their own clusters start them emulated; the
//! others get a throwaway emulated cluster of 4 io servers for the run.

use anyhow::Result;
use std::path::Path;
use std::sync::Mutex;
use weft_config::netemu::NetworkEmulation;

/// `--emulate-network` as given, for the clusters benchmarks start themselves.
static ASKED: Mutex<Option<String>> = Mutex::new(None);
/// The emulated network of a cluster this process started, once up.
static STARTED: Mutex<Option<NetworkEmulation>> = Mutex::new(None);

/// Io servers of the throwaway emulated cluster `--emulate-network` starts.
pub const EMULATED_IO_SERVERS: u32 = 4;

/// Asks every cluster this process starts to be emulated with `spec`.
pub(crate) fn ask(spec: &str) {
    *ASKED.lock().unwrap_or_else(|p| p.into_inner()) = Some(spec.to_owned());
}

/// The `weft up` arguments of the regime asked for (none, or `--emulate-network SPEC`).
pub(crate) fn up_args() -> Vec<String> {
    match &*ASKED.lock().unwrap_or_else(|p| p.into_inner()) {
        Some(spec) => vec!["--emulate-network".into(), spec.clone()],
        None => Vec::new(),
    }
}

/// Records the regime of the cluster this process started in `home`.
pub(crate) fn record(home: &Path) -> Result<()> {
    let emu = NetworkEmulation::load(home).map_err(anyhow::Error::msg)?;
    if emu.is_none() && ASKED.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
        anyhow::bail!(
            "the cluster in {} was asked for an emulated network but has none",
            home.display()
        );
    }
    if emu.is_some() {
        *STARTED.lock().unwrap_or_else(|p| p.into_inner()) = emu;
    }
    Ok(())
}

/// The emulated network measured: the one this process started, else the one of the
/// cluster the environment names (WEFT_HOME or ~/.weft; none for WEFT_META).
pub fn emulation() -> Option<NetworkEmulation> {
    if let Some(e) = STARTED.lock().unwrap_or_else(|p| p.into_inner()).clone() {
        return Some(e);
    }
    if std::env::var("WEFT_META").is_ok_and(|m| !m.is_empty()) {
        return None;
    }
    NetworkEmulation::load(&weft_config::home_dir()).ok().flatten()
}

/// One line naming the regime.
pub fn describe() -> String {
    match emulation() {
        Some(e) => e.describe(),
        None if std::env::var("WEFT_META").is_ok_and(|m| !m.is_empty()) => {
            "the cluster at WEFT_META (its network is not known here)".to_owned()
        }
        None if ASKED.lock().unwrap_or_else(|p| p.into_inner()).is_some() => format!(
            "emulated network {} asked for the clusters this benchmark starts",
            up_args().last().cloned().unwrap_or_default()
        ),
        None => "local: the servers on this machine's loopback and Unix sockets; the figures describe this \
                 machine (page cache, memory copies), not a network"
            .to_owned(),
    }
}

/// The regime as the result files record it.
pub fn json() -> serde_json::Value {
    match emulation() {
        Some(e) => serde_json::json!({
            "kind": "emulated-network",
            "cluster_id": e.cluster_id,
            "rate_bits_per_s": e.rate_bits,
            "latency_us": e.latency_us,
            "latency_applied": e.latency_applied,
            "latency_note": e.latency_note,
            "io_servers": e.io_servers,
            "io_links_total_mib_s": e.io_bytes_per_s() / (1u64 << 20) as f64,
            "description": e.describe(),
        }),
        None => serde_json::json!({ "kind": "local", "description": describe() }),
    }
}
