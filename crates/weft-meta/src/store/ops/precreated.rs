//! The precreated table: inode numbers for which the manager is making, or has made,
//! empty objects on a set of io servers, and that no file uses yet. A number is recorded
//! here before its objects are made (so a crash never leaks them unrecorded), and enters
//! the manager's in-memory pool only once they are durable; a create takes one from the
//! pool and commits its name and the number's removal from this table together. At open
//! the table is emptied into the orphans (the in-memory pool is gone with its process),
//! and the purger removes whatever objects they have.

use super::super::{MetaStore, Namespace, StorageResult, WriteTables, COUNTER_ORPHANS};
use redb::ReadableTable;
use weft_layout::{InodeId, Layout};
use weft_proto::{ErrorCode, Wire, WireError};

impl MetaStore {
    /// Fresh inode numbers, never handed out before and never to be again.
    pub fn allocate_inodes(&self, count: usize) -> Result<Vec<InodeId>, WireError> {
        (0..count).map(|_| self.allocate_inode()).collect()
    }

    /// Records `inodes` as precreated, before their objects are made on the servers of
    /// `layout` (whose striping fields are not used). Refused for a number in use.
    pub fn add_precreated(&self, inodes: &[InodeId], layout: &Layout) -> Result<(), WireError> {
        let bytes = layout.to_bytes();
        // Durable before the objects are made: a crash never leaks them unrecorded.
        self.write_durable(|tx| {
            for &inode in inodes {
                if tx.find_inode(inode)?.is_some() || tx.precreated.get(inode.0).storage()?.is_some() {
                    return Err(WireError::new(
                        ErrorCode::Internal,
                        format!("inode {inode} offered as precreated is already in use"),
                    ));
                }
            }
            for &inode in inodes {
                tx.precreated.insert(inode.0, bytes.as_slice()).storage()?;
            }
            Ok(())
        })
    }

    /// Hands precreated `inodes` to the purger (their objects could not all be made).
    /// `made`: the servers that made them; a server that refused made none and may hold
    /// an object of that number that was never made for this pool, which the purger must
    /// leave alone.
    pub fn orphan_precreated(&self, inodes: &[InodeId], made: &Layout) -> Result<u64, WireError> {
        // No server made any: nothing to purge, the numbers are simply dropped.
        let made = match made.servers.is_empty() {
            true => Vec::new(),
            false => made.to_bytes(),
        };
        self.write(|tx| tx.precreated_to_orphans(Some((inodes, &made))))
    }

    /// How many numbers are precreated and unused.
    pub fn precreated_count(&self) -> Result<u64, WireError> {
        use redb::ReadableTableMetadata;
        self.read(|tables| tables.precreated.len().storage())
    }
}

impl WriteTables<'_> {
    /// Takes precreated `inode` for a file being created in this transaction.
    pub(in crate::store) fn take_precreated(&mut self, inode: InodeId) -> Result<(), WireError> {
        match self.precreated.remove(inode.0).storage()? {
            Some(_) => Ok(()),
            None => Err(WireError::new(
                ErrorCode::Internal,
                format!("inode {inode} is not precreated (its objects may not exist)"),
            )),
        }
    }

    /// A replayed create's inode number (see `PendingCreate::use_again`) leaves the
    /// precreated table and the orphans, whichever holds it: its objects stay.
    pub(in crate::store) fn take_back(&mut self, inode: InodeId) -> Result<(), WireError> {
        self.precreated.remove(inode.0).storage()?;
        if self.orphans.remove(inode.0).storage()?.is_some() {
            self.add_counter(COUNTER_ORPHANS, -1)?;
        }
        Ok(())
    }

    /// Moves precreated numbers to the orphans: their objects are purged. `only`: just
    /// these numbers, with the encoded layout of the servers that made their objects
    /// (else all, with the layouts recorded).
    pub(in crate::store) fn precreated_to_orphans(
        &mut self,
        only: Option<(&[InodeId], &[u8])>,
    ) -> Result<u64, WireError> {
        let all: Vec<(u64, Vec<u8>)> = match only {
            None => self
                .precreated
                .iter()
                .storage()?
                .map(|item| item.map(|(k, v)| (k.value(), v.value().to_vec())))
                .collect::<Result<_, _>>()
                .storage()?,
            Some((inodes, made)) => {
                let mut found = Vec::new();
                for inode in inodes {
                    if self.precreated.get(inode.0).storage()?.is_some() {
                        found.push((inode.0, made.to_vec()));
                    }
                }
                found
            }
        };
        let mut moved = 0;
        for (inode, layout) in &all {
            if layout.is_empty() {
                self.precreated.remove(*inode).storage()?;
                continue;
            }
            // Checked so that a damaged record is found here rather than by the purger.
            Layout::from_bytes(layout).map_err(|e| {
                WireError::new(
                    ErrorCode::Internal,
                    format!("precreated inode {inode} layout is corrupt: {e}"),
                )
            })?;
            self.precreated.remove(*inode).storage()?;
            if self
                .orphans
                .insert(*inode, layout.as_slice())
                .storage()?
                .is_none()
            {
                moved += 1;
            }
        }
        self.add_counter(COUNTER_ORPHANS, moved as i64)?;
        Ok(moved)
    }
}
