//! What the library served, counted; `WEFT_POSIX_STATS=FILE` appends one line per
//! process at its exit (`crate::lifecycle` writes it):
//! `weft-posix pid=N opens=N reads=N read_bytes=N writes=N written_bytes=N path_opens=N handoffs=N upgrades=N handovers=N errors=N`.
//! Tests read it to prove the data bypassed the mount (and fail if interception stops).

use std::sync::atomic::{AtomicU64, Ordering};

pub static OPENS: AtomicU64 = AtomicU64::new(0);
pub static READS: AtomicU64 = AtomicU64::new(0);
pub static READ_BYTES: AtomicU64 = AtomicU64::new(0);
pub static WRITES: AtomicU64 = AtomicU64::new(0);
pub static WRITTEN_BYTES: AtomicU64 = AtomicU64::new(0);
/// Opens served on an O_PATH descriptor (see `crate::upgrade`).
pub static PATH_OPENS: AtomicU64 = AtomicU64::new(0);
/// Native opens made from the mount's `user.weft.handoff` (no request of their own to
/// the manager or the io servers).
pub static HANDOFFS: AtomicU64 = AtomicU64::new(0);
/// O_PATH descriptions made real descriptors of the mount.
pub static UPGRADES: AtomicU64 = AtomicU64::new(0);
pub static HANDOVERS: AtomicU64 = AtomicU64::new(0);
pub static ERRORS: AtomicU64 = AtomicU64::new(0);

pub fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// The counters as the line written at exit.
pub fn line() -> String {
    let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
    format!(
        "weft-posix pid={} opens={} reads={} read_bytes={} writes={} written_bytes={} path_opens={} handoffs={} upgrades={} handovers={} errors={}\n",
        std::process::id(),
        g(&OPENS),
        g(&READS),
        g(&READ_BYTES),
        g(&WRITES),
        g(&WRITTEN_BYTES),
        g(&PATH_OPENS),
        g(&HANDOFFS),
        g(&UPGRADES),
        g(&HANDOVERS),
        g(&ERRORS)
    )
}
