//! Trace capture in the MPI-IO layer (hint `weft_trace`, default `$WEFT_TRACE`): the
//! original request of every call (the view interval a rank asked for, before any
//! aggregation) and the id of the call, so that the requests the aggregators then send
//! (recorded by weft-client's `File`) can be told apart per call. The records go to
//! the process's trace through the file handle (`weft_client::trace`).
//!
//! Hooks, each one line where it is called: [`attach`] at open, [`begin`] and [`end`]
//! around a data call, [`original`] where the call's view interval is known.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use weft_client::File;
use weft_layout::view::View;

use crate::error::Result;
use crate::hints::Hints;
use crate::mpi::Comm;

/// Opens traced by this process, for handle ids.
static OPENS: AtomicU32 = AtomicU32::new(0);

/// At a collective open: traces the file if the hints say so (else stops a trace the
/// environment started) and gives every rank rank 0's handle id for the file, so that
/// call ids match across the ranks' traces. Collective when the hints name a directory
/// (they are the same on every rank); a rank that cannot write its trace says so and
/// goes on untraced.
pub fn attach(comm: &Comm, hints: &Hints, file: &mut File) -> Result<()> {
    let Some(dir) = &hints.trace else {
        let _ = file.set_trace_dir(None);
        return Ok(());
    };
    if let Err(e) = file.set_trace_dir(Some(Path::new(dir))) {
        eprintln!(
            "weft-mpiio: weft_trace={dir}: {e}; rank {} is not traced",
            comm.rank()
        );
    }
    let handle = (u64::from(std::process::id()) << 32) | u64::from(OPENS.fetch_add(1, Ordering::Relaxed));
    let mut bytes = handle.to_le_bytes();
    comm.bcast(&mut bytes, 0)?;
    if let Some(t) = file.trace() {
        t.set_handle(u64::from_le_bytes(bytes));
    }
    Ok(())
}

/// A data call starts.
pub fn begin(file: &File, collective: bool, rank: usize) {
    if let Some(t) = file.trace() {
        t.begin_call(collective, rank as u32);
    }
}

/// The call's original request: `len` bytes of `view` from `view_offset`.
pub fn original(file: &File, rank: usize, write: bool, view: &View, view_offset: u64, len: u64) {
    if let Some(t) = file.trace() {
        if len > 0 {
            t.original(rank as u32, write, view, view_offset, len);
        }
    }
}

/// The data call is over.
pub fn end(file: &File) {
    if let Some(t) = file.trace() {
        t.end_call();
    }
}
