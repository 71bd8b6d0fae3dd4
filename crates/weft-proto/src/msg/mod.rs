//! Requests and responses. A request's opcode travels in the frame header; its body
//! is the encoded message; bulk data (write payloads, read results) follows raw.
//!
//! Every message is declared once, its wire layout derived (`#[derive(Wire)]`, crate
//! weft-wire-derive): `request.rs` the requests (opcodes in `opcode.rs`), `response.rs`
//! the responses and result bodies, `cache.rs` and `values.rs` what they carry. The
//! limits below are checked by the decoders.

mod cache;
mod opcode;
mod request;
mod response;
mod values;

pub use cache::{CacheFile, CacheStats, CioStats};
pub use opcode::Opcode;
pub use request::Request;
pub use response::{decode_result, encode_result, Response};
pub use values::{CommitInfo, LockStats, SharedOp, ViewId, XattrSet};

/// Most ranges in one list-I/O request to one server.
pub const RANGES_MAX: usize = 16_384;
/// Most separate pieces a range-list read or write may have on the server it goes to:
/// bounds the memory a server holds to place them. Clients cut list requests at this
/// many pieces as well as at the data limit. (View requests need no such limit: the
/// server walks them a bounded window at a time.)
pub const PIECES_PER_REQUEST_MAX: usize = 1 << 18;
/// Most pieces of the client's read pool one `ShmScatter` names.
pub const SCATTER_PIECES_MAX: usize = 4096;
/// Longest extended attribute name (bytes, prefix included), as Linux's XATTR_NAME_MAX.
pub const XATTR_NAME_BYTES_MAX: usize = 255;
/// Largest extended attribute value (bytes), as Linux's XATTR_SIZE_MAX.
pub const XATTR_VALUE_BYTES_MAX: usize = 65_536;

/// Most names in one `Revalidate` (the deepest path a mount checks in one request).
pub const REVALIDATE_STEPS_MAX: usize = 256;
/// Most entries a readdir page may return.
pub const READDIR_ENTRIES_MAX: u32 = 4096;
/// Most names one `LookupMany` asks for.
pub const LOOKUP_MANY_MAX: usize = 4096;
/// Most files one `CreateMany` makes (its answer, kept as the request's record for a
/// resend, stays below 64 KiB).
pub const CREATE_MANY_MAX: usize = 256;
/// Most files one `ReleaseWrites` gives back.
pub const RELEASE_WRITES_MAX: usize = 4096;
/// Most inodes one `Changed` answer names (`Changes`).
pub const CHANGES_MAX: usize = 4096;
/// Most files one `StaleList` answer names (a rebuild walks the list in such pages).
pub const STALE_LIST_MAX: usize = 1024;
/// Most io servers one `ServerStates` answer names.
pub const SERVER_STATES_MAX: usize = 4096;

/// The steps of `Request::MigrateObject` (the manager's, at an io server, during a
/// `weft migrate` or `weft server drain`).
pub mod migrate_step {
    /// Refuse every change of the object (`Busy`) for a while (the lease is renewed by
    /// asking again); answered `Stamp` with the freeze's epoch, the same while the
    /// freeze lasts without a lapse.
    pub const FREEZE: u8 = 1;
    /// Take changes again.
    pub const THAW: u8 = 2;
    /// Set the old object aside and give the new one (`temp`'s) the inode's name; from
    /// then on only requests with the new striping are served (others: `Stale`).
    pub const ADOPT: u8 = 3;
    /// Undo an `ADOPT` (the manager could not commit the new layout).
    pub const UNDO: u8 = 4;
    /// Remove the old object set aside.
    pub const DROP: u8 = 5;
    /// Answered `Stamp` with the epoch of the freeze now (0: none).
    pub const CHECK: u8 = 6;
    /// The last step's number.
    pub const LAST: u8 = CHECK;
    /// What a `Busy` refusal of a frozen object's change says, by which a client tells
    /// it from other `Busy` answers and waits the migration out.
    pub const FROZEN_MARK: &str = "is being migrated to a new layout";
}

/// The states of an io server at the manager (`SetServerState`, `ServerStates`).
/// The identity modes `Response::Security` names (the cluster description's `identity`).
pub mod identity_mode {
    /// Every request acts as the cluster key's owner.
    pub const OWNER: u8 = 0;
    /// Requests act as the uid and groups they claim.
    pub const CLAIMED: u8 = 1;
    /// Every connection proves its uid with a MUNGE credential.
    pub const MUNGE: u8 = 2;
}

pub mod server_state {
    /// New files are placed there.
    pub const ACTIVE: u8 = 0;
    /// No new files go there; its files are being migrated off it.
    pub const DRAINING: u8 = 1;
    /// No new files go there and none has a piece there any more.
    pub const DRAINED: u8 = 2;
    /// Drained and taken out of service: it may leave the cluster description.
    pub const REMOVED: u8 = 3;

    /// The state's name, as `weft status` shows it.
    pub fn name(state: u8) -> &'static str {
        match state {
            ACTIVE => "active",
            DRAINING => "draining",
            DRAINED => "drained",
            REMOVED => "removed",
            _ => "unknown",
        }
    }
}

/// Most bytes of a metadata snapshot one `BackupRead` answer carries (well inside the
/// 1 MiB message limit).
pub const BACKUP_CHUNK_BYTES_MAX: usize = 512 * 1024;
/// Bytes of a backup's checksum (SHA-256).
pub const BACKUP_CHECKSUM_BYTES: usize = 32;
/// Most objects one `ObjList` answer names, and most inodes one `InodeStates` asks
/// about (a check walks in such pages, holding one at a time).
pub const OBJ_LIST_MAX: usize = 4096;
/// Most files one `LayoutScan` answer names.
pub const LAYOUT_SCAN_MAX: usize = 1024;
/// Most inodes in one batched io-server request (create/remove/extents).
pub const BATCH_INODES_MAX: usize = 4096;
/// Largest wire form of a view in a `RegisterView` (the message limit less room for the
/// length prefix): views are datatype trees, not byte lists, and real ones take a few
/// hundred bytes.
pub const VIEW_BYTES_MAX: usize = crate::frame::MESSAGE_BYTES_MAX as usize - 1024;
/// Most views registered at once on one connection to an io server. A client keeps one
/// per file view it uses over that connection; closing the connection releases them.
pub const VIEWS_PER_CONNECTION_MAX: usize = 64;

/// Most byte ranges one extent lock covers (a client merges the ranges of an access on
/// one server, closest first, until they fit). Merged ranges cover other processes'
/// bytes and make false conflicts: 4096 keeps the 3D block with 8 processes free of
/// them (1024 did not), in a 64 KiB message.
pub const LOCK_RANGES_MAX: usize = 4096;

/// Which roles a server process carries (bit set).
pub mod roles {
    pub const META: u32 = 1;
    pub const IO: u32 = 2;
    pub const CACHE: u32 = 4;
}

#[cfg(test)]
mod tests;
