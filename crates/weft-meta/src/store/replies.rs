//! The record of tracked operations' answers (issue 30's replay, see the service's
//! `replay.rs`): per (client, request slot), the last request number done there, its
//! sequence number, when, and its encoded answer, written in the SAME write transaction
//! as the operation itself. A crash that undoes the operation undoes its record with it,
//! and one that keeps it keeps the record: a request sent again is recognised exactly
//! when it was done.
//!
//! The service says what to record by setting the calling thread's `Tracking` before it
//! calls the store (`track`) and takes it back after (`untrack`); the group commit
//! (`group.rs`) asks it, for the value the first operation body that succeeds returned,
//! for the answer to record (`Tracking::reply_of`), so that a service operation that
//! makes other writes first (an inode number reservation) records nothing with those.

use std::any::Any;
use std::cell::RefCell;

use redb::{ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use weft_layout::{InodeId, Layout};
use weft_proto::WireError;

use super::{MetaStore, StorageResult};

/// (client, slot) -> `Reply::to_bytes`.
pub(super) const REPLIES: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("replies");

/// A record's key: (client, request slot).
pub type ReplyKey = (u64, u32);

/// One recorded answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The client's request number.
    pub xid: u64,
    /// The operation's sequence number.
    pub seq: u64,
    /// When it was done, ms since the Unix epoch.
    pub used_ms: u64,
    /// The encoded `Response`.
    pub body: Vec<u8>,
}

impl Reply {
    fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + self.body.len());
        out.extend_from_slice(&self.xid.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.used_ms.to_le_bytes());
        out.extend_from_slice(&self.body);
        out
    }

    fn from_bytes(bytes: &[u8]) -> Option<Reply> {
        let u64_at = |i: usize| {
            bytes
                .get(i..i + 8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
        };
        Some(Reply {
            xid: u64_at(0)?,
            seq: u64_at(8)?,
            used_ms: u64_at(16)?,
            body: bytes[24..].to_vec(),
        })
    }
}

/// Turns an operation body's value into the answer to record (`None`: not the value of
/// the tracked operation, record nothing).
pub type ReplyOf = Box<dyn Fn(&dyn Any) -> Option<Vec<u8>>>;

/// What the calling thread's next operation records (see the module comment).
pub struct Tracking {
    pub client: u64,
    pub slot: u32,
    pub xid: u64,
    /// A replayed operation that made an inode: its number (and a file's layout) then,
    /// used again so that what clients did with it since (data written to its objects,
    /// a mount's handles) still holds.
    pub reuse: Option<(InodeId, Option<Layout>)>,
    pub reply_of: ReplyOf,
    /// Records of clients aged out, removed in the same transaction.
    pub forget: Vec<ReplyKey>,
    /// Set once written: what was recorded.
    pub recorded: Option<Reply>,
    /// The store's losses (`MetaStore::losses`) when the request came: one that came
    /// before a loss is not applied after it (`fence`).
    pub losses: u64,
}

thread_local! {
    static TRACKING: RefCell<Option<Tracking>> = const { RefCell::new(None) };
}

/// Sets what the calling thread's next operation records.
pub fn track(tracking: Tracking) {
    TRACKING.with(|t| *t.borrow_mut() = Some(tracking));
}

/// Takes back what `track` set, with what was recorded.
pub fn untrack() -> Option<Tracking> {
    TRACKING.with(|t| t.borrow_mut().take())
}

/// What the store calls when a reopen after a disk error found acknowledged operations
/// gone, with the record of tracked requests the reopened database holds. It runs while
/// the database is held alone (no operation runs before it returns): it must not call
/// the store.
pub type LossHook = Box<dyn Fn(Vec<(ReplyKey, Reply)>) + Send + Sync>;

/// The store's reopens that lost acknowledged operations, and who is told of one.
///
/// A loss and what its hook does (the service acts restarted: a new incarnation for
/// connections accepted from then on, a restart count, every older connection closed)
/// are one step for a tracked request, which notes the count and the service's restart
/// count as it comes (`seen`): before, it could note the new incarnation's connection
/// with the old count, read between the hook and the count, and be refused as served
/// across the loss on the new connection, whose client took the refusal as the answer
/// (a replayed chmod was dropped as lost: a CI failure in disk_full.rs).
#[derive(Default)]
pub(super) struct Losses {
    count: std::sync::atomic::AtomicU64,
    hook: std::sync::OnceLock<LossHook>,
    /// Held alone for a loss and its hook; shared while a request notes the counts.
    gate: std::sync::RwLock<()>,
}

impl Losses {
    pub fn count(&self) -> u64 {
        self.count.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The count, with what `also` reads, never between a loss and the end of its hook.
    pub fn seen<T>(&self, also: impl FnOnce() -> T) -> (T, u64) {
        let _shared = self.gate.read().unwrap();
        (also(), self.count())
    }

    pub fn set_hook(&self, hook: LossHook) {
        if self.hook.set(hook).is_err() {
            eprintln!("weftd meta: the store's loss hook was set twice; the first one stays");
        }
    }

    /// A loss: the hook hears it, then it is counted, as one step for `seen`.
    pub fn lost(&self, records: Vec<(ReplyKey, Reply)>) {
        let _alone = self.gate.write().unwrap();
        match self.hook.get() {
            Some(hook) => hook(records),
            None => eprintln!("weftd meta: nobody to tell of the loss (no loss hook)"),
        }
        self.count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Refuses the thread's tracked operation if the store lost acknowledged operations
/// since it came (`losses` now): it would be applied before the clients' replays of
/// what was lost, which it may follow (a chmod replayed after a later one). Its
/// connection was closed with the loss, so its client never hears this refusal: it sends
/// the request again after its replays.
pub(super) fn fence(losses: u64) -> Result<(), WireError> {
    TRACKING.with(|t| match t.borrow().as_ref() {
        Some(tracking) if tracking.losses != losses => Err(acted_restarted()),
        _ => Ok(()),
    })
}

/// The refusal of a tracked request served across a loss of acknowledged operations.
pub fn acted_restarted() -> WireError {
    WireError::new(
        weft_proto::ErrorCode::Unavailable,
        "the metadata manager lost acknowledged operations to a disk error and acts as restarted: \
         send the request again after replaying",
    )
}

/// The inode a replayed operation made before (and its layout), without taking it.
pub fn reuse_peek() -> Option<(InodeId, Option<Layout>)> {
    TRACKING.with(|t| t.borrow().as_ref().and_then(|t| t.reuse.clone()))
}

/// Takes the inode number to use again, if the thread's operation is a replay that
/// made one (`allocate_inode` hands it out instead of a fresh one).
pub(super) fn take_reuse() -> Option<InodeId> {
    TRACKING.with(|t| {
        t.borrow_mut()
            .as_mut()
            .and_then(|t| t.reuse.take())
            .map(|(inode, _)| inode)
    })
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Records the thread's tracked answer in `txn`, if `value` is the tracked operation's
/// (group commit, after a body succeeded, with the sequence number it gets).
pub(super) fn record(txn: &WriteTransaction, value: &dyn Any, seq: u64) -> Result<(), WireError> {
    TRACKING.with(|t| {
        let mut slot = t.borrow_mut();
        let Some(tracking) = slot.as_mut() else {
            return Ok(());
        };
        if tracking.recorded.is_some() {
            return Ok(());
        }
        let Some(body) = (tracking.reply_of)(value) else {
            return Ok(());
        };
        let reply = Reply {
            xid: tracking.xid,
            seq,
            used_ms: unix_ms(),
            body,
        };
        let mut table = txn.open_table(REPLIES).storage()?;
        table
            .insert((tracking.client, tracking.slot), reply.to_bytes().as_slice())
            .storage()?;
        for key in tracking.forget.drain(..) {
            table.remove(key).storage()?;
        }
        tracking.recorded = Some(reply);
        Ok(())
    })
}

impl MetaStore {
    /// Every recorded answer (read once at the start; the service bounds how many there
    /// are, `replay::RECORDS_MAX`).
    pub fn replies(&self) -> Result<Vec<(ReplyKey, Reply)>, WireError> {
        self.with_database(|db| read_all(&db.begin_read().storage()?).storage())
    }
}

/// Every record `txn` sees.
pub(super) fn read_all(txn: &redb::ReadTransaction) -> Result<Vec<(ReplyKey, Reply)>, redb::Error> {
    let table = txn.open_table(REPLIES)?;
    let mut out = Vec::new();
    for item in table.iter()? {
        let (key, value) = item?;
        if let Some(reply) = Reply::from_bytes(value.value()) {
            out.push((key.value(), reply));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_record_round_trips_and_a_short_one_is_refused() {
        let reply = Reply {
            xid: 7,
            seq: 99,
            used_ms: 12345,
            body: vec![1, 2, 3],
        };
        assert_eq!(Reply::from_bytes(&reply.to_bytes()), Some(reply));
        assert_eq!(Reply::from_bytes(&[0u8; 20]), None);
    }
}
