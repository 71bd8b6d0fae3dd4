//! Group commit: concurrent mutating operations share one redb write transaction and
//! one durable commit (one fsync), and each is acknowledged only after that commit.
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
//!    the gathering time ran out), the leader closes the group and commits it; callers
//!    arriving from then on form the next group, which fills while this one's fsync runs.
//! 5. Every member waits for its group's outcome and returns its own result with it.
//!
//! Why the leader gathers (step 4): a commit costs one flush of the disk, whatever it
//! holds (measured on the 2-core VM: 4.2 ms p50 under load for 1 page or 40 pages,
//! 0.5 ms when quiet), so throughput is group size over flush time. Clients answered
//! together come back together, a little apart: without gathering, the first to come
//! back found no commit running and committed alone while the others waited for it,
//! and groups of 4 synchronous clients alternated 1 and 3 (2.3 operations per commit
//! measured). The leader now waits for as many members as the last group had, for at
//! most half the recent commit time (`GATHER_MAX` at most); a single client (the last
//! group had 1) never waits.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redb::{Database, Durability, WriteTransaction};
use weft_proto::{ErrorCode, WireError};

use super::{StorageResult, WriteTables};

/// Longest a leader waits for the members it expects (see the module comment).
const GATHER_MAX: Duration = Duration::from_millis(2);

/// See the module comment.
#[derive(Default)]
pub(super) struct GroupCommit {
    state: Mutex<State>,
    /// Signalled when a group opens and when a member joins.
    changed: Condvar,
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

    /// Runs `body` in the current group's transaction and returns once the group is
    /// durable (see the module comment).
    pub(super) fn write<T>(
        &self,
        db: &Database,
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
        let group = state.open.as_mut().expect("a group is open");
        let outcome = Arc::clone(&group.outcome);
        group.joined += 1;
        let result = match &group.failed {
            Some(error) => Err(error.clone()),
            None => catch_unwind(AssertUnwindSafe(|| {
                let mut tables = WriteTables::open(&group.txn)?;
                body(&mut tables)
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
            let group = state.open.take().expect("the leader's group is open");
            state.expected = group.joined;
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
                None => group.txn.commit().storage(),
            };
            if committed.is_ok() && members > 0 {
                let took = started.elapsed().as_micros().min(u64::MAX as u128) as u64;
                let mut state = self.lock();
                state.groups_committed += 1;
                state.operations_committed += members;
                state.commit_us = (state.commit_us * 7 + took) / 8;
            }
            group.outcome.set(committed);
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

pub(super) fn begin(db: &Database) -> Result<WriteTransaction, WireError> {
    let mut txn = db.begin_write().storage()?;
    // Immediate is redb's default; stated because acknowledged operations must survive
    // a crash, which non-durable commits do not.
    txn.set_durability(Durability::Immediate).storage()?;
    Ok(txn)
}
