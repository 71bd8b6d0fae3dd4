//! Replay after a manager restart (issue 30 item 2): the client's side. See weft-meta's
//! `replay.rs` for the manager's and the protocol.
//!
//! Every namespace change (`Request::is_tracked`) goes `Tracked`, with this client's
//! identity (random, for its life), a request slot (one request at a time per slot, at
//! most `SLOTS_MAX`) and a rising request number. Its answer says the operation's
//! sequence number and the last durable one: the client keeps every request it was
//! answered for that is not durable yet (at most `KEPT_MAX` requests and
//! `KEPT_BYTES_MAX` bytes; past either it asks the manager for a commit and waits for
//! it), and drops those that a later answer says are durable. When it finds the
//! manager's epoch changed (a restart: its connection's incarnation), it replays what it
//! kept, in sequence order, before anything new goes out, then says `ReplayDone`. A
//! request whose answer was lost (the connection broke after it went out) is sent again,
//! with the same slot and number, once the manager answers again (for at most
//! `WEFT_RESTART_WAIT_MS`, default `RESTART_WAIT_DEFAULT`): the manager answers it from
//! its record if it did it. A manager that predates tracking (`UnknownOpcode`) gets the
//! requests alone from then on.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use weft_proto::msg::{Request, Response};
use weft_proto::{Attr, ErrorCode};

use crate::connection::Inner;
use crate::error::unexpected;
use crate::error::ClientError;

/// Most tracked requests of one client in flight at once (more wait for a slot).
pub const SLOTS_MAX: u32 = 64;
/// Most requests kept for replay before the client waits for a commit.
pub const KEPT_MAX: usize = 4096;
/// Most bytes of requests kept for replay before the client waits for a commit.
pub const KEPT_BYTES_MAX: usize = 8 << 20;
/// How long a request whose answer was lost waits for the manager to answer again.
pub const RESTART_WAIT_DEFAULT: Duration = Duration::from_secs(15);
/// How often a client holding kept requests looks whether the manager restarted (see
/// [`watch`]); without any, how often its watcher looks whether the client is gone.
const WATCH_PERIOD: Duration = Duration::from_millis(100);
const IDLE_WATCH_PERIOD: Duration = Duration::from_secs(1);
/// Kept requests with no tracked answer since this long: the watcher asks the manager
/// for a commit, which makes them durable and drops them.
const IDLE_COMMIT_AFTER: Duration = Duration::from_secs(1);

struct KeptOp {
    slot: u32,
    xid: u64,
    request: Request,
    made: Option<Attr>,
    bytes: usize,
}

#[derive(Default)]
struct Kept {
    /// The manager's epoch the kept requests were answered in (0: none seen yet).
    epoch: u64,
    /// The highest durable sequence number an answer told.
    durable_seq: u64,
    /// The highest sequence number this client was answered with.
    max_seq: u64,
    /// Acknowledged, not durable yet: sequence number -> request.
    ops: BTreeMap<u64, KeptOp>,
    bytes: usize,
    /// When the last tracked answer came.
    last_answer: Option<Instant>,
}

impl Kept {
    fn drop_durable(&mut self) {
        let durable = self.durable_seq;
        let keep = self.ops.split_off(&(durable + 1));
        for op in std::mem::replace(&mut self.ops, keep).into_values() {
            self.bytes -= op.bytes;
        }
    }
}

/// One client's tracking (shared by the clients made from it: one identity).
pub(crate) struct Tracker {
    client: u64,
    next_xid: AtomicU64,
    free_slots: Mutex<Vec<u32>>,
    slot_freed: Condvar,
    kept: Mutex<Kept>,
    /// Calls hold it shared; a replay holds it alone, so nothing new goes out meanwhile.
    replaying: RwLock<()>,
    /// The manager predates tracking.
    off: AtomicBool,
    restart_wait: Duration,
}

/// An identity no other client of the cluster has in practice: the time in
/// nanoseconds, the process id and a count of the process's clients.
fn random_id() -> u64 {
    static MADE: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let count = MADE.fetch_add(1, Ordering::Relaxed);
    (nanos ^ ((std::process::id() as u64) << 32) ^ count.rotate_right(16)).max(1)
}

/// What an answer made, for a replay to make it again under the same number.
fn made_by(request: &Request, response: &Response) -> Option<Attr> {
    let makes = matches!(
        request.meta_request(),
        Request::Create { .. } | Request::Mkdir { .. } | Request::Symlink { .. } | Request::Mknod { .. }
    );
    match response {
        _ if !makes => None,
        Response::Attr(attr)
        | Response::Made { attr, .. }
        | Response::MadeGranted { attr, .. }
        | Response::MadeStamped { attr, .. } => Some(attr.clone()),
        _ => None,
    }
}

struct Slot<'a> {
    tracker: &'a Tracker,
    slot: u32,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.tracker.free_slots.lock().unwrap().push(self.slot);
        self.tracker.slot_freed.notify_one();
    }
}

impl Tracker {
    pub fn new() -> Tracker {
        let restart_wait = std::env::var("WEFT_RESTART_WAIT_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(RESTART_WAIT_DEFAULT, Duration::from_millis);
        Tracker {
            client: random_id(),
            next_xid: AtomicU64::new(1),
            free_slots: Mutex::new((0..SLOTS_MAX).rev().collect()),
            slot_freed: Condvar::new(),
            kept: Mutex::default(),
            replaying: RwLock::new(()),
            off: AtomicBool::new(false),
            restart_wait,
        }
    }

    fn slot(&self) -> Slot<'_> {
        let mut free = self.free_slots.lock().unwrap();
        loop {
            if let Some(slot) = free.pop() {
                return Slot { tracker: self, slot };
            }
            free = self.slot_freed.wait(free).unwrap();
        }
    }

    /// Whether every operation this client was answered for is durable (nothing to
    /// commit for it: `File::sync` skips the manager).
    pub fn all_durable(&self) -> bool {
        let kept = self.kept.lock().unwrap();
        !self.off.load(Ordering::Relaxed) && kept.max_seq <= kept.durable_seq
    }

    /// How long a request whose answer was lost waits for the manager to answer again.
    pub fn restart_wait(&self) -> Duration {
        self.restart_wait
    }

    /// Requests kept for replay (tests).
    pub fn kept(&self) -> usize {
        self.kept.lock().unwrap().ops.len()
    }

    /// A manager commit told `durable_seq`.
    pub fn durable(&self, durable_seq: u64) {
        let mut kept = self.kept.lock().unwrap();
        kept.durable_seq = kept.durable_seq.max(durable_seq);
        kept.drop_durable();
    }

    /// Makes sure what this client kept was replayed to the manager it talks to now;
    /// returns the shared hold under which a call may go out.
    fn replayed(&self, inner: &Inner) -> Result<RwLockReadGuard<'_, ()>, ClientError> {
        loop {
            let epoch = inner.pool.get(&inner.meta_route)?.incarnation();
            {
                let hold = self.replaying.read().unwrap();
                let mut kept = self.kept.lock().unwrap();
                if kept.epoch == 0 {
                    kept.epoch = epoch;
                }
                if kept.epoch == epoch || self.off.load(Ordering::Relaxed) {
                    return Ok(hold);
                }
            }
            let _alone = self.replaying.write().unwrap();
            if self.kept.lock().unwrap().epoch == epoch {
                continue;
            }
            self.replay(inner, epoch)?;
        }
    }

    /// Replays every kept request to the manager of `epoch`, in sequence order, then
    /// says it is done. The kept requests are numbered in the old epoch until every one
    /// was replayed: only then do the new numbers (and the new manager's durable number,
    /// which counts from the last durable operation, not past the lost ones) replace
    /// them. A replay broken off (the manager gone again) leaves them as they were.
    fn replay(&self, inner: &Inner, epoch: u64) -> Result<(), ClientError> {
        let old: Vec<(u64, Request)> = {
            let kept = self.kept.lock().unwrap();
            kept.ops
                .iter()
                .map(|(&seq, op)| {
                    let wrapped = Request::Tracked {
                        client: self.client,
                        slot: op.slot,
                        xid: op.xid,
                        replay: seq,
                        made: op.made.clone(),
                        request: Box::new(op.request.clone()),
                    };
                    (seq, wrapped)
                })
                .collect()
        };
        let mut renumbered = Vec::with_capacity(old.len());
        let mut durable_seq = 0;
        // The manager may act restarted again while this replays (its store lost
        // operations once more, the replays among them), and the pool reconnects to it
        // unseen: what was replayed so far may be gone. The whole replay starts over for
        // the new epoch (`replayed` loops), the kept requests unchanged.
        let moved = |answered_in: Option<u64>| {
            let moved = answered_in.is_some_and(|e| e != epoch)
                || inner
                    .pool
                    .get(&inner.meta_route)
                    .is_ok_and(|c| c.incarnation() != epoch);
            if moved {
                // The manager closes the old connections as it hands out the new epoch.
                std::thread::sleep(Duration::from_millis(10));
            }
            moved
        };
        for (seq, wrapped) in &old {
            match inner.pool.call(&inner.meta_route, wrapped, &[]) {
                Ok((Response::Tracked { epoch: now_epoch, .. }, _)) if moved(Some(now_epoch)) => {
                    return Ok(());
                }
                Ok((
                    Response::Tracked {
                        seq: now,
                        durable_seq: durable,
                        ..
                    },
                    _,
                )) => {
                    durable_seq = durable_seq.max(durable);
                    renumbered.push((*seq, Some(now)));
                }
                Err(e) if e.is_transport() => return Err(e.into()),
                _ if moved(None) => return Ok(()),
                other => {
                    let what = match other {
                        Ok((response, _)) => format!("unexpected answer {response:?}"),
                        Err(e) => e.to_string(),
                    };
                    eprintln!(
                        "weft: replaying {:?} after a restart of the metadata manager failed: {what}; it is lost",
                        wrapped.meta_request().opcode()
                    );
                    renumbered.push((*seq, None));
                }
            }
        }
        match inner.pool.call(
            &inner.meta_route,
            &Request::ReplayDone { client: self.client },
            &[],
        ) {
            Err(e) if e.is_transport() => return Err(e.into()),
            _ if moved(None) => return Ok(()),
            Ok(_) | Err(_) => {}
        }
        let mut kept = self.kept.lock().unwrap();
        let mut ops = std::mem::take(&mut kept.ops);
        kept.bytes = 0;
        kept.max_seq = 0;
        kept.durable_seq = durable_seq;
        for (seq, now) in renumbered {
            let Some(op) = ops.remove(&seq) else { continue };
            // 0: found done before (durable); else done again under a new number.
            if let Some(now) = now.filter(|&now| now > durable_seq) {
                kept.bytes += op.bytes;
                kept.max_seq = kept.max_seq.max(now);
                kept.ops.insert(now, op);
            }
        }
        kept.epoch = epoch;
        if !old.is_empty() {
            eprintln!(
                "weft: replayed {} metadata operations after a restart of the metadata manager",
                old.len()
            );
        }
        Ok(())
    }

    /// Sends `request` (one that `is_tracked`) tracked; see the module comment.
    pub fn call(&self, inner: &Inner, request: &Request) -> Result<Response, ClientError> {
        if self.off.load(Ordering::Relaxed) {
            return Ok(inner.pool.call(&inner.meta_route, request, &[])?.0);
        }
        let slot = self.slot();
        let xid = self.next_xid.fetch_add(1, Ordering::Relaxed);
        let wrapped = Request::Tracked {
            client: self.client,
            slot: slot.slot,
            xid,
            replay: 0,
            made: None,
            request: Box::new(request.clone()),
        };
        let deadline = Instant::now() + self.restart_wait;
        // Whether the request may have reached the manager (a connection lost with it in
        // flight): only then is it asked again while the manager restarts. A manager
        // that refuses the connection never got it: the caller hears at once that the
        // manager is down, as for any other request.
        let mut maybe_sent = false;
        // The shared hold lasts until the answer is kept: a replay never runs between.
        let (answer, _hold) = loop {
            let sent = self.replayed(inner).and_then(|hold| {
                let answer = inner.pool.call(&inner.meta_route, &wrapped, &[])?;
                Ok((answer, hold))
            });
            match sent {
                Err(ClientError::Transport(e))
                    if e.is_transport()
                        && (maybe_sent || !matches!(e, weft_rpc::RpcError::Connect { .. }))
                        && Instant::now() < deadline =>
                {
                    maybe_sent = true;
                    // The answer may be lost, or the manager restarting: ask again once
                    // it answers (it recognises a request it did).
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) if e.code() == ErrorCode::UnknownOpcode => {
                    self.off.store(true, Ordering::Relaxed);
                    return Ok(inner.pool.call(&inner.meta_route, request, &[])?.0);
                }
                other => break other?,
            }
        };
        let Response::Tracked {
            seq,
            durable_seq,
            epoch,
            response,
        } = answer.0
        else {
            return Err(unexpected(&answer.0));
        };
        let full = {
            let mut kept = self.kept.lock().unwrap();
            kept.last_answer = Some(Instant::now());
            // Numbers of another epoch (a restart between the check and the answer) say
            // nothing of what was kept.
            if kept.epoch == epoch {
                kept.durable_seq = kept.durable_seq.max(durable_seq);
            }
            if kept.epoch == epoch && seq > kept.durable_seq {
                let bytes = request.encode_body().len() + 64;
                kept.bytes += bytes;
                kept.max_seq = kept.max_seq.max(seq);
                kept.ops.insert(
                    seq,
                    KeptOp {
                        slot: slot.slot,
                        xid,
                        request: request.clone(),
                        made: made_by(request, &response),
                        bytes,
                    },
                );
            }
            kept.drop_durable();
            kept.ops.len() > KEPT_MAX || kept.bytes > KEPT_BYTES_MAX
        };
        drop(_hold);
        drop(slot);
        if full {
            // Bounded: wait for the manager to make what is kept durable.
            inner.commit_metadata()?;
        }
        Ok(*response)
    }

    /// Whether requests are kept, and how long since the last tracked answer.
    fn kept_idle(&self) -> Option<Duration> {
        let kept = self.kept.lock().unwrap();
        if kept.ops.is_empty() || self.off.load(Ordering::Relaxed) {
            return None;
        }
        Some(kept.last_answer.map_or(Duration::MAX, |t| t.elapsed()))
    }

    /// Whether an untracked `request` that lost its connection is asked again: a read
    /// (nothing happens twice), to a manager with a new incarnation (it restarted, or
    /// acted so after its store lost operations: its connections were closed).
    pub fn resend_after_restart(&self, inner: &Inner, request: &Request) -> bool {
        use weft_proto::msg::Opcode;
        const READS: [Opcode; 12] = [
            Opcode::GetCluster,
            Opcode::Resolve,
            Opcode::Lookup,
            Opcode::LookupMany,
            Opcode::GetAttr,
            Opcode::Readdir,
            Opcode::ReaddirPlus,
            Opcode::ReaddirSized,
            Opcode::Readlink,
            Opcode::Statfs,
            Opcode::GetXattr,
            Opcode::ListXattr,
        ];
        if self.off.load(Ordering::Relaxed) || !READS.contains(&request.meta_request().opcode()) {
            return false;
        }
        let epoch = self.kept.lock().unwrap().epoch;
        inner
            .pool
            .get(&inner.meta_route)
            .is_ok_and(|c| epoch != 0 && c.incarnation() != epoch)
    }

    /// Before an untracked request: replays first if the manager restarted.
    pub fn before(&self, inner: &Inner) -> Result<(), ClientError> {
        if self.off.load(Ordering::Relaxed) {
            return Ok(());
        }
        match self.replayed(inner) {
            Ok(_) => Ok(()),
            // The call itself will say what is wrong.
            Err(_) => Ok(()),
        }
    }
}

/// Starts the watcher of `inner`'s kept requests: a client that holds requests answered
/// and not durable replays them within the manager's replay window after a restart even
/// when it sends nothing (an idle mount, a program between phases), as Lustre's clients
/// reconnect by themselves. Before it, such a client replayed only at its next call: the
/// window ended without it, other clients saw the namespace without its operations, and
/// its late replays brought back names they had been told were gone (the storm test's
/// mount client). It pings the manager every `WATCH_PERIOD` while requests are kept (a
/// broken connection is noticed and replaced, the new incarnation then replayed to), and
/// asks for a commit once they have been idle for `IDLE_COMMIT_AFTER`. It ends when the
/// client is dropped.
pub(crate) fn watch(inner: &std::sync::Arc<Inner>) {
    let weak = std::sync::Arc::downgrade(inner);
    let tracker = inner.tracker.clone();
    let spawned = std::thread::Builder::new()
        .name("weft-replay-watch".into())
        .spawn(move || loop {
            let idle = tracker.kept_idle();
            std::thread::sleep(if idle.is_some() {
                WATCH_PERIOD
            } else {
                IDLE_WATCH_PERIOD
            });
            let Some(inner) = weak.upgrade() else { return };
            match idle {
                None => {}
                Some(idle) if idle >= IDLE_COMMIT_AFTER => {
                    let _ = inner.commit_metadata();
                }
                Some(_) => {
                    // Finds a connection the manager's death broke (it is replaced at
                    // the next call), then replays to a new incarnation.
                    let _ = inner.pool.call(&inner.meta_route, &Request::GetCluster, &[]);
                    let _ = tracker.before(&inner);
                }
            }
        });
    if let Err(e) = spawned {
        eprintln!(
            "weft: no thread to watch for manager restarts ({e}); an idle client replays at its next call"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durable_answers_drop_what_was_kept() {
        let mut kept = Kept::default();
        for seq in [3, 5, 9] {
            kept.ops.insert(
                seq,
                KeptOp {
                    slot: 0,
                    xid: seq,
                    request: Request::ReplayDone { client: 1 },
                    made: None,
                    bytes: 10,
                },
            );
            kept.bytes += 10;
        }
        kept.durable_seq = 5;
        kept.drop_durable();
        assert_eq!(kept.ops.keys().copied().collect::<Vec<_>>(), vec![9]);
        assert_eq!(kept.bytes, 10);
    }
}
