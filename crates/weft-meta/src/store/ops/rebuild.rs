//! The manager's side of the rebuild of replicated files' stale pieces (issue 33):
//! each piece's generation, moved by every `mark_stale`, so that a stale mark is
//! cleared only if no writer marked the piece again while it was being copied; the
//! clearing; and the list of files with stale pieces a rebuild walks.

use super::super::access::{is_root, permits, MAY_WRITE};
use super::super::{MetaStore, Namespace};
use std::collections::HashMap;
use std::sync::Mutex;
use weft_layout::{InodeId, Layout, ServerId};
use weft_proto::msg::STALE_LIST_MAX;
use weft_proto::{Attr, Cred, ErrorCode, WireError};

use super::super::record::InodeRecord;

/// Replicated files and their stale pieces' servers, in inode order.
pub type StaleFiles = Vec<(InodeId, Vec<ServerId>)>;

/// Most pieces whose generation is kept apart; past it every generation is forgotten
/// and reads as the floor (see `StaleGenerations`).
const GENERATIONS_MAX: usize = 65_536;

/// Pieces' generations, in memory. A generation is the value of a counter at the
/// piece's last `mark_stale`; a piece not in the map reads as `floor`, which is raised
/// past every value handed out whenever the map is emptied (full) — a rebuild that
/// began before then fails to clear and starts again, never the other way round. The
/// counter starts at the clock in nanoseconds, so that a rebuild that began before a
/// manager restart never clears after it.
pub(crate) struct StaleGenerations {
    inner: Mutex<Generations>,
}

struct Generations {
    next: u64,
    floor: u64,
    map: HashMap<(u64, u32), u64>,
}

impl Default for StaleGenerations {
    fn default() -> StaleGenerations {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        StaleGenerations {
            inner: Mutex::new(Generations {
                next: seed,
                floor: seed,
                map: HashMap::new(),
            }),
        }
    }
}

impl StaleGenerations {
    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `server`'s piece of `inode` was marked (again).
    pub(crate) fn bump(&self, inode: InodeId, server: ServerId) {
        let mut g = self.lock();
        g.next += 1;
        let key = (inode.0, server.0);
        if g.map.len() >= GENERATIONS_MAX && !g.map.contains_key(&key) {
            g.map.clear();
            g.floor = g.next;
        }
        let next = g.next;
        g.map.insert(key, next);
    }

    pub(crate) fn get(&self, inode: InodeId, server: ServerId) -> u64 {
        let g = self.lock();
        g.map.get(&(inode.0, server.0)).copied().unwrap_or(g.floor)
    }
}

/// The layout of replicated file `record` and the slot of `server`'s piece, after
/// checking write permission.
fn piece<'r>(
    cred: &Cred,
    inode: InodeId,
    server: ServerId,
    record: &'r mut InodeRecord,
) -> Result<&'r mut Layout, WireError> {
    if !permits(cred, record, MAY_WRITE) {
        return Err(WireError::new(
            ErrorCode::PermissionDenied,
            format!("uid {} may not write inode {inode}", cred.uid),
        ));
    }
    match record.layout.as_mut() {
        Some(layout) if layout.piece_of(server).is_some() && layout.replica_count() > 1 => Ok(layout),
        _ => Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("io server {server} holds no copy of replicated inode {inode}"),
        )),
    }
}

impl MetaStore {
    /// The generation of `server`'s piece of `inode` (see `StaleGenerations`).
    pub fn stale_generation(&self, cred: &Cred, inode: InodeId, server: ServerId) -> Result<u64, WireError> {
        let mut record = self.read(|tx| tx.inode(inode))?;
        piece(cred, inode, server, &mut record)?;
        Ok(self.stale_generations.get(inode, server))
    }

    /// Clears the stale mark of `server`'s piece of `inode` if its generation is still
    /// `generation`; `Busy` if a writer marked it since. A piece not marked stale is
    /// answered as it is.
    pub fn clear_stale(
        &self,
        cred: &Cred,
        inode: InodeId,
        server: ServerId,
        generation: u64,
    ) -> Result<Attr, WireError> {
        let generations = &self.stale_generations;
        self.write(move |tx| {
            let now = generations.get(inode, server);
            let mut record = tx.inode(inode)?;
            let layout = piece(cred, inode, server, &mut record)?;
            // Checked in the transaction: a `mark_stale` is a transaction too, so none
            // falls between this check and the clearing.
            if now != generation {
                return Err(WireError::new(
                    ErrorCode::Busy,
                    format!("io server {server}'s piece of inode {inode} was marked stale again while it was rebuilt"),
                ));
            }
            if layout.is_stale(server) {
                layout.replication.stale.retain(|s| *s != server);
                tx.put_inode(inode, &record)?;
            }
            Ok(record.attr(inode))
        })
    }

    /// Replicated files after `after` with their stale pieces (see `Request::StaleList`),
    /// at most `max` (and `STALE_LIST_MAX`); `true` if there may be more. Root only: it
    /// walks every file.
    pub fn stale_list(
        &self,
        cred: &Cred,
        server: Option<ServerId>,
        all: bool,
        after: InodeId,
        max: u32,
    ) -> Result<(StaleFiles, bool), WireError> {
        if !is_root(cred) {
            return Err(WireError::new(
                ErrorCode::PermissionDenied,
                "only root may list the stale pieces of every file",
            ));
        }
        let max = (max as usize).clamp(1, STALE_LIST_MAX);
        self.scan_inodes(after, max, |inode, record| {
            let layout = record.layout.filter(|l| l.replica_count() > 1)?;
            if server.is_some_and(|s| layout.piece_of(s).is_none()) {
                return None;
            }
            if !all && layout.replication.stale.is_empty() {
                return None;
            }
            Some((inode, layout.replication.stale))
        })
    }
}
