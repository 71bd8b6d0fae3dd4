//! Collective I/O: the two-phase family behind one trait.
//!
//! Every method but `independent` is the same exchange engine ([`engine`]) run with a
//! file-domain partition (who aggregates which bytes, in which windows) and an
//! executor (sequential phases, or I/O on a helper thread overlapping the exchange):
//!
//! | method                  | partition ([`Domains`])      | executor   |
//! |-------------------------|------------------------------|------------|
//! | `two_phase`             | [`two_phase`]: even domains  | sequential |
//! | `interleaved`           | [`interleaved`]: round robin | sequential |
//! | `pipelined`             | even domains                 | [`pipelined`] |
//! | `interleaved_pipelined` | round robin                  | pipelined  |
//! | `stripe_aligned`        | [`stripe_aligned`]: stripes  | sequential |
//!
//! [`auto`] picks one per call. Each method is a [`Method`].

pub mod auto;
pub mod engine;
pub mod independent;
pub mod interleaved;
pub mod pattern;
pub mod pipelined;
pub mod stripe_aligned;
pub mod two_phase;

use weft_client::File;

use crate::error::Result;
use crate::hints::Hints;
use crate::mpi::Comm;

/// One rank's part of a collective access: contiguous file pieces in increasing file
/// order; the data stream is their concatenation, in the same order.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub pieces: Vec<(u64, u64)>,
}

impl Request {
    pub fn bytes(&self) -> u64 {
        self.pieces.iter().map(|p| p.1).sum()
    }

    /// [first byte, end) of the request, or None when it is empty.
    pub fn extent(&self) -> Option<(u64, u64)> {
        let first = self.pieces.iter().find(|p| p.1 > 0)?;
        let last = self.pieces.iter().rev().find(|p| p.1 > 0)?;
        Some((first.0, last.0 + last.1))
    }

    /// Bytes of the request before file offset `eof`.
    pub fn bytes_before(&self, eof: u64) -> u64 {
        self.pieces
            .iter()
            .map(|&(off, len)| eof.saturating_sub(off).min(len))
            .sum()
    }
}

/// What every method gets: the file's communicator, the file, the hints, the
/// aggregator ranks and every rank's request extent.
pub struct Context<'a> {
    pub comm: &'a Comm,
    pub file: &'a File,
    pub hints: &'a Hints,
    /// Ranks that may aggregate (from cb_nodes / cb_config_list), ascending.
    pub aggregators: &'a [usize],
    /// Every rank's (first byte, end) of its request; (u64::MAX, 0) when empty.
    pub extents: &'a [(u64, u64)],
    /// Pieces and bytes of all ranks' requests together.
    pub pieces_total: u64,
    pub bytes_total: u64,
}

impl Context<'_> {
    /// The region all requests fall in, or None when every request is empty.
    pub fn region(&self) -> Option<(u64, u64)> {
        let lo = self.extents.iter().map(|e| e.0).min()?;
        let hi = self.extents.iter().map(|e| e.1).max()?;
        (lo < hi).then_some((lo, hi))
    }

    /// Whether requests of different ranks interleave, ROMIO's test: some rank's request
    /// starts before the end of the previous rank's.
    pub fn interleaved(&self) -> bool {
        let mut previous_end = 0u64;
        let mut any = false;
        for &(lo, hi) in self.extents {
            if lo >= hi {
                continue;
            }
            if any && lo < previous_end {
                return true;
            }
            previous_end = previous_end.max(hi);
            any = true;
        }
        false
    }
}

/// A collective I/O method. Every rank of the communicator calls the same method with
/// its own request; errors are returned locally, and the caller agrees on them.
pub trait Method {
    fn name(&self) -> &'static str;
    /// Writes `data` (the request's stream) to the request's pieces.
    fn write(&self, ctx: &Context<'_>, request: &Request, data: &[u8]) -> Result<()>;
    /// Reads the request's pieces into `data`; returns the end of file as far as this
    /// call learnt it (u64::MAX when no read came up short), agreed among ranks.
    fn read(&self, ctx: &Context<'_>, request: &Request, data: &mut [u8]) -> Result<u64>;
}

/// Which ranks aggregate: `count` of them spread evenly over `size` ranks.
pub fn spread(count: usize, size: usize) -> Vec<usize> {
    let count = count.clamp(1, size.max(1));
    (0..count).map(|i| i * size / count).collect()
}
