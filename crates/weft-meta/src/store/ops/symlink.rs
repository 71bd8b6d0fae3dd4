//! `symlink` and `readlink`.

use super::super::access::{MAY_EXECUTE, MAY_WRITE};
use super::super::names::{check_name, check_target};
use super::super::record::InodeRecord;
use super::super::{MetaStore, Namespace, COUNTER_FILES};
use super::{exists, new_mode_and_group};
use weft_layout::InodeId;
use weft_proto::{Attr, Cred, ErrorCode, FileKind, WireError};

impl MetaStore {
    /// Creates symlink `name` in `parent` pointing at `target` (stored verbatim,
    /// never interpreted here); needs write and search on `parent`.
    pub fn symlink(&self, cred: &Cred, parent: InodeId, name: &str, target: &str) -> Result<Attr, WireError> {
        check_name(name)?;
        check_target(target)?;
        let inode = self.allocate_inode()?;
        self.write(|tx| {
            let mut parent_record = tx.directory(cred, parent, MAY_WRITE | MAY_EXECUTE)?;
            if tx.entry(parent, name)?.is_some() {
                return Err(exists(parent, name));
            }
            let (_, gid) = new_mode_and_group(cred, &parent_record, 0o777, false);
            let mut record = InodeRecord::new(FileKind::Symlink, 0o777, (cred.uid, gid), parent, tx.now);
            record.target = Some(target.to_owned());
            tx.put_inode(inode, &record)?;
            tx.put_entry(parent, name, inode, FileKind::Symlink)?;
            parent_record.entries += 1;
            parent_record.mtime = tx.now;
            parent_record.ctime = tx.now;
            tx.put_inode(parent, &parent_record)?;
            tx.add_counter(COUNTER_FILES, 1)?;
            Ok(record.attr(inode))
        })
    }

    /// The target of symlink `inode`; `InvalidArgument` for anything else.
    pub fn readlink(&self, _cred: &Cred, inode: InodeId) -> Result<String, WireError> {
        self.read(|ns| {
            ns.inode(inode)?.target.ok_or_else(|| {
                WireError::new(
                    ErrorCode::InvalidArgument,
                    format!("inode {inode} is not a symlink"),
                )
            })
        })
    }
}
