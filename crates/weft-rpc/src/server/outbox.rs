//! One connection's side shared by its event loop and the workers: the non-blocking
//! socket, the queue of replies not yet written, the count of requests in flight,
//! and the rules that end a connection's life exactly once.
//!
//! Whoever finishes a reply (a worker) or learns the socket can take more (the loop)
//! writes from the head of the queue until the socket would block; nobody ever waits
//! on a socket. A file-backed reply goes out by sendfile and resumes where it stopped.

use super::{FileReply, Shared};
use crate::server::peers::PeerKey;
use crate::server::ConnectionId;
use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Mutex;
use std::time::Instant;

/// A connection's socket, non-blocking.
pub enum ServerStream {
    Tcp(mio::net::TcpStream),
    Unix(mio::net::UnixStream),
}

impl ServerStream {
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            ServerStream::Tcp(s) => (&*s).read(buf),
            ServerStream::Unix(s) => (&*s).read(buf),
        }
    }

    fn write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            ServerStream::Tcp(s) => (&*s).write_vectored(bufs),
            ServerStream::Unix(s) => (&*s).write_vectored(bufs),
        }
    }

    /// Writes `bytes` if the socket takes all of them now; never waits.
    pub fn write_all_now(&self, mut bytes: &[u8]) -> bool {
        while !bytes.is_empty() {
            match self.write_vectored(&[IoSlice::new(bytes)]) {
                Ok(0) => return false,
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        true
    }

    pub fn shutdown(&self, how: Shutdown) {
        let _ = match self {
            ServerStream::Tcp(s) => s.shutdown(how),
            ServerStream::Unix(s) => s.shutdown(how),
        };
    }
}

impl AsRawFd for ServerStream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            ServerStream::Tcp(s) => s.as_raw_fd(),
            ServerStream::Unix(s) => s.as_raw_fd(),
        }
    }
}

/// The bulk data of a reply.
pub enum Body {
    Bytes(Vec<u8>),
    File {
        reply: FileReply,
        /// The run being sent, and bytes of it already sent.
        run: usize,
        run_sent: u64,
    },
}

/// A reply frame on its way out.
pub struct OutFrame {
    /// Header and message.
    head: Vec<u8>,
    head_sent: usize,
    body: Body,
    body_sent: usize,
    /// Bytes charged to the peer's and the server's budgets until it is written.
    pub charged: u64,
    /// It answers a request (counted in flight), not the handshake or an error about
    /// the connection.
    counted: bool,
}

impl OutFrame {
    pub fn new(head: Vec<u8>, body: Body, charged: u64, counted: bool) -> OutFrame {
        OutFrame {
            head,
            head_sent: 0,
            body,
            body_sent: 0,
            charged,
            counted,
        }
    }

    /// Bytes of memory it holds (a file-backed body holds none).
    pub fn memory_bytes(&self) -> u64 {
        let body = match &self.body {
            Body::Bytes(b) => b.len(),
            Body::File { .. } => 0,
        };
        (self.head.len() + body) as u64
    }

    /// Writes as much as the socket takes: Ok once all of it is out, WouldBlock when
    /// the socket is full.
    fn write_some(&mut self, stream: &ServerStream) -> io::Result<()> {
        loop {
            let head_left = &self.head[self.head_sent..];
            let n = match &mut self.body {
                Body::Bytes(data) => {
                    let data_left = &data[self.body_sent..];
                    if head_left.is_empty() && data_left.is_empty() {
                        return Ok(());
                    }
                    stream.write_vectored(&[IoSlice::new(head_left), IoSlice::new(data_left)])?
                }
                Body::File { reply, run, run_sent } => {
                    if !head_left.is_empty() {
                        stream.write_vectored(&[IoSlice::new(head_left)])?
                    } else {
                        let Some(&(offset, len)) = reply.runs.get(*run) else {
                            return Ok(());
                        };
                        if *run_sent == len {
                            *run += 1;
                            *run_sent = 0;
                            continue;
                        }
                        let n = send_file(stream, &reply.file, offset + *run_sent, len - *run_sent)?;
                        *run_sent += n as u64;
                        continue;
                    }
                }
            };
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            let from_head = n.min(head_left.len());
            self.head_sent += from_head;
            self.body_sent += n - from_head;
        }
    }
}

/// Sends up to `len` bytes of `file` from `offset` (sendfile), or zeros past the
/// file's end (holes at the end of an object). Returns the bytes sent; WouldBlock
/// when the socket is full.
fn send_file(stream: &ServerStream, file: &std::fs::File, offset: u64, len: u64) -> io::Result<usize> {
    static ZEROS: [u8; 64 * 1024] = [0u8; 64 * 1024];
    let mut at = offset as libc::off_t;
    let chunk = len.min(1 << 30) as usize;
    loop {
        // SAFETY: both descriptors are open for the call (the file is held by the
        // reply, the socket by the connection); `at` is a valid offset variable.
        let n = unsafe { libc::sendfile(stream.as_raw_fd(), file.as_raw_fd(), &mut at, chunk) };
        if n > 0 {
            return Ok(n as usize);
        }
        if n == 0 {
            let z = (len as usize).min(ZEROS.len());
            return stream.write_vectored(&[IoSlice::new(&ZEROS[..z])]);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// What the loop and the workers share of one connection.
pub struct Conn {
    pub id: ConnectionId,
    pub peer: PeerKey,
    pub stream: ServerStream,
    /// The event loop serving it and its token there.
    pub loop_index: usize,
    pub token: mio::Token,
    pub state: Mutex<OutState>,
    /// Its shared-memory segment (Unix socket only), unmapped when it is dropped.
    pub shm: crate::shm::ConnShm,
    /// The server's incarnation when it was accepted: a reply sent once a `Restarter`
    /// changed it is dropped and the socket shut (see `send`).
    pub incarnation: u64,
}

impl Conn {
    /// Reads what the peer sent; on the Unix socket, descriptors passed with the bytes
    /// are kept (the last one) for a `ShmAttach`.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match &self.stream {
            ServerStream::Tcp(_) => self.stream.read(buf),
            ServerStream::Unix(s) => crate::shm::recv_with_fds(s.as_raw_fd(), buf, |fd| self.shm.passed(fd)),
        }
    }
}

#[derive(Default)]
pub struct OutState {
    queue: VecDeque<OutFrame>,
    /// Requests handed to the workers whose replies are not written (or dropped) yet.
    pub inflight: usize,
    /// The loop stopped reading until a request in flight is done.
    pub wants_resume: bool,
    /// Since when the head of the queue could not be written at all.
    pub stalled_since: Option<Instant>,
    /// The loop closed the connection: replies are dropped.
    pub closed: bool,
    /// The handler heard of the connection (`connection_opened`); it hears of its
    /// close once, after the last request in flight.
    pub opened: bool,
    close_told: bool,
}

impl OutState {
    /// The state of a connection that only drains: nothing will be written to it.
    pub fn refused() -> OutState {
        OutState {
            closed: true,
            ..OutState::default()
        }
    }

    pub fn has_output(&self) -> bool {
        !self.queue.is_empty()
    }
}

impl Conn {
    /// Queues a reply and writes what the socket takes now. `counted` replies end a
    /// request in flight.
    ///
    /// A connection of an earlier incarnation (a `Restarter` acted since it was
    /// accepted) gets no reply: the request may have been answered from the state the
    /// restart stands for (a metadata store reopened without operations its clients
    /// must replay first), and the loop that would close the connection may be the
    /// thread that computed it, so its `CloseAll` comes only after. Its socket is shut
    /// instead: the client sees the connection fail and asks again on a new one.
    pub fn send(&self, shared: &Shared, mut frame: OutFrame) {
        let mut state = self.state.lock().unwrap();
        if !state.closed && shared.incarnation.load(std::sync::atomic::Ordering::SeqCst) != self.incarnation {
            state.closed = true;
            self.stream.shutdown(Shutdown::Both);
        }
        if state.closed {
            let mut effects = Effects::default();
            self.finished(&mut state, frame, shared, &mut effects);
            drop(state);
            effects.apply(self, shared);
            return;
        }
        // Charge what the reply holds, not what its request was charged: a file-backed
        // reply holds nothing while a slow reader takes it.
        let held = frame.memory_bytes();
        if held > frame.charged {
            shared.peers.charge_held(self.peer, held - frame.charged);
        } else if shared.peers.release(self.peer, frame.charged - held) {
            shared.wake_all();
        }
        frame.charged = held;
        let idle = state.queue.is_empty();
        state.queue.push_back(frame);
        let mut effects = Effects::default();
        if idle {
            self.flush_locked(&mut state, shared, &mut effects);
        }
        drop(state);
        effects.apply(self, shared);
    }

    /// Writes queued replies until the socket would block (the loop, on a writable
    /// event).
    pub fn flush(&self, shared: &Shared) {
        let mut state = self.state.lock().unwrap();
        let mut effects = Effects::default();
        self.flush_locked(&mut state, shared, &mut effects);
        drop(state);
        effects.apply(self, shared);
    }

    fn flush_locked(&self, state: &mut OutState, shared: &Shared, effects: &mut Effects) {
        while let Some(front) = state.queue.front_mut() {
            let before = (front.head_sent, front.body_sent, body_progress(&front.body));
            match front.write_some(&self.stream) {
                Ok(()) => {
                    state.stalled_since = None;
                    let frame = state.queue.pop_front().unwrap();
                    self.finished(state, frame, shared, effects);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let after = (front.head_sent, front.body_sent, body_progress(&front.body));
                    if after != before || state.stalled_since.is_none() {
                        state.stalled_since = Some(Instant::now());
                    }
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    // The peer is gone: the loop sees the socket fail and closes it.
                    self.stream.shutdown(Shutdown::Both);
                    return;
                }
            }
        }
    }

    /// A reply is out (or dropped): release its bytes and its slot.
    fn finished(&self, state: &mut OutState, frame: OutFrame, shared: &Shared, effects: &mut Effects) {
        if shared.peers.release(self.peer, frame.charged) {
            effects.wake_all = true;
        }
        if frame.counted {
            state.inflight -= 1;
            if state.wants_resume {
                state.wants_resume = false;
                effects.resume = true;
            }
        }
        if state.closed && state.inflight == 0 && state.opened && !state.close_told {
            state.close_told = true;
            effects.tell_closed = true;
        }
    }

    /// The loop closes the connection: queued replies are dropped, and so are replies
    /// finished later; the handler hears of the close now if no request is in flight,
    /// else after the last one.
    pub fn close(&self, shared: &Shared) {
        let mut state = self.state.lock().unwrap();
        state.closed = true;
        let mut effects = Effects::default();
        while let Some(frame) = state.queue.pop_front() {
            self.finished(&mut state, frame, shared, &mut effects);
        }
        if state.inflight == 0 && state.opened && !state.close_told {
            state.close_told = true;
            effects.tell_closed = true;
        }
        drop(state);
        effects.resume = false;
        effects.apply(self, shared);
    }
}

/// A rough position within a body, to tell progress from none.
fn body_progress(body: &Body) -> (usize, u64) {
    match body {
        Body::Bytes(_) => (0, 0),
        Body::File { run, run_sent, .. } => (*run, *run_sent),
    }
}

/// What to do once the connection's lock is released.
#[derive(Default)]
struct Effects {
    wake_all: bool,
    resume: bool,
    tell_closed: bool,
}

impl Effects {
    fn apply(self, conn: &Conn, shared: &Shared) {
        if self.wake_all {
            shared.wake_all();
        }
        if self.resume {
            shared.resume(conn);
        }
        if self.tell_closed {
            let id = conn.id;
            let told = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                shared.handler.connection_closed(id)
            }));
            if told.is_err() {
                eprintln!("weftd: the handler panicked while closing {id}");
            }
        }
    }
}
