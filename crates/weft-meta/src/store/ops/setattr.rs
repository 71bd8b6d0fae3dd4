//! `setattr`: chmod, chown, truncate and utimens with POSIX permission rules.

use super::super::access::{is_owner_or_root, is_root, permits, MAY_WRITE, MODE_SETGID, MODE_SETUID};
use super::super::record::InodeRecord;
use super::super::{require, MetaStore, Namespace};
use weft_layout::InodeId;
use weft_proto::{Attr, Cred, ErrorCode, FileKind, SetAttr, TimeSet, WireError};

impl MetaStore {
    /// Applies `changes` to `inode` in one transaction, all permission checks
    /// against the attributes as they were before the call:
    /// - mode: owner or root; a non-root caller outside the (new) group loses setgid;
    /// - uid: root only; gid: root, or the owner to a group he is in; any chown of a
    ///   non-directory clears setuid, and setgid if the group may execute or (for a
    ///   non-root caller) the caller is outside the group, as Linux does;
    /// - size: write permission (or a handle open for writing, `by_handle`), regular
    ///   files only (the manager stores no size; it updates mtime and the client
    ///   truncates the objects); a non-root caller's truncate drops privileges;
    /// - `kill_privileges` (a write by an unprivileged process): write permission (or
    ///   `by_handle`); clears setuid, and setgid if the group may execute or the caller
    ///   is outside the group;
    /// - times: `Now` needs ownership or write permission, explicit times
    ///   ownership or root.
    ///
    /// ctime moves on every change; an empty `changes` changes nothing.
    pub fn setattr(&self, cred: &Cred, inode: InodeId, changes: &SetAttr) -> Result<Attr, WireError> {
        self.write(|tx| {
            let before = tx.inode(inode)?;
            let mut record = before.clone();
            let now = tx.now;
            let owner_or_root = is_owner_or_root(cred, &before);
            let not_permitted = |what: &str| {
                WireError::new(
                    ErrorCode::NotPermitted,
                    format!("uid {} may not {what} of inode {inode}", cred.uid),
                )
            };

            if changes.uid.is_some() || changes.gid.is_some() {
                let uid = changes.uid.unwrap_or(before.uid);
                let gid = changes.gid.unwrap_or(before.gid);
                if !is_root(cred) {
                    if uid != before.uid {
                        return Err(not_permitted("change the owner"));
                    }
                    if cred.uid != before.uid {
                        return Err(not_permitted("change the group"));
                    }
                    if gid != before.gid && !cred.in_group(gid) {
                        return Err(not_permitted(&format!(
                            "give group {gid} (not one of his groups)"
                        )));
                    }
                }
                // Otherwise a setuid program would change hands with its privileges;
                // directories keep setgid, which only steers the group of new entries.
                if !before.is_directory() {
                    record.mode &= !MODE_SETUID;
                    if record.mode & MODE_GROUP_EXECUTE != 0 || (!is_root(cred) && !cred.in_group(gid)) {
                        record.mode &= !MODE_SETGID;
                    }
                }
                record.uid = uid;
                record.gid = gid;
            }

            if let Some(mode) = changes.mode {
                if !owner_or_root {
                    return Err(not_permitted("change the mode"));
                }
                let mut mode = mode & 0o7777;
                if !is_root(cred) && !cred.in_group(record.gid) {
                    mode &= !MODE_SETGID;
                }
                record.mode = mode;
            }

            if changes.size.is_some() {
                match before.kind {
                    FileKind::Directory => {
                        return Err(WireError::new(
                            ErrorCode::IsDirectory,
                            format!("cannot truncate directory inode {inode}"),
                        ))
                    }
                    FileKind::File => {}
                    other => {
                        return Err(WireError::new(
                            ErrorCode::InvalidArgument,
                            format!("cannot truncate inode {inode}: a {other:?}, not a file"),
                        ))
                    }
                }
                if !changes.by_handle {
                    require(cred, &before, MAY_WRITE, || format!("file inode {inode}"))?;
                }
                record.mtime = now;
                if !is_root(cred) {
                    drop_privileges(cred, &mut record);
                }
            }

            if changes.kill_privileges {
                if !changes.by_handle {
                    require(cred, &before, MAY_WRITE, || format!("file inode {inode}"))?;
                }
                drop_privileges(cred, &mut record);
            }

            for (set, time) in [
                (changes.atime, &mut record.atime),
                (changes.mtime, &mut record.mtime),
            ] {
                match set {
                    None => {}
                    Some(TimeSet::Now) => {
                        if !owner_or_root && !permits(cred, &before, MAY_WRITE) {
                            return Err(WireError::new(
                                ErrorCode::PermissionDenied,
                                format!(
                                    "uid {} may not touch inode {inode}: neither owner nor writer",
                                    cred.uid
                                ),
                            ));
                        }
                        *time = now;
                    }
                    Some(TimeSet::At(at)) => {
                        if !owner_or_root {
                            return Err(not_permitted("set explicit times"));
                        }
                        *time = at;
                    }
                }
            }

            let asked = SetAttr {
                by_handle: false,
                ..changes.clone()
            };
            if asked != SetAttr::default() && (record != before || !changes.kill_privileges) {
                record.ctime = now;
                if (record.uid, record.gid) != (before.uid, before.gid) {
                    tx.quota_chown(inode, &before, &record)?;
                }
                tx.put_inode(inode, &record)?;
            }
            Ok(record.attr(inode))
        })
    }
}

/// The group-execute permission bit.
const MODE_GROUP_EXECUTE: u32 = 0o010;

/// What a write or truncate by an unprivileged process does to a file's privileges
/// (Linux `file_remove_privs`): setuid goes, and setgid if the group may execute or the
/// writer is not in the file's group.
fn drop_privileges(cred: &Cred, record: &mut InodeRecord) {
    if record.is_directory() {
        return;
    }
    record.mode &= !MODE_SETUID;
    if record.mode & MODE_GROUP_EXECUTE != 0 || !(is_root(cred) || cred.in_group(record.gid)) {
        record.mode &= !MODE_SETGID;
    }
}
