//! The Rust functions behind `csrc/requests.c` (declared in `csrc/requests.h`):
//! nonblocking operations and the requests bound to them ([`crate::nonblocking`]),
//! split collectives, and the shared file pointer calls ([`crate::shared`]).

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use crate::error::{ErrorClass, MpiioError, Result};
use crate::handles::{file, guard, out};
use crate::mpi::Handle;
use crate::nonblocking::{self, op_ref};

/// `WM_IO_*` flags beyond those of `weft_mpiio_io`.
pub const IO_ORDERED: i32 = 8;
pub const IO_SHARED: i32 = 16;

#[no_mangle]
pub extern "C" fn weft_mpiio_istart(
    fh: Handle,
    flags: c_int,
    offset: i64,
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    op: *mut usize,
) -> c_int {
    guard(|| {
        let f = file(fh)?;
        let started = if flags & IO_SHARED != 0 {
            crate::shared::start(fh, f, flags & 1 != 0, buf.cast(), count, datatype)?
        } else {
            crate::shared::check_individual(f)?;
            nonblocking::start(fh, f, flags, offset, buf.cast(), count, datatype)?
        };
        out(op, nonblocking::into_raw(started))
    })
}

#[no_mangle]
pub extern "C" fn weft_mpiio_op_done(fh: Handle, error: c_int, bytes: i64) -> usize {
    let result = match ErrorClass::from_code(error) {
        Some(class) => Err(MpiioError::new(class, "nonblocking call failed")),
        None => Ok(bytes as u64),
    };
    nonblocking::into_raw(nonblocking::done(fh, result))
}

#[no_mangle]
pub extern "C" fn weft_mpiio_op_is_done(op: usize) -> c_int {
    // SAFETY: the C side passes operations it still owns.
    unsafe { op_ref(op) }.is_done() as c_int
}

#[no_mangle]
pub extern "C" fn weft_mpiio_op_wait(op: usize) {
    // SAFETY: as above.
    unsafe { op_ref(op) }.wait()
}

#[no_mangle]
pub extern "C" fn weft_mpiio_op_status(op: usize, bytes: *mut i64) -> c_int {
    // SAFETY: as above.
    let (class, n) = unsafe { op_ref(op) }.status();
    let _ = out(bytes, n as i64);
    class
}

#[no_mangle]
pub extern "C" fn weft_mpiio_op_take_error(op: usize, fh: *mut Handle) -> c_int {
    // SAFETY: as above.
    let op = unsafe { op_ref(op) };
    let _ = out(fh, op.fh);
    op.take_error()
}

#[no_mangle]
pub extern "C" fn weft_mpiio_op_release(op: usize) {
    // SAFETY: the generalized request's free function releases its operation once.
    unsafe { nonblocking::release(op) }
}

#[no_mangle]
pub extern "C" fn weft_mpiio_op_bind(request: Handle, op: usize) {
    nonblocking::bind(request, op)
}

#[no_mangle]
pub extern "C" fn weft_mpiio_op_unbind(request: Handle) {
    nonblocking::unbind(request)
}

#[no_mangle]
pub extern "C" fn weft_mpiio_bound_op(request: Handle) -> usize {
    nonblocking::bound(request)
}

#[no_mangle]
pub extern "C" fn weft_mpiio_bound_count() -> c_int {
    nonblocking::bound_count().min(c_int::MAX as usize) as c_int
}

#[no_mangle]
pub extern "C" fn weft_mpiio_wait_any(timeout_us: c_int) {
    nonblocking::wait_any(Duration::from_micros(timeout_us.max(0) as u64))
}

// ---- Split collectives ----

/// Split collective kinds (`WM_SPLIT_*`).
const SPLIT_NAMES: [&str; 6] = [
    "MPI_File_read_at_all",
    "MPI_File_write_at_all",
    "MPI_File_read_all",
    "MPI_File_write_all",
    "MPI_File_read_ordered",
    "MPI_File_write_ordered",
];

/// The split collective outstanding on each file handle: its kind, buffer and outcome.
struct Split {
    kind: usize,
    buf: usize,
    result: Result<u64>,
}

static SPLITS: LazyLock<Mutex<HashMap<Handle, Split>>> = LazyLock::new(Default::default);

fn splits() -> std::sync::MutexGuard<'static, HashMap<Handle, Split>> {
    SPLITS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Forgets a closed file's split collective.
pub fn forget_split(fh: Handle) {
    splits().remove(&fh);
}

#[no_mangle]
pub extern "C" fn weft_mpiio_split_begin(
    fh: Handle,
    kind: c_int,
    offset: i64,
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
) -> c_int {
    guard(|| {
        let f = file(fh)?;
        let kind = usize::try_from(kind)
            .ok()
            .filter(|k| *k < SPLIT_NAMES.len())
            .ok_or_else(|| MpiioError::new(ErrorClass::Intern, "bad split collective kind"))?;
        if let Some(s) = splits().get(&fh) {
            return Err(MpiioError::new(
                ErrorClass::Io,
                format!(
                    "{}: {}_begin while {}_begin is outstanding: only one split collective \
                     per file handle (call its _end first)",
                    f.path(),
                    SPLIT_NAMES[kind],
                    SPLIT_NAMES[s.kind]
                ),
            ));
        }
        let write = kind % 2 == 1;
        if kind < 4 {
            crate::shared::check_individual(f)?;
        }
        let result = match kind {
            0..=3 => {
                let mut flags = 2 | i32::from(write);
                if kind < 2 {
                    flags |= 4;
                }
                f.io(flags, offset, buf.cast(), count, datatype)
            }
            _ => crate::shared::ordered(f, write, buf.cast(), count, datatype),
        };
        splits().insert(
            fh,
            Split {
                kind,
                buf: buf as usize,
                result: result.clone(),
            },
        );
        result.map(|_| ())
    })
}

#[no_mangle]
pub extern "C" fn weft_mpiio_split_end(
    fh: Handle,
    kind: c_int,
    buf: *const c_void,
    bytes: *mut i64,
) -> c_int {
    guard(|| {
        let f = file(fh)?;
        let name = SPLIT_NAMES
            .get(kind as usize)
            .copied()
            .unwrap_or("split collective");
        let mut all = splits();
        let Some(split) = all.get(&fh) else {
            return Err(MpiioError::new(
                ErrorClass::Io,
                format!("{}: {name}_end without a {name}_begin", f.path()),
            ));
        };
        if split.kind != kind as usize {
            return Err(MpiioError::new(
                ErrorClass::Io,
                format!(
                    "{}: {name}_end does not match the outstanding {}_begin",
                    f.path(),
                    SPLIT_NAMES[split.kind]
                ),
            ));
        }
        if split.buf != buf as usize {
            return Err(MpiioError::new(
                ErrorClass::Arg,
                format!("{}: {name}_end with another buffer than its _begin", f.path()),
            ));
        }
        let split = all.remove(&fh).expect("checked above");
        drop(all);
        out(bytes, split.result? as i64)
    })
}

// ---- Shared file pointers ----

#[no_mangle]
pub extern "C" fn weft_mpiio_shared_io(
    fh: Handle,
    flags: c_int,
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    bytes: *mut i64,
) -> c_int {
    guard(|| {
        let f = file(fh)?;
        let write = flags & 1 != 0;
        let n = if flags & IO_ORDERED != 0 {
            crate::shared::ordered(f, write, buf.cast(), count, datatype)?
        } else {
            crate::shared::independent(f, write, buf.cast(), count, datatype)?
        };
        out(bytes, n as i64)
    })
}

#[no_mangle]
pub extern "C" fn weft_mpiio_seek_shared(fh: Handle, offset: i64, whence: c_int) -> c_int {
    guard(|| crate::shared::seek(file(fh)?, offset, whence))
}

#[no_mangle]
pub extern "C" fn weft_mpiio_get_position_shared(fh: Handle, offset: *mut i64) -> c_int {
    guard(|| out(offset, crate::shared::position(file(fh)?)? as i64))
}
