//! ROMIO's generic two-phase partition (ad_aggregate.c): the region all requests fall
//! in, `[min start, max end)`, is cut into one file domain per aggregator of
//! `ceil(region / aggregators)` bytes (ends moved to the nearest multiple of
//! `striping_unit` when that hint is set, as Liao's alignment in ROMIO does); each
//! aggregator walks its domain from its first requested byte to its last in windows of
//! `cb_buffer_size` bytes, one per round, empty windows included.

use super::engine::{self, Domains, Executor, Window};
use super::{Context, Method, Request};
use crate::error::Result;

/// Even file domains.
#[derive(Debug, Clone)]
pub struct EvenDomains {
    /// Exclusive end of each aggregator's domain, ascending.
    ends: Vec<u64>,
    window_bytes: u64,
}

impl EvenDomains {
    pub fn new(lo: u64, hi: u64, aggregators: usize, window_bytes: u64, align: Option<u64>) -> Self {
        let n = aggregators.max(1) as u64;
        let fd_size = (hi - lo).div_ceil(n).max(1);
        let mut ends = Vec::with_capacity(n as usize);
        for i in 1..=n {
            let mut end = lo.saturating_add(fd_size.saturating_mul(i)).min(hi);
            if let Some(unit) = align.filter(|u| *u > 0) {
                let front = end % unit;
                end = if front < unit - front {
                    end - front
                } else {
                    end + (unit - front)
                };
                end = end.clamp(lo, hi);
            }
            if i == n {
                end = hi;
            }
            let previous = ends.last().copied().unwrap_or(lo);
            ends.push(end.max(previous));
        }
        EvenDomains {
            ends,
            window_bytes: window_bytes.max(1),
        }
    }
}

impl Domains for EvenDomains {
    fn owner(&self, x: u64) -> (usize, u64) {
        let i = self.ends.partition_point(|&end| end <= x);
        let i = i.min(self.ends.len() - 1);
        (i, self.ends[i].max(x + 1))
    }

    fn windows(&self, _aggregator: usize, lo: u64, hi: u64) -> Vec<Window> {
        let mut out = Vec::new();
        let mut at = lo;
        while at < hi {
            let end = hi.min(at + self.window_bytes);
            out.push(Window {
                ranges: vec![(at, end - at)],
            });
            at = end;
        }
        out
    }
}

/// `two_phase`, and with a pipelined executor `pipelined`.
pub struct TwoPhase {
    pub executor: Executor,
}

impl TwoPhase {
    fn domains(ctx: &Context<'_>) -> Option<EvenDomains> {
        let (lo, hi) = ctx.region()?;
        Some(EvenDomains::new(
            lo,
            hi,
            ctx.aggregators.len(),
            ctx.hints.cb_buffer_size,
            ctx.hints.striping_unit,
        ))
    }
}

impl Method for TwoPhase {
    fn name(&self) -> &'static str {
        match self.executor {
            Executor::Sequential => "two_phase",
            Executor::Pipelined { .. } => "pipelined",
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
    fn domains_cover_the_region_in_order() {
        let d = EvenDomains::new(100, 1100, 3, 64, None);
        assert_eq!(d.owner(100), (0, 434));
        assert_eq!(d.owner(433), (0, 434));
        assert_eq!(d.owner(434), (1, 768));
        assert_eq!(d.owner(1099), (2, 1100));
        let w = d.windows(1, 434, 600);
        assert_eq!(w.len(), 3);
        assert_eq!(w[0].ranges, vec![(434, 64)]);
        assert_eq!(w[2].ranges, vec![(562, 38)]);
    }

    #[test]
    fn aligned_domains_end_on_the_unit() {
        let d = EvenDomains::new(0, 1000, 4, 64, Some(100));
        for x in [0u64, 299, 300, 999] {
            let (_, end) = d.owner(x);
            assert!(end % 100 == 0, "end {end}");
        }
    }
}
