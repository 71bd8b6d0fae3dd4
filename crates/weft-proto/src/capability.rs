//! Capabilities: what the metadata manager hands a client, after its permission check,
//! for the data of one file, and what io servers and cache managers ask for before they
//! touch an object (OrangeFS's signed capabilities, Ceph's cephx tickets).
//!
//! A capability names an inode, the rights it grants (read, write), when it was issued
//! and when it expires (Unix milliseconds), and carries a MAC over all of that under a
//! key derived from the cluster key (`weft_rpc::capability` makes and checks it; this
//! crate only carries it). A client presents it once per connection
//! (`Request::PresentCapability`); the server verifies it once and remembers it for the
//! connection until it expires, so the data path pays one MAC per connection, inode and
//! right, not one per request.
//!
//! What they protect: a file's bytes (read, write, truncate, allocate, append, locks,
//! and the same through cache managers) from every client the manager would not let
//! open the file, and objects from creation and removal by anyone but a server. Sizes
//! are not protected (an attribute; see `need`).
//!
//! Lifetime and revocation: a capability lives `capability_lifetime_ms` (60 s by
//! default, at most `weft_rpc::capability::LIFETIME_MAX_MS`); clients renew it ahead of
//! expiry. A chmod or chown sends `RevokeCapabilities` to every io server and cache
//! manager at once; one that missed it honours old capabilities until they expire, so
//! the lifetime bounds how long a permission change takes to reach every server.

use crate::codec::{DecodeError, Reader};
use crate::msg::Request;
use weft_layout::InodeId;
use weft_wire_derive::Wire;

/// Bytes of a capability's MAC (HMAC-SHA256).
pub const CAPABILITY_MAC_BYTES: usize = 32;

/// The rights a capability grants (bit set).
pub mod rights {
    /// Read the file's bytes.
    pub const READ: u8 = 1;
    /// Change the file's bytes (write, truncate, allocate, append).
    pub const WRITE: u8 = 2;
    /// A server acting as itself (the metadata manager creating and removing objects,
    /// a cache manager writing back): any inode, any operation. Never granted to a
    /// client; made by servers from the key.
    pub const SERVER: u8 = 4;
    /// Every bit a capability may carry.
    pub const ALL: u8 = READ | WRITE | SERVER;

    /// "read", "write", "read+write", "server".
    pub fn describe(rights: u8) -> &'static str {
        match rights {
            READ => "read",
            WRITE => "write",
            x if x == READ | WRITE => "read+write",
            x if x & SERVER != 0 => "server",
            _ => "no",
        }
    }
}

/// A grant of `rights` on `inode`'s data until `expiry_ms`, signed by the manager.
#[derive(Clone, PartialEq, Eq, Hash, Wire)]
pub struct Capability {
    pub inode: InodeId,
    #[wire(decode = checked_rights)]
    pub rights: u8,
    /// When the manager issued it (Unix ms): a revocation refuses capabilities issued
    /// before it.
    pub issued_ms: u64,
    /// When it stops being honoured (Unix ms).
    pub expiry_ms: u64,
    #[wire(fixed = "capability MAC length")]
    pub mac: [u8; CAPABILITY_MAC_BYTES],
}

impl std::fmt::Debug for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Capability({} {} issued {} expires {})",
            self.inode,
            rights::describe(self.rights),
            self.issued_ms,
            self.expiry_ms
        )
    }
}

impl Capability {
    /// The bytes the MAC covers: fixed-length fields only, so no two capabilities
    /// share them.
    pub fn signed_bytes(&self) -> [u8; 33] {
        let mut b = [0u8; 33];
        b[..8].copy_from_slice(&self.inode.0.to_le_bytes());
        b[8] = self.rights;
        b[9..17].copy_from_slice(&self.issued_ms.to_le_bytes());
        b[17..25].copy_from_slice(&self.expiry_ms.to_le_bytes());
        b[25..33].copy_from_slice(b"weft-cap");
        b
    }
}

/// A capability's rights as decoded: some, and none unknown (checked before the rest
/// of the capability is read).
fn checked_rights(r: &mut Reader<'_>) -> Result<u8, DecodeError> {
    let rights = r.u8()?;
    if rights == 0 || rights & !rights::ALL != 0 {
        return Err(DecodeError::Invalid {
            what: "capability rights",
            value: rights as u64,
        });
    }
    Ok(rights)
}

/// What a request needs a capability for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Nothing: no file's data (statistics, sizes, views, the handshake, metadata).
    None,
    /// `rights` (one of `READ`, `WRITE`, or both meaning either) on `inode`.
    Inode { inode: InodeId, rights: u8 },
    /// A server capability (object creation and removal, dropping cached blocks).
    Server,
}

impl Need {
    fn on(inode: InodeId, rights: u8) -> Need {
        Need::Inode { inode, rights }
    }
}

/// What `request` needs before an io server or a cache manager serves it.
///
/// Sizes (`Extents`, `ObjStat`, `ObjStamp`, `CacheExtents`) need none: a file's size is an
/// attribute, and the manager shows attributes by inode to every key holder. Unlocks
/// need none: a token only releases what its own connection took.
pub fn need(request: &Request) -> Need {
    use crate::capability::rights::{READ, WRITE};
    match request {
        Request::Read { inode, .. } | Request::ReadView { inode, .. } => Need::on(*inode, READ),
        Request::Write { inode, .. }
        | Request::WriteView { inode, .. }
        | Request::Truncate { inode, .. }
        | Request::Allocate { inode, .. }
        | Request::AppendLock { inode }
        | Request::RebuildStamp { inode, .. }
        | Request::RebuildWrite { inode, .. } => Need::on(*inode, WRITE),
        Request::ExtentLock { inode, exclusive, .. } => {
            Need::on(*inode, if *exclusive { WRITE } else { READ })
        }
        // Either right: syncing or flushing what the holder could write or read.
        Request::Sync { inode } | Request::CacheClose { inode } => Need::on(*inode, READ | WRITE),
        Request::CacheFlush { file } => Need::on(file.inode, READ | WRITE),
        Request::CacheTruncate { file, .. } | Request::CachePunch { file, .. } => Need::on(file.inode, WRITE),
        Request::ViaCache { file, request } | Request::ViaCacheAware { file, request, .. } => {
            match need(request) {
                Need::Inode { rights, .. } => Need::on(file.inode, rights),
                other => other,
            }
        }
        // One file's blocks, dropped after a sync by a client of job delegates: either
        // right (nothing dirty is left to lose). Several at once: the manager's
        // removal of files.
        Request::CacheDrop { inodes } if inodes.len() == 1 => Need::on(inodes[0], READ | WRITE),
        Request::ObjCreate { .. }
        | Request::ObjTimes { .. }
        | Request::ObjPrecreate { .. }
        | Request::ObjRemove { .. }
        | Request::MigrateObject { .. }
        | Request::ObjList { .. }
        | Request::CacheDrop { .. }
        | Request::CacheMigrate { .. }
        | Request::RevokeCapabilities { .. } => Need::Server,
        _ => Need::None,
    }
}
