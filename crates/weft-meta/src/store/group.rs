//! Group commit: concurrent mutating operations share one redb write transaction and
//! one commit, and each is acknowledged once that commit returns.
//!
//! Two modes (`set_interval`): with a commit interval of 0 every group commits durably
//! (one fsync) before its members are answered, as before; with an interval above 0
//! groups commit non-durably (redb's `Durability::None`: applied, visible to every
//! later read, not yet flushed) and a background committer (the service's
//! `spawn_committer`) makes a durable commit every interval while anything is pending,
//! and at once when asked (`durable`: fsync, sync, the purger). After a crash redb
//! returns to its last durable commit, which holds every transaction committed before
//! it: the namespace is a prefix of the acknowledged history, whatever the interval.
//!
//! Every operation that joins a group gets a sequence number; the last one of each
//! group is stored with it (counter `commit_seq`), so numbers keep rising across
//! restarts. `durable_seq` is the highest number in a durable commit.
//!
//! 1. A caller that finds no group open and none opening becomes the group's leader: it
//!    begins a write transaction (which waits while the previous group commits).
//! 2. Callers arriving meanwhile wait; once the transaction is open they join it one at
//!    a time, each running its own operation's body in it under the group's lock.
//! 3. A body that refuses (not found, exists, permission...) wrote nothing (bodies check
//!    before their first write) but may rest on what earlier members wrote, so it waits
//!    for the group like them; a body failing with a storage or internal error may have
//!    written part of its work, so the whole group is aborted and every member gets that
//!    error.
//! 4. When every waiter has joined, and as many members as the previous group had (or
//!    the gathering time ran out), the leader closes the group and commits it (durably
//!    if the interval is 0 or a member asked); callers arriving from then on form the
//!    next group, which fills while this one's commit runs.
//! 5. Every member waits for its group's outcome and returns its own result with it.
//!
//! Why the leader gathers (step 4): a durable commit costs one flush of the disk,
//! whatever it holds (measured on the 2-core VM: 4.2 ms p50 under load for 1 page or 40
//! pages, 0.5 ms when quiet), so throughput is group size over flush time. Clients
//! answered together come back together, a little apart: without gathering, the first
//! to come back found no commit running and committed alone while the others waited for
//! it, and groups of 4 synchronous clients alternated 1 and 3 (2.3 operations per commit
//! measured). The leader now waits for as many members as the last group had, for at
//! most half the recent commit time (`GATHER_MAX` at most); a single client (the last
//! group had 1) never waits. Non-durable commits take microseconds, so they gather
//! next to nothing.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redb::{Database, Durability, WriteTransaction};
use weft_proto::{ErrorCode, WireError};

use super::{StorageResult, WriteTables, COUNTERS};

/// The counter holding the sequence number of the last operation committed.
pub(super) const COUNTER_COMMIT_SEQ: &str = "commit_seq";

/// Longest a leader waits for the members it expects (see the module comment).
const GATHER_MAX: Duration = Duration::from_millis(2);

/// See the module comment.
#[derive(Default)]
pub(super) struct GroupCommit {
    state: Mutex<State>,
    /// Signalled when a group opens and when a member joins.
    changed: Condvar,
    /// The database file's blocks, allocated ahead after each durable commit
    /// (`room.rs`).
    room: std::sync::OnceLock<super::room::Room>,
}

#[derive(Default)]
struct State {
    /// The transaction accepting members.
    open: Option<OpenGroup>,
    /// A leader is beginning the next transaction.
    opening: bool,
    /// Callers waiting to join the transaction being begun.
    waiting: usize,
    /// Groups committed and operations in them (for tests and figures).
    groups_committed: u64,
    operations_committed: u64,
    /// Operations that joined the last group closed (members and refusals): how many a
    /// leader waits for.
    expected: u64,
    /// Recent commit time, microseconds (moving average): bounds how long a leader
    /// waits for them.
    commit_us: u64,
    /// 0: every group commits durably; else groups commit non-durably and the
    /// committer makes them durable this often (see the module comment).
    interval: Duration,
    /// The last sequence number handed to an operation.
    seq: u64,
    /// The last sequence number in a committed group (durable or not): every operation
    /// answered so far has one at most this.
    committed_seq: u64,
    /// The last sequence number in a durable commit.
    durable_seq: u64,
    /// When the last durable commit returned (`None`: none yet by this process).
    last_durable: Option<Instant>,
    /// Durable commits made so far.
    durable_commits: u64,
}

/// Where the commits stand (`MetaStore::commit_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitState {
    /// The interval between background durable commits (0: every commit is durable).
    pub interval: Duration,
    /// The sequence number of the last operation committed (acknowledged).
    pub seq: u64,
    /// The sequence number of the last operation in a durable commit.
    pub durable_seq: u64,
    /// Time since the last durable commit of this process (`None`: none yet).
    pub since_durable: Option<Duration>,
    /// Durable commits made by this process.
    pub durable_commits: u64,
}

impl CommitState {
    /// Operations acknowledged but not yet durable.
    pub fn lag(&self) -> u64 {
        self.seq.saturating_sub(self.durable_seq)
    }
}

impl State {
    fn gather_time(&self) -> Duration {
        Duration::from_micros(self.commit_us / 2).min(GATHER_MAX)
    }
}

struct OpenGroup {
    txn: WriteTransaction,
    outcome: Arc<Outcome>,
    members: u64,
    /// Operations that ran their body in it (members and refusals).
    joined: u64,
    /// A member failed in a way that may have left writes in the transaction.
    failed: Option<WireError>,
    /// A member asked for a durable commit.
    durable: bool,
    /// The sequence number of its last member (0: none yet).
    last_seq: u64,
}

/// The result of committing one group, awaited by its members.
#[derive(Default)]
struct Outcome {
    result: Mutex<Option<Result<(), WireError>>>,
    done: Condvar,
}

impl Outcome {
    fn set(&self, result: Result<(), WireError>) {
        *self.result.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
        self.done.notify_all();
    }

    fn wait(&self) -> Result<(), WireError> {
        let mut result = self.result.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = result.as_ref() {
                return r.clone();
            }
            result = self.done.wait(result).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Errors after which a body may have written part of its work.
fn may_have_written(error: &WireError) -> bool {
    matches!(error.code, ErrorCode::Io | ErrorCode::Internal)
}

impl GroupCommit {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// (groups, operations) committed so far.
    pub(super) fn committed(&self) -> (u64, u64) {
        let state = self.lock();
        (state.groups_committed, state.operations_committed)
    }

    /// Starts numbering operations after `seq` (the last one stored), all durable.
    pub(super) fn start_at(&self, seq: u64) {
        let mut state = self.lock();
        state.seq = state.seq.max(seq);
        state.committed_seq = state.committed_seq.max(seq);
        state.durable_seq = state.durable_seq.max(seq);
    }

    /// After a reopen that found the store back at `seq` (acknowledged operations after
    /// it lost with the database's non-durable commits): numbers go on from there, as
    /// after a restart.
    pub(super) fn restart_at(&self, seq: u64) {
        let mut state = self.lock();
        state.seq = seq;
        state.committed_seq = seq;
        state.durable_seq = seq;
    }

    /// Keeps the database file's room from now on (see `room.rs`), allocating it now.
    pub(super) fn hold_room(&self, room: super::room::Room) {
        if self.room.set(room).is_ok() {
            self.keep_room();
        }
    }

    fn keep_room(&self) {
        if let Some(room) = self.room.get() {
            room.keep();
        }
    }

    /// Sets the interval between background durable commits (0: every commit durable).
    pub(super) fn set_interval(&self, interval: Duration) {
        self.lock().interval = interval;
    }

    pub(super) fn state(&self) -> CommitState {
        let state = self.lock();
        CommitState {
            interval: state.interval,
            seq: state.committed_seq,
            durable_seq: state.durable_seq,
            since_durable: state.last_durable.map(|t| t.elapsed()),
            durable_commits: state.durable_commits,
        }
    }

    /// Whether some committed operation is not durable yet.
    pub(super) fn pending(&self) -> bool {
        let state = self.lock();
        state.committed_seq > state.durable_seq
    }

    /// Runs `body` in the current group's transaction and returns once the group is
    /// durable (see the module comment).
    /// `durable`: the group commits durably whatever the interval.
    pub(super) fn write<T: 'static>(
        &self,
        db: &Database,
        durable: bool,
        body: impl FnOnce(&mut WriteTables<'_>) -> Result<T, WireError>,
    ) -> Result<T, WireError> {
        let mut state = self.lock();
        let mut leader = false;
        while state.open.is_none() {
            if !state.opening {
                state.opening = true;
                leader = true;
                drop(state);
                let begun = begin(db);
                state = self.lock();
                state.opening = false;
                match begun {
                    Ok(txn) => {
                        state.open = Some(OpenGroup {
                            txn,
                            outcome: Arc::default(),
                            members: 0,
                            joined: 0,
                            failed: None,
                            durable: false,
                            last_seq: 0,
                        })
                    }
                    Err(error) => {
                        // A waiter becomes the next leader and tries again.
                        self.changed.notify_all();
                        return Err(error);
                    }
                }
                self.changed.notify_all();
                break;
            }
            state.waiting += 1;
            state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
            state.waiting -= 1;
        }

        // Join: run the body in the open transaction.
        let next_seq = state.seq + 1;
        let group = state.open.as_mut().expect("a group is open");
        let outcome = Arc::clone(&group.outcome);
        group.joined += 1;
        let result = match &group.failed {
            Some(error) => Err(error.clone()),
            None => catch_unwind(AssertUnwindSafe(|| {
                let mut tables = WriteTables::open(&group.txn)?;
                let value = body(&mut tables)?;
                drop(tables);
                // A tracked operation's answer, in its own transaction (`replies.rs`).
                super::replies::record(&group.txn, &value, next_seq)?;
                Ok(value)
            }))
            .unwrap_or_else(|_| {
                Err(WireError::new(
                    ErrorCode::Internal,
                    "metadata operation panicked inside a group commit (a bug)",
                ))
            }),
        };
        // A refusal waits for the group too: it may rest on what earlier members wrote
        // (a name one of them made), which nobody may act on before it is durable (a
        // create that lost its name to another retries and must then find it).
        let waits = match &result {
            Ok(_) => {
                group.members += 1;
                group.durable |= durable;
                state.seq += 1;
                let seq = state.seq;
                state.open.as_mut().expect("a group is open").last_seq = seq;
                true
            }
            Err(error) if may_have_written(error) => {
                group.failed.get_or_insert_with(|| error.clone());
                false
            }
            Err(_) => true,
        };
        self.changed.notify_all();

        if leader {
            // Close once everyone who waited for this transaction has joined, and as many
            // as joined the last group have (or the gathering time is up).
            let deadline = Instant::now() + state.gather_time();
            loop {
                let joined = state.open.as_ref().map_or(0, |g| g.joined);
                if state.waiting > 0 {
                    state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
                    continue;
                }
                let now = Instant::now();
                if joined >= state.expected || now >= deadline {
                    break;
                }
                state = self
                    .changed
                    .wait_timeout(state, deadline - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            let mut group = state.open.take().expect("the leader's group is open");
            state.expected = group.joined;
            let durable = group.durable || state.interval.is_zero();
            drop(state);
            let started = Instant::now();
            let members = group.members;
            let committed = match group.failed {
                Some(error) => {
                    let _ = group.txn.abort();
                    Err(WireError::new(
                        error.code,
                        format!("group commit aborted, nothing of it written: {}", error.message),
                    ))
                }
                None if members == 0 => group.txn.abort().storage(),
                None => commit(&mut group.txn, group.last_seq, durable)
                    .and_then(|()| group.txn.commit().storage()),
            };
            if committed.is_ok() && members > 0 {
                let took = started.elapsed().as_micros().min(u64::MAX as u128) as u64;
                let mut state = self.lock();
                state.groups_committed += 1;
                state.operations_committed += members;
                state.commit_us = (state.commit_us * 7 + took) / 8;
                state.committed_seq = state.committed_seq.max(group.last_seq);
                if durable {
                    state.durable_seq = state.durable_seq.max(group.last_seq);
                    state.last_durable = Some(Instant::now());
                    state.durable_commits += 1;
                }
            }
            let kept_room = durable && committed.is_ok();
            group.outcome.set(committed);
            if kept_room {
                self.keep_room();
            }
        } else {
            drop(state);
        }
        if !waits {
            return result;
        }
        let committed = outcome.wait();
        match result {
            Ok(value) => committed.map(|()| value),
            // A refusal stands whatever became of the group (it wrote nothing).
            Err(refusal) => Err(refusal),
        }
    }
}

/// A write transaction that commits durably unless told otherwise (a group's
/// `commit` sets its durability at the end; the record of lock sessions is always
/// written durably, and makes every non-durable commit before it durable too).
pub(super) fn begin(db: &Database) -> Result<WriteTransaction, WireError> {
    let mut txn = db.begin_write().storage()?;
    txn.set_durability(Durability::Immediate).storage()?;
    Ok(txn)
}

/// Readies a group's transaction for its commit: records the last sequence number in
/// it, and sets its durability (a non-durable commit is undone by a crash, together
/// with every later one, until a durable commit follows).
fn commit(txn: &mut WriteTransaction, last_seq: u64, durable: bool) -> Result<(), WireError> {
    txn.open_table(COUNTERS)
        .storage()?
        .insert(COUNTER_COMMIT_SEQ, last_seq)
        .storage()?;
    let durability = match durable {
        true => Durability::Immediate,
        false => Durability::None,
    };
    txn.set_durability(durability).map_err(|e| {
        WireError::new(
            ErrorCode::Internal,
            format!("metadata store: setting a commit's durability: {e}"),
        )
    })
}
