//! The read buffer of a FUSE worker thread, for reads the read pool does not take.
//!
//! Most reads go into a buffer of the process's read pool (weft-rpc `shm::Pool`), where
//! the io servers place the bytes themselves. Without one (no pool, every buffer busy),
//! a cold read through the mount copies every byte twice in this daemon: from the io
//! servers' shared-memory regions into this buffer (the connections' reader threads),
//! and from this buffer into the kernel's page cache (the reply's write to /dev/fuse,
//! which pins the buffer one 4 KiB page at a time). Backing the buffer with transparent
//! huge pages where the kernel offers them (`madvise` mode) makes both cheaper: the
//! pinning walks two levels of page table fewer and the copies miss the TLB 512 times
//! less often. Where huge pages are off, it is plain anonymous memory, as before.

use crate::kernel::REQUEST_BYTES_MAX;

/// Alignment (and size unit) of a transparent huge page on x86-64 and arm64 (4 KiB base pages).
const HUGE_PAGE_BYTES: usize = 2 << 20;

/// `REQUEST_BYTES_MAX` bytes of anonymous memory, huge-page aligned, unmapped on drop.
pub(crate) struct ReadBuffer {
    base: *mut u8,
}

impl ReadBuffer {
    const LEN: usize = (REQUEST_BYTES_MAX as usize).div_ceil(HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES;

    /// Maps the buffer; fails when the kernel refuses the mapping (no memory, or the
    /// process's mapping limits).
    pub(crate) fn new() -> std::io::Result<ReadBuffer> {
        // Map one huge page more than needed, keep an aligned window, give back the rest.
        let span = Self::LEN + HUGE_PAGE_BYTES;
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let start = raw as usize;
        let aligned = start.next_multiple_of(HUGE_PAGE_BYTES);
        let (head, tail) = (aligned - start, span - (aligned - start) - Self::LEN);
        // SAFETY: both ranges lie inside the mapping just made and outside the window
        // kept; munmap of a page-aligned part of our own mapping cannot fail otherwise.
        unsafe {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap((aligned + Self::LEN) as *mut libc::c_void, tail);
            }
            // Best effort: refused where huge pages are off ("never") or unsupported.
            libc::madvise(aligned as *mut libc::c_void, Self::LEN, libc::MADV_HUGEPAGE);
        }
        Ok(ReadBuffer {
            base: aligned as *mut u8,
        })
    }

    /// The whole buffer (at least `REQUEST_BYTES_MAX` bytes; zeros until written).
    pub(crate) fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the window is mapped read-write for as long as `self` lives, and only
        // reachable through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.base, Self::LEN) }
    }
}

impl Drop for ReadBuffer {
    fn drop(&mut self) {
        // SAFETY: the window `new` mapped, no longer borrowed.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, Self::LEN);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_huge_page_aligned_zeroed_writable_and_independent() {
        let mut a = ReadBuffer::new().unwrap();
        let mut b = ReadBuffer::new().unwrap();
        for buffer in [&mut a, &mut b] {
            let bytes = buffer.bytes();
            assert!(bytes.len() >= REQUEST_BYTES_MAX as usize);
            assert_eq!(bytes.len() % HUGE_PAGE_BYTES, 0);
            assert_eq!(bytes.as_ptr() as usize % HUGE_PAGE_BYTES, 0);
            assert!(bytes.iter().all(|&x| x == 0));
        }
        a.bytes().fill(0xa5);
        let last = b.bytes().len() - 1;
        b.bytes()[last] = 7;
        assert!(a.bytes().iter().all(|&x| x == 0xa5));
        assert_eq!(b.bytes().iter().filter(|&&x| x != 0).count(), 1);
        drop(a);
        // Mapping and unmapping many does not run out (nothing leaks).
        for _ in 0..200 {
            let mut c = ReadBuffer::new().unwrap();
            c.bytes()[0] = 1;
        }
    }
}
