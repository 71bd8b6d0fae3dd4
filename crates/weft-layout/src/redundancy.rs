//! Redundancy of a file's data (issue 33): how many copies of each stripe exist and on
//! which io servers, and which of those pieces are stale.
//!
//! A replicated layout (`replicas=N`) keeps the plain striping of `Layout::servers`
//! (copy 0, the primary) and adds `N - 1` copies: copy `r` of the stripes of slot `k`
//! (`servers[k]`'s stripes) lives on `Replication::copies[(r - 1) * width + k]`, in that
//! server's object for the inode at exactly the local offsets the primary uses. So any
//! request a client would send to slot `k`'s server can be sent unchanged (same striping,
//! same ranges or view interval) to any copy of slot `k`: replication sits below views,
//! list I/O and collective methods, which only ever address slots. Every server of a
//! replicated layout (primaries and copies) is distinct, so one server holds at most
//! one piece of a file and an io server's object per inode stays unambiguous.

use crate::ids::ServerId;

/// Most copies of a file's data (`replicas=N`, N at most this).
pub const REPLICAS_MAX: u8 = 8;

/// Where a replicated layout's extra copies are, and which pieces are stale. Empty
/// (the default): a plain layout, one copy.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Replication {
    /// The servers of copies 1.. in slot order, `width` per copy.
    pub copies: Vec<ServerId>,
    /// Servers whose piece of the file missed writes while they were down (recorded
    /// by the manager when a writer found them down): never read from, not written to,
    /// until rebuilt.
    pub stale: Vec<ServerId>,
}

/// A redundancy a user asks for. `Replicas(1)` is a plain layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Redundancy {
    Replicas(u8),
}

impl Default for Redundancy {
    fn default() -> Self {
        Redundancy::Replicas(1)
    }
}

impl Redundancy {
    /// Copies of each stripe.
    pub fn copies(self) -> usize {
        match self {
            Redundancy::Replicas(n) => n as usize,
        }
    }
}

impl std::fmt::Display for Redundancy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Redundancy::Replicas(1) => f.write_str("plain"),
            Redundancy::Replicas(n) => write!(f, "replicas={n}"),
        }
    }
}

impl std::str::FromStr for Redundancy {
    type Err = String;
    /// `plain` (or `none`, `replicas=1`), `replicas=N` for N in 1..=8. `ec=k+m` is named
    /// by the design but not built yet: refused saying so.
    fn from_str(s: &str) -> Result<Redundancy, String> {
        let s = s.trim();
        if s == "plain" || s == "none" {
            return Ok(Redundancy::Replicas(1));
        }
        if let Some(n) = s.strip_prefix("replicas=") {
            return match n.parse::<u8>() {
                Ok(n) if (1..=REPLICAS_MAX).contains(&n) => Ok(Redundancy::Replicas(n)),
                _ => Err(format!(
                    "redundancy {s:?}: the number of replicas must be 1..={REPLICAS_MAX}"
                )),
            };
        }
        if s.starts_with("ec=") {
            return Err(format!(
                "redundancy {s:?}: erasure-coded layouts are not built yet; use replicas=N"
            ));
        }
        Err(format!(
            "redundancy {s:?} is not one of plain, replicas=N (N in 1..={REPLICAS_MAX})"
        ))
    }
}

/// The copies of a replicated layout of `width` slots starting at cluster index
/// `first`: copy `r` of slot `k` is cluster server `(first + k + r * width) mod n`, so
/// the `copies * width` servers are distinct (the caller checks `copies * width <= n`)
/// and copy `r` is the plain layout that starts `r * width` servers further on.
pub(crate) fn place_copies(
    cluster_servers: &[ServerId],
    first: usize,
    width: usize,
    copies: usize,
) -> Vec<ServerId> {
    let n = cluster_servers.len();
    (1..copies)
        .flat_map(|r| (0..width).map(move |k| (first + k + r * width) % n))
        .map(|i| cluster_servers[i])
        .collect()
}
