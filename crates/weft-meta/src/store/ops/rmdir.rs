//! `rmdir`: removes an empty directory.

use super::super::access::{may_remove_from_sticky, MAY_EXECUTE, MAY_WRITE};
use super::super::names::{check_name, quoted};
use super::super::{MetaStore, Namespace, COUNTER_DIRECTORIES};
use super::{child_record, has_entries, not_found, sticky_denied};
use weft_layout::InodeId;
use weft_proto::{Cred, ErrorCode, WireError};

impl MetaStore {
    /// Removes the empty directory `name` from `parent`; needs write and search on
    /// `parent` and obeys the sticky bit as `unlink` does.
    pub fn rmdir(&self, cred: &Cred, parent: InodeId, name: impl AsRef<[u8]>) -> Result<(), WireError> {
        let name = name.as_ref();
        check_name(name)?;
        self.write(|tx| {
            let mut parent_record = tx.directory(cred, parent, MAY_WRITE | MAY_EXECUTE)?;
            let (child, _) = tx.entry(parent, name)?.ok_or_else(|| not_found(parent, name))?;
            let record = child_record(tx, parent, name, child)?;
            if !record.is_directory() {
                return Err(WireError::new(
                    ErrorCode::NotDirectory,
                    format!("{} in directory {parent} is not a directory", quoted(name)),
                ));
            }
            if !may_remove_from_sticky(cred, &parent_record, &record) {
                return Err(sticky_denied(cred, parent, name));
            }
            if has_entries(tx, child)? {
                return Err(WireError::new(
                    ErrorCode::NotEmpty,
                    format!("directory {} (inode {child}) is not empty", quoted(name)),
                ));
            }
            tx.remove_entry(parent, name)?;
            tx.remove_inode(child)?;
            tx.add_counter(COUNTER_DIRECTORIES, -1)?;
            parent_record.entries -= 1;
            parent_record.subdirectories -= 1;
            parent_record.mtime = tx.now;
            parent_record.ctime = tx.now;
            tx.put_inode(parent, &parent_record)
        })
    }
}
