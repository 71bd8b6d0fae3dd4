//! `rename`: atomic move or replace with POSIX semantics, in one transaction.

use super::super::access::{may_remove_from_sticky, MAY_EXECUTE, MAY_WRITE};
use super::super::names::{check_name, quoted};
use super::super::{require, MetaStore, Namespace, COUNTER_DIRECTORIES};
use super::{child_record, has_entries, not_found, sticky_denied};
use weft_layout::InodeId;
use weft_proto::{Attr, Cred, ErrorCode, WireError};

/// Deepest directory tree the subtree check walks; a longer parent chain means a
/// cycle, which is a broken invariant.
const DIRECTORY_DEPTH_MAX: usize = 1 << 20;

impl MetaStore {
    /// Moves `src_name` of `src_parent` to `dst_name` of `dst_parent`, atomically
    /// replacing an existing target: a file or symlink replaces a non-directory
    /// (which, if a file, becomes an orphan), a directory replaces an empty
    /// directory. Errors: `IsDirectory` for a non-directory over a directory,
    /// `NotDirectory` for a directory over a non-directory, `NotEmpty` over a
    /// non-empty directory, `InvalidArgument` for a directory moved into its own
    /// subtree. Needs write and search on both parents, the sticky-bit rule on
    /// each name removed or replaced, and (as Linux) write permission on a
    /// directory that changes parent. Renaming an entry to itself does nothing. A
    /// replaced file that mount session `keep` has open is kept as `unlink` keeps it.
    /// Returns the moved inode's attributes and the kept inode, if any.
    pub fn rename(
        &self,
        cred: &Cred,
        src: (InodeId, impl AsRef<[u8]>),
        dst: (InodeId, impl AsRef<[u8]>),
        keep: Option<u64>,
    ) -> Result<(Attr, Option<InodeId>), WireError> {
        self.rename_with(cred, src, dst, keep, true)
    }

    /// `rename` that never replaces (rename(2) with RENAME_NOREPLACE): `Exists` when
    /// the target name exists, whatever it leads to (the source itself included, as
    /// on Linux), checked in the same transaction as the move. Returns the moved
    /// inode's attributes.
    pub fn rename_no_replace(
        &self,
        cred: &Cred,
        src: (InodeId, impl AsRef<[u8]>),
        dst: (InodeId, impl AsRef<[u8]>),
    ) -> Result<Attr, WireError> {
        self.rename_with(cred, src, dst, None, false)
            .map(|(moved, _)| moved)
    }

    fn rename_with(
        &self,
        cred: &Cred,
        (src_parent, src_name): (InodeId, impl AsRef<[u8]>),
        (dst_parent, dst_name): (InodeId, impl AsRef<[u8]>),
        keep: Option<u64>,
        replace: bool,
    ) -> Result<(Attr, Option<InodeId>), WireError> {
        let (src_name, dst_name) = (src_name.as_ref(), dst_name.as_ref());
        check_name(src_name)?;
        check_name(dst_name)?;
        let same_parent = src_parent == dst_parent;
        self.write(|tx| {
            let mut src_dir = tx.directory(cred, src_parent, MAY_WRITE | MAY_EXECUTE)?;
            let mut dst_dir = if same_parent {
                None
            } else {
                Some(tx.directory(cred, dst_parent, MAY_WRITE | MAY_EXECUTE)?)
            };
            let (moved, _) = tx
                .entry(src_parent, src_name)?
                .ok_or_else(|| not_found(src_parent, src_name))?;
            let mut moved_record = child_record(tx, src_parent, src_name, moved)?;
            if !may_remove_from_sticky(cred, &src_dir, &moved_record) {
                return Err(sticky_denied(cred, src_parent, src_name));
            }
            let target = tx.entry(dst_parent, dst_name)?;
            if !replace && target.is_some() {
                return Err(WireError::new(
                    ErrorCode::Exists,
                    format!(
                        "{} exists in directory {dst_parent} (rename without replacing)",
                        quoted(dst_name)
                    ),
                ));
            }
            if same_parent && src_name == dst_name || target.is_some_and(|(t, _)| t == moved) {
                return Ok((moved_record.attr(moved), None));
            }
            let moved_is_directory = moved_record.is_directory();
            if moved_is_directory && !same_parent {
                require(cred, &moved_record, MAY_WRITE, || {
                    format!("directory {} (its \"..\" changes)", quoted(src_name))
                })?;
                refuse_move_into_own_subtree(tx, moved, src_name, dst_parent)?;
            }

            let replaced = match target {
                None => None,
                Some((replaced, _)) => {
                    let replaced_record = child_record(tx, dst_parent, dst_name, replaced)?;
                    match (moved_is_directory, replaced_record.is_directory()) {
                        (false, true) => {
                            return Err(WireError::new(
                                ErrorCode::IsDirectory,
                                format!(
                                    "cannot replace directory {} in {dst_parent} with a non-directory",
                                    quoted(dst_name)
                                ),
                            ))
                        }
                        (true, false) => {
                            return Err(WireError::new(
                                ErrorCode::NotDirectory,
                                format!(
                                    "cannot replace non-directory {} in {dst_parent} with a directory",
                                    quoted(dst_name)
                                ),
                            ))
                        }
                        (true, true) if has_entries(tx, replaced)? => {
                            return Err(WireError::new(
                                ErrorCode::NotEmpty,
                                format!(
                                    "cannot replace directory {} in {dst_parent}: not empty",
                                    quoted(dst_name)
                                ),
                            ))
                        }
                        _ => {}
                    }
                    let dst_record = dst_dir.as_ref().unwrap_or(&src_dir);
                    if !may_remove_from_sticky(cred, dst_record, &replaced_record) {
                        return Err(sticky_denied(cred, dst_parent, dst_name));
                    }
                    Some((replaced, replaced_record))
                }
            };

            // All checks passed; from here on only writes.
            let now = tx.now;
            src_dir.entries -= 1;
            if moved_is_directory {
                src_dir.subdirectories -= 1;
            }
            src_dir.mtime = now;
            src_dir.ctime = now;
            let dst_record = dst_dir.as_mut().unwrap_or(&mut src_dir);
            dst_record.entries += 1;
            if moved_is_directory {
                dst_record.subdirectories += 1;
            }
            if let Some((_, replaced_record)) = &replaced {
                dst_record.entries -= 1;
                if replaced_record.is_directory() {
                    dst_record.subdirectories -= 1;
                }
            }
            dst_record.mtime = now;
            dst_record.ctime = now;

            let mut kept = None;
            if let Some((replaced, replaced_record)) = replaced {
                if replaced_record.is_directory() {
                    tx.remove_inode(replaced)?;
                    tx.add_counter(COUNTER_DIRECTORIES, -1)?;
                } else {
                    kept = tx.unlinked(replaced, replaced_record, keep)?;
                }
            }
            tx.remove_entry(src_parent, src_name)?;
            tx.put_entry(dst_parent, dst_name, moved, moved_record.kind)?;
            moved_record.parent = dst_parent;
            moved_record.ctime = now;
            tx.put_inode(moved, &moved_record)?;
            tx.put_inode(src_parent, &src_dir)?;
            if let Some(dst_dir) = &dst_dir {
                tx.put_inode(dst_parent, dst_dir)?;
            }
            Ok((moved_record.attr(moved), kept))
        })
    }
}

impl MetaStore {
    /// Swaps `a_name` of `a_parent` and `b_name` of `b_parent` atomically (rename(2)
    /// with RENAME_EXCHANGE): each name then leads to what the other led to, of any
    /// kinds, and nothing is removed. Both must exist. The checks are `rename`'s for
    /// each of the two moves: write and search on both parents, the sticky-bit rule on
    /// both names, write permission on a directory that changes parent, and
    /// `InvalidArgument` for a directory moved into its own subtree. Swapping a name
    /// with itself, or with another name of the same inode, does nothing. Returns what
    /// `a_name` led to, with its new ctime.
    pub fn exchange(
        &self,
        cred: &Cred,
        (a_parent, a_name): (InodeId, impl AsRef<[u8]>),
        (b_parent, b_name): (InodeId, impl AsRef<[u8]>),
    ) -> Result<Attr, WireError> {
        let (a_name, b_name) = (a_name.as_ref(), b_name.as_ref());
        check_name(a_name)?;
        check_name(b_name)?;
        let same_parent = a_parent == b_parent;
        self.write(|tx| {
            let mut a_dir = tx.directory(cred, a_parent, MAY_WRITE | MAY_EXECUTE)?;
            let mut b_dir = if same_parent {
                None
            } else {
                Some(tx.directory(cred, b_parent, MAY_WRITE | MAY_EXECUTE)?)
            };
            let (a, _) = tx
                .entry(a_parent, a_name)?
                .ok_or_else(|| not_found(a_parent, a_name))?;
            let (b, _) = tx
                .entry(b_parent, b_name)?
                .ok_or_else(|| not_found(b_parent, b_name))?;
            let mut a_record = child_record(tx, a_parent, a_name, a)?;
            if a == b {
                return Ok(a_record.attr(a));
            }
            let mut b_record = child_record(tx, b_parent, b_name, b)?;
            if !may_remove_from_sticky(cred, &a_dir, &a_record) {
                return Err(sticky_denied(cred, a_parent, a_name));
            }
            if !may_remove_from_sticky(cred, b_dir.as_ref().unwrap_or(&a_dir), &b_record) {
                return Err(sticky_denied(cred, b_parent, b_name));
            }
            let (a_is_directory, b_is_directory) = (a_record.is_directory(), b_record.is_directory());
            if !same_parent {
                for (moved, record, name, destination, is_directory) in [
                    (a, &a_record, a_name, b_parent, a_is_directory),
                    (b, &b_record, b_name, a_parent, b_is_directory),
                ] {
                    if is_directory {
                        require(cred, record, MAY_WRITE, || {
                            format!("directory {} (its \"..\" changes)", quoted(name))
                        })?;
                        refuse_move_into_own_subtree(tx, moved, name, destination)?;
                    }
                }
            }

            // All checks passed; from here on only writes.
            let now = tx.now;
            if let Some(b_dir) = &mut b_dir {
                // Each directory keeps its number of entries; a directory that moves
                // takes its ".." link along.
                let moved_in = b_is_directory as u64;
                let moved_out = a_is_directory as u64;
                a_dir.subdirectories = a_dir.subdirectories + moved_in - moved_out;
                b_dir.subdirectories = b_dir.subdirectories + moved_out - moved_in;
                b_dir.mtime = now;
                b_dir.ctime = now;
            }
            a_dir.mtime = now;
            a_dir.ctime = now;
            tx.put_entry(a_parent, a_name, b, b_record.kind)?;
            tx.put_entry(b_parent, b_name, a, a_record.kind)?;
            a_record.parent = b_parent;
            a_record.ctime = now;
            b_record.parent = a_parent;
            b_record.ctime = now;
            tx.put_inode(a, &a_record)?;
            tx.put_inode(b, &b_record)?;
            tx.put_inode(a_parent, &a_dir)?;
            if let Some(b_dir) = &b_dir {
                tx.put_inode(b_parent, b_dir)?;
            }
            Ok(a_record.attr(a))
        })
    }
}

/// `InvalidArgument` if `destination` is `moved` or lies below it: walks the parent
/// pointers from `destination` up to the root.
fn refuse_move_into_own_subtree(
    ns: &impl Namespace,
    moved: InodeId,
    moved_name: &[u8],
    destination: InodeId,
) -> Result<(), WireError> {
    let mut at = destination;
    for _ in 0..DIRECTORY_DEPTH_MAX {
        if at == moved {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "cannot move directory {} (inode {moved}) into its own subtree",
                    quoted(moved_name)
                ),
            ));
        }
        if at == InodeId::ROOT {
            return Ok(());
        }
        at = ns.inode(at)?.parent;
    }
    Err(WireError::new(
        ErrorCode::Internal,
        format!("parent chain above inode {destination} is longer than {DIRECTORY_DEPTH_MAX}: a cycle"),
    ))
}
