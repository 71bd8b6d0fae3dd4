//! Turns the pieces of one request on this server (object offset and length, in stream
//! order) into few large object I/Os. Pieces adjacent in the object merge into runs;
//! runs separated by small gaps are grouped into one sieve span that is read with one
//! pread, and for a write patched in memory and written back with one pwrite (ROMIO's
//! data sieving, done where the data lives). A span of one run moves straight between
//! the request stream and the object.
//!
//! Nothing is materialised per piece: spans are produced one at a time, and a sieve
//! span replays its pieces from a clone of the piece iterator taken where it starts.

use crate::objects::io_error;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::RwLock;
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

/// Consecutive pieces of the stream served by one object I/O.
#[derive(Debug, Clone)]
pub(crate) struct Span<I> {
    /// Object extent `[local_offset, local_offset + local_len)`.
    pub local_offset: u64,
    pub local_len: u64,
    /// Stream bytes `[stream_offset, stream_offset + stream_len)`.
    pub stream_offset: u64,
    pub stream_len: u64,
    /// Runs of the span; 1 means the span is one contiguous run (no sieving).
    pub runs: u64,
    first: LocalPiece,
    /// The piece iterator just after `first`, to replay the span's other pieces.
    rest: I,
}

impl<I: Iterator<Item = LocalPiece> + Clone> Span<I> {
    /// The span's pieces in stream order.
    fn pieces(&self) -> impl Iterator<Item = LocalPiece> {
        let mut left = self.stream_len - self.first.len;
        std::iter::once(self.first).chain(self.rest.clone().take_while(move |piece| {
            if left == 0 {
                return false;
            }
            left -= piece.len;
            true
        }))
    }
}

/// The spans of a stream of pieces, in stream order; see the module comment.
pub(crate) struct Spans<I> {
    pieces: I,
    lookahead: Option<LocalPiece>,
    stream_offset: u64,
}

pub(crate) fn spans<I: Iterator<Item = LocalPiece> + Clone>(pieces: I) -> Spans<I> {
    Spans {
        pieces,
        lookahead: None,
        stream_offset: 0,
    }
}

impl<I: Iterator<Item = LocalPiece> + Clone> Iterator for Spans<I> {
    type Item = Span<I>;

    fn next(&mut self) -> Option<Span<I>> {
        let first = loop {
            let piece = self.lookahead.take().or_else(|| self.pieces.next())?;
            if piece.len > 0 {
                break piece;
            }
        };
        let mut span = Span {
            local_offset: first.local_offset,
            local_len: first.len,
            stream_offset: self.stream_offset,
            stream_len: first.len,
            runs: 1,
            first,
            rest: self.pieces.clone(),
        };
        for piece in self.pieces.by_ref() {
            if piece.len == 0 {
                continue;
            }
            let end = span.local_offset + span.local_len;
            let adjacent = piece.local_offset == end;
            let fits = piece.local_offset >= end
                && piece.local_offset - end <= SIEVE_GAP_BYTES_MAX
                && piece.local_offset + piece.len - span.local_offset <= SIEVE_SPAN_BYTES_MAX;
            // A lone run grows without bound (it needs no buffer); a sieve span stays
            // within the span limit.
            if (adjacent && span.runs == 1) || fits {
                if !adjacent {
                    span.runs += 1;
                }
                span.local_len = piece.local_offset + piece.len - span.local_offset;
                span.stream_len += piece.len;
            } else {
                self.lookahead = Some(piece);
                break;
            }
        }
        self.stream_offset += span.stream_len;
        Some(span)
    }
}

/// Bytes of the stream of `pieces`, refusing totals that cannot travel in one frame.
pub(crate) fn stream_len(pieces: impl Iterator<Item = LocalPiece>) -> Result<u64, WireError> {
    let mut total = 0u64;
    for piece in pieces {
        total += piece.len;
        if total > DATA_BYTES_MAX {
            return Err(too_large());
        }
    }
    Ok(total)
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

/// Writes `data`, the stream of `pieces`, to the object. The caller checked that `data`
/// holds exactly the stream.
pub(crate) fn write_stream<I: Iterator<Item = LocalPiece> + Clone>(
    file: &File,
    inode: InodeId,
    lock: &RwLock<()>,
    pieces: I,
    data: &[u8],
) -> Result<(), WireError> {
    let mut sieve: Vec<u8> = Vec::new();
    for span in spans(pieces) {
        let stream = &data[span.stream_offset as usize..][..span.stream_len as usize];
        if span.runs == 1 {
            let _shared = lock.read().unwrap_or_else(|p| p.into_inner());
            file.write_all_at(stream, span.local_offset)
                .map_err(|e| io_error(e, inode, "write"))?;
            continue;
        }
        let buffer = sieve_buffer(&mut sieve, span.local_len);
        let _alone = lock.write().unwrap_or_else(|p| p.into_inner());
        read_full_at(file, buffer, span.local_offset).map_err(|e| io_error(e, inode, "read"))?;
        let mut at = 0usize;
        for piece in span.pieces() {
            let into = (piece.local_offset - span.local_offset) as usize;
            let n = piece.len as usize;
            buffer[into..into + n].copy_from_slice(&stream[at..at + n]);
            at += n;
        }
        debug_assert_eq!(at, stream.len());
        file.write_all_at(buffer, span.local_offset)
            .map_err(|e| io_error(e, inode, "write"))?;
    }
    Ok(())
}

/// Reads the stream of `pieces` from the object into `out` (exactly the stream's
/// length); holes and bytes past the object's end read as zeros.
pub(crate) fn read_stream<I: Iterator<Item = LocalPiece> + Clone>(
    file: &File,
    inode: InodeId,
    pieces: I,
    out: &mut [u8],
) -> Result<(), WireError> {
    let mut sieve: Vec<u8> = Vec::new();
    for span in spans(pieces) {
        let stream = &mut out[span.stream_offset as usize..][..span.stream_len as usize];
        if span.runs == 1 {
            read_full_at(file, stream, span.local_offset).map_err(|e| io_error(e, inode, "read"))?;
            continue;
        }
        let buffer = sieve_buffer(&mut sieve, span.local_len);
        read_full_at(file, buffer, span.local_offset).map_err(|e| io_error(e, inode, "read"))?;
        let mut at = 0usize;
        for piece in span.pieces() {
            let from = (piece.local_offset - span.local_offset) as usize;
            let n = piece.len as usize;
            stream[at..at + n].copy_from_slice(&buffer[from..from + n]);
            at += n;
        }
        debug_assert_eq!(at, stream.len());
    }
    Ok(())
}

/// The first `len` bytes of the request's sieve buffer, allocated on first use.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(local_offset: u64, len: u64) -> LocalPiece {
        LocalPiece { local_offset, len }
    }

    fn summary(pieces: &[LocalPiece]) -> Vec<(u64, u64, u64, u64, u64)> {
        spans(pieces.iter().copied())
            .map(|s| {
                let replayed: Vec<LocalPiece> = s.pieces().collect();
                let covered: u64 = replayed.iter().map(|p| p.len).sum();
                assert_eq!(covered, s.stream_len, "replay covers the span's stream");
                (s.local_offset, s.local_len, s.stream_offset, s.stream_len, s.runs)
            })
            .collect()
    }

    #[test]
    fn adjacent_pieces_are_one_run_of_any_length() {
        let pieces: Vec<_> = (0..100).map(|k| piece(k * (1 << 20), 1 << 20)).collect();
        assert_eq!(summary(&pieces), vec![(0, 100 << 20, 0, 100 << 20, 1)]);
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
            assert_eq!(*data, runs * 8);
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
}
