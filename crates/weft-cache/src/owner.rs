//! Ownership: which cache manager owns a block, and which io servers a manager talks
//! to. One replica per block in the whole tier, so the owner is a pure function of the
//! block number, known to every client without asking anyone.
//!
//! - Hash Distributed Caching (Clusterfile): block `x` belongs to manager `x mod n`.
//! - Server-aligned delegates (I/O delegation): the same function with block size =
//!   stripe size and `n` a factor or a multiple of the stripe count, so each delegate's
//!   blocks lie on a fixed subset of the io servers: with `n | count`, delegate `d`
//!   talks to the servers `s` with `s mod n == d`; with `count | n`, to server
//!   `d mod count` only.
//! - Colocated (disk-directed): manager `k` is the one inside io server `k` of the
//!   layout, so it owns exactly that server's stripes.
//!
//! Manager and server numbers here are indices: into the tier's list of cache managers,
//! and into `Layout::servers`.

use crate::block::BlockMap;
use crate::error::CacheError;
use weft_layout::Layout;

/// How blocks are assigned to cache managers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mapping {
    /// Clusterfile's HDC: block `x` -> manager `x mod managers`, any count.
    Hashed { managers: u32 },
    /// Delegates with server-aligned file domains: the HDC function, but blocks are
    /// stripes and the count is normally made a factor or multiple of the stripe count
    /// with [`aligned_count`] (an unaligned count is allowed so that it can be measured).
    Aligned { managers: u32 },
    /// One manager per io server of the file, inside it: block `x` -> manager
    /// `x mod stripe_count`, i.e. the server index holding the block.
    Colocated,
}

/// Whether [`aligned_count`] may change the requested count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Alignment {
    /// Make the count a factor or a multiple of the stripe count.
    Aligned,
    /// Keep the count as asked (`weft_delegate_mapping=any`).
    Any,
}

/// The blocks a manager owns: `first`, `first + stride`, `first + 2*stride`, ...
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockStride {
    pub first: u64,
    pub stride: u64,
}

impl BlockStride {
    /// The first owned block at or after `block`.
    pub fn first_at_or_after(&self, block: u64) -> u64 {
        if block <= self.first {
            return self.first;
        }
        let steps = (block - self.first).div_ceil(self.stride);
        self.first + steps * self.stride
    }
}

impl Mapping {
    pub fn name(&self) -> &'static str {
        match self {
            Mapping::Hashed { .. } => "hashed",
            Mapping::Aligned { .. } => "aligned",
            Mapping::Colocated => "colocated",
        }
    }

    /// Checks the mapping against a file: a nonzero manager count, and for the aligned
    /// and colocated mappings, blocks that are exactly stripes (else a block would span
    /// servers and "a manager's servers" would mean nothing).
    pub fn check(&self, blocks: &BlockMap, layout: &Layout) -> Result<(), CacheError> {
        if layout.servers.is_empty() {
            return Err(CacheError::StripeCount);
        }
        match *self {
            Mapping::Hashed { managers: 0 } | Mapping::Aligned { managers: 0 } => {
                Err(CacheError::ManagerCount)
            }
            Mapping::Hashed { .. } => Ok(()),
            Mapping::Aligned { .. } | Mapping::Colocated => {
                if blocks.block_size_bytes() == layout.stripe_size_bytes {
                    Ok(())
                } else {
                    Err(CacheError::MappingBlockSize {
                        mapping: self.name(),
                        block_size: blocks.block_size_bytes(),
                        stripe_size: layout.stripe_size_bytes,
                    })
                }
            }
        }
    }

    /// Number of managers serving a file striped over `stripe_count` servers.
    pub fn managers(&self, stripe_count: u32) -> u32 {
        match *self {
            Mapping::Hashed { managers } | Mapping::Aligned { managers } => managers,
            Mapping::Colocated => stripe_count,
        }
    }

    /// The manager owning `block`. Counts must be nonzero ([`Mapping::check`]).
    pub fn owner(&self, block: u64, stripe_count: u32) -> u32 {
        (block % self.managers(stripe_count) as u64) as u32
    }

    /// The blocks `manager` owns, as an arithmetic progression.
    pub fn blocks_of(&self, manager: u32, stripe_count: u32) -> BlockStride {
        BlockStride {
            first: manager as u64,
            stride: self.managers(stripe_count) as u64,
        }
    }

    /// The io servers (indices into the layout) holding blocks of `manager`, ascending.
    /// A block `x` of manager `d` satisfies `x ≡ d (mod n)`; its server is `x mod count`,
    /// and those residues are exactly the servers `s ≡ d (mod gcd(n, count))`.
    pub fn servers_of(&self, manager: u32, stripe_count: u32) -> Vec<u32> {
        let n = self.managers(stripe_count);
        let g = gcd(n, stripe_count);
        (0..stripe_count).filter(|s| s % g == manager % g).collect()
    }

    /// Whether every manager talks to servers no other manager talks to (count a
    /// factor of the stripe count) or to one server only (a multiple).
    pub fn is_aligned(&self, stripe_count: u32) -> bool {
        let n = self.managers(stripe_count);
        n != 0 && stripe_count != 0 && (stripe_count.is_multiple_of(n) || n.is_multiple_of(stripe_count))
    }
}

/// The number of delegates to use for `requested` delegates over `stripe_count` io
/// servers, and whether it differs from the request. With [`Alignment::Aligned`] the
/// result is the factor or multiple of `stripe_count` nearest to `requested`; on a tie
/// the smaller one, so the tier never runs more delegates than asked for when it could
/// run as near a number with fewer (4 servers: 3 -> 2, 5 -> 4, 6 -> 4, 7 -> 8).
pub fn aligned_count(
    requested: u32,
    stripe_count: u32,
    alignment: Alignment,
) -> Result<(u32, bool), CacheError> {
    if requested == 0 {
        return Err(CacheError::ManagerCount);
    }
    if stripe_count == 0 {
        return Err(CacheError::StripeCount);
    }
    if alignment == Alignment::Any
        || stripe_count.is_multiple_of(requested)
        || requested.is_multiple_of(stripe_count)
    {
        return Ok((requested, false));
    }
    let below_multiple = (requested / stripe_count) * stripe_count;
    let above_multiple = below_multiple.saturating_add(stripe_count);
    let factors = (1..=stripe_count).filter(|&f| stripe_count.is_multiple_of(f));
    let best = factors
        .chain([below_multiple, above_multiple])
        .filter(|&c| c > 0)
        .min_by_key(|&c| (c.abs_diff(requested), c))
        .expect("1 is always a factor");
    Ok((best, true))
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use weft_layout::ServerId;

    #[test]
    fn counts_are_adjusted_to_the_nearest_factor_or_multiple() {
        let aligned = |r| aligned_count(r, 4, Alignment::Aligned).unwrap();
        assert_eq!(aligned(1), (1, false));
        assert_eq!(aligned(2), (2, false));
        assert_eq!(aligned(3), (2, true));
        assert_eq!(aligned(5), (4, true));
        assert_eq!(aligned(6), (4, true));
        assert_eq!(aligned(7), (8, true));
        assert_eq!(aligned(8), (8, false));
        assert_eq!(aligned_count(3, 4, Alignment::Any).unwrap(), (3, false));
        assert_eq!(aligned_count(0, 4, Alignment::Any), Err(CacheError::ManagerCount));
        assert_eq!(
            aligned_count(2, 0, Alignment::Aligned),
            Err(CacheError::StripeCount)
        );
    }

    #[test]
    fn aligned_and_colocated_need_stripe_sized_blocks() {
        let layout = Layout {
            stripe_size_bytes: 65536,
            servers: vec![ServerId(3), ServerId(5)],
            replication: Default::default(),
        };
        let stripe_blocks = BlockMap::new(65536).unwrap();
        let small_blocks = BlockMap::new(4096).unwrap();
        assert!(Mapping::Colocated.check(&stripe_blocks, &layout).is_ok());
        assert!(Mapping::Aligned { managers: 4 }
            .check(&small_blocks, &layout)
            .is_err());
        assert!(Mapping::Hashed { managers: 3 }
            .check(&small_blocks, &layout)
            .is_ok());
        assert_eq!(
            Mapping::Hashed { managers: 0 }.check(&stripe_blocks, &layout),
            Err(CacheError::ManagerCount)
        );
    }

    #[test]
    fn delegate_servers_by_hand() {
        // 4 servers, 2 delegates: delegate 0 has blocks 0,2,4,... on servers 0 and 2.
        let two = Mapping::Aligned { managers: 2 };
        assert_eq!(two.servers_of(0, 4), vec![0, 2]);
        assert_eq!(two.servers_of(1, 4), vec![1, 3]);
        // 8 delegates: delegate 5 has blocks 5,13,21,... all on server 1.
        assert_eq!(Mapping::Aligned { managers: 8 }.servers_of(5, 4), vec![1]);
        // 3 delegates (unaligned): every delegate reaches every server.
        assert_eq!(
            Mapping::Aligned { managers: 3 }.servers_of(1, 4),
            vec![0, 1, 2, 3]
        );
        assert_eq!(Mapping::Colocated.servers_of(2, 4), vec![2]);
    }

    fn mapping() -> impl Strategy<Value = Mapping> {
        prop_oneof![
            (1u32..20).prop_map(|managers| Mapping::Hashed { managers }),
            (1u32..20).prop_map(|managers| Mapping::Aligned { managers }),
            Just(Mapping::Colocated),
        ]
    }

    proptest! {
        /// Every block has exactly one owner: the one manager whose progression of
        /// blocks contains it, and the owner's servers include the block's server.
        #[test]
        fn every_block_has_one_owner(m in mapping(), count in 1u32..12, block in 0u64..100_000) {
            let n = m.managers(count);
            let owner = m.owner(block, count);
            prop_assert!(owner < n);
            let holders: Vec<u32> = (0..n)
                .filter(|&d| {
                    let s = m.blocks_of(d, count);
                    block >= s.first && (block - s.first) % s.stride == 0
                })
                .collect();
            prop_assert_eq!(holders, vec![owner]);
            let stride = m.blocks_of(owner, count);
            prop_assert_eq!(stride.first_at_or_after(block), block);
            let server = (block % count as u64) as u32;
            prop_assert!(m.servers_of(owner, count).contains(&server));
        }

        /// servers_of agrees with enumerating a manager's blocks over a whole period.
        #[test]
        fn servers_match_enumeration(m in mapping(), count in 1u32..12) {
            let n = m.managers(count);
            for d in 0..n {
                let mut seen: Vec<u32> = (0..(n as u64 * count as u64))
                    .filter(|&x| m.owner(x, count) == d)
                    .map(|x| (x % count as u64) as u32)
                    .collect();
                seen.sort_unstable();
                seen.dedup();
                prop_assert_eq!(m.servers_of(d, count), seen);
            }
        }

        /// An aligned count keeps each manager on its own servers: with a factor, the
        /// managers' server sets partition the servers; with a multiple, each manager has
        /// exactly one server. The adjusted count is the nearest such count, ties down.
        #[test]
        fn aligned_counts_align(requested in 1u32..40, count in 1u32..17) {
            let (n, adjusted) = aligned_count(requested, count, Alignment::Aligned).unwrap();
            let is_aligned = |c: u32| count.is_multiple_of(c) || c.is_multiple_of(count);
            prop_assert!(is_aligned(n));
            prop_assert_eq!(adjusted, !is_aligned(requested));
            for c in 1..=(2 * (requested + count)) {
                if is_aligned(c) {
                    let (dc, dn) = (c.abs_diff(requested), n.abs_diff(requested));
                    prop_assert!(dc > dn || (dc == dn && c >= n), "{} is nearer than {}", c, n);
                }
            }
            let m = Mapping::Aligned { managers: n };
            prop_assert!(m.is_aligned(count));
            if count.is_multiple_of(n) {
                let mut all: Vec<u32> = (0..n).flat_map(|d| m.servers_of(d, count)).collect();
                all.sort_unstable();
                prop_assert_eq!(all, (0..count).collect::<Vec<_>>());
            } else {
                for d in 0..n {
                    prop_assert_eq!(m.servers_of(d, count), vec![d % count]);
                }
            }
            prop_assert_eq!(aligned_count(requested, count, Alignment::Any).unwrap(), (requested, false));
        }
    }
}
