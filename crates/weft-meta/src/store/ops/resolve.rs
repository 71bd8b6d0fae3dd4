//! `resolve`: walks an absolute path from the root, one snapshot for the whole walk.

use super::super::access::MAY_EXECUTE;
use super::super::names::split_path;
use super::super::{require, MetaStore, Namespace};
use super::child_record;
use weft_layout::InodeId;
use weft_proto::{Attr, Cred, ErrorCode, WireError};

impl MetaStore {
    /// The attributes of what absolute `path` names ("/" is the root). Needs search
    /// permission on every directory walked; a symlink is returned, not followed
    /// (the client decides whether to follow it).
    pub fn resolve(&self, cred: &Cred, path: &str) -> Result<Attr, WireError> {
        let names = split_path(path)?;
        self.read(|ns| {
            let mut current = InodeId::ROOT;
            let mut record = ns.inode(current)?;
            // The prefix walked so far, for messages; empty while at the root.
            let mut walked = String::new();
            let shown = |walked: &str| {
                if walked.is_empty() {
                    "/".to_owned()
                } else {
                    walked.to_owned()
                }
            };
            for name in names {
                if !record.is_directory() {
                    return Err(WireError::new(
                        ErrorCode::NotDirectory,
                        format!("{} is not a directory (resolving {path})", shown(&walked)),
                    ));
                }
                require(cred, &record, MAY_EXECUTE, || {
                    format!("directory {}", shown(&walked))
                })?;
                let entry = ns.entry(current, name.as_bytes())?;
                walked.push('/');
                walked.push_str(name);
                let Some((child, _)) = entry else {
                    return Err(WireError::new(ErrorCode::NotFound, format!("{walked} not found")));
                };
                record = child_record(ns, current, name.as_bytes(), child)?;
                current = child;
            }
            Ok(record.attr(current))
        })
    }
}
