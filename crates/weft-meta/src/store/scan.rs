//! What `weft check` asks of the namespace: what it knows of inode numbers found as
//! objects on the io servers (`inode_states`), the hand-over of objects no file owns to
//! the purger (`adopt_orphans`), and the regular files with their layouts in pages
//! (`layout_scan`), to look for their objects.

use redb::ReadableTable;
use weft_layout::{InodeId, Layout, ServerId};
use weft_proto::msg::{LAYOUT_SCAN_MAX, OBJ_LIST_MAX};
use weft_proto::{ErrorCode, FileKind, Wire, WireError};

use super::record::InodeRecord;
use super::{MetaStore, ReadTables, StorageResult, COUNTER_ORPHANS};

/// An inode number the namespace does not know.
pub const STATE_UNKNOWN: u8 = 0;
/// A live inode: a file, directory or other, or a removed file still open.
pub const STATE_LIVE: u8 = 1;
/// A removed file whose objects the purger has yet to delete.
pub const STATE_PURGING: u8 = 2;
/// In the precreated pool (its objects are made for a file not created yet).
pub const STATE_PRECREATED: u8 = 3;

fn too_many(what: &str, count: usize, max: usize) -> Result<(), WireError> {
    if count > max {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("{count} inodes in one {what}: at most {max}"),
        ));
    }
    Ok(())
}

/// The state of `inode` in a snapshot or transaction.
fn state_of(
    inode: u64,
    inodes: &impl ReadableTable<u64, &'static [u8]>,
    orphans: &impl ReadableTable<u64, &'static [u8]>,
    precreated: &impl ReadableTable<u64, &'static [u8]>,
) -> Result<u8, WireError> {
    Ok(if inodes.get(inode).storage()?.is_some() {
        STATE_LIVE
    } else if orphans.get(inode).storage()?.is_some() {
        STATE_PURGING
    } else if precreated.get(inode).storage()?.is_some() {
        STATE_PRECREATED
    } else {
        STATE_UNKNOWN
    })
}

impl MetaStore {
    /// Of `inodes`, the regular files with objects outside the cache tier, with their
    /// layouts, in one read (what the manager measures sizes of: `sizes.rs`).
    pub fn file_layouts(&self, inodes: &[InodeId]) -> Result<Vec<(InodeId, Layout)>, WireError> {
        self.read(|t: &ReadTables| {
            let mut found = Vec::with_capacity(inodes.len());
            for &inode in inodes {
                let Some(v) = t.inodes.get(inode.0).storage()? else {
                    continue;
                };
                let record = InodeRecord::decode(v.value()).map_err(|e| {
                    WireError::new(
                        ErrorCode::Internal,
                        format!("inode {inode}: record is corrupt: {e}"),
                    )
                })?;
                if record.kind != FileKind::File || record.cache.uses_tier() {
                    continue;
                }
                if let Some(layout) = record.layout {
                    found.push((inode, layout));
                }
            }
            Ok(found)
        })
    }

    /// The state (`STATE_*`) of each of `inodes`, in order.
    pub fn inode_states(&self, inodes: &[InodeId]) -> Result<Vec<u8>, WireError> {
        too_many("inode state batch", inodes.len(), OBJ_LIST_MAX)?;
        self.read(|t: &ReadTables| {
            inodes
                .iter()
                .map(|i| state_of(i.0, &t.inodes, &t.orphans, &t.precreated))
                .collect()
        })
    }

    /// Records the objects of `inodes` (found on `server`) as orphans for the purger, each only
    /// if its number is unknown to the namespace (checked in the same transaction, so
    /// that nothing a file, the pool or a removal holds is taken). Returns each one's
    /// state as found: `STATE_UNKNOWN` ones were taken.
    pub fn adopt_orphans(&self, server: ServerId, inodes: &[InodeId]) -> Result<Vec<u8>, WireError> {
        too_many("orphan batch", inodes.len(), OBJ_LIST_MAX)?;
        // A number the namespace does not know has no valid object anywhere: the purger
        // removes it from every io server (missing ones are fine), so that the other
        // servers' objects of it are not found again once this entry is gone.
        let mut servers = self
            .cluster
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .io_servers
            .clone();
        if !servers.contains(&server) {
            servers.push(server);
        }
        let layout = Layout {
            stripe_size_bytes: 1 << 20,
            servers,
            replication: Default::default(),
        }
        .to_bytes();
        let inodes = inodes.to_vec();
        self.write(move |tx| {
            let mut states = Vec::with_capacity(inodes.len());
            let mut taken = 0i64;
            for inode in &inodes {
                let state = state_of(inode.0, &tx.inodes, &tx.orphans, &tx.precreated)?;
                if state == STATE_UNKNOWN && inode.0 > InodeId::ROOT.0 {
                    tx.orphans.insert(inode.0, layout.as_slice()).storage()?;
                    taken += 1;
                }
                states.push(state);
            }
            tx.add_counter(COUNTER_ORPHANS, taken)?;
            Ok(states)
        })
    }

    /// Regular files after `after` with their layouts, in inode order, at most `max`
    /// (and `LAYOUT_SCAN_MAX`); `true` if there may be more.
    pub fn layout_scan(&self, after: InodeId, max: u32) -> Result<(Vec<(InodeId, Layout)>, bool), WireError> {
        let max = (max as usize).clamp(1, LAYOUT_SCAN_MAX);
        self.scan_inodes(after, max, |inode, record| {
            let layout = record.layout.filter(|_| record.kind == FileKind::File)?;
            Some((inode, layout))
        })
    }

    /// One page of a walk of the inode table: the inodes after `after`, in inode
    /// order, that `pick` keeps (as what it makes of them), at most `max`; `true` if
    /// there may be more. One read transaction per page, so a walk holds no snapshot
    /// between pages. A record that does not decode fails the page naming its inode (a
    /// walk that skipped it would call a drain or a rebuild done while it is not).
    pub(crate) fn scan_inodes<T>(
        &self,
        after: InodeId,
        max: usize,
        mut pick: impl FnMut(InodeId, InodeRecord) -> Option<T>,
    ) -> Result<(Vec<T>, bool), WireError> {
        self.read(|t: &ReadTables| {
            let mut out = Vec::new();
            for item in t.inodes.range(after.0.saturating_add(1)..).storage()? {
                let (key, value) = item.storage()?;
                let inode = InodeId(key.value());
                let record = InodeRecord::decode(value.value()).map_err(|e| {
                    WireError::new(
                        ErrorCode::Internal,
                        format!("inode {inode} record is corrupt: {e}"),
                    )
                })?;
                let Some(kept) = pick(inode, record) else {
                    continue;
                };
                if out.len() == max {
                    return Ok((out, true));
                }
                out.push(kept);
            }
            Ok((out, false))
        })
    }
}
