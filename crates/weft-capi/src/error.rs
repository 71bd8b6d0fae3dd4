//! The error convention at the C boundary: `-errno` returns, the detailed message of each
//! thread's last failure, `weft_strerror`, and the guard that every exported function runs
//! its body in, which also turns panics into `-EIO` so that none unwinds into C.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use weft_client::ClientError;

/// Why a call failed: the errno it returns and the message kept for
/// `weft_last_error_message`.
#[derive(Debug, Clone)]
pub struct Failure {
    pub errno: c_int,
    pub message: String,
}

impl Failure {
    pub fn new(errno: c_int, message: impl Into<String>) -> Failure {
        Failure {
            errno,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(libc::EINVAL, message)
    }

    /// Prefixes the message with what was being worked on (a path, usually).
    pub fn context(self, what: &str) -> Failure {
        Failure::new(self.errno, format!("{what}: {}", self.message))
    }
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Failure {
        Failure::new(e.errno(), e.to_string())
    }
}

pub type Outcome<T> = Result<T, Failure>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn record(function: &str, failure: &Failure) {
    let text = format!("{function}: {}", failure.message).replace('\0', "\\0");
    let text = CString::new(text).expect("NUL bytes were replaced");
    LAST_ERROR.with(|last| *last.borrow_mut() = text);
}

/// Runs the body of the exported function `function`: a failure is recorded as this
/// thread's last error and returned as a positive errno; a panic becomes `EIO`.
pub fn guard<T>(function: &str, body: impl FnOnce() -> Outcome<T>) -> Result<T, c_int> {
    // The handles hold no invariants that a panic half-way could break in a way that
    // matters more than the panic itself, which is reported as EIO.
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => return Ok(value),
        Ok(Err(failure)) => failure,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Failure::new(libc::EIO, format!("internal error (a bug in Weft): {what}"))
        }
    };
    record(function, &failure);
    // An errno of 0 or below would read as success: never return it as a failure.
    Err(if failure.errno > 0 {
        failure.errno
    } else {
        libc::EIO
    })
}

/// For functions returning `int`: the body's value, or `-errno`.
pub fn int_call(function: &str, body: impl FnOnce() -> Outcome<c_int>) -> c_int {
    guard(function, body).unwrap_or_else(|errno| -errno)
}

/// For functions returning `ssize_t`: the body's value, or `-errno`.
pub fn ssize_call(function: &str, body: impl FnOnce() -> Outcome<libc::ssize_t>) -> libc::ssize_t {
    guard(function, body).unwrap_or_else(|errno| -(errno as libc::ssize_t))
}

/// For functions returning a handle: the handle, or NULL with `errno` set.
pub fn pointer_call<T>(function: &str, body: impl FnOnce() -> Outcome<*mut T>) -> *mut T {
    guard(function, body).unwrap_or_else(|errno| {
        set_errno(errno);
        std::ptr::null_mut()
    })
}

fn set_errno(errno: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno, always valid.
    unsafe { *libc::__errno_location() = errno };
}

/// A short description of an errno value, for messages. Takes `err` or `-err` alike, so
/// a function's return value can be passed directly. The string is static: never free it.
#[no_mangle]
pub extern "C" fn weft_strerror(err: c_int) -> *const c_char {
    strerror_text(err).as_ptr()
}

fn strerror_text(err: c_int) -> &'static CStr {
    match err.checked_abs().unwrap_or(-1) {
        0 => c"success",
        libc::EPERM => c"operation not permitted",
        libc::ENOENT => c"no such file or directory",
        libc::EIO => c"input/output error",
        libc::EBADF => c"bad handle (not open for this kind of access)",
        libc::EFAULT => c"bad address (NULL buffer)",
        libc::EACCES => c"permission denied",
        libc::EBUSY => c"resource busy",
        libc::EEXIST => c"file exists",
        libc::ENOTDIR => c"not a directory",
        libc::EISDIR => c"is a directory",
        libc::EINVAL => c"invalid argument",
        libc::EFBIG => c"file too large",
        libc::ENOSPC => c"no space left on device",
        libc::ENAMETOOLONG => c"file name too long",
        libc::ENOTEMPTY => c"directory not empty",
        libc::EOPNOTSUPP => c"operation not supported",
        libc::ECONNREFUSED => c"connection refused",
        libc::ETIMEDOUT => c"timed out",
        libc::EHOSTDOWN => c"server unavailable",
        libc::ESTALE => c"stale file handle (file removed)",
        _ => c"unknown error",
    }
}

/// The detailed message of the last failed Weft call on the calling thread (the
/// function's name and what went wrong, for example which server did not answer), or
/// "" if none failed yet. Successful calls leave it as it is. The string belongs to the
/// library and stays valid until the next failing Weft call on this thread.
#[no_mangle]
pub extern "C" fn weft_last_error_message() -> *const c_char {
    // The CString lives in the thread-local, which outlives the pointer's promised use.
    LAST_ERROR.with(|last| last.borrow().as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        // SAFETY: weft_last_error_message returns a valid NUL-terminated string.
        unsafe { CStr::from_ptr(weft_last_error_message()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_eio_with_its_message() {
        let r = int_call("weft_test", || panic!("boom {}", 42));
        assert_eq!(r, -libc::EIO);
        assert!(last().contains("weft_test: internal error"), "{}", last());
        assert!(last().contains("boom 42"), "{}", last());
    }

    #[test]
    fn failures_are_negative_and_messages_are_per_thread() {
        assert_eq!(
            int_call("weft_a", || Err(Failure::invalid("bad x"))),
            -libc::EINVAL
        );
        assert_eq!(last(), "weft_a: bad x");
        std::thread::spawn(|| assert_eq!(last(), "")).join().unwrap();
        // Success does not clear it.
        assert_eq!(int_call("weft_b", || Ok(3)), 3);
        assert_eq!(last(), "weft_a: bad x");
        // An errno of 0 must not look like success.
        assert_eq!(int_call("weft_c", || Err(Failure::new(0, "odd"))), -libc::EIO);
        assert_eq!(
            ssize_call("weft_d", || Err(Failure::new(libc::ENOSPC, "full"))),
            -(libc::ENOSPC as libc::ssize_t)
        );
    }

    #[test]
    fn pointer_calls_set_errno() {
        let p: *mut u8 = pointer_call("weft_e", || Err(Failure::new(libc::ENOENT, "gone")));
        assert!(p.is_null());
        // SAFETY: reading this thread's errno.
        assert_eq!(unsafe { *libc::__errno_location() }, libc::ENOENT);
    }

    #[test]
    fn messages_with_nul_bytes_are_kept() {
        int_call("weft_f", || Err(Failure::invalid("a\0b")));
        assert_eq!(last(), "weft_f: a\\0b");
    }

    #[test]
    fn strerror_takes_both_signs_and_unknown_values() {
        let s = |e| unsafe { CStr::from_ptr(weft_strerror(e)) }.to_str().unwrap();
        assert_eq!(s(libc::ENOENT), "no such file or directory");
        assert_eq!(s(-libc::ENOENT), "no such file or directory");
        assert_eq!(s(12345), "unknown error");
        assert_eq!(s(c_int::MIN), "unknown error");
    }
}
