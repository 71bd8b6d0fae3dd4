//! A Weft file opened through MPI-IO: its communicator, hints, view and file pointer,
//! and the operations behind the `weft_mpiio_*` functions of `abi.rs`. Collective
//! operations agree on their error among all ranks ([`agree`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use weft_client::{Client, CreateOptions, File, OpenOptions};
use weft_layout::view::{self, Datatype, View};

use crate::collective::engine::{agree, settle};
use crate::collective::no_exchange::{self, Buffered, History, Plan};
use crate::collective::{auto, spread, Context, Request};
use crate::datatype;
use crate::error::{ErrorClass, MpiioError, Result};
use crate::hints::Hints;
use crate::mpi::{self, Comm, Constant, Handle};

mod io;
mod open;
mod views;

pub(crate) use crate::cluster::client;
pub use crate::cluster::weft_path;
pub use crate::error::{forget_error, last_error, report, take_error};
pub(crate) use io::Prepared;
use io::{with_cache_mode, with_layout};
use open::{aggregators_of, agree_and_any, shared_hints};

/// An `io` flag beside the C half's (`WM_IO_*`): an access through the shared file
/// pointer, whose writes go to the servers before the call returns (programs read
/// other ranks' records, or the size they make, after a barrier alone).
pub const THROUGH_SHARED: i32 = 32;

/// How an independent access goes: straight to the servers (atomic mode), through the
/// write-behind buffer and read-ahead window, or past the buffer, sending now (after
/// the buffered bytes it overlaps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Direct,
    Buffered,
    Through,
}

impl Route {
    fn of(atomic: bool, flags: i32) -> Route {
        match (atomic, flags & THROUGH_SHARED != 0) {
            (true, _) => Route::Direct,
            (false, false) => Route::Buffered,
            (false, true) => Route::Through,
        }
    }
}

/// Access mode bits (`enum wm_amode`).
pub mod amode {
    pub const RDONLY: i32 = 1;
    pub const RDWR: i32 = 2;
    pub const WRONLY: i32 = 4;
    pub const CREATE: i32 = 8;
    pub const EXCL: i32 = 16;
    pub const DELETE_ON_CLOSE: i32 = 32;
    pub const SEQUENTIAL: i32 = 128;
    pub const APPEND: i32 = 256;
}

fn print_hints() -> bool {
    std::env::var("WEFT_PRINT_HINTS").is_ok_and(|v| v == "1")
}

struct State {
    hints: Hints,
    aggregators: Vec<usize>,
    view: View,
    /// Kept references to the view's types (derived ones duplicated).
    etype: Handle,
    filetype: Handle,
    etype_size: u64,
    /// Individual file pointer, in etypes.
    position: u64,
    /// Whether `view` is the view set on the file handle (registered with the servers
    /// at first use), so that requests go as view intervals; false when it could not be
    /// set (a view too large to register): list I/O then.
    view_on_file: bool,
    /// Some rank's view overlaps itself (legal on a file opened read-only, MPI 13.3):
    /// every access is then read piece by piece in typemap order
    /// (`read_overlapping`), collective ones agreed without an exchange. The same on
    /// every rank.
    overlapping: bool,
    atomic: bool,
    /// The handle's collective calls so far, for calls planned without a gather
    /// (`collective::no_exchange`); the same on every rank.
    history: History,
    /// Collective writes other ranks may still hold in their write-behind buffers (see
    /// `collective_io`); the same on every rank.
    buffered: Buffered,
}

/// An open Weft file. `MPI_File` handles of Weft files point at one of these.
pub struct MpiFile {
    comm: Comm,
    file: File,
    /// Job-scoped delegates started for this file (hint `weft_delegates`).
    delegates: Option<crate::spawn::JobDelegates>,
    path: String,
    /// This open's shared file pointer at the manager (see `shared`).
    shared_id: crate::shared_id::SharedId,
    /// Whether this rank used the shared file pointer (the manager made it then).
    shared_used: std::sync::atomic::AtomicBool,
    /// Whether the view's data representation is `external32` (the C half converts
    /// the data: see `datarep`).
    external32: std::sync::atomic::AtomicBool,
    amode: i32,
    errhandler: AtomicUsize,
    state: Mutex<State>,
    /// Write-behind buffer and read-ahead window (see `behind`). Locked after `state`
    /// when both are held.
    behind: Mutex<crate::behind::Behind>,
}

// SAFETY: `Prepared` holds a pointer into the caller's buffer, which MPI forbids the
// program to touch until the request completes; the buffer is used by one thread at a
// time (the file's worker) and not after completion.
unsafe impl Send for Prepared {}

impl MpiFile {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn behind(&self) -> MutexGuard<'_, crate::behind::Behind> {
        self.behind.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends this process's write-behind buffer and drops its read-ahead window, before
    /// something observes the file through this process; an error waits for the next
    /// sync or close (see `behind`).
    pub(crate) fn flush_behind(&self) {
        self.behind().flush(&self.file);
    }

    /// At MPI_Finalize with the file still open (MPI asks programs to close files
    /// first; many do not): sends what write-behind holds, as ROMIO, which keeps
    /// nothing back, would have written it already. The error of a deferred write, which
    /// no sync or close will now report, is returned to be printed.
    pub(crate) fn settle_at_finalize(&self) -> Result<()> {
        self.behind().settle(&self.file)
    }

    /// Bytes in the write-behind buffer.
    pub fn write_behind_bytes(&self) -> u64 {
        self.behind().buffered()
    }

    pub fn errhandler(&self) -> Handle {
        self.errhandler.load(Ordering::SeqCst)
    }

    pub fn set_errhandler(&self, h: Handle) {
        self.errhandler.store(h, Ordering::SeqCst);
    }

    pub fn amode(&self) -> i32 {
        self.amode
    }

    /// MPI_File_close (collective): frees the handle's resources; with
    /// MPI_MODE_DELETE_ON_CLOSE rank 0 removes the file once all ranks are done.
    pub fn close(mut self: Box<Self>) -> Result<bool> {
        let used = self.shared_used.load(Ordering::Relaxed);
        // One allreduce agrees on the outcome and on whether any rank used the shared
        // file pointer (rank 0 then drops it: see `shared::drop_pointer`).
        let (done, any_used) = match self.delegates.take() {
            Some(delegates) => {
                let done = self.release_delegates(delegates);
                let any = self.comm.allreduce_one(i64::from(used), mpi::Op::Max)?;
                (done, any != 0)
            }
            None => agree_and_any(&self.comm, self.behind().settle(&self.file), used)?,
        };
        let mut result = done;
        if result.is_ok() && self.amode & amode::DELETE_ON_CLOSE != 0 {
            let r = if self.comm.rank() == 0 {
                client().and_then(|c| c.unlink(&self.path).map_err(MpiioError::from))
            } else {
                Ok(())
            };
            result = agree(&self.comm, r);
        }
        let state = self.state();
        mpi::free_if_derived(state.etype);
        mpi::free_if_derived(state.filetype);
        result.map(|()| any_used)
    }

    /// At close, job-scoped delegates: once every rank is done writing, the file is
    /// synced (the delegates write back, the io servers fsync), then the delegates let
    /// it go (see `spawn`).
    fn release_delegates(&self, delegates: crate::spawn::JobDelegates) -> Result<()> {
        let synced = self.sync();
        if print_hints() && self.comm.rank() == 0 {
            for line in crate::spawn::status_lines(&self.file) {
                eprintln!("weft-mpiio: {}: {line}", self.path);
            }
        }
        let released = delegates.release(&self.file, self.comm.rank());
        agree(&self.comm, synced.and(released))
    }

    pub fn delete(name: &str) -> Result<()> {
        let path = weft_path(name)?;
        client()?.unlink(&path).map_err(MpiioError::from)
    }

    pub fn sync(&self) -> Result<()> {
        // Each rank sends what it holds back (write-behind) and learns of its deferred
        // writes' errors; every rank's writes have returned once all ranks are here,
        // and one sync of every server then covers them all.
        let flushed = self.behind().settle(&self.file);
        self.comm.barrier()?;
        self.state().buffered.clear();
        let r = if self.comm.rank() == 0 {
            self.file.sync().map_err(MpiioError::from)
        } else {
            Ok(())
        };
        agree(&self.comm, flushed.and(r))
    }

    /// The file's size as this process sees it: its own buffered writes sent first,
    /// and counting the collective writes other ranks still buffer (whose extents
    /// every rank knows), as if they had been sent when their calls returned.
    pub fn size(&self) -> Result<u64> {
        self.flush_behind();
        let size = self.file.size()?;
        Ok(size.max(self.state().buffered.end()))
    }

    pub fn set_size(&self, size: i64, only_grow: bool) -> Result<()> {
        let r = (|| {
            let size = u64::try_from(size)
                .map_err(|_| MpiioError::new(ErrorClass::Arg, format!("negative size {size}")))?;
            if self.amode & (amode::RDWR | amode::WRONLY) == 0 {
                return Err(MpiioError::new(ErrorClass::ReadOnly, "file opened read-only"));
            }
            Ok(size)
        })();
        let size = agree(&self.comm, r)?;
        self.flush_behind();
        self.comm.barrier()?;
        self.state().buffered.clear();
        let r = if self.comm.rank() == 0 {
            (|| {
                if only_grow && self.file.size()? >= size {
                    return Ok(());
                }
                self.file.truncate(size)?;
                Ok(())
            })()
        } else {
            Ok(())
        };
        agree(&self.comm, r)
    }

    pub fn info(&self) -> Result<Handle> {
        let state = self.state();
        mpi::info_from(&with_layout(
            with_cache_mode(state.hints.entries(state.aggregators.len()), &self.file),
            &self.file,
        ))
    }

    pub fn set_info(&self, info: Handle) -> Result<()> {
        self.flush_behind();
        let current = self.state().hints.clone();
        let hints = agree(&self.comm, shared_hints(&self.comm, Some(&current), info))?;
        let aggregators = agree(&self.comm, aggregators_of(&self.comm, &hints))?;
        let mut state = self.state();
        state.hints = hints;
        state.aggregators = aggregators;
        Ok(())
    }

    pub fn set_atomicity(&self, flag: bool) -> Result<()> {
        // Atomic mode bypasses the write-behind buffer: it is empty from here on.
        self.flush_behind();
        agree(&self.comm, Ok(()))?;
        let mut state = self.state();
        state.atomic = flag;
        // Every rank's buffer was sent before it joined the agreement.
        state.buffered.clear();
        Ok(())
    }

    pub fn atomicity(&self) -> bool {
        self.state().atomic
    }

    pub fn group(&self) -> Result<Handle> {
        self.comm.group()
    }

    /// The size of the view's etype in bytes.
    pub(crate) fn etype_size(&self) -> u64 {
        self.state().etype_size
    }

    /// The view's size in etypes of the file's current size (MPI_SEEK_END).
    pub(crate) fn size_in_etypes(&self) -> Result<u64> {
        let size = self.size()?;
        let state = self.state();
        Ok(state.view.file_to_view(size) / state.etype_size)
    }

    pub(crate) fn comm(&self) -> &Comm {
        &self.comm
    }

    pub(crate) fn shared_id(&self) -> crate::shared_id::SharedId {
        self.shared_id
    }

    /// Notes that this rank used the shared file pointer (see `close`).
    pub(crate) fn shared_pointer_used(&self) {
        self.shared_used.store(true, Ordering::Relaxed);
    }

    pub(crate) fn weft_file(&self) -> &File {
        &self.file
    }

    pub(crate) fn path(&self) -> &str {
        &self.path
    }
}
