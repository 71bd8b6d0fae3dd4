//! Counts of the io role's own work that its requests and replies do not show (sieve
//! spans, read-modify-writes, fsyncs, small requests the loop handed to a worker), for the server's metrics. Process-wide: a weftd
//! carries at most one io role.

use std::sync::atomic::{AtomicU64, Ordering};

/// The io role's work counts since the process started.
#[derive(Debug, Default)]
pub struct IoCounters {
    /// Reads or writes of several runs with one system call (data sieving).
    sieve_spans: AtomicU64,
    /// Sieve spans of writes: read, patched in memory, written back.
    read_modify_writes: AtomicU64,
    /// Objects made durable (`Sync`: the object's fsync and its directory's).
    fsyncs: AtomicU64,
    /// Small reads and writes the event loop handed to a worker because they would
    /// have waited (`RWF_NOWAIT`: not in the page cache, throttled, locked).
    inline_to_worker: AtomicU64,
}

/// A snapshot of the counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoCounts {
    pub sieve_spans: u64,
    pub read_modify_writes: u64,
    pub fsyncs: u64,
    pub inline_to_worker: u64,
}

pub(crate) static COUNTERS: IoCounters = IoCounters {
    sieve_spans: AtomicU64::new(0),
    read_modify_writes: AtomicU64::new(0),
    fsyncs: AtomicU64::new(0),
    inline_to_worker: AtomicU64::new(0),
};

impl IoCounters {
    pub(crate) fn sieve_span(&self, write: bool) {
        self.sieve_spans.fetch_add(1, Ordering::Relaxed);
        if write {
            self.read_modify_writes.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn fsync(&self) {
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn inline_to_worker(&self) {
        self.inline_to_worker.fetch_add(1, Ordering::Relaxed);
    }
}

/// The io role's counts in this process so far.
pub fn io_counts() -> IoCounts {
    IoCounts {
        sieve_spans: COUNTERS.sieve_spans.load(Ordering::Relaxed),
        read_modify_writes: COUNTERS.read_modify_writes.load(Ordering::Relaxed),
        fsyncs: COUNTERS.fsyncs.load(Ordering::Relaxed),
        inline_to_worker: COUNTERS.inline_to_worker.load(Ordering::Relaxed),
    }
}
