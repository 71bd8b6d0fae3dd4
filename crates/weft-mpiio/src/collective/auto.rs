//! Choosing the method of a collective call. ROMIO's rule first: with
//! romio_cb_read/write `automatic`, requests that do not interleave go independent;
//! `disable` always goes independent. An explicit `weft_cb_method` is then used as is;
//! `auto` picks from the pattern and the layout:
//! - pieces averaging half a stripe or more: `independent` (they already make large
//!   requests to few servers; an exchange would only add copies);
//! - one round per aggregator or less (the region fits the aggregators' buffers):
//!   `stripe_aligned` when there are at least as many aggregators as io servers, so
//!   each aggregator reaches one server with few large requests; else `interleaved`;
//! - several rounds: `interleaved_pipelined`, which keeps every round one contiguous
//!   region of the file and overlaps each round's I/O with the next exchange.

use super::engine::Executor;
use super::independent::Independent;
use super::interleaved::Interleaved;
use super::pipelined;
use super::stripe_aligned::StripeAligned;
use super::two_phase::TwoPhase;
use super::{Context, Method};
use crate::hints::{Method as Name, Switch};

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
            Name::Independent | Name::Auto => Box::new(Independent),
        }
    };
    if ctx.hints.method != Name::Auto {
        return (explicit(ctx.hints.method), "weft_cb_method");
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
    let servers = ctx.file.layout().servers.len() as u64;
    if rounds <= 1 {
        if aggregators >= servers {
            (
                explicit(Name::StripeAligned),
                "one round, aggregators >= io servers",
            )
        } else {
            (
                explicit(Name::Interleaved),
                "one round, fewer aggregators than io servers",
            )
        }
    } else {
        (
            explicit(Name::InterleavedPipelined),
            "several rounds: contiguous rounds with I/O overlapped",
        )
    }
}
