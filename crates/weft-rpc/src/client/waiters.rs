//! The calls a connection waits for: each call's waiter (its channel, its reply sink,
//! its shared-memory lease) in the pending table, the thread that leads reading, and
//! failing every waiter when the connection breaks.

use crate::error::RpcError;
use crate::shm::{ClientSegment, Lease, Pool, PoolHold};
use std::collections::HashMap;
use std::io::{self, IoSliceMut, Read};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};
use weft_proto::msg::Response;

#[allow(clippy::large_enum_variant)]
pub(super) enum Notice {
    /// Its answer.
    Reply(Result<Delivery, RpcError>),
    /// Nobody reads the connection now: the call's thread is to (it was waiting).
    Lead,
}

/// The answer to a call, as read off the connection.
pub(super) struct Delivery {
    pub(super) response: Response,
    /// The bulk data, unless it went straight into the call's sink.
    pub(super) data: Option<Vec<u8>>,
}

pub(super) struct Waiter {
    /// Room for one `Lead` and the reply (the flags below keep it at that).
    pub(super) sender: SyncSender<Notice>,
    /// Its thread waits for the answer (so it may be asked to lead).
    pub(super) waiting: bool,
    /// A `Lead` was sent to it and not acted on yet.
    pub(super) promoted: bool,
    /// Its reply is expected to be large (`BIG_REPLY_BYTES`): its thread never reads
    /// the connection, the watcher does (see `Connection`).
    pub(super) big: bool,
    /// Where the reply's bulk data goes, if it has the expected length.
    pub(super) sink: Option<ReplySink>,
    /// The call's region of the shared segment (a `ShmCall`).
    pub(super) lease: Option<Lease>,
    /// The read pool's buffers the server places its reply into (a `ShmScatter`).
    pub(super) pool_hold: Option<PoolHold>,
}

/// Slices of a caller's memory that a reply's bulk data is read into directly, in
/// order, instead of into a new vector that the caller then copies from.
pub struct ReplySink {
    pub(super) parts: Vec<(*mut u8, usize)>,
    pub(super) total: u64,
}

impl ReplySink {
    /// A sink over `parts` (address, length), filled in order.
    ///
    /// # Safety
    /// Every part must be valid for writes of its length, and neither read nor written
    /// by anyone else, until the `PendingCall` made with this sink has been waited for
    /// or dropped. The call must not be leaked (`mem::forget`): its drop is what waits
    /// for the thread reading its reply to be done with the memory.
    pub unsafe fn new(parts: Vec<(*mut u8, usize)>) -> ReplySink {
        let total = parts.iter().map(|p| p.1 as u64).sum();
        ReplySink { parts, total }
    }

    pub fn len(&self) -> u64 {
        self.total
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    pub(super) fn fill(&mut self, stream: &mut impl Read) -> io::Result<()> {
        let mut slices: Vec<IoSliceMut<'_>> = self
            .parts
            .iter()
            .filter(|p| p.1 > 0)
            // SAFETY: valid and exclusively ours for now (contract of `new`).
            .map(|&(base, len)| IoSliceMut::new(unsafe { std::slice::from_raw_parts_mut(base, len) }))
            .collect();
        let mut rest: &mut [IoSliceMut<'_>] = &mut slices;
        while !rest.is_empty() {
            let batch = rest.len().min(1024);
            match stream.read_vectored(&mut rest[..batch]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => IoSliceMut::advance_slices(&mut rest, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// The answer to a call made with a sink.
pub enum SinkReply {
    /// The bulk data is in the sink.
    Filled(Response),
    /// The bulk data did not have the sink's length (or the answer was an error
    /// response): here it is, and the sink is untouched.
    Other(Response, Vec<u8>),
}

pub(super) struct PendingTable {
    pub(super) waiters: HashMap<u64, Waiter>,
    /// Set once the connection broke; every later call fails with it.
    pub(super) broken: Option<String>,
    /// The shared segment, while the connection is sound.
    pub(super) segment: Option<Arc<ClientSegment>>,
    /// Regions of calls given up on (timed out, dropped) that the server may still
    /// write into: held until their answer comes or the connection ends.
    pub(super) late: HashMap<u64, Lease>,
    /// The process's read pool, while the connection is sound and the server took it.
    pub(super) pool: Option<Arc<Pool>>,
    /// Pool buffers of calls given up on: held as `late` holds regions.
    pub(super) late_pool: HashMap<u64, PoolHold>,
    /// A thread reads the connection now (holds `Connection::reader`): a waiting
    /// call's, or the watcher's. At most one; see `PendingCall::wait`.
    pub(super) leader: bool,
    /// Waiters with `big` set.
    pub(super) big: usize,
    /// The connection was dropped: the watcher ends.
    pub(super) stopped: bool,
    /// Wakes the watcher (a large reply expected, the leader left while one is, or
    /// the connection dropped).
    pub(super) watch: Arc<std::sync::Condvar>,
    /// Since when the connection has been silent with calls waiting: the later of the
    /// last frame read and the first call sent while none waited (see `liveness`).
    pub(super) quiet_since: std::time::Instant,
}

impl PendingTable {
    /// Forgets the waiter of call `id`, if it is still there, keeping its region held.
    pub(super) fn forget(&mut self, id: u64) -> bool {
        match self.take(id) {
            Some(mut waiter) => {
                if let Some(lease) = waiter.lease.take() {
                    self.late.insert(id, lease);
                }
                if let Some(hold) = waiter.pool_hold.take() {
                    self.late_pool.insert(id, hold);
                }
                true
            }
            None => false,
        }
    }

    /// Removes the waiter of call `id`.
    pub(super) fn take(&mut self, id: u64) -> Option<Waiter> {
        let waiter = self.waiters.remove(&id);
        if waiter.as_ref().is_some_and(|w| w.big) {
            self.big -= 1;
        }
        waiter
    }

    /// Nobody reads the connection: asks one waiting call's thread to (unless one was
    /// asked already and has not acted yet); the watcher, if a large reply is due.
    pub(super) fn promote_next(&mut self) {
        if self.leader || self.broken.is_some() || self.waiters.values().any(|w| w.promoted) {
            return;
        }
        if self.big > 0 {
            self.watch.notify_one();
            return;
        }
        if let Some(waiter) = self.waiters.values_mut().find(|w| w.waiting && !w.big) {
            waiter.promoted = true;
            let _ = waiter.sender.try_send(Notice::Lead);
        }
    }
}

pub(super) fn fail_all(pending: &Mutex<PendingTable>, addr: &str, reason: &str) {
    let mut table = pending.lock().unwrap();
    if table.broken.is_none() {
        table.broken = Some(reason.to_owned());
    }
    // The segment goes with the connection: unmapped once the last call lets go.
    table.segment = None;
    table.late.clear();
    // A server may still write into the pool buffers of calls not answered, for as
    // long as it runs them: those buffers are never handed out again.
    table.pool = None;
    for (_, hold) in table.late_pool.drain() {
        hold.retire();
    }
    table.big = 0;
    for (_, mut waiter) in table.waiters.drain() {
        if let Some(hold) = waiter.pool_hold.take() {
            hold.retire();
        }
        let _ = waiter.sender.try_send(Notice::Reply(Err(RpcError::Disconnected {
            addr: addr.to_owned(),
            reason: reason.to_owned(),
        })));
    }
}

/// The leader lets go of the connection and asks a waiting call's thread to take it.
pub(super) fn step_down(pending: &Mutex<PendingTable>) {
    let mut table = pending.lock().unwrap();
    table.leader = false;
    table.promote_next();
}
