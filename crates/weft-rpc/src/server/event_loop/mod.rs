//! The event loop: accepts connections, runs each one's handshake, reads its frames
//! into its own buffers and hands complete requests to the workers, and enforces the
//! deadlines. One thread serves thousands of connections (epoll, through mio); a
//! connection costs its buffers, never a thread.
//!
//! 1. Loop 0 accepts; a connection is counted against the server's limit and as one of
//!    its peer's pending handshakes (the oldest of a peer with too many pending makes
//!    way), or refused with the reason written to it, then given to a loop.
//! 2. Until its handshake is done, a connection may send only `Hello` and
//!    `Authenticate`, small and without bulk data; anything else ends it. Once it
//!    proved the key it counts against its peer's cap of connections (per user on the
//!    Unix socket), not before: a stranger never fills another's cap.
//! 3. A request's bytes (message, bulk data, the reply's hint) are charged to its
//!    peer's and the server's budgets before they are read; a connection that finds no
//!    room, or has too many requests in flight, is not read until there is (TCP pushes
//!    back on its sender alone).
//! 4. Replies are written by whoever finishes them and, when the socket is full, by
//!    the loop as it drains (`outbox`).
//! 5. Every few hundred milliseconds the loop ends connections past a deadline: the
//!    handshake's, a frame's (once admitted), replies not read for the send timeout,
//!    and idleness.
//!
//! Here: the loop, its connections and deadlines; `admission.rs` the handshake and the
//! admission of requests, `frames.rs` reading frames and answering them.

use super::outbox::{Body, Conn, OutFrame, OutState, ServerStream};
use super::peers::PeerKey;
use super::{ConnectionId, Job, Peer, Shared};
use crate::auth::Side;
use crate::shm::SEGMENT_BYTES_MAX;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weft_proto::frame::{FrameHeader, FrameKind, FRAME_HEADER_BYTES, PROTOCOL_VERSION};
use weft_proto::handshake::{Identity, HANDSHAKE_MESSAGE_BYTES_MAX, NONCE_BYTES};
use weft_proto::msg::{encode_result, Request, Response};
use weft_proto::{ErrorCode, Opcode, WireError};

mod admission;
mod frames;

use admission::{malformed_handshake, peer_uid};
use frames::{charge_hint, write_final};
pub use frames::{error_frame, frame_head};

/// How often deadlines are checked.
const TICK: Duration = Duration::from_millis(200);
/// How long a connection that was told why it is refused is given to read that and
/// close, before it is closed anyway.
const DRAIN_TIME: Duration = Duration::from_secs(2);
/// Most refused connections draining at once; past this they are closed at once.
const DRAINING_MAX: usize = 1024;
/// Reads go through a buffer of this size, except bulk data that is read straight
/// into its request's buffer.
const SCRATCH_BYTES: usize = 64 * 1024;
/// Tokens below this are listeners; the waker has the largest.
const FIRST_CONNECTION_TOKEN: usize = 1 << 16;
const WAKER: mio::Token = mio::Token(usize::MAX);

/// What other threads ask of a loop.
pub enum LoopMsg {
    /// Serve a connection accepted by loop 0.
    Adopt(Box<Accepted>),
    /// A connection paused for a request slot may have one now.
    Resume(mio::Token, ConnectionId),
    /// Bytes were released: connections waiting for them may go on.
    BudgetFreed,
    /// Accept on this listener too (loop 0).
    Listen(ServerListener),
    /// Stop accepting (loop 0).
    StopAccepting,
    /// End this connection's handshake: its peer's newer ones took its place.
    Evict(ConnectionId),
    /// Close every connection (`Restarter::close_all`), then say so.
    CloseAll(std::sync::mpsc::Sender<()>),
}

/// A loop's mailbox.
pub struct LoopHandle {
    pub waker: mio::Waker,
    pub inbox: Mutex<Vec<LoopMsg>>,
    /// A `BudgetFreed` is in the inbox: releases in a burst wake the loop once.
    pub budget_freed: std::sync::atomic::AtomicBool,
}

impl LoopHandle {
    pub fn post(&self, msg: LoopMsg) {
        self.inbox.lock().unwrap().push(msg);
        if let Err(e) = self.waker.wake() {
            eprintln!("weftd: cannot wake an event loop: {e}");
        }
    }
}

pub enum ServerListener {
    Tcp(mio::net::TcpListener),
    Unix(mio::net::UnixListener),
}

/// An accepted connection on its way to its loop.
pub struct Accepted {
    stream: ServerStream,
    peer: PeerKey,
    addr: Option<SocketAddr>,
    uid: Option<u32>,
    id: ConnectionId,
}

enum Phase {
    AwaitHello,
    AwaitAuthenticate {
        server_nonce: [u8; NONCE_BYTES],
        client: String,
    },
    Open,
    /// Told why it ends; its input is read and dropped until it closes.
    Draining {
        until: Instant,
    },
}

enum ReadState {
    Header {
        buf: [u8; FRAME_HEADER_BYTES],
        got: usize,
    },
    /// Paused until the message's bytes can be charged.
    AwaitMessage { header: FrameHeader },
    Message {
        header: FrameHeader,
        buf: Vec<u8>,
        got: usize,
        charged: u64,
    },
    /// Paused until a request slot (`slot` once taken) and the bulk data's bytes.
    AwaitData {
        header: FrameHeader,
        request: Box<Request>,
        charged: u64,
        slot: bool,
    },
    Data {
        header: FrameHeader,
        request: Box<Request>,
        buf: Vec<u8>,
        got: usize,
        charged: u64,
    },
    /// The bulk data of a refused request, read and dropped.
    Skip { left: u64 },
}

impl ReadState {
    fn start() -> ReadState {
        ReadState::Header {
            buf: [0; FRAME_HEADER_BYTES],
            got: 0,
        }
    }

    /// Bytes this state holds charged.
    fn charged(&self) -> u64 {
        match self {
            ReadState::Message { charged, .. }
            | ReadState::AwaitData { charged, .. }
            | ReadState::Data { charged, .. } => *charged,
            _ => 0,
        }
    }

    fn between_frames(&self) -> bool {
        matches!(self, ReadState::Header { got: 0, .. })
    }
}

/// Why a connection is paused.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pause {
    /// It has `requests_inflight_max` requests in flight.
    Inflight,
    /// Its peer or the server has no room for `n` more bytes.
    Budget(u64),
}

/// The loop's side of one connection.
struct Client {
    conn: Arc<Conn>,
    addr: Option<SocketAddr>,
    uid: Option<u32>,
    /// Counted against the limits (refused connections are not).
    counted: bool,
    /// Its handshake succeeded and it counts against its peer's connection cap.
    established: bool,
    phase: Phase,
    read: ReadState,
    /// Bytes read while the connection was being paused, consumed first on resume.
    stash: Vec<u8>,
    pause: Option<Pause>,
    /// When the frame being read must be complete (none between frames and while
    /// paused: a wait the server imposes is not the peer's delay).
    frame_deadline: Option<Instant>,
    last_read: Instant,
    accepted_at: Instant,
}

/// How a connection ends.
enum End {
    /// At once (the peer left, or broke the stream).
    Now,
    /// With an error frame telling why, then a short drain.
    Tell(WireError, u16, u64),
}

pub struct EventLoop {
    index: usize,
    shared: Arc<Shared>,
    poll: mio::Poll,
    clients: HashMap<mio::Token, Client>,
    listeners: Vec<(mio::Token, ServerListener)>,
    next_token: usize,
    scratch: Vec<u8>,
    /// Connections waiting for bytes, oldest first.
    waiting: VecDeque<mio::Token>,
    /// Round robin over the loops for accepted connections (loop 0).
    next_loop: usize,
    draining: usize,
    last_tick: Instant,
    last_sweep: Instant,
    accept_error_logged: bool,
}

impl EventLoop {
    pub fn new(index: usize, shared: Arc<Shared>, poll: mio::Poll) -> EventLoop {
        let now = Instant::now();
        EventLoop {
            index,
            shared,
            poll,
            clients: HashMap::new(),
            listeners: Vec::new(),
            next_token: FIRST_CONNECTION_TOKEN,
            scratch: vec![0; SCRATCH_BYTES],
            waiting: VecDeque::new(),
            next_loop: 0,
            draining: 0,
            last_tick: now,
            last_sweep: now,
            accept_error_logged: false,
        }
    }

    pub fn run(mut self) {
        let mut events = mio::Events::with_capacity(1024);
        loop {
            if let Err(e) = self.poll.poll(&mut events, Some(TICK)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    eprintln!("weftd: event loop {} failed: {e}", self.index);
                    return;
                }
            }
            for event in events.iter() {
                let token = event.token();
                if token == WAKER {
                    continue;
                }
                if token.0 < FIRST_CONNECTION_TOKEN {
                    self.accept(token);
                    continue;
                }
                if event.is_writable() {
                    self.writable(token);
                }
                if event.is_readable() || event.is_read_closed() || event.is_error() {
                    self.readable(token);
                }
            }
            self.handle_inbox();
            let now = Instant::now();
            if now.duration_since(self.last_tick) >= TICK {
                self.last_tick = now;
                self.tick(now);
            }
        }
    }

    fn handle_inbox(&mut self) {
        let messages = std::mem::take(&mut *self.shared.loops[self.index].inbox.lock().unwrap());
        let mut budget_freed = false;
        for msg in messages {
            match msg {
                LoopMsg::Adopt(accepted) => self.adopt(*accepted),
                LoopMsg::Resume(token, id) => {
                    if self.clients.get(&token).is_some_and(|c| c.conn.id == id) {
                        self.resume(token);
                    }
                }
                LoopMsg::BudgetFreed => {
                    self.shared.loops[self.index]
                        .budget_freed
                        .store(false, std::sync::atomic::Ordering::SeqCst);
                    budget_freed = true;
                }
                LoopMsg::Listen(listener) => self.listen(listener),
                LoopMsg::Evict(id) => self.evict(id),
                LoopMsg::CloseAll(done) => {
                    let tokens: Vec<mio::Token> = self.clients.keys().copied().collect();
                    for token in tokens {
                        self.close(token);
                    }
                    let _ = done.send(());
                }
                LoopMsg::StopAccepting => {
                    for (_, listener) in self.listeners.drain(..) {
                        let fd = match &listener {
                            ServerListener::Tcp(l) => l.as_raw_fd(),
                            ServerListener::Unix(l) => l.as_raw_fd(),
                        };
                        let _ = self.poll.registry().deregister(&mut mio::unix::SourceFd(&fd));
                    }
                }
            }
        }
        if budget_freed {
            // Oldest first; one that still finds no room keeps its place.
            let waiting: Vec<mio::Token> = self.waiting.iter().copied().collect();
            for token in waiting {
                self.resume(token);
            }
        }
    }

    fn listen(&mut self, listener: ServerListener) {
        let token = mio::Token(self.listeners.len());
        let fd = match &listener {
            ServerListener::Tcp(l) => l.as_raw_fd(),
            ServerListener::Unix(l) => l.as_raw_fd(),
        };
        match self
            .poll
            .registry()
            .register(&mut mio::unix::SourceFd(&fd), token, mio::Interest::READABLE)
        {
            Ok(()) => self.listeners.push((token, listener)),
            Err(e) => eprintln!("weftd: cannot listen: {e}"),
        }
        // Connections that queued before registration are taken now.
        self.accept(token);
    }

    /// Accepts every pending connection of a listener.
    fn accept(&mut self, token: mio::Token) {
        loop {
            let Some((_, listener)) = self.listeners.iter().find(|(t, _)| *t == token) else {
                return;
            };
            let accepted = match listener {
                ServerListener::Tcp(l) => l.accept().map(|(s, addr)| {
                    s.set_nodelay(true).ok();
                    (ServerStream::Tcp(s), PeerKey::Ip(addr.ip()), Some(addr), None)
                }),
                ServerListener::Unix(l) => l.accept().map(|(s, _)| {
                    let uid = peer_uid(s.as_raw_fd());
                    (
                        ServerStream::Unix(s),
                        PeerKey::LocalUser(uid.unwrap_or(u32::MAX)),
                        None,
                        uid,
                    )
                }),
            };
            let (stream, peer, addr, uid) = match accepted {
                Ok(a) => a,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors, typically: the connection waits in the
                    // backlog; say so once rather than per attempt.
                    if !self.accept_error_logged {
                        eprintln!("weftd: cannot accept connections: {e}");
                        self.accept_error_logged = true;
                    }
                    return;
                }
            };
            self.accept_error_logged = false;
            let now = Instant::now();
            let id = ConnectionId(
                self.shared
                    .next_connection_id
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            );
            let target = self.next_loop % self.shared.loops.len();
            match self.shared.peers.admit(peer, id.0, target, now) {
                Err(reason) => {
                    self.refuse_at_accept(stream, addr, uid, reason);
                    continue;
                }
                Ok(None) => {}
                Ok(Some(evicted)) if evicted.loop_index == self.index => {
                    self.evict(ConnectionId(evicted.connection))
                }
                Ok(Some(evicted)) => self.shared.loops[evicted.loop_index]
                    .post(LoopMsg::Evict(ConnectionId(evicted.connection))),
            }
            let accepted = Accepted {
                stream,
                peer,
                addr,
                uid,
                id,
            };
            self.next_loop = self.next_loop.wrapping_add(1);
            if target == self.index {
                self.adopt(accepted);
            } else {
                self.shared.loops[target].post(LoopMsg::Adopt(Box::new(accepted)));
            }
        }
    }

    /// Tells a connection over a limit why, and lets it read that before it closes:
    /// a client sees "too many connections", not a reset.
    fn refuse_at_accept(
        &mut self,
        stream: ServerStream,
        addr: Option<SocketAddr>,
        uid: Option<u32>,
        reason: String,
    ) {
        let error = WireError::new(ErrorCode::Busy, reason);
        if !write_final(&stream, &error, 0, 0) || self.draining >= DRAINING_MAX {
            return;
        }
        stream.shutdown(Shutdown::Write);
        let refused = Accepted {
            stream,
            peer: PeerKey::LocalUser(u32::MAX),
            addr,
            uid,
            id: ConnectionId(0),
        };
        let phase = Phase::Draining {
            until: Instant::now() + DRAIN_TIME,
        };
        if self.install(refused, OutState::refused(), false, phase).is_some() {
            self.draining += 1;
        }
    }

    /// Serves a connection counted against the limits: its handshake comes first.
    fn adopt(&mut self, accepted: Accepted) {
        let (peer, id) = (accepted.peer, accepted.id);
        match self.install(accepted, OutState::default(), true, Phase::AwaitHello) {
            // Bytes that arrived before registration raise no edge: read them now.
            Some(token) => self.readable(token),
            None => self.shared.peers.leave(peer, id.0, false),
        }
    }

    /// Ends a connection still in its handshake whose place a newer handshake of its
    /// peer took (`Peers::admit`); one that got through meanwhile stays.
    fn evict(&mut self, id: ConnectionId) {
        let found = self.clients.iter().find_map(|(token, c)| {
            (c.conn.id == id && matches!(c.phase, Phase::AwaitHello | Phase::AwaitAuthenticate { .. }))
                .then_some(*token)
        });
        if let Some(token) = found {
            let error = WireError::new(
                ErrorCode::Busy,
                "too many handshakes pending from this peer: this one made way for a newer one; try again",
            );
            self.end(token, End::Tell(error, 0, 0));
        }
    }

    /// Registers a connection with this loop.
    fn install(
        &mut self,
        accepted: Accepted,
        state: OutState,
        counted: bool,
        phase: Phase,
    ) -> Option<mio::Token> {
        let token = mio::Token(self.next_token);
        self.next_token += 1;
        let conn = Arc::new(Conn {
            id: accepted.id,
            peer: accepted.peer,
            stream: accepted.stream,
            loop_index: self.index,
            token,
            state: Mutex::new(state),
            shm: Default::default(),
            incarnation: self.shared.incarnation.load(std::sync::atomic::Ordering::SeqCst),
        });
        let fd = conn.stream.as_raw_fd();
        let registered = self.poll.registry().register(
            &mut mio::unix::SourceFd(&fd),
            token,
            mio::Interest::READABLE | mio::Interest::WRITABLE,
        );
        if let Err(e) = registered {
            eprintln!("weftd: cannot serve a connection from {}: {e}", accepted.peer);
            return None;
        }
        let now = Instant::now();
        let client = Client {
            conn,
            addr: accepted.addr,
            uid: accepted.uid,
            counted,
            established: false,
            phase,
            read: ReadState::start(),
            stash: Vec::new(),
            pause: None,
            frame_deadline: None,
            last_read: now,
            accepted_at: now,
        };
        self.clients.insert(token, client);
        Some(token)
    }

    fn writable(&mut self, token: mio::Token) {
        if let Some(client) = self.clients.get(&token) {
            if matches!(client.phase, Phase::Draining { .. }) {
                return;
            }
            client.conn.flush(&self.shared);
        }
    }

    /// Reads what the connection sent until the socket is empty or the connection is
    /// paused.
    fn readable(&mut self, token: mio::Token) {
        let Some(mut client) = self.clients.remove(&token) else {
            return;
        };
        let end = self.read_client(&mut client);
        self.clients.insert(token, client);
        if let Some(end) = end {
            self.end(token, end);
        }
    }

    /// Ends a connection, at once or after telling it why.
    fn end(&mut self, token: mio::Token, how: End) {
        let Some(mut client) = self.clients.remove(&token) else {
            return;
        };
        if let End::Tell(error, opcode, id) = how {
            if !matches!(client.phase, Phase::Draining { .. }) && self.draining < DRAINING_MAX {
                // Replies not yet written are dropped: this frame is the last.
                client.conn.close(&self.shared);
                if write_final(&client.conn.stream, &error, opcode, id) {
                    client.conn.stream.shutdown(Shutdown::Write);
                    self.drop_partial(&mut client);
                    client.phase = Phase::Draining {
                        until: Instant::now() + DRAIN_TIME,
                    };
                    self.draining += 1;
                    self.clients.insert(token, client);
                    return;
                }
            }
        }
        self.clients.insert(token, client);
        self.close(token);
    }

    /// Forgets a connection: its socket, its partial frame, its place in the limits.
    fn close(&mut self, token: mio::Token) {
        let Some(mut client) = self.clients.remove(&token) else {
            return;
        };
        let fd = client.conn.stream.as_raw_fd();
        let _ = self.poll.registry().deregister(&mut mio::unix::SourceFd(&fd));
        client.conn.stream.shutdown(Shutdown::Both);
        client.conn.close(&self.shared);
        self.drop_partial(&mut client);
        if matches!(client.phase, Phase::Draining { .. }) {
            self.draining -= 1;
        }
        if client.counted {
            self.shared
                .peers
                .leave(client.conn.peer, client.conn.id.0, client.established);
        }
    }

    /// Ends connections past a deadline.
    fn tick(&mut self, now: Instant) {
        let limits = self.shared.limits;
        let mut ends: Vec<(mio::Token, End, Option<String>)> = Vec::new();
        for (token, client) in &self.clients {
            let end = match &client.phase {
                Phase::Draining { until } => (now >= *until).then_some((End::Now, None)),
                Phase::AwaitHello | Phase::AwaitAuthenticate { .. } => {
                    // A slow handshake is no failure: waiting costs the server no
                    // thread, and its place among the peer's pending handshakes goes
                    // to the next comer (`Peers::admit`), so nobody is refused for it.
                    (now.duration_since(client.accepted_at) >= limits.handshake_timeout).then(|| {
                        (
                            End::Tell(
                                WireError::new(
                                    ErrorCode::TimedOut,
                                    format!(
                                        "the handshake was not completed within {} s",
                                        limits.handshake_timeout.as_secs_f64()
                                    ),
                                ),
                                0,
                                0,
                            ),
                            None,
                        )
                    })
                }
                Phase::Open => {
                    let state = client.conn.state.lock().unwrap();
                    if state
                        .stalled_since
                        .is_some_and(|t| now.duration_since(t) >= limits.send_timeout)
                    {
                        Some((
                            End::Now,
                            Some(format!(
                                "its replies were not read for {} s",
                                limits.send_timeout.as_secs_f64()
                            )),
                        ))
                    } else if client.frame_deadline.is_some_and(|d| now >= d) {
                        Some((
                            End::Tell(
                                WireError::new(
                                    ErrorCode::TimedOut,
                                    format!(
                                        "a frame was not received within {} s",
                                        limits.frame_deadline.as_secs_f64()
                                    ),
                                ),
                                0,
                                0,
                            ),
                            Some(format!(
                                "a frame did not arrive within {} s",
                                limits.frame_deadline.as_secs_f64()
                            )),
                        ))
                    } else if client.read.between_frames()
                        && client.pause.is_none()
                        && state.inflight == 0
                        && !state.has_output()
                        && now.duration_since(client.last_read) >= limits.idle_timeout
                    {
                        Some((End::Now, None))
                    } else {
                        None
                    }
                }
            };
            if let Some((end, log)) = end {
                ends.push((*token, end, log));
            }
        }
        for (token, end, log) in ends {
            if let (Some(log), Some(client)) = (log, self.clients.get(&token)) {
                eprintln!(
                    "weftd: dropped {} from {}: {log}",
                    client.conn.id,
                    describe(client)
                );
            }
            self.end(token, end);
        }
        if self.index == 0 && now.duration_since(self.last_sweep) >= Duration::from_secs(10) {
            self.last_sweep = now;
            self.shared.peers.sweep(now);
        }
    }
}

impl Conn {
    /// A request slot taken for a request that never reached a worker.
    fn abandon_slot(&self, shared: &Shared) {
        let frame = OutFrame::new(Vec::new(), Body::Bytes(Vec::new()), 0, true);
        // A closed connection drops the frame and counts the slot as done.
        self.send(shared, frame);
    }
}

fn describe(client: &Client) -> String {
    match (client.addr, client.uid) {
        (Some(addr), _) => addr.to_string(),
        (None, Some(uid)) => format!("local user {uid}"),
        (None, None) => "a local peer".into(),
    }
}
