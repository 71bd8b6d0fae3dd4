//! `symlink` and `readlink`.

use super::super::access::{MAY_EXECUTE, MAY_WRITE};
use super::super::names::{check_name, check_target};
use super::super::record::InodeRecord;
use super::super::{MetaStore, Namespace};
use super::{exists, new_mode_and_group, Made};
use weft_layout::InodeId;
use weft_proto::{Attr, Cred, ErrorCode, FileKind, Name, WireError};

impl MetaStore {
    /// Creates symlink `name` in `parent` pointing at `target` (stored verbatim,
    /// never interpreted here); needs write and search on `parent`.
    pub fn symlink(
        &self,
        cred: &Cred,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        target: impl AsRef<[u8]>,
    ) -> Result<Attr, WireError> {
        self.symlink_made(cred, parent, name, target)
            .map(|made| made.attr)
    }

    /// `symlink`, with the parent's attributes after it.
    pub fn symlink_made(
        &self,
        cred: &Cred,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        target: impl AsRef<[u8]>,
    ) -> Result<Made, WireError> {
        let (name, target) = (name.as_ref(), target.as_ref());
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
            record.target = Some(Name::from(target));
            tx.add_name((parent, &mut parent_record), name, (inode, &record), true)?;
            Ok(Made {
                attr: record.attr(inode),
                parent: parent_record.attr(parent),
            })
        })
    }

    /// The target of symlink `inode`; `InvalidArgument` for anything else.
    pub fn readlink(&self, _cred: &Cred, inode: InodeId) -> Result<Name, WireError> {
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
