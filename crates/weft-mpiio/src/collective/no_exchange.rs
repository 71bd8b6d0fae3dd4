//! Collective calls that need nothing of the other ranks before their I/O.
//!
//! A collective call normally costs three MPI collectives around its I/O: it gathers
//! every rank's extent (to agree on errors and for `auto` to choose a method), runs
//! the method, and agrees on the outcome. When the method exchanges nothing among the
//! processes (`independent`, `server_directed`, atomic mode's locked independent I/O)
//! and every rank can tell which method it is from what all ranks already hold alike
//! (the shared hints, the file, the atomic mode, the file's history of collective
//! calls), the gather before the I/O serves nothing: each rank does its I/O at once,
//! and one allgather after it agrees on the outcome and collects the extents that the
//! history needs. One MPI collective per call instead of three: with small transfers
//! (IOR's `-c -t 3000`) the collectives were most of a call's time.
//!
//! The plans decided without a gather ([`plan`]), in this order:
//! 1. atomic mode: each rank's part under its own extent locks (always so);
//! 2. a read that attaches the access pattern to the cache tier (`weft_cio_aware`):
//!    that exchanges, so the full path;
//! 3. a delegated file under `auto`: `server_directed` (static file domains);
//! 4. `romio_cb_read/write=disable`, or `weft_cb_method=independent` or
//!    `server_directed`: that method;
//! 5. `auto` with `romio_cb_read/write=automatic`, after [`STREAK_AUTOMATIC`] calls in
//!    a row (of the same direction, on this handle) whose requests did not interleave
//!    (`weft_cb_predict=enable`: after one; `disable`: never): `independent`, the
//!    method ROMIO's rule picks for requests that do not interleave. This is a
//!    prediction: the call's own requests are checked by the allgather after it, and
//!    a call that did interleave sends the next ones through the full path again.
//!    Independent I/O is correct for any pattern outside atomic mode (MPI leaves
//!    overlapping writes of one collective call undefined, and `auto` itself sends
//!    interleaved requests through view I/O when each rank's share is large), so a
//!    wrong prediction costs speed for one call, never data.
//!
//! What changes for the program: when one rank fails before its I/O (a bad count, say)
//! the other ranks of such a call still do theirs; every rank still returns the same
//! error class.

use weft_client::File;

use super::independent::Independent;
use super::server_directed::ServerDirected;
use super::Method;
use crate::error::{MpiioError, Result};
use crate::hints::{Hints, Method as Name, Switch};
use crate::mpi::Comm;

/// Calls in a row whose requests did not interleave after which `auto` predicts the
/// next does not either (`weft_cb_predict=automatic`): a program that alternates a
/// header written by one rank with interleaved data calls is not mispredicted.
pub const STREAK_AUTOMATIC: u32 = 4;
/// The streak counts no further (it only ever needs to reach [`STREAK_AUTOMATIC`]).
const STREAK_MAX: u32 = 1 << 16;

/// The file handle's history of collective calls: per direction (read, write), how
/// many calls in a row ended without error with requests that did not interleave. It
/// changes only with agreed outcomes, so it is the same on every rank.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct History {
    streak: [u32; 2],
}

impl History {
    /// Notes a collective call's agreed outcome: `Some(interleaved)` when it succeeded,
    /// `None` when it failed.
    pub fn record(&mut self, write: bool, interleaved: Option<bool>) {
        let s = &mut self.streak[usize::from(write)];
        *s = match interleaved {
            Some(false) => (*s + 1).min(STREAK_MAX),
            _ => 0,
        };
    }

    pub fn streak(&self, write: bool) -> u32 {
        self.streak[usize::from(write)]
    }
}

/// Collective writes kept in the ranks' write-behind buffers (`MpiFile::collective_io`)
/// since every rank last flushed and then synchronised: per rank, the extents its
/// buffered collective calls wrote (at most [`BUFFERED_EXTENTS_MAX`] disjoint ones; past
/// that the two closest are joined, which may make later calls conflict that do not,
/// never the reverse). It changes only with gathered extents and collective calls, so
/// it is the same on every rank, and every rank makes the same choice from it (wait
/// for every buffer to be sent, or not).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Buffered {
    /// Indexed by rank (empty until the first buffered call); each sorted, disjoint.
    extents: Vec<Vec<(u64, u64)>>,
}

/// Extents [`Buffered`] keeps per rank.
pub const BUFFERED_EXTENTS_MAX: usize = 16;

impl Buffered {
    /// Whether some rank may hold bytes of a collective write that others cannot see.
    pub fn any(&self) -> bool {
        self.extents.iter().any(|e| !e.is_empty())
    }

    /// Whether a call with these extents (one per rank, (first byte, end); empty ones
    /// lo >= hi) writes bytes that another rank still buffers from an earlier call:
    /// sent later, those older bytes would land over the newer ones.
    pub fn conflicts(&self, extents: &[(u64, u64)]) -> bool {
        extents.iter().enumerate().any(|(rank, &(lo, hi))| {
            lo < hi
                && self.extents.iter().enumerate().any(|(other, kept)| {
                    // The first kept extent ending after lo, if it starts before hi.
                    let i = kept.partition_point(|&(_, b)| b <= lo);
                    other != rank && kept.get(i).is_some_and(|&(a, _)| a < hi)
                })
        })
    }

    /// Notes the extents of a call whose bytes went into the buffers.
    pub fn add(&mut self, extents: &[(u64, u64)]) {
        if self.extents.len() < extents.len() {
            self.extents.resize(extents.len(), Vec::new());
        }
        for (kept, &(lo, hi)) in self.extents.iter_mut().zip(extents) {
            if lo >= hi {
                continue;
            }
            // Join every kept extent that overlaps or touches [lo, hi).
            let first = kept.partition_point(|&(_, b)| b < lo);
            let last = kept.partition_point(|&(a, _)| a <= hi);
            let (mut a, mut b) = (lo, hi);
            if first < last {
                a = a.min(kept[first].0);
                b = b.max(kept[last - 1].1);
            }
            kept.splice(first..last, [(a, b)]);
            if kept.len() > BUFFERED_EXTENTS_MAX {
                let i = (1..kept.len())
                    .min_by_key(|&i| kept[i].0 - kept[i - 1].1)
                    .expect("more than one");
                kept[i - 1].1 = kept[i].1;
                kept.remove(i);
            }
        }
    }

    /// The end of the last byte some rank buffers (0: none): the file's size once
    /// every buffer is sent is at least this (writes only extend it, and a truncate
    /// clears this record).
    pub fn end(&self) -> u64 {
        self.extents
            .iter()
            .filter_map(|e| e.last())
            .map(|&(_, b)| b)
            .max()
            .unwrap_or(0)
    }

    /// Every rank sent its buffer, and they synchronised after.
    pub fn clear(&mut self) {
        self.extents.clear();
    }
}

/// How a call runs without a gather before its I/O.
pub enum Plan {
    /// Atomic mode: independent I/O under the rank's extent locks.
    Atomic,
    /// A method that exchanges nothing, and why it was chosen.
    Method(Box<dyn Method>, &'static str),
}

/// The plan of a collective call that needs no gather before its I/O, or None (the
/// full path). Decided only from what every rank holds alike.
pub fn plan(file: &File, hints: &Hints, atomic: bool, write: bool, history: &History) -> Option<Plan> {
    if atomic {
        return Some(Plan::Atomic);
    }
    if hints.cio_aware && !write && file.cache_mode().uses_tier() {
        return None;
    }
    if let Some((method, why)) = crate::delegation::direct_method(file, hints) {
        return Some(Plan::Method(method, why));
    }
    let switch = if write {
        hints.romio_cb_write
    } else {
        hints.romio_cb_read
    };
    if switch == Switch::Disable {
        return Some(Plan::Method(
            Box::new(Independent),
            "romio_cb_read/write disabled",
        ));
    }
    match hints.method {
        Name::Independent => return Some(Plan::Method(Box::new(Independent), "weft_cb_method")),
        Name::ServerDirected => return Some(Plan::Method(Box::new(ServerDirected), "weft_cb_method")),
        Name::Auto if switch == Switch::Automatic => {}
        _ => return None,
    }
    let needed = match hints.cb_predict {
        Switch::Disable => return None,
        Switch::Enable => 1,
        Switch::Automatic => STREAK_AUTOMATIC,
    };
    (history.streak(write) >= needed).then(|| {
        Plan::Method(
            Box::new(Independent),
            "the file's last collective calls did not interleave: independent without gathering extents first",
        )
    })
}

/// After the I/O of a call planned without a gather: agrees on the outcome (as
/// [`super::engine::agree`]) and gathers every rank's extent (`None`: no bytes, or the
/// rank failed before its I/O), in one allgather. Returns the agreed outcome and
/// whether the ranks' requests interleaved.
pub fn conclude<T>(comm: &Comm, local: Result<T>, extent: Option<(u64, u64)>) -> Result<(Result<T>, bool)> {
    let class = local.as_ref().err().map_or(0, |e: &MpiioError| e.class as i64);
    let (lo, hi) = extent.unwrap_or((u64::MAX, 0));
    let all = comm.allgather(&[class, lo as i64, hi as i64])?;
    let worst = all.chunks(3).map(|c| c[0]).max().unwrap_or(0);
    let interleaved = super::interleaved(all.chunks(3).map(|c| (c[1] as u64, c[2] as u64)));
    Ok((super::engine::settle(local, worst), interleaved))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_over_another_ranks_buffered_bytes_conflicts_and_its_own_does_not() {
        let mut b = Buffered::default();
        assert!(!b.any());
        const NONE: (u64, u64) = (u64::MAX, 0);
        // Ranks 0 and 1 buffered [0, 100) and [100, 200).
        b.add(&[(0, 100), (100, 200), NONE]);
        assert!(b.any());
        // Each rank again over its own bytes, rank 2 elsewhere: no conflict.
        assert!(!b.conflicts(&[(50, 100), (100, 150), (200, 300)]));
        // Rank 1 over rank 0's bytes; rank 2 over rank 1's.
        assert!(b.conflicts(&[NONE, (99, 101), NONE]));
        assert!(b.conflicts(&[NONE, NONE, (150, 160)]));
        // Touching is not overlapping.
        assert!(!b.conflicts(&[NONE, NONE, (200, 210)]));
        // Rank 0's bytes at [500, 600) are kept apart from [0, 100): a write between
        // them does not conflict; one over them does.
        b.add(&[(500, 600), NONE, NONE]);
        assert!(!b.conflicts(&[NONE, NONE, (300, 301)]));
        assert!(b.conflicts(&[NONE, NONE, (599, 700)]));
        // Touching extents join: [600, 650) makes [500, 650).
        b.add(&[(600, 650), NONE, NONE]);
        assert_eq!(b.extents[0], vec![(0, 100), (500, 650)]);
        // Past the bound the two closest join (the gap then conflicts: conservative).
        for i in 0..BUFFERED_EXTENTS_MAX as u64 {
            b.add(&[(10_000 + i * 100, 10_000 + i * 100 + 10), NONE, NONE]);
        }
        assert_eq!(b.extents[0].len(), BUFFERED_EXTENTS_MAX);
        assert!(b.conflicts(&[NONE, NONE, (10_050, 10_051)]));
        assert!(!b.conflicts(&[NONE, NONE, (300, 301)]));
        assert_eq!(b.end(), 10_000 + 15 * 100 + 10);
        b.clear();
        assert_eq!(b.end(), 0);
        assert!(!b.any() && !b.conflicts(&[(0, 1000), (0, 1000), (0, 1000)]));
    }

    #[test]
    fn the_streak_counts_calls_in_a_row_per_direction_and_is_bounded() {
        let mut h = History::default();
        for _ in 0..3 {
            h.record(true, Some(false));
        }
        assert_eq!((h.streak(true), h.streak(false)), (3, 0));
        h.record(false, Some(false));
        assert_eq!((h.streak(true), h.streak(false)), (3, 1));
        // An interleaved call, or a failed one, starts the count again.
        h.record(true, Some(true));
        assert_eq!(h.streak(true), 0);
        h.record(false, None);
        assert_eq!(h.streak(false), 0);
        for _ in 0..(STREAK_MAX + 10) {
            h.record(true, Some(false));
        }
        assert_eq!(h.streak(true), STREAK_MAX);
    }
}
