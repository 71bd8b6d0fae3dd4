//! Migrations of objects to a new layout (`weft migrate`, `weft server drain`), the io
//! side: the freeze that keeps writes out while a file's bytes are copied, and the
//! fence that keeps requests with the old striping away from an object that took the
//! new layout's bytes.
//!
//! 1. `FREEZE` (the manager, for the migrating client): every change of the object
//!    (write, view write, truncate, allocation, rebuild write) is refused `Busy` until
//!    `THAW` or until the lease (`FREEZE_LEASE`) lapses unrenewed. The freeze is ordered
//!    after every change that arrived before it (`Handler::changes`), so none is still
//!    being written once it is answered. Each freeze has an epoch, kept while renewals
//!    come in time: a lapse shows as another epoch at `CHECK`, and the manager then
//!    refuses to commit (writes may have landed after the copy read those bytes).
//! 2. `ADOPT`: the object is set aside (`<inode>.migrated`) and the new layout's object
//!    (the temporary file's) takes its name; from then on requests naming the inode
//!    with any other striping than the new one are refused `Stale` (the fence), so a
//!    handle opened before the switch never reads or writes the new bytes with the old
//!    striping. `UNDO` puts both back; `DROP` removes the set-aside object.
//!
//! Bounded and in memory: at most `FROZEN_MAX` freezes (more are refused `Busy`) and
//! `FENCES_MAX` fences (the oldest go first). A restarted io server forgets both: a
//! freeze lapses (the manager's `CHECK` sees it), a fence is lost (see the guide's
//! "Migrating files").

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use weft_layout::InodeId;
use weft_proto::msg::{migrate_step, Request};
use weft_proto::{ErrorCode, Striping, WireError};

/// How long a freeze lasts unless renewed.
pub const FREEZE_LEASE: Duration = Duration::from_secs(30);
/// Most objects frozen at once.
pub const FROZEN_MAX: usize = 4096;
/// Most fences remembered.
pub const FENCES_MAX: usize = 65_536;

#[derive(Default)]
struct Table {
    /// Frozen objects: the freeze's epoch and its end.
    frozen: HashMap<InodeId, (u64, Instant)>,
    /// Migrated objects: the only striping served (`None`: none, the server has no piece
    /// of the new layout).
    fences: HashMap<InodeId, Option<Striping>>,
    /// Fences in the order they were set, for eviction.
    order: VecDeque<InodeId>,
    /// The last epoch handed out.
    epoch: u64,
}

/// The freezes and fences of this server (see the module's text).
#[derive(Default)]
pub(crate) struct Migrations {
    table: Mutex<Table>,
    /// Entries in both maps: 0 lets `check` skip the lock (the common case).
    entries: AtomicUsize,
}

impl Migrations {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn recount(&self, t: &Table) {
        self.entries
            .store(t.frozen.len() + t.fences.len(), Ordering::SeqCst);
    }

    /// Freezes `inode`'s object, or renews its freeze: its epoch (a new one after a lapse).
    pub(crate) fn freeze(&self, inode: InodeId) -> Result<u64, WireError> {
        let mut t = self.table();
        let now = Instant::now();
        t.frozen.retain(|_, (_, until)| *until > now);
        let epoch = match t.frozen.get(&inode) {
            Some((epoch, _)) => *epoch,
            None if t.frozen.len() >= FROZEN_MAX => {
                return Err(WireError::new(
                    ErrorCode::Busy,
                    format!("{FROZEN_MAX} files are being migrated on this io server already"),
                ))
            }
            None => {
                t.epoch += 1;
                t.epoch
            }
        };
        t.frozen.insert(inode, (epoch, now + FREEZE_LEASE));
        self.recount(&t);
        Ok(epoch)
    }

    pub(crate) fn thaw(&self, inode: InodeId) {
        let mut t = self.table();
        t.frozen.remove(&inode);
        self.recount(&t);
    }

    /// The epoch of `inode`'s freeze now (0: not frozen, or lapsed).
    pub(crate) fn epoch(&self, inode: InodeId) -> u64 {
        let t = self.table();
        match t.frozen.get(&inode) {
            Some((epoch, until)) if *until > Instant::now() => *epoch,
            _ => 0,
        }
    }

    /// From now on only `striping` is served for `inode` (`None`: nothing).
    pub(crate) fn fence(&self, inode: InodeId, striping: Option<Striping>) {
        let mut t = self.table();
        if t.fences.insert(inode, striping).is_none() {
            t.order.push_back(inode);
        }
        while t.fences.len() > FENCES_MAX {
            match t.order.pop_front() {
                Some(old) => {
                    t.fences.remove(&old);
                }
                None => break,
            }
        }
        self.recount(&t);
    }

    pub(crate) fn unfence(&self, inode: InodeId) {
        let mut t = self.table();
        if t.fences.remove(&inode).is_some() {
            t.order.retain(|i| *i != inode);
        }
        self.recount(&t);
    }

    /// The objects and stripings `request` reads with, when a fence may concern it:
    /// checked again once it is served (`check_again`). A fence is set before its
    /// object is replaced, so a read that passes the check after it was served read
    /// the old object, never the new one with the old striping.
    pub(crate) fn read_key(&self, request: &Request) -> Option<Vec<(InodeId, Striping)>> {
        if self.entries.load(Ordering::SeqCst) == 0 {
            return None;
        }
        match request {
            Request::Read { inode, striping, .. } | Request::ReadView { inode, striping, .. } => {
                Some(vec![(*inode, *striping)])
            }
            Request::Extents { items } | Request::ObjStat { items } | Request::ObjStamp { items } => {
                Some(items.clone())
            }
            _ => None,
        }
    }

    /// See `read_key`.
    pub(crate) fn check_again(&self, key: Option<Vec<(InodeId, Striping)>>) -> Result<(), WireError> {
        key.unwrap_or_default()
            .iter()
            .try_for_each(|(inode, striping)| self.check_one(*inode, striping, false))
    }

    /// Whether `request` may be served: a change of a frozen object is `Busy`, a
    /// request with another striping than a migrated object's is `Stale`.
    pub(crate) fn check(&self, request: &Request) -> Result<(), WireError> {
        if self.entries.load(Ordering::SeqCst) == 0 {
            return Ok(());
        }
        let (inode, striping, change) = match request {
            Request::Read { inode, striping, .. } | Request::ReadView { inode, striping, .. } => {
                (*inode, striping, false)
            }
            Request::RebuildStamp { inode, striping, .. } => (*inode, striping, false),
            Request::Write { inode, striping, .. }
            | Request::WriteView { inode, striping, .. }
            | Request::Truncate { inode, striping, .. }
            | Request::Allocate { inode, striping, .. }
            | Request::RebuildWrite { inode, striping, .. } => (*inode, striping, true),
            Request::Extents { items } | Request::ObjStat { items } | Request::ObjStamp { items } => {
                return items
                    .iter()
                    .try_for_each(|(inode, striping)| self.check_one(*inode, striping, false));
            }
            _ => return Ok(()),
        };
        self.check_one(inode, striping, change)
    }

    fn check_one(&self, inode: InodeId, striping: &Striping, change: bool) -> Result<(), WireError> {
        let t = self.table();
        if let Some(allowed) = t.fences.get(&inode) {
            if allowed.as_ref() != Some(striping) {
                return Err(WireError::new(
                    ErrorCode::Stale,
                    format!("inode {inode} was migrated to a new layout: open the file again"),
                ));
            }
        }
        if change {
            if let Some((_, until)) = t.frozen.get(&inode) {
                if *until > Instant::now() {
                    return Err(WireError::new(
                        ErrorCode::Busy,
                        format!("inode {inode} {}: its writes wait", migrate_step::FROZEN_MARK),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_proto::Range;

    fn striping(index: u32) -> Striping {
        Striping {
            stripe_size_bytes: 65_536,
            stripe_count: 2,
            server_index: index,
        }
    }

    fn write(inode: u64, index: u32) -> Request {
        Request::Write {
            inode: InodeId(inode),
            striping: striping(index),
            ranges: vec![Range { offset: 0, len: 1 }],
        }
    }

    fn read(inode: u64, index: u32) -> Request {
        Request::Read {
            inode: InodeId(inode),
            striping: striping(index),
            ranges: vec![Range { offset: 0, len: 1 }],
        }
    }

    #[test]
    fn a_freeze_refuses_changes_of_its_object_only_and_keeps_its_epoch_when_renewed() {
        let m = Migrations::default();
        let epoch = m.freeze(InodeId(5)).unwrap();
        assert_eq!(m.check(&write(5, 0)).unwrap_err().code, ErrorCode::Busy);
        m.check(&read(5, 0)).unwrap();
        m.check(&write(6, 0)).unwrap();
        assert_eq!(m.freeze(InodeId(5)).unwrap(), epoch);
        assert_eq!(m.epoch(InodeId(5)), epoch);
        m.thaw(InodeId(5));
        m.check(&write(5, 0)).unwrap();
        assert_eq!(m.epoch(InodeId(5)), 0);
        assert_ne!(m.freeze(InodeId(5)).unwrap(), epoch);
    }

    #[test]
    fn a_fence_refuses_every_other_striping() {
        let m = Migrations::default();
        m.fence(InodeId(5), Some(striping(1)));
        m.check(&read(5, 1)).unwrap();
        m.check(&write(5, 1)).unwrap();
        assert_eq!(m.check(&read(5, 0)).unwrap_err().code, ErrorCode::Stale);
        let extents = Request::Extents {
            items: vec![(InodeId(4), striping(0)), (InodeId(5), striping(0))],
        };
        assert_eq!(m.check(&extents).unwrap_err().code, ErrorCode::Stale);
        m.fence(InodeId(7), None);
        assert_eq!(m.check(&read(7, 1)).unwrap_err().code, ErrorCode::Stale);
        m.unfence(InodeId(5));
        m.check(&read(5, 0)).unwrap();
    }
}
