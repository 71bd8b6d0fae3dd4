//! `unlink`: removes a file or symlink; a file's objects become an orphan.

use super::super::access::{may_remove_from_sticky, MAY_EXECUTE, MAY_WRITE};
use super::super::names::{check_name, quoted};
use super::super::{MetaStore, Namespace};
use super::{child_record, not_found, sticky_denied};
use weft_layout::InodeId;
use weft_proto::{Cred, ErrorCode, WireError};

impl MetaStore {
    /// Removes entry `name` (a file or symlink) from `parent`; needs write and
    /// search on `parent` and, in a sticky directory, ownership of the entry or
    /// of the directory. When that was the inode's last name, in the same transaction a
    /// file's inode and layout go to the orphans table, from which the purger removes
    /// its objects, unless mount session `keep` has it open: then it is kept, nameless,
    /// and returned, until that mount releases it.
    pub fn unlink(
        &self,
        cred: &Cred,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        keep: Option<u64>,
    ) -> Result<Option<InodeId>, WireError> {
        let name = name.as_ref();
        check_name(name)?;
        self.write(|tx| {
            let mut parent_record = tx.directory(cred, parent, MAY_WRITE | MAY_EXECUTE)?;
            let (child, _) = tx.entry(parent, name)?.ok_or_else(|| not_found(parent, name))?;
            let record = child_record(tx, parent, name, child)?;
            if record.is_directory() {
                return Err(WireError::new(
                    ErrorCode::IsDirectory,
                    format!("{} in directory {parent} is a directory: use rmdir", quoted(name)),
                ));
            }
            if !may_remove_from_sticky(cred, &parent_record, &record) {
                return Err(sticky_denied(cred, parent, name));
            }
            tx.remove_entry(parent, name)?;
            let kept = tx.unlinked(child, record, keep)?;
            parent_record.entries -= 1;
            parent_record.mtime = tx.now;
            parent_record.ctime = tx.now;
            tx.put_inode(parent, &parent_record)?;
            Ok(kept)
        })
    }
}
