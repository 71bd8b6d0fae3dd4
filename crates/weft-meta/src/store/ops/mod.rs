//! One file per metadata operation, each an `impl MetaStore` block.

pub mod create;
mod getxattr;
pub mod link;
mod listxattr;
mod lock_sessions;
mod lookup;
mod mark_stale;
pub(super) mod migrate;
mod mkdir;
mod mknod;
mod orphans;
mod precreated;
mod readdir;
pub(crate) mod rebuild;
mod release;
mod removexattr;
mod rename;
mod resolve;
mod revalidate;
mod rmdir;
mod search;
mod servers;
mod set_dir_layout;
mod setattr;
mod setxattr;
mod statfs;
mod symlink;
mod unlink;

use super::access::{is_root, MODE_SETGID};
use super::names::quoted;
use super::record::InodeRecord;
use super::{Namespace, StorageResult};
use weft_layout::InodeId;
use weft_proto::{Attr, Cred, ErrorCode, WireError};

/// What an operation that makes a name left: the inode named (made, or linked) and
/// the directory the name is in, both as the operation's transaction wrote them (what
/// a `getattr` right after its commit would answer, unless another operation of the
/// same group commit changed the directory after it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Made {
    pub attr: Attr,
    pub parent: Attr,
}

/// Mode and group of a new inode in `parent`. BSD/SysV semantics: in a setgid
/// directory new inodes take the directory's group and new directories inherit
/// the setgid bit; a non-root creator outside the new group cannot set setgid.
fn new_mode_and_group(cred: &Cred, parent: &InodeRecord, mode: u32, directory: bool) -> (u32, u32) {
    let mut mode = mode & 0o7777;
    let gid = if parent.mode & MODE_SETGID != 0 {
        if directory {
            mode |= MODE_SETGID;
        }
        parent.gid
    } else {
        cred.gid
    };
    if !directory && !is_root(cred) && !cred.in_group(gid) {
        mode &= !MODE_SETGID;
    }
    (mode, gid)
}

/// The record an entry points at; a dangling entry is a broken invariant of the
/// store, reported rather than panicking the server.
fn child_record(
    ns: &impl Namespace,
    parent: InodeId,
    name: &[u8],
    child: InodeId,
) -> Result<InodeRecord, WireError> {
    ns.find_inode(child)?.ok_or_else(|| {
        WireError::new(
            ErrorCode::Internal,
            format!(
                "entry {} of directory {parent} points to missing inode {child}",
                quoted(name)
            ),
        )
    })
}

/// Whether directory `dir` has any entry: one probe of the `dirents` range.
fn has_entries(ns: &impl Namespace, dir: InodeId) -> Result<bool, WireError> {
    use redb::ReadableTable;
    let lower = (dir.0, &[][..]);
    let mut range = ns.dirents().range(lower..).storage()?;
    match range.next() {
        None => Ok(false),
        Some(item) => {
            let (key, _) = item.storage()?;
            Ok(key.value().0 == dir.0)
        }
    }
}

fn not_found(parent: InodeId, name: &[u8]) -> WireError {
    WireError::new(
        ErrorCode::NotFound,
        format!("no entry {} in directory {parent}", quoted(name)),
    )
}

fn exists(parent: InodeId, name: &[u8]) -> WireError {
    WireError::new(
        ErrorCode::Exists,
        format!("{} already exists in directory {parent}", quoted(name)),
    )
}

fn sticky_denied(cred: &Cred, parent: InodeId, name: &[u8]) -> WireError {
    WireError::new(
        ErrorCode::NotPermitted,
        format!(
            "uid {} may not remove {} from sticky directory {parent}: owns neither",
            cred.uid,
            quoted(name)
        ),
    )
}
