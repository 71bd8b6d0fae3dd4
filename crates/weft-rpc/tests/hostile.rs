//! Peers that do not follow the rules, against a real server on loopback: no key, a
//! wrong key, a replayed handshake, requests before the handshake, a server without
//! the key, too many failures, too many connections, handshakes and frames that never
//! finish, replies never read, bulk data announced and never sent. Each is refused or
//! dropped with a clear reason, the handler never hears of a peer that did not prove
//! the key, and the server goes on serving the others.

mod common;

use common::{auth, key, other_key, raw, timeouts};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_layout::{InodeId, ServerId};
use weft_proto::frame::{FrameHeader, FrameKind, FRAME_HEADER_BYTES, PROTOCOL_VERSION};
use weft_proto::handshake::{Identity, NONCE_BYTES};
use weft_proto::msg::{decode_result, Request, Response};
use weft_proto::{ErrorCode, WireError};
use weft_rpc::auth::Side;
use weft_rpc::{ClientAuth, Connection, ConnectionId, Handler, RpcError, ServerHandle, ServerLimits};

/// `Sync { inode: n }` answers with n bytes (a reply of any size); every call is
/// counted.
#[derive(Default)]
struct Counting {
    calls: AtomicU64,
}

impl Handler for Counting {
    fn handle(
        &self,
        _connection: ConnectionId,
        request: Request,
        _data: Vec<u8>,
    ) -> Result<(Response, Vec<u8>), WireError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match request {
            Request::Sync { inode } => Ok((Response::Bytes(inode.0), vec![7; inode.0 as usize])),
            _ => Err(WireError::new(ErrorCode::Unsupported, "not here")),
        }
    }

    fn reply_bytes_hint(&self, request: &Request) -> u64 {
        match request {
            Request::Sync { inode } => inode.0,
            _ => 0,
        }
    }
}

fn start(limits: ServerLimits) -> (ServerHandle, Arc<Counting>) {
    let handler = Arc::new(Counting::default());
    (common::start(handler.clone(), 5, limits), handler)
}

fn sync(n: u64) -> Request {
    Request::Sync { inode: InodeId(n) }
}

fn frame(opcode: u16, id: u64, message: &[u8], data_len: u64) -> Vec<u8> {
    let h = FrameHeader {
        version: PROTOCOL_VERSION,
        kind: FrameKind::Request,
        opcode,
        request_id: id,
        message_len: message.len() as u32,
        data_len,
    };
    let mut v = h.encode().to_vec();
    v.extend_from_slice(message);
    v
}

fn request_frame(id: u64, request: &Request) -> Vec<u8> {
    frame(request.opcode() as u16, id, &request.encode_body(), 0)
}

/// The next frame's (request id, result), or None at the end of the stream.
fn reply(s: &mut TcpStream) -> Option<(u64, Result<Response, WireError>)> {
    let mut head = [0u8; FRAME_HEADER_BYTES];
    match s.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return None,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
        Err(e) => panic!("reading a reply: {e}"),
    }
    let h = FrameHeader::decode(&head).unwrap();
    let mut body = vec![0; h.message_len as usize];
    s.read_exact(&mut body).unwrap();
    let mut data = vec![0; h.data_len as usize];
    s.read_exact(&mut data).unwrap();
    Some((h.request_id, decode_result(&body).unwrap()))
}

/// Reads the error the server ends the connection with, then the end of the stream.
#[track_caller]
fn refused(s: &mut TcpStream, code: ErrorCode) -> String {
    let message = match reply(s) {
        Some((_, Err(e))) => {
            assert_eq!(e.code, code, "{}", e.message);
            e.message
        }
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert!(reply(s).is_none(), "the connection stays open after: {message}");
    message
}

fn connect_raw(addr: std::net::SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

#[test]
fn peers_without_the_key_are_refused_and_never_reach_the_handler() {
    let (server, handler) = start(ServerLimits::default());
    let addr = server.local_addr;

    // The library with another cluster's key.
    match Connection::connect(
        &addr.to_string(),
        "t",
        &ClientAuth::cluster(other_key()),
        timeouts(5000),
    ) {
        Err(e @ RpcError::Authentication { .. }) => {
            assert!(e.to_string().contains("authentication failed"), "{e}");
            assert_eq!(e.code(), ErrorCode::PermissionDenied);
        }
        other => panic!("a wrong key was accepted: {:?}", other.map(|_| ())),
    }

    // A request before any handshake.
    let mut s = connect_raw(addr);
    s.write_all(&request_frame(1, &sync(10))).unwrap();
    assert!(refused(&mut s, ErrorCode::PermissionDenied).contains("authenticate first"));

    // Hello, then a request instead of the proof.
    let mut s = connect_raw(addr);
    s.write_all(&request_frame(1, &Request::Hello { client: "x".into() }))
        .unwrap();
    assert!(matches!(reply(&mut s), Some((1, Ok(Response::Challenge { .. })))));
    s.write_all(&request_frame(2, &sync(10))).unwrap();
    refused(&mut s, ErrorCode::PermissionDenied);

    // A proof of random bytes; an identity kind the server does not know.
    let mut s = connect_raw(addr);
    s.write_all(&request_frame(1, &Request::Hello { client: "x".into() }))
        .unwrap();
    assert!(reply(&mut s).unwrap().1.is_ok());
    let forged = Request::Authenticate {
        nonce: [1; NONCE_BYTES],
        identity: Identity::Cluster,
        proof: [0xAB; 32],
    };
    s.write_all(&request_frame(2, &forged)).unwrap();
    assert!(refused(&mut s, ErrorCode::PermissionDenied).contains("WEFT_KEY"));
    let mut s = connect_raw(addr);
    s.write_all(&request_frame(1, &Request::Hello { client: "x".into() }))
        .unwrap();
    assert!(reply(&mut s).unwrap().1.is_ok());
    let mut unknown = forged.encode_body();
    unknown[4 + NONCE_BYTES] = 9; // the identity kind
    s.write_all(&frame(3, 2, &unknown, 0)).unwrap();
    assert!(refused(&mut s, ErrorCode::Malformed).contains("identity kind"));

    // Bulk data in a handshake frame: refused from the header, nothing read.
    let mut s = connect_raw(addr);
    s.write_all(&frame(
        1,
        1,
        &Request::Hello { client: "x".into() }.encode_body(),
        1 << 20,
    ))
    .unwrap();
    refused(&mut s, ErrorCode::PermissionDenied);

    assert_eq!(
        handler.calls.load(Ordering::SeqCst),
        0,
        "the handler heard a peer without the key"
    );
    let good = Connection::connect(&addr.to_string(), "good", &auth(), timeouts(5000)).unwrap();
    assert_eq!(good.call(&sync(3), &[]).unwrap().1, vec![7; 3]);
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);
}

#[test]
fn a_recorded_handshake_replayed_on_another_connection_is_refused() {
    let (server, handler) = start(ServerLimits::default());
    let addr = server.local_addr;
    // A genuine handshake, recorded frame by frame.
    let mut s = connect_raw(addr);
    let hello = request_frame(
        1,
        &Request::Hello {
            client: "victim".into(),
        },
    );
    s.write_all(&hello).unwrap();
    let server_nonce = match reply(&mut s) {
        Some((1, Ok(Response::Challenge { nonce }))) => nonce,
        other => panic!("{other:?}"),
    };
    let client_nonce = [42; NONCE_BYTES];
    let authenticate = request_frame(
        2,
        &Request::Authenticate {
            nonce: client_nonce,
            identity: Identity::Cluster,
            proof: key().proof(Side::Client, &server_nonce, &client_nonce, &Identity::Cluster),
        },
    );
    s.write_all(&authenticate).unwrap();
    assert!(matches!(reply(&mut s), Some((2, Ok(Response::Hello { .. })))));
    s.write_all(&request_frame(3, &sync(1))).unwrap();
    assert!(matches!(reply(&mut s), Some((3, Ok(Response::Bytes(1))))));
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);

    // The same bytes on a new connection: the server's nonce differs, the proof fails.
    let mut replay = connect_raw(addr);
    replay.write_all(&hello).unwrap();
    match reply(&mut replay) {
        Some((1, Ok(Response::Challenge { nonce }))) => assert_ne!(nonce, server_nonce),
        other => panic!("{other:?}"),
    }
    replay.write_all(&authenticate).unwrap();
    replay.write_all(&request_frame(3, &sync(1))).unwrap();
    refused(&mut replay, ErrorCode::PermissionDenied);
    assert_eq!(
        handler.calls.load(Ordering::SeqCst),
        1,
        "the replayed request ran"
    );
}

#[test]
fn a_server_that_cannot_prove_the_key_is_refused_by_the_client() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    // It accepts any proof, and proves itself with another key.
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let server_nonce = [3; NONCE_BYTES];
        let answer = |s: &mut TcpStream, opcode: u16, response: Response| {
            let body = weft_proto::msg::encode_result(&Ok(response));
            weft_rpc::frame_io::write_frame(s, FrameKind::Response, opcode, opcode as u64, &body, &[])
                .unwrap();
        };
        let mut head = [0u8; FRAME_HEADER_BYTES];
        s.read_exact(&mut head).unwrap();
        let h = FrameHeader::decode(&head).unwrap();
        s.read_exact(&mut vec![0; h.message_len as usize]).unwrap();
        answer(&mut s, 1, Response::Challenge { nonce: server_nonce });
        s.read_exact(&mut head).unwrap();
        let h = FrameHeader::decode(&head).unwrap();
        let mut body = vec![0; h.message_len as usize];
        s.read_exact(&mut body).unwrap();
        let Ok(Request::Authenticate { nonce, identity, .. }) = Request::decode(h.opcode, &body) else {
            panic!("expected Authenticate");
        };
        let proof = other_key().proof(Side::Server, &server_nonce, &nonce, &identity);
        let hello = Response::Hello {
            server_id: ServerId(1),
            roles: 2,
            incarnation: 1,
            proof,
        };
        answer(&mut s, 2, hello);
        let _ = s.read(&mut [0u8; 1]);
    });
    match Connection::connect(&addr, "t", &auth(), timeouts(5000)) {
        Err(e @ RpcError::Authentication { .. }) => {
            assert!(e.to_string().contains("could not prove"), "{e}")
        }
        other => panic!("an impostor server was accepted: {:?}", other.map(|_| ())),
    }
}

/// A Unix-socket user that keeps failing is refused for a while, and told why; an
/// address never is: it may be shared by every user of a login node (or be 127.0.0.1),
/// and a stranger's failures would lock them all out. Before, the address was refused
/// too, right key or not (issue 29, finding 3).
#[test]
fn a_user_that_keeps_failing_is_refused_for_a_while_but_an_address_never() {
    let window = Duration::from_millis(1500);
    let (server, _) = start(ServerLimits {
        auth_failures_max: 3,
        auth_failure_window: window,
        ..ServerLimits::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let unix = server.serve_unix(&dir.path().join("s.sock")).unwrap();
    let addr = server.local_addr.to_string();
    // Past the limit on TCP; up to it on the socket.
    for (target, failures) in [(&addr, 5), (&unix, 3)] {
        for _ in 0..failures {
            let e = Connection::connect(target, "t", &ClientAuth::cluster(other_key()), timeouts(5000))
                .err()
                .unwrap();
            assert!(matches!(e, RpcError::Authentication { .. }), "{e}");
        }
    }
    let started = Instant::now();
    Connection::connect(&addr, "t", &auth(), timeouts(5000)).expect("an address is never refused");
    // The user on the socket is turned away even with the right key, and told why.
    match Connection::connect(&unix, "t", &auth(), timeouts(5000)) {
        Err(RpcError::Remote { error, .. }) => {
            assert_eq!(error.code, ErrorCode::Busy);
            assert!(
                error
                    .message
                    .contains("too many failed authentications from local user"),
                "{}",
                error.message
            );
        }
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    assert!(
        started.elapsed() < window,
        "the test was too slow to observe the refusal"
    );
    std::thread::sleep(window.saturating_sub(started.elapsed()) + Duration::from_millis(200));
    Connection::connect(&unix, "t", &auth(), timeouts(5000)).expect("served again once the window ended");
}

/// Handshakes held open by a stranger neither fill a peer's cap of connections (it
/// counts only connections that proved the key) nor keep a client out: past
/// `peer_handshakes_max` the oldest makes way, and a client's own handshake takes a
/// round trip. Before, each silent connection took one of the address's slots until
/// its deadline.
#[test]
fn handshakes_held_open_by_a_stranger_make_way_for_clients() {
    let (server, _) = start(ServerLimits {
        peer_connections_max: 2,
        peer_handshakes_max: 4,
        handshake_timeout: Duration::from_secs(30),
        ..ServerLimits::default()
    });
    let addr = server.local_addr;
    let mut silent: Vec<TcpStream> = (0..4).map(|_| connect_raw(addr)).collect();
    // Let the server take them all before the clients come.
    std::thread::sleep(Duration::from_millis(200));
    let clients: Vec<_> = (0..2)
        .map(|_| {
            Connection::connect(&addr.to_string(), "t", &auth(), timeouts(5000)).expect("a client is served")
        })
        .collect();
    // The oldest held handshake made way for the first client, told why (the first
    // client's handshake left a place for the second).
    assert!(refused(&mut silent[0], ErrorCode::Busy).contains("made way"));
    // The cap counts the clients only.
    match Connection::connect(&addr.to_string(), "t", &auth(), timeouts(5000)) {
        Err(RpcError::Remote { error, .. }) => {
            assert!(
                error.message.contains("too many connections from 127.0.0.1"),
                "{}",
                error.message
            )
        }
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    drop(clients);
}

#[test]
fn connections_over_the_limits_are_told_why_not_reset() {
    let (server, _) = start(ServerLimits {
        connections_max: 3,
        ..ServerLimits::default()
    });
    let addr = server.local_addr.to_string();
    let held: Vec<_> = (0..3)
        .map(|_| Connection::connect(&addr, "t", &auth(), timeouts(5000)).unwrap())
        .collect();
    for _ in 0..5 {
        match Connection::connect(&addr, "t", &auth(), timeouts(5000)) {
            Err(RpcError::Remote { error, .. }) => {
                assert_eq!(error.code, ErrorCode::Busy);
                assert!(
                    error.message.contains("too many connections"),
                    "{}",
                    error.message
                );
            }
            other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
        }
    }
    drop(held);
    // Slots come back as connections close.
    let deadline = Instant::now() + Duration::from_secs(5);
    while Connection::connect(&addr, "t", &auth(), timeouts(5000)).is_err() {
        assert!(Instant::now() < deadline, "closed connections were not released");
        std::thread::sleep(Duration::from_millis(20));
    }

    // Per peer: a Unix-socket client is another peer than 127.0.0.1.
    let (server, _) = start(ServerLimits {
        peer_connections_max: 2,
        ..ServerLimits::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let unix = server.serve_unix(&dir.path().join("s.sock")).unwrap();
    let addr = server.local_addr.to_string();
    let _two: Vec<_> = (0..2)
        .map(|_| Connection::connect(&addr, "t", &auth(), timeouts(5000)).unwrap())
        .collect();
    match Connection::connect(&addr, "t", &auth(), timeouts(5000)) {
        Err(RpcError::Remote { error, .. }) => {
            assert!(
                error.message.contains("too many connections from 127.0.0.1"),
                "{}",
                error.message
            )
        }
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    Connection::connect(&unix, "t", &auth(), timeouts(5000)).expect("another peer is served");
}

#[test]
fn unfinished_handshakes_and_trickled_frames_are_dropped_at_their_deadlines() {
    let (server, handler) = start(ServerLimits {
        handshake_timeout: Duration::from_millis(500),
        frame_deadline: Duration::from_millis(700),
        ..ServerLimits::default()
    });
    let addr = server.local_addr;
    // Connected, silent.
    let started = Instant::now();
    let mut silent = connect_raw(addr);
    assert!(refused(&mut silent, ErrorCode::TimedOut).contains("handshake"));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // Authenticated, then a request trickled a byte every 100 ms.
    let mut slow = raw(addr, &key());
    let bytes = request_frame(9, &sync(1));
    let started = Instant::now();
    let mut dropped = false;
    for b in &bytes {
        if slow.write_all(&[*b]).is_err() {
            dropped = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        if started.elapsed() > Duration::from_secs(2) {
            break;
        }
    }
    let _ = dropped;
    assert!(refused(&mut slow, ErrorCode::TimedOut).contains("frame"));
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(handler.calls.load(Ordering::SeqCst), 0);
}

#[test]
fn a_peer_that_does_not_read_its_replies_holds_its_share_and_then_nothing() {
    let mib = 1u64 << 20;
    let (server, _) = start(ServerLimits {
        send_timeout: Duration::from_secs(1),
        data_bytes_inflight_max: 256 * mib,
        peer_data_bytes_max: 64 * mib,
        ..ServerLimits::default()
    });
    let addr = server.local_addr;
    // Asks for 16 replies of 8 MiB and reads none of them.
    let mut greedy = raw(addr, &key());
    for id in 0..16 {
        greedy.write_all(&request_frame(10 + id, &sync(8 * mib))).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    let held = server.load().1;
    assert!(held > 8 * mib, "the replies are not held: {held}");
    assert!(held <= 64 * mib + mib, "a peer holds more than its share: {held}");
    // Meanwhile others are served at once, on the same peer address too.
    let other = Connection::connect(&addr.to_string(), "other", &auth(), timeouts(5000)).unwrap();
    let started = Instant::now();
    assert_eq!(other.call(&sync(1000), &[]).unwrap().1.len(), 1000);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    // Past the send timeout the greedy connection is dropped and what it held released.
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.load().1 > 0 {
        assert!(Instant::now() < deadline, "still held: {}", server.load().1);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(server.load().0, 1, "only the other connection is left");
}

#[test]
fn bulk_data_announced_and_never_sent_holds_its_peers_share_and_no_more() {
    let mib = 1u64 << 20;
    let (server, handler) = start(ServerLimits {
        data_bytes_inflight_max: 64 * mib,
        peer_data_bytes_max: 16 * mib,
        frame_deadline: Duration::from_secs(30),
        ..ServerLimits::default()
    });
    let addr = server.local_addr;
    // Four connections each announce 10 MiB and send none of it.
    let stalled: Vec<TcpStream> = (0..4)
        .map(|k| {
            let mut s = raw(addr, &key());
            let body = sync(0).encode_body();
            s.write_all(&frame(weft_proto::Opcode::Sync as u16, k, &body, 10 * mib))
                .unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let held = server.load().1;
    assert!(held <= 16 * mib + mib, "announcements hold {held} bytes");
    // Another peer (the Unix socket's user) moves 10 MiB both ways at once.
    let dir = tempfile::tempdir().unwrap();
    let unix = server.serve_unix(&dir.path().join("s.sock")).unwrap();
    let c = Connection::connect(&unix, "writer", &auth(), timeouts(5000)).unwrap();
    let started = Instant::now();
    let payload = vec![1u8; 10 * mib as usize];
    assert_eq!(
        c.call(&sync(10 * mib), &payload).unwrap().1.len(),
        10 * mib as usize
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // And small requests of the stalled peer itself still go through.
    let same = Connection::connect(&addr.to_string(), "same", &auth(), timeouts(5000)).unwrap();
    assert_eq!(same.call(&sync(10), &[]).unwrap().1.len(), 10);
    assert_eq!(handler.calls.load(Ordering::SeqCst), 2, "a stalled request ran");
    drop(stalled);
}
