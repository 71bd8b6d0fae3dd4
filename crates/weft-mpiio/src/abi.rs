//! The Rust half's C functions (`weft_mpiio_*`, declared in `csrc/shim.h`), called by
//! `csrc/weft_mpiio.c` for Weft files: the registry of open Weft files, argument
//! checks, and a guard that turns a panic into MPI_ERR_INTERN instead of unwinding
//! into C.

use std::ffi::{c_char, c_int, c_void};

use crate::error::report;
use crate::error::{ErrorClass, MpiioError};
use crate::file::MpiFile;
use crate::handles::{file, guard, out, register, registry, text, FINT_BASE};
use crate::mpi::Handle;

/// Copies the view's data representation, "native" or "external32", into a data
/// representation buffer (if any).
fn write_datarep(datarep: *mut c_char, external32: bool) {
    if !datarep.is_null() {
        let name: &[u8] = if external32 { b"external32\0" } else { b"native\0" };
        // SAFETY: MPI's contract: room for MPI_MAX_DATAREP_STRING (128) bytes.
        unsafe { std::ptr::copy_nonoverlapping(name.as_ptr().cast(), datarep, name.len()) };
    }
}

#[no_mangle]
pub extern "C" fn weft_mpiio_is_ours(fh: Handle) -> c_int {
    registry().slot_of.contains_key(&fh) as c_int
}

#[no_mangle]
pub extern "C" fn weft_mpiio_open(
    comm: Handle,
    name: *const c_char,
    amode: c_int,
    info: Handle,
    errhandler: Handle,
    fh: *mut Handle,
) -> c_int {
    guard(|| {
        let name = text(name, "file name")?;
        let opened = crate::profile::open(name, || {
            let file = MpiFile::open(comm, name, amode, info, errhandler)?;
            crate::shared::opened(&file);
            register(file)
        })?;
        crate::stripped::opened(opened, name);
        out(fh, opened)
    })
}

#[no_mangle]
pub extern "C" fn weft_mpiio_close(fh: Handle) -> c_int {
    guard(|| {
        // Queued nonblocking I/O finishes first (MPI requires the program to have
        // completed its requests; their I/O must not outlive the file).
        crate::nonblocking::close(fh);
        crate::requests::forget_split(fh);
        crate::stripped::closed(fh);
        let shared = crate::shared::closing(file(fh)?);
        {
            let mut r = registry();
            if let Some(slot) = r.slot_of.remove(&fh) {
                r.slots[slot] = None;
            }
        }
        // SAFETY: the pointer came from Box::into_raw and is no longer registered.
        let file = unsafe { Box::from_raw(fh as *mut MpiFile) };
        crate::profile::close(fh, || {
            let closed = file.close();
            let used = closed.as_ref().is_ok_and(|used| *used);
            crate::shared::drop_pointer(shared, used);
            closed.map(|_| ())
        })
    })
}

#[no_mangle]
pub extern "C" fn weft_mpiio_delete(name: *const c_char, _info: Handle) -> c_int {
    guard(|| MpiFile::delete(text(name, "file name")?))
}

#[no_mangle]
pub extern "C" fn weft_mpiio_sync(fh: Handle) -> c_int {
    guard(|| crate::profile::call(fh, "MPI_File_sync", || file(fh)?.sync()))
}

#[no_mangle]
pub extern "C" fn weft_mpiio_get_size(fh: Handle, size: *mut i64) -> c_int {
    guard(|| out(size, file(fh)?.size()? as i64))
}

#[no_mangle]
pub extern "C" fn weft_mpiio_set_size(fh: Handle, size: i64) -> c_int {
    guard(|| crate::profile::call(fh, "MPI_File_set_size", || file(fh)?.set_size(size, false)))
}

#[no_mangle]
pub extern "C" fn weft_mpiio_preallocate(fh: Handle, size: i64) -> c_int {
    guard(|| crate::profile::call(fh, "MPI_File_preallocate", || file(fh)?.set_size(size, true)))
}

#[no_mangle]
pub extern "C" fn weft_mpiio_get_info(fh: Handle, info: *mut Handle) -> c_int {
    guard(|| out(info, file(fh)?.info()?))
}

#[no_mangle]
pub extern "C" fn weft_mpiio_set_info(fh: Handle, info: Handle) -> c_int {
    guard(|| file(fh)?.set_info(info))
}

#[no_mangle]
pub extern "C" fn weft_mpiio_set_atomicity(fh: Handle, flag: c_int) -> c_int {
    guard(|| file(fh)?.set_atomicity(flag != 0))
}

#[no_mangle]
pub extern "C" fn weft_mpiio_get_atomicity(fh: Handle, flag: *mut c_int) -> c_int {
    guard(|| out(flag, file(fh)?.atomicity() as c_int))
}

#[no_mangle]
pub extern "C" fn weft_mpiio_get_amode(fh: Handle, amode: *mut c_int) -> c_int {
    guard(|| out(amode, file(fh)?.amode()))
}

#[no_mangle]
pub extern "C" fn weft_mpiio_get_group(fh: Handle, group: *mut Handle) -> c_int {
    guard(|| out(group, file(fh)?.group()?))
}

#[no_mangle]
pub extern "C" fn weft_mpiio_set_view(
    fh: Handle,
    disp: i64,
    etype: Handle,
    filetype: Handle,
    datarep: *const c_char,
    info: Handle,
) -> c_int {
    guard(|| {
        let datarep = text(datarep, "data representation")?;
        // Queued nonblocking I/O of this rank used the old view.
        crate::nonblocking::drain(fh);
        crate::profile::call(fh, "MPI_File_set_view", || {
            let f = file(fh)?;
            let disp = crate::shared::displacement(f, disp)?;
            f.set_view(disp, etype, filetype, datarep, info)?;
            crate::shared::view_changed(f);
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn weft_mpiio_get_view(
    fh: Handle,
    disp: *mut i64,
    etype: *mut Handle,
    filetype: *mut Handle,
    datarep: *mut c_char,
) -> c_int {
    guard(|| {
        let f_ = file(fh)?;
        let (d, e, f) = f_.view()?;
        out(disp, d as i64)?;
        out(etype, e)?;
        out(filetype, f)?;
        write_datarep(datarep, f_.external32());
        Ok(())
    })
}

/// 1 when the view of `fh` is in `external32` (the C half then converts the data), else 0.
#[no_mangle]
pub extern "C" fn weft_mpiio_is_external32(fh: Handle) -> c_int {
    file(fh).map(|f| c_int::from(f.external32())).unwrap_or(0)
}

/// Fails with `class` and `message` (kept for the error code the C half makes, as a
/// Rust failure's): for failures found in the C half. Returns `class`.
#[no_mangle]
pub extern "C" fn weft_mpiio_fail_with(class: c_int, message: *const c_char) -> c_int {
    let class = ErrorClass::from_code(class).unwrap_or(ErrorClass::Other);
    let message = text(message, "message").unwrap_or("failed").to_string();
    report(&MpiioError::new(class, message));
    class as c_int
}

#[no_mangle]
pub extern "C" fn weft_mpiio_seek(fh: Handle, offset: i64, whence: c_int) -> c_int {
    guard(|| crate::profile::call(fh, "MPI_File_seek", || file(fh)?.seek(offset, whence)))
}

#[no_mangle]
pub extern "C" fn weft_mpiio_get_position(fh: Handle, offset: *mut i64) -> c_int {
    guard(|| out(offset, file(fh)?.position() as i64))
}

#[no_mangle]
pub extern "C" fn weft_mpiio_get_byte_offset(fh: Handle, offset: i64, disp: *mut i64) -> c_int {
    guard(|| out(disp, file(fh)?.byte_offset(offset)? as i64))
}

#[no_mangle]
pub extern "C" fn weft_mpiio_get_type_extent(fh: Handle, datatype: Handle, extent: *mut i64) -> c_int {
    guard(|| {
        file(fh)?;
        out(extent, crate::mpi::type_extent(datatype)?.1)
    })
}

#[no_mangle]
pub extern "C" fn weft_mpiio_io(
    fh: Handle,
    flags: c_int,
    offset: i64,
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    bytes: *mut i64,
) -> c_int {
    guard(|| {
        let n = crate::profile::io(fh, flags, || {
            let f = file(fh)?;
            crate::shared::check_individual(f)?;
            f.io(flags, offset, buf.cast(), count, datatype)
        })?;
        out(bytes, n as i64)
    })
}

/// Copies this thread's last error message (NUL-terminated, cut to `len - 1` bytes)
/// into `buf`; returns its full length, 0 if the last call succeeded.
#[no_mangle]
pub extern "C" fn weft_mpiio_last_error(buf: *mut c_char, len: usize) -> usize {
    let message = crate::error::last_error();
    copy_text(&message, buf, len);
    message.len()
}

/// `weft_mpiio_last_error`, and forgets the message: the C half takes it for the error
/// code of the failure it belongs to (`csrc/weft_mpiio.c`, `mpi_code`).
#[no_mangle]
pub extern "C" fn weft_mpiio_take_last_error(buf: *mut c_char, len: usize) -> usize {
    let message = crate::error::take_error();
    copy_text(&message, buf, len);
    message.len()
}

/// Copies `text` into the caller's buffer `buf` of `len` bytes, cut and NUL-terminated.
fn copy_text(text: &str, buf: *mut c_char, len: usize) {
    if buf.is_null() || len == 0 {
        return;
    }
    let n = text.len().min(len - 1);
    // SAFETY: the caller gives a buffer of `len` bytes; n < len.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
}

#[no_mangle]
pub extern "C" fn weft_mpiio_errhandler(fh: Handle) -> Handle {
    file(fh).map_or(0, |f| f.errhandler())
}

#[no_mangle]
pub extern "C" fn weft_mpiio_set_errhandler(fh: Handle, errhandler: Handle) {
    if let Ok(f) = file(fh) {
        f.set_errhandler(errhandler);
    }
}

#[no_mangle]
pub extern "C" fn weft_mpiio_fint(fh: Handle) -> c_int {
    registry()
        .slot_of
        .get(&fh)
        .map_or(0, |&slot| FINT_BASE + slot as i32)
}

#[no_mangle]
pub extern "C" fn weft_mpiio_from_fint(fint: c_int) -> Handle {
    let Some(slot) = fint.checked_sub(FINT_BASE).filter(|s| *s >= 0) else {
        return 0;
    };
    registry()
        .slots
        .get(slot as usize)
        .copied()
        .flatten()
        .unwrap_or(0)
}

#[no_mangle]
pub extern "C" fn weft_mpiio_finalize() {
    guard(|| {
        // Files left open: their write-behind buffers go out now, before the MPI library
        // (and often the process) ends; a failure is said, as close would have said it.
        let open: Vec<usize> = registry().slots.iter().flatten().copied().collect();
        for fh in open {
            if let Err(e) = file(fh).and_then(|f| f.settle_at_finalize()) {
                eprintln!(
                    "weft-mpiio: MPI_Finalize with a weft: file still open: its last writes failed: {e}"
                );
            }
        }
        crate::profile::finalize();
        crate::spawn::finalize();
        Ok(())
    });
}
