//! Where a cache manager's blocks come from and go back to: the io servers of each
//! file, reached directly in this process when the manager is colocated with the io
//! server holding the bytes (disk-directed I/O: no socket, data crosses the network
//! once), else over the network with list I/O.

use std::sync::Arc;

use weft_iod::IoService;
use weft_layout::{InodeId, Layout, ServerId};
use weft_proto::msg::{Request, Response};
use weft_proto::{ErrorCode, Range, Striping, WireError};
use weft_rpc::{Connection, ConnectionPool, PendingCall, RpcError};

/// Finds an io server's address (a cluster description read once, or read when it
/// appears, for managers launched before the description is written).
pub type Directory = Box<dyn Fn(ServerId) -> Option<String> + Send + Sync>;

/// The io servers as a cache manager sees them.
pub struct Backing {
    /// The io role of this process, if it has one, and its server id.
    local: Option<(ServerId, Arc<IoService>)>,
    pool: ConnectionPool,
    directory: Directory,
}

/// Connections to one file's io servers (layout index), each made once when first
/// needed (`Backing::links`).
pub struct Links {
    cells: Vec<std::cell::OnceCell<Result<Arc<Connection>, WireError>>>,
}

/// A read `Backing::send_read` started: the remote servers' calls in flight, and the
/// layout index of this process's own io server if it holds bytes of the ranges.
pub struct SentRead<'c> {
    ranges: Vec<Range>,
    local: Option<usize>,
    calls: Vec<(usize, PendingCall<'c>)>,
}

fn striping(layout: &Layout, index: usize) -> Striping {
    Striping {
        stripe_size_bytes: layout.stripe_size_bytes,
        stripe_count: layout.servers.len() as u32,
        server_index: index as u32,
    }
}

/// An rpc failure as the error the cache manager reports, naming the io server.
fn remote(server: ServerId, e: RpcError) -> WireError {
    match e {
        RpcError::Remote { error, .. } => {
            WireError::new(error.code, format!("io server {server}: {}", error.message))
        }
        other => WireError::new(other.code(), format!("io server {server}: {other}")),
    }
}

impl Backing {
    pub fn new(
        local: Option<(ServerId, Arc<IoService>)>,
        pool: ConnectionPool,
        directory: Directory,
    ) -> Backing {
        Backing {
            local,
            pool,
            directory,
        }
    }

    fn addr(&self, server: ServerId) -> Result<String, WireError> {
        (self.directory)(server).ok_or_else(|| {
            WireError::new(
                ErrorCode::Unavailable,
                format!("io server {server} is not in this cache manager's cluster description"),
            )
        })
    }

    /// The io servers (layout indices) holding bytes of `ranges`, split into this
    /// process's own io role (served by a call) and connections to the others.
    #[allow(clippy::type_complexity)]
    fn reach(
        &self,
        layout: &Layout,
        ranges: &[Range],
    ) -> Result<(Option<(usize, &IoService)>, Vec<(usize, Arc<Connection>)>), WireError> {
        let mut local = None;
        let mut connections = Vec::new();
        for k in 0..layout.servers.len() {
            if !ranges.iter().any(|r| layout.bytes_on(k, r.offset, r.len) > 0) {
                continue;
            }
            let server = layout.servers[k];
            match &self.local {
                Some((id, io)) if *id == server => local = Some((k, &**io)),
                _ => {
                    let addr = self.addr(server)?;
                    let connection = self.pool.get(&addr).map_err(|e| remote(server, e))?;
                    connections.push((k, connection));
                }
            }
        }
        Ok((local, connections))
    }

    /// Connections to a file's io servers, made as first needed, held for the reads
    /// of one request (several of whose fetches may be in flight at once).
    pub fn links(&self, layout: &Layout) -> Links {
        Links {
            cells: (0..layout.servers.len())
                .map(|_| std::cell::OnceCell::new())
                .collect(),
        }
    }

    /// Reads the file bytes of each of `ranges` into its own buffer, `outs[i]` exactly
    /// `ranges[i].len` bytes (a fetched block's own memory: nothing is gathered and
    /// copied again). Holes and bytes past the end of the file read as zeros.
    pub fn read_parts(
        &self,
        inode: InodeId,
        layout: &Layout,
        ranges: &[Range],
        outs: &mut [&mut [u8]],
    ) -> Result<(), WireError> {
        let links = self.links(layout);
        let sent = self.send_read(&links, inode, layout, ranges.to_vec())?;
        self.finish_read(sent, inode, layout, outs)
    }

    /// Starts a read of `ranges` (see `read_parts`): the remote servers are asked now,
    /// this process's own io server is read by `finish_read`, so several reads can be
    /// in flight to all the servers at once.
    pub fn send_read<'c>(
        &self,
        links: &'c Links,
        inode: InodeId,
        layout: &Layout,
        ranges: Vec<Range>,
    ) -> Result<SentRead<'c>, WireError> {
        let mut local = None;
        let mut calls: Vec<(usize, PendingCall<'c>)> = Vec::new();
        for k in 0..layout.servers.len() {
            if !ranges.iter().any(|r| layout.bytes_on(k, r.offset, r.len) > 0) {
                continue;
            }
            let server = layout.servers[k];
            if matches!(&self.local, Some((id, _)) if *id == server) {
                local = Some(k);
                continue;
            }
            let connection = links.cells[k]
                .get_or_init(|| {
                    let addr = self.addr(server)?;
                    self.pool.get(&addr).map_err(|e| remote(server, e))
                })
                .as_ref()
                .map_err(Clone::clone)?;
            let request = Request::Read {
                inode,
                striping: striping(layout, k),
                ranges: ranges.clone(),
            };
            let call = connection.send(&request, &[]).map_err(|e| remote(server, e))?;
            calls.push((k, call));
        }
        Ok(SentRead { ranges, local, calls })
    }

    /// Ends a read `send_read` started: this process's own server's bytes are read,
    /// the remote answers waited for, each range's bytes placed in `outs[i]`.
    pub fn finish_read(
        &self,
        sent: SentRead<'_>,
        inode: InodeId,
        layout: &Layout,
        outs: &mut [&mut [u8]],
    ) -> Result<(), WireError> {
        let SentRead { ranges, local, calls } = sent;
        debug_assert!(
            ranges.len() == outs.len()
                && ranges
                    .iter()
                    .zip(outs.iter())
                    .all(|(r, o)| r.len == o.len() as u64)
        );
        if let (Some(k), Some((_, io))) = (local, &self.local) {
            if calls.is_empty()
                && ranges
                    .iter()
                    .all(|r| layout.bytes_on(k, r.offset, r.len) == r.len)
            {
                // This process's own io server holds every byte of every range (a
                // colocated manager's own blocks): each is read straight into its
                // buffer, adjacent ones by one preadv.
                io.read_into_parts(inode, striping(layout, k), &ranges, outs)?;
            } else {
                let (_, data) = io.read(inode, striping(layout, k), &ranges)?;
                Self::scatter(layout, k, &ranges, &data, outs)?;
            }
        }
        for (k, call) in calls {
            let (_, data) = call.wait().map_err(|e| remote(layout.servers[k], e))?;
            Self::scatter(layout, k, &ranges, &data, outs)?;
        }
        Ok(())
    }

    /// Read-ahead: lets this process's own io server start reading its bytes of
    /// `ranges` into its page cache, without waiting (the other servers are not asked).
    pub fn will_need(&self, inode: InodeId, layout: &Layout, ranges: &[Range]) {
        let Some((id, io)) = &self.local else { return };
        if let Some(k) = layout.servers.iter().position(|s| s == id) {
            io.will_need(inode, striping(layout, k), ranges);
        }
    }

    /// Places server `k`'s stream of `ranges` into `outs` (range `i`'s bytes in
    /// `outs[i]`).
    fn scatter(
        layout: &Layout,
        k: usize,
        ranges: &[Range],
        stream: &[u8],
        outs: &mut [&mut [u8]],
    ) -> Result<(), WireError> {
        let mut at = 0usize;
        for (range, out) in ranges.iter().zip(outs.iter_mut()) {
            for piece in layout
                .pieces_on(k, range.offset, range.len)
                .expect("ranges checked")
            {
                let n = piece.len as usize;
                let into = (piece.file_offset - range.offset) as usize;
                let Some(bytes) = stream.get(at..at + n) else {
                    return Err(WireError::new(
                        ErrorCode::Io,
                        format!("io server {} sent a short read reply", layout.servers[k]),
                    ));
                };
                out[into..into + n].copy_from_slice(bytes);
                at += n;
            }
        }
        Ok(())
    }

    /// Sets the local size of each of the file's objects for a file of `size` bytes
    /// (every io server of the layout, the remote ones asked at once), as the client's
    /// truncate does.
    pub fn truncate(&self, inode: InodeId, layout: &Layout, size: u64) -> Result<(), WireError> {
        let request = |k: usize| Request::Truncate {
            inode,
            striping: striping(layout, k),
            size,
        };
        let mut first_error = None;
        let mut calls = Vec::new();
        for (k, &server) in layout.servers.iter().enumerate() {
            let sent = match &self.local {
                Some((id, io)) if *id == server => {
                    io.truncate(inode, striping(layout, k), size).map(|_| None)
                }
                _ => self.addr(server).and_then(|addr| {
                    let connection = self.pool.get(&addr).map_err(|e| remote(server, e))?;
                    Ok(Some(connection))
                }),
            };
            match sent {
                Ok(Some(connection)) => calls.push((k, connection)),
                Ok(None) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let mut pending = Vec::new();
        for (k, connection) in &calls {
            match connection.send(&request(*k), &[]) {
                Ok(call) => pending.push((*k, call)),
                Err(e) => {
                    first_error.get_or_insert(remote(layout.servers[*k], e));
                }
            }
        }
        for (k, call) in pending {
            if let Err(e) = call.wait() {
                first_error.get_or_insert(remote(layout.servers[k], e));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Writes `data[i]`, the file bytes of `ranges[i]`, to the io servers.
    pub fn write(
        &self,
        inode: InodeId,
        layout: &Layout,
        ranges: &[Range],
        data: &[&[u8]],
    ) -> Result<(), WireError> {
        debug_assert!(ranges.iter().zip(data).all(|(r, d)| r.len == d.len() as u64));
        // Each server's stream: its pieces of the ranges, in list order, borrowed from
        // the callers' bytes (sent with writev, never copied into one buffer).
        let stream_of = |k: usize| -> Vec<&[u8]> {
            let mut parts = Vec::new();
            for (range, bytes) in ranges.iter().zip(data) {
                for piece in layout
                    .pieces_on(k, range.offset, range.len)
                    .expect("ranges checked")
                {
                    let at = (piece.file_offset - range.offset) as usize;
                    parts.push(&bytes[at..at + piece.len as usize]);
                }
            }
            parts
        };
        let (local, connections) = self.reach(layout, ranges)?;
        // The remote servers first: their writes run while this process writes its own.
        let mut calls = Vec::new();
        for (k, connection) in &connections {
            let request = Request::Write {
                inode,
                striping: striping(layout, *k),
                ranges: ranges.to_vec(),
            };
            let call = connection
                .send_parts(&request, &stream_of(*k))
                .map_err(|e| remote(layout.servers[*k], e))?;
            calls.push((*k, call));
        }
        let mut first_error = None;
        if let Some((k, io)) = local {
            // Range by range, each straight from the caller's bytes: gathering them into
            // one stream first would copy every byte once more.
            for (range, bytes) in ranges.iter().zip(data) {
                let mut pieces = layout
                    .pieces_on(k, range.offset, range.len)
                    .expect("ranges checked")
                    .map(|p| {
                        let at = (p.file_offset - range.offset) as usize;
                        &bytes[at..at + p.len as usize]
                    })
                    .peekable();
                let Some(first) = pieces.next() else { continue };
                let one = std::slice::from_ref(range);
                let written = match pieces.peek() {
                    None => io.write(inode, striping(layout, k), one, first),
                    Some(_) => {
                        let stream: Vec<u8> =
                            std::iter::once(first).chain(pieces).flatten().copied().collect();
                        io.write(inode, striping(layout, k), one, &stream)
                    }
                };
                if let Err(e) = written {
                    first_error = Some(e);
                    break;
                }
            }
        }
        for (k, call) in calls {
            match call.wait() {
                Ok((Response::Bytes(_), _)) => {}
                Ok((other, _)) => {
                    first_error.get_or_insert(WireError::new(
                        ErrorCode::Io,
                        format!("io server {} answered a write with {other:?}", layout.servers[k]),
                    ));
                }
                Err(e) => {
                    first_error.get_or_insert(remote(layout.servers[k], e));
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
