//! The handles the library gave to C and C has not closed yet, so that a handle used
//! after its close (a second `weft_close`, a `weft_pread` on a closed file, a freed
//! type) is refused with `EBADF` before anything dereferences it, instead of touching
//! freed memory.
//!
//! A handle is the address of a boxed value; the set holds each live handle's address
//! with its kind (its Rust type), so a closed handle and a pointer of another kind are
//! told from a live one without reading through them. What this cannot tell: once a
//! handle is closed, the allocator may give its address to a new handle of the same
//! kind, and the stale pointer then names that one (as a reused file descriptor number
//! does in POSIX). Nor does it make closing a handle safe while another thread is
//! still in a call on it. The set holds one entry per live handle, nothing more.

use std::any::TypeId;
use std::collections::HashSet;
use std::sync::{LazyLock, PoisonError, RwLock};

type Key = (usize, TypeId);

static LIVE: LazyLock<RwLock<HashSet<Key>>> = LazyLock::new(Default::default);

fn key<T: 'static>(handle: *const T) -> Key {
    (handle as usize, TypeId::of::<T>())
}

/// Gives `value` to C as a new handle.
pub fn give<T: 'static>(value: T) -> *mut T {
    let handle = Box::into_raw(Box::new(value));
    LIVE.write()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key(handle));
    handle
}

/// Whether `handle` was returned by `give` and not yet taken back by `take`.
pub fn is_live<T: 'static>(handle: *const T) -> bool {
    LIVE.read()
        .unwrap_or_else(PoisonError::into_inner)
        .contains(&key(handle))
}

/// Takes back a handle C closes; `None` (and nothing touched) for one that is not live:
/// closed already, or never returned by the library.
pub fn take<T: 'static>(handle: *mut T) -> Option<Box<T>> {
    let removed = LIVE
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&key(handle));
    // SAFETY: only `give` adds to the set, with a pointer from `Box::into_raw`, and the
    // entry was there until this call removed it: this is the pointer's only take.
    removed.then(|| unsafe { Box::from_raw(handle) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_is_live_from_give_to_take_and_taken_once() {
        let a = give(7u32);
        let b = give(8u64);
        assert!(is_live(a) && is_live(b));
        // The same address as another kind is not that kind's handle.
        assert!(!is_live(a.cast::<u64>()));
        assert_eq!(take(a).map(|v| *v), Some(7));
        assert!(!is_live(a));
        assert!(take(a).is_none(), "a second take of the same handle");
        assert!(take(std::ptr::null_mut::<u32>()).is_none());
        assert_eq!(take(b).map(|v| *v), Some(8));
    }
}
