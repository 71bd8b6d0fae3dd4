//! Small values that messages carry: view ids, lock counts, shared-pointer operations,
//! extended-attribute modes and where a manager's commits stand.

use crate::codec::{DecodeError, Reader, Wire, Writer};
use weft_wire_derive::Wire;

/// A view registered on one connection to one io server (Clusterfile "view I/O"):
/// assigned by the server, meaningful only on the connection that registered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Wire)]
pub struct ViewId(pub u32);

impl std::fmt::Display for ViewId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "view {}", self.0)
    }
}

/// An io server's extent-lock counts since it started (`LockStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Wire)]
pub struct LockStats {
    /// `ExtentLock` requests answered (granted or not).
    pub requests: u64,
    /// Locks granted.
    pub grants: u64,
    /// Requests refused because a held lock overlapped (the client tries again).
    pub conflicts: u64,
    /// Grants that came after at least one conflict (the client waited).
    pub waits: u64,
    /// Locks held now.
    pub held: u64,
    /// Locks taken over after their holder kept them past the hold limit.
    pub lapsed: u64,
}

/// What a `SharedPointer` request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedOp {
    /// Creates the pointer at 0 (an open).
    Create,
    /// Reads it.
    Get,
    /// Adds to it atomically (an access of that many etypes).
    FetchAdd(u64),
    /// Sets it (`MPI_File_seek_shared`).
    Set(u64),
    /// Forgets it (the close).
    Drop,
}

impl Wire for SharedOp {
    fn encode(&self, w: &mut Writer) {
        let (tag, value) = match *self {
            SharedOp::Create => (0, 0),
            SharedOp::Get => (1, 0),
            SharedOp::FetchAdd(n) => (2, n),
            SharedOp::Set(n) => (3, n),
            SharedOp::Drop => (4, 0),
        };
        w.u8(tag);
        w.u64(value);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let tag = r.u8()?;
        let value = r.u64()?;
        match tag {
            0 => Ok(SharedOp::Create),
            1 => Ok(SharedOp::Get),
            2 => Ok(SharedOp::FetchAdd(value)),
            3 => Ok(SharedOp::Set(value)),
            4 => Ok(SharedOp::Drop),
            v => Err(DecodeError::Invalid {
                what: "shared pointer operation",
                value: v as u64,
            }),
        }
    }
}

/// How a `SetXattr` treats an existing attribute (setxattr(2) flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Wire)]
#[wire(tag_what = "xattr set mode")]
pub enum XattrSet {
    /// Create or replace.
    Either = 0,
    /// Fail with `Exists` if it is set (`XATTR_CREATE`).
    Create = 1,
    /// Fail with `NoData` if it is not set (`XATTR_REPLACE`).
    Replace = 2,
}

/// Where a metadata manager's commits stand (`CommitMetadata`, `weft status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Wire)]
pub struct CommitInfo {
    /// Interval between background durable commits, microseconds (0: every operation
    /// is durable before it is answered).
    pub interval_us: u64,
    /// Sequence number of the last operation acknowledged.
    pub seq: u64,
    /// Sequence number of the last operation in a durable commit.
    pub durable_seq: u64,
    /// Milliseconds since the last durable commit (`u64::MAX`: none since the start).
    pub since_durable_ms: u64,
}
