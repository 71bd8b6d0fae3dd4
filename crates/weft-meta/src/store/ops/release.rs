//! `release` and `kept`: files a mount keeps alive, nameless, while it has them open
//! (POSIX lets descriptors of an unlinked file go on working).

use super::super::{MetaStore, Namespace, StorageResult};
use redb::ReadableTable;
use weft_layout::InodeId;
use weft_proto::WireError;

impl MetaStore {
    /// Mount session `session` closed its last descriptor of `inode`, which it kept: if
    /// the file is still nameless it goes (its objects become an orphan). Releasing what
    /// this session does not keep does nothing, so a retried release is harmless.
    pub fn release(&self, inode: InodeId, session: u64) -> Result<(), WireError> {
        self.write(|tx| {
            if tx.kept.get(inode.0).storage()?.map(|v| v.value()) != Some(session) {
                return Ok(());
            }
            tx.kept.remove(inode.0).storage()?;
            if let Some(record) = tx.find_inode(inode)? {
                if record.links == 0 {
                    tx.drop_inode(inode, &record)?;
                }
            }
            Ok(())
        })
    }

    /// Up to `limit` kept inodes, with the session keeping each.
    pub fn kept(&self, limit: usize) -> Result<Vec<(InodeId, u64)>, WireError> {
        self.read(|tables| {
            let mut found = Vec::new();
            for item in tables.kept.iter().storage()?.take(limit) {
                let (key, value) = item.storage()?;
                found.push((InodeId(key.value()), value.value()));
            }
            Ok(found)
        })
    }
}
