//! The open files' handles and what every C entry point shares: the registry of open
//! files (a handle is an index, Fortran-safe), a handle's file, the guard that turns an
//! error or a panic into an MPI error code, strings and out-parameters from C.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{LazyLock, Mutex};

use crate::error::{report, ErrorClass, MpiioError, Result};
use crate::file::MpiFile;
use crate::mpi::Handle;

/// Most Weft files open at once in one process.
pub(crate) const OPEN_FILES_MAX: usize = 65_536;

/// Fortran handles of Weft files start here, far from the MPI library's small indices.
pub(crate) const FINT_BASE: i32 = 0x4000_0000;

/// Every open Weft file: pointer → slot, and slot → pointer (the Fortran handle).
#[derive(Default)]
pub(crate) struct Registry {
    pub(crate) slot_of: HashMap<usize, usize>,
    pub(crate) slots: Vec<Option<usize>>,
}

pub(crate) static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Default::default);

pub(crate) fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn register(file: Box<MpiFile>) -> Result<usize> {
    let mut r = registry();
    let slot = match r.slots.iter().position(Option::is_none) {
        Some(s) => s,
        None if r.slots.len() < OPEN_FILES_MAX => {
            r.slots.push(None);
            r.slots.len() - 1
        }
        None => {
            return Err(MpiioError::new(
                ErrorClass::Other,
                format!("more than {OPEN_FILES_MAX} weft: files open"),
            ))
        }
    };
    let ptr = Box::into_raw(file) as usize;
    r.slots[slot] = Some(ptr);
    r.slot_of.insert(ptr, slot);
    Ok(ptr)
}

/// The file behind a handle the C side checked with `weft_mpiio_is_ours`.
pub(crate) fn file<'a>(fh: Handle) -> Result<&'a MpiFile> {
    if !registry().slot_of.contains_key(&fh) {
        return Err(MpiioError::new(ErrorClass::BadFile, "not an open weft: file"));
    }
    // SAFETY: registered pointers come from Box::into_raw and stay valid until close
    // removes them; MPI forbids using a handle concurrently with its close.
    Ok(unsafe { &*(fh as *const MpiFile) })
}

/// Runs `f`, turning errors into classes (reported when verbose) and panics into
/// MPI_ERR_INTERN.
pub(crate) fn guard(f: impl FnOnce() -> Result<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            crate::file::forget_error();
            0
        }
        Ok(Err(e)) => {
            report(&e);
            e.class as c_int
        }
        Err(_) => {
            eprintln!("weft-mpiio: internal error (panic); see the message above");
            ErrorClass::Intern as c_int
        }
    }
}

pub(crate) fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    if p.is_null() {
        return Err(MpiioError::new(ErrorClass::Arg, format!("NULL {what}")));
    }
    // SAFETY: a NUL-terminated string from the caller (MPI's contract).
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| MpiioError::new(ErrorClass::Arg, format!("{what} is not UTF-8")))
}

pub(crate) fn out<T>(p: *mut T, value: T) -> Result<()> {
    if p.is_null() {
        return Err(MpiioError::new(ErrorClass::Arg, "NULL output argument"));
    }
    // SAFETY: a non-NULL output pointer from the caller.
    unsafe { p.write(value) };
    Ok(())
}
