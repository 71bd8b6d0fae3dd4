//! Collective I/O: the two-phase family behind one trait.
//!
//! Every method but `independent` is the same exchange engine ([`engine`]) run with a
//! file-domain partition (who aggregates which bytes, in which windows) and an
//! executor (sequential phases, or I/O on a helper thread overlapping the exchange):
//!
//! | method                  | partition ([`engine::Domains`])| executor   |
//! |-------------------------|------------------------------|------------|
//! | `two_phase`             | [`two_phase`]: even domains  | sequential |
//! | `interleaved`           | [`mod@interleaved`]: round robin | sequential |
//! | `pipelined`             | even domains                 | [`pipelined`] |
//! | `interleaved_pipelined` | round robin                  | pipelined  |
//! | `stripe_aligned`        | [`stripe_aligned`]: stripes  | sequential |
//!
//! Two methods exchange nothing among the processes: `independent` (every rank on its
//! own) and [`server_directed`] (every rank sends its view interval straight to the
//! servers of the file's data layout, its cache managers for a cached file, in the
//! decentralised schedule's order).
//!
//! [`auto`] picks one per call. Each method is a [`Method`].

pub mod auto;
pub mod engine;
pub mod independent;
pub mod interleaved;
pub mod no_exchange;
pub mod pattern;
pub mod pipelined;
pub mod server_directed;
pub mod stripe_aligned;
pub mod two_phase;

use std::sync::OnceLock;

use weft_client::{File, View};

use crate::error::Result;
use crate::hints::Hints;
use crate::mpi::Comm;

/// One rank's part of an access: `len` bytes of its view from view offset
/// `view_offset`. Its contiguous file pieces (in increasing file order; the data stream
/// is their concatenation) are listed only when a method asks for them ([`pieces`]):
/// `server_directed` and `independent` send the view interval as is.
///
/// [`pieces`]: Request::pieces
#[derive(Debug, Clone)]
pub struct Request {
    view: View,
    view_offset: u64,
    len: u64,
    /// The view is the one set on the file handle, so `write_view`/`read_view` move
    /// this request (false when the view could not be registered: list I/O then).
    pub view_on_file: bool,
    pieces: OnceLock<Vec<(u64, u64)>>,
}

impl Request {
    /// `len` bytes of `view` from `view_offset`; fails if they reach past the largest
    /// file offset.
    pub fn new(view: &View, view_offset: u64, len: u64, view_on_file: bool) -> Result<Request> {
        if len > 0 {
            view.file_extent(view_offset, len)?;
        }
        Ok(Request {
            view: view.clone(),
            view_offset,
            len,
            view_on_file,
            pieces: OnceLock::new(),
        })
    }

    pub fn view_offset(&self) -> u64 {
        self.view_offset
    }

    /// The file pieces, listed at the first call.
    pub fn pieces(&self) -> &[(u64, u64)] {
        self.pieces.get_or_init(|| {
            if self.len == 0 {
                return Vec::new();
            }
            self.view
                .pieces(self.view_offset, self.len)
                .expect("interval checked by Request::new")
                .map(|p| (p.file_offset, p.len))
                .collect()
        })
    }

    pub fn bytes(&self) -> u64 {
        self.len
    }

    /// [first byte, end) of the request, or None when it is empty.
    pub fn extent(&self) -> Option<(u64, u64)> {
        (self.len > 0).then(|| {
            self.view
                .file_extent(self.view_offset, self.len)
                .expect("interval checked by Request::new")
        })
    }

    /// Whether the request is one contiguous run of the file.
    pub fn is_contiguous(&self) -> bool {
        self.extent().is_none_or(|(lo, hi)| hi - lo == self.len)
    }

    /// Bytes of the request before file offset `eof`.
    pub fn bytes_before(&self, eof: u64) -> u64 {
        if eof == u64::MAX {
            return self.len;
        }
        self.view
            .file_to_view(eof)
            .saturating_sub(self.view_offset)
            .min(self.len)
    }

    /// The file offset just past the first `n` bytes of the request (u64::MAX when
    /// that is all of them): an end of file as [`Method::read`] returns it.
    pub fn end_after(&self, n: u64) -> u64 {
        if n >= self.len {
            return u64::MAX;
        }
        self.view
            .view_to_file(self.view_offset + n)
            .expect("interval checked by Request::new")
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
    /// Bytes of all ranks' requests together.
    pub bytes_total: u64,
    /// Whether every rank's request can go as a view interval (its view is the one set
    /// on its file handle).
    pub views_registered: bool,
}

impl Context<'_> {
    /// The region all requests fall in, or None when every request is empty.
    pub fn region(&self) -> Option<(u64, u64)> {
        let lo = self.extents.iter().map(|e| e.0).min()?;
        let hi = self.extents.iter().map(|e| e.1).max()?;
        (lo < hi).then_some((lo, hi))
    }

    /// Whether requests of different ranks interleave (see [`interleaved()`]).
    pub fn interleaved(&self) -> bool {
        interleaved(self.extents.iter().copied())
    }
}

/// Whether requests of different ranks interleave: some request starts before another
/// one, that started no later, has ended. `extents` are (first byte, end), one per
/// rank; empty ones (lo >= hi) are skipped. ROMIO's test compares each rank's with the
/// ranks before it only, so ranks that access disjoint blocks in another order than
/// theirs (each reads its neighbour's block, as IOR -C does) count there as
/// interleaved and pay for two-phase I/O that merges nothing; here the extents are
/// compared in file order.
pub fn interleaved(extents: impl IntoIterator<Item = (u64, u64)>) -> bool {
    let mut sorted: Vec<(u64, u64)> = extents.into_iter().filter(|(lo, hi)| lo < hi).collect();
    sorted.sort_unstable();
    sorted.windows(2).any(|w| w[1].0 < w[0].1)
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

#[cfg(test)]
mod tests {
    use super::interleaved;

    #[test]
    fn requests_interleave_when_their_extents_overlap_in_file_order() {
        // Rank order, each its own block: no.
        assert!(!interleaved([(0, 10), (10, 20), (20, 30)]));
        // Each rank its neighbour's block (rotated): still disjoint, so no.
        assert!(!interleaved([(10, 20), (20, 30), (0, 10)]));
        // Empty requests are skipped wherever they are.
        assert!(!interleaved([(u64::MAX, 0), (10, 20), (5, 5), (0, 10)]));
        // One extent inside another's span (a strided view), or overlapping ones: yes.
        assert!(interleaved([(0, 100), (40, 50)]));
        assert!(interleaved([(20, 30), (0, 21)]));
        assert!(interleaved([(0, 10), (0, 10)]));
        assert!(!interleaved([]));
    }
}
