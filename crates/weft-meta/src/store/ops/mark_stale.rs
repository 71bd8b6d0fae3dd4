//! `mark_stale`: a replicated file's piece on an io server a writer found down.

use super::super::access::{permits, MAY_WRITE};
use super::super::{MetaStore, Namespace};
use weft_layout::{InodeId, ServerId};
use weft_proto::{Attr, Cred, ErrorCode, WireError};

impl MetaStore {
    /// Records `server`'s piece of replicated file `inode` as stale (it missed writes),
    /// in the file's layout, so that every client opening the file afterwards neither
    /// reads it nor writes it until it is rebuilt. Needs write permission on the file
    /// (a writer asks). Marking an already stale piece changes only its generation. Refused (`Io`)
    /// when the piece is the last fresh copy of its slot: the writer then has nowhere
    /// left to write, and its write fails instead. Durable before it is answered,
    /// whatever the commit interval: the writer acknowledges its write having reached
    /// only the other copies, so a mark lost in a manager crash would let the stale copy
    /// pass for fresh and serve its old bytes. Marks are rare (a server down), so the
    /// flush costs nothing on the usual path.
    pub fn mark_stale(&self, cred: &Cred, inode: InodeId, server: ServerId) -> Result<Attr, WireError> {
        let generations = &self.stale_generations;
        self.write_durable(|tx| {
            let mut record = tx.inode(inode)?;
            if !permits(cred, &record, MAY_WRITE) {
                return Err(WireError::new(
                    ErrorCode::PermissionDenied,
                    format!("uid {} may not write inode {inode}", cred.uid),
                ));
            }
            let Some(layout) = record.layout.as_mut() else {
                return Err(WireError::new(
                    ErrorCode::InvalidArgument,
                    format!("inode {inode} has no layout"),
                ));
            };
            let Some((slot, _)) = layout.piece_of(server) else {
                return Err(WireError::new(
                    ErrorCode::InvalidArgument,
                    format!("io server {server} holds no piece of inode {inode}"),
                ));
            };
            // Every mark moves the piece's generation, also of a piece already stale:
            // a rebuild copying it meanwhile then does not clear it (`rebuild.rs`).
            generations.bump(inode, server);
            if layout.is_stale(server) {
                return Ok(record.attr(inode));
            }
            let fresh = layout
                .slot_servers(slot)
                .into_iter()
                .filter(|s| *s != server && !layout.is_stale(*s))
                .count();
            if fresh == 0 {
                return Err(WireError::new(
                    ErrorCode::Io,
                    format!("io server {server} holds the last fresh copy of its stripes of inode {inode}"),
                ));
            }
            layout.replication.stale.push(server);
            tx.put_inode(inode, &record)?;
            Ok(record.attr(inode))
        })
    }
}
