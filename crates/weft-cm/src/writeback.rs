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
//!    dirty blocks (which costs them a synchronous write-back);
//! 4. when more than `EAGER_DIRTY_BYTES` are dirty (a stream of writes), writes back
//!    the blocks written whole, woken by the writes themselves (`kick`): the write-back
//!    runs while the writers go on, so that their sync finds little left to do
//!    (measured: block3d write+sync through a colocated tier, see the commit that
//!    brought it).
//!
//! A failure leaves the blocks dirty (the next round or the client's sync retries) and
//! is counted and logged.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};

use weft_layout::InodeId;
use weft_proto::WireError;

use crate::Inner;

/// Most bytes one write-back request carries.
pub const WRITE_BACK_BATCH_BYTES: u64 = 4 << 20;
/// Most ranges one write-back request carries (below the protocol's limit).
pub const WRITE_BACK_BATCH_RANGES: usize = weft_proto::msg::RANGES_MAX / 2;
/// Dirty bytes past which blocks written whole go back at once (step 4), unless the
/// dirty limit is lower (step 3 then does it).
pub const EAGER_DIRTY_BYTES: u64 = 8 << 20;
/// Most closed files remembered for write-back; beyond, the dirty age catches them.
const CLOSED_FILES_MAX: usize = 4096;

/// Most files whose background write-back failure is remembered for their next close.
const FAILURES_MAX: usize = 4096;

/// Files to write back soon, a way to wake the thread, and the files whose background
/// write-back failed (reported to their next close; a successful flush forgets them).
#[derive(Default)]
pub struct Queue {
    closed: Mutex<BTreeSet<InodeId>>,
    /// Writes left more than `EAGER_DIRTY_BYTES` dirty since the last round.
    kicked: AtomicBool,
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

    /// Dirty bytes passed `EAGER_DIRTY_BYTES`: start a round now.
    pub fn kick(&self) {
        if !self.kicked.swap(true, Ordering::AcqRel) {
            // Under the lock the thread waits with, so the wake-up is not lost.
            let _closed = self.closed.lock().unwrap_or_else(|p| p.into_inner());
            self.wake.notify_one();
        }
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
            .wait_timeout_while(closed, period, |c| {
                c.is_empty() && !self.kicked.load(Ordering::Acquire)
            })
            .unwrap_or_else(|p| p.into_inner());
        self.kicked.store(false, Ordering::Release);
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
    write_back_chosen(inner, chosen);
    if tier.dirty_bytes() >= eager_bytes(config) {
        write_back_chosen(inner, tier.fully_dirty(ROUND_BLOCKS_MAX));
    }
}

/// Dirty bytes past which the writes wake the thread for step 4.
pub fn eager_bytes(config: &crate::CacheConfig) -> u64 {
    EAGER_DIRTY_BYTES.min(config.dirty_limit_bytes)
}

fn write_back_chosen(inner: &Inner, chosen: BTreeMap<InodeId, Vec<weft_cache::BlockKey>>) {
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
