//! `may_reach`: the search rights on the way to an inode that a request naming it by
//! number skips. A user who walks a path needs search (x) permission on every
//! directory of it; one who names an inode by its number (sequential, easy to guess)
//! must have been able to walk there too.

use super::super::access::{permits, MAY_EXECUTE};
use super::super::{MetaStore, Namespace};
use weft_layout::InodeId;
use weft_proto::{Cred, ErrorCode, WireError};

/// Most directories walked up from an inode to the root: a path of
/// `PATH_BYTES_MAX` (4096) bytes has at most 2048 components.
const REACH_DEPTH_MAX: usize = 4096;

impl MetaStore {
    /// Whether `cred` may search every directory from the root down to the one holding
    /// `inode` (a directory's own search right is its operations' business): walked up
    /// through each inode's recorded parent, a directory's only one. A file with
    /// several names (hard links) is reached through the directory of its first name
    /// (or of its last rename): another name's directory is not considered. A missing
    /// `inode` passes (the operation itself says `Stale`); a missing directory on the
    /// way does not.
    pub fn may_reach(&self, cred: &Cred, inode: InodeId) -> Result<(), WireError> {
        self.read(|ns| {
            let Some(record) = ns.find_inode(inode)? else {
                return Ok(());
            };
            let (mut at, mut parent) = (inode, record.parent);
            for _ in 0..REACH_DEPTH_MAX {
                if at == InodeId::ROOT {
                    return Ok(());
                }
                let Some(dir) = ns.find_inode(parent)?.filter(|d| d.is_directory()) else {
                    return Err(WireError::new(
                        ErrorCode::PermissionDenied,
                        format!(
                            "permission denied: inode {inode} has no path from the root (its directory {parent} is gone)"
                        ),
                    ));
                };
                if !permits(cred, &dir, MAY_EXECUTE) {
                    return Err(WireError::new(
                        ErrorCode::PermissionDenied,
                        format!(
                            "permission denied: uid {} may not search directory inode {parent} on the way to inode {inode}",
                            cred.uid
                        ),
                    ));
                }
                (at, parent) = (parent, dir.parent);
            }
            Err(WireError::new(
                ErrorCode::Internal,
                format!("inode {inode} is more than {REACH_DEPTH_MAX} directories below the root"),
            ))
        })
    }
}
