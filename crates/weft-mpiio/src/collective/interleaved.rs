//! Interleaved two-phase (Kuhn et al.): the region all requests fall in is cut into
//! chunks of `cb_buffer_size` bytes (rounded to whole stripes and started on a stripe
//! boundary), dealt round robin to the aggregators, so that the aggregators together
//! access one contiguous region per round instead of one piece of each file domain.

use super::engine::{self, Domains, Executor, Window};
use super::{Context, Method, Request};
use crate::error::Result;

#[derive(Debug, Clone)]
pub struct RoundRobinChunks {
    base: u64,
    chunk_bytes: u64,
    aggregators: usize,
}

impl RoundRobinChunks {
    pub fn new(lo: u64, window_bytes: u64, stripe_bytes: u64, aggregators: usize) -> Self {
        let stripe = stripe_bytes.max(1);
        RoundRobinChunks {
            base: lo / stripe * stripe,
            chunk_bytes: (window_bytes / stripe).max(1) * stripe,
            aggregators: aggregators.max(1),
        }
    }

    fn chunk(&self, x: u64) -> u64 {
        (x - self.base) / self.chunk_bytes
    }
}

impl Domains for RoundRobinChunks {
    fn owner(&self, x: u64) -> (usize, u64) {
        let c = self.chunk(x);
        (
            (c % self.aggregators as u64) as usize,
            self.base + (c + 1) * self.chunk_bytes,
        )
    }

    fn windows(&self, aggregator: usize, lo: u64, hi: u64) -> Vec<Window> {
        let n = self.aggregators as u64;
        let first = self.chunk(lo);
        let last = self.chunk(hi - 1);
        // The first chunk at or after `first` that this aggregator owns.
        let a = aggregator as u64;
        let mut c = first + (a + n - first % n) % n;
        let mut out = Vec::new();
        while c <= last {
            let start = (self.base + c * self.chunk_bytes).max(lo);
            let end = (self.base + (c + 1) * self.chunk_bytes).min(hi);
            out.push(Window {
                ranges: vec![(start, end - start)],
            });
            c += n;
        }
        out
    }
}

/// `interleaved`, and with a pipelined executor `interleaved_pipelined`.
pub struct Interleaved {
    pub executor: Executor,
}

impl Interleaved {
    fn domains(ctx: &Context<'_>) -> Option<RoundRobinChunks> {
        let (lo, _) = ctx.region()?;
        Some(RoundRobinChunks::new(
            lo,
            ctx.hints.cb_buffer_size,
            ctx.file.layout().stripe_size_bytes,
            ctx.aggregators.len(),
        ))
    }
}

impl Method for Interleaved {
    fn name(&self) -> &'static str {
        match self.executor {
            Executor::Sequential => "interleaved",
            Executor::Pipelined { .. } => "interleaved_pipelined",
        }
    }

    fn write(&self, ctx: &Context<'_>, request: &Request, data: &[u8]) -> Result<()> {
        engine::write_region(ctx, request, data, Self::domains(ctx), self.executor)
    }

    fn read(&self, ctx: &Context<'_>, request: &Request, data: &mut [u8]) -> Result<u64> {
        engine::read_region(ctx, request, data, Self::domains(ctx), self.executor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_go_round_robin_and_windows_follow_them() {
        let d = RoundRobinChunks::new(1000, 4096, 1024, 3);
        // base 0, chunks of 4 KiB.
        assert_eq!(d.owner(1000), (0, 4096));
        assert_eq!(d.owner(4096), (1, 8192));
        assert_eq!(d.owner(12288), (0, 16384));
        let w = d.windows(0, 1000, 20000);
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].ranges, vec![(1000, 3096)]);
        assert_eq!(w[1].ranges, vec![(12288, 4096)]);
        let w = d.windows(2, 9000, 9500);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].ranges, vec![(9000, 500)]);
        assert!(d.windows(1, 9000, 9500).is_empty());
    }
}
