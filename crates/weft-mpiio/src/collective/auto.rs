//! Choosing the method of a collective call. ROMIO's rule first: with
//! romio_cb_read/write `automatic`, requests that do not interleave go independent;
//! `disable` always goes independent. An explicit `weft_cb_method` is then used as is;
//! `auto` picks, in this order:
//! 1. a cached file: `server_directed` (the cache managers gather and scatter; no
//!    exchange among the processes, and a read of blocks still in the tier never
//!    reaches the io servers);
//! 2. an uncached file whose every rank's view is registered with the servers, with at
//!    least [`VIEW_IO_SHARE_BYTES_MIN`] per rank and server on average: `independent`,
//!    which sends each rank's view interval to the io servers as is (view I/O);
//! 3. else, as before views were registered: pieces averaging half a stripe or more go
//!    `independent`; fewer than 4 rounds per aggregator `two_phase`; more
//!    `interleaved_pipelined` (I/O overlapped with the next exchange).
//!
//! The figures behind the rule (`weft bench clusterfile`, and the patterns program with
//! each method; 4 processes, 4 io servers, 64 KiB stripes, 2 shared cores, loopback;
//! median of 3, seconds for write+sync / read):
//!
//! | pattern (size)                 | two_phase   | interleaved | independent | server_directed |
//! |--------------------------------|-------------|-------------|-------------|-----------------|
//! | CYCLIC(8), 8 B (128 MiB)       | 0.362/0.239 | 0.348/0.224 | 0.128/0.072 | 0.146/0.078     |
//! | CYCLIC(32), 8 B (128 MiB)      | 0.347/0.234 | 0.253/0.165 | 0.140/0.068 | 0.128/0.068     |
//! | CYCLIC(256), 8 B (128 MiB)     | 0.318/0.200 | 0.426/0.202 | 0.141/0.093 | 0.230/0.099     |
//! | CYCLIC(32), 1 B (64 MiB)       | 0.536/0.423 | 0.745/0.416 | 0.116/0.052 | 0.116/0.053     |
//! | 3D block 256^3 x 16 B          | 0.598/0.346 | 0.599/0.383 | 0.296/0.116 | 0.239/0.124     |
//! | CYCLIC(8), 8 B (8 MiB)         | 0.058/0.042 | 0.067/0.064 | 0.010/0.006 | 0.010/0.006     |
//! | CYCLIC(8), 8 B (512 KiB)       | 3.8/2.3 ms  | 3.8/2.7 ms  | 5.1/2.2 ms  | 4.5/2.1 ms      |
//!
//! View I/O wins by 2-8x wherever each rank sends each server tens of KiB or more;
//! at 32 KiB per rank and server (the 512 KiB matrix) the exchange is as fast or
//! slightly faster (fewer, larger requests), hence the floor of rule 2. Among the
//! exchange methods, interleaved beat two_phase on CYCLIC(32) with 8-byte elements
//! here but lost on CYCLIC(256) and on 1-byte elements (writes 0.43 vs 0.32 s and
//! 0.75 vs 0.54 s), and an outside benchmark measured two_phase faster on CYCLIC(32)
//! both behind a 2 Gbit/s link and without it, so the few-rounds choice is two_phase.
//! On cached files `server_directed` ran 2-3x two_phase's write and hot read on
//! CYCLIC(32) (see docs/src/internals/mpiio.md for the figures).
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
use crate::error::Result;
use crate::hints::{Method as Name, Switch};

/// The method to run for this call, and why (for WEFT_PRINT_HINTS). `pieces_total`
/// counts the pieces of all ranks' requests (a collective call: `choose` makes the
/// same decisions on every rank, so either every rank calls it or none does).
pub fn choose(
    ctx: &Context<'_>,
    write: bool,
    pieces_total: impl FnOnce() -> Result<u64>,
) -> Result<(Box<dyn Method>, &'static str)> {
    let switch = if write {
        ctx.hints.romio_cb_write
    } else {
        ctx.hints.romio_cb_read
    };
    let depth = ctx.hints.pipeline_depth;
    if switch == Switch::Disable {
        return Ok((Box::new(Independent), "romio_cb_read/write disabled"));
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
        return Ok((explicit(ctx.hints.method), "weft_cb_method"));
    }
    if switch == Switch::Automatic && !ctx.interleaved() {
        return Ok((Box::new(Independent), "requests do not interleave (ROMIO's rule)"));
    }
    let Some((lo, hi)) = ctx.region() else {
        return Ok((Box::new(Independent), "no data"));
    };
    if ctx.file.cache_mode().uses_tier() {
        return Ok((
            Box::new(ServerDirected),
            "cached file: the cache managers gather and scatter",
        ));
    }
    let servers = ctx.file.data_layout().servers.len().max(1) as u64;
    let share = ctx.bytes_total / (ctx.comm.size().max(1) as u64 * servers);
    if ctx.views_registered && share >= VIEW_IO_SHARE_BYTES_MIN {
        return Ok((
            Box::new(Independent),
            "views registered: each rank sends its view interval (view I/O)",
        ));
    }
    // Pieces of half a stripe or more are already large requests to few servers:
    // aggregating them only adds an exchange (the 3D block pattern: 512 KiB pieces).
    let stripe = ctx.file.layout().stripe_size_bytes;
    if ctx.bytes_total / pieces_total()?.max(1) >= stripe / 2 {
        return Ok((Box::new(Independent), "pieces of half a stripe or more"));
    }
    let aggregators = ctx.aggregators.len() as u64;
    let rounds = (hi - lo).div_ceil(aggregators * ctx.hints.cb_buffer_size);
    Ok(if rounds < PIPELINE_ROUNDS_MIN {
        (
            explicit(Name::TwoPhase),
            "small accesses, few rounds: ROMIO's two-phase",
        )
    } else {
        (
            explicit(Name::InterleavedPipelined),
            "many rounds: contiguous rounds with I/O overlapped",
        )
    })
}

/// Bytes per rank and server from which view I/O beats the exchange (measured: 32 KiB
/// per rank and server was a draw or a small loss, 512 KiB a 6x win).
pub const VIEW_IO_SHARE_BYTES_MIN: u64 = 64 << 10;

/// Rounds from which overlapping I/O with the exchange pays for the helper thread (with
/// fewer, measured on CYCLIC(32) over 128 MiB, the pipelined methods were slower).
const PIPELINE_ROUNDS_MIN: u64 = 4;
