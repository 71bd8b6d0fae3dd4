//! Atomic mode (`MPI_File_set_atomicity(fh, 1)`): every access of the file, independent
//! or collective, runs under extent locks of the bytes it touches, exclusive for writes
//! and shared for reads, held at the io servers of those bytes (weft-client's
//! `File::lock_extents`: taken in server order, waits bounded by the client's timeout,
//! lost when the process dies). Two overlapping accesses are thus serialised: a reader
//! sees all of a write or none of it, and overlapping writes leave one writer's bytes,
//! never a mix.
//!
//! A collective access in atomic mode runs as each rank's independent access under its
//! own locks (MPI gives collective accesses the same semantics): with the exchange
//! methods an aggregator would write other ranks' bytes, and ranks of one call whose
//! accesses overlap would wait for each other's locks inside the call. (ROMIO keeps
//! two-phase in atomic mode, orders overlapping data by rank at the aggregators and
//! locks each aggregator's file domain with fcntl; that needs the exchange to know
//! about atomicity, this needs nothing of it, at the price of the exchange's gains.)

use crate::collective::Request;
use crate::error::{ErrorClass, MpiioError, Result};
use weft_client::File;

/// Runs `work` (the access of `request`) under the extent locks of its file pieces.
pub fn locked<T>(file: &File, write: bool, request: &Request, work: impl FnOnce() -> Result<T>) -> Result<T> {
    if request.bytes() == 0 {
        return work();
    }
    let lock = file.lock_extents(request.pieces(), write)?;
    let result = work();
    let released = lock.release().map_err(|e| {
        MpiioError::new(
            ErrorClass::Io,
            format!("{e} (the access's extent lock was lost while held: it may not have been atomic)"),
        )
    });
    let value = result?;
    released?;
    Ok(value)
}
