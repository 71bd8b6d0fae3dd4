//! `weft:/path` names: the same path in the first Weft mount of this process whose
//! cluster it serves (paths inside a mount need no rewriting: the kernel resolves them,
//! and the descriptor's device says which files are Weft's). Without such a mount the
//! name is passed to libc as it is.

use std::ffi::{c_char, CStr, CString};
use std::os::unix::ffi::OsStrExt;

/// The mount path for a `weft:` name, when there is one.
///
/// # Safety
/// `path` is null or a C string.
pub unsafe fn rewrite(path: *const c_char) -> Option<CString> {
    if path.is_null() || crate::guard::busy() || !crate::guard::active() {
        return None;
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    let rest = bytes.strip_prefix(b"weft:")?;
    crate::guard::enter(|| {
        let mountpoint = crate::served::served_mountpoint()?;
        let mut out = mountpoint.as_os_str().as_bytes().to_vec();
        if !rest.starts_with(b"/") {
            out.push(b'/');
        }
        out.extend_from_slice(rest);
        CString::new(out).ok()
    })
    .flatten()
}
