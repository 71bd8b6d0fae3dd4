//! One open of a file through the mount: its `weft_client::File` and what the open's
//! close must know.

use std::sync::atomic::AtomicBool;
use weft_client::File;

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
}
