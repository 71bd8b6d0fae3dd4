//! Stripe-aligned file domains (Liao and Choudhary's static mapping, ROMIO's Lustre
//! driver): the file is cut at its stripes, and stripe `s`, held by server
//! `j = s mod servers`, belongs to one aggregator fixed by `j`, with the number of
//! aggregators a factor or a multiple of the number of io servers. Each aggregator then
//! talks to as few servers as possible (one when the counts are equal). A window is
//! up to `cb_buffer_size` bytes of the aggregator's stripes.

use super::engine::{self, Domains, Executor, Window};
use super::{spread, Context, Method, Request};
use crate::error::Result;

#[derive(Debug, Clone)]
pub struct StripeDomains {
    stripe_bytes: u64,
    servers: u64,
    aggregators: u64,
    stripes_per_window: u64,
}

/// The aggregator count closest to `wanted` that is a factor or a multiple of
/// `servers`, and at most `wanted`.
pub fn aggregator_count(wanted: usize, servers: usize) -> usize {
    let (wanted, servers) = (wanted.max(1), servers.max(1));
    if wanted >= servers {
        wanted / servers * servers
    } else {
        (1..=wanted).rev().find(|k| servers % k == 0).unwrap_or(1)
    }
}

impl StripeDomains {
    pub fn new(stripe_bytes: u64, servers: usize, aggregators: usize, window_bytes: u64) -> Self {
        StripeDomains {
            stripe_bytes: stripe_bytes.max(1),
            servers: servers.max(1) as u64,
            aggregators: aggregators.max(1) as u64,
            stripes_per_window: (window_bytes / stripe_bytes.max(1)).max(1),
        }
    }

    fn owner_of_stripe(&self, s: u64) -> u64 {
        let j = s % self.servers;
        if self.aggregators <= self.servers {
            j % self.aggregators
        } else {
            let group = self.aggregators / self.servers;
            j + self.servers * ((s / self.servers) % group)
        }
    }
}

impl Domains for StripeDomains {
    fn owner(&self, x: u64) -> (usize, u64) {
        let s = x / self.stripe_bytes;
        (self.owner_of_stripe(s) as usize, (s + 1) * self.stripe_bytes)
    }

    fn windows(&self, aggregator: usize, lo: u64, hi: u64) -> Vec<Window> {
        let mut out = Vec::new();
        let mut current: Vec<(u64, u64)> = Vec::new();
        let mut stripes_in_current = 0;
        for s in lo / self.stripe_bytes..=(hi - 1) / self.stripe_bytes {
            if self.owner_of_stripe(s) != aggregator as u64 {
                continue;
            }
            let start = (s * self.stripe_bytes).max(lo);
            let end = ((s + 1) * self.stripe_bytes).min(hi);
            match current.last_mut() {
                Some(last) if last.0 + last.1 == start => last.1 += end - start,
                _ => current.push((start, end - start)),
            }
            stripes_in_current += 1;
            if stripes_in_current == self.stripes_per_window {
                out.push(Window {
                    ranges: std::mem::take(&mut current),
                });
                stripes_in_current = 0;
            }
        }
        if !current.is_empty() {
            out.push(Window { ranges: current });
        }
        out
    }
}

pub struct StripeAligned;

impl StripeAligned {
    /// The aggregator ranks this method uses: the hinted ones, cut down to a factor or
    /// multiple of the server count.
    pub fn aggregators(ctx: &Context<'_>) -> Vec<usize> {
        let servers = ctx.file.layout().servers.len();
        let count = aggregator_count(ctx.aggregators.len(), servers);
        spread(count, ctx.aggregators.len())
            .into_iter()
            .map(|i| ctx.aggregators[i])
            .collect()
    }

    fn domains(ctx: &Context<'_>, aggregators: usize) -> StripeDomains {
        let layout = ctx.file.layout();
        StripeDomains::new(
            layout.stripe_size_bytes,
            layout.servers.len(),
            aggregators,
            ctx.hints.cb_buffer_size,
        )
    }
}

impl Method for StripeAligned {
    fn name(&self) -> &'static str {
        "stripe_aligned"
    }

    fn write(&self, ctx: &Context<'_>, request: &Request, data: &[u8]) -> Result<()> {
        let aggregators = Self::aggregators(ctx);
        let ctx = Context {
            aggregators: &aggregators,
            ..*ctx
        };
        let d = Self::domains(&ctx, aggregators.len());
        engine::write(&ctx, request, data, &d, Executor::Sequential)
    }

    fn read(&self, ctx: &Context<'_>, request: &Request, data: &mut [u8]) -> Result<u64> {
        let aggregators = Self::aggregators(ctx);
        let ctx = Context {
            aggregators: &aggregators,
            ..*ctx
        };
        let d = Self::domains(&ctx, aggregators.len());
        engine::read(&ctx, request, data, &d, Executor::Sequential)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_factors_or_multiples() {
        assert_eq!(aggregator_count(4, 4), 4);
        assert_eq!(aggregator_count(3, 4), 2);
        assert_eq!(aggregator_count(9, 4), 8);
        assert_eq!(aggregator_count(1, 4), 1);
        assert_eq!(aggregator_count(5, 3), 3);
    }

    #[test]
    fn each_aggregator_sees_one_server_when_counts_match() {
        let d = StripeDomains::new(100, 4, 4, 250);
        for s in 0..40u64 {
            assert_eq!(d.owner(s * 100 + 5).0 as u64, s % 4);
        }
        let w = d.windows(1, 0, 4000);
        // Stripes 1, 5, 9, ... two per window.
        assert_eq!(w[0].ranges, vec![(100, 100), (500, 100)]);
        assert_eq!(w.len(), 5);
    }

    #[test]
    fn more_aggregators_than_servers_split_each_server() {
        let d = StripeDomains::new(10, 2, 4, 10);
        let owners: Vec<usize> = (0..8).map(|s| d.owner(s * 10).0).collect();
        assert_eq!(owners, vec![0, 1, 2, 3, 0, 1, 2, 3]);
        let d = StripeDomains::new(10, 4, 2, 10);
        let owners: Vec<usize> = (0..8).map(|s| d.owner(s * 10).0).collect();
        assert_eq!(owners, vec![0, 1, 0, 1, 0, 1, 0, 1]);
    }
}
