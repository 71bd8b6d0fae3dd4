//! `link`: another name for a non-directory (a hard link), counted in its inode.

use super::super::access::{
    is_owner_or_root, permits, MAY_EXECUTE, MAY_READ, MAY_WRITE, MODE_SETGID, MODE_SETUID,
};
use super::super::names::check_name;
use super::super::{MetaStore, Namespace};
use super::{exists, Made};
use weft_layout::InodeId;
use weft_proto::{Attr, Cred, ErrorCode, FileKind, WireError};

/// Most names one inode may have (ext4's limit).
pub const LINKS_MAX: u32 = 65_000;

impl MetaStore {
    /// Gives non-directory `inode` the name `name` in `parent` (write and search on
    /// `parent`). Refused for directories (`NotPermitted`), for a file that has no name
    /// left (`NotFound`: it is only kept open), past [`LINKS_MAX`] names
    /// (`TooManyLinks`), and, as Linux's `protected_hardlinks` has it, for someone who
    /// neither owns the inode nor could read and write it as a plain file. The inode's
    /// ctime moves.
    pub fn link(
        &self,
        cred: &Cred,
        inode: InodeId,
        parent: InodeId,
        name: impl AsRef<[u8]>,
    ) -> Result<Attr, WireError> {
        self.link_made(cred, inode, parent, name).map(|made| made.attr)
    }

    /// `link`, with the parent's attributes after it.
    pub fn link_made(
        &self,
        cred: &Cred,
        inode: InodeId,
        parent: InodeId,
        name: impl AsRef<[u8]>,
    ) -> Result<Made, WireError> {
        let name = name.as_ref();
        check_name(name)?;
        self.write(|tx| {
            let mut parent_record = tx.directory(cred, parent, MAY_WRITE | MAY_EXECUTE)?;
            let mut record = tx.inode(inode)?;
            if record.is_directory() {
                return Err(WireError::new(
                    ErrorCode::NotPermitted,
                    format!("inode {inode} is a directory: directories have one name"),
                ));
            }
            if record.links == 0 {
                return Err(WireError::new(
                    ErrorCode::NotFound,
                    format!("inode {inode} has no name left to link to"),
                ));
            }
            if record.links >= LINKS_MAX {
                return Err(WireError::new(
                    ErrorCode::TooManyLinks,
                    format!("inode {inode} has {LINKS_MAX} names, the most it may have"),
                ));
            }
            let safe_source = record.kind == FileKind::File
                && record.mode & MODE_SETUID == 0
                && record.mode & (MODE_SETGID | 0o010) != (MODE_SETGID | 0o010)
                && permits(cred, &record, MAY_READ | MAY_WRITE);
            if !is_owner_or_root(cred, &record) && !safe_source {
                return Err(WireError::new(
                    ErrorCode::NotPermitted,
                    format!(
                        "uid {} may not link inode {inode}: neither its owner nor able to read and write it",
                        cred.uid
                    ),
                ));
            }
            if tx.entry(parent, name)?.is_some() {
                return Err(exists(parent, name));
            }
            record.links += 1;
            record.ctime = tx.now;
            tx.add_name((parent, &mut parent_record), name, (inode, &record), false)?;
            Ok(Made {
                attr: record.attr(inode),
                parent: parent_record.attr(parent),
            })
        })
    }
}
