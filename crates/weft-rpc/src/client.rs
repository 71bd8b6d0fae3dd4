//! The client side: a multiplexed connection to one server, and a pool of them.

use crate::auth::{client_handshake, ClientAuth};
use crate::capability::{CapabilitySource, PresentedHere};
use crate::frame_io::{read_exact_vec, read_header, write_frame_parts, ReadFrameError};
use crate::shm::{ClientSegment, Lease, Mapping, Pool, PoolHold, Transport, SHM_PAYLOAD_MIN};
use crate::stream::{Stream, UNIX_PREFIX};
use std::collections::HashMap;
use std::io::{self, IoSliceMut, Read};
use std::net::Shutdown;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weft_proto::frame::{FrameKind, PROTOCOL_VERSION};
use weft_proto::msg::{decode_result, Request, Response};
use weft_proto::{ErrorCode, WireError};

/// A response with its bulk data.
pub type CallReply = (Response, Vec<u8>);

#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RpcError {
    #[error("cannot connect to {addr}: {reason}")]
    Connect { addr: String, reason: String },
    #[error("connection to {addr} lost: {reason}")]
    Disconnected { addr: String, reason: String },
    #[error("no answer from {addr} within {after_ms} ms")]
    TimedOut { addr: String, after_ms: u64 },
    #[error("protocol error talking to {addr}: {detail}")]
    Protocol { addr: String, detail: String },
    #[error("{addr}: {error}")]
    Remote { addr: String, error: WireError },
    #[error("{addr} speaks Weft protocol version {server_version}, this program version {PROTOCOL_VERSION}; upgrade the older side")]
    ProtocolVersion { addr: String, server_version: u16 },
    /// The handshake failed: the server refused this client's proof, or the server
    /// could not prove it holds the cluster key.
    #[error("{addr} refused the connection: {reason}")]
    Authentication { addr: String, reason: String },
}

impl RpcError {
    /// The error as a wire error code, for boundaries that speak codes or errno.
    pub fn code(&self) -> ErrorCode {
        match self {
            RpcError::Connect { .. } | RpcError::Disconnected { .. } => ErrorCode::Unavailable,
            RpcError::TimedOut { .. } => ErrorCode::TimedOut,
            RpcError::Protocol { .. } => ErrorCode::Io,
            RpcError::Remote { error, .. } => error.code,
            RpcError::ProtocolVersion { .. } => ErrorCode::ProtocolVersion,
            RpcError::Authentication { .. } => ErrorCode::PermissionDenied,
        }
    }

    /// True when the request may not have reached the server or its answer was lost,
    /// so that a fresh connection could succeed.
    pub fn is_transport(&self) -> bool {
        matches!(self, RpcError::Connect { .. } | RpcError::Disconnected { .. })
    }
}

/// How long to wait for a connection and for each answer.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    pub request: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            request: Duration::from_secs(60),
        }
    }
}

impl Timeouts {
    /// Defaults, overridden by `WEFT_CONNECT_TIMEOUT_MS` and `WEFT_TIMEOUT_MS`.
    pub fn from_env() -> Timeouts {
        let ms = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
        let mut t = Timeouts::default();
        if let Some(v) = ms("WEFT_CONNECT_TIMEOUT_MS") {
            t.connect = Duration::from_millis(v.max(1));
        }
        if let Some(v) = ms("WEFT_TIMEOUT_MS") {
            t.request = Duration::from_millis(v.max(1));
        }
        t
    }
}

/// What a call is told by the thread that read the connection.
// Nearly every notice is a reply: boxing it would cost an allocation per call.
#[allow(clippy::large_enum_variant)]
enum Notice {
    /// Its answer.
    Reply(Result<Delivery, RpcError>),
    /// Nobody reads the connection now: the call's thread is to (it was waiting).
    Lead,
}

/// The answer to a call, as read off the connection.
struct Delivery {
    response: Response,
    /// The bulk data, unless it went straight into the call's sink.
    data: Option<Vec<u8>>,
}

struct Waiter {
    /// Room for one `Lead` and the reply (the flags below keep it at that).
    sender: SyncSender<Notice>,
    /// Its thread waits for the answer (so it may be asked to lead).
    waiting: bool,
    /// A `Lead` was sent to it and not acted on yet.
    promoted: bool,
    /// Its reply is expected to be large (`BIG_REPLY_BYTES`): its thread never reads
    /// the connection, the watcher does (see `Connection`).
    big: bool,
    /// Where the reply's bulk data goes, if it has the expected length.
    sink: Option<ReplySink>,
    /// The call's region of the shared segment (a `ShmCall`).
    lease: Option<Lease>,
    /// The read pool's buffers the server places its reply into (a `ShmScatter`).
    pool_hold: Option<PoolHold>,
}

/// Slices of a caller's memory that a reply's bulk data is read into directly, in
/// order, instead of into a new vector that the caller then copies from.
pub struct ReplySink {
    parts: Vec<(*mut u8, usize)>,
    total: u64,
}

// SAFETY: the parts are plain memory filled by one thread at a time (whichever reads
// the reply); the contract of `ReplySink::new` keeps it valid and unaliased meanwhile.
unsafe impl Send for ReplySink {}

impl ReplySink {
    /// A sink over `parts` (address, length), filled in order.
    ///
    /// # Safety
    /// Every part must be valid for writes of its length, and neither read nor written
    /// by anyone else, until the `PendingCall` made with this sink has been waited for
    /// or dropped. The call must not be leaked (`mem::forget`): its drop is what waits
    /// for the thread reading its reply to be done with the memory.
    pub unsafe fn new(parts: Vec<(*mut u8, usize)>) -> ReplySink {
        let total = parts.iter().map(|p| p.1 as u64).sum();
        ReplySink { parts, total }
    }

    pub fn len(&self) -> u64 {
        self.total
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    fn fill(&mut self, stream: &mut impl Read) -> io::Result<()> {
        let mut slices: Vec<IoSliceMut<'_>> = self
            .parts
            .iter()
            .filter(|p| p.1 > 0)
            // SAFETY: valid and exclusively ours for now (contract of `new`).
            .map(|&(base, len)| IoSliceMut::new(unsafe { std::slice::from_raw_parts_mut(base, len) }))
            .collect();
        let mut rest: &mut [IoSliceMut<'_>] = &mut slices;
        while !rest.is_empty() {
            let batch = rest.len().min(1024);
            match stream.read_vectored(&mut rest[..batch]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => IoSliceMut::advance_slices(&mut rest, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// The answer to a call made with a sink.
pub enum SinkReply {
    /// The bulk data is in the sink.
    Filled(Response),
    /// The bulk data did not have the sink's length (or the answer was an error
    /// response): here it is, and the sink is untouched.
    Other(Response, Vec<u8>),
}

struct PendingTable {
    waiters: HashMap<u64, Waiter>,
    /// Set once the connection broke; every later call fails with it.
    broken: Option<String>,
    /// The shared segment, while the connection is sound.
    segment: Option<Arc<ClientSegment>>,
    /// Regions of calls given up on (timed out, dropped) that the server may still
    /// write into: held until their answer comes or the connection ends.
    late: HashMap<u64, Lease>,
    /// The process's read pool, while the connection is sound and the server took it.
    pool: Option<Arc<Pool>>,
    /// Pool buffers of calls given up on: held as `late` holds regions.
    late_pool: HashMap<u64, PoolHold>,
    /// A thread reads the connection now (holds `Connection::reader`): a waiting
    /// call's, or the watcher's. At most one; see `PendingCall::wait`.
    leader: bool,
    /// Waiters with `big` set.
    big: usize,
    /// The connection was dropped: the watcher ends.
    stopped: bool,
    /// Wakes the watcher (a large reply expected, the leader left while one is, or
    /// the connection dropped).
    watch: Arc<std::sync::Condvar>,
}

impl PendingTable {
    /// Forgets the waiter of call `id`, if it is still there, keeping its region held.
    fn forget(&mut self, id: u64) -> bool {
        match self.take(id) {
            Some(mut waiter) => {
                if let Some(lease) = waiter.lease.take() {
                    self.late.insert(id, lease);
                }
                if let Some(hold) = waiter.pool_hold.take() {
                    self.late_pool.insert(id, hold);
                }
                true
            }
            None => false,
        }
    }

    /// Removes the waiter of call `id`.
    fn take(&mut self, id: u64) -> Option<Waiter> {
        let waiter = self.waiters.remove(&id);
        if waiter.as_ref().is_some_and(|w| w.big) {
            self.big -= 1;
        }
        waiter
    }

    /// Nobody reads the connection: asks one waiting call's thread to (unless one was
    /// asked already and has not acted yet); the watcher, if a large reply is due.
    fn promote_next(&mut self) {
        if self.leader || self.broken.is_some() || self.waiters.values().any(|w| w.promoted) {
            return;
        }
        if self.big > 0 {
            self.watch.notify_one();
            return;
        }
        if let Some(waiter) = self.waiters.values_mut().find(|w| w.waiting && !w.big) {
            waiter.promoted = true;
            let _ = waiter.sender.try_send(Notice::Lead);
        }
    }
}

/// One TCP connection to a server, shared by many threads, with many requests in
/// flight.
///
/// Replies are read by the threads waiting for them (leader/follower): one waiting
/// call's thread reads the connection, handing each reply to the call it answers,
/// until its own arrives; then it asks another waiting call's thread to go on. A call
/// alone on the connection thus reads its own reply, with no thread in between. A
/// watcher thread reads replies nobody waits for yet (every `WATCH_BUSY`), notices
/// a server that closed the connection while nobody waited (every `WATCH_IDLE`), and
/// reads the connection while a large reply (`BIG_REPLY_BYTES`) is due: a thread that
/// waits on several connections in turn then has its large replies received in
/// parallel, as it did with a reader thread per connection.
pub struct Connection {
    addr: String,
    writer: Mutex<Stream>,
    /// The reading side, held by the leader (`PendingTable::leader`) only.
    reader: Arc<Mutex<Stream>>,
    /// Shuts the socket down without waiting for the writer lock.
    control: Stream,
    pending: Arc<Mutex<PendingTable>>,
    next_id: AtomicU64,
    timeouts: Timeouts,
    hello: (weft_layout::ServerId, u32, u64),
    /// Where this connection's data requests get their capabilities (none: they are
    /// sent without, as a raw client's).
    capabilities: std::sync::OnceLock<Arc<dyn CapabilitySource>>,
    /// What this connection presented to the server.
    presented: Mutex<PresentedHere>,
}

/// A request sent and not yet answered.
pub struct PendingCall<'a> {
    connection: &'a Connection,
    id: u64,
    receiver: Receiver<Notice>,
    /// The call has a sink and has not been answered yet: dropping it must make sure
    /// the thread reading its reply is done with the sink's memory.
    sink_outstanding: bool,
    /// The inode whose capability the request relied on: forgotten when the server
    /// refuses it, so that the next request presents a fresh one.
    capability_of: Option<weft_layout::InodeId>,
}

impl Connection {
    /// Connects, performs the handshake (versions, and proofs of the cluster key both
    /// ways) and starts the watcher thread.
    pub fn connect(
        addr: &str,
        client_name: &str,
        auth: &ClientAuth,
        timeouts: Timeouts,
    ) -> Result<Arc<Connection>, RpcError> {
        Connection::connect_as(addr, addr, client_name, auth, timeouts)
    }

    /// Connects to `target`; errors name the server as `addr` (a Unix socket's server
    /// by its network address).
    pub fn connect_as(
        target: &str,
        addr: &str,
        client_name: &str,
        auth: &ClientAuth,
        timeouts: Timeouts,
    ) -> Result<Arc<Connection>, RpcError> {
        let connect_err = |reason: String| RpcError::Connect {
            addr: addr.to_owned(),
            reason,
        };
        let mut stream = Stream::connect(target, timeouts.connect).map_err(|e| connect_err(e.to_string()))?;
        // A server that stops reading must not block a writer forever.
        stream.set_write_timeout(Some(timeouts.request)).ok();
        // The handshake runs before the watcher thread exists, each wait bounded by the
        // request timeout; no request can go out before it succeeded.
        stream.set_read_timeout(Some(timeouts.request)).ok();
        let hello = client_handshake(
            &mut stream,
            addr,
            client_name,
            auth,
            timeouts.request.as_millis() as u64,
        );
        let hello = match hello {
            Ok(h) => h,
            Err(e) => {
                stream.shutdown(Shutdown::Both).ok();
                return Err(e);
            }
        };
        // On a Unix socket, a shared segment for bulk data unless told otherwise; only
        // servers that move bulk data (io, cache) get one: a metadata manager's local
        // clients use its socket for the per-user limits, not for bulk data.
        let transport = Transport::from_env();
        let bulk = hello.roles & (weft_proto::msg::roles::IO | weft_proto::msg::roles::CACHE) != 0;
        let segment = if target.starts_with(UNIX_PREFIX) && transport != Transport::Unix && bulk {
            match attach_segment(&mut stream) {
                Ok(segment) => Some(segment),
                Err(reason) if transport == Transport::Shm => {
                    stream.shutdown(Shutdown::Both).ok();
                    return Err(connect_err(format!(
                        "no shared-memory transport (WEFT_TRANSPORT=shm): {reason}"
                    )));
                }
                Err(_) => None,
            }
        } else {
            None
        };
        // The process's read pool, on a connection with a segment: a server that
        // predates it (UnknownOpcode) or refuses it leaves reads as they were.
        let pool = match (&segment, Pool::get()) {
            (Some(_), Some(pool)) => attach_pool(&mut stream, &pool).ok().map(|()| pool),
            _ => None,
        };
        stream.set_read_timeout(None).ok();
        let reader = stream.try_clone().map_err(|e| connect_err(e.to_string()))?;
        let control = stream.try_clone().map_err(|e| connect_err(e.to_string()))?;
        let pending = Arc::new(Mutex::new(PendingTable {
            waiters: HashMap::new(),
            broken: None,
            segment,
            late: HashMap::new(),
            pool,
            late_pool: HashMap::new(),
            leader: false,
            big: 0,
            stopped: false,
            watch: Default::default(),
        }));
        let reader = Arc::new(Mutex::new(reader));
        let connection = Connection {
            addr: addr.to_owned(),
            writer: Mutex::new(stream),
            reader: reader.clone(),
            control,
            pending: pending.clone(),
            // Ids 1 and 2 went to the handshake, 3 to the segment's attach, 4 to the
            // pool's; 0 is the server's id for errors that concern the whole connection.
            next_id: AtomicU64::new(5),
            timeouts,
            hello: (hello.server_id, hello.roles, hello.incarnation),
            capabilities: Default::default(),
            presented: Default::default(),
        };
        let watch_addr = addr.to_owned();
        let request_timeout = timeouts.request;
        std::thread::Builder::new()
            .name(format!("weft-rpc-{addr}"))
            .spawn(move || watch(&reader, &pending, &watch_addr, request_timeout))
            .map_err(|e| connect_err(e.to_string()))?;
        Ok(Arc::new(connection))
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The server's id and role bits from the handshake.
    pub fn server(&self) -> (weft_layout::ServerId, u32) {
        (self.hello.0, self.hello.1)
    }

    /// The server process's incarnation from the handshake (see
    /// `weft_rpc::new_incarnation`): another value on a new connection to the same
    /// address means the server restarted in between.
    pub fn incarnation(&self) -> u64 {
        self.hello.2
    }

    /// The server's protocol version and build ("0.1.0 (git 1a2b3c4)"), or `None` from a
    /// server that predates the `ServerInfo` request (it answers an unknown opcode).
    pub fn server_info(&self) -> Result<Option<(u16, String)>, RpcError> {
        match self.call(&Request::ServerInfo, &[]) {
            Ok((
                Response::ServerInfo {
                    protocol_version,
                    build,
                },
                _,
            )) => Ok(Some((protocol_version, build))),
            Ok((other, _)) => Err(RpcError::Protocol {
                addr: self.addr.clone(),
                detail: format!("unexpected reply to a server info request: {other:?}"),
            }),
            Err(RpcError::Remote { error, .. }) if error.code == ErrorCode::UnknownOpcode => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether the connection is known to be unusable. Nobody may be reading it: a
    /// server that closed its end is noticed here (its last frames read) rather than
    /// by the next call.
    pub fn is_broken(&self) -> bool {
        {
            let table = self.pending.lock().unwrap();
            if table.broken.is_some() {
                return true;
            }
            if table.leader {
                return false;
            }
        }
        if ready(std::os::fd::AsRawFd::as_raw_fd(&self.control), libc::POLLRDHUP) {
            read_ready(&self.reader, &self.pending, &self.addr, self.timeouts.request);
        }
        self.pending.lock().unwrap().broken.is_some()
    }

    /// Whether this connection's server took the process's read pool.
    pub fn has_pool(&self) -> bool {
        self.pending.lock().unwrap().pool.is_some()
    }

    /// The transport this connection moves bulk data by: "shm", "unix" or "tcp".
    pub fn transport(&self) -> &'static str {
        if self.pending.lock().unwrap().segment.is_some() {
            "shm"
        } else if matches!(self.control, Stream::Unix(_)) {
            "unix"
        } else {
            "tcp"
        }
    }

    /// Sends a request and waits for its answer.
    pub fn call(&self, request: &Request, data: &[u8]) -> Result<CallReply, RpcError> {
        self.send(request, data)?.wait()
    }

    /// Sends a request without waiting, so that many can be in flight.
    pub fn send(&self, request: &Request, data: &[u8]) -> Result<PendingCall<'_>, RpcError> {
        self.send_parts(request, &[data])
    }

    /// Like `send`, with bulk data given as parts that travel back to back.
    pub fn send_parts(&self, request: &Request, parts: &[&[u8]]) -> Result<PendingCall<'_>, RpcError> {
        self.send_with(request, parts, None, 0)
    }

    /// Like `send`, for a reply expected to carry `reply_len` bytes of bulk data: over
    /// a shared segment, the call leases room for it (a reply of another length still
    /// arrives whole).
    pub fn send_expecting(&self, request: &Request, reply_len: u64) -> Result<PendingCall<'_>, RpcError> {
        self.send_with(request, &[], None, reply_len)
    }

    /// Like `send`, with the reply's bulk data read straight into `sink` when it has
    /// the sink's length. Wait with `PendingCall::wait_sink`.
    pub fn send_into(
        &self,
        request: &Request,
        data: &[u8],
        sink: ReplySink,
    ) -> Result<PendingCall<'_>, RpcError> {
        self.send_with(request, &[data], Some(sink), 0)
    }

    /// Data requests on this connection get their capabilities from `source` (once;
    /// later calls change nothing).
    pub fn set_capability_source(&self, source: Arc<dyn CapabilitySource>) {
        let _ = self.capabilities.set(source);
    }

    fn send_with(
        &self,
        request: &Request,
        parts: &[&[u8]],
        sink: Option<ReplySink>,
        reply_len: u64,
    ) -> Result<PendingCall<'_>, RpcError> {
        let capability_of = self.ensure_capability(request)?;
        let mut pending = self.send_raw(request, parts, sink, reply_len)?;
        pending.capability_of = capability_of;
        Ok(pending)
    }

    /// Presents the capability `request` needs, unless this connection did already
    /// (and it is not close to expiry); returns the inode it is for.
    fn ensure_capability(&self, request: &Request) -> Result<Option<weft_layout::InodeId>, RpcError> {
        use weft_proto::capability::{need, rights, Need};
        let Some(source) = self.capabilities.get() else {
            return Ok(None);
        };
        let (inode, wanted) = match need(request) {
            Need::None => return Ok(None),
            Need::Server => (weft_layout::InodeId(0), rights::SERVER),
            Need::Inode { inode, rights } => (inode, rights),
        };
        let rights_in_order = [rights::READ, rights::WRITE, rights::SERVER];
        let now = crate::capability::now_ms();
        {
            let presented = self.presented.lock().unwrap();
            // A write capability given back (see `CapabilitySource::writer_closed`) is
            // asked for anew, so that the manager knows of the writer.
            let usable = |r: u8| {
                presented.covers((inode, r), now)
                    && (r != rights::WRITE
                        || presented
                            .presented((inode, r))
                            .is_some_and(|cap| source.holds(cap)))
            };
            if presented.covers((weft_layout::InodeId(0), rights::SERVER), now)
                || rights_in_order.iter().any(|r| wanted & r != 0 && usable(*r))
            {
                return Ok(Some(inode));
            }
        }
        // A cached capability refused as revoked is forgotten and asked for again, once.
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut got = Err(None);
            for right in rights_in_order.iter().filter(|r| wanted & **r != 0) {
                match source.capability(inode, *right) {
                    Ok(cap) => {
                        got = Ok(cap);
                        break;
                    }
                    Err(e) => got = Err(Some(e)),
                }
            }
            let cap = match got {
                Ok(Some(cap)) => cap,
                // The cluster asks for none.
                Ok(None) => return Ok(None),
                Err(e) => return Err(e.expect("some right was wanted")),
            };
            let reset = self.presented.lock().unwrap().full();
            let present = Request::PresentCapability {
                cap: cap.clone(),
                reset,
            };
            match self.send_raw(&present, &[], None, 0)?.wait() {
                Ok(_) => {
                    self.presented.lock().unwrap().record(&cap);
                    return Ok(Some(inode));
                }
                Err(RpcError::Remote { error, .. })
                    if error.code == ErrorCode::CapabilityRequired && attempts < 2 =>
                {
                    source.forget(inode);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The server refused a request for want of a capability for `inode`: the next
    /// request presents a fresh one.
    fn capability_refused(&self, inode: weft_layout::InodeId) {
        self.presented.lock().unwrap().forget(inode);
        if let Some(source) = self.capabilities.get() {
            source.forget(inode);
        }
    }

    fn send_raw(
        &self,
        request: &Request,
        parts: &[&[u8]],
        sink: Option<ReplySink>,
        reply_len: u64,
    ) -> Result<PendingCall<'_>, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let has_sink = sink.is_some();
        let (sender, receiver) = mpsc::sync_channel(2);
        let data_len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        let reply_len = sink.as_ref().map_or(reply_len, |s| s.total);
        let mut scatter = None;
        let lease = {
            let mut table = self.pending.lock().unwrap();
            if let Some(reason) = &table.broken {
                return Err(RpcError::Disconnected {
                    addr: self.addr.clone(),
                    reason: reason.clone(),
                });
            }
            // A read into buffers of the read pool: the server places the reply there.
            if let (Some(pool), Some(sink)) = (&table.pool, &sink) {
                if data_len == 0 && matches!(request, Request::Read { .. } | Request::ReadView { .. }) {
                    scatter = pool
                        .pieces_of(&sink.parts)
                        .filter(|pieces| pieces.len() <= weft_proto::msg::SCATTER_PIECES_MAX)
                        .map(|pieces| {
                            let hold = pool.hold(&pieces);
                            (pieces, hold)
                        });
                }
            }
            // Bulk data through the shared segment when there is room; else the socket.
            let lease = table
                .segment
                .as_ref()
                .filter(|_| scatter.is_none() && data_len.max(reply_len) >= SHM_PAYLOAD_MIN)
                .and_then(|segment| segment.lease(data_len.max(reply_len)));
            let big = reply_len >= BIG_REPLY_BYTES;
            if big {
                table.big += 1;
                if !table.leader {
                    table.watch.notify_one();
                }
            }
            table.waiters.insert(
                id,
                Waiter {
                    sender,
                    waiting: false,
                    promoted: false,
                    big,
                    sink,
                    lease: None,
                    pool_hold: None,
                },
            );
            lease
        };
        let (opcode, body, parts) = match (&lease, scatter) {
            (None, Some((pieces, hold))) => {
                let body = Request::encode_shm_scatter(&pieces, request);
                match self.pending.lock().unwrap().waiters.get_mut(&id) {
                    Some(waiter) => waiter.pool_hold = Some(hold),
                    // The connection broke meanwhile (its calls' buffers are retired);
                    // the write below fails.
                    None => hold.retire(),
                }
                (weft_proto::Opcode::ShmScatter as u16, body, &[][..])
            }
            (Some(lease), _) => {
                let region = lease.region();
                // One madvise for the region's pages this process never touched, rather
                // than a fault per page in the copy below or in the reply's copy out.
                region.populate(region.len(), true);
                let mut at = 0;
                for part in parts {
                    region.write_at(at, part);
                    at += part.len() as u64;
                }
                let body = Request::encode_shm_call(region.offset(), region.len(), data_len, request);
                (weft_proto::Opcode::ShmCall as u16, body, &[][..])
            }
            (None, None) => (request.opcode() as u16, request.encode_body(), parts),
        };
        if let Some(lease) = lease {
            match self.pending.lock().unwrap().waiters.get_mut(&id) {
                Some(waiter) => waiter.lease = Some(lease),
                // The connection broke meanwhile; the write below fails.
                None => drop(lease),
            }
        }
        let written = {
            let mut stream = self.writer.lock().unwrap();
            let mut bounded = DeadlineWriter {
                deadline: std::time::Instant::now() + self.timeouts.request,
                timeout: self.timeouts.request,
                stream: &mut stream,
                first: true,
                rearmed: false,
            };
            write_frame_parts(&mut bounded, FrameKind::Request, opcode, id, &body, parts)
        };
        if let Err(e) = written {
            self.pending.lock().unwrap().forget(id);
            let reason = e.to_string();
            self.break_with(&reason);
            // The server stopped taking data (the send timeout ran out): it is not
            // answering, and a fresh connection would only wait as long again, so the
            // pool must not retry (a call gives up within the timeout, not twice it).
            if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) {
                return Err(RpcError::TimedOut {
                    addr: self.addr.clone(),
                    after_ms: self.timeouts.request.as_millis() as u64,
                });
            }
            return Err(RpcError::Disconnected {
                addr: self.addr.clone(),
                reason,
            });
        }
        Ok(PendingCall {
            connection: self,
            id,
            receiver,
            sink_outstanding: has_sink,
            capability_of: None,
        })
    }

    fn break_with(&self, reason: &str) {
        fail_all(&self.pending, &self.addr, reason);
        self.shutdown();
    }

    /// Reads the connection (this thread leads) until call `id` is answered (its reply
    /// is then in its channel) or the connection ends. Err: no reply came by `deadline`.
    fn lead(&self, id: u64, deadline: Instant) -> Result<(), ()> {
        let mut stream = self.reader.lock().unwrap();
        let left = deadline.saturating_duration_since(Instant::now());
        let mut outcome = Ok(());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            outcome = Err(());
        } else {
            loop {
                match read_frame(&mut stream, &self.addr, &self.pending) {
                    Ok(answered) if answered == id => break,
                    Ok(_) => {}
                    Err(_) if Instant::now() >= deadline => {
                        outcome = Err(());
                        break;
                    }
                    Err(reason) => {
                        fail_all(&self.pending, &self.addr, &reason);
                        self.shutdown();
                        break;
                    }
                }
            }
        }
        drop(stream);
        step_down(&self.pending);
        outcome
    }

    fn shutdown(&self) {
        self.control.shutdown(Shutdown::Both).ok();
    }
}

/// The connection's stream, with one deadline for a whole frame: the socket's send
/// timeout bounds each system call, and a peer that takes a little data now and then
/// (a stopped server's last buffer space) would otherwise stretch one frame to several
/// timeouts.
struct DeadlineWriter<'a> {
    stream: &'a mut Stream,
    deadline: std::time::Instant,
    timeout: Duration,
    first: bool,
    rearmed: bool,
}

impl DeadlineWriter<'_> {
    /// Sets the send timeout to what is left before the deadline (the first call has
    /// all of it already).
    fn arm(&mut self) -> io::Result<()> {
        if std::mem::take(&mut self.first) {
            return Ok(());
        }
        let left = self.deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.rearmed = true;
        self.stream.set_write_timeout(Some(left))
    }
}

impl io::Write for DeadlineWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.arm()?;
        self.stream.write(buf)
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.arm()?;
        self.stream.write_vectored(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

impl Drop for DeadlineWriter<'_> {
    fn drop(&mut self) {
        if self.rearmed {
            self.stream.set_write_timeout(Some(self.timeout)).ok();
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // Nobody can be waiting (a call borrows the connection): its segment goes now,
        // and the watcher ends at once rather than at its next look.
        fail_all(
            &self.pending,
            &self.addr,
            "the connection was closed by this client",
        );
        self.shutdown();
        let mut table = self.pending.lock().unwrap();
        table.stopped = true;
        table.watch.notify_all();
    }
}

impl PendingCall<'_> {
    /// Waits for the answer, at most the request timeout.
    pub fn wait(self) -> Result<CallReply, RpcError> {
        let delivery = self.wait_delivery()?;
        Ok((delivery.response, delivery.data.unwrap_or_default()))
    }

    /// Waits for the answer to a call made with `send_into`.
    pub fn wait_sink(self) -> Result<SinkReply, RpcError> {
        let delivery = self.wait_delivery()?;
        Ok(match delivery.data {
            None => SinkReply::Filled(delivery.response),
            Some(data) => SinkReply::Other(delivery.response, data),
        })
    }

    fn wait_delivery(self) -> Result<Delivery, RpcError> {
        let c = self.connection;
        let inode = self.capability_of;
        let delivery = self.wait_delivery_raw();
        if let (Some(inode), Err(RpcError::Remote { error, .. })) = (inode, &delivery) {
            if error.code == ErrorCode::CapabilityRequired {
                c.capability_refused(inode);
            }
        }
        delivery
    }

    fn wait_delivery_raw(mut self) -> Result<Delivery, RpcError> {
        let c = self.connection;
        let deadline = Instant::now() + c.timeouts.request;
        loop {
            // Read the connection ourselves unless another thread does, or our answer
            // is on its way to us already (our waiter is gone from the table).
            let lead = {
                let mut table = c.pending.lock().unwrap();
                let vacant = !table.leader && table.broken.is_none();
                match table.waiters.get_mut(&self.id) {
                    Some(waiter) => {
                        waiter.waiting = true;
                        waiter.promoted = false;
                        let lead = vacant && !waiter.big;
                        if lead {
                            table.leader = true;
                        }
                        lead
                    }
                    None => {
                        // We may have been asked to lead: pass it on.
                        table.promote_next();
                        false
                    }
                }
            };
            if lead && c.lead(self.id, deadline).is_err() {
                return self.timed_out();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.receiver.recv_timeout(left) {
                Ok(Notice::Reply(reply)) => {
                    // Whoever read it has let go of the sink.
                    self.sink_outstanding = false;
                    return reply;
                }
                Ok(Notice::Lead) => {}
                Err(RecvTimeoutError::Timeout) => return self.timed_out(),
                Err(RecvTimeoutError::Disconnected) => {
                    self.sink_outstanding = false;
                    let reason = c
                        .pending
                        .lock()
                        .unwrap()
                        .broken
                        .clone()
                        .unwrap_or_else(|| "connection closed".into());
                    return Err(RpcError::Disconnected {
                        addr: c.addr.clone(),
                        reason,
                    });
                }
            }
        }
    }

    /// No answer within the request timeout.
    fn timed_out(&mut self) -> Result<Delivery, RpcError> {
        let c = self.connection;
        if c.pending.lock().unwrap().forget(self.id) {
            self.sink_outstanding = false;
        }
        // Otherwise another thread is reading the answer into the sink: dropping `self`
        // waits for it. The request may still be done later (a hung server resumes):
        // the connection goes, so that the server sees it closed and drops such a write
        // rather than doing it after a newer one sent elsewhere.
        c.break_with("no answer within the request timeout");
        Err(RpcError::TimedOut {
            addr: c.addr.clone(),
            after_ms: c.timeouts.request.as_millis() as u64,
        })
    }
}

impl Drop for PendingCall<'_> {
    fn drop(&mut self) {
        if !self.sink_outstanding {
            return;
        }
        let c = self.connection;
        if c.pending.lock().unwrap().forget(self.id) {
            // The reader never took the sink; it will skip the late answer.
            return;
        }
        // Another thread is filling the sink: wait until it is done, breaking the
        // connection (which ends its read at once) if the server stalls mid-answer.
        let deadline = Instant::now() + c.timeouts.request;
        let mut broke = false;
        loop {
            let notice = if broke {
                self.receiver.recv().map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                self.receiver
                    .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            };
            match notice {
                Ok(Notice::Reply(_)) | Err(RecvTimeoutError::Disconnected) => return,
                // Not ours to act on any more: pass it on.
                Ok(Notice::Lead) => c.pending.lock().unwrap().promote_next(),
                Err(RecvTimeoutError::Timeout) => {
                    c.break_with("a reply stalled while its data was being received");
                    broke = true;
                }
            }
        }
    }
}

fn fail_all(pending: &Mutex<PendingTable>, addr: &str, reason: &str) {
    let mut table = pending.lock().unwrap();
    if table.broken.is_none() {
        table.broken = Some(reason.to_owned());
    }
    // The segment goes with the connection: unmapped once the last call lets go.
    table.segment = None;
    table.late.clear();
    // A server may still write into the pool buffers of calls not answered, for as
    // long as it runs them: those buffers are never handed out again.
    table.pool = None;
    for (_, hold) in table.late_pool.drain() {
        hold.retire();
    }
    table.big = 0;
    for (_, mut waiter) in table.waiters.drain() {
        if let Some(hold) = waiter.pool_hold.take() {
            hold.retire();
        }
        let _ = waiter.sender.try_send(Notice::Reply(Err(RpcError::Disconnected {
            addr: addr.to_owned(),
            reason: reason.to_owned(),
        })));
    }
}

/// Reads one frame off the connection and hands it to the call it answers (the
/// late answer of a call given up on is read and dropped, its region freed).
/// Returns the id it answered; Err: the connection must end, for this reason.
fn read_frame(stream: &mut Stream, addr: &str, pending: &Mutex<PendingTable>) -> Result<u64, String> {
    let header = match read_header(stream) {
        Ok(h) => h,
        Err(ReadFrameError::Closed) => return Err("server closed the connection".to_owned()),
        Err(ReadFrameError::Io(e)) => return Err(e.to_string()),
        Err(ReadFrameError::Header(e)) => return Err(format!("bad frame from server: {e}")),
    };
    let message = read_exact_vec(stream, header.message_len as u64).map_err(|e| e.to_string())?;
    // A server of another version refuses our handshake in its own version; its
    // message may be encoded differently, so only the header's version is trusted.
    let reply = match decode_result(&message) {
        _ if header.version != PROTOCOL_VERSION => Err(RpcError::ProtocolVersion {
            addr: addr.to_owned(),
            server_version: header.version,
        }),
        Ok(Ok(response)) => Ok(response),
        Ok(Err(error)) => Err(RpcError::Remote {
            addr: addr.to_owned(),
            error,
        }),
        Err(e) => Err(RpcError::Protocol {
            addr: addr.to_owned(),
            detail: format!("undecodable response: {e}"),
        }),
    };
    // Request id 0 is no request: the server tells why it drops the connection.
    if header.request_id == 0 {
        return Err(match reply {
            Err(RpcError::Remote { error, .. }) => format!("the server dropped the connection: {error}"),
            Err(e) => e.to_string(),
            Ok(other) => format!("unexpected frame from server: {other:?}"),
        });
    }
    let waiter = {
        let mut table = pending.lock().unwrap();
        table.late.remove(&header.request_id);
        table.late_pool.remove(&header.request_id);
        table.take(header.request_id)
    };
    let (waiter, reply) = match reply {
        Ok(Response::ShmPlaced { data_len, response }) => {
            if header.data_len != 0 {
                return Err("bad frame from server: a shared-memory reply with data in the frame".to_owned());
            }
            if let Some(waiter) = waiter {
                let answer = match waiter.pool_hold {
                    // Placed in the pool buffers the sink names: nothing to copy.
                    Some(_) if waiter.sink.as_ref().is_some_and(|s| s.total == data_len) => Ok(Delivery {
                        response: *response,
                        data: None,
                    }),
                    Some(_) => Err(RpcError::Protocol {
                        addr: addr.to_owned(),
                        detail: format!(
                            "a read placed into the pool with {data_len} bytes, not the pieces' length"
                        ),
                    }),
                    None => placed(addr, *response, data_len, waiter.lease, waiter.sink),
                };
                let _ = waiter.sender.try_send(Notice::Reply(answer));
            }
            return Ok(header.request_id);
        }
        other => (waiter, other),
    };
    let (delivery, failed) = match (waiter, reply) {
        (
            Some(Waiter {
                sender,
                sink: Some(mut sink),
                ..
            }),
            Ok(response),
        ) if sink.total == header.data_len => match sink.fill(stream) {
            Ok(()) => (Some((sender, Ok(Delivery { response, data: None }))), None),
            Err(e) => {
                let reason = e.to_string();
                let error = RpcError::Disconnected {
                    addr: addr.to_owned(),
                    reason: reason.clone(),
                };
                (Some((sender, Err(error))), Some(reason))
            }
        },
        (waiter, reply) => match read_exact_vec(stream, header.data_len) {
            Ok(data) => {
                let reply = reply.map(|response| Delivery {
                    response,
                    data: Some(data),
                });
                (waiter.map(|w| (w.sender, reply)), None)
            }
            Err(e) => {
                let reason = e.to_string();
                let error = RpcError::Disconnected {
                    addr: addr.to_owned(),
                    reason: reason.clone(),
                };
                (waiter.map(|w| (w.sender, Err(error))), Some(reason))
            }
        },
    };
    if let Some((sender, reply)) = delivery {
        let _ = sender.try_send(Notice::Reply(reply));
    }
    match failed {
        Some(reason) => Err(reason),
        None => Ok(header.request_id),
    }
}

/// The leader lets go of the connection and asks a waiting call's thread to take it.
fn step_down(pending: &Mutex<PendingTable>) {
    let mut table = pending.lock().unwrap();
    table.leader = false;
    table.promote_next();
}

/// Whether the socket `fd` has something to read now (or `events`), without waiting.
fn ready(fd: std::os::fd::RawFd, events: libc::c_short) -> bool {
    let mut fd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one pollfd of a descriptor the caller keeps open, no waiting.
    let n = unsafe { libc::poll(&mut fd, 1, 0) };
    n > 0 && fd.revents & (events | libc::POLLHUP | libc::POLLERR) != 0
}

/// Unless a thread reads the connection already, reads the frames that are there now
/// (up to the end, when the server closed it), handing each to its call.
fn read_ready(reader: &Mutex<Stream>, pending: &Mutex<PendingTable>, addr: &str, timeout: Duration) {
    {
        let mut table = pending.lock().unwrap();
        if table.leader || table.broken.is_some() {
            return;
        }
        table.leader = true;
    }
    let mut stream = reader.lock().unwrap();
    // A frame begun is read whole, each wait bounded by the request timeout.
    stream.set_read_timeout(Some(timeout)).ok();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&*stream);
    while ready(fd, libc::POLLIN | libc::POLLRDHUP) {
        if let Err(reason) = read_frame(&mut stream, addr, pending) {
            fail_all(pending, addr, &reason);
            stream.shutdown(Shutdown::Both).ok();
            break;
        }
    }
    drop(stream);
    step_down(pending);
}

/// How often the watcher looks at a connection with calls outstanding: a reply that
/// nobody waits for yet (its caller waits on another connection first) is read within
/// this, so the server never finds its replies unread for long.
const WATCH_BUSY: Duration = Duration::from_millis(50);
/// How often it looks at a connection with nothing outstanding, for a server that
/// closed it (`is_broken` also looks, at once).
const WATCH_IDLE: Duration = Duration::from_millis(500);

/// Replies expected to be at least this large are read by the watcher rather than by
/// their callers' threads (`Connection`).
pub const BIG_REPLY_BYTES: u64 = 256 * 1024;

/// The watcher thread of a connection: reads what nobody else does, and the connection
/// whenever a large reply is due, until the connection ends.
fn watch(reader: &Mutex<Stream>, pending: &Mutex<PendingTable>, addr: &str, timeout: Duration) {
    // Open as long as `reader` is (this thread holds it).
    let fd = std::os::fd::AsRawFd::as_raw_fd(&*reader.lock().unwrap());
    loop {
        let table = pending.lock().unwrap();
        let period = if table.waiters.is_empty() {
            WATCH_IDLE
        } else {
            WATCH_BUSY
        };
        let wake = table.watch.clone();
        let (mut table, _) = wake
            .wait_timeout_while(table, period, |t| {
                !(t.stopped || t.broken.is_some() || (t.big > 0 && !t.leader))
            })
            .unwrap();
        if table.stopped || table.broken.is_some() {
            return;
        }
        if table.leader {
            continue;
        }
        if table.big > 0 {
            // Read until no large reply is due. The callers' own deadlines end a
            // stalled wait (they break the connection); the margin lets them, so that
            // they fail with their timeout rather than with this read's.
            table.leader = true;
            drop(table);
            let mut stream = reader.lock().unwrap();
            stream
                .set_read_timeout(Some(timeout + Duration::from_secs(1)))
                .ok();
            loop {
                if let Err(reason) = read_frame(&mut stream, addr, pending) {
                    fail_all(pending, addr, &reason);
                    stream.shutdown(Shutdown::Both).ok();
                    break;
                }
                if pending.lock().unwrap().big == 0 {
                    break;
                }
            }
            drop(stream);
            step_down(pending);
            continue;
        }
        drop(table);
        if ready(fd, libc::POLLIN | libc::POLLRDHUP) {
            read_ready(reader, pending, addr, timeout);
        }
    }
}

/// The answer to a `ShmCall` whose reply data the server put at the start of the
/// call's region: copied into the sink when it has that length, else into a vector.
fn placed(
    addr: &str,
    response: Response,
    data_len: u64,
    lease: Option<Lease>,
    sink: Option<ReplySink>,
) -> Result<Delivery, RpcError> {
    let Some(lease) = lease.filter(|l| data_len <= l.region().len()) else {
        return Err(RpcError::Protocol {
            addr: addr.to_owned(),
            detail: format!(
                "a shared-memory reply of {data_len} bytes to a call without a region that large"
            ),
        });
    };
    let region = lease.region();
    match sink {
        Some(sink) if sink.total == data_len => {
            // SAFETY: the sink's parts are ours to write until the call is answered
            // (contract of `ReplySink::new`); their total fits the region (checked).
            unsafe { region.read_into_parts(&sink.parts) };
            Ok(Delivery { response, data: None })
        }
        _ => {
            let mut data = vec![0u8; data_len as usize];
            region.read_at(0, &mut data);
            Ok(Delivery {
                response,
                data: Some(data),
            })
        }
    }
}

/// Passes `fd` with `request` (request id `id`, before the watcher thread runs) and
/// reads the answer: `Done`, or the reason the server refused.
fn attach_fd(stream: &mut Stream, request: &Request, id: u64, fd: std::os::fd::RawFd) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let mut frame = Vec::new();
    write_frame_parts(
        &mut frame,
        FrameKind::Request,
        request.opcode() as u16,
        id,
        &request.encode_body(),
        &[],
    )
    .map_err(|e| e.to_string())?;
    crate::shm::send_with_fd(stream.as_raw_fd(), &frame, fd)
        .map_err(|e| format!("cannot pass the descriptor: {e}"))?;
    let header = read_header(stream).map_err(|e| format!("no answer to the attach: {e:?}"))?;
    let message = read_exact_vec(stream, header.message_len as u64).map_err(|e| e.to_string())?;
    read_exact_vec(stream, header.data_len.min(1 << 20)).map_err(|e| e.to_string())?;
    if header.request_id != id {
        return Err(format!("answer to request {} while attaching", header.request_id));
    }
    match decode_result(&message) {
        Ok(Ok(Response::Done)) => Ok(()),
        Ok(Ok(other)) => Err(format!("unexpected answer to the attach: {other:?}")),
        Ok(Err(e)) => Err(format!("the server refused: {e}")),
        Err(e) => Err(format!("undecodable answer to the attach: {e}")),
    }
}

/// Attaches the process's read pool to the server on a fresh connection that has a
/// segment (request id 4).
fn attach_pool(stream: &mut Stream, pool: &Pool) -> Result<(), String> {
    let request = Request::ShmAttachPool {
        bytes: pool.mapping().len(),
    };
    attach_fd(stream, &request, 4, pool.mapping().fd())
}

/// Makes a shared segment and attaches it to the server on a fresh Unix-socket
/// connection (request id 3, before the watcher thread runs): the memfd travels with
/// the frame's bytes.
fn attach_segment(stream: &mut Stream) -> Result<Arc<ClientSegment>, String> {
    let bytes = crate::shm::segment_bytes_from_env();
    let map = Mapping::create(bytes).map_err(|e| format!("cannot make a shared segment: {e}"))?;
    attach_fd(stream, &Request::ShmAttach { bytes }, 3, map.fd())
        .map_err(|e| format!("shared segment: {e}"))?;
    Ok(ClientSegment::new(map))
}

/// Connections by address, created on first use and replaced when broken, so that a
/// restarted server is reached again without restarting the client.
pub struct ConnectionPool {
    client_name: String,
    auth: ClientAuth,
    timeouts: Timeouts,
    connections: Mutex<HashMap<String, Arc<Connection>>>,
    /// How errors name the server behind an address, where that differs from it.
    labels: Mutex<HashMap<String, String>>,
    /// Addresses of servers found hung (they took a connection and did not answer),
    /// with the error and when: `get` fails at once with it for a request timeout.
    unresponsive: Mutex<HashMap<String, (RpcError, Instant)>>,
    /// Given to every connection the pool makes.
    capabilities: std::sync::RwLock<Option<Arc<dyn CapabilitySource>>>,
    /// What connections to these addresses prove instead of `auth` (a job's
    /// delegates: the job's key); at most `AUTH_OVERRIDES_MAX`.
    auth_overrides: Mutex<HashMap<String, ClientAuth>>,
}

/// Most addresses a pool proves another key to (`ConnectionPool::set_auth`); past it,
/// those it holds no connection to are forgotten.
const AUTH_OVERRIDES_MAX: usize = 4096;

impl ConnectionPool {
    pub fn new(client_name: &str, auth: ClientAuth, timeouts: Timeouts) -> ConnectionPool {
        ConnectionPool {
            client_name: client_name.to_owned(),
            auth,
            timeouts,
            connections: Mutex::new(HashMap::new()),
            labels: Mutex::new(HashMap::new()),
            unresponsive: Mutex::new(HashMap::new()),
            capabilities: Default::default(),
            auth_overrides: Mutex::new(HashMap::new()),
        }
    }

    /// Connections to `addr` prove `auth` rather than the pool's own (a job's
    /// delegates, which serve only holders of the job's key). A connection already made
    /// there is dropped, so the next call connects with `auth`.
    pub fn set_auth(&self, addr: &str, auth: ClientAuth) {
        let mut overrides = self.auth_overrides.lock().unwrap();
        if overrides.len() >= AUTH_OVERRIDES_MAX && !overrides.contains_key(addr) {
            let connections = self.connections.lock().unwrap();
            overrides.retain(|a, _| connections.contains_key(a));
        }
        overrides.insert(addr.to_owned(), auth);
        drop(overrides);
        self.connections.lock().unwrap().remove(addr);
    }

    /// Data requests on this pool's connections (made from now on) get their
    /// capabilities from `source`.
    pub fn set_capability_source(&self, source: Arc<dyn CapabilitySource>) {
        *self.capabilities.write().unwrap() = Some(source);
    }

    /// Where this pool's data requests get their capabilities, if anywhere.
    pub fn capability_source(&self) -> Option<Arc<dyn CapabilitySource>> {
        self.capabilities.read().unwrap().clone()
    }

    /// The server at `addr` was found hung with `error` by another way of reaching it
    /// (its Unix socket): calls to `addr` fail at once with that error until a request
    /// timeout has passed, rather than waiting a second timeout for the same server.
    pub fn note_unresponsive(&self, addr: &str, error: RpcError) {
        self.unresponsive
            .lock()
            .unwrap()
            .insert(addr.to_owned(), (error, Instant::now()));
    }

    /// Errors of connections to `addr` will name the server as `label`.
    pub fn set_label(&self, addr: &str, label: &str) {
        self.labels
            .lock()
            .unwrap()
            .insert(addr.to_owned(), label.to_owned());
    }

    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// A live connection to `addr`, connecting if there is none.
    pub fn get(&self, addr: &str) -> Result<Arc<Connection>, RpcError> {
        if let Some(c) = self.connections.lock().unwrap().get(addr) {
            if !c.is_broken() {
                return Ok(c.clone());
            }
        }
        {
            let mut unresponsive = self.unresponsive.lock().unwrap();
            if let Some((error, at)) = unresponsive.get(addr) {
                if at.elapsed() < self.timeouts.request {
                    return Err(error.clone());
                }
                unresponsive.remove(addr);
            }
        }
        // Connect without holding the lock: a dead server must not stall calls to others.
        let label = self
            .labels
            .lock()
            .unwrap()
            .get(addr)
            .cloned()
            .unwrap_or_else(|| addr.to_owned());
        let auth = self.auth_overrides.lock().unwrap().get(addr).cloned();
        let auth = auth.as_ref().unwrap_or(&self.auth);
        let fresh = Connection::connect_as(addr, &label, &self.client_name, auth, self.timeouts)?;
        if let Some(source) = self.capabilities.read().unwrap().clone() {
            fresh.set_capability_source(source);
        }
        let mut map = self.connections.lock().unwrap();
        match map.get(addr) {
            Some(existing) if !existing.is_broken() => Ok(existing.clone()),
            _ => {
                map.insert(addr.to_owned(), fresh.clone());
                Ok(fresh)
            }
        }
    }

    /// Calls `addr`, retrying once on a fresh connection if the old one had broken
    /// before the request went out (a server restarted since the last call).
    /// A request refused for want of a capability (revoked since it was presented) is
    /// sent once more with a fresh one.
    pub fn call(&self, addr: &str, request: &Request, data: &[u8]) -> Result<CallReply, RpcError> {
        let connection = self.get(addr)?;
        let sent = connection.send(request, data);
        match sent {
            Ok(pending) => match pending.wait() {
                Err(RpcError::Remote { error, .. }) if error.code == ErrorCode::CapabilityRequired => {
                    connection.call(request, data)
                }
                other => other,
            },
            Err(e) if e.is_transport() => self.get(addr)?.call(request, data),
            Err(e) => Err(e),
        }
    }
}
