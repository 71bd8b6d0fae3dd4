//! The profile's switch and clock: whether `WEFT_PROFILE` is on, and each thread's time
//! in the layer's MPI calls by phase, which the `mpi` wrappers record ([`span`]) and
//! `profile` reads. Apart from `profile` so that `mpi` records without depending on the
//! profile, which gathers through `mpi`.

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Instant;

/// The directory of the JSON, when profiling.
pub(crate) static DIR: LazyLock<Option<PathBuf>> =
    LazyLock::new(|| setting(std::env::var("WEFT_PROFILE").ok().as_deref()));

/// What `WEFT_PROFILE` asks for: no profile, or the directory of its JSON.
pub(crate) fn setting(value: Option<&str>) -> Option<PathBuf> {
    match value.map(str::trim) {
        None | Some("" | "0" | "no" | "off" | "false") => None,
        Some("1" | "yes" | "on" | "true") => Some(PathBuf::from(".")),
        Some(dir) => Some(PathBuf::from(dir)),
    }
}

pub fn enabled() -> bool {
    DIR.is_some()
}

thread_local! {
    /// This thread's nanoseconds in exchanging and in waiting MPI calls, so far.
    pub(crate) static EXCHANGE_NS: Cell<u64> = const { Cell::new(0) };
    pub(crate) static WAITING_NS: Cell<u64> = const { Cell::new(0) };
    /// This thread's MPI collective operations, so far.
    pub(crate) static COLLECTIVES: Cell<u64> = const { Cell::new(0) };
    /// The collective method the current call ran with.
    pub(crate) static METHOD: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// What an MPI call of the layer counts as.
#[derive(Debug, Clone, Copy)]
pub enum Phase {
    Exchange,
    Waiting,
}

/// Times an MPI call for the split, until dropped.
pub struct Span(Option<(Phase, Instant)>);

pub fn span(phase: Phase) -> Span {
    Span(enabled().then(|| {
        COLLECTIVES.with(|c| c.set(c.get() + 1));
        (phase, Instant::now())
    }))
}

impl Drop for Span {
    fn drop(&mut self) {
        if let Some((phase, start)) = self.0 {
            let ns = start.elapsed().as_nanos() as u64;
            let cell = match phase {
                Phase::Exchange => &EXCHANGE_NS,
                Phase::Waiting => &WAITING_NS,
            };
            cell.with(|c| c.set(c.get() + ns));
        }
    }
}

/// The current call runs collective method `name`.
pub fn method(name: &'static str) {
    if enabled() {
        METHOD.with(|m| m.set(Some(name)));
    }
}
