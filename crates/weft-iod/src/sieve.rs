//! Turns the pieces of one request on this server (object offset and length, in stream
//! order) into few large object I/Os. Pieces adjacent in the object merge into runs;
//! runs separated by small gaps are grouped into one sieve span that is read with one
//! pread, and for a write patched in memory and written back with one pwrite (ROMIO's
//! data sieving, done where the data lives). A span of one run moves straight between
//! the request stream and the object.
//!
//! A view request is served window by window: a window is a stretch of its stream in
//! one stripe whose file extent is at most [`SIEVE_SPAN_BYTES_MAX`]. A dense window
//! (the common case of block-cyclic and strided views) is sieved whole, its bytes
//! gathered or scattered by the view engine's strided walk without visiting pieces one
//! by one; a sparse window, like a range-list request (at most
//! `weft_proto::msg::PIECES_PER_REQUEST_MAX` pieces), has its pieces walked once into a
//! run list kept per worker thread and grouped into sieve spans, with no span reading
//! over a gap of more than [`SIEVE_GAP_BYTES_MAX`]. Memory stays bounded whatever the
//! request.

use crate::objects::io_error;
use std::cell::RefCell;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::RwLock;
use weft_layout::view::View;
use weft_layout::InodeId;
use weft_proto::frame::DATA_BYTES_MAX;
use weft_proto::{ErrorCode, WireError};

/// Largest gap between two runs that a sieve span reads over: below this, reading (and
/// rewriting) the gap costs less than another system call.
pub(crate) const SIEVE_GAP_BYTES_MAX: u64 = 4096;
/// Largest object extent of a sieve span: the memory one request holds for sieving.
pub(crate) const SIEVE_SPAN_BYTES_MAX: u64 = 1 << 20;

/// A piece of a request on this server: `len` bytes at `local_offset` of the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LocalPiece {
    pub local_offset: u64,
    pub len: u64,
}

/// Consecutive runs of the stream served by one object I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Span {
    /// Object extent `[local_offset, local_offset + local_len)`.
    pub local_offset: u64,
    pub local_len: u64,
    /// Stream bytes `[stream_offset, stream_offset + stream_len)`.
    pub stream_offset: u64,
    pub stream_len: u64,
    /// Indices of the span's runs; one run means no sieving.
    pub runs: Range<usize>,
}

thread_local! {
    /// Each worker thread's run list and sieve buffer, reused from request to request.
    static SCRATCH: RefCell<(Vec<LocalPiece>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Walks `pieces` once into `runs` (adjacent pieces merged) and returns the stream's
/// length; refuses streams longer than a frame or with more than `pieces_max` runs.
pub(crate) fn collect_runs(
    pieces: impl Iterator<Item = LocalPiece>,
    runs: &mut Vec<LocalPiece>,
    pieces_max: usize,
) -> Result<u64, WireError> {
    runs.clear();
    let mut total = 0u64;
    for piece in pieces {
        if piece.len == 0 {
            continue;
        }
        total += piece.len;
        if total > DATA_BYTES_MAX {
            return Err(too_large());
        }
        match runs.last_mut() {
            Some(run) if run.local_offset + run.len == piece.local_offset => run.len += piece.len,
            _ => {
                if runs.len() == pieces_max {
                    return Err(WireError::new(
                        ErrorCode::TooLarge,
                        format!(
                            "request has more than {pieces_max} separate pieces on this server; split it"
                        ),
                    ));
                }
                runs.push(piece);
            }
        }
    }
    Ok(total)
}

/// The spans of a run list, in stream order; see the module comment.
pub(crate) fn spans(runs: &[LocalPiece]) -> impl Iterator<Item = Span> + '_ {
    let mut next = 0usize;
    let mut stream_offset = 0u64;
    std::iter::from_fn(move || {
        let first = *runs.get(next)?;
        let mut span = Span {
            local_offset: first.local_offset,
            local_len: first.len,
            stream_offset,
            stream_len: first.len,
            runs: next..next + 1,
        };
        // A lone run may be of any length (it needs no buffer); a sieve span stays
        // within the span limit.
        for run in &runs[next + 1..] {
            let end = span.local_offset + span.local_len;
            let fits = run.local_offset >= end
                && run.local_offset - end <= SIEVE_GAP_BYTES_MAX
                && run.local_offset + run.len - span.local_offset <= SIEVE_SPAN_BYTES_MAX;
            if !fits {
                break;
            }
            span.local_len = run.local_offset + run.len - span.local_offset;
            span.stream_len += run.len;
            span.runs.end += 1;
        }
        next = span.runs.end;
        stream_offset += span.stream_len;
        Some(span)
    })
}

pub(crate) fn too_large() -> WireError {
    WireError::new(
        ErrorCode::TooLarge,
        format!("request covers more than {DATA_BYTES_MAX} bytes on this server; split it"),
    )
}

/// Serialises read-modify-write of sieve spans against every other write of the same
/// object: plain writes share a stripe of the table, a sieve span (which writes back
/// gap bytes it read) or a truncate holds it alone. Objects hash onto stripes.
pub(crate) struct WriteLocks {
    stripes: Box<[RwLock<()>]>,
}

const WRITE_LOCK_STRIPES: usize = 256;

impl WriteLocks {
    pub(crate) fn new() -> WriteLocks {
        WriteLocks {
            stripes: (0..WRITE_LOCK_STRIPES).map(|_| RwLock::new(())).collect(),
        }
    }

    pub(crate) fn of(&self, inode: InodeId) -> &RwLock<()> {
        &self.stripes[(inode.0 % WRITE_LOCK_STRIPES as u64) as usize]
    }
}

/// A stretch of a view request's stream on this server: view bytes
/// `[view_offset, view_offset + len)`, all in the stripe that starts at
/// `stripe_file_offset` in the file and at `stripe_local_offset` in the object, whose
/// file extent is at most `SIEVE_SPAN_BYTES_MAX` unless it is one piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ViewWindow {
    pub view_offset: u64,
    pub len: u64,
    pub stripe_file_offset: u64,
    pub stripe_local_offset: u64,
}

/// A window whose data fill at least 1/this of its extent is sieved whole, with the
/// view engine's strided walk; sparser ones go piece by piece (runs, gaps).
const DENSE_WINDOW_FILL_MIN: u64 = 16;

/// How a view window is served.
enum Plan {
    /// One run: straight between the stream and the object at this local offset.
    Direct(u64),
    /// Sieved whole: the extent `[file_offset, +len)` at `local_offset`.
    Dense {
        file_offset: u64,
        local_offset: u64,
        len: u64,
    },
    /// Piece by piece, through the run list.
    Sparse,
}

fn plan(view: &View, window: &ViewWindow) -> Plan {
    let (first, end) = view
        .file_extent(window.view_offset, window.len)
        .expect("view windows lie inside the checked interval");
    let local_offset = window.stripe_local_offset + (first - window.stripe_file_offset);
    let extent = end - first;
    if extent == window.len {
        Plan::Direct(local_offset)
    } else if extent <= SIEVE_SPAN_BYTES_MAX && extent <= window.len * DENSE_WINDOW_FILL_MIN {
        Plan::Dense {
            file_offset: first,
            local_offset,
            len: extent,
        }
    } else {
        Plan::Sparse
    }
}

pub(crate) fn window_pieces<'a>(
    view: &'a View,
    window: &ViewWindow,
) -> impl Iterator<Item = LocalPiece> + 'a {
    let (stripe_file, stripe_local) = (window.stripe_file_offset, window.stripe_local_offset);
    view.pieces(window.view_offset, window.len)
        .expect("view windows lie inside the checked interval")
        .map(move |piece| LocalPiece {
            local_offset: stripe_local + (piece.file_offset - stripe_file),
            len: piece.len,
        })
}

/// Writes `data`, exactly the stream of `pieces` (a range-list request, at most
/// `pieces_max` separate pieces), to the object.
pub(crate) fn write_pieces(
    file: &File,
    inode: InodeId,
    lock: &RwLock<()>,
    pieces: impl Iterator<Item = LocalPiece>,
    data: &[u8],
    pieces_max: usize,
) -> Result<(), WireError> {
    SCRATCH.with(|scratch| {
        let (runs, sieve) = &mut *scratch.borrow_mut();
        let len = collect_runs(pieces, runs, pieces_max)?;
        debug_assert_eq!(len, data.len() as u64, "the caller checked the payload");
        write_runs(file, inode, lock, runs, data, sieve)
    })
}

/// Reads the stream of `pieces` (see `write_pieces`) into `out`, sized to it.
pub(crate) fn read_pieces(
    file: &File,
    inode: InodeId,
    pieces: impl Iterator<Item = LocalPiece>,
    out: &mut [u8],
    pieces_max: usize,
) -> Result<(), WireError> {
    SCRATCH.with(|scratch| {
        let (runs, sieve) = &mut *scratch.borrow_mut();
        let len = collect_runs(pieces, runs, pieces_max)?;
        debug_assert_eq!(len, out.len() as u64, "the caller sized the reply");
        read_runs(file, inode, runs, out, sieve)
    })
}

/// Writes `data`, exactly the stream of `windows` of `view`, to the object.
pub(crate) fn write_view(
    file: &File,
    inode: InodeId,
    lock: &RwLock<()>,
    view: &View,
    windows: impl Iterator<Item = ViewWindow>,
    data: &[u8],
) -> Result<(), WireError> {
    SCRATCH.with(|scratch| {
        let (runs, sieve) = &mut *scratch.borrow_mut();
        let mut base = 0usize;
        for window in windows {
            let part = &data[base..base + window.len as usize];
            base += window.len as usize;
            match plan(view, &window) {
                Plan::Direct(local_offset) => {
                    let _shared = lock.read().unwrap_or_else(|p| p.into_inner());
                    file.write_all_at(part, local_offset)
                        .map_err(|e| io_error(e, inode, "write"))?;
                }
                Plan::Dense {
                    file_offset,
                    local_offset,
                    len,
                } => {
                    let buffer = sieve_buffer(sieve, len);
                    let _alone = lock.write().unwrap_or_else(|p| p.into_inner());
                    read_full_at(file, buffer, local_offset).map_err(|e| io_error(e, inode, "read"))?;
                    view.scatter_window(window.view_offset, part, file_offset, buffer)
                        .expect("the window holds the extent");
                    file.write_all_at(buffer, local_offset)
                        .map_err(|e| io_error(e, inode, "write"))?;
                }
                Plan::Sparse => {
                    collect_runs(window_pieces(view, &window), runs, usize::MAX)?;
                    write_runs(file, inode, lock, runs, part, sieve)?;
                }
            }
        }
        debug_assert_eq!(base, data.len(), "the caller checked the payload");
        Ok(())
    })
}

/// Reads the stream of `windows` of `view` into `out`, sized to it; holes and bytes
/// past the object's end read as zeros.
pub(crate) fn read_view(
    file: &File,
    inode: InodeId,
    view: &View,
    windows: impl Iterator<Item = ViewWindow>,
    out: &mut [u8],
) -> Result<(), WireError> {
    SCRATCH.with(|scratch| {
        let (runs, sieve) = &mut *scratch.borrow_mut();
        let mut base = 0usize;
        for window in windows {
            let part = &mut out[base..base + window.len as usize];
            base += window.len as usize;
            match plan(view, &window) {
                Plan::Direct(local_offset) => {
                    read_full_at(file, part, local_offset).map_err(|e| io_error(e, inode, "read"))?;
                }
                Plan::Dense {
                    file_offset,
                    local_offset,
                    len,
                } => {
                    let buffer = sieve_buffer(sieve, len);
                    read_full_at(file, buffer, local_offset).map_err(|e| io_error(e, inode, "read"))?;
                    view.gather_window(window.view_offset, file_offset, buffer, part)
                        .expect("the window holds the extent");
                }
                Plan::Sparse => {
                    collect_runs(window_pieces(view, &window), runs, usize::MAX)?;
                    read_runs(file, inode, runs, part, sieve)?;
                }
            }
        }
        debug_assert_eq!(base, out.len(), "the caller sized the reply");
        Ok(())
    })
}

/// Writes `stream`, the data of `runs`, span by span.
fn write_runs(
    file: &File,
    inode: InodeId,
    lock: &RwLock<()>,
    runs: &[LocalPiece],
    stream: &[u8],
    sieve: &mut Vec<u8>,
) -> Result<(), WireError> {
    for span in spans(runs) {
        let part = &stream[span.stream_offset as usize..][..span.stream_len as usize];
        if span.runs.len() == 1 {
            let _shared = lock.read().unwrap_or_else(|p| p.into_inner());
            file.write_all_at(part, span.local_offset)
                .map_err(|e| io_error(e, inode, "write"))?;
            continue;
        }
        crate::counters::COUNTERS.sieve_span(true);
        let buffer = sieve_buffer(sieve, span.local_len);
        let _alone = lock.write().unwrap_or_else(|p| p.into_inner());
        read_full_at(file, buffer, span.local_offset).map_err(|e| io_error(e, inode, "read"))?;
        let mut at = 0usize;
        for run in &runs[span.runs.clone()] {
            let into = (run.local_offset - span.local_offset) as usize;
            let n = run.len as usize;
            copy(&mut buffer[into..into + n], &part[at..at + n]);
            at += n;
        }
        file.write_all_at(buffer, span.local_offset)
            .map_err(|e| io_error(e, inode, "write"))?;
    }
    Ok(())
}

/// Reads the data of `runs` into `stream`, span by span.
fn read_runs(
    file: &File,
    inode: InodeId,
    runs: &[LocalPiece],
    stream: &mut [u8],
    sieve: &mut Vec<u8>,
) -> Result<(), WireError> {
    for span in spans(runs) {
        let part = &mut stream[span.stream_offset as usize..][..span.stream_len as usize];
        if span.runs.len() == 1 {
            read_full_at(file, part, span.local_offset).map_err(|e| io_error(e, inode, "read"))?;
            continue;
        }
        crate::counters::COUNTERS.sieve_span(false);
        let buffer = sieve_buffer(sieve, span.local_len);
        read_full_at(file, buffer, span.local_offset).map_err(|e| io_error(e, inode, "read"))?;
        let mut at = 0usize;
        for run in &runs[span.runs.clone()] {
            let from = (run.local_offset - span.local_offset) as usize;
            let n = run.len as usize;
            copy(&mut part[at..at + n], &buffer[from..from + n]);
            at += n;
        }
    }
    Ok(())
}

/// `copy_from_slice`, with the short lengths of fine-grained views copied inline
/// rather than through a memcpy call.
#[inline]
fn copy(to: &mut [u8], from: &[u8]) {
    match to.len() {
        8 => to.copy_from_slice(&from[..8]),
        16 => to.copy_from_slice(&from[..16]),
        32 => to.copy_from_slice(&from[..32]),
        _ => to.copy_from_slice(from),
    }
}

/// The first `len` bytes of the thread's sieve buffer, allocated on first use.
fn sieve_buffer(sieve: &mut Vec<u8>, len: u64) -> &mut [u8] {
    debug_assert!(len <= SIEVE_SPAN_BYTES_MAX);
    if sieve.is_empty() {
        sieve.resize(SIEVE_SPAN_BYTES_MAX as usize, 0);
    }
    &mut sieve[..len as usize]
}

pub(crate) fn read_full_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            // Past the object's end: a hole, read as zeros.
            Ok(0) => {
                buf[done..].fill(0);
                return Ok(());
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Fills `bufs`, one after another, from `offset` of `file` (bytes past its end read
/// as zeros): `preadv`, again after a short read, until all are full.
pub(crate) fn read_vectored_full_at(
    file: &File,
    bufs: &mut [&mut [u8]],
    mut offset: u64,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (mut first, mut skip) = (0usize, 0usize);
    while first < bufs.len() {
        if bufs[first].len() == skip {
            first += 1;
            skip = 0;
            continue;
        }
        let iov: Vec<libc::iovec> = bufs[first..]
            .iter_mut()
            .enumerate()
            .map(|(j, b)| {
                let from = if j == 0 { skip } else { 0 };
                libc::iovec {
                    iov_base: b[from..].as_mut_ptr().cast(),
                    iov_len: b.len() - from,
                }
            })
            .collect();
        // SAFETY: every iovec points into a buffer we hold mutably for this call, with
        // its length; the descriptor is open.
        let n = unsafe {
            libc::preadv(
                file.as_raw_fd(),
                iov.as_ptr(),
                iov.len() as libc::c_int,
                offset as libc::off_t,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            // Past the object's end: a hole, read as zeros.
            bufs[first][skip..].fill(0);
            for b in &mut bufs[first + 1..] {
                b.fill(0);
            }
            return Ok(());
        }
        let mut n = n as usize;
        offset += n as u64;
        while n > 0 {
            let left = bufs[first].len() - skip;
            if n >= left {
                n -= left;
                first += 1;
                skip = 0;
            } else {
                skip += n;
                n = 0;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_proto::msg::PIECES_PER_REQUEST_MAX;

    fn piece(local_offset: u64, len: u64) -> LocalPiece {
        LocalPiece { local_offset, len }
    }

    fn summary(pieces: &[LocalPiece]) -> Vec<(u64, u64, u64, u64, usize)> {
        let mut runs = Vec::new();
        let total = collect_runs(pieces.iter().copied(), &mut runs, PIECES_PER_REQUEST_MAX).unwrap();
        let spans: Vec<Span> = spans(&runs).collect();
        let covered: u64 = spans.iter().map(|s| s.stream_len).sum();
        assert_eq!(covered, total, "spans cover the stream");
        spans
            .iter()
            .map(|s| {
                (
                    s.local_offset,
                    s.local_len,
                    s.stream_offset,
                    s.stream_len,
                    s.runs.len(),
                )
            })
            .collect()
    }

    #[test]
    fn adjacent_pieces_are_one_run_of_any_length() {
        let pieces: Vec<_> = (0..40).map(|k| piece(k * (1 << 20), 1 << 20)).collect();
        assert_eq!(summary(&pieces), vec![(0, 40 << 20, 0, 40 << 20, 1)]);
    }

    #[test]
    fn small_gaps_make_bounded_sieve_spans_and_large_gaps_split() {
        // 8-byte pieces every 16 bytes: sieve spans of at most the span limit.
        let pieces: Vec<_> = (0..200_000u64).map(|k| piece(16 * k, 8)).collect();
        let spans = summary(&pieces);
        assert!(spans.len() > 1);
        let mut stream = 0;
        for (local, len, at, data, runs) in &spans {
            assert!(*len <= SIEVE_SPAN_BYTES_MAX);
            assert_eq!(*at, stream);
            assert_eq!(*data, *runs as u64 * 8);
            assert_eq!(local % 16, 0);
            stream += data;
        }
        assert_eq!(stream, 200_000 * 8);
        // A gap past the limit, a step back and a zero-length piece each end a span.
        let pieces = [
            piece(0, 10),
            piece(10 + SIEVE_GAP_BYTES_MAX, 5),
            piece(10 + SIEVE_GAP_BYTES_MAX + 5 + SIEVE_GAP_BYTES_MAX + 1, 5),
            piece(0, 0),
            piece(3, 2),
        ];
        assert_eq!(
            summary(&pieces),
            vec![
                (0, 10 + SIEVE_GAP_BYTES_MAX + 5, 0, 15, 2),
                (10 + 2 * SIEVE_GAP_BYTES_MAX + 6, 5, 15, 5, 1),
                (3, 2, 20, 2, 1),
            ]
        );
    }

    #[test]
    fn a_long_run_followed_by_close_pieces_is_not_sieved_past_the_limit() {
        let pieces = [
            piece(0, 2 * SIEVE_SPAN_BYTES_MAX),
            piece(2 * SIEVE_SPAN_BYTES_MAX + 8, 8),
        ];
        assert_eq!(
            summary(&pieces),
            vec![
                (0, 2 * SIEVE_SPAN_BYTES_MAX, 0, 2 * SIEVE_SPAN_BYTES_MAX, 1),
                (2 * SIEVE_SPAN_BYTES_MAX + 8, 8, 2 * SIEVE_SPAN_BYTES_MAX, 8, 1),
            ]
        );
    }

    #[test]
    fn too_many_pieces_or_bytes_are_refused() {
        let mut runs = Vec::new();
        let many = (0..PIECES_PER_REQUEST_MAX as u64 + 1).map(|k| piece(2 * k, 1));
        assert_eq!(
            collect_runs(many, &mut runs, PIECES_PER_REQUEST_MAX)
                .unwrap_err()
                .code,
            ErrorCode::TooLarge
        );
        // Adjacent pieces merge, so their number does not count.
        let adjacent = (0..PIECES_PER_REQUEST_MAX as u64 + 1).map(|k| piece(k, 1));
        assert!(collect_runs(adjacent, &mut runs, PIECES_PER_REQUEST_MAX).is_ok());
        let big = [piece(0, DATA_BYTES_MAX), piece(DATA_BYTES_MAX + 5, 1)];
        assert_eq!(
            collect_runs(big.into_iter(), &mut runs, PIECES_PER_REQUEST_MAX)
                .unwrap_err()
                .code,
            ErrorCode::TooLarge
        );
    }
}
