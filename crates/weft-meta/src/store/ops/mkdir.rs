//! `mkdir`.

use super::super::access::{MAY_EXECUTE, MAY_WRITE};
use super::super::names::check_name;
use super::super::record::InodeRecord;
use super::super::{MetaStore, Namespace};
use super::{exists, new_mode_and_group, Made};
use weft_layout::InodeId;
use weft_proto::{Attr, Cred, FileKind, WireError};

impl MetaStore {
    /// Creates directory `name` in `parent` (needs write and search on `parent`).
    /// The new directory copies the parent's default layout, so a subtree keeps
    /// the striping set at its top (Lustre semantics); changing the parent's
    /// default later does not reach existing subdirectories.
    pub fn mkdir(
        &self,
        cred: &Cred,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        mode: u32,
    ) -> Result<Attr, WireError> {
        self.mkdir_made(cred, parent, name, mode).map(|made| made.attr)
    }

    /// `mkdir`, with the parent's attributes after it.
    pub fn mkdir_made(
        &self,
        cred: &Cred,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        mode: u32,
    ) -> Result<Made, WireError> {
        let name = name.as_ref();
        check_name(name)?;
        let inode = self.allocate_inode()?;
        self.write(|tx| {
            let mut parent_record = tx.directory(cred, parent, MAY_WRITE | MAY_EXECUTE)?;
            if tx.entry(parent, name)?.is_some() {
                return Err(exists(parent, name));
            }
            let (mode, gid) = new_mode_and_group(cred, &parent_record, mode, true);
            let mut record = InodeRecord::new(FileKind::Directory, mode, (cred.uid, gid), parent, tx.now);
            record.dir_layout = parent_record.dir_layout;
            tx.add_name((parent, &mut parent_record), name, (inode, &record), true)?;
            Ok(Made {
                attr: record.attr(inode),
                parent: parent_record.attr(parent),
            })
        })
    }
}
