//! The manager's records of migrations (`weft migrate`, `weft server drain`): the
//! checks before a file's data moves to a new layout, the switch of its layout in one
//! durable transaction, the list of files with a piece on an io server, and the io
//! servers' states (active, draining, drained, removed), kept in the counters table.

use super::super::access::{is_root, permits, MAY_WRITE};
use super::super::record::InodeRecord;
use super::super::{MetaStore, Namespace};
use redb::ReadableTable;
use weft_layout::{InodeId, Layout, ServerId};
use weft_proto::msg::{server_state, STALE_LIST_MAX};
use weft_proto::{Attr, Cred, ErrorCode, FileKind, Striping, WireError};

use super::super::StorageResult;
use super::rebuild::StaleFiles;

/// One io server of a migration's switch: its id, whether it holds a piece of the old
/// layout (frozen, its old object set aside at the switch) and its striping in the new
/// layout (`None`: it holds no piece of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchServer {
    pub server: ServerId,
    pub old: bool,
    pub new: Option<Striping>,
}

/// A migration's switch, recorded durably before the first io server renames an object
/// and removed once every io server has finished its part: undone everywhere while not
/// `committed` (the layout switch did not commit), the set-aside objects dropped once
/// it is. A manager restart, or an io server unreachable at the time, leaves it for the
/// purger's rounds (`MetaService::settle_switches`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingSwitch {
    pub temp: InodeId,
    pub committed: bool,
    pub servers: Vec<SwitchServer>,
}

/// Bytes of one server in an encoded `PendingSwitch`.
const SWITCH_SERVER_BYTES: usize = 4 + 1 + 8 + 4 + 4;

impl PendingSwitch {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(9 + self.servers.len() * SWITCH_SERVER_BYTES);
        out.extend_from_slice(&self.temp.0.to_le_bytes());
        out.push(self.committed as u8);
        for s in &self.servers {
            out.extend_from_slice(&s.server.0.to_le_bytes());
            let striping = s.new.unwrap_or(Striping {
                stripe_size_bytes: 0,
                stripe_count: 0,
                server_index: 0,
            });
            out.push(s.old as u8 | (s.new.is_some() as u8) << 1);
            out.extend_from_slice(&striping.stripe_size_bytes.to_le_bytes());
            out.extend_from_slice(&striping.stripe_count.to_le_bytes());
            out.extend_from_slice(&striping.server_index.to_le_bytes());
        }
        out
    }

    fn decode(inode: InodeId, bytes: &[u8]) -> Result<PendingSwitch, WireError> {
        let corrupt = || {
            WireError::new(
                ErrorCode::Internal,
                format!("the pending switch of inode {inode} is corrupt"),
            )
        };
        if bytes.len() < 9 || !(bytes.len() - 9).is_multiple_of(SWITCH_SERVER_BYTES) || bytes[8] > 1 {
            return Err(corrupt());
        }
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let servers = bytes[9..]
            .chunks_exact(SWITCH_SERVER_BYTES)
            .enumerate()
            .map(|(i, _)| {
                let at = 9 + i * SWITCH_SERVER_BYTES;
                let flags = bytes[at + 4];
                SwitchServer {
                    server: ServerId(u32_at(at)),
                    old: flags & 1 != 0,
                    new: (flags & 2 != 0).then(|| Striping {
                        stripe_size_bytes: u64_at(at + 5),
                        stripe_count: u32_at(at + 13),
                        server_index: u32_at(at + 17),
                    }),
                }
            })
            .collect();
        Ok(PendingSwitch {
            temp: InodeId(u64_at(0)),
            committed: bytes[8] == 1,
            servers,
        })
    }
}

/// The counter holding io server `server`'s state (absent: active).
fn state_key(server: ServerId) -> String {
    format!("io_server_state.{}", server.0)
}

/// `record`'s layout, if it is a regular file that `cred` may write (and, unless
/// `cached_ok`, outside the cache tier: a migration's new file is never cached).
fn migratable<'r>(
    cred: &Cred,
    inode: InodeId,
    record: &'r InodeRecord,
    cached_ok: bool,
) -> Result<&'r Layout, WireError> {
    if record.kind != FileKind::File {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("inode {inode} is not a regular file: only files migrate"),
        ));
    }
    if record.cache.uses_tier() && !cached_ok {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!(
                "inode {inode} is {} (through the cache tier): a migration's new file must not be",
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

/// A new migration of `inode` while the switch of an earlier one is unfinished.
pub fn pending_error(inode: InodeId) -> WireError {
    WireError::new(
        ErrorCode::Busy,
        format!("an earlier migration of inode {inode} is still being finished at its io servers (one was unreachable); the manager retries every purge round: try again later"),
    )
}

impl MetaStore {
    /// The attributes of `inode`, its layout and `temp`'s, if `temp` may take over
    /// `inode`'s data (both regular files, distinct, that `cred` may write; `temp`
    /// outside the cache tier).
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
            let old_layout = migratable(cred, inode, &record, true)?.clone();
            let new_layout = migratable(cred, temp, &new, false)?.clone();
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
            let now = migratable(cred, inode, &record, true)?;
            if *now != old {
                return Err(WireError::new(
                    ErrorCode::Busy,
                    format!("inode {inode}'s layout changed while it migrated"),
                ));
            }
            let layout = migratable(cred, temp, &new, false)?.clone();
            record.layout = Some(layout);
            tx.put_inode(inode, &record)?;
            // Committed with the layout: from now on the set-aside objects are dropped,
            // never put back.
            let pending = tx.switches.get(inode.0).storage()?.map(|v| v.value().to_vec());
            if let Some(bytes) = pending {
                let mut switch = PendingSwitch::decode(inode, &bytes)?;
                switch.committed = true;
                tx.switches
                    .insert(inode.0, switch.encode().as_slice())
                    .storage()?;
            }
            Ok(record.attr(inode))
        })
    }

    /// Records `switch` of `inode`'s migration, durably, before any io server renames
    /// an object. Refused while an earlier one of `inode` is pending.
    pub fn begin_switch(&self, inode: InodeId, switch: &PendingSwitch) -> Result<(), WireError> {
        let bytes = switch.encode();
        self.write_durable(move |tx| {
            if tx.switches.get(inode.0).storage()?.is_some() {
                return Err(pending_error(inode));
            }
            tx.switches.insert(inode.0, bytes.as_slice()).storage()?;
            Ok(())
        })
    }

    /// The pending switch of `inode`, if any.
    pub fn pending_switch(&self, inode: InodeId) -> Result<Option<PendingSwitch>, WireError> {
        self.read(|tx| match tx.switches.get(inode.0).storage()? {
            Some(v) => PendingSwitch::decode(inode, v.value()).map(Some),
            None => Ok(None),
        })
    }

    /// Up to `max` pending switches, by inode.
    pub fn pending_switches(&self, max: usize) -> Result<Vec<(InodeId, PendingSwitch)>, WireError> {
        self.read(|tx| {
            let mut out = Vec::new();
            for entry in tx.switches.iter().storage()?.take(max) {
                let (k, v) = entry.storage()?;
                let inode = InodeId(k.value());
                out.push((inode, PendingSwitch::decode(inode, v.value())?));
            }
            Ok(out)
        })
    }

    /// Forgets `inode`'s pending switch: every io server finished its part (not made
    /// durable on its own: finishing again after a crash does nothing).
    pub fn end_switch(&self, inode: InodeId) -> Result<(), WireError> {
        self.write(move |tx| {
            tx.switches.remove(inode.0).storage()?;
            Ok(())
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
