//! `listxattr`: the names of an inode's extended attributes.

use super::super::xattrs::XattrNamespace;
use super::super::{xattr_range, MetaStore, Namespace, StorageResult};
use weft_layout::InodeId;
use weft_proto::{Cred, Name, WireError};

impl MetaStore {
    /// The names of `inode`'s attributes, in byte order; `trusted.*` ones only for root
    /// (as Linux lists them). Needs no permission, as listxattr(2).
    pub fn listxattr(&self, cred: &Cred, inode: InodeId) -> Result<Vec<Name>, WireError> {
        self.read(|ns| {
            ns.inode(inode)?;
            let mut names = Vec::new();
            for item in xattr_range(ns.xattrs(), inode)? {
                let (key, _) = item.storage()?;
                let name = key.value().1;
                if XattrNamespace::listed(cred, name) {
                    names.push(Name::from(name));
                }
            }
            Ok(names)
        })
    }
}
