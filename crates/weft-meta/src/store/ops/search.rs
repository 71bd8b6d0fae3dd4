//! `may_reach`: the search rights on the way to an inode that a request naming it by
//! number skips. A user who walks a path needs search (x) permission on every
//! directory of it; one who names an inode by its number (sequential, easy to guess)
//! must have been able to walk there too.

use super::super::access::{permits, MAY_EXECUTE};
use super::super::{MetaStore, Namespace, ReadTables, StorageResult};
use weft_layout::InodeId;
use weft_proto::{Cred, ErrorCode, WireError};

/// Most directories walked up from an inode to the root: a path of
/// `PATH_BYTES_MAX` (4096) bytes has at most 2048 components.
const REACH_DEPTH_MAX: usize = 4096;

/// Most directories holding names of one file that are tried (hard links): each try is
/// a walk to the root, and a file may have `LINKS_MAX` names.
pub const REACH_PARENTS_MAX: usize = 64;

impl MetaStore {
    /// Whether `cred` may search every directory from the root down to one holding
    /// `inode` (a directory's own search right is its operations' business): a
    /// directory through its only parent, a file through any directory that holds one
    /// of its names (`file_parents`; the first `REACH_PARENTS_MAX` of them), a file kept
    /// nameless through the directory it was in. A missing `inode` passes (the
    /// operation itself says `Stale`); a missing directory on the way does not.
    pub fn may_reach(&self, cred: &Cred, inode: InodeId) -> Result<(), WireError> {
        self.read(|ns| {
            let Some(record) = ns.find_inode(inode)? else {
                return Ok(());
            };
            if inode == InodeId::ROOT {
                return Ok(());
            }
            let mut parents = Vec::new();
            if !record.is_directory() {
                let range = ns
                    .file_parents
                    .range((inode.0, 0)..=(inode.0, u64::MAX))
                    .storage()?;
                for item in range.take(REACH_PARENTS_MAX) {
                    parents.push(InodeId(item.storage()?.0.value().1));
                }
            }
            if parents.is_empty() {
                parents.push(record.parent);
            }
            let mut refused = None;
            for parent in parents {
                match walk(ns, cred, inode, parent) {
                    Ok(()) => return Ok(()),
                    Err(e) => {
                        refused.get_or_insert(e);
                    }
                }
            }
            Err(refused.expect("at least one parent was tried"))
        })
    }
}

/// Search permission on directory `parent` of `inode` and on every directory above it.
fn walk(ns: &ReadTables, cred: &Cred, inode: InodeId, parent: InodeId) -> Result<(), WireError> {
    let (mut at, mut parent) = (inode, parent);
    for _ in 0..REACH_DEPTH_MAX {
        if at == InodeId::ROOT {
            return Ok(());
        }
        let Some(dir) = ns.find_inode(parent)?.filter(|d| d.is_directory()) else {
            return Err(WireError::new(
                ErrorCode::PermissionDenied,
                format!("permission denied: inode {inode} has no path from the root (its directory {parent} is gone)"),
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
}
