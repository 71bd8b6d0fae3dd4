//! Choosing the method of a collective call. ROMIO's rule first: with
//! romio_cb_read/write `automatic`, requests that do not interleave go independent;
//! `disable` always goes independent. An explicit `weft_cb_method` is then used as is;
//! `auto` picks from the pattern and the layout:
//! - pieces averaging half a stripe or more: `independent` (they already make large
//!   requests to few servers; an exchange would only add copies);
//! - fewer than 4 rounds per aggregator: `interleaved` (every round one contiguous
//!   region of the file);
//! - more: `interleaved_pipelined`, which also overlaps each round's I/O with the next
//!   exchange.
//!
//! `stripe_aligned` is never chosen: its windows are many separate stripes, and until
//! its reads go through list I/O they are the slowest here.

use super::engine::Executor;
use super::independent::Independent;
use super::interleaved::Interleaved;
use super::pipelined;
use super::server_directed::ServerDirected;
use super::stripe_aligned::StripeAligned;
use super::two_phase::TwoPhase;
use super::{Context, Method};
use crate::hints::{Hints, Method as Name, Switch};
use weft_client::File;

/// The method to run for this call, and why (for WEFT_PRINT_HINTS).
pub fn choose(ctx: &Context<'_>, write: bool) -> (Box<dyn Method>, &'static str) {
    let switch = if write {
        ctx.hints.romio_cb_write
    } else {
        ctx.hints.romio_cb_read
    };
    let depth = ctx.hints.pipeline_depth;
    if switch == Switch::Disable {
        return (Box::new(Independent), "romio_cb_read/write disabled");
    }
    let explicit = |m: Name| -> Box<dyn Method> {
        match m {
            Name::TwoPhase => Box::new(TwoPhase {
                executor: Executor::Sequential,
            }),
            Name::Interleaved => Box::new(Interleaved {
                executor: Executor::Sequential,
            }),
            Name::Pipelined => Box::new(pipelined::pipelined(depth)),
            Name::InterleavedPipelined => Box::new(pipelined::interleaved_pipelined(depth)),
            Name::StripeAligned => Box::new(StripeAligned),
            Name::ServerDirected => Box::new(ServerDirected),
            Name::Independent | Name::Auto => Box::new(Independent),
        }
    };
    if ctx.hints.method != Name::Auto {
        return (explicit(ctx.hints.method), "weft_cb_method");
    }
    if ctx.file.cache_mode().uses_tier() {
        return (
            Box::new(ServerDirected),
            "cached file: the cache managers gather and scatter",
        );
    }
    if switch == Switch::Automatic && !ctx.interleaved() {
        return (Box::new(Independent), "requests do not interleave (ROMIO's rule)");
    }
    let Some((lo, hi)) = ctx.region() else {
        return (Box::new(Independent), "no data");
    };
    // Pieces of half a stripe or more are already large requests to few servers:
    // aggregating them only adds an exchange (the 3D block pattern: 512 KiB pieces).
    let stripe = ctx.file.layout().stripe_size_bytes;
    if ctx.bytes_total / ctx.pieces_total.max(1) >= stripe / 2 {
        return (Box::new(Independent), "pieces of half a stripe or more");
    }
    let aggregators = ctx.aggregators.len() as u64;
    let rounds = (hi - lo).div_ceil(aggregators * ctx.hints.cb_buffer_size);
    if rounds < PIPELINE_ROUNDS_MIN {
        (
            explicit(Name::Interleaved),
            "few rounds: contiguous rounds, no pipeline to fill",
        )
    } else {
        (
            explicit(Name::InterleavedPipelined),
            "many rounds: contiguous rounds with I/O overlapped",
        )
    }
}

/// Whether [`choose`] may look at the number of pieces of the requests (then every rank
/// lists its pieces first): only when `auto` has to choose among the exchange methods.
pub fn needs_piece_count(hints: &Hints, file: &File) -> bool {
    hints.method == Name::Auto && !file.cache_mode().uses_tier()
}

/// Rounds from which overlapping I/O with the exchange pays for the helper thread (with
/// fewer, measured on CYCLIC(32) over 128 MiB, the pipelined methods were slower).
const PIPELINE_ROUNDS_MIN: u64 = 4;
