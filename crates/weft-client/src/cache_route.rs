//! Routing of cached files: which cache manager holds each block of a file, and the
//! requests sent to the managers.
//!
//! A cached file's blocks are dealt over its cache managers exactly as its stripes
//! are dealt over its io servers: block `x` (bytes `[x*b, (x+1)*b)`) belongs to
//! manager `x mod n` of the file's manager list. So the client cuts a request for the
//! managers with the same striping math as for io servers, using a layout of blocks
//! over managers, and each manager finds its pieces of a request as an io server does.

use crate::error::ClientError;
use std::sync::atomic::{AtomicU64, Ordering};
use weft_layout::{CacheMapping, CacheMode, InodeId, Layout, ServerId};
use weft_proto::msg::CacheFile;
use weft_proto::{CacheTier, ErrorCode};

/// The cache managers of one open cached file.
pub(crate) struct CacheRoute {
    /// Blocks over managers: the layout requests to the managers are cut by.
    pub blocks: Layout,
    /// The file's own layout over its io servers, sent along so that managers can
    /// fetch and write back.
    pub file_layout: Layout,
    /// Each manager's incarnation as this handle first saw it; 0 = not used yet.
    incarnations: Vec<AtomicU64>,
}

impl CacheRoute {
    pub fn new(tier: &CacheTier, mode: CacheMode, file_layout: &Layout) -> Result<CacheRoute, ClientError> {
        let (block_size_bytes, managers) = managers_of(tier, mode, file_layout)?;
        Ok(CacheRoute {
            incarnations: managers.iter().map(|_| AtomicU64::new(0)).collect(),
            blocks: Layout {
                stripe_size_bytes: block_size_bytes,
                servers: managers,
                replication: Default::default(),
            },
            file_layout: file_layout.clone(),
        })
    }

    /// A route over `count` job-scoped delegates started for this file only: block `x`
    /// (a stripe) to delegate `x mod count`, the delegates known by address alone.
    pub fn job_delegates(count: usize, file_layout: &Layout) -> CacheRoute {
        CacheRoute {
            incarnations: (0..count).map(|_| AtomicU64::new(0)).collect(),
            blocks: Layout {
                stripe_size_bytes: file_layout.stripe_size_bytes,
                servers: (0..count as u32)
                    .map(|k| ServerId(JOB_DELEGATE_ID_BASE + k))
                    .collect(),
                replication: Default::default(),
            },
            file_layout: file_layout.clone(),
        }
    }

    /// What manager `index` needs with each request of file `inode`, sent over a
    /// connection whose handshake gave `incarnation`. The first request fixes the
    /// incarnation this handle expects; a manager that restarted since refuses later
    /// ones, so writes a crash lost never go unnoticed.
    pub fn file(&self, inode: InodeId, index: usize, incarnation: u64) -> CacheFile {
        let seen = &self.incarnations[index];
        let expected = match seen.compare_exchange(0, incarnation, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => incarnation,
            Err(first) => first,
        };
        CacheFile {
            inode,
            layout: self.file_layout.clone(),
            incarnation: expected,
        }
    }
}

/// Server id of job-scoped delegate 0 (the others follow): far above any cluster's own
/// server ids, so logs and traces tell delegates apart; `weftd --id` of each delegate.
pub const JOB_DELEGATE_ID_BASE: u32 = 0x4000_0000;

/// The largest count not above `available` that is a factor or a multiple of
/// `stripe_count`, so that each manager of the server-aligned mapping serves whole io
/// servers (I/O delegation's static file domains): below the stripe count, the largest
/// divisor of it; at or above, the largest multiple.
pub fn aligned_count(available: usize, stripe_count: usize) -> usize {
    if available == 0 || stripe_count == 0 {
        return 0;
    }
    if available >= stripe_count {
        available / stripe_count * stripe_count
    } else {
        (1..=available)
            .rev()
            .find(|d| stripe_count.is_multiple_of(*d))
            .unwrap_or(1)
    }
}

/// Block size and manager list of a cached file. Server-aligned mapping: if every io
/// server of the file is a cache manager (a cache role in each io server), block `x`
/// goes to the io server storing it, so data crosses the network once (disk-directed
/// I/O); else to one of an aligned count of the separate managers. Hashed mapping
/// (Hash Distributed Caching): all managers, block `x` to manager `x mod n`.
/// Delegated files always use the aligned mapping.
pub fn managers_of(
    tier: &CacheTier,
    mode: CacheMode,
    file_layout: &Layout,
) -> Result<(u64, Vec<ServerId>), ClientError> {
    let managers: Vec<ServerId> = tier.managers.iter().map(|m| m.id).collect();
    if managers.is_empty() {
        return Err(ClientError::refused(
            ErrorCode::Unavailable,
            format!("the file is {mode}, but the cluster has no cache managers"),
        ));
    }
    let block_size_bytes = match tier.block_size_bytes {
        0 => file_layout.stripe_size_bytes,
        b => b,
    };
    let mapping = match mode {
        CacheMode::Delegated => CacheMapping::Aligned,
        _ => tier.mapping,
    };
    let chosen = match mapping {
        CacheMapping::Hashed => managers,
        CacheMapping::Aligned if file_layout.servers.iter().all(|s| managers.contains(s)) => {
            file_layout.servers.clone()
        }
        CacheMapping::Aligned => {
            let n = aligned_count(managers.len(), file_layout.servers.len());
            managers[..n].to_vec()
        }
    };
    Ok((block_size_bytes, chosen))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_proto::IoServer;

    fn tier(ids: &[u32], mapping: CacheMapping) -> CacheTier {
        CacheTier {
            managers: ids
                .iter()
                .map(|&id| IoServer {
                    id: ServerId(id),
                    addr: format!("h:{id}"),
                    socket: None,
                })
                .collect(),
            mapping,
            block_size_bytes: 0,
        }
    }

    fn layout(ids: &[u32]) -> Layout {
        Layout {
            stripe_size_bytes: 4096,
            servers: ids.iter().map(|&i| ServerId(i)).collect(),
            replication: Default::default(),
        }
    }

    #[test]
    fn aligned_counts_are_factors_or_multiples_of_the_stripe_count() {
        for stripe_count in 1..=12usize {
            for available in 1..=30usize {
                let n = aligned_count(available, stripe_count);
                assert!(n >= 1 && n <= available, "{available} {stripe_count} -> {n}");
                assert!(
                    stripe_count.is_multiple_of(n) || n.is_multiple_of(stripe_count),
                    "{available} {stripe_count} -> {n}"
                );
                // The largest such count: nothing between n and available qualifies.
                for m in n + 1..=available {
                    assert!(!stripe_count.is_multiple_of(m) && !m.is_multiple_of(stripe_count));
                }
            }
        }
    }

    #[test]
    fn colocated_managers_follow_the_file_layout() {
        let t = tier(&[1, 2, 3, 4], CacheMapping::Aligned);
        let file = layout(&[3, 4, 1]);
        assert_eq!(
            managers_of(&t, CacheMode::Cached, &file).unwrap(),
            (4096, file.servers.clone())
        );
    }

    #[test]
    fn separate_managers_are_aligned_or_hashed() {
        let file = layout(&[1, 2, 3, 4]);
        let aligned = tier(&[10, 11, 12], CacheMapping::Aligned);
        // Three managers for four io servers: the largest factor is two.
        assert_eq!(
            managers_of(&aligned, CacheMode::Cached, &file).unwrap().1,
            vec![ServerId(10), ServerId(11)]
        );
        let hashed = tier(&[10, 11, 12], CacheMapping::Hashed);
        assert_eq!(managers_of(&hashed, CacheMode::Cached, &file).unwrap().1.len(), 3);
        // Delegated files are aligned whatever the tier's mapping.
        assert_eq!(
            managers_of(&hashed, CacheMode::Delegated, &file).unwrap().1.len(),
            2
        );
        let big = CacheTier {
            block_size_bytes: 1 << 20,
            ..hashed
        };
        assert_eq!(managers_of(&big, CacheMode::Cached, &file).unwrap().0, 1 << 20);
        assert!(managers_of(&tier(&[], CacheMapping::Hashed), CacheMode::Cached, &file).is_err());
    }

    #[test]
    fn a_handle_keeps_the_first_incarnation_it_saw() {
        let route = CacheRoute::new(
            &tier(&[1, 2], CacheMapping::Aligned),
            CacheMode::Cached,
            &layout(&[1, 2]),
        )
        .unwrap();
        assert_eq!(route.file(InodeId(5), 1, 40).incarnation, 40);
        // A reconnection to a restarted manager brings another value: the handle
        // keeps sending the first, and the manager refuses it.
        assert_eq!(route.file(InodeId(5), 1, 41).incarnation, 40);
        assert_eq!(route.file(InodeId(5), 0, 7).incarnation, 7);
    }
}
