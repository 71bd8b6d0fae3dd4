//! The emulated network of a cluster started with `weft up --emulate-network
//! RATE[,LATENCY]`: what was asked (`RATE,LATENCY`), what the machine could do (the
//! latency needs tc's netem discipline, which some kernels lack), and the names of what
//! was made (network namespaces, links, the private subnet), recorded in the cluster's
//! home as `netemu.toml` so that `weft down`, a restart and the benchmarks know the
//! regime a cluster runs in.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// The file in a cluster's home that records its emulated network.
pub const NETEMU_FILE_NAME: &str = "netemu.toml";
/// Slowest link rate accepted (below this a benchmark never ends): 1 Mbit/s.
pub const RATE_BITS_MIN: u64 = 1_000_000;
/// Fastest link rate accepted: 400 Gbit/s.
pub const RATE_BITS_MAX: u64 = 400_000_000_000;
/// Longest one-way delay accepted: 1 s.
pub const LATENCY_US_MAX: u64 = 1_000_000;

/// A parsed `RATE[,LATENCY]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkSpec {
    /// Bits per second of every server's link, in each direction.
    pub rate_bits: u64,
    /// One-way delay added in each direction of every server's link, microseconds.
    pub latency_us: u64,
}

impl std::str::FromStr for NetworkSpec {
    type Err = String;

    /// `1gbit`, `1gbit,50us`, `500mbit,0.2ms` (tc's units: bit, kbit, mbit, gbit, and
    /// us, ms, s).
    fn from_str(text: &str) -> Result<NetworkSpec, String> {
        let mut parts = text.split(',');
        let rate = parts.next().unwrap_or("").trim();
        let latency = parts.next().map(str::trim).unwrap_or("0");
        if parts.next().is_some() {
            return Err(format!("{text:?}: expected RATE[,LATENCY], e.g. 1gbit,50us"));
        }
        let rate_bits = parse_rate(rate)?;
        let latency_us = parse_latency(latency)?;
        Ok(NetworkSpec {
            rate_bits,
            latency_us,
        })
    }
}

/// Splits `12.5mbit` into (12.5, "mbit").
fn number_and_unit(text: &str) -> Option<(f64, String)> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().ok()?;
    value.is_finite().then(|| (value, unit.to_ascii_lowercase()))
}

fn parse_rate(text: &str) -> Result<u64, String> {
    let bad = || format!("rate {text:?}: expected a number and bit, kbit, mbit or gbit, e.g. 1gbit");
    let (value, unit) = number_and_unit(text).ok_or_else(bad)?;
    let scale = match unit.as_str() {
        "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        _ => return Err(bad()),
    };
    let bits = (value * scale).round() as u64;
    if !(RATE_BITS_MIN..=RATE_BITS_MAX).contains(&bits) {
        return Err(format!(
            "rate {text:?}: must be between 1mbit and 400gbit per server link"
        ));
    }
    Ok(bits)
}

fn parse_latency(text: &str) -> Result<u64, String> {
    if text == "0" {
        return Ok(0);
    }
    let bad = || format!("latency {text:?}: expected a number and us, ms or s, e.g. 50us");
    let (value, unit) = number_and_unit(text).ok_or_else(bad)?;
    let scale = match unit.as_str() {
        "us" => 1.0,
        "ms" => 1e3,
        "s" => 1e6,
        _ => return Err(bad()),
    };
    let us = (value * scale).round() as u64;
    if us > LATENCY_US_MAX {
        return Err(format!("latency {text:?}: at most 1s"));
    }
    Ok(us)
}

/// A cluster's emulated network, as `netemu.toml` records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkEmulation {
    /// Five hex digits naming everything made for this cluster: namespaces
    /// `weft-<id>-<server>`, the bridge `weft-<id>`, host-side links `weft-<id>-<server>`.
    pub cluster_id: String,
    /// The private subnet of the cluster's links, e.g. `10.213.4.0/22`.
    pub subnet: String,
    /// Bits per second of every server's link, in each direction (tc tbf).
    pub rate_bits: u64,
    /// One-way delay asked for each direction, microseconds.
    pub latency_us: u64,
    /// Whether that delay is applied (tc netem exists on this kernel).
    pub latency_applied: bool,
    /// Why it is not, when it is not (empty otherwise).
    #[serde(default)]
    pub latency_note: String,
    /// Io servers of the cluster: their links' total rate bounds a contiguous transfer.
    pub io_servers: u32,
}

impl NetworkEmulation {
    /// The name of server `id`'s network namespace (and its host-side link).
    pub fn namespace(&self, id: u32) -> String {
        format!("weft-{}-{id}", self.cluster_id)
    }

    /// The name of the bridge joining the cluster's links.
    pub fn bridge(&self) -> String {
        format!("weft-{}", self.cluster_id)
    }

    /// Bytes per second through all io servers' links together, each direction.
    pub fn io_bytes_per_s(&self) -> f64 {
        self.rate_bits as f64 / 8.0 * f64::from(self.io_servers)
    }

    /// One line for reports: which regime was measured.
    pub fn describe(&self) -> String {
        let latency = if self.latency_us == 0 {
            "no added latency".to_owned()
        } else if self.latency_applied {
            format!("{} us one-way latency each direction (netem)", self.latency_us)
        } else {
            format!(
                "latency NOT emulated ({} us asked; {})",
                self.latency_us, self.latency_note
            )
        };
        format!(
            "emulated network: each server in its own network namespace behind a {} link each direction \
             (tc tbf), {latency}; clients over TCP; {} io servers, {:.1} MiB/s in all",
            rate_text(self.rate_bits),
            self.io_servers,
            self.io_bytes_per_s() / f64::from(1u32 << 20)
        )
    }

    /// The emulated network recorded in `home`, if any.
    pub fn load(home: &Path) -> Result<Option<NetworkEmulation>, String> {
        let path = home.join(NETEMU_FILE_NAME);
        match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str(&text)
                .map(Some)
                .map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    pub fn save(&self, home: &Path) -> Result<(), String> {
        let path = home.join(NETEMU_FILE_NAME);
        let text = toml::to_string(self).map_err(|e| e.to_string())?;
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// `1 Gbit/s`, `200 Mbit/s`.
pub fn rate_text(bits: u64) -> String {
    if bits >= 1_000_000_000 && bits.is_multiple_of(1_000_000) {
        format!("{} Gbit/s", bits as f64 / 1e9)
    } else if bits >= 1_000_000 {
        format!("{} Mbit/s", bits as f64 / 1e6)
    } else {
        format!("{bits} bit/s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_are_refused() {
        let s: NetworkSpec = "1gbit,50us".parse().unwrap();
        assert_eq!((s.rate_bits, s.latency_us), (1_000_000_000, 50));
        let s: NetworkSpec = "200mbit".parse().unwrap();
        assert_eq!((s.rate_bits, s.latency_us), (200_000_000, 0));
        let s: NetworkSpec = "2.5Gbit,0.2ms".parse().unwrap();
        assert_eq!((s.rate_bits, s.latency_us), (2_500_000_000, 200));
        for bad in [
            "",
            "1gb",
            "fast",
            "1gbit,50",
            "1gbit,5us,1",
            "10kbit",
            "1gbit,2s",
            "-1gbit",
        ] {
            assert!(bad.parse::<NetworkSpec>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_record_round_trips_and_describes_the_regime() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(NetworkEmulation::load(dir.path()).unwrap(), None);
        let e = NetworkEmulation {
            cluster_id: "0a1b2".into(),
            subnet: "10.213.4.0/22".into(),
            rate_bits: 1_000_000_000,
            latency_us: 50,
            latency_applied: false,
            latency_note: "no netem".into(),
            io_servers: 4,
        };
        e.save(dir.path()).unwrap();
        assert_eq!(NetworkEmulation::load(dir.path()).unwrap(), Some(e.clone()));
        assert_eq!(e.namespace(3), "weft-0a1b2-3");
        assert!(e.describe().contains("latency NOT emulated"), "{}", e.describe());
        assert!((e.io_bytes_per_s() - 500e6).abs() < 1.0);
    }
}
