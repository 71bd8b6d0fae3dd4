//! `mknod`: FIFOs, character and block devices and sockets, which exist in the
//! namespace only (nothing of them is on io servers).

use super::super::access::{is_root, MAY_EXECUTE, MAY_WRITE};
use super::super::names::check_name;
use super::super::record::InodeRecord;
use super::super::{MetaStore, Namespace};
use super::{exists, new_mode_and_group, Made};
use weft_layout::InodeId;
use weft_proto::{Attr, Cred, ErrorCode, FileKind, WireError};

impl MetaStore {
    /// Creates special file `name` of `kind` in `parent` (write and search on
    /// `parent`); devices (root only, as without CAP_MKNOD) get device number `rdev`.
    /// Regular files are made by `create`, directories by `mkdir`.
    pub fn mknod(
        &self,
        cred: &Cred,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        kind: FileKind,
        mode: u32,
        rdev: u64,
    ) -> Result<Attr, WireError> {
        self.mknod_made(cred, parent, name, kind, mode, rdev)
            .map(|made| made.attr)
    }

    /// `mknod`, with the parent's attributes after it.
    pub fn mknod_made(
        &self,
        cred: &Cred,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        kind: FileKind,
        mode: u32,
        rdev: u64,
    ) -> Result<Made, WireError> {
        let name = name.as_ref();
        check_name(name)?;
        if !kind.is_special() {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!("mknod makes FIFOs, devices and sockets, not a {kind:?}"),
            ));
        }
        let device = matches!(kind, FileKind::CharDevice | FileKind::BlockDevice);
        if device && !is_root(cred) {
            return Err(WireError::new(
                ErrorCode::NotPermitted,
                format!("uid {} may not make device nodes", cred.uid),
            ));
        }
        let inode = self.allocate_inode()?;
        self.write(|tx| {
            let mut parent_record = tx.directory(cred, parent, MAY_WRITE | MAY_EXECUTE)?;
            if tx.entry(parent, name)?.is_some() {
                return Err(exists(parent, name));
            }
            let (mode, gid) = new_mode_and_group(cred, &parent_record, mode, false);
            let mut record = InodeRecord::new(kind, mode, (cred.uid, gid), parent, tx.now);
            record.rdev = if device { rdev } else { 0 };
            tx.add_name((parent, &mut parent_record), name, (inode, &record), true)?;
            Ok(Made {
                attr: record.attr(inode),
                parent: parent_record.attr(parent),
            })
        })
    }
}
