//! View I/O (Clusterfile): a file handle's view is registered once with each io server
//! that sees it, lazily, on the connection in use (and again if that connection was
//! replaced); reads and writes then send only (view id, view interval). Each server's
//! bytes of an interval are its pieces in file order (PVFS I/O stream).
//!
//! A server's share of an interval is, stripe by stripe, a run of consecutive view
//! bytes (the view is in file order), so it is gathered from and scattered into the
//! caller's buffer one slice per stripe: writes go out by writev straight from the
//! buffer, and replies are received straight into it.
//!
//! The caller's buffer holds the view's bytes in view order; `write_view_from` and
//! `read_view_into` take them from (or put them into) a noncontiguous memory layout
//! described by a datatype.

use super::{expect_bytes, File, SharedBuffer};
use crate::drive::Share;
use crate::error::ClientError;
use crate::gather::Gather;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use weft_layout::view::{pack, unpack, Datatype, StripeSlice, StripeSlices, View, ViewError};
use weft_proto::frame::DATA_BYTES_MAX;
use weft_proto::msg::{Request, Response, ViewId, VIEW_BYTES_MAX};
use weft_proto::ErrorCode;
use weft_rpc::{Connection, PendingCall, ReplySink, SinkReply};

/// Requests whose slices average at least this many bytes are received straight into
/// the caller's buffer (readv into every slice); smaller ones cost less as a copy out
/// of one reply buffer than as one iovec each.
const SINK_PIECE_BYTES_MIN: u64 = 64;

/// Most bytes staged at once by `write_view_from`/`read_view_into` for a noncontiguous
/// memory type.
pub const MEMORY_STAGE_BYTES_MAX: u64 = 64 << 20;

/// A view set on a file handle and where it is registered.
pub(crate) struct FileView {
    view: View,
    /// `Some(base)` when view byte `v` is file byte `base + v`: then view I/O is plain
    /// contiguous I/O and nothing is registered.
    dense_base: Option<u64>,
    /// Per server of the layout: the connections the view is registered on, and its
    /// ids (more than one for a replicated file, whose slot's requests go to each copy's
    /// server; at most `REGISTRATIONS_PER_SLOT_MAX`).
    registrations: Vec<Mutex<Vec<Registration>>>,
}

struct Registration {
    /// Identifies the connection (the weak reference keeps its address from reuse).
    connection: Weak<Connection>,
    id: ViewId,
}

impl FileView {
    fn new(view: View, servers: usize) -> FileView {
        let filetype = view.filetype();
        let dense = filetype.is_contiguous() && filetype.extent() == filetype.size_bytes() as i64;
        let dense_base = if dense { view.view_to_file(0).ok() } else { None };
        FileView {
            view,
            dense_base,
            registrations: (0..servers).map(|_| Mutex::new(Vec::new())).collect(),
        }
    }

    /// The view's id on server `index` over `connection`, registering it first if it is
    /// not registered on that very connection (a new connection has no views).
    fn id_on(&self, index: usize, connection: &Arc<Connection>) -> Result<ViewId, ClientError> {
        let mut slot = self.registrations[index].lock().unwrap();
        if let Some(registration) = slot
            .iter()
            .find(|r| std::ptr::eq(r.connection.as_ptr(), Arc::as_ptr(connection)))
        {
            return Ok(registration.id);
        }
        // Connections that closed took their views with them.
        slot.retain(|r| r.connection.strong_count() > 0);
        if slot.len() >= REGISTRATIONS_PER_SLOT_MAX {
            let oldest = slot.remove(0);
            if let Some(old) = oldest.connection.upgrade() {
                let _ = old.send(&Request::ReleaseView { view: oldest.id }, &[]);
            }
        }
        let request = Request::RegisterView {
            view: self.view.clone(),
        };
        let id = match connection.call(&request, &[])?.0 {
            Response::View(id) => id,
            other => return Err(crate::error::unexpected(&other)),
        };
        slot.push(Registration {
            connection: Arc::downgrade(connection),
            id,
        });
        Ok(id)
    }
}

/// Registrations of one view on one slot's servers kept at once (a replicated
/// file's copies, and connections made again after a server came back).
const REGISTRATIONS_PER_SLOT_MAX: usize = 8;

impl Drop for FileView {
    fn drop(&mut self) {
        // Best effort: a connection that closed took its views with it.
        for slot in &self.registrations {
            for registration in std::mem::take(&mut *slot.lock().unwrap()) {
                let Some(connection) = registration.connection.upgrade() else {
                    continue;
                };
                let _ = connection.send(
                    &Request::ReleaseView {
                        view: registration.id,
                    },
                    &[],
                );
            }
        }
    }
}

/// Cuts one server's share of a view interval into requests carrying at most
/// `chunk_bytes` of its data each. The share comes as per-stripe slices of
/// consecutive view bytes (one slice of the caller's buffer each), never piece by
/// piece. A request's interval runs from where the previous one ended to the end of
/// its last (part of a) slice, so the server's share of it is exactly what was
/// visited.
struct Chunks<'a> {
    slices: StripeSlices<'a>,
    /// The rest of a slice split at a request boundary.
    carry: Option<StripeSlice>,
    next_start: u64,
    chunk_bytes: u64,
}

impl<'a> Chunks<'a> {
    fn new(slices: StripeSlices<'a>, view_offset: u64, chunk_bytes: u64) -> Chunks<'a> {
        Chunks {
            slices,
            carry: None,
            next_start: view_offset,
            chunk_bytes,
        }
    }

    /// The next request's view interval, calling `visit(view_offset, len)` for each
    /// slice (or part) in it, in file order; `None` when the server has nothing more.
    fn next(&mut self, mut visit: impl FnMut(u64, u64)) -> Option<(u64, u64)> {
        let start = self.next_start;
        let mut bytes = 0;
        let mut end = start;
        while bytes < self.chunk_bytes {
            let Some(slice) = self.carry.take().or_else(|| self.slices.next()) else {
                break;
            };
            let take = slice.len.min(self.chunk_bytes - bytes);
            visit(slice.view_offset, take);
            bytes += take;
            end = slice.view_offset + take;
            if take < slice.len {
                self.carry = Some(StripeSlice {
                    view_offset: end,
                    len: slice.len - take,
                    ..slice
                });
            }
        }
        if bytes == 0 {
            return None;
        }
        self.next_start = end;
        Some((start, end))
    }
}

impl File {
    /// Sets the file view (MPI_File_set_view with byte etypes): from now on
    /// `read_view`/`write_view` address the data bytes of `filetype` tiled from file
    /// offset `displacement`. The view is registered with each io server on first use.
    pub fn set_view(&self, displacement: u64, filetype: Arc<Datatype>) -> Result<(), ClientError> {
        let view = View::new(displacement, filetype).map_err(|e| self.invalid(e))?;
        self.set_view_to(view)
    }

    /// The PVFS partition: `gsize` bytes every `stride` bytes from file offset `offset`.
    pub fn set_partition(&self, offset: u64, gsize: u64, stride: u64) -> Result<(), ClientError> {
        let view = View::partition(offset, gsize, stride).map_err(|e| self.invalid(e))?;
        self.set_view_to(view)
    }

    /// Sets a view built elsewhere (for example decoded from its wire form).
    pub fn set_view_to(&self, view: View) -> Result<(), ClientError> {
        if view.filetype().size_bytes() == 0 {
            return Err(self.invalid(ViewError::EmptyView));
        }
        if !view.filetype().fits_wire() {
            return Err(ClientError::InvalidArgument(format!(
                "{}: the view's filetype has more blocks than the {} a server accepts",
                self.path,
                weft_layout::view::BLOCKS_TOTAL_MAX
            )));
        }
        let encoded = view.encode().len();
        if encoded > VIEW_BYTES_MAX {
            return Err(ClientError::InvalidArgument(format!(
                "{}: the view's wire form takes {encoded} bytes, more than the {VIEW_BYTES_MAX} a server accepts",
                self.path
            )));
        }
        let file_view = Arc::new(FileView::new(view, self.layout.servers.len()));
        // The old view (if no transfer still uses it) is released on its servers.
        *self.view.lock().unwrap() = Some(file_view);
        Ok(())
    }

    /// Back to the whole file: view offset equals file offset.
    pub fn clear_view(&self) {
        *self.view.lock().unwrap() = None;
    }

    /// The view set on this handle, if any.
    pub fn view(&self) -> Option<View> {
        self.view.lock().unwrap().as_ref().map(|v| v.view.clone())
    }

    /// Writes `buf`, the view's bytes from view offset `view_offset` on, in view order;
    /// returns the number of bytes written (all of them). Every server at once.
    pub fn write_view(&self, view_offset: u64, buf: &[u8]) -> Result<usize, ClientError> {
        self.write_view_scheduled(view_offset, buf, Schedule::AllAtOnce)
    }

    /// [`File::write_view`], visiting the servers in the order and with the concurrency
    /// `schedule` says.
    pub fn write_view_scheduled(
        &self,
        view_offset: u64,
        buf: &[u8],
        schedule: Schedule,
    ) -> Result<usize, ClientError> {
        self.check_writable()?;
        let Some(file_view) = self.current_view() else {
            return self.write_at(view_offset, buf);
        };
        if let Some(base) = file_view.dense_base {
            return self.write_at(self.dense_offset(base, view_offset)?, buf);
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let view = &file_view.view;
        let len = buf.len() as u64;
        if let Some(t) = &self.trace {
            t.sent_view(true, view, view_offset, len);
        }
        let (file_start, file_end) = self.view_span(view, view_offset, len)?;
        self.with_copies(|| {
            self.view_servers(file_start, file_end)?
                .run(schedule, len, |index, connection| {
                    Ok(WriteShare {
                        requests: Requests::new(self, &file_view, index, connection, view_offset, len)?,
                        buf,
                        gather: Gather::with_capacity(self.view_chunk_bytes() as usize),
                        window: VecDeque::new(),
                    })
                })
        })
        .map_err(|e| e.context(&self.path))?;
        self.known_size.fetch_max(file_end, Ordering::SeqCst);
        Ok(buf.len())
    }

    /// The request for view bytes `range` on server `index`, registering the view on
    /// that server's connection at the first request (`id` remembers it).
    fn view_request(
        &self,
        file_view: &FileView,
        id: &mut Option<ViewId>,
        index: usize,
        connection: &Arc<Connection>,
        range: std::ops::Range<u64>,
        write: bool,
    ) -> Result<Request, ClientError> {
        let view = match *id {
            Some(v) => v,
            None => *id.insert(file_view.id_on(index, connection)?),
        };
        let (inode, striping) = (self.inode(), self.striping(index));
        let (view_offset, len) = (range.start, range.end - range.start);
        let request = if write {
            Request::WriteView {
                inode,
                striping,
                view,
                view_offset,
                len,
            }
        } else {
            Request::ReadView {
                inode,
                striping,
                view,
                view_offset,
                len,
            }
        };
        Ok(self.data_request(index, connection, request))
    }

    /// Reads the view's bytes from view offset `view_offset` into `buf`, in view order;
    /// returns fewer bytes than asked only where the view runs past the end of the file.
    /// Holes read as zeros. Every server at once.
    pub fn read_view(&self, view_offset: u64, buf: &mut [u8]) -> Result<usize, ClientError> {
        self.read_view_scheduled(view_offset, buf, Schedule::AllAtOnce)
    }

    /// [`File::read_view`], visiting the servers in the order and with the concurrency
    /// `schedule` says.
    pub fn read_view_scheduled(
        &self,
        view_offset: u64,
        buf: &mut [u8],
        schedule: Schedule,
    ) -> Result<usize, ClientError> {
        let Some(file_view) = self.current_view() else {
            return self.read_at(view_offset, buf);
        };
        if let Some(base) = file_view.dense_base {
            return self.read_at(self.dense_offset(base, view_offset)?, buf);
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let view = &file_view.view;
        if let Some(t) = &self.trace {
            t.sent_view(false, view, view_offset, buf.len() as u64);
        }
        self.read_with_pattern_fallback(|| self.read_view_checked(&file_view, view_offset, buf, schedule))
    }

    fn read_view_checked(
        &self,
        file_view: &Arc<FileView>,
        view_offset: u64,
        buf: &mut [u8],
        schedule: Schedule,
    ) -> Result<usize, ClientError> {
        let view = &file_view.view;
        let (_, file_end) = self.view_span(view, view_offset, buf.len() as u64)?;
        let mut size = self.known_size.load(Ordering::SeqCst);
        if file_end > size {
            size = self.size()?;
        }
        // View bytes before the first one at or after the end of the file.
        let len = view
            .file_to_view(size)
            .saturating_sub(view_offset)
            .min(buf.len() as u64);
        if len == 0 {
            return Ok(0);
        }
        let (file_start, file_end) = self.view_span(view, view_offset, len)?;
        let shared = SharedBuffer::new(&mut buf[..len as usize]);
        self.view_servers(file_start, file_end)?
            .run(schedule, len, |index, connection| {
                Ok(ReadShare {
                    requests: Requests::new(self, file_view, index, connection, view_offset, len)?,
                    shared,
                    window: VecDeque::new(),
                })
            })
            .map_err(|e| e.context(&self.path))?;
        Ok(len as usize)
    }

    /// The servers holding bytes of file range `[file_start, file_end)`, connected.
    fn view_servers(&self, file_start: u64, file_end: u64) -> Result<ViewServers, ClientError> {
        let servers = self.servers_between(file_start, file_end);
        let connections = servers
            .iter()
            .map(|k| self.connection_of(*k))
            .collect::<Result<_, _>>()
            .map_err(|e: ClientError| e.context(&self.path))?;
        Ok(ViewServers {
            servers,
            connections,
            servers_total: self.layout.servers.len(),
        })
    }

    /// Writes `len` view bytes from view offset `view_offset`, taking them from the
    /// data bytes of consecutive copies of `memory_type` laid in `memory` (copy `i` at
    /// `i * extent`), in type order. `memory` must hold every data byte of the
    /// `ceil(len / size)` copies used.
    pub fn write_view_from(
        &self,
        view_offset: u64,
        len: u64,
        memory: &[u8],
        memory_type: &Datatype,
    ) -> Result<usize, ClientError> {
        self.check_writable()?;
        let Some(count) = self.memory_copies(len, memory_type)? else {
            return Ok(0);
        };
        if let Some(at) = self.contiguous_memory(memory_type, count, len, memory.len())? {
            return self.write_view(view_offset, &memory[at..at + len as usize]);
        }
        let mut stage = vec![0u8; len.min(MEMORY_STAGE_BYTES_MAX) as usize];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(stage.len() as u64) as usize;
            pack(memory_type, count, memory, done, &mut stage[..n]).map_err(|e| self.invalid(e))?;
            self.write_view(
                view_offset
                    .checked_add(done)
                    .ok_or_else(|| self.range_overflow())?,
                &stage[..n],
            )?;
            done += n as u64;
        }
        Ok(len as usize)
    }

    /// Reads `len` view bytes from view offset `view_offset` into the data bytes of
    /// consecutive copies of `memory_type` laid in `memory`, in type order; returns fewer
    /// bytes than asked only where the view runs past the end of the file (the memory
    /// bytes after those read are left as they were).
    pub fn read_view_into(
        &self,
        view_offset: u64,
        len: u64,
        memory: &mut [u8],
        memory_type: &Datatype,
    ) -> Result<usize, ClientError> {
        let Some(count) = self.memory_copies(len, memory_type)? else {
            return Ok(0);
        };
        if let Some(at) = self.contiguous_memory(memory_type, count, len, memory.len())? {
            return self.read_view(view_offset, &mut memory[at..at + len as usize]);
        }
        let mut stage = vec![0u8; len.min(MEMORY_STAGE_BYTES_MAX) as usize];
        let mut done = 0u64;
        while done < len {
            let want = (len - done).min(stage.len() as u64) as usize;
            let at = view_offset
                .checked_add(done)
                .ok_or_else(|| self.range_overflow())?;
            let n = self.read_view(at, &mut stage[..want])?;
            unpack(memory_type, count, &stage[..n], done, memory).map_err(|e| self.invalid(e))?;
            done += n as u64;
            if n < want {
                break;
            }
        }
        Ok(done as usize)
    }

    fn current_view(&self) -> Option<Arc<FileView>> {
        self.view.lock().unwrap().clone()
    }

    fn invalid(&self, error: ViewError) -> ClientError {
        ClientError::InvalidArgument(format!("{}: {error}", self.path))
    }

    fn range_overflow(&self) -> ClientError {
        ClientError::InvalidArgument(format!("{}: view offset plus length overflows", self.path))
    }

    fn dense_offset(&self, base: u64, view_offset: u64) -> Result<u64, ClientError> {
        base.checked_add(view_offset).ok_or_else(|| self.range_overflow())
    }

    /// File offsets of the first and one past the last byte of a nonempty view interval;
    /// fails if the interval maps past the largest file offset.
    fn view_span(&self, view: &View, view_offset: u64, len: u64) -> Result<(u64, u64), ClientError> {
        debug_assert!(len > 0);
        let end = view_offset
            .checked_add(len)
            .ok_or_else(|| self.range_overflow())?;
        // `pieces` checks the whole interval against the largest file offset.
        view.pieces(view_offset, len).map_err(|e| self.invalid(e))?;
        let first = view.view_to_file(view_offset).map_err(|e| self.invalid(e))?;
        let last = view.view_to_file(end - 1).map_err(|e| self.invalid(e))?;
        Ok((first, last + 1))
    }

    /// Servers of the layout holding any byte of file range `[start, end)`.
    fn servers_between(&self, start: u64, end: u64) -> Vec<usize> {
        (0..self.layout.servers.len())
            .filter(|k| self.layout.bytes_on(*k, start, end - start) > 0)
            .collect()
    }

    fn view_chunk_bytes(&self) -> u64 {
        self.inner.transfer.chunk_bytes.clamp(1, DATA_BYTES_MAX)
    }

    /// Copies of `memory_type` that `len` stream bytes need; `None` for an empty access.
    fn memory_copies(&self, len: u64, memory_type: &Datatype) -> Result<Option<u64>, ClientError> {
        if len == 0 {
            return Ok(None);
        }
        let size = memory_type.size_bytes();
        if size == 0 {
            return Err(ClientError::InvalidArgument(format!(
                "{}: the memory type holds no data bytes",
                self.path
            )));
        }
        if usize::try_from(len).is_err() {
            return Err(self.range_overflow());
        }
        Ok(Some(len.div_ceil(size)))
    }

    /// Where the `len` stream bytes start in a buffer of `buffer_len` bytes when the
    /// memory type lays them out contiguously (then no staging copy is made).
    fn contiguous_memory(
        &self,
        memory_type: &Datatype,
        count: u64,
        len: u64,
        buffer_len: usize,
    ) -> Result<Option<usize>, ClientError> {
        let dense = memory_type.is_contiguous()
            && (count == 1 || memory_type.extent() == memory_type.size_bytes() as i64);
        if !dense {
            return Ok(None);
        }
        let start = memory_type.true_lb();
        if start < 0 || (start as u128) + u128::from(len) > buffer_len as u128 {
            return Err(self.invalid(ViewError::OutOfBounds {
                lowest: i128::from(start),
                highest: i128::from(start) + i128::from(len),
                buffer_len,
            }));
        }
        Ok(Some(start as usize))
    }
}

/// The order and concurrency in which a view transfer visits the servers holding its
/// bytes (for a cached file, its cache managers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Schedule {
    /// Every server at once: each with its window of requests in flight, stepped in
    /// turn by the calling thread (by at most `TRANSFER_THREADS_MAX` threads for a
    /// large transfer).
    #[default]
    AllAtOnce,
    /// One server after another in layout order, each server's whole share before the
    /// next: with many processes doing the same, they all queue at server 0 first.
    InOrder,
    /// Clusterfile's decentralised schedule for the process numbered `rank`: one thread,
    /// at step `j` one request (at most the transfer chunk) to server `(rank + j) mod n`
    /// of the `n` servers of the data layout, skipping servers with nothing left. When
    /// every process does the same, the servers are each busy with a different process
    /// at every step, with no coordination among the processes.
    Decentralised { rank: usize },
}

/// The order in which process `rank` first visits `servers` (ascending layout indices
/// of a layout of `servers_total`): from server `rank mod servers_total` on, wrapping
/// around; returns indices into `servers`.
fn decentralised_order(servers: &[usize], servers_total: usize, rank: usize) -> Vec<usize> {
    let n = servers_total.max(1);
    let first = rank % n;
    let mut order: Vec<usize> = (0..servers.len()).collect();
    order.sort_by_key(|&k| (servers[k] % n + n - first) % n);
    order
}

/// The servers of one view transfer: ascending layout indices, their connections in the
/// same order, and how many servers the layout has.
struct ViewServers {
    servers: Vec<usize>,
    connections: Vec<Arc<Connection>>,
    servers_total: usize,
}

impl ViewServers {
    /// Runs every server's share (made by `share`) as `schedule` says; returns the
    /// first error.
    fn run<'c, S: Share>(
        &'c self,
        schedule: Schedule,
        bytes: u64,
        share: impl Fn(usize, &'c Arc<Connection>) -> Result<S, ClientError> + Sync,
    ) -> Result<(), ClientError> {
        let (servers, connections) = (&self.servers, &self.connections);
        let whole = |k: usize| -> Result<(), ClientError> {
            let mut s = share(servers[k], &connections[k])?;
            while s.step()? {}
            s.finish()
        };
        match schedule {
            // Every server at once: stepped in turn from this thread, or from a
            // bounded number of threads for a large transfer (see `drive`).
            Schedule::AllAtOnce => {
                crate::drive::drive(servers.len(), bytes, |k| share(servers[k], &connections[k]))
            }
            Schedule::InOrder => (0..servers.len()).try_for_each(whole),
            Schedule::Decentralised { rank } => {
                let mut shares: Vec<S> = decentralised_order(servers, self.servers_total, rank)
                    .iter()
                    .map(|&k| share(servers[k], &connections[k]))
                    .collect::<Result<_, _>>()?;
                let mut active: Vec<usize> = (0..shares.len()).collect();
                while !active.is_empty() {
                    let mut still = Vec::with_capacity(active.len());
                    for &i in &active {
                        if shares[i].step()? {
                            still.push(i);
                        }
                    }
                    active = still;
                }
                shares.iter_mut().try_for_each(|s| s.finish())
            }
        }
    }
}

/// What the shares of both directions walk: one server's requests over a view
/// interval, the view registered on its connection at the first.
struct Requests<'a> {
    file: &'a File,
    file_view: &'a FileView,
    index: usize,
    connection: &'a Arc<Connection>,
    view_offset: u64,
    chunks: Chunks<'a>,
    id: Option<ViewId>,
    inflight: usize,
}

impl<'a> Requests<'a> {
    fn new(
        file: &'a File,
        file_view: &'a FileView,
        index: usize,
        connection: &'a Arc<Connection>,
        view_offset: u64,
        len: u64,
    ) -> Result<Requests<'a>, ClientError> {
        let slices = file_view
            .view
            .slices_on(view_offset, len, &file.layout, index)
            .map_err(|e| file.invalid(e))?;
        let chunk_bytes = file.view_chunk_bytes();
        Ok(Requests {
            file,
            file_view,
            index,
            connection,
            view_offset,
            chunks: Chunks::new(slices, view_offset, chunk_bytes),
            id: None,
            inflight: file.inner.transfer.inflight_per_server.max(1),
        })
    }

    /// The next request, calling `visit(buffer offset, len)` for each slice of the
    /// caller's buffer it moves, in order; `None` when the server has nothing more.
    fn next(
        &mut self,
        write: bool,
        mut visit: impl FnMut(usize, usize),
    ) -> Result<Option<Request>, ClientError> {
        let view_offset = self.view_offset;
        let Some((start, end)) = self
            .chunks
            .next(|at, n| visit((at - view_offset) as usize, n as usize))
        else {
            return Ok(None);
        };
        let request = self.file.view_request(
            self.file_view,
            &mut self.id,
            self.index,
            self.connection,
            start..end,
            write,
        )?;
        Ok(Some(request))
    }
}

/// One server's share of a `write_view`.
struct WriteShare<'a> {
    requests: Requests<'a>,
    buf: &'a [u8],
    gather: Gather,
    window: VecDeque<PendingCall<'a>>,
}

impl Share for WriteShare<'_> {
    fn step(&mut self) -> Result<bool, ClientError> {
        let (buf, gather) = (self.buf, &mut self.gather);
        gather.clear();
        let Some(request) = self.requests.next(true, |at, n| gather.push(buf, at, n))? else {
            return Ok(false);
        };
        if self.window.len() >= self.requests.inflight {
            expect_bytes(self.window.pop_front().expect("window is full").wait()?.0)?;
        }
        let connection: &'_ Connection = self.requests.connection;
        self.window
            .push_back(connection.send_parts(&request, &self.gather.slices(buf))?);
        Ok(true)
    }

    fn finish(&mut self) -> Result<(), ClientError> {
        while let Some(call) = self.window.pop_front() {
            expect_bytes(call.wait()?.0)?;
        }
        Ok(())
    }
}

/// One server's share of a `read_view`.
struct ReadShare<'a> {
    requests: Requests<'a>,
    shared: SharedBuffer,
    window: VecDeque<Reply<'a>>,
}

impl Share for ReadShare<'_> {
    fn step(&mut self) -> Result<bool, ClientError> {
        // Where each slice of the request goes in the buffer.
        let mut places: Vec<(usize, usize)> = Vec::new();
        let mut bytes = 0u64;
        let Some(request) = self.requests.next(false, |at, n| {
            places.push((at, n));
            bytes += n as u64;
        })?
        else {
            return Ok(false);
        };
        if self.window.len() >= self.requests.inflight {
            self.window
                .pop_front()
                .expect("window is full")
                .finish(&self.shared)?;
        }
        let connection: &'_ Connection = self.requests.connection;
        let reply = if bytes >= SINK_PIECE_BYTES_MIN * places.len() as u64 {
            let parts = places.iter().map(|&(at, n)| self.shared.part(at, n)).collect();
            // SAFETY: the pieces of one view interval are disjoint bytes of the caller's
            // buffer, each in one request of one server, and the buffer outlives every
            // call: each is waited for, or dropped (which waits for the reader), before
            // `read_view_scheduled` returns.
            let sink = unsafe { ReplySink::new(parts) };
            Reply::Sink(connection.send_into(&request, &[], sink)?, bytes)
        } else {
            Reply::Copy(connection.send_expecting(&request, bytes)?, places)
        };
        self.window.push_back(reply);
        Ok(true)
    }

    fn finish(&mut self) -> Result<(), ClientError> {
        while let Some(reply) = self.window.pop_front() {
            reply.finish(&self.shared)?;
        }
        Ok(())
    }
}

/// A read request in flight, and how its reply reaches the caller's buffer.
enum Reply<'a> {
    /// Received straight into the pieces (this many bytes).
    Sink(PendingCall<'a>, u64),
    /// Received into a buffer, then copied to these (offset in `buf`, length) places.
    Copy(PendingCall<'a>, Vec<(usize, usize)>),
}

impl Reply<'_> {
    fn finish(self, buffer: &SharedBuffer) -> Result<(), ClientError> {
        match self {
            Reply::Sink(call, expected) => match call.wait_sink()? {
                SinkReply::Filled(Response::Bytes(n)) if n == expected => Ok(()),
                SinkReply::Filled(Response::Bytes(_)) | SinkReply::Other(Response::Bytes(_), _) => {
                    Err(short_reply())
                }
                SinkReply::Filled(other) | SinkReply::Other(other, _) => {
                    Err(crate::error::unexpected(&other))
                }
            },
            Reply::Copy(call, places) => {
                let data = call.wait()?.1;
                let mut at = 0usize;
                for (to, n) in places {
                    let Some(bytes) = data.get(at..at + n) else {
                        return Err(short_reply());
                    };
                    buffer.put(to, bytes);
                    at += n;
                }
                if at != data.len() {
                    return Err(short_reply());
                }
                Ok(())
            }
        }
    }
}

fn short_reply() -> ClientError {
    ClientError::refused(
        ErrorCode::Io,
        "io server returned a different number of bytes than its pieces of the view interval",
    )
}

#[cfg(test)]
mod tests {
    use super::decentralised_order;

    #[test]
    fn each_process_starts_at_its_own_server_and_wraps_around() {
        // Four servers, all involved: process i visits i, i+1, ... (mod 4).
        for rank in 0..8 {
            let order = decentralised_order(&[0, 1, 2, 3], 4, rank);
            let expected: Vec<usize> = (0..4).map(|j| (rank + j) % 4).collect();
            assert_eq!(order, expected, "rank {rank}");
        }
        // Only servers 0 and 2 hold bytes: process 1 starts at 2 (the first at or
        // after 1), process 3 wraps to 0.
        assert_eq!(decentralised_order(&[0, 2], 4, 1), vec![1, 0]);
        assert_eq!(decentralised_order(&[0, 2], 4, 3), vec![0, 1]);
        assert_eq!(decentralised_order(&[], 4, 3), Vec::<usize>::new());
    }
}
