//! I/O delegation in the MPI-IO layer: collective calls on a delegated file go
//! straight from each process to the delegates owning its bytes (the file domains are
//! static, so the processes need neither an exchange nor to agree on their extents
//! first), and the job-scoped delegates hint (`weft_delegates` / `$WEFT_DELEGATES`).

use weft_client::{CacheMode, File};

use crate::collective::server_directed::ServerDirected;
use crate::collective::Method;
use crate::error::{ErrorClass, MpiioError, Result};
use crate::hints::{Hints, Method as Name};

/// The method for a collective call on `file` when the call needs no agreement among
/// the processes: a delegated file under `weft_cb_method=auto`. `None`: choose as
/// usual (an explicit method is honoured, for comparison).
pub fn direct_method(file: &File, hints: &Hints) -> Option<(Box<dyn Method>, &'static str)> {
    (file.cache_mode() == CacheMode::Delegated && hints.method == Name::Auto).then(|| {
        (
            Box::new(ServerDirected) as Box<dyn Method>,
            "delegated file: static file domains, each rank straight to its delegates",
        )
    })
}

/// Job-scoped delegates (`weft_delegates=N`, or `$WEFT_DELEGATES`) would be started
/// with MPI_Comm_spawn for this file only; that is not built yet, so asking for them is
/// an error at open naming the persistent alternative, rather than a silent run
/// without delegates.
pub fn check_job_scoped(hints: &Hints) -> Result<()> {
    match hints.delegates {
        None | Some(0) => Ok(()),
        Some(n) => Err(MpiioError::new(
            ErrorClass::UnsupportedOperation,
            format!(
                "weft_delegates={n}: job-scoped delegates (started by this library with \
                 MPI_Comm_spawn) are not available in this version; use persistent delegates \
                 instead: a cluster with cache managers on the aligned mapping (`weft up --cache \
                 {n} --cache-mapping aligned`) and a delegated file (`weft layout --set --cache \
                 delegated DIR`, or hint weft_cache=delegated at create)"
            ),
        )),
    }
}
