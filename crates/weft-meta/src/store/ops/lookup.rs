//! `lookup` (one name in a directory) and `getattr` (by inode number).

use super::super::access::MAY_EXECUTE;
use super::super::names::check_name;
use super::super::{MetaStore, Namespace};
use super::{child_record, not_found};
use weft_layout::InodeId;
use weft_proto::{Attr, Cred, WireError};

impl MetaStore {
    /// The attributes of entry `name` of directory `parent`; needs search
    /// permission on `parent`.
    pub fn lookup(&self, cred: &Cred, parent: InodeId, name: impl AsRef<[u8]>) -> Result<Attr, WireError> {
        let name = name.as_ref();
        check_name(name)?;
        self.read(|ns| {
            ns.directory(cred, parent, MAY_EXECUTE)?;
            let (child, _) = ns.entry(parent, name)?.ok_or_else(|| not_found(parent, name))?;
            Ok(child_record(ns, parent, name, child)?.attr(child))
        })
    }

    /// The attributes of `inode`. Needs no permission: holding the number means the
    /// caller walked a path to it (as with stat(2) on an open descriptor).
    pub fn getattr(&self, _cred: &Cred, inode: InodeId) -> Result<Attr, WireError> {
        self.read(|ns| Ok(ns.inode(inode)?.attr(inode)))
    }
}

impl MetaStore {
    /// Whether `cred` may have a capability for `want` (`MAY_READ`, `MAY_WRITE` or
    /// both) on the data of regular file `inode`: the permission an open checks. The
    /// owner (and root) may have either whatever the mode says, as they may chmod the
    /// file anyway: a file created read-only is still written through the descriptor
    /// that created it (cp, weft put). A removed file whose objects wait for the purge
    /// may still be read until they go if `orphan_read`: the caller held it open (the
    /// service's record of the capabilities it granted, checked against the mode as it
    /// was then), or is trusted (a mount, whose kernel checked the open).
    pub fn may_access_data(
        &self,
        cred: &Cred,
        inode: InodeId,
        want: u32,
        orphan_read: bool,
    ) -> Result<(), WireError> {
        self.read(|ns| {
            let Some(record) = ns.find_inode(inode)? else {
                // Removed, its objects not yet purged: a client that held it open, or a
                // mount's open that found the file an instant before another client
                // replaced it, still reads it (as the purger's grace round intends),
                // until the purge. Anyone else holding the number reads nothing.
                let orphan = ns.orphans.get(inode.0).map_err(|e| {
                    WireError::new(
                        weft_proto::ErrorCode::Io,
                        format!("reading the orphans table: {e}"),
                    )
                })?;
                if orphan.is_some() && orphan_read && want == super::super::access::MAY_READ {
                    return Ok(());
                }
                return Err(WireError::new(
                    weft_proto::ErrorCode::Stale,
                    format!("inode {inode} does not exist"),
                ));
            };
            if record.kind != weft_proto::FileKind::File {
                return Err(WireError::new(
                    weft_proto::ErrorCode::InvalidArgument,
                    format!("inode {inode} is not a regular file: it has no data to grant access to"),
                ));
            }
            if super::super::access::is_owner_or_root(cred, &record) {
                return Ok(());
            }
            super::super::require(cred, &record, want, || format!("inode {inode}"))
        })
    }
}
