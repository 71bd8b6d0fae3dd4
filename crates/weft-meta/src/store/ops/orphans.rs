//! The orphans table: removed files whose objects the purger has yet to delete
//! from the io servers.

use super::super::{MetaStore, Namespace, StorageResult, COUNTER_ORPHANS};
use redb::{ReadableTable, ReadableTableMetadata};
use weft_layout::{InodeId, Layout};
use weft_proto::{ErrorCode, Wire, WireError};

impl MetaStore {
    /// Up to `limit` orphans in inode order, with the layouts their objects have.
    pub fn orphans(&self, limit: usize) -> Result<Vec<(InodeId, Layout)>, WireError> {
        self.read(|tables| {
            let mut found = Vec::new();
            for item in tables.orphans.iter().storage()?.take(limit) {
                let (key, value) = item.storage()?;
                let inode = InodeId(key.value());
                let layout = Layout::from_bytes(value.value()).map_err(|e| {
                    WireError::new(
                        ErrorCode::Internal,
                        format!("orphan {inode} layout is corrupt: {e}"),
                    )
                })?;
                found.push((inode, layout));
            }
            Ok(found)
        })
    }

    /// Forgets orphans whose objects are gone; returns how many were orphans.
    /// Numbers that are not orphans are ignored, so a retried call is harmless.
    pub fn forget_orphans(&self, inodes: &[InodeId]) -> Result<usize, WireError> {
        self.write(|tx| {
            let mut forgotten = 0usize;
            for inode in inodes {
                if tx.orphans.remove(inode.0).storage()?.is_some() {
                    forgotten += 1;
                }
            }
            tx.add_counter(COUNTER_ORPHANS, -(forgotten as i64))?;
            debug_assert_eq!(
                tx.orphans.len().unwrap_or(0),
                tx.counter(COUNTER_ORPHANS).unwrap_or(0)
            );
            Ok(forgotten)
        })
    }

    /// Records objects that never made it into the namespace (a create whose
    /// commit failed and whose objects could not be removed right away) so that
    /// the purger removes them later. Refused for a live inode.
    pub fn add_orphan(&self, inode: InodeId, layout: &Layout) -> Result<(), WireError> {
        self.write(|tx| {
            if tx.find_inode(inode)?.is_some() {
                return Err(WireError::new(
                    ErrorCode::InvalidArgument,
                    format!("inode {inode} is in the namespace: not an orphan"),
                ));
            }
            if tx
                .orphans
                .insert(inode.0, layout.to_bytes().as_slice())
                .storage()?
                .is_none()
            {
                tx.add_counter(COUNTER_ORPHANS, 1)?;
            }
            Ok(())
        })
    }
}
