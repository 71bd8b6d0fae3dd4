//! I/O delegation in the MPI-IO layer: collective calls on a delegated file go
//! straight from each process to the delegates owning its bytes (the file domains are
//! static, so the processes need neither an exchange nor to agree on their extents
//! first). Job-scoped delegates are started in `spawn`.

use weft_client::{CacheMode, File};

use crate::collective::server_directed::ServerDirected;
use crate::collective::Method;
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
