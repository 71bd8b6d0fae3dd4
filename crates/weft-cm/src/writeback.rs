//! The background write-back: one thread per cache manager that writes dirty blocks
//! back to the io servers before a client asks.
//!
//! Each period it:
//! 1. writes back the files clients closed since the last round (the "last close"
//!    trigger: a close is cheap for the client, and the data reaches the io servers
//!    soon after);
//! 2. writes back blocks dirty for longer than the dirty age (a page cache's
//!    writeback interval: bounds what a manager crash can lose);
//! 3. when dirty bytes exceed the dirty limit, writes back the oldest dirty blocks
//!    until only half the limit is dirty, so writers rarely meet a cache full of
//!    dirty blocks (which costs them a synchronous write-back).
//!
//! A failure leaves the blocks dirty (the next round or the client's sync retries) and
//! is counted and logged.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Condvar, Mutex, Weak};

use weft_layout::InodeId;
use weft_proto::WireError;

use crate::Inner;

/// Most bytes one write-back request carries.
pub const WRITE_BACK_BATCH_BYTES: u64 = 4 << 20;
/// Most ranges one write-back request carries (below the protocol's limit).
pub const WRITE_BACK_BATCH_RANGES: usize = weft_proto::msg::RANGES_MAX / 2;
/// Most closed files remembered for write-back; beyond, the dirty age catches them.
const CLOSED_FILES_MAX: usize = 4096;

/// Most files whose background write-back failure is remembered for their next close.
const FAILURES_MAX: usize = 4096;

/// Files to write back soon, a way to wake the thread, and the files whose background
/// write-back failed (reported to their next close; a successful flush forgets them).
#[derive(Default)]
pub struct Queue {
    closed: Mutex<BTreeSet<InodeId>>,
    wake: Condvar,
    failures: Mutex<BTreeMap<InodeId, WireError>>,
}

impl Queue {
    /// A client closed `inode`: write its blocks back in the next round.
    pub fn soon(&self, inode: InodeId) {
        let mut closed = self.closed.lock().unwrap_or_else(|p| p.into_inner());
        if closed.len() < CLOSED_FILES_MAX {
            closed.insert(inode);
        }
        self.wake.notify_one();
    }

    /// Remembers a background write-back failure of `inode`.
    fn failed(&self, inode: InodeId, error: WireError) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if failures.len() < FAILURES_MAX || failures.contains_key(&inode) {
            failures.insert(inode, error);
        }
    }

    /// The failure of the last background write-back of `inode`, if it failed.
    pub fn failure_of(&self, inode: InodeId) -> Option<WireError> {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&inode)
            .cloned()
    }

    pub fn forget_failure(&self, inode: InodeId) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&inode);
    }

    fn take(&self, period: std::time::Duration) -> BTreeSet<InodeId> {
        let closed = self.closed.lock().unwrap_or_else(|p| p.into_inner());
        let (mut closed, _) = self
            .wake
            .wait_timeout_while(closed, period, |c| c.is_empty())
            .unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut *closed)
    }
}

/// Starts the thread; it ends when the service is dropped.
pub fn spawn(inner: &Arc<Inner>) {
    let weak: Weak<Inner> = Arc::downgrade(inner);
    let period = inner.config.writeback_period;
    let spawned = std::thread::Builder::new()
        .name("weft-writeback".into())
        .spawn(move || loop {
            let Some(inner) = weak.upgrade() else { return };
            let closed = inner.writeback.take(period);
            round(&inner, closed);
        });
    if spawned.is_err() {
        eprintln!("weftd: cache: cannot start the write-back thread; dirty blocks go back on sync and eviction only");
    }
}

/// Most blocks one background round chooses by age or by the dirty limit.
const ROUND_BLOCKS_MAX: usize = 4096;

fn round(inner: &Inner, closed: BTreeSet<InodeId>) {
    for inode in closed {
        match inner.flush(inode) {
            Ok(()) => inner.writeback.forget_failure(inode),
            Err(e) => {
                eprintln!(
                    "weftd: cache: write-back after close: {} (kept dirty; a sync retries)",
                    e.message
                );
                inner.writeback.failed(inode, e);
            }
        }
    }
    let tier = &inner.tier;
    let config = &inner.config;
    let older_than = tier.now_ms().saturating_sub(config.dirty_age.as_millis() as u64);
    let chosen = tier.background(older_than, config.dirty_limit_bytes, ROUND_BLOCKS_MAX);
    for (inode, keys) in chosen {
        if let Err(e) = inner.write_back(inode, &keys) {
            eprintln!(
                "weftd: cache: background write-back: {} (kept dirty; a sync retries)",
                e.message
            );
            inner.writeback.failed(inode, e);
        }
    }
}
