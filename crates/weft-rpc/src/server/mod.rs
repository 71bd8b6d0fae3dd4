//! The server side: the public face (the `Handler` a role implements, its limits,
//! `serve`) and the worker pool; connections are served by event loops
//! (`event_loop`), replies leave through each connection's queue (`outbox`), and
//! limits per peer and in all are kept by `peers`.
//!
//! Threads: `event_loops` loop threads and `workers` worker threads, however many
//! connections there are.

mod event_loop;
mod order;
mod outbox;
mod peers;

pub use order::{Changes, CHANGED_RUNS_MAX};
pub use peers::PeerKey;

use crate::auth::ClusterKey;
use event_loop::{error_frame, frame_head, EventLoop, LoopHandle, LoopMsg, ServerListener};
use outbox::{Body, Conn, OutFrame};
use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use weft_layout::ServerId;
use weft_proto::handshake::Identity;
use weft_proto::msg::{encode_result, Request, Response};
use weft_proto::{ErrorCode, WireError};

/// Names one accepted connection for the life of the server process (never reused), so
/// that a handler can keep state per connection (registered views, for one) and drop
/// it when the connection closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionId(pub u64);

impl std::fmt::Display for ConnectionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "connection {}", self.0)
    }
}

/// Serves the requests of one role (or several, dispatching by opcode).
///
/// Lifecycle: `connection_opened` runs once a connection proved it belongs to the
/// cluster, before its first request is handled (the handler never hears of
/// connections that did not); `handle` runs for each request (several of one connection may run at once,
/// on different workers, in any order); `connection_closed` runs exactly once, after the
/// connection's last request has been handled and answered, so state dropped there can
/// never be recreated by a late request. Stateless handlers ignore the id and the hooks.
pub trait Handler: Send + Sync + 'static {
    /// Handles one request of `connection`; `data` is its bulk payload. Returns the
    /// response and the bulk data of the reply.
    fn handle(
        &self,
        connection: ConnectionId,
        request: Request,
        data: Vec<u8>,
    ) -> Result<(Response, Vec<u8>), WireError>;

    /// A connection from `peer` completed its handshake.
    fn connection_opened(&self, _connection: ConnectionId, _peer: &Peer) {}

    /// The connection is gone and none of its requests is still running: release what
    /// was kept for it.
    fn connection_closed(&self, _connection: ConnectionId) {}

    /// Bytes of bulk data the reply to `request` will carry, charged against the
    /// server's memory budget before the request runs.
    fn reply_bytes_hint(&self, _request: &Request) -> u64 {
        0
    }

    /// Handles a request whose bulk data is borrowed from a client's shared segment
    /// (`ShmCall`) rather than owned. A handler that can use the bytes where they are
    /// (writing them to a file) overrides this; the default copies them and calls
    /// `handle`. The peer may change the bytes meanwhile: use them as data only.
    fn handle_borrowed(
        &self,
        connection: ConnectionId,
        request: Request,
        data: &[u8],
    ) -> Result<(Response, Vec<u8>), WireError> {
        self.handle(connection, request, data.to_vec())
    }

    /// Answers `request` with bulk data sent straight from a local file (sendfile), if
    /// this handler serves it that way; `None` leaves the request to `handle`.
    fn reply_from_file(
        &self,
        _connection: ConnectionId,
        _request: &Request,
    ) -> Option<Result<(Response, FileReply), WireError>> {
        None
    }

    /// Answers `request`, a `ShmCall` carrying no request data, with its reply's bulk
    /// data written by the handler itself into `region` of the client's segment
    /// (`ReplyInto::Placed`: a cache manager copies straight from its blocks), or
    /// returned (`ReplyInto::Data`, when it does not fit); `None` leaves the request to
    /// `reply_from_file` and `handle_borrowed`.
    fn reply_into(
        &self,
        _connection: ConnectionId,
        _request: &Request,
        _region: &crate::shm::Region,
    ) -> Option<Result<(Response, ReplyInto), WireError>> {
        None
    }

    /// Whether `request` is quick and never waits for anything but its own small I/O
    /// (no fsync, no lock another request may hold for long, no call to another
    /// server): such a request is run by the event loop that read it, right away,
    /// instead of being handed to a worker thread (two thread wake-ups less per call).
    /// The loop serves every other connection meanwhile, so say yes only for requests
    /// that take microseconds.
    fn runs_inline(&self, _request: &Request) -> bool {
        false
    }

    /// Serves `request`, which `runs_inline` chose, on the event loop, but only if it can
    /// without waiting for the disk or a lock: `Inline::WouldBlock` hands it to a worker
    /// instead (a read that misses the page cache, a write the kernel would throttle),
    /// so that one slow request does not stall every connection of the loop. The
    /// default tries nothing (`Inline::NotTried`: the loop runs it as any request).
    fn try_inline(&self, _connection: ConnectionId, _request: &Request, _data: &[u8]) -> Inline {
        Inline::NotTried
    }

    /// What `request` of `connection` changes (an object's bytes or size), for a
    /// handler whose such requests must be applied in the order they arrived: a request
    /// whose changes overlap those of one that arrived earlier and has not finished
    /// waits for it (see `order`); `None` (the default) for requests that change no
    /// data. The server asks on its event loop for each request it reads, so this must
    /// be quick. A `ShmCall` is asked about with the request it carries.
    fn changes(&self, _connection: ConnectionId, _request: &Request) -> Option<Changes> {
        None
    }
}

/// What became of a request the event loop offered its handler (`Handler::try_inline`).
// Returned once per request and never kept: boxing the reply would cost an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Inline {
    /// Served: the reply and its bulk data.
    Done(Result<(Response, Vec<u8>), WireError>),
    /// It would have waited: a worker serves it (`Handler::handle`), from the start.
    WouldBlock,
    /// Not tried, or found not to wait: the loop serves it as any other request
    /// (`reply_from_file`, `handle`).
    NotTried,
}

/// Who is on the other end of a connection, as the handshake established it.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The TCP peer's address (none on the Unix socket).
    pub addr: Option<SocketAddr>,
    /// On the Unix socket, the connecting process's user, as the kernel tells it.
    pub uid: Option<u32>,
    /// The name the client gave in its `Hello`.
    pub client: String,
    /// The identity the client proved.
    pub identity: Identity,
}

/// A reply's bulk data as `Handler::reply_into` left it.
#[derive(Debug)]
pub enum ReplyInto {
    /// This many bytes written at the start of the call's region.
    Placed(u64),
    /// Not placed: to go in the region if it fits, else in the frame.
    Data(Vec<u8>),
}

/// Bulk data of a reply read by the kernel from a file into the socket.
pub struct FileReply {
    pub file: Arc<std::fs::File>,
    /// `(file offset, length)` runs in stream order; bytes past the file's end are
    /// sent as zeros.
    pub runs: Vec<(u64, u64)>,
}

impl FileReply {
    pub fn len_bytes(&self) -> u64 {
        self.runs.iter().map(|r| r.1).sum()
    }
}

/// Who this server is, as told to clients in the handshake (id, roles) and on request
/// (`ServerInfo`: build, with the protocol version).
#[derive(Debug, Clone, Copy)]
pub struct ServerIdentity {
    pub server_id: ServerId,
    pub roles: u32,
    /// The server binary's version and git revision, "0.1.0 (git 1a2b3c4)".
    pub build: &'static str,
    /// Chosen anew at each start (see [`new_incarnation`]), and at each
    /// [`Restarter::hand_out`].
    pub incarnation: u64,
    /// Ask clients for a MUNGE credential in the handshake (`MungeChallenge`): a
    /// metadata manager in `munge` identity mode.
    pub munge: bool,
}

/// A value that differs from one start of a server to the next: the time in
/// nanoseconds mixed with the process id, never 0 (0 means "not known" on the wire).
pub fn new_incarnation() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    (nanos ^ ((std::process::id() as u64) << 40)).max(1)
}

/// Every limit of a server in one place.
#[derive(Debug, Clone, Copy)]
pub struct ServerLimits {
    pub connections_max: usize,
    /// Established connections (their handshake proved the key) of one peer: one
    /// address on TCP, one user (as the kernel tells it) on the Unix socket.
    pub peer_connections_max: usize,
    /// Handshakes of one peer in progress at once; a new one past this ends the
    /// peer's oldest (so a stranger holding handshakes open is pushed out by the next
    /// comer, never the reverse).
    pub peer_handshakes_max: usize,
    /// Requests of one connection handled at once; the connection is not read while
    /// this many are outstanding (TCP then pushes back on that peer alone). A request
    /// is outstanding until its reply is written.
    pub requests_inflight_max: usize,
    pub workers: usize,
    /// Threads serving connections (epoll loops).
    pub event_loops: usize,
    /// Bytes of requests and replies held in memory by the whole server.
    pub data_bytes_inflight_max: u64,
    /// Bytes of requests and replies held in memory for one peer: a peer that
    /// announces bulk data and never sends it, or never reads its replies, holds at
    /// most this much, and others go on.
    pub peer_data_bytes_max: u64,
    /// A connection idle this long between frames is closed.
    pub idle_timeout: Duration,
    /// A frame must arrive within this time of its first byte (or of its admission, if
    /// the server made it wait): a peer that trickles a frame is dropped.
    pub frame_deadline: Duration,
    /// A connection must complete its handshake within this time of its accept.
    pub handshake_timeout: Duration,
    /// A connection whose replies cannot be written at all for this long (its peer
    /// does not read them) is dropped, and what it held is released.
    pub send_timeout: Duration,
    /// Failed handshakes a peer may have in `auth_failure_window`; at this many a user
    /// of the Unix socket is refused until the window ends, and an address is logged
    /// (never refused: an address may be shared, see `peers`).
    pub auth_failures_max: u32,
    pub auth_failure_window: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            connections_max: 16_384,
            peer_connections_max: 4096,
            peer_handshakes_max: 1024,
            requests_inflight_max: 32,
            workers: 16,
            event_loops: 1,
            data_bytes_inflight_max: 1 << 30,
            peer_data_bytes_max: 256 << 20,
            idle_timeout: Duration::from_secs(3600),
            frame_deadline: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(5),
            send_timeout: Duration::from_secs(30),
            auth_failures_max: 20,
            auth_failure_window: Duration::from_secs(60),
        }
    }
}

/// A running server; dropping it does not stop it, `stop` does.
pub struct ServerHandle {
    pub local_addr: SocketAddr,
    shared: Arc<Shared>,
}

impl ServerHandle {
    /// Stops accepting connections (existing ones go on).
    pub fn stop(&self) {
        self.shared.loops[0].post(LoopMsg::StopAccepting);
    }

    /// Serves the same roles on a Unix socket too, for clients on this machine.
    pub fn serve_unix(&self, path: &std::path::Path) -> io::Result<String> {
        let listener = crate::stream::Listener::bind_unix(path)?;
        let address = listener.address()?;
        let crate::stream::Listener::Unix(listener, _) = listener else {
            unreachable!("bind_unix binds a Unix socket");
        };
        listener.set_nonblocking(true)?;
        deepen_backlog(&listener);
        self.shared.loops[0].post(LoopMsg::Listen(ServerListener::Unix(
            mio::net::UnixListener::from_std(listener),
        )));
        Ok(address)
    }

    /// Connections open now, and bytes the server holds for requests and replies.
    pub fn load(&self) -> (usize, u64) {
        self.shared.peers.totals()
    }

    /// What lets the handler act as a restart of this server (see [`Restarter`]).
    pub fn restarter(&self) -> Restarter {
        Restarter {
            shared: self.shared.clone(),
        }
    }
}

/// Longest `Restarter::close_all` waits for the event loops to close their connections.
const RESTART_CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Makes the running server look restarted to its clients without a new process: a
/// new incarnation in every handshake from now on, and every connection closed, so that
/// each client reconnects and finds it. A metadata manager whose store lost
/// acknowledged operations (a disk error, weft-meta `replay.rs`) uses it so that its
/// clients replay them, as after a real restart.
#[derive(Clone)]
pub struct Restarter {
    shared: Arc<Shared>,
}

impl Restarter {
    /// Hands out `incarnation` from now on. From this moment no reply reaches a
    /// connection accepted before (`Conn::send` drops it and shuts the socket): its
    /// client sends the request again on a new connection. `close_all` then closes
    /// them; the two are apart so that the handler can make ready what the new
    /// connections' requests find between them (the metadata manager: its replay
    /// window).
    pub fn hand_out(&self, incarnation: u64) {
        self.shared
            .incarnation
            .store(incarnation, std::sync::atomic::Ordering::SeqCst);
    }

    /// Closes every connection, returning once they are closed (at most
    /// `RESTART_CLOSE_WAIT`: a loop may be the thread waiting for what the caller
    /// holds). A handshake the loops had answered with the old incarnation belongs to
    /// a connection they close too (the loops write the handshake's answer and close in
    /// order).
    pub fn close_all(&self) {
        let (done, closed) = std::sync::mpsc::channel();
        for handle in &self.shared.loops {
            handle.post(LoopMsg::CloseAll(done.clone()));
        }
        let deadline = Instant::now() + RESTART_CLOSE_WAIT;
        for _ in &self.shared.loops {
            let left = deadline.saturating_duration_since(Instant::now());
            if closed.recv_timeout(left).is_err() {
                eprintln!("weftd: an event loop did not close its connections within {RESTART_CLOSE_WAIT:?}");
                return;
            }
        }
    }

    /// The incarnation handshakes give now.
    pub fn incarnation(&self) -> u64 {
        self.shared.incarnation.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A request read whole, on its way to a worker.
pub(crate) struct Job {
    conn: Arc<Conn>,
    request: Request,
    data: Vec<u8>,
    opcode: u16,
    request_id: u64,
    /// Bytes charged for it (message, data, the reply's hint).
    charged: u64,
    /// Its place among the requests changing the same bytes, if it changes data.
    ticket: Option<order::Ticket>,
    /// When the event loop had read it whole.
    arrived: Instant,
}

pub(crate) struct Shared {
    handler: Arc<dyn Handler>,
    identity: ServerIdentity,
    /// The incarnation handshakes give (`identity`'s until a `Restarter` changes it).
    incarnation: AtomicU64,
    limits: ServerLimits,
    key: ClusterKey,
    peers: peers::Peers,
    next_connection_id: AtomicU64,
    jobs: JobQueue,
    loops: Vec<LoopHandle>,
    /// Data-changing requests in flight, applied per overlapping bytes in arrival order.
    order: order::Order<Job>,
}

/// Requests waiting for a worker. One lock and one condition variable: a job wakes
/// exactly one idle worker (a channel's receiver shared behind a mutex woke a second
/// worker per job, the one next in line for the mutex).
pub(crate) struct JobQueue {
    queue: Mutex<VecDeque<Job>>,
    ready: Condvar,
}

impl JobQueue {
    pub(crate) fn push(&self, job: Job) {
        self.queue.lock().unwrap().push_back(job);
        self.ready.notify_one();
    }

    fn pop(&self) -> Job {
        let mut queue = self.queue.lock().unwrap();
        loop {
            if let Some(job) = queue.pop_front() {
                return job;
            }
            queue = self.ready.wait(queue).unwrap();
        }
    }
}

impl Shared {
    /// Tells every loop that bytes were released (once until it has looked).
    fn wake_all(&self) {
        for handle in &self.loops {
            if !handle
                .budget_freed
                .swap(true, std::sync::atomic::Ordering::SeqCst)
            {
                handle.post(LoopMsg::BudgetFreed);
            }
        }
    }

    /// Tells `conn`'s loop that a request slot freed.
    fn resume(&self, conn: &Conn) {
        self.loops[conn.loop_index].post(LoopMsg::Resume(conn.token, conn.id));
    }
}

/// Starts serving `listener` in background threads and returns at once. Only clients
/// that prove they hold `key` are served.
pub fn serve(
    listener: TcpListener,
    handler: Arc<dyn Handler>,
    identity: ServerIdentity,
    limits: ServerLimits,
    key: ClusterKey,
) -> io::Result<ServerHandle> {
    let local_addr = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    deepen_backlog(&listener);
    let mut polls = Vec::new();
    let mut loops = Vec::new();
    for _ in 0..limits.event_loops.max(1) {
        let poll = mio::Poll::new()?;
        let waker = mio::Waker::new(poll.registry(), mio::Token(usize::MAX))?;
        polls.push(poll);
        loops.push(LoopHandle {
            waker,
            inbox: Mutex::new(Vec::new()),
            budget_freed: std::sync::atomic::AtomicBool::new(false),
        });
    }
    let shared = Arc::new(Shared {
        handler,
        identity,
        incarnation: AtomicU64::new(identity.incarnation),
        limits,
        key,
        peers: peers::Peers::new(limits),
        next_connection_id: AtomicU64::new(1),
        jobs: JobQueue {
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
        },
        loops,
        order: order::Order::default(),
    });
    for k in 0..limits.workers.max(1) {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name(format!("weft-worker-{k}"))
            .spawn(move || loop {
                let job = shared.jobs.pop();
                run_job(&shared, job);
            })?;
    }
    shared.loops[0].post(LoopMsg::Listen(ServerListener::Tcp(
        mio::net::TcpListener::from_std(listener),
    )));
    for (index, poll) in polls.into_iter().enumerate() {
        let event_loop = EventLoop::new(index, shared.clone(), poll);
        std::thread::Builder::new()
            .name(format!("weft-loop-{index}"))
            .spawn(move || event_loop.run())?;
    }
    Ok(ServerHandle { local_addr, shared })
}

/// Most connections the kernel queues for accept. The standard library listens with
/// 128; the ranks of a job connecting at once would overflow that, and a connection
/// the kernel drops waits a second for its SYN to be sent again.
const LISTEN_BACKLOG: i32 = 4096;

fn deepen_backlog(listener: &impl std::os::fd::AsRawFd) {
    // SAFETY: listen on a socket that listens already only changes its backlog.
    unsafe { libc::listen(listener.as_raw_fd(), LISTEN_BACKLOG) };
}

fn internal() -> WireError {
    WireError::new(
        ErrorCode::Internal,
        "internal error while handling the request (see server log)",
    )
}

/// A `ShmCall`'s region of the connection's segment, checked against the segment's
/// bounds, with how many of its bytes are the request's data and the request it
/// carries. The one place a call's region is checked: `run_shm_call` answers an error
/// here, `try_shm_inline` leaves the call to it.
struct ShmCallParts<'a> {
    region: crate::shm::Region,
    data_len: u64,
    request: &'a Request,
}

fn shm_call_parts<'a>(conn: &Conn, call: &'a Request) -> Result<ShmCallParts<'a>, WireError> {
    let Request::ShmCall {
        offset,
        len,
        data_len,
        request,
    } = call
    else {
        unreachable!("called for shared-memory calls");
    };
    let segment = conn.shm.segment().ok_or_else(|| {
        WireError::new(
            ErrorCode::InvalidArgument,
            "this connection has no shared segment (send ShmAttach first)",
        )
    })?;
    let region = crate::shm::Region::new(segment, *offset, *len)?;
    Ok(ShmCallParts {
        region,
        data_len: *data_len,
        request,
    })
}

/// Serves a `ShmCall`: the request's bulk data is read from, and the reply's written
/// to, its region of the connection's segment. A reply that does not fit the region
/// goes in the frame.
/// `Handler::reply_from_file`, its panic an internal error: a panicking handler is a
/// bug, but it must not take the server down with it.
fn guarded_reply_from_file(
    shared: &Shared,
    conn: &Conn,
    request: &Request,
) -> Option<Result<(Response, crate::FileReply), WireError>> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        shared.handler.reply_from_file(conn.id, request)
    }))
    .unwrap_or_else(|_| Some(Err(internal())))
}

fn run_shm_call(shared: &Shared, conn: &Conn, call: Request) -> Result<(Response, Body), WireError> {
    let ShmCallParts { region, data_len, .. } = shm_call_parts(conn, &call)?;
    let Request::ShmCall { request, .. } = call else {
        unreachable!("checked by shm_call_parts");
    };
    let handler = &shared.handler;
    let guarded = |f: &mut dyn FnMut() -> Result<(Response, Body), WireError>| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| Err(internal()))
    };
    if data_len == 0 {
        let from_file = guarded_reply_from_file(shared, conn, &request);
        if let Some(result) = from_file {
            let (response, file) = result?;
            let n = file.len_bytes();
            if n > region.len() {
                return Ok((
                    response,
                    Body::File {
                        reply: file,
                        run: 0,
                        run_sent: 0,
                    },
                ));
            }
            region.populate(n, true);
            region.fill_from_file(&file.file, &file.runs).map_err(|e| {
                WireError::new(ErrorCode::Io, format!("reading into the shared segment: {e}"))
            })?;
            return Ok((
                Response::ShmPlaced {
                    data_len: n,
                    response: Box::new(response),
                },
                Body::Bytes(Vec::new()),
            ));
        }
    }
    if data_len == 0 {
        let into = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            handler.reply_into(conn.id, &request, &region)
        }))
        .unwrap_or_else(|_| Some(Err(internal())));
        match into {
            Some(Ok((response, ReplyInto::Placed(n)))) => {
                return Ok((
                    Response::ShmPlaced {
                        data_len: n,
                        response: Box::new(response),
                    },
                    Body::Bytes(Vec::new()),
                ))
            }
            Some(Ok((response, ReplyInto::Data(data)))) => return Ok(place_reply(&region, response, data)),
            Some(Err(e)) => return Err(e),
            None => {}
        }
    }
    let mut request = Some(*request);
    guarded(&mut || {
        let request = request.take().expect("runs once");
        region.populate(data_len, false);
        let (response, data) = handler.handle_borrowed(conn.id, request, region.bytes(data_len))?;
        Ok(place_reply(&region, response, data))
    })
}

/// The pool regions a `ShmScatter` names, each checked against the connection's pool
/// (the decoder saw to it that none is empty, wraps or overlaps another).
fn scatter_regions(conn: &Conn, pieces: &[(u64, u64)]) -> Result<Vec<crate::shm::Region>, WireError> {
    let pool = conn.shm.pool().ok_or_else(|| {
        WireError::new(
            ErrorCode::InvalidArgument,
            "this connection has no read pool (send ShmAttachPool first)",
        )
    })?;
    pieces
        .iter()
        .map(|&(offset, len)| {
            crate::shm::Region::new(pool.clone(), offset, len).map_err(|_| {
                WireError::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "pool piece {offset}+{len} lies outside the connection's {}-byte read pool",
                        pool.len()
                    ),
                )
            })
        })
        .collect()
}

fn scatter_mismatch(reply: u64, pieces: u64) -> WireError {
    WireError::new(
        ErrorCode::InvalidArgument,
        format!("the reply has {reply} bytes but the pool pieces hold {pieces}: nothing placed"),
    )
}

/// A reply's bulk data copied into the pool regions of a `ShmScatter` (a handler
/// without a file path); a reply without bulk data goes as it is.
fn place_scatter(
    regions: &[crate::shm::Region],
    response: Response,
    data: Vec<u8>,
) -> Result<(Response, Vec<u8>), WireError> {
    if data.is_empty() && !matches!(response, Response::Bytes(_)) {
        return Ok((response, data));
    }
    if !crate::shm::Region::scatter(regions, &data) {
        return Err(scatter_mismatch(
            data.len() as u64,
            regions.iter().map(|r| r.len()).sum(),
        ));
    }
    crate::shm::count_pool_placed(data.len() as u64);
    Ok((
        Response::ShmPlaced {
            data_len: data.len() as u64,
            response: Box::new(response),
        },
        Vec::new(),
    ))
}

/// Serves a `ShmScatter`: the read's reply goes straight from the object file into the
/// client's pool (`pread` per run and piece), or is copied there from a handler's
/// reply; a reply of another length than the pieces' is an error, nothing placed.
fn run_scatter(shared: &Shared, conn: &Conn, call: Request) -> Result<(Response, Body), WireError> {
    let Request::ShmScatter { pieces, request } = call else {
        unreachable!("called for pool calls");
    };
    let regions = scatter_regions(conn, &pieces)?;
    let total: u64 = pieces.iter().map(|p| p.1).sum();
    let handler = &shared.handler;
    let from_file = guarded_reply_from_file(shared, conn, &request);
    if let Some(result) = from_file {
        let (response, file) = result?;
        let n = file.len_bytes();
        if n != total {
            return Err(scatter_mismatch(n, total));
        }
        for region in &regions {
            region.populate(region.len(), true);
        }
        crate::shm::fill_regions(&file.file, &file.runs, &regions)
            .map_err(|e| WireError::new(ErrorCode::Io, format!("reading into the read pool: {e}")))?;
        crate::shm::count_pool_placed(n);
        return Ok((
            Response::ShmPlaced {
                data_len: n,
                response: Box::new(response),
            },
            Body::Bytes(Vec::new()),
        ));
    }
    let (response, data) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        handler.handle(conn.id, *request, Vec::new())
    }))
    .unwrap_or_else(|_| Err(internal()))?;
    place_scatter(&regions, response, data).map(|(response, data)| (response, Body::Bytes(data)))
}

/// `Handler::try_inline` for a pool call: the read it carries, its reply copied into
/// the pool if the handler served it.
fn try_scatter_inline(shared: &Shared, conn: &Conn, call: &Request) -> Inline {
    let Request::ShmScatter { pieces, request } = call else {
        unreachable!("called for pool calls");
    };
    // Anything amiss with the pieces is answered by `run_scatter`, first.
    let Ok(regions) = scatter_regions(conn, pieces) else {
        return Inline::NotTried;
    };
    match shared.handler.try_inline(conn.id, request, &[]) {
        Inline::Done(Ok((response, data))) => Inline::Done(place_scatter(&regions, response, data)),
        other => other,
    }
}

/// A reply's bulk data put in the call's region if it fits there, else in the frame.
fn place_reply(region: &crate::shm::Region, response: Response, data: Vec<u8>) -> (Response, Body) {
    if region.write_at(0, &data) {
        (
            Response::ShmPlaced {
                data_len: data.len() as u64,
                response: Box::new(response),
            },
            Body::Bytes(Vec::new()),
        )
    } else {
        (response, Body::Bytes(data))
    }
}

/// `Handler::try_inline` for a shared-memory call: the request it carries, its bulk
/// data read from, and its reply's written to, the call's region.
fn try_shm_inline(shared: &Shared, conn: &Conn, call: &Request) -> Inline {
    // Anything amiss with the segment is answered by `run_shm_call`.
    let Ok(ShmCallParts {
        region,
        data_len,
        request,
    }) = shm_call_parts(conn, call)
    else {
        return Inline::NotTried;
    };
    region.populate(data_len, false);
    match shared
        .handler
        .try_inline(conn.id, request, region.bytes(data_len))
    {
        Inline::Done(Ok((response, data))) => {
            let (response, body) = place_reply(&region, response, data);
            match body {
                // Bytes that did not fit the region travel in the frame.
                Body::Bytes(data) => Inline::Done(Ok((response, data))),
                Body::File { .. } => unreachable!("place_reply sends no file"),
            }
        }
        other => other,
    }
}

/// Whether `request` changes a file's bytes or size at an io server (directly, inside a
/// shared-memory call, or through a cache manager).
fn changes_data(request: &Request) -> bool {
    match request {
        Request::Write { .. }
        | Request::WriteView { .. }
        | Request::Truncate { .. }
        | Request::Allocate { .. }
        | Request::CacheTruncate { .. }
        | Request::CachePunch { .. } => true,
        Request::ShmCall { request, .. }
        | Request::ShmScatter { request, .. }
        | Request::ViaCache { request, .. }
        | Request::ViaCacheAware { request, .. } => changes_data(request),
        _ => false,
    }
}

/// Whether the peer of `conn` has closed its end (its FIN is here), whether or not the
/// event loop has read up to it yet.
fn peer_hung_up(conn: &Conn) -> bool {
    let mut fd = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(&conn.stream),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one pollfd of a descriptor this connection owns, no waiting.
    let n = unsafe { libc::poll(&mut fd, 1, 0) };
    n > 0 && fd.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

/// Hands `job` on: run here (`inline`) or queued for a worker, unless it changes bytes
/// that an earlier request still in flight changes too; then it waits, holding no
/// thread, until that one finishes (`order`). Called in arrival order.
pub(crate) fn dispatch(shared: &Shared, mut job: Job, inline: bool) {
    let inner = match &job.request {
        Request::ShmCall { request, .. } | Request::ShmScatter { request, .. } => request,
        other => other,
    };
    if let Some(changes) = shared.handler.changes(job.conn.id, inner) {
        match shared.order.admit(changes, |ticket| {
            job.ticket = Some(ticket);
            job
        }) {
            Some(admitted) => job = admitted,
            None => return,
        }
    }
    if inline {
        if let Some(job) = run_inline(shared, job) {
            shared.jobs.push(job);
        }
    } else {
        shared.jobs.push(job);
    }
}

/// Runs a quick request on the event loop; returns it if it would have waited there
/// (`Handler::try_inline`), for a worker.
fn run_inline(shared: &Shared, mut job: Job) -> Option<Job> {
    if dropped_write(&job) {
        drop_job(shared, job);
        return None;
    }
    let attempt = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if matches!(job.request, Request::ShmCall { .. }) {
            try_shm_inline(shared, &job.conn, &job.request)
        } else if matches!(job.request, Request::ShmScatter { .. }) {
            try_scatter_inline(shared, &job.conn, &job.request)
        } else {
            shared.handler.try_inline(job.conn.id, &job.request, &job.data)
        }
    }))
    .unwrap_or_else(|_| Inline::Done(Err(internal())));
    match attempt {
        Inline::Done(result) => {
            let _finished = Finished {
                shared,
                ticket: job.ticket.take(),
            };
            let result = result.map(|(response, data)| (response, Body::Bytes(data)));
            finish_job(shared, &job.conn, job.opcode, job.request_id, job.charged, result);
            None
        }
        Inline::WouldBlock => Some(job),
        Inline::NotTried => {
            serve_job(shared, job);
            None
        }
    }
}

/// Whether `job` changes data for a client that has hung up since: not to be done.
fn dropped_write(job: &Job) -> bool {
    changes_data(&job.request) && peer_hung_up(&job.conn)
}

/// Ends the job's place in the order (it finished, failed or was dropped) and queues
/// the jobs that waited only for it. On drop, so that no path out of `run_job` keeps
/// later requests waiting.
struct Finished<'a> {
    shared: &'a Shared,
    ticket: Option<order::Ticket>,
}

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket {
            for job in self.shared.order.finish(ticket) {
                // Never run on the caller's thread, which may be an event loop.
                self.shared.jobs.push(job);
            }
        }
    }
}

pub(crate) fn run_job(shared: &Shared, job: Job) {
    if dropped_write(&job) {
        drop_job(shared, job);
    } else {
        serve_job(shared, job);
    }
}

/// Answers a job that `dropped_write` refuses.
fn drop_job(shared: &Shared, mut job: Job) {
    let _finished = Finished {
        shared,
        ticket: job.ticket.take(),
    };
    // A client closes a connection whose request got no answer in time (this server was
    // stopped or hung): it told its caller the write failed and may since have written
    // the same bytes anew on another connection. Doing the old write now, after the new
    // one, would put stale bytes over newer ones.
    let error = WireError::new(
        ErrorCode::Unavailable,
        "the client closed the connection before this write was done; not done",
    );
    refuse_job(shared, &job, error);
}

/// Answers `job` with `error`, not running it.
fn refuse_job(shared: &Shared, job: &Job, error: WireError) {
    finish_job(
        shared,
        &job.conn,
        job.opcode,
        job.request_id,
        job.charged,
        Err(error),
    );
}

/// A request answered this long or longer after it arrived is logged (see `serve_job`).
const SLOW_REQUEST: Duration = Duration::from_secs(10);

/// Runs the job's request and answers it. One answered `SLOW_REQUEST` or more after it
/// arrived is logged with how long it waited to run (for a worker, or behind an
/// earlier overlapping change) and how long it ran, so that a client's "no answer
/// within N ms" can be told apart: a stuck request, a queue, or a reply never sent.
fn serve_job(shared: &Shared, job: Job) {
    let (arrived, connection) = (job.arrived, job.conn.id);
    let (opcode, shm) = match &job.request {
        Request::ShmCall { request, .. } => (request.opcode(), " (in a shared-memory call)"),
        other => (other.opcode(), ""),
    };
    let started = Instant::now();
    run_and_answer(shared, job);
    let answered = started.elapsed();
    let waited = started.saturating_duration_since(arrived);
    if waited + answered >= SLOW_REQUEST {
        eprintln!(
            "weftd: slow request: {opcode:?}{shm} of {connection} answered {:.1} s after it \
             arrived ({:.1} s before it ran, {:.1} s running)",
            (waited + answered).as_secs_f64(),
            waited.as_secs_f64(),
            answered.as_secs_f64()
        );
    }
}

thread_local! {
    /// The incarnation of the connection whose request the thread runs (`run_and_answer`).
    static SERVING: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// The incarnation the connection had when it was accepted, for the request the calling
/// thread's handler serves (none outside one). A handler that acts restarted (a
/// metadata manager whose store lost operations) tells by it, at the moment it notes its
/// own state, whether the request came before (on a connection whose client must not be
/// served from the state after: it asks again on a new one).
pub fn serving_incarnation() -> Option<u64> {
    SERVING.with(|s| s.get())
}

struct Serving;

impl Serving {
    fn start(incarnation: u64) -> Serving {
        SERVING.with(|s| s.set(Some(incarnation)));
        Serving
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        SERVING.with(|s| s.set(None));
    }
}

fn run_and_answer(shared: &Shared, mut job: Job) {
    let _finished = Finished {
        shared,
        ticket: job.ticket.take(),
    };
    // A request of a connection accepted before a `Restarter` acted is not run: its
    // reply would be dropped (`Conn::send`), and what it did would land amid the
    // clients' replays, unseen by its own client, which asks again (a replayed chmod
    // read off the old connection before its close, run after the restart, made the
    // manager answer an earlier replay of the same slot as overtaken: it was dropped).
    if job.conn.incarnation != shared.incarnation.load(std::sync::atomic::Ordering::SeqCst) {
        let refused = WireError::new(ErrorCode::Unavailable, "the server acted restarted: ask again");
        refuse_job(shared, &job, refused);
        return;
    }
    let _serving = Serving::start(job.conn.incarnation);
    // Shared-memory calls: the inner request runs against the client's memory.
    type ShmRunner = fn(&Shared, &Conn, Request) -> Result<(Response, Body), WireError>;
    let shm: Option<ShmRunner> = match job.request {
        Request::ShmCall { .. } => Some(run_shm_call),
        Request::ShmScatter { .. } => Some(run_scatter),
        _ => None,
    };
    if let Some(run) = shm {
        let Job {
            conn,
            request,
            opcode,
            request_id,
            charged,
            ..
        } = job;
        let result = run(shared, &conn, request);
        finish_job(shared, &conn, opcode, request_id, charged, result);
        return;
    }
    let from_file = guarded_reply_from_file(shared, &job.conn, &job.request);
    let result = match from_file {
        Some(r) => r.map(|(response, file)| {
            (
                response,
                Body::File {
                    reply: file,
                    run: 0,
                    run_sent: 0,
                },
            )
        }),
        None => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            shared.handler.handle(job.conn.id, job.request, job.data)
        }))
        .unwrap_or_else(|_| Err(internal()))
        .map(|(response, data)| (response, Body::Bytes(data))),
    };
    finish_job(shared, &job.conn, job.opcode, job.request_id, job.charged, result);
}

fn finish_job(
    shared: &Shared,
    conn: &Conn,
    opcode: u16,
    request_id: u64,
    charged: u64,
    result: Result<(Response, Body), WireError>,
) {
    let frame = match result {
        Ok((response, body)) => {
            let data_len = match &body {
                Body::Bytes(data) => data.len() as u64,
                Body::File { reply, .. } => reply.len_bytes(),
            };
            let head = frame_head(opcode, request_id, &encode_result(&Ok(response)), data_len);
            OutFrame::new(head, body, charged, true)
        }
        Err(e) => error_frame(opcode, request_id, e, charged, true),
    };
    conn.send(shared, frame);
}
