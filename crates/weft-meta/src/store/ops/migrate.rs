//! The manager's records of migrations (`weft migrate`, `weft server drain`): the
//! checks before a file's data moves to a new layout, the switch of its layout in one
//! durable transaction, the list of files with a piece on an io server, and the io
//! servers' states (active, draining, drained, removed), kept in the counters table.

use super::super::access::{is_root, permits, MAY_WRITE};
use super::super::record::InodeRecord;
use super::super::{MetaStore, Namespace};
use weft_layout::{InodeId, Layout, ServerId};
use weft_proto::msg::{server_state, STALE_LIST_MAX};
use weft_proto::{Attr, Cred, ErrorCode, FileKind, WireError};

use super::rebuild::StaleFiles;

/// The counter holding io server `server`'s state (absent: active).
fn state_key(server: ServerId) -> String {
    format!("io_server_state.{}", server.0)
}

/// `record`'s layout, if it is a regular file outside the cache tier that `cred` may
/// write.
fn migratable<'r>(cred: &Cred, inode: InodeId, record: &'r InodeRecord) -> Result<&'r Layout, WireError> {
    if record.kind != FileKind::File {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("inode {inode} is not a regular file: only files migrate"),
        ));
    }
    if record.cache.uses_tier() {
        return Err(WireError::new(
            ErrorCode::Unsupported,
            format!(
                "inode {inode} is {} (through the cache tier): such files do not migrate yet",
                record.cache
            ),
        ));
    }
    if !permits(cred, record, MAY_WRITE) {
        return Err(WireError::new(
            ErrorCode::PermissionDenied,
            format!("uid {} may not write inode {inode}", cred.uid),
        ));
    }
    record
        .layout
        .as_ref()
        .ok_or_else(|| WireError::new(ErrorCode::InvalidArgument, format!("inode {inode} has no layout")))
}

impl MetaStore {
    /// The attributes of `inode`, its layout and `temp`'s, if `temp` may take over
    /// `inode`'s data (both regular files outside the cache tier, distinct, that `cred`
    /// may write).
    pub fn migrate_check(
        &self,
        cred: &Cred,
        inode: InodeId,
        temp: InodeId,
    ) -> Result<(Attr, Layout, Layout), WireError> {
        if inode == temp {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!("inode {inode} cannot migrate into itself"),
            ));
        }
        self.read(|tx| {
            let record = tx.inode(inode)?;
            let new = tx.inode(temp)?;
            let old_layout = migratable(cred, inode, &record)?.clone();
            let new_layout = migratable(cred, temp, &new)?.clone();
            Ok((record.attr(inode), old_layout, new_layout))
        })
    }

    /// Gives `inode` the layout of `temp` (whose objects the io servers gave `inode`'s
    /// name), durably, if `inode`'s layout is still `old`. `temp` keeps its record; the
    /// caller removes it. Returns `inode`'s new attributes.
    pub fn switch_layout(
        &self,
        cred: &Cred,
        inode: InodeId,
        temp: InodeId,
        old: &Layout,
    ) -> Result<Attr, WireError> {
        let old = old.clone();
        self.write_durable(move |tx| {
            let mut record = tx.inode(inode)?;
            let new = tx.inode(temp)?;
            let now = migratable(cred, inode, &record)?;
            if *now != old {
                return Err(WireError::new(
                    ErrorCode::Busy,
                    format!("inode {inode}'s layout changed while it migrated"),
                ));
            }
            let layout = migratable(cred, temp, &new)?.clone();
            record.layout = Some(layout);
            tx.put_inode(inode, &record)?;
            Ok(record.attr(inode))
        })
    }

    /// Files after `after` with a piece on io server `server` and their stale pieces,
    /// at most `max` (and `STALE_LIST_MAX`); `true` if there may be more. Root only: it
    /// walks every file.
    pub fn server_files(
        &self,
        cred: &Cred,
        server: ServerId,
        after: InodeId,
        max: u32,
    ) -> Result<(StaleFiles, bool), WireError> {
        if !is_root(cred) {
            return Err(WireError::new(
                ErrorCode::PermissionDenied,
                "only root may list the files of an io server",
            ));
        }
        let max = (max as usize).clamp(1, STALE_LIST_MAX);
        self.scan_inodes(after, max, |inode, record| {
            let layout = record.layout.filter(|l| l.piece_of(server).is_some())?;
            Some((inode, layout.replication.stale))
        })
    }

    /// The state (`server_state`) of each of `servers`.
    pub fn server_states(&self, servers: &[ServerId]) -> Result<Vec<(ServerId, u8)>, WireError> {
        self.read(|tx| {
            servers
                .iter()
                .map(|s| Ok((*s, tx.counter(&state_key(*s))? as u8)))
                .collect()
        })
    }

    /// Records io server `server`'s state, durably. Root only; the caller checks the
    /// transition.
    pub fn set_server_state(&self, cred: &Cred, server: ServerId, state: u8) -> Result<(), WireError> {
        if !is_root(cred) {
            return Err(WireError::new(
                ErrorCode::PermissionDenied,
                "only root may change an io server's state",
            ));
        }
        if state > server_state::REMOVED {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "io server state {state}: states are 0 to {}",
                    server_state::REMOVED
                ),
            ));
        }
        self.write_durable(move |tx| tx.set_counter(&state_key(server), u64::from(state)))
    }
}
