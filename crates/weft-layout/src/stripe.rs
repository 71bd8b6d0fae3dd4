//! Striping layouts (PVFS ssize/pcount/base): which server holds which byte of a file,
//! where it sits in that server's local object, and the inverse mappings.
//!
//! Stripe `i` of a file (bytes `[i*s, (i+1)*s)` for stripe size `s`) lives on
//! `servers[i % servers.len()]`. Each server stores its stripes densely, so stripe `i`
//! starts at local offset `(i / count) * s`.

use crate::ids::ServerId;
use crate::redundancy::{place_copies, Redundancy, Replication, REPLICAS_MAX};

/// Smallest stripe size accepted (bytes).
pub const STRIPE_SIZE_BYTES_MIN: u64 = 512;
/// Largest stripe size accepted (bytes).
pub const STRIPE_SIZE_BYTES_MAX: u64 = 1 << 30;
/// Largest number of servers a file may be striped over.
pub const STRIPE_COUNT_MAX: usize = 1024;
/// The cluster default stripe size (64 KiB, as in the PVFS paper's era of tuning).
pub const STRIPE_SIZE_BYTES_DEFAULT: u64 = 64 * 1024;
/// Largest logical file offset Weft addresses (2^62 bytes): keeps every sum of an offset
/// and a length far from u64 overflow.
pub const FILE_OFFSET_MAX: u64 = 1 << 62;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    #[error("stripe size {0} bytes is outside {STRIPE_SIZE_BYTES_MIN}..={STRIPE_SIZE_BYTES_MAX}")]
    StripeSize(u64),
    #[error("stripe count {0} is outside 1..={STRIPE_COUNT_MAX}")]
    StripeCount(usize),
    #[error("server {0} appears twice in the layout")]
    DuplicateServer(ServerId),
    #[error("stripe count {wanted} exceeds the {available} io servers of the cluster")]
    NotEnoughServers { wanted: usize, available: usize },
    #[error("first server index {first} is not below the {available} io servers of the cluster")]
    FirstServer { first: usize, available: usize },
    #[error("range at offset {offset} with length {len} runs past the largest file offset 2^62")]
    RangeOverflow { offset: u64, len: u64 },
    #[error("{0} replicas is outside 1..={max}", max = crate::redundancy::REPLICAS_MAX)]
    Replicas(usize),
    #[error("stale server {0} holds no piece of the layout")]
    StaleServer(ServerId),
    #[error("{replicas} replicas of {width} stripes need {wanted} distinct io servers, the cluster has {available}")]
    NotEnoughServersForReplicas {
        replicas: usize,
        width: usize,
        wanted: usize,
        available: usize,
    },
}

/// How a file is striped: a stripe size and the ordered list of servers holding its
/// stripes. `servers[0]` is the PVFS "base" server.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layout {
    pub stripe_size_bytes: u64,
    pub servers: Vec<ServerId>,
    /// Extra copies of the stripes and stale pieces (empty: a plain layout); see
    /// `redundancy.rs`.
    pub replication: Replication,
}

/// What a user asks for when creating a file or setting a directory default: any field
/// left out is taken from the directory default or the cluster default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct LayoutRequest {
    pub stripe_size_bytes: Option<u64>,
    pub stripe_count: Option<u32>,
    /// Index into the cluster's io-server list of the first server.
    pub first_server: Option<u32>,
    /// Whether the file's data goes through the cache tier.
    pub cache: Option<CacheMode>,
    /// Copies of the data (`replicas=N`).
    pub redundancy: Option<Redundancy>,
}

/// How a file's data reaches its io servers: a property of the file, fixed at create,
/// so that every client routes the file's I/O the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum CacheMode {
    /// Clients talk to the io servers directly.
    #[default]
    None = 0,
    /// All data I/O goes through the cache tier's cache managers (one replica of each
    /// block in the whole tier).
    Cached = 1,
    /// All data I/O goes through delegates: cache managers with the server-aligned
    /// mapping and write-back caching (the I/O delegation design).
    Delegated = 2,
}

impl CacheMode {
    pub const ALL: [CacheMode; 3] = [CacheMode::None, CacheMode::Cached, CacheMode::Delegated];

    pub fn name(self) -> &'static str {
        match self {
            CacheMode::None => "none",
            CacheMode::Cached => "cached",
            CacheMode::Delegated => "delegated",
        }
    }

    pub fn from_code(code: u8) -> Option<CacheMode> {
        CacheMode::ALL.into_iter().find(|m| *m as u8 == code)
    }

    /// Whether data I/O of such a file goes through the cache tier.
    pub fn uses_tier(self) -> bool {
        self != CacheMode::None
    }
}

/// Which cache manager holds a block of a cached file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum CacheMapping {
    /// Server-aligned: block `x` (a stripe) goes to the cache manager serving the io
    /// server that stores it; the managers of a file are a factor or a multiple of its
    /// stripe count, so each talks only to its own io servers. With a cache role in
    /// every io server this is disk-directed I/O: data crosses the network once.
    #[default]
    Aligned = 0,
    /// Hash Distributed Caching on file offsets: block `x` goes to manager `x mod n`
    /// over all the cluster's cache managers (Clusterfile's two-phase placement).
    Hashed = 1,
}

impl CacheMapping {
    pub fn name(self) -> &'static str {
        match self {
            CacheMapping::Aligned => "aligned",
            CacheMapping::Hashed => "hashed",
        }
    }

    pub fn from_code(code: u8) -> Option<CacheMapping> {
        [CacheMapping::Aligned, CacheMapping::Hashed]
            .into_iter()
            .find(|m| *m as u8 == code)
    }
}

impl std::str::FromStr for CacheMapping {
    type Err = String;
    fn from_str(s: &str) -> Result<CacheMapping, String> {
        match s {
            "aligned" => Ok(CacheMapping::Aligned),
            "hashed" | "hdc" => Ok(CacheMapping::Hashed),
            _ => Err(format!("cache mapping {s:?} is not one of aligned, hashed")),
        }
    }
}

impl std::fmt::Display for CacheMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for CacheMode {
    type Err = String;
    fn from_str(s: &str) -> Result<CacheMode, String> {
        CacheMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("cache mode {s:?} is not one of none, cached, delegated"))
    }
}

/// One contiguous piece of a request that lands on one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripePiece {
    /// Index of the server in `Layout::servers`.
    pub server_index: usize,
    pub file_offset: u64,
    pub local_offset: u64,
    pub len: u64,
}

impl Layout {
    /// Checks the invariants of a layout received from outside.
    pub fn validate(&self) -> Result<(), LayoutError> {
        check_stripe_size(self.stripe_size_bytes)?;
        if self.servers.is_empty() || self.servers.len() > STRIPE_COUNT_MAX {
            return Err(LayoutError::StripeCount(self.servers.len()));
        }
        let mut seen = self.servers.clone();
        seen.sort_unstable();
        if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
            return Err(LayoutError::DuplicateServer(w[0]));
        }
        self.validate_replication()
    }

    /// Resolves a request against the cluster's io servers (in cluster order) and the
    /// defaults to use for fields the request leaves out.
    pub fn resolve(
        request: &LayoutRequest,
        defaults: &LayoutRequest,
        cluster_servers: &[ServerId],
    ) -> Result<Layout, LayoutError> {
        let available = cluster_servers.len();
        let stripe_size_bytes = request
            .stripe_size_bytes
            .or(defaults.stripe_size_bytes)
            .unwrap_or(STRIPE_SIZE_BYTES_DEFAULT);
        check_stripe_size(stripe_size_bytes)?;
        let replicas = request
            .redundancy
            .or(defaults.redundancy)
            .unwrap_or_default()
            .copies();
        if replicas == 0 || replicas > crate::redundancy::REPLICAS_MAX as usize {
            return Err(LayoutError::Replicas(replicas));
        }
        // A count of 0 means "all io servers" (of a replicated file: as many as leave
        // a distinct server for every copy of every slot).
        let count = match request.stripe_count.or(defaults.stripe_count) {
            None | Some(0) => (available / replicas).max(1),
            Some(n) => n as usize,
        };
        if count == 0 || count > STRIPE_COUNT_MAX {
            return Err(LayoutError::StripeCount(count));
        }
        if count > available {
            return Err(LayoutError::NotEnoughServers {
                wanted: count,
                available,
            });
        }
        let first = request.first_server.or(defaults.first_server).unwrap_or(0) as usize;
        if first >= available {
            return Err(LayoutError::FirstServer { first, available });
        }
        if replicas * count > available {
            return Err(LayoutError::NotEnoughServersForReplicas {
                replicas,
                width: count,
                wanted: replicas * count,
                available,
            });
        }
        let servers = (0..count)
            .map(|k| cluster_servers[(first + k) % available])
            .collect();
        Ok(Layout {
            stripe_size_bytes,
            servers,
            replication: Replication {
                copies: place_copies(cluster_servers, first, count, replicas),
                stale: Vec::new(),
            },
        })
    }

    pub fn stripe_count(&self) -> usize {
        self.servers.len()
    }

    /// Index (into `servers`) of the server holding file byte `offset`.
    pub fn server_index_of(&self, offset: u64) -> usize {
        ((offset / self.stripe_size_bytes) % self.servers.len() as u64) as usize
    }

    /// Offset of file byte `offset` inside its server's local object.
    pub fn local_offset_of(&self, offset: u64) -> u64 {
        let stripe = offset / self.stripe_size_bytes;
        (stripe / self.servers.len() as u64) * self.stripe_size_bytes + offset % self.stripe_size_bytes
    }

    /// File offset of local byte `local` of server `server_index`.
    pub fn file_offset_of(&self, server_index: usize, local: u64) -> u64 {
        let row = local / self.stripe_size_bytes;
        let stripe = row * self.servers.len() as u64 + server_index as u64;
        stripe * self.stripe_size_bytes + local % self.stripe_size_bytes
    }

    /// The logical file size implied by one server's local object size: one past the
    /// file offset of its last local byte (0 for an empty object).
    pub fn logical_end_from_local(&self, server_index: usize, local_size: u64) -> u64 {
        if local_size == 0 {
            0
        } else {
            self.file_offset_of(server_index, local_size - 1) + 1
        }
    }

    /// How many bytes of the file prefix `[0, logical_size)` live on server
    /// `server_index`: the local object size after a truncate to `logical_size`.
    pub fn local_size_for(&self, server_index: usize, logical_size: u64) -> u64 {
        let s = self.stripe_size_bytes;
        let count = self.servers.len() as u64;
        let full_stripes = logical_size / s;
        let remainder = logical_size % s;
        let rows = full_stripes / count;
        let extra = full_stripes % count;
        let index = server_index as u64;
        rows * s
            + if index < extra {
                s
            } else if index == extra {
                remainder
            } else {
                0
            }
    }

    /// Splits the file range `[offset, offset + len)` into stripe pieces in file order.
    pub fn pieces(&self, offset: u64, len: u64) -> Result<StripePieces<'_>, LayoutError> {
        check_range(offset, len)?;
        Ok(StripePieces {
            layout: self,
            offset,
            end: offset + len,
            only_server: None,
        })
    }

    /// The pieces of `[offset, offset + len)` held by one server, in file order.
    pub fn pieces_on(
        &self,
        server_index: usize,
        offset: u64,
        len: u64,
    ) -> Result<StripePieces<'_>, LayoutError> {
        check_range(offset, len)?;
        let mut it = StripePieces {
            layout: self,
            offset,
            end: offset + len,
            only_server: None,
        };
        it.only_server = Some(server_index);
        it.skip_to_server();
        Ok(it)
    }

    /// Number of bytes of `[offset, offset + len)` held by server `server_index`.
    pub fn bytes_on(&self, server_index: usize, offset: u64, len: u64) -> u64 {
        let end = offset.saturating_add(len);
        self.local_size_for(server_index, end) - self.local_size_for(server_index, offset)
    }
}

/// Checks that `[offset, offset + len)` stays below `FILE_OFFSET_MAX`.
pub fn check_range(offset: u64, len: u64) -> Result<(), LayoutError> {
    match offset.checked_add(len) {
        Some(end) if end <= FILE_OFFSET_MAX => Ok(()),
        _ => Err(LayoutError::RangeOverflow { offset, len }),
    }
}

fn check_stripe_size(size: u64) -> Result<(), LayoutError> {
    if (STRIPE_SIZE_BYTES_MIN..=STRIPE_SIZE_BYTES_MAX).contains(&size) {
        Ok(())
    } else {
        Err(LayoutError::StripeSize(size))
    }
}

/// Iterator over the stripe pieces of a range; see [`Layout::pieces`].
#[derive(Debug, Clone)]
pub struct StripePieces<'a> {
    layout: &'a Layout,
    offset: u64,
    end: u64,
    only_server: Option<usize>,
}

impl StripePieces<'_> {
    /// Advances `offset` to the next stripe held by `only_server`, jumping whole rows.
    fn skip_to_server(&mut self) {
        let Some(target) = self.only_server else {
            return;
        };
        let s = self.layout.stripe_size_bytes;
        let count = self.layout.servers.len() as u64;
        let stripe = self.offset / s;
        let index = stripe % count;
        if index as usize != target {
            let ahead = (target as u64 + count - index) % count;
            self.offset = (stripe + ahead) * s;
        }
    }
}

impl Iterator for StripePieces<'_> {
    type Item = StripePiece;

    fn next(&mut self) -> Option<StripePiece> {
        if self.offset >= self.end {
            return None;
        }
        let s = self.layout.stripe_size_bytes;
        let stripe_end = (self.offset / s + 1) * s;
        let piece_end = stripe_end.min(self.end);
        let piece = StripePiece {
            server_index: self.layout.server_index_of(self.offset),
            file_offset: self.offset,
            local_offset: self.layout.local_offset_of(self.offset),
            len: piece_end - self.offset,
        };
        self.offset = piece_end;
        self.skip_to_server();
        Some(piece)
    }
}

/// A replicated layout's copies (see `redundancy`): slots, the servers of each copy,
/// and the check of the replication part of a layout received from outside.
impl Layout {
    /// Stripes per row: the number of slots (primary servers).
    pub fn width(&self) -> usize {
        self.servers.len()
    }

    /// Copies of each stripe (1 for a plain layout).
    pub fn replica_count(&self) -> usize {
        1 + self.replication.copies.len() / self.servers.len().max(1)
    }

    pub fn redundancy(&self) -> Redundancy {
        Redundancy::Replicas(self.replica_count() as u8)
    }

    /// The server of copy `copy` (0: the primary) of slot `slot`.
    pub fn replica_server(&self, copy: usize, slot: usize) -> ServerId {
        match copy {
            0 => self.servers[slot],
            r => self.replication.copies[(r - 1) * self.servers.len() + slot],
        }
    }

    /// The servers holding slot `slot`'s stripes, primary first.
    pub fn slot_servers(&self, slot: usize) -> Vec<ServerId> {
        (0..self.replica_count())
            .map(|r| self.replica_server(r, slot))
            .collect()
    }

    /// The servers of slot `slot` a size or a read may be asked of: its copies not
    /// marked stale, primary first (all of them in the impossible case that every one
    /// is: the manager never marks a slot's last fresh copy).
    pub fn fresh_slot_servers(&self, slot: usize) -> Vec<ServerId> {
        let fresh: Vec<ServerId> = (0..self.replica_count())
            .map(|r| self.replica_server(r, slot))
            .filter(|s| !self.is_stale(*s))
            .collect();
        if fresh.is_empty() {
            self.slot_servers(slot)
        } else {
            fresh
        }
    }

    /// Every server holding a piece of the file: the primaries, then each copy's.
    pub fn all_servers(&self) -> Vec<ServerId> {
        let mut all = self.servers.clone();
        all.extend_from_slice(&self.replication.copies);
        all
    }

    /// Whether `server`'s piece is recorded stale.
    pub fn is_stale(&self, server: ServerId) -> bool {
        self.replication.stale.contains(&server)
    }

    /// The slot and copy of `server` in this layout, if it holds a piece.
    pub fn piece_of(&self, server: ServerId) -> Option<(usize, usize)> {
        let width = self.servers.len();
        self.all_servers()
            .iter()
            .position(|s| *s == server)
            .map(|i| (i % width, i / width))
    }

    /// Checks the replication part of a layout received from outside (the striping
    /// part is checked by `validate`, which calls this).
    pub(crate) fn validate_replication(&self) -> Result<(), LayoutError> {
        let width = self.servers.len();
        let copies = &self.replication.copies;
        if !copies.len().is_multiple_of(width) || copies.len() / width + 1 > REPLICAS_MAX as usize {
            return Err(LayoutError::Replicas(copies.len() / width.max(1) + 1));
        }
        let all = self.all_servers();
        let mut seen = all.clone();
        seen.sort_unstable();
        if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
            return Err(LayoutError::DuplicateServer(w[0]));
        }
        if let Some(s) = self.replication.stale.iter().find(|s| !all.contains(s)) {
            return Err(LayoutError::StaleServer(*s));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn layout(stripe: u64, count: u32) -> Layout {
        Layout {
            stripe_size_bytes: stripe,
            servers: (0..count).map(ServerId).collect(),
            replication: Default::default(),
        }
    }

    #[test]
    fn resolve_applies_defaults_and_rotation() {
        let cluster: Vec<ServerId> = (10..14).map(ServerId).collect();
        let request = LayoutRequest {
            stripe_count: Some(3),
            first_server: Some(2),
            ..Default::default()
        };
        let l = Layout::resolve(&request, &LayoutRequest::default(), &cluster).unwrap();
        assert_eq!(l.stripe_size_bytes, STRIPE_SIZE_BYTES_DEFAULT);
        assert_eq!(l.servers, vec![ServerId(12), ServerId(13), ServerId(10)]);
        let too_many = LayoutRequest {
            stripe_count: Some(5),
            ..Default::default()
        };
        assert!(matches!(
            Layout::resolve(&too_many, &LayoutRequest::default(), &cluster),
            Err(LayoutError::NotEnoughServers {
                wanted: 5,
                available: 4
            })
        ));
        let tiny = LayoutRequest {
            stripe_size_bytes: Some(1),
            ..Default::default()
        };
        assert!(Layout::resolve(&tiny, &LayoutRequest::default(), &cluster).is_err());
    }

    #[test]
    fn overflowing_ranges_are_rejected() {
        let l = layout(4096, 4);
        assert!(l.pieces(u64::MAX - 1, 10).is_err());
        assert!(l.pieces(FILE_OFFSET_MAX, 1).is_err());
        assert!(l.pieces(FILE_OFFSET_MAX - 1, 1).is_ok());
    }

    proptest! {
        /// Pieces of a range cover it exactly, in order, each within one stripe, and
        /// the per-server iterators yield exactly that server's pieces.
        #[test]
        fn pieces_partition_the_range(stripe in 512u64..5000, count in 1u32..7,
                                      offset in 0u64..100_000, len in 0u64..100_000) {
            let l = layout(stripe, count);
            let all: Vec<_> = l.pieces(offset, len).unwrap().collect();
            let mut at = offset;
            for p in &all {
                prop_assert_eq!(p.file_offset, at);
                prop_assert!(p.len > 0);
                prop_assert_eq!(p.file_offset / stripe, (p.file_offset + p.len - 1) / stripe);
                // Naive model: the stripe number decides the server.
                prop_assert_eq!(p.server_index as u64, (p.file_offset / stripe) % count as u64);
                prop_assert_eq!(l.file_offset_of(p.server_index, p.local_offset), p.file_offset);
                at += p.len;
            }
            prop_assert_eq!(at, offset + len);
            for k in 0..count as usize {
                let mine: Vec<_> = l.pieces_on(k, offset, len).unwrap().collect();
                let expected: Vec<_> = all.iter().copied().filter(|p| p.server_index == k).collect();
                prop_assert_eq!(&mine, &expected);
                prop_assert_eq!(l.bytes_on(k, offset, len), expected.iter().map(|p| p.len).sum::<u64>());
            }
        }

        /// Truncating to a size and deriving the size back from the local objects agree.
        #[test]
        fn local_sizes_round_trip(stripe in 512u64..5000, count in 1u32..7, size in 0u64..1_000_000) {
            let l = layout(stripe, count);
            let derived = (0..count as usize)
                .map(|k| l.logical_end_from_local(k, l.local_size_for(k, size)))
                .max()
                .unwrap();
            prop_assert_eq!(derived, size);
            // Naive model: count the bytes of [0, size) per server one stripe at a time.
            for k in 0..count as usize {
                let mut expected = 0;
                let mut at = 0;
                while at < size {
                    let n = stripe.min(size - at);
                    if l.server_index_of(at) == k { expected += n; }
                    at += n;
                }
                prop_assert_eq!(l.local_size_for(k, size), expected);
            }
        }
    }
}
