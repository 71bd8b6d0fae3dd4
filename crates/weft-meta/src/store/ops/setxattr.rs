//! `setxattr`: creates or replaces one extended attribute of an inode.

use super::super::access::MAY_WRITE;
use super::super::names::quoted;
use super::super::xattrs::{
    check_xattr_name, check_xattr_value, xattr_permission, xattr_usage, XATTRS_PER_INODE_MAX,
    XATTR_BYTES_PER_INODE_MAX,
};
use super::super::{MetaStore, Namespace, StorageResult};
use redb::ReadableTable;
use weft_layout::InodeId;
use weft_proto::{Cred, ErrorCode, WireError, XattrSet};

impl MetaStore {
    /// Sets attribute `name` of `inode` to `value`: `user.*` with write permission,
    /// `trusted.*` and `security.*` as root (see `xattrs`). `how` refuses an existing attribute
    /// (`Exists`) or a missing one (`NoData`). Past [`XATTRS_PER_INODE_MAX`] attributes
    /// or [`XATTR_BYTES_PER_INODE_MAX`] bytes on the inode: `NoSpace`. The ctime moves.
    pub fn setxattr(
        &self,
        cred: &Cred,
        inode: InodeId,
        name: impl AsRef<[u8]>,
        value: &[u8],
        how: XattrSet,
    ) -> Result<(), WireError> {
        let name = name.as_ref();
        let namespace = check_xattr_name(name)?;
        check_xattr_value(value)?;
        self.write(|tx| {
            let mut record = tx.inode(inode)?;
            xattr_permission(cred, inode, &record, namespace, MAY_WRITE)?;
            let exists = tx.xattrs.get((inode.0, name)).storage()?.is_some();
            match (how, exists) {
                (XattrSet::Create, true) => {
                    return Err(WireError::new(
                        ErrorCode::Exists,
                        format!("inode {inode} already has attribute {}", quoted(name)),
                    ))
                }
                (XattrSet::Replace, false) => {
                    return Err(WireError::new(
                        ErrorCode::NoData,
                        format!("inode {inode} has no attribute {}", quoted(name)),
                    ))
                }
                _ => {}
            }
            let (count, bytes) = xattr_usage(tx, inode, name)?;
            if count + 1 > XATTRS_PER_INODE_MAX
                || bytes + name.len() + value.len() > XATTR_BYTES_PER_INODE_MAX
            {
                return Err(WireError::new(
                    ErrorCode::NoSpace,
                    format!(
                        "inode {inode} would have more than {XATTRS_PER_INODE_MAX} attributes or \
                         {XATTR_BYTES_PER_INODE_MAX} bytes of them"
                    ),
                ));
            }
            tx.xattrs.insert((inode.0, name), value).storage()?;
            record.ctime = tx.now;
            tx.put_inode(inode, &record)
        })
    }
}
