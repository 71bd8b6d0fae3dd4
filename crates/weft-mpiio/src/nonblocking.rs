//! Nonblocking I/O on Weft files (`MPI_File_iread*` / `iwrite*`) as MPI generalized
//! requests that the program's own `MPI_Wait`, `MPI_Test` and friends complete.
//!
//! An independent call is prepared on the calling thread (datatypes decoded, file
//! pointer moved) and its Weft I/O queued to the file's worker thread, which does I/O
//! only and never calls MPI, so programs need no `MPI_THREAD_MULTIPLE`. Each call
//! returns an [`Op`]; the C side (`csrc/requests.c`) wraps it in a generalized request
//! (`MPI_Grequest_start`) and binds the request to it here. MPI offers no portable way
//! for a generalized request to complete itself from another thread, so the library
//! interposes the completion calls (`MPI_Wait`, `MPI_Test`, their `all`, `any`,
//! `some` forms, `MPI_Request_get_status`, `MPI_Request_free`): before handing the
//! requests to the MPI library they complete (`MPI_Grequest_complete`, on the thread
//! that called MPI) every bound request whose I/O is done, waiting for it where the
//! call blocks. Collective nonblocking calls, and the split collectives, do their
//! work at the call, as ROMIO does (their exchanges need MPI).

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, LazyLock, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{ErrorClass, MpiioError, Result};
use crate::file::{MpiFile, Prepared};
use crate::mpi::Handle;

/// Most nonblocking operations queued to one file's worker at once; a call beyond
/// waits for the oldest to finish (bounds memory, as MPI allows a call to block).
const QUEUED_MAX: usize = 1024;

/// One nonblocking operation: its outcome once done.
pub struct Op {
    /// The `MPI_File` it was started on (for its error handler).
    pub fh: Handle,
    outcome: Mutex<Outcome>,
    done: Condvar,
}

#[derive(Default)]
struct Outcome {
    result: Option<Result<u64>>,
    /// The error was returned by the completion call itself (MPI_Wait, MPI_Test), so
    /// the request's status reports success to the MPI library.
    error_taken: bool,
}

impl Op {
    fn new(fh: Handle) -> Arc<Op> {
        Arc::new(Op {
            fh,
            outcome: Mutex::new(Outcome::default()),
            done: Condvar::new(),
        })
    }

    fn outcome(&self) -> std::sync::MutexGuard<'_, Outcome> {
        self.outcome.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn finish(&self, result: Result<u64>) {
        self.outcome().result = Some(result);
        self.done.notify_all();
        let (lock, cv) = &*ANY_DONE;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        cv.notify_all();
    }

    pub fn is_done(&self) -> bool {
        self.outcome().result.is_some()
    }

    pub fn wait(&self) {
        let mut o = self.outcome();
        while o.result.is_none() {
            o = self.done.wait(o).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// (error class or 0, bytes) of a finished operation, for the request's status.
    pub fn status(&self) -> (c_int, u64) {
        let o = self.outcome();
        match &o.result {
            Some(Ok(n)) => (0, *n),
            Some(Err(_)) if o.error_taken => (0, 0),
            Some(Err(e)) => (e.class as c_int, 0),
            None => (ErrorClass::Intern as c_int, 0),
        }
    }

    /// The operation's error class (0 if it succeeded), which the caller returns
    /// itself: the request's status then says success.
    pub fn take_error(&self) -> c_int {
        let mut o = self.outcome();
        let class = match &o.result {
            Some(Err(e)) => {
                crate::file::report(e);
                e.class as c_int
            }
            _ => 0,
        };
        o.error_taken = class != 0;
        class
    }
}

/// Counts finished operations, for waits on any of several.
static ANY_DONE: LazyLock<(Mutex<u64>, Condvar)> = LazyLock::new(Default::default);

/// Waits until some operation finishes or `timeout` passes.
pub fn wait_any(timeout: Duration) {
    let (lock, cv) = &*ANY_DONE;
    let seen = lock.lock().unwrap_or_else(|e| e.into_inner());
    let start = *seen;
    let _ = cv
        .wait_timeout_while(seen, timeout, |n| *n == start)
        .unwrap_or_else(|e| e.into_inner());
}

type Job = Box<dyn FnOnce() + Send>;

/// A file's worker thread and its queue.
struct Worker {
    queue: mpsc::SyncSender<Job>,
    thread: JoinHandle<()>,
}

static WORKERS: LazyLock<Mutex<HashMap<Handle, Worker>>> = LazyLock::new(Default::default);

/// A pointer to an open file that may cross to its worker: the file outlives the
/// worker, whose thread `close` joins before the file is freed.
#[derive(Clone, Copy)]
struct FilePtr(*const MpiFile);
// SAFETY: see above; MpiFile's operations used by the worker take &self and are safe
// to run beside the calling thread's (weft-client's File is Sync).
unsafe impl Send for FilePtr {}

// The worker uses a file's weft-client handle beside the calling thread.
const _: fn() = || {
    fn sync<T: Sync>() {}
    sync::<weft_client::File>();
};

/// Starts a nonblocking independent access on `file` (handle `fh`).
pub fn start(
    fh: Handle,
    file: &MpiFile,
    flags: i32,
    offset: i64,
    buf: *mut u8,
    count: i32,
    datatype: Handle,
) -> Result<Arc<Op>> {
    let prepared: Prepared = file.prepare_nonblocking(flags, offset, buf, count, datatype)?;
    let op = Op::new(fh);
    let ptr = FilePtr(file as *const MpiFile);
    let job_op = op.clone();
    let job: Job = Box::new(move || {
        let ptr = ptr;
        // SAFETY: FilePtr's invariant: the file outlives its worker's jobs.
        let file = unsafe { &*ptr.0 };
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| file.run_prepared(&prepared)))
            .unwrap_or_else(|_| Err(MpiioError::new(ErrorClass::Intern, "nonblocking I/O panicked")));
        job_op.finish(result);
    });
    let queue = {
        let mut workers = WORKERS.lock().unwrap_or_else(|e| e.into_inner());
        match workers.entry(fh) {
            std::collections::hash_map::Entry::Occupied(w) => w.get().queue.clone(),
            std::collections::hash_map::Entry::Vacant(slot) => {
                let (tx, rx) = mpsc::sync_channel::<Job>(QUEUED_MAX);
                let thread = std::thread::Builder::new()
                    .name("weft-mpiio-nb".into())
                    .spawn(move || {
                        for job in rx {
                            job();
                        }
                    })
                    .map_err(|e| {
                        MpiioError::new(
                            ErrorClass::Intern,
                            format!("cannot start the I/O thread of a weft: file: {e}"),
                        )
                    })?;
                slot.insert(Worker { queue: tx, thread }).queue.clone()
            }
        }
    };
    queue
        .send(job)
        .map_err(|_| MpiioError::new(ErrorClass::Intern, "the I/O thread of the weft: file has stopped"))?;
    Ok(op)
}

/// An operation that is already over (collective nonblocking calls, done at the call).
pub fn done(fh: Handle, result: Result<u64>) -> Arc<Op> {
    let op = Op::new(fh);
    op.finish(result);
    op
}

/// At close: lets the file's queued operations finish and stops its worker.
pub fn close(fh: Handle) {
    let worker = WORKERS.lock().unwrap_or_else(|e| e.into_inner()).remove(&fh);
    if let Some(Worker { queue, thread }) = worker {
        drop(queue);
        let _ = thread.join();
    }
}

/// Waits until every operation queued to the file so far has finished (before a call
/// that changes what they depend on, such as the view).
pub fn drain(fh: Handle) {
    let queue = WORKERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&fh)
        .map(|w| w.queue.clone());
    if let Some(queue) = queue {
        let marker = Op::new(fh);
        let m = marker.clone();
        if queue.send(Box::new(move || m.finish(Ok(0)))).is_ok() {
            marker.wait();
        }
    }
}

/// Requests bound to operations: MPI_Request value → operation (a pointer from
/// `Arc::into_raw`, owned by the request's extra state until its free function).
static BOUND: LazyLock<Mutex<HashMap<Handle, usize>>> = LazyLock::new(Default::default);
static BOUND_COUNT: AtomicUsize = AtomicUsize::new(0);

pub fn bind(request: Handle, op: usize) {
    let mut b = BOUND.lock().unwrap_or_else(|e| e.into_inner());
    if b.insert(request, op).is_none() {
        BOUND_COUNT.fetch_add(1, Ordering::SeqCst);
    }
}

pub fn bound_count() -> usize {
    BOUND_COUNT.load(Ordering::SeqCst)
}

pub fn bound(request: Handle) -> usize {
    BOUND
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&request)
        .copied()
        .unwrap_or(0)
}

pub fn unbind(request: Handle) {
    let mut b = BOUND.lock().unwrap_or_else(|e| e.into_inner());
    if b.remove(&request).is_some() {
        BOUND_COUNT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The operation behind a pointer from `Arc::into_raw` that is still owned.
///
/// # Safety
/// `op` came from [`into_raw`] and [`release`] was not called on it yet.
pub unsafe fn op_ref<'a>(op: usize) -> &'a Op {
    // SAFETY: the caller's contract.
    unsafe { &*(op as *const Op) }
}

pub fn into_raw(op: Arc<Op>) -> usize {
    Arc::into_raw(op) as usize
}

/// # Safety
/// `op` came from [`into_raw`] and is released once.
pub unsafe fn release(op: usize) {
    // SAFETY: the caller's contract.
    drop(unsafe { Arc::from_raw(op as *const Op) });
}
