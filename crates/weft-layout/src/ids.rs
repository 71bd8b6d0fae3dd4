//! Identifier types shared by every crate: inodes and servers.

use std::fmt;

/// A file-system-wide inode number. Allocated by the metadata manager and never reused
/// for the life of the file system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct InodeId(pub u64);

impl InodeId {
    /// The root directory.
    pub const ROOT: InodeId = InodeId(1);
}

impl fmt::Display for InodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A server's number in the cluster description (`[[server]] id = N`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ServerId(pub u32);

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
