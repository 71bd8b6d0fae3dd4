//! Read-ahead for sequential reads: a program reading a file front to back in small
//! calls (cat, cp, dd bs=128k, Python) would otherwise wait for the io servers once per
//! call, where the mount's kernel reads ahead. A read that starts where the previous one
//! of its file description ended, and is smaller than the window, fetches the window
//! (8 MiB, striped over the servers in one go) and later reads are copied from it.
//!
//! Consistency: any write, truncate or allocation through the library in this process
//! bumps a generation that empties every window, so a process always reads its own
//! writes, through any descriptor. Other clients' writes show from the next open
//! (close-to-open, as the mount's page cache). Windows are bounded: at most
//! [`TOTAL_MAX`] bytes in all; past that reads go straight to the servers.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use weft_client::{ClientError, File};

/// Bytes fetched per window.
pub const WINDOW: usize = 8 << 20;
/// Bytes held in windows by the whole process at most.
pub const TOTAL_MAX: usize = 256 << 20;

static HELD: AtomicUsize = AtomicUsize::new(0);
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The process wrote through the library: every window is out of date.
pub fn wrote() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

struct Window {
    start: u64,
    data: Vec<u8>,
    generation: u64,
}

/// One file description's read-ahead state.
#[derive(Default)]
pub struct Ahead {
    inner: Mutex<(Option<Window>, u64)>,
}

impl Drop for Ahead {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = inner.0.take() {
            HELD.fetch_sub(w.data.capacity(), Ordering::SeqCst);
        }
    }
}

impl Ahead {
    /// Reads `buf` at `offset` of `file`, from the window when it holds it.
    pub fn read(&self, file: &File, offset: u64, buf: &mut [u8]) -> Result<usize, ClientError> {
        let mut inner = crate::guard::lock(&self.inner);
        let generation = GENERATION.load(Ordering::SeqCst);
        let (window, next) = &mut *inner;
        if let Some(w) = window.as_ref().filter(|w| w.generation == generation) {
            let end = w.start + w.data.len() as u64;
            if offset >= w.start && offset + buf.len() as u64 <= end {
                let at = (offset - w.start) as usize;
                buf.copy_from_slice(&w.data[at..at + buf.len()]);
                *next = offset + buf.len() as u64;
                return Ok(buf.len());
            }
        }
        let sequential = offset == *next && buf.len() < WINDOW;
        if let Some(w) = window.take() {
            HELD.fetch_sub(w.data.capacity(), Ordering::SeqCst);
        }
        if !sequential || HELD.fetch_add(WINDOW, Ordering::SeqCst) + WINDOW > TOTAL_MAX {
            if sequential {
                HELD.fetch_sub(WINDOW, Ordering::SeqCst);
            }
            let n = file.read_at(offset, buf)?;
            *next = offset + n as u64;
            return Ok(n);
        }
        // Within the size the file had at its open, the window ends there: a window
        // past the end would only make the client ask the io servers for the size
        // (one more round trip for every small file read). At or past that size, the
        // read goes straight into `buf`: it is mostly the read that finds the end of a
        // file read whole, for which a window (a buffer of WINDOW bytes to zero; once
        // glibc reuses freed memory for it, a memset of 8 MiB) cost more than the rest
        // of a small file's open, read and close together.
        let at_open = file.attr().size;
        let want = if offset < at_open {
            ((at_open - offset) as usize).clamp(buf.len(), WINDOW)
        } else {
            0
        };
        if want <= buf.len() {
            HELD.fetch_sub(WINDOW, Ordering::SeqCst);
            let n = file.read_at(offset, buf)?;
            *next = offset + n as u64;
            return Ok(n);
        }
        let mut data = vec![0u8; want];
        let n = match file.read_at(offset, &mut data) {
            Ok(n) => n,
            Err(e) => {
                HELD.fetch_sub(WINDOW, Ordering::SeqCst);
                return Err(e);
            }
        };
        // HELD counts the window's capacity (given back when the window goes).
        HELD.fetch_sub(WINDOW - want, Ordering::SeqCst);
        data.truncate(n);
        let give = n.min(buf.len());
        buf[..give].copy_from_slice(&data[..give]);
        *next = offset + give as u64;
        *window = Some(Window {
            start: offset,
            data,
            generation,
        });
        Ok(give)
    }

    /// Forgets the window (the descriptor goes to the kernel).
    pub fn clear(&self) {
        let mut inner = crate::guard::lock(&self.inner);
        if let Some(w) = inner.0.take() {
            HELD.fetch_sub(w.data.capacity(), Ordering::SeqCst);
        }
    }
}
