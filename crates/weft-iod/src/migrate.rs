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
//! Bounded: at most `FROZEN_MAX` freezes and `FENCES_MAX` fences (more are refused
//! `Busy`: the migration is then undone, nothing switched). Freezes are in memory only:
//! a restarted io server forgets them, so they lapse (the manager's `CHECK` sees it).
//! Fences are kept across restarts in the data directory's fence log (`FenceLog`):
//! each is written and made durable before its objects are renamed, and goes when the
//! migration is undone or the object removed, so a handle opened before a migration
//! never reads the new bytes with the old striping, however long it stays open and
//! however often the server restarts.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
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
/// Most fences an io server holds (a fence lasts as long as its object: each migrated
/// file with a piece here, or that had one, holds one; about 50 bytes of memory each).
pub const FENCES_MAX: usize = 1 << 20;
/// The fence log's name in the data directory.
pub const FENCE_LOG: &str = "fences";

#[derive(Default)]
struct Table {
    /// Frozen objects: the freeze's epoch and its end.
    frozen: HashMap<InodeId, (u64, Instant)>,
    /// Migrated objects: the only striping served (`None`: none, the server has no piece
    /// of the new layout).
    fences: HashMap<InodeId, Option<Striping>>,
    /// The last epoch handed out.
    epoch: u64,
}

/// The freezes and fences of this server (see the module's text).
#[derive(Default)]
pub(crate) struct Migrations {
    table: Mutex<Table>,
    /// Entries in both maps: 0 lets `check` skip the lock (the common case).
    entries: AtomicUsize,
    /// Where fences outlive a restart (`None`: in memory only, unit tests).
    log: Option<Mutex<FenceLog>>,
}

impl Migrations {
    /// The migrations of the io server with data directory `data_dir`: no freeze, and
    /// the fences of its fence log.
    pub(crate) fn open(data_dir: &Path) -> io::Result<Migrations> {
        let (log, fences) = FenceLog::open(&data_dir.join(FENCE_LOG))?;
        let m = Migrations {
            table: Mutex::new(Table {
                fences,
                ..Default::default()
            }),
            entries: AtomicUsize::new(0),
            log: Some(Mutex::new(log)),
        };
        m.recount(&m.table());
        Ok(m)
    }

    /// Fences held now.
    #[cfg(test)]
    pub(crate) fn fences(&self) -> usize {
        self.table().fences.len()
    }

    /// Whether `inode` is fenced (a migration adopted objects here and was not undone).
    pub(crate) fn fenced(&self, inode: InodeId) -> bool {
        self.table().fences.contains_key(&inode)
    }

    fn log(&self, inode: InodeId, fence: Option<Option<Striping>>, durable: bool) -> Result<(), WireError> {
        let Some(log) = &self.log else {
            return Ok(());
        };
        let live = self.table().fences.len();
        log.lock()
            .unwrap_or_else(|p| p.into_inner())
            .append(inode, fence, durable, live)
            .map_err(|e| {
                WireError::new(
                    ErrorCode::Io,
                    format!("recording the migration fence of inode {inode}: {e}"),
                )
            })
    }
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

    /// From now on only `striping` is served for `inode` (`None`: nothing), durably:
    /// on `Ok` the fence is in the log and outlives a crash.
    pub(crate) fn fence(&self, inode: InodeId, striping: Option<Striping>) -> Result<(), WireError> {
        {
            let t = self.table();
            if t.fences.len() >= FENCES_MAX && !t.fences.contains_key(&inode) {
                return Err(WireError::new(
                    ErrorCode::Busy,
                    format!(
                        "this io server holds fences for {FENCES_MAX} migrated files already (one per migrated file with a piece here, until it is removed)"
                    ),
                ));
            }
        }
        self.log(inode, Some(striping), true)?;
        let mut t = self.table();
        t.fences.insert(inode, striping);
        self.recount(&t);
        Ok(())
    }

    /// `inode`'s fence goes (its migration was undone, durably when `durable`, or its
    /// object removed).
    pub(crate) fn unfence(&self, inode: InodeId, durable: bool) -> Result<(), WireError> {
        let had = {
            let mut t = self.table();
            let had = t.fences.remove(&inode).is_some();
            self.recount(&t);
            had
        };
        if had {
            self.log(inode, None, durable)?;
        }
        Ok(())
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

/// Bytes of one fence log record: inode (8), kind (1: 0 a fence removed, 1 a fence
/// serving nothing, 2 one serving a striping), a mark (1, `RECORD_MARK`), 2 spare, the
/// stripe count (4), the stripe size (8), the server index (4), 4 spare; little-endian.
const RECORD_BYTES: usize = 32;
const RECORD_MARK: u8 = 0xf5;
/// Records in the log past which it is rewritten with the live fences only (and past
/// twice the live count).
const COMPACT_AT: usize = 4096;

/// The fence log: an append-only file of records, read at start (a torn last record,
/// from a crash mid-append, is dropped) and rewritten with the live fences at start and
/// whenever it holds more than twice as many records as there are fences.
pub(crate) struct FenceLog {
    path: PathBuf,
    file: File,
    records: usize,
}

impl FenceLog {
    fn open(path: &Path) -> io::Result<(FenceLog, HashMap<InodeId, Option<Striping>>)> {
        let mut fences = HashMap::new();
        match File::open(path) {
            Ok(mut file) => {
                let mut bytes = Vec::new();
                file.read_to_end(&mut bytes)?;
                for (n, record) in bytes.chunks_exact(RECORD_BYTES).enumerate() {
                    let (inode, fence) = decode(record).ok_or_else(|| {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "{}: record {n} is corrupt (not written by weftd); the fences of migrated files cannot be trusted",
                                path.display()
                            ),
                        )
                    })?;
                    match fence {
                        Some(f) => fences.insert(inode, f),
                        None => fences.remove(&inode),
                    };
                }
                if fences.len() > FENCES_MAX {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{}: more than {FENCES_MAX} fences", path.display()),
                    ));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let log = FenceLog::rewrite(path, &fences)?;
        Ok((log, fences))
    }

    /// Writes `fences` to a new log beside `path` and puts it in `path`'s place, durably.
    fn rewrite(path: &Path, fences: &HashMap<InodeId, Option<Striping>>) -> io::Result<FenceLog> {
        let fresh = path.with_extension("new");
        let mut bytes = Vec::with_capacity(fences.len() * RECORD_BYTES);
        for (inode, fence) in fences {
            bytes.extend_from_slice(&encode(*inode, Some(*fence)));
        }
        {
            let mut file = File::create(&fresh)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
        }
        std::fs::rename(&fresh, path)?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        let file = OpenOptions::new().append(true).open(path)?;
        Ok(FenceLog {
            path: path.to_path_buf(),
            file,
            records: fences.len(),
        })
    }

    /// Appends one record (`fence`: `Some` sets, `None` removes), synced when `durable`;
    /// `live` fences are held once it is in.
    fn append(
        &mut self,
        inode: InodeId,
        fence: Option<Option<Striping>>,
        durable: bool,
        live: usize,
    ) -> io::Result<()> {
        self.file.write_all(&encode(inode, fence))?;
        if durable {
            self.file.sync_data()?;
        }
        self.records += 1;
        if self.records > COMPACT_AT.max(live.saturating_mul(2)) {
            // Read back and rewritten with what is live: the log itself is the truth.
            *self = FenceLog::open(&self.path)?.0;
        }
        Ok(())
    }
}

fn encode(inode: InodeId, fence: Option<Option<Striping>>) -> [u8; RECORD_BYTES] {
    let mut r = [0u8; RECORD_BYTES];
    r[0..8].copy_from_slice(&inode.0.to_le_bytes());
    r[9] = RECORD_MARK;
    match fence {
        None => r[8] = 0,
        Some(None) => r[8] = 1,
        Some(Some(s)) => {
            r[8] = 2;
            r[12..16].copy_from_slice(&s.stripe_count.to_le_bytes());
            r[16..24].copy_from_slice(&s.stripe_size_bytes.to_le_bytes());
            r[24..28].copy_from_slice(&s.server_index.to_le_bytes());
        }
    }
    r
}

/// A record's inode and what it says (`None`: the fence went), or `None` if corrupt.
#[allow(clippy::type_complexity)]
fn decode(r: &[u8]) -> Option<(InodeId, Option<Option<Striping>>)> {
    let u32_at = |at: usize| u32::from_le_bytes(r[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(r[at..at + 8].try_into().expect("8 bytes"));
    if r.len() != RECORD_BYTES || r[9] != RECORD_MARK {
        return None;
    }
    let inode = InodeId(u64_at(0));
    let fence = match r[8] {
        0 => None,
        1 => Some(None),
        2 => Some(Some(Striping {
            stripe_size_bytes: u64_at(16),
            stripe_count: u32_at(12),
            server_index: u32_at(24),
        })),
        _ => return None,
    };
    Some((inode, fence))
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
        m.fence(InodeId(5), Some(striping(1))).unwrap();
        m.check(&read(5, 1)).unwrap();
        m.check(&write(5, 1)).unwrap();
        assert_eq!(m.check(&read(5, 0)).unwrap_err().code, ErrorCode::Stale);
        let extents = Request::Extents {
            items: vec![(InodeId(4), striping(0)), (InodeId(5), striping(0))],
        };
        assert_eq!(m.check(&extents).unwrap_err().code, ErrorCode::Stale);
        m.fence(InodeId(7), None).unwrap();
        assert_eq!(m.check(&read(7, 1)).unwrap_err().code, ErrorCode::Stale);
        m.unfence(InodeId(5), true).unwrap();
        m.check(&read(5, 0)).unwrap();
    }

    #[test]
    fn fences_outlive_a_restart_and_removed_ones_stay_removed() {
        let dir = tempfile::tempdir().unwrap();
        {
            let m = Migrations::open(dir.path()).unwrap();
            m.fence(InodeId(5), Some(striping(1))).unwrap();
            m.fence(InodeId(7), None).unwrap();
            m.fence(InodeId(9), Some(striping(0))).unwrap();
            m.unfence(InodeId(9), true).unwrap();
        }
        // A crash mid-append leaves a torn record: dropped.
        let log = dir.path().join(FENCE_LOG);
        let mut torn = OpenOptions::new().append(true).open(&log).unwrap();
        torn.write_all(&encode(InodeId(11), Some(None))[..20]).unwrap();
        drop(torn);
        let m = Migrations::open(dir.path()).unwrap();
        assert_eq!(m.fences(), 2);
        assert_eq!(m.check(&read(5, 0)).unwrap_err().code, ErrorCode::Stale);
        m.check(&read(5, 1)).unwrap();
        assert_eq!(m.check(&read(7, 1)).unwrap_err().code, ErrorCode::Stale);
        m.check(&read(9, 1)).unwrap();
        m.check(&read(11, 1)).unwrap();
        // Rewritten at start: the live fences only.
        assert_eq!(std::fs::metadata(&log).unwrap().len(), 2 * RECORD_BYTES as u64);
    }

    #[test]
    fn the_log_stays_small_under_many_fences_set_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let m = Migrations::open(dir.path()).unwrap();
        m.fence(InodeId(1), Some(striping(1))).unwrap();
        for i in 2..(3 * COMPACT_AT as u64) {
            m.fence(InodeId(i), None).unwrap();
            m.unfence(InodeId(i), false).unwrap();
        }
        let len = std::fs::metadata(dir.path().join(FENCE_LOG)).unwrap().len();
        assert!(
            len <= (COMPACT_AT as u64 + 2) * RECORD_BYTES as u64,
            "{len} bytes"
        );
        drop(m);
        let m = Migrations::open(dir.path()).unwrap();
        assert_eq!(m.fences(), 1);
        assert_eq!(m.check(&read(1, 0)).unwrap_err().code, ErrorCode::Stale);
    }

    #[test]
    fn a_corrupt_log_refuses_to_start_rather_than_forget_fences() {
        let dir = tempfile::tempdir().unwrap();
        let mut bad = encode(InodeId(3), Some(None));
        bad[9] = 0;
        std::fs::write(dir.path().join(FENCE_LOG), bad).unwrap();
        let e = Migrations::open(dir.path()).err().expect("a corrupt log opened");
        assert!(e.to_string().contains("record 0 is corrupt"), "{e}");
    }
}
