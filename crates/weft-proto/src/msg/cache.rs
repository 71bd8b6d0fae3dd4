//! What a cache manager needs with every request (`CacheFile`) and what it reports
//! (`CacheStats`, `CioStats`).

use weft_layout::InodeId;
use weft_wire_derive::Wire;

/// A cached file as a cache manager needs it with every request: where its data lives
/// on the io servers (to fetch and write back), and which incarnation of the manager
/// the client has been writing through.
#[derive(Debug, Clone, PartialEq, Eq, Wire)]
pub struct CacheFile {
    pub inode: InodeId,
    /// The file's layout on its io servers.
    pub layout: weft_layout::Layout,
    /// The manager's incarnation as the client first saw it on this file (from the
    /// handshake); 0 = not known yet. A manager that restarted refuses requests of an
    /// older incarnation, so a client never reads around writes the crash lost.
    pub incarnation: u64,
}

/// What a cache manager counted of the original access patterns it was given
/// (collective-I/O-aware caching): every (process request, block) reference, those that
/// found the block cached, their bytes, and blocks aggregated requests fetched that no
/// process asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Wire)]
pub struct CioStats {
    pub references: u64,
    pub hits: u64,
    pub bytes: u64,
    pub hit_bytes: u64,
    pub unasked_fetched: u64,
}

/// What one cache manager reports about itself (`weft status`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Wire)]
pub struct CacheStats {
    pub incarnation: u64,
    pub policy: String,
    pub capacity_bytes: u64,
    pub cached_bytes: u64,
    pub dirty_bytes: u64,
    pub blocks: u64,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub write_backs: u64,
    pub write_back_bytes: u64,
    pub write_back_errors: u64,
    pub fetched_bytes: u64,
    /// Of `write_backs`, the blocks written whole; the rest were partly dirty and
    /// written as their dirty extents (list I/O). Encoded last, so an older peer's
    /// shorter answer still decodes (as 0).
    #[wire(trailing)]
    pub write_backs_full: u64,
}
