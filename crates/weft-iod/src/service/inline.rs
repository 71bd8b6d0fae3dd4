//! The inline path's disk checks: a small read or write the event loop would run
//! itself, tried with `RWF_NOWAIT`, so that one that would wait for the disk goes to a
//! worker instead.

use super::*;

/// `preadv2`/`pwritev2` with `RWF_NOWAIT` on one buffer.
fn nowait(
    file: &std::fs::File,
    buf: *mut u8,
    len: usize,
    offset: u64,
    write: bool,
) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let iov = libc::iovec {
        iov_base: buf.cast(),
        iov_len: len,
    };
    // SAFETY: one iovec over a buffer the caller holds (read from, or written into
    // when `!write`), for the length given.
    let n = unsafe {
        if write {
            libc::pwritev2(file.as_raw_fd(), &iov, 1, offset as libc::off_t, libc::RWF_NOWAIT)
        } else {
            libc::preadv2(file.as_raw_fd(), &iov, 1, offset as libc::off_t, libc::RWF_NOWAIT)
        }
    };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

impl IoService {
    /// Whether a read of one range would wait for the disk: its bytes read, without
    /// waiting, into a scratch buffer of the loop's (the reply then goes out as usual,
    /// by sendfile: no memory held for it). Errors are the usual path's to report.
    pub(super) fn read_would_wait(&self, inode: InodeId, striping: &Striping, range: Range) -> bool {
        thread_local! {
            static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let layout = striping.layout();
        let index = striping.server_index as usize;
        let Ok(total) = ranges_stream_len(&layout, index, &[range]) else {
            return false;
        };
        if total > INLINE_BYTES_MAX {
            return false;
        }
        let Ok(file) = self.objects.get(inode) else {
            return false;
        };
        // This server's part of one range is one run of its object.
        let start = layout.local_size_for(index, range.offset);
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            scratch.resize(total as usize, 0);
            let mut done = 0usize;
            while done < scratch.len() {
                let rest = scratch.len() - done;
                match nowait(
                    &file,
                    scratch[done..].as_mut_ptr(),
                    rest,
                    start + done as u64,
                    false,
                ) {
                    // Past the object's end: a hole, nothing to wait for.
                    Ok(0) => return false,
                    Ok(n) => done += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        return e.kind() == std::io::ErrorKind::WouldBlock
                            || e.raw_os_error() == Some(libc::EOPNOTSUPP)
                    }
                }
            }
            false
        })
    }

    /// A write of one range that blocks on nothing: `None` if the kernel would have
    /// blocked it or a sieving write holds the object (the bytes written so far are
    /// written again by the worker that takes it over; the request is still this
    /// object's latest, see weft-rpc's `order`). Where the file system takes no
    /// non-blocking buffered write, a plain pwrite (under the same lock check).
    pub(super) fn write_nowait(
        &self,
        inode: InodeId,
        striping: &Striping,
        ranges: &[Range],
        data: &[u8],
    ) -> Result<Option<(Response, Vec<u8>)>, WireError> {
        use std::sync::atomic::Ordering;
        if self.stall.as_ref().is_some_and(|s| s.due(ranges)) {
            // The test hook holds its write on a worker, never on the loop.
            return Ok(None);
        }
        self.objects.check_writable(data.len() as u64)?;
        let layout = striping.layout();
        let index = striping.server_index as usize;
        let expected = ranges_stream_len(&layout, index, ranges)?;
        check_payload(data.len(), expected, "ranges")?;
        let file = self.objects.get(inode)?;
        let Ok(_shared) = self.locks.of(inode).try_read() else {
            return Ok(None);
        };
        // This server's part of one range is one run of its object.
        let start = layout.local_size_for(index, ranges[0].offset);
        let mut done = 0usize;
        while done < data.len() && !self.nowait_writes_unsupported.load(Ordering::Relaxed) {
            let rest = &data[done..];
            match nowait(
                &file,
                rest.as_ptr().cast_mut(),
                rest.len(),
                start + done as u64,
                true,
            ) {
                // Nothing written and no error: a worker finds out why.
                Ok(0) => return Ok(None),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                    self.nowait_writes_unsupported.store(true, Ordering::Relaxed);
                }
                Err(e) => return Err(io_error(e, inode, "write")),
            }
        }
        // What the file system would not write without blocking: as before.
        std::os::unix::fs::FileExt::write_all_at(&*file, &data[done..], start + done as u64)
            .map_err(|e| io_error(e, inode, "write"))?;
        Ok(Some((Response::Bytes(expected), Vec::new())))
    }
}
