//! `removexattr`: removes one extended attribute of an inode.

use super::super::access::MAY_WRITE;
use super::super::names::quoted;
use super::super::xattrs::{check_xattr_name, xattr_permission};
use super::super::{MetaStore, Namespace, StorageResult};
use weft_layout::InodeId;
use weft_proto::{Cred, ErrorCode, WireError};

impl MetaStore {
    /// Removes attribute `name` of `inode`, with the permissions `setxattr` needs;
    /// `NoData` when it is not set. The ctime moves.
    pub fn removexattr(&self, cred: &Cred, inode: InodeId, name: impl AsRef<[u8]>) -> Result<(), WireError> {
        let name = name.as_ref();
        let namespace = check_xattr_name(name)?;
        self.write(|tx| {
            let mut record = tx.inode(inode)?;
            xattr_permission(cred, inode, &record, namespace, MAY_WRITE)?;
            if tx.xattrs.remove((inode.0, name)).storage()?.is_none() {
                return Err(WireError::new(
                    ErrorCode::NoData,
                    format!("inode {inode} has no attribute {}", quoted(name)),
                ));
            }
            record.ctime = tx.now;
            tx.put_inode(inode, &record)
        })
    }
}
