//! List I/O for irregular accesses: explicit (offset, length) lists, split per server.
//! Each server is sent only the ranges (or parts of ranges) that touch it, in list
//! order, cut into requests bounded by the frame's data limit and by `RANGES_MAX`; the
//! bulk data is the server's pieces of those ranges in order (PVFS I/O stream).

use crate::drive::Pipeline;
use crate::error::ClientError;
use crate::file::{expect_bytes, File, SharedBuffer};
use crate::gather::Gather;
use std::sync::atomic::Ordering;
use weft_layout::stripe::check_range;
use weft_layout::Layout;
use weft_proto::frame::DATA_BYTES_MAX;
use weft_proto::msg::{Request, PIECES_PER_REQUEST_MAX, RANGES_MAX};
use weft_proto::{ErrorCode, Range};
use weft_rpc::PendingCall;

/// A range sent to one server, and where its first byte sits in the caller's buffer.
#[derive(Debug, Clone, Copy)]
struct SentRange {
    range: Range,
    buffer_at: u64,
}

/// Cuts one server's share of a range list into requests.
struct ListChunks<'a> {
    layout: &'a Layout,
    server_index: usize,
    ranges: &'a [(u64, u64)],
    /// Buffer offset of each range's first byte.
    starts: &'a [u64],
    chunk_bytes: u64,
    ranges_max: usize,
    pieces_max: usize,
    /// Next range, and how much of it earlier requests took.
    next: usize,
    within: u64,
}

impl ListChunks<'_> {
    /// The next request's ranges, calling `visit(buffer_at, len)` for this server's
    /// pieces in them in order; `None` when the server has nothing more.
    fn next(&mut self, mut visit: impl FnMut(u64, u64)) -> Option<Vec<SentRange>> {
        let mut sent = Vec::new();
        let mut bytes = 0u64;
        let mut pieces_left = self.pieces_max;
        while bytes < self.chunk_bytes
            && sent.len() < self.ranges_max
            && pieces_left > 0
            && self.next < self.ranges.len()
        {
            let (offset, len) = self.ranges[self.next];
            let from = offset + self.within;
            let end = offset + len;
            let mut cut = end;
            let mut touched = false;
            let pieces = self
                .layout
                .pieces_on(self.server_index, from, end - from)
                .expect("ranges checked");
            for piece in pieces {
                let take = piece.len.min(self.chunk_bytes - bytes);
                visit(self.starts[self.next] + (piece.file_offset - offset), take);
                bytes += take;
                touched = true;
                pieces_left -= 1;
                if take < piece.len || bytes == self.chunk_bytes || pieces_left == 0 {
                    cut = piece.file_offset + take;
                    break;
                }
            }
            if touched {
                sent.push(SentRange {
                    range: Range {
                        offset: from,
                        len: cut - from,
                    },
                    buffer_at: self.starts[self.next] + self.within,
                });
            }
            if cut == end {
                self.next += 1;
                self.within = 0;
            } else {
                self.within = cut - offset;
            }
        }
        (!sent.is_empty()).then_some(sent)
    }
}

impl File {
    /// Writes the concatenation of `ranges` (file `(offset, length)` pairs, in any
    /// order) from `buf`, which holds exactly their bytes in list order. Overlapping
    /// ranges land in no defined order. Returns the bytes written (all of them).
    pub fn write_list(&self, ranges: &[(u64, u64)], buf: &[u8]) -> Result<usize, ClientError> {
        self.check_writable()?;
        let (starts, end) = self.check_list(ranges, buf.len())?;
        if let Some(t) = &self.trace {
            t.sent_ranges(true, ranges.iter().copied());
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let chunk_bytes = self.list_chunk_bytes();
        let inflight = self.inner.transfer.inflight_per_server.max(1);
        let servers = self.servers_of_list(ranges);
        self.with_copies(|| {
            let connections = self.connections_of(&servers)?;
            crate::drive::drive(servers.len(), buf.len() as u64, |i| {
                let (index, connection) = (servers[i], &connections[i]);
                let mut chunks = self.list_chunks(index, ranges, &starts, chunk_bytes);
                let mut gather = Gather::with_capacity(chunk_bytes as usize);
                let next = move || -> Result<Option<(PendingCall<'_>, ())>, ClientError> {
                    gather.clear();
                    let Some(sent) = chunks.next(|at, n| gather.push(buf, at as usize, n as usize)) else {
                        return Ok(None);
                    };
                    let request = self.data_request(
                        index,
                        connection,
                        Request::Write {
                            inode: self.inode(),
                            striping: self.striping(index),
                            ranges: sent.iter().map(|s| s.range).collect(),
                        },
                    );
                    Ok(Some((connection.send_parts(&request, &gather.slices(buf))?, ())))
                };
                Ok(Pipeline::new(inflight, next, |call: PendingCall<'_>, ()| {
                    expect_bytes(call.wait()?.0)
                }))
            })
        })
        .map_err(|e| e.context(&self.path))?;
        self.known_size.fetch_max(end, Ordering::SeqCst);
        Ok(buf.len())
    }

    /// Reads the bytes of `ranges` into `buf` (exactly their total length), in list
    /// order. Holes and bytes past the end of the file read as zeros. Returns the bytes
    /// read (all of them).
    pub fn read_list(&self, ranges: &[(u64, u64)], buf: &mut [u8]) -> Result<usize, ClientError> {
        let (starts, _) = self.check_list(ranges, buf.len())?;
        if let Some(t) = &self.trace {
            t.sent_ranges(false, ranges.iter().copied());
        }
        self.read_with_pattern_fallback(|| self.read_list_checked(ranges, &starts, buf))
    }

    fn read_list_checked(
        &self,
        ranges: &[(u64, u64)],
        starts: &[u64],
        buf: &mut [u8],
    ) -> Result<usize, ClientError> {
        if buf.is_empty() {
            return Ok(0);
        }
        let chunk_bytes = self.list_chunk_bytes();
        let inflight = self.inner.transfer.inflight_per_server.max(1);
        let total = buf.len();
        let shared = SharedBuffer::new(buf);
        let servers = self.servers_of_list(ranges);
        let connections = self.connections_of(&servers)?;
        crate::drive::drive(servers.len(), total as u64, |i| {
            let (index, connection) = (servers[i], &connections[i]);
            let scatter = move |call: PendingCall<'_>, sent: Vec<SentRange>| -> Result<(), ClientError> {
                let data = call.wait()?.1;
                let mut at = 0usize;
                for s in &sent {
                    let pieces = self
                        .layout
                        .pieces_on(index, s.range.offset, s.range.len)
                        .expect("ranges checked");
                    for piece in pieces {
                        let n = piece.len as usize;
                        let Some(bytes) = data.get(at..at + n) else {
                            return Err(short_reply());
                        };
                        shared.put((s.buffer_at + piece.file_offset - s.range.offset) as usize, bytes);
                        at += n;
                    }
                }
                if at != data.len() {
                    return Err(short_reply());
                }
                Ok(())
            };
            let mut chunks = self.list_chunks(index, ranges, starts, chunk_bytes);
            let next = move || -> Result<Option<(PendingCall<'_>, Vec<SentRange>)>, ClientError> {
                let Some(sent) = chunks.next(|_, _| {}) else {
                    return Ok(None);
                };
                let request = self.data_request(
                    index,
                    connection,
                    Request::Read {
                        inode: self.inode(),
                        striping: self.striping(index),
                        ranges: sent.iter().map(|s| s.range).collect(),
                    },
                );
                let expect = sent.iter().map(|s| s.range.len).sum();
                Ok(Some((connection.send_expecting(&request, expect)?, sent)))
            };
            Ok(Pipeline::new(inflight, next, scatter))
        })
        .map_err(|e| e.context(&self.path))?;
        Ok(total)
    }

    /// Checks every range and that the buffer holds their total; returns each range's
    /// buffer offset and the end of the highest range.
    fn check_list(&self, ranges: &[(u64, u64)], buffer_len: usize) -> Result<(Vec<u64>, u64), ClientError> {
        let mut starts = Vec::with_capacity(ranges.len());
        let mut total = 0u64;
        let mut end = 0u64;
        for &(offset, len) in ranges {
            check_range(offset, len)
                .map_err(|e| ClientError::InvalidArgument(format!("{}: {e}", self.path)))?;
            starts.push(total);
            total = total.saturating_add(len);
            if len > 0 {
                end = end.max(offset + len);
            }
        }
        if total != buffer_len as u64 {
            return Err(ClientError::InvalidArgument(format!(
                "{}: the ranges cover {total} bytes but the buffer holds {buffer_len}",
                self.path
            )));
        }
        Ok((starts, end))
    }

    fn servers_of_list(&self, ranges: &[(u64, u64)]) -> Vec<usize> {
        (0..self.layout.servers.len())
            .filter(|k| ranges.iter().any(|&(o, l)| self.layout.bytes_on(*k, o, l) > 0))
            .collect()
    }

    fn list_chunk_bytes(&self) -> u64 {
        self.inner.transfer.chunk_bytes.clamp(1, DATA_BYTES_MAX)
    }

    fn list_chunks<'a>(
        &'a self,
        server_index: usize,
        ranges: &'a [(u64, u64)],
        starts: &'a [u64],
        chunk_bytes: u64,
    ) -> ListChunks<'a> {
        ListChunks {
            layout: &self.layout,
            server_index,
            ranges,
            starts,
            chunk_bytes,
            ranges_max: RANGES_MAX,
            pieces_max: PIECES_PER_REQUEST_MAX,
            next: 0,
            within: 0,
        }
    }
}

fn short_reply() -> ClientError {
    ClientError::refused(
        ErrorCode::Io,
        "io server returned a different number of bytes than its pieces of the ranges",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_layout::ServerId;

    /// Every byte of every range is visited exactly once, on its own server, with its
    /// buffer position; requests respect both limits; sent ranges only touch their server.
    #[test]
    fn chunks_partition_each_servers_share_within_both_limits() {
        let layout = Layout {
            stripe_size_bytes: 1024,
            servers: (0..3).map(ServerId).collect(),
            replication: Default::default(),
        };
        let mut ranges = vec![(0u64, 10_000u64), (50_000, 1), (7, 0), (3000, 5000)];
        ranges.extend((0..200u64).map(|k| (100_000 + 1500 * k, 100 + k)));
        let mut starts = Vec::new();
        let mut total = 0;
        for &(_, len) in &ranges {
            starts.push(total);
            total += len;
        }
        let mut seen = vec![0u32; total as usize];
        for server_index in 0..3 {
            let mut chunks = ListChunks {
                layout: &layout,
                server_index,
                ranges: &ranges,
                starts: &starts,
                chunk_bytes: 700,
                ranges_max: 5,
                pieces_max: 3,
                next: 0,
                within: 0,
            };
            let mut visits = Vec::new();
            while let Some(sent) = chunks.next(|at, n| visits.push((at, n))) {
                assert!(sent.len() <= 5);
                assert!(visits.len() <= 3);
                let share: u64 = sent
                    .iter()
                    .map(|s| layout.bytes_on(server_index, s.range.offset, s.range.len))
                    .sum();
                let visited: u64 = visits.iter().map(|v| v.1).sum();
                assert_eq!(share, visited, "the server's share is exactly what was gathered");
                assert!(share <= 700);
                for s in &sent {
                    assert!(layout.bytes_on(server_index, s.range.offset, s.range.len) > 0);
                }
                for &(at, n) in &visits {
                    for b in at..at + n {
                        seen[b as usize] += 1;
                    }
                }
                visits.clear();
            }
        }
        assert!(seen.iter().all(|&c| c == 1));
    }
}
