//! The client side: a multiplexed connection to one server, and a pool of them. Here:
//! `Connection` (the handshake, sending calls, capabilities presented before a call);
//! `waiters.rs` the calls it waits for, `pending.rs` a call waiting for its reply,
//! `reader.rs` reading replies off the connection and probing a silent server,
//! `suspects.rs` servers that did not answer lately, `pool.rs` the pool.

use crate::auth::{client_handshake, ClientAuth};
use crate::capability::{CapabilitySource, PresentedHere};
use crate::frame_io::{read_exact_vec, read_header, write_frame_parts};
use crate::shm::{ClientSegment, Mapping, Pool, Transport, SHM_PAYLOAD_MIN};
use crate::stream::{Stream, UNIX_PREFIX};
use std::collections::HashMap;
use std::io::{self};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weft_proto::frame::FrameKind;
use weft_proto::msg::{decode_result, Request, Response};
use weft_proto::ErrorCode;

mod pending;
mod pool;
mod reader;
mod suspects;
mod waiters;

pub use crate::error::RpcError;
pub use pending::PendingCall;
pub use pool::ConnectionPool;
pub use reader::BIG_REPLY_BYTES;
use reader::{read_frame, read_ready, ready, watch};
use waiters::{fail_all, step_down, PendingTable, Waiter};
pub use waiters::{ReplySink, SinkReply};

/// A response with its bulk data.
pub type CallReply = (Response, Vec<u8>);

/// Longest wait for each step of a new connection's handshake (unless the connect
/// timeout is longer).
pub const HANDSHAKE_WAIT: Duration = Duration::from_secs(10);

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
// SAFETY: the parts are plain memory filled by one thread at a time (whichever reads
// the reply); the contract of `ReplySink::new` keeps it valid and unaliased meanwhile.
unsafe impl Send for ReplySink {}

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
    /// A read sent right behind its capability's present was refused for want of it:
    /// this server does not apply a present before it reads the next request (it asks
    /// the manager to verify capabilities), so presents are waited for from now on.
    presents_unordered: AtomicBool,
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
        if suspects::suspected(addr).is_some() {
            // A quick probe first: a server that runs again is used at once.
            match crate::auth::probe_alive(target, addr, suspects::RECHECK_WAIT) {
                Ok(()) => suspects::cleared(addr),
                // The probe's error says how: no answer in time, or nothing listening.
                Err(e) => {
                    suspects::suspect(addr);
                    return Err(e);
                }
            }
        }
        let mut stream = Stream::connect(target, timeouts.connect).map_err(|e| connect_err(e.to_string()))?;
        // The handshake runs before the watcher thread exists; no request can go out
        // before it succeeded. Its steps are answered by the server's event loop at
        // once, so each wait is bounded by `HANDSHAKE_WAIT` (or the connect timeout if
        // longer), not by the request timeout: a stopped server accepts connections
        // (the kernel does) and answers nothing, and every new client waited a minute.
        let handshake_wait = timeouts.connect.max(HANDSHAKE_WAIT).min(timeouts.request);
        stream.set_write_timeout(Some(handshake_wait)).ok();
        stream.set_read_timeout(Some(handshake_wait)).ok();
        let hello = client_handshake(
            &mut stream,
            addr,
            client_name,
            auth,
            handshake_wait.as_millis() as u64,
        );
        let hello = match hello {
            Ok(h) => {
                suspects::cleared(addr);
                h
            }
            Err(e) => {
                if matches!(e, RpcError::TimedOut { .. }) {
                    suspects::suspect(addr);
                }
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
        // A server that stops reading must not block a writer forever.
        stream.set_write_timeout(Some(timeouts.request)).ok();
        let reader = stream.try_clone().map_err(|e| connect_err(e.to_string()))?;
        let control = stream.try_clone().map_err(|e| connect_err(e.to_string()))?;
        let watch_control = stream.try_clone().map_err(|e| connect_err(e.to_string()))?;
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
            quiet_since: Instant::now(),
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
            presents_unordered: AtomicBool::new(false),
        };
        let watch_addr = addr.to_owned();
        let watch_target = target.to_owned();
        let request_timeout = timeouts.request;
        std::thread::Builder::new()
            .name(format!("weft-rpc-{addr}"))
            .spawn(move || {
                let names = (watch_addr.as_str(), watch_target.as_str());
                watch(&reader, &pending, &watch_control, names, request_timeout)
            })
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
        if let Some((inode, cap, reset)) = self.read_capability_to_present(request) {
            return self.send_presenting(request, sink, reply_len, inode, cap, reset);
        }
        let capability_of = self.ensure_capability(request)?;
        let mut pending = self.send_raw(request, parts, sink, reply_len)?;
        pending.capability_of = capability_of;
        Ok(pending)
    }

    /// For a read whose capability this connection has not presented: the capability
    /// to present (and the present's `reset`), so that the two go back to back
    /// (`send_presenting`). `None`: anything else, which `ensure_capability` handles.
    fn read_capability_to_present(
        &self,
        request: &Request,
    ) -> Option<(weft_layout::InodeId, weft_proto::capability::Capability, bool)> {
        use weft_proto::capability::rights;
        let (Request::Read { inode, .. } | Request::ReadView { inode, .. }) = request else {
            return None;
        };
        if self.presents_unordered.load(Ordering::Relaxed) {
            return None;
        }
        let source = self.capabilities.get()?;
        let now = crate::capability::now_ms();
        {
            let presented = self.presented.lock().unwrap();
            if presented.covers((weft_layout::InodeId(0), rights::SERVER), now)
                || presented.covers((*inode, rights::READ), now)
                || presented.covers((*inode, rights::WRITE), now)
            {
                return None;
            }
        }
        let cap = source.capability(*inode, rights::READ).ok().flatten()?;
        let reset = self.presented.lock().unwrap().full();
        Some((*inode, cap, reset))
    }

    /// Sends a read's `PresentCapability` and the read back to back, without waiting in
    /// between: one round trip's wait for the first read of a file through this
    /// connection instead of two. An io server that verifies capabilities itself
    /// applies the present on the loop that reads the connection, before the read
    /// (weft-server's `Roles::runs_inline`); if the present fails (a capability revoked
    /// since it was granted) or the read was refused anyway, the read is waited out and
    /// sent again the way every other request is (`ensure_capability`, one step at a
    /// time). Reads only: sending one twice changes nothing.
    fn send_presenting(
        &self,
        request: &Request,
        sink: Option<ReplySink>,
        reply_len: u64,
        inode: weft_layout::InodeId,
        cap: weft_proto::capability::Capability,
        reset: bool,
    ) -> Result<PendingCall<'_>, RpcError> {
        let present = Request::PresentCapability {
            cap: cap.clone(),
            reset,
        };
        let presented = self.send_raw(&present, &[], None, 0)?;
        // The same memory, for the read sent again: only after the first is done with it.
        let again = sink.as_ref().map(|s| ReplySink {
            parts: s.parts.clone(),
            total: s.total,
        });
        let mut pending = self.send_raw(request, &[], sink, reply_len)?;
        pending.capability_of = Some(inode);
        pending.behind_present = true;
        if presented.wait().is_ok() {
            self.presented.lock().unwrap().record(&cap);
            return Ok(pending);
        }
        let _ = pending.wait_delivery_raw();
        let capability_of = self.ensure_capability(request)?;
        let mut pending = self.send_raw(request, &[], again, reply_len)?;
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
            if table.waiters.is_empty() {
                table.quiet_since = Instant::now();
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
            behind_present: false,
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
