//! One open of a file through the mount: its `weft_client::File` and what the open's
//! close must know.

use std::collections::HashSet;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use weft_client::File;

/// Record-lock owners remembered per open without a flush at its close (`no_flush`).
pub(crate) const LOCKERS_MAX: usize = 1024;

pub(crate) struct OpenFile {
    pub(crate) file: File,
    /// Made by this open, or written, truncated or allocated through it: its close
    /// changes what other clients see of the file. A descriptor opened for writing and
    /// never written (mdtest's read phase opens O_RDWR) changed nothing.
    pub(crate) changed: AtomicBool,
    /// Locks lost by this mount before this open (`Holders::losses`): a later loss on
    /// the file fails this descriptor's I/O.
    pub(crate) losses_at_open: u64,
    /// The mount's count of data changes when the open checked the file's size: a
    /// read-only handle takes that size as the file's end (no size request to every io
    /// server at each read that reaches it) while the count stays.
    pub(crate) sized_at: u64,
    /// Opened read-only while this mount held no lock: the kernel sends no flush at its
    /// closes (FOPEN_NOFLUSH; a read-only descriptor has nothing to send), one round
    /// trip less per open. What a flush would do for it happens at its release.
    pub(crate) no_flush: bool,
    /// Owners that took record locks through this open (only if `no_flush`): no flush
    /// names them at close, so its release drops their locks on the file (at most
    /// `LOCKERS_MAX`).
    pub(crate) lockers: Mutex<HashSet<u64>>,
}
