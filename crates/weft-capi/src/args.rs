//! Checks of what C passes in, done before anything is sent: NULL and closed handles,
//! NULL pointers, paths that are not UTF-8, sizes and offsets out of range, mode bits.

use crate::error::{Failure, Outcome};
use crate::live;
use std::ffi::{c_char, CStr};

/// NULL is `EINVAL`; a handle the library did not give out, or that was closed, is
/// `EBADF` (as close(2) says of a closed descriptor).
fn check_live<T: 'static>(handle: *const T, what: &str) -> Outcome<()> {
    if handle.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    if !live::is_live(handle) {
        return Err(Failure::new(
            libc::EBADF,
            format!("{what} is not an open handle: closed already, or not one this library returned"),
        ));
    }
    Ok(())
}

/// A handle argument: NULL is `EINVAL`, a closed one `EBADF`.
///
/// # Safety
/// No other thread closes `handle` during the call.
pub unsafe fn handle<'a, T: 'static>(handle: *mut T, what: &str) -> Outcome<&'a mut T> {
    check_live(handle, what)?;
    // SAFETY: live (given by `live::give`, not yet taken back), and unaliased across this
    // call (the caller's promise, as for FILE*); the functions that share one between
    // threads take `&`.
    Ok(unsafe { &mut *handle })
}

/// A shared handle argument (for handles that threads may use at once).
///
/// # Safety
/// As for [`handle`].
pub unsafe fn shared<'a, T: 'static>(handle: *const T, what: &str) -> Outcome<&'a T> {
    check_live(handle, what)?;
    // SAFETY: see above.
    Ok(unsafe { &*handle })
}

/// A handle being closed: NULL is `EINVAL`, one closed already `EBADF`; from here on
/// it is closed, whatever the rest of the close does.
pub fn closing<T: 'static>(handle: *mut T, what: &str) -> Outcome<Box<T>> {
    check_live(handle, what)?;
    // Another thread's close may have taken it between the check and here.
    live::take(handle).ok_or_else(|| Failure::new(libc::EBADF, format!("{what} is closed already")))
}

/// A NUL-terminated UTF-8 string argument (a path, an address).
///
/// # Safety
/// A non-NULL `text` must point to a NUL-terminated string that lives for `'a`.
pub unsafe fn string<'a>(text: *const c_char, what: &str) -> Outcome<&'a str> {
    if text.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL and NUL-terminated (the caller's promise).
    let bytes = unsafe { CStr::from_ptr(text) };
    bytes.to_str().map_err(|_| {
        Failure::invalid(format!(
            "{what} is not UTF-8: {:?}",
            String::from_utf8_lossy(bytes.to_bytes())
        ))
    })
}

/// An output struct argument: NULL is `EINVAL`.
///
/// # Safety
/// A non-NULL `out` must point to writable memory for one `T`.
pub unsafe fn output<'a, T>(out: *mut T, what: &str) -> Outcome<&'a mut T> {
    // SAFETY: the caller's promise; the structs written are plain data, so whatever the
    // memory held before is simply overwritten.
    unsafe { out.as_mut() }.ok_or_else(|| Failure::invalid(format!("{what} is NULL")))
}

/// A byte count for a transfer: at most `SSIZE_MAX`, so that the result fits `ssize_t`.
pub fn count(count: usize) -> Outcome<usize> {
    if count > isize::MAX as usize {
        return Err(Failure::invalid(format!(
            "count {count} is larger than SSIZE_MAX"
        )));
    }
    Ok(count)
}

/// A file offset or length: not negative.
pub fn offset(value: i64, what: &str) -> Outcome<u64> {
    u64::try_from(value).map_err(|_| Failure::invalid(format!("{what} {value} is negative")))
}

/// Permission bits (`07777`); anything else, a file type included, is `EINVAL`.
pub fn mode(mode: u32) -> Outcome<u32> {
    if mode & !0o7777 != 0 {
        return Err(Failure::invalid(format!(
            "mode {mode:#o} has bits other than permission bits (07777)"
        )));
    }
    Ok(mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_arguments_are_einval() {
        let e = |r: Outcome<u64>| r.unwrap_err().errno;
        assert_eq!(e(offset(-1, "offset")), libc::EINVAL);
        assert_eq!(offset(i64::MAX, "offset").unwrap(), i64::MAX as u64);
        assert_eq!(count(usize::MAX).unwrap_err().errno, libc::EINVAL);
        assert_eq!(count(isize::MAX as usize).unwrap(), isize::MAX as usize);
        assert_eq!(mode(0o100644).unwrap_err().errno, libc::EINVAL);
        assert_eq!(mode(0o7777).unwrap(), 0o7777);
        // SAFETY: NULL and a valid string.
        unsafe {
            assert_eq!(string(std::ptr::null(), "path").unwrap_err().errno, libc::EINVAL);
            assert_eq!(
                string(c"\xff/a".as_ptr(), "path").unwrap_err().errno,
                libc::EINVAL
            );
            assert_eq!(string(c"/a".as_ptr(), "path").unwrap(), "/a");
            assert!(handle::<u8>(std::ptr::null_mut(), "file").is_err());
        }
    }
}
