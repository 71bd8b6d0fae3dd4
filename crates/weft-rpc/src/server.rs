//! The server side: accept loop, per-connection frame reader, a worker pool running
//! the role handlers, the limits that keep a server's memory bounded, and the
//! connection lifecycle a handler may keep per-connection state on.

use crate::frame_io::{
    read_exact_vec, read_header, send_file_runs, write_frame, write_frame_head, ReadFrameError,
};
use crate::stream::{Listener, Stream};
use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use weft_layout::ServerId;
use weft_proto::frame::{FrameKind, PROTOCOL_VERSION};
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
/// Lifecycle: `connection_opened` runs before the first request of a connection is
/// handled; `handle` runs for each request (several of one connection may run at once,
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

    /// A connection from `peer` was accepted.
    fn connection_opened(&self, _connection: ConnectionId, _peer: Option<SocketAddr>) {}

    /// The connection is gone and none of its requests is still running: release what
    /// was kept for it.
    fn connection_closed(&self, _connection: ConnectionId) {}

    /// Bytes of bulk data the reply to `request` will carry, charged against the
    /// server's memory budget before the request runs.
    fn reply_bytes_hint(&self, _request: &Request) -> u64 {
        0
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
    /// Chosen anew at each start (see [`new_incarnation`]).
    pub incarnation: u64,
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
    /// Requests of one connection being handled at once; the connection's reader
    /// stops reading when this many are outstanding (TCP then pushes back).
    pub requests_inflight_max: usize,
    pub workers: usize,
    /// Bulk bytes (requests plus replies) held in memory by requests in progress.
    pub data_bytes_inflight_max: u64,
    /// A connection idle this long between frames is closed.
    pub idle_timeout: Duration,
    /// Once a frame's bulk data is admitted (and charged to the budget), it must arrive
    /// within this time, or the connection is dropped: a peer that announces data and
    /// stalls cannot hold the budget and starve other clients.
    pub frame_deadline: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            connections_max: 1024,
            requests_inflight_max: 32,
            workers: 16,
            data_bytes_inflight_max: 1 << 30,
            idle_timeout: Duration::from_secs(3600),
            frame_deadline: Duration::from_secs(10),
        }
    }
}

/// A running server; dropping it does not stop it, `stop` does.
pub struct ServerHandle {
    pub local_addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    shared: Arc<Shared>,
}

impl ServerHandle {
    /// Stops accepting connections (existing ones finish their requests).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.local_addr, Duration::from_millis(200));
    }

    /// Serves the same roles on a Unix socket too, for clients on this machine.
    pub fn serve_unix(&self, path: &std::path::Path) -> io::Result<String> {
        let listener = Listener::bind_unix(path)?;
        let address = listener.address()?;
        spawn_accept_loop(listener, self.shared.clone(), self.stopping.clone())?;
        Ok(address)
    }
}

/// A counting semaphore over bytes, so that bulk data in memory stays bounded.
struct ByteBudget {
    max: u64,
    used: Mutex<u64>,
    freed: Condvar,
}

impl ByteBudget {
    fn acquire(&self, n: u64) -> u64 {
        // A single request larger than the whole budget runs alone.
        let n = n.min(self.max);
        let mut used = self.used.lock().unwrap();
        while *used + n > self.max {
            used = self.freed.wait(used).unwrap();
        }
        *used += n;
        n
    }
    fn release(&self, n: u64) {
        *self.used.lock().unwrap() -= n;
        self.freed.notify_all();
    }
}

/// Bounded count of outstanding requests on one connection.
struct Inflight {
    count: Mutex<usize>,
    changed: Condvar,
}

impl Inflight {
    fn enter(&self, max: usize) {
        let mut c = self.count.lock().unwrap();
        while *c >= max {
            c = self.changed.wait(c).unwrap();
        }
        *c += 1;
    }
    fn leave(&self) {
        *self.count.lock().unwrap() -= 1;
        // The reader may wait for a free slot and the closing connection for zero.
        self.changed.notify_all();
    }
    /// Waits until every request entered has left.
    fn wait_idle(&self) {
        let mut c = self.count.lock().unwrap();
        while *c > 0 {
            c = self.changed.wait(c).unwrap();
        }
    }
}

struct Job {
    connection: ConnectionId,
    request: Request,
    data: Vec<u8>,
    opcode: u16,
    request_id: u64,
    charged_bytes: u64,
    writer: Arc<Mutex<Stream>>,
    inflight: Arc<Inflight>,
}

struct Shared {
    handler: Arc<dyn Handler>,
    identity: ServerIdentity,
    limits: ServerLimits,
    budget: ByteBudget,
    connections: AtomicUsize,
    next_connection_id: AtomicU64,
    jobs: Mutex<mpsc::Sender<Job>>,
}

/// Starts serving `listener` in background threads and returns at once.
pub fn serve(
    listener: TcpListener,
    handler: Arc<dyn Handler>,
    identity: ServerIdentity,
    limits: ServerLimits,
) -> io::Result<ServerHandle> {
    let local_addr = listener.local_addr()?;
    let (sender, receiver) = mpsc::channel::<Job>();
    let receiver = Arc::new(Mutex::new(receiver));
    let shared = Arc::new(Shared {
        handler,
        identity,
        limits,
        budget: ByteBudget {
            max: limits.data_bytes_inflight_max,
            used: Mutex::new(0),
            freed: Condvar::new(),
        },
        connections: AtomicUsize::new(0),
        next_connection_id: AtomicU64::new(1),
        jobs: Mutex::new(sender),
    });
    for k in 0..limits.workers.max(1) {
        let receiver = receiver.clone();
        let shared = shared.clone();
        std::thread::Builder::new()
            .name(format!("weft-worker-{k}"))
            .spawn(move || loop {
                let job = match receiver.lock().unwrap().recv() {
                    Ok(job) => job,
                    Err(_) => return,
                };
                run_job(&shared, job);
            })?;
    }
    let stopping = Arc::new(AtomicBool::new(false));
    spawn_accept_loop(Listener::Tcp(listener), shared.clone(), stopping.clone())?;
    Ok(ServerHandle {
        local_addr,
        stopping,
        shared,
    })
}

/// Accepts connections on `listener` until the server stops, one thread each.
fn spawn_accept_loop(listener: Listener, shared: Arc<Shared>, stop_flag: Arc<AtomicBool>) -> io::Result<()> {
    std::thread::Builder::new()
        .name("weft-accept".into())
        .spawn(move || loop {
            let stream = listener.accept();
            if stop_flag.load(Ordering::SeqCst) {
                return;
            }
            let Ok(stream) = stream else { continue };
            if shared.connections.load(Ordering::SeqCst) >= shared.limits.connections_max {
                let mut s = stream;
                let err = WireError::new(
                    ErrorCode::Busy,
                    "server has too many connections; try again later",
                );
                let _ = write_frame(&mut s, FrameKind::Response, 0, 0, &encode_result(&Err(err)), &[]);
                continue;
            }
            shared.connections.fetch_add(1, Ordering::SeqCst);
            let shared = shared.clone();
            let spawned = std::thread::Builder::new()
                .name("weft-conn".into())
                .spawn(move || {
                    serve_connection(&shared, stream);
                    shared.connections.fetch_sub(1, Ordering::SeqCst);
                });
            if spawned.is_err() {
                eprintln!("weftd: cannot start a connection thread; connection dropped");
            }
        })?;
    Ok(())
}

fn run_job(shared: &Shared, job: Job) {
    let internal = || {
        WireError::new(
            ErrorCode::Internal,
            "internal error while handling the request (see server log)",
        )
    };
    let result = if job.opcode == weft_proto::Opcode::Hello as u16 {
        Ok((
            Response::Hello {
                server_id: shared.identity.server_id,
                roles: shared.identity.roles,
                incarnation: shared.identity.incarnation,
            },
            Reply::Bytes(Vec::new()),
        ))
    } else if job.opcode == weft_proto::Opcode::ServerInfo as u16 {
        Ok((
            Response::ServerInfo {
                protocol_version: PROTOCOL_VERSION,
                build: shared.identity.build.to_owned(),
            },
            Reply::Bytes(Vec::new()),
        ))
    } else {
        // A panicking handler is a bug, but it must not take the server down with it.
        let from_file = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            shared.handler.reply_from_file(job.connection, &job.request)
        }))
        .unwrap_or_else(|_| Some(Err(internal())));
        match from_file {
            Some(r) => r.map(|(response, file)| (response, Reply::File(file))),
            None => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                shared.handler.handle(job.connection, job.request, job.data)
            }))
            .unwrap_or_else(|_| Err(internal()))
            .map(|(response, data)| (response, Reply::Bytes(data))),
        }
    };
    let (message, reply) = match result {
        Ok((response, reply)) => (encode_result(&Ok(response)), reply),
        Err(e) => (encode_result(&Err(e)), Reply::Bytes(Vec::new())),
    };
    {
        let mut stream = job.writer.lock().unwrap();
        let sent = match &reply {
            Reply::Bytes(data) => write_frame(
                &mut *stream,
                FrameKind::Response,
                job.opcode,
                job.request_id,
                &message,
                data,
            ),
            Reply::File(file) => write_frame_head(
                &mut *stream,
                FrameKind::Response,
                job.opcode,
                job.request_id,
                &message,
                file.len_bytes(),
            )
            .and_then(|()| send_file_runs(&mut *stream, &file.file, &file.runs)),
        };
        // A reply cut short leaves the stream unusable: close it, the client sees why.
        if sent.is_err() {
            stream.shutdown(Shutdown::Both).ok();
        }
    }
    shared.budget.release(job.charged_bytes);
    job.inflight.leave();
}

/// The bulk data of a reply: bytes in memory, or file runs for sendfile.
enum Reply {
    Bytes(Vec<u8>),
    File(FileReply),
}

/// Answers one request with an error without running it.
fn reply_error(writer: &Mutex<Stream>, opcode: u16, request_id: u64, error: WireError) -> io::Result<()> {
    let mut stream = writer.lock().unwrap();
    write_frame(
        &mut *stream,
        FrameKind::Response,
        opcode,
        request_id,
        &encode_result(&Err(error)),
        &[],
    )
}

fn serve_connection(shared: &Shared, stream: Stream) {
    let id = ConnectionId(shared.next_connection_id.fetch_add(1, Ordering::Relaxed));
    shared.handler.connection_opened(id, stream.peer_addr());
    let inflight = Arc::new(Inflight {
        count: Mutex::new(0),
        changed: Condvar::new(),
    });
    read_requests(shared, id, stream, &inflight);
    // Requests already queued still run and answer (into a closed socket): the handler
    // hears of the close only after the last of them.
    inflight.wait_idle();
    let closed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        shared.handler.connection_closed(id)
    }));
    if closed.is_err() {
        eprintln!("weftd: the handler panicked while closing {id}");
    }
}

/// Reads the frames of one connection and queues its requests until it closes or
/// breaks.
fn read_requests(shared: &Shared, id: ConnectionId, stream: Stream, inflight: &Arc<Inflight>) {
    stream.set_read_timeout(Some(shared.limits.idle_timeout)).ok();
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let writer = Arc::new(Mutex::new(write_half));
    let mut reader = stream;
    loop {
        let header = match read_header(&mut reader) {
            Ok(h) => h,
            Err(ReadFrameError::Closed) | Err(ReadFrameError::Io(_)) => break,
            Err(ReadFrameError::Header(e)) => {
                // After a bad header the stream cannot be re-synchronised: say why, close.
                let _ = reply_error(&writer, 0, 0, WireError::from(e));
                break;
            }
        };
        if header.version != PROTOCOL_VERSION {
            let e = WireError::new(
                ErrorCode::ProtocolVersion,
                format!("client speaks Weft protocol version {}, this server speaks version {PROTOCOL_VERSION}; upgrade the older side", header.version),
            );
            let _ = reply_error(&writer, header.opcode, header.request_id, e);
            break;
        }
        if header.kind != FrameKind::Request {
            let _ = reply_error(
                &writer,
                header.opcode,
                header.request_id,
                WireError::new(ErrorCode::Malformed, "expected a request frame"),
            );
            break;
        }
        let Ok(message) = read_exact_vec(&mut reader, header.message_len as u64) else {
            break;
        };
        let request = match Request::decode(header.opcode, &message) {
            Ok(r) => r,
            Err(e) => {
                // The frame's lengths were sound, so skip its data and keep serving.
                if skip(&mut reader, header.data_len).is_err() {
                    break;
                }
                let _ = reply_error(&writer, header.opcode, header.request_id, WireError::from(e));
                continue;
            }
        };
        inflight.enter(shared.limits.requests_inflight_max);
        let charged_bytes = shared
            .budget
            .acquire(header.data_len + shared.handler.reply_bytes_hint(&request));
        let deadline = std::time::Instant::now() + shared.limits.frame_deadline;
        let data = read_exact_by(&mut reader, header.data_len, deadline);
        reader.set_read_timeout(Some(shared.limits.idle_timeout)).ok();
        let data = match data {
            Ok(d) => d,
            Err(_) => {
                shared.budget.release(charged_bytes);
                inflight.leave();
                break;
            }
        };
        let job = Job {
            connection: id,
            request,
            data,
            opcode: header.opcode,
            request_id: header.request_id,
            charged_bytes,
            writer: writer.clone(),
            inflight: inflight.clone(),
        };
        if shared.jobs.lock().unwrap().send(job).is_err() {
            break;
        }
    }
    writer.lock().unwrap().shutdown(Shutdown::Both).ok();
}

/// Reads exactly `len` bytes, failing if they have not all arrived by `deadline`.
fn read_exact_by(stream: &mut Stream, len: u64, deadline: std::time::Instant) -> io::Result<Vec<u8>> {
    let mut data = vec![0u8; len as usize];
    let mut filled = 0;
    while filled < data.len() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut data[filled..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(data)
}

fn skip(reader: &mut impl Read, mut len: u64) -> io::Result<()> {
    let mut buf = [0u8; 64 * 1024];
    while len > 0 {
        let n = (len as usize).min(buf.len());
        reader.read_exact(&mut buf[..n])?;
        len -= n as u64;
    }
    Ok(())
}
