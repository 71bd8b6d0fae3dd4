//! `getxattr`: the value of one extended attribute.

use super::super::access::MAY_READ;
use super::super::names::quoted;
use super::super::xattrs::{check_xattr_name, xattr_permission};
use super::super::{MetaStore, Namespace, StorageResult};
use weft_layout::InodeId;
use weft_proto::{Cred, ErrorCode, WireError};

impl MetaStore {
    /// The value of attribute `name` of `inode` (read permission for `user.*`, root for
    /// `trusted.*`, anyone for `security.*`); `NoData` when it is not set.
    pub fn getxattr(
        &self,
        cred: &Cred,
        inode: InodeId,
        name: impl AsRef<[u8]>,
    ) -> Result<Vec<u8>, WireError> {
        let name = name.as_ref();
        let namespace = check_xattr_name(name)?;
        self.read(|ns| {
            let record = ns.inode(inode)?;
            xattr_permission(cred, inode, &record, namespace, MAY_READ)?;
            match ns.xattrs().get((inode.0, name)).storage()? {
                Some(value) => Ok(value.value().to_vec()),
                None => Err(WireError::new(
                    ErrorCode::NoData,
                    format!("inode {inode} has no attribute {}", quoted(name)),
                )),
            }
        })
    }
}
