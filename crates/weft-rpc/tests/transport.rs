//! The transport against a real TCP server on loopback: multiplexing, limits, bad
//! frames, version mismatch, a dead server failing calls within the timeout, and the
//! per-connection lifecycle handlers keep state on.

mod common;

use common::{auth, key, raw, timeouts};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use weft_layout::{InodeId, ServerId};
use weft_proto::frame::{FrameHeader, FrameKind, DATA_BYTES_MAX, FRAME_HEADER_BYTES, PROTOCOL_VERSION};
use weft_proto::msg::{decode_result, Request, Response};
use weft_proto::{ErrorCode, WireError};
use weft_rpc::Peer;
use weft_rpc::{Connection, ConnectionId, Handler, RpcError, ServerLimits};

/// Echoes write payloads back reversed, after a delay given by the inode number (ms).
struct Echo;

impl Handler for Echo {
    fn handle(
        &self,
        _connection: ConnectionId,
        request: Request,
        mut data: Vec<u8>,
    ) -> Result<(Response, Vec<u8>), WireError> {
        match request {
            Request::Sync { inode } => {
                std::thread::sleep(Duration::from_millis(inode.0));
                data.reverse();
                Ok((Response::Bytes(inode.0), data))
            }
            Request::IoStatfs => panic!("handler bug"),
            _ => Err(WireError::new(ErrorCode::Unsupported, "not here")),
        }
    }
}

fn start() -> std::net::SocketAddr {
    start_with(Arc::new(Echo))
}

fn start_with(handler: Arc<dyn Handler>) -> std::net::SocketAddr {
    common::start(handler, 7, ServerLimits::default()).local_addr
}

#[test]
fn many_requests_in_flight_on_one_connection_come_back_to_their_callers() {
    let addr = start().to_string();
    let c = Connection::connect(&addr, "test", &auth(), timeouts(5000)).unwrap();
    assert_eq!(c.server().0, ServerId(7));
    // Send slow requests first so that answers arrive out of order.
    let pending: Vec<_> = (0..20u64)
        .map(|k| {
            let delay = 40 - 2 * k;
            let payload: Vec<u8> = (0..k as u8 + 1).collect();
            (
                delay,
                payload.clone(),
                c.send(
                    &Request::Sync {
                        inode: InodeId(delay),
                    },
                    &payload,
                )
                .unwrap(),
            )
        })
        .collect();
    for (delay, mut payload, p) in pending {
        let (resp, data) = p.wait().unwrap();
        payload.reverse();
        assert_eq!(resp, Response::Bytes(delay));
        assert_eq!(data, payload);
    }
}

#[test]
fn handler_errors_and_panics_become_error_replies_and_the_server_keeps_serving() {
    let addr = start().to_string();
    let c = Connection::connect(&addr, "test", &auth(), timeouts(5000)).unwrap();
    match c.call(&Request::GetCluster, &[]) {
        Err(RpcError::Remote { error, addr: a }) => {
            assert_eq!(error.code, ErrorCode::Unsupported);
            assert_eq!(a, addr);
        }
        other => panic!("expected a remote error, got {other:?}"),
    }
    match c.call(&Request::IoStatfs, &[]) {
        Err(RpcError::Remote { error, .. }) => assert_eq!(error.code, ErrorCode::Internal),
        other => panic!("expected an internal error, got {other:?}"),
    }
    assert!(c.call(&Request::Sync { inode: InodeId(0) }, b"ab").is_ok());
}

fn raw_frame(version: u16, opcode: u16, message: &[u8], data_len: u64) -> Vec<u8> {
    let h = FrameHeader {
        version,
        kind: FrameKind::Request,
        opcode,
        request_id: 42,
        message_len: message.len() as u32,
        data_len,
    };
    let mut v = h.encode().to_vec();
    v.extend_from_slice(message);
    v
}

fn read_reply(s: &mut TcpStream) -> Result<Response, WireError> {
    let mut head = [0u8; FRAME_HEADER_BYTES];
    s.read_exact(&mut head).unwrap();
    let h = FrameHeader::decode(&head).unwrap();
    let mut body = vec![0; h.message_len as usize];
    s.read_exact(&mut body).unwrap();
    let mut data = vec![0; h.data_len as usize];
    s.read_exact(&mut data).unwrap();
    decode_result(&body).unwrap()
}

#[test]
fn bad_frames_get_clear_errors_and_other_clients_are_unaffected() {
    let addr = start();
    let good = Connection::connect(&addr.to_string(), "good", &auth(), timeouts(5000)).unwrap();

    // Unknown opcode: an error, and the same connection keeps working.
    let mut s = raw(addr, &key());
    s.write_all(&raw_frame(PROTOCOL_VERSION, 999, b"", 3)).unwrap();
    s.write_all(b"xyz").unwrap();
    assert_eq!(read_reply(&mut s).unwrap_err().code, ErrorCode::UnknownOpcode);
    s.write_all(&raw_frame(
        PROTOCOL_VERSION,
        weft_proto::Opcode::Sync as u16,
        &Request::Sync { inode: InodeId(0) }.encode_body(),
        0,
    ))
    .unwrap();
    assert!(read_reply(&mut s).is_ok());

    // A malformed body (truncated message): an error, connection still usable.
    s.write_all(&raw_frame(
        PROTOCOL_VERSION,
        weft_proto::Opcode::Sync as u16,
        &[1, 2],
        0,
    ))
    .unwrap();
    assert_eq!(read_reply(&mut s).unwrap_err().code, ErrorCode::Malformed);

    // Wrong protocol version: a clear error naming both versions, then the server closes.
    let mut v = TcpStream::connect(addr).unwrap();
    v.write_all(&raw_frame(
        PROTOCOL_VERSION + 1,
        1,
        &Request::Hello { client: "old".into() }.encode_body(),
        0,
    ))
    .unwrap();
    let e = read_reply(&mut v).unwrap_err();
    assert_eq!(e.code, ErrorCode::ProtocolVersion);
    assert!(
        e.message.contains(&format!("version {}", PROTOCOL_VERSION + 1)),
        "{}",
        e.message
    );

    // Oversized bulk data: refused from the header alone.
    let mut o = TcpStream::connect(addr).unwrap();
    let mut head = raw_frame(PROTOCOL_VERSION, 42, b"", 0);
    head[24..32].copy_from_slice(&(DATA_BYTES_MAX + 1).to_le_bytes());
    o.write_all(&head).unwrap();
    assert_eq!(read_reply(&mut o).unwrap_err().code, ErrorCode::TooLarge);

    // Garbage that is not Weft at all.
    let mut g = TcpStream::connect(addr).unwrap();
    g.write_all(&[0xffu8; FRAME_HEADER_BYTES]).unwrap();
    assert_eq!(read_reply(&mut g).unwrap_err().code, ErrorCode::Malformed);

    assert!(good.call(&Request::Sync { inode: InodeId(1) }, b"ok").is_ok());
}

#[test]
fn a_dead_or_silent_server_fails_calls_within_the_timeout_naming_it() {
    // Nobody listens on a port we just released.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    match Connection::connect(&addr, "t", &auth(), timeouts(2000)) {
        Err(e @ RpcError::Connect { .. }) => assert!(e.to_string().contains(&addr)),
        Err(e) => panic!("expected a connect error, got {e}"),
        Ok(_) => panic!("connected to a closed port"),
    }
    // A server that accepts but never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    let started = Instant::now();
    match Connection::connect(&silent_addr, "t", &auth(), timeouts(300)) {
        Err(e @ RpcError::TimedOut { .. }) => assert!(e.to_string().contains(&silent_addr)),
        Err(e) => panic!("expected a timeout, got {e}"),
        Ok(_) => panic!("handshake with a silent server succeeded"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(silent);
}

/// Keeps a counter per connection: `Sync { inode: n }` sleeps n ms, then adds one to the
/// connection's counter and answers with it. Records the lifecycle events it sees.
#[derive(Default)]
struct Counters {
    live: Mutex<HashMap<ConnectionId, u64>>,
    events: Mutex<Vec<(ConnectionId, &'static str)>>,
}

impl Handler for Counters {
    fn handle(
        &self,
        connection: ConnectionId,
        request: Request,
        _data: Vec<u8>,
    ) -> Result<(Response, Vec<u8>), WireError> {
        let Request::Sync { inode } = request else {
            return Err(WireError::new(ErrorCode::Unsupported, "not here"));
        };
        std::thread::sleep(Duration::from_millis(inode.0));
        let mut live = self.live.lock().unwrap();
        let Some(count) = live.get_mut(&connection) else {
            // A request after close (or before open) lands here.
            self.events.lock().unwrap().push((connection, "late"));
            return Err(WireError::new(ErrorCode::Internal, "unknown connection"));
        };
        *count += 1;
        Ok((Response::Bytes(*count), Vec::new()))
    }

    fn connection_opened(&self, connection: ConnectionId, peer: &Peer) {
        assert!(peer.addr.is_some_and(|p| p.ip().is_loopback()));
        assert_eq!(peer.identity, weft_proto::handshake::Identity::Cluster);
        assert!(self.live.lock().unwrap().insert(connection, 0).is_none());
        self.events.lock().unwrap().push((connection, "opened"));
    }

    fn connection_closed(&self, connection: ConnectionId) {
        let removed = self.live.lock().unwrap().remove(&connection);
        assert!(removed.is_some(), "closed twice or never opened");
        self.events.lock().unwrap().push((connection, "closed"));
    }
}

#[test]
fn connection_state_is_separate_per_connection_and_closed_after_the_last_request() {
    let counters = Arc::new(Counters::default());
    let addr = start_with(counters.clone()).to_string();
    let a = Connection::connect(&addr, "a", &auth(), timeouts(5000)).unwrap();
    let b = Connection::connect(&addr, "b", &auth(), timeouts(5000)).unwrap();
    let sync = |ms| Request::Sync { inode: InodeId(ms) };
    for expected in 1..=3 {
        assert_eq!(a.call(&sync(0), &[]).unwrap().0, Response::Bytes(expected));
    }
    // The other connection has its own state.
    assert_eq!(b.call(&sync(0), &[]).unwrap().0, Response::Bytes(1));
    assert_eq!(counters.live.lock().unwrap().len(), 2);

    // Close a connection while a slow request of it is still running: the handler must
    // hear of the close only after that request ran (else the request finds no state
    // and records a "late" event).
    let raw_a = {
        let mut s = raw(&addr, &key());
        s.write_all(&raw_frame(
            PROTOCOL_VERSION,
            weft_proto::Opcode::Sync as u16,
            &sync(0).encode_body(),
            0,
        ))
        .unwrap();
        assert_eq!(read_reply(&mut s).unwrap(), Response::Bytes(1));
        s.write_all(&raw_frame(
            PROTOCOL_VERSION,
            weft_proto::Opcode::Sync as u16,
            &sync(300).encode_body(),
            0,
        ))
        .unwrap();
        s
    };
    std::thread::sleep(Duration::from_millis(50));
    drop(raw_a);
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(5);
    while counters.live.lock().unwrap().len() > 1 {
        assert!(Instant::now() < deadline, "closed connections were not released");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Only `b` is left, and it still works.
    assert_eq!(b.call(&sync(0), &[]).unwrap().0, Response::Bytes(2));
    let events = counters.events.lock().unwrap().clone();
    let opened = events.iter().filter(|e| e.1 == "opened").count();
    let closed = events.iter().filter(|e| e.1 == "closed").count();
    assert_eq!((opened, closed), (3, 2), "{events:?}");
    assert!(!events.iter().any(|e| e.1 == "late"), "{events:?}");
    // Every id opens before it closes, and ids are never reused.
    let mut ids: Vec<ConnectionId> = events.iter().filter(|e| e.1 == "opened").map(|e| e.0).collect();
    ids.dedup();
    assert_eq!(ids.len(), 3);
    for (id, what) in &events {
        if *what == "closed" {
            let open_at = events.iter().position(|e| e == &(*id, "opened")).unwrap();
            let close_at = events.iter().position(|e| e == &(*id, "closed")).unwrap();
            assert!(open_at < close_at);
        }
    }
}

#[test]
fn the_same_server_answers_on_a_unix_socket_and_refuses_bad_frames_there_too() {
    let handle = common::start(Arc::new(Echo), 9, ServerLimits::default());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    let address = handle.serve_unix(&path).unwrap();
    assert_eq!(address, format!("unix:{}", path.display()));

    let c = Connection::connect(&address, "test", &auth(), timeouts(5000)).unwrap();
    assert_eq!(c.server().0, ServerId(9));
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let (resp, data) = c.call(&Request::Sync { inode: InodeId(0) }, &payload).unwrap();
    assert_eq!(resp, Response::Bytes(0));
    assert_eq!(data, payload.iter().rev().copied().collect::<Vec<u8>>());

    let mut raw = std::os::unix::net::UnixStream::connect(&path).unwrap();
    weft_rpc::auth::client_handshake(&mut raw, "unix", "raw", &auth(), 5000).unwrap();
    raw.write_all(&raw_frame(PROTOCOL_VERSION, 999, b"", 0)).unwrap();
    let mut head = [0u8; FRAME_HEADER_BYTES];
    raw.read_exact(&mut head).unwrap();
    let h = FrameHeader::decode(&head).unwrap();
    let mut body = vec![0; h.message_len as usize];
    raw.read_exact(&mut body).unwrap();
    assert_eq!(
        decode_result(&body).unwrap().unwrap_err().code,
        ErrorCode::UnknownOpcode
    );

    // A stale socket file from a crashed server is replaced on the next start.
    drop(c);
    let again = common::start(Arc::new(Echo), 10, ServerLimits::default());
    again.serve_unix(&path).unwrap();
    let c = Connection::connect(&address, "test", &auth(), timeouts(5000)).unwrap();
    assert_eq!(c.server().0, ServerId(10));
}
