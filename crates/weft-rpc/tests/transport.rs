//! The transport against a real TCP server on loopback: multiplexing, limits, bad
//! frames, version mismatch, and a dead server failing calls within the timeout.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_layout::{InodeId, ServerId};
use weft_proto::frame::{
    FrameHeader, FrameKind, DATA_BYTES_MAX, FRAME_HEADER_BYTES, PROTOCOL_VERSION,
};
use weft_proto::msg::{decode_result, Request, Response};
use weft_proto::{ErrorCode, WireError};
use weft_rpc::{serve, Connection, Handler, RpcError, ServerIdentity, ServerLimits, Timeouts};

/// Echoes write payloads back reversed, after a delay given by the inode number (ms).
struct Echo;

impl Handler for Echo {
    fn handle(
        &self,
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
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let handle = serve(
        listener,
        Arc::new(Echo),
        ServerIdentity {
            server_id: ServerId(7),
            roles: 2,
        },
        ServerLimits::default(),
    )
    .unwrap();
    handle.local_addr
}

fn timeouts(ms: u64) -> Timeouts {
    Timeouts {
        connect: Duration::from_millis(ms),
        request: Duration::from_millis(ms),
    }
}

#[test]
fn many_requests_in_flight_on_one_connection_come_back_to_their_callers() {
    let addr = start().to_string();
    let c = Connection::connect(&addr, "test", timeouts(5000)).unwrap();
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
    let c = Connection::connect(&addr, "test", timeouts(5000)).unwrap();
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
    let good = Connection::connect(&addr.to_string(), "good", timeouts(5000)).unwrap();

    // Unknown opcode: an error, and the same connection keeps working.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&raw_frame(PROTOCOL_VERSION, 999, b"", 3))
        .unwrap();
    s.write_all(b"xyz").unwrap();
    assert_eq!(
        read_reply(&mut s).unwrap_err().code,
        ErrorCode::UnknownOpcode
    );
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
        &Request::Hello {
            client: "old".into(),
        }
        .encode_body(),
        0,
    ))
    .unwrap();
    let e = read_reply(&mut v).unwrap_err();
    assert_eq!(e.code, ErrorCode::ProtocolVersion);
    assert!(
        e.message
            .contains(&format!("version {}", PROTOCOL_VERSION + 1)),
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

    assert!(good
        .call(&Request::Sync { inode: InodeId(1) }, b"ok")
        .is_ok());
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
    match Connection::connect(&addr, "t", timeouts(2000)) {
        Err(e @ RpcError::Connect { .. }) => assert!(e.to_string().contains(&addr)),
        Err(e) => panic!("expected a connect error, got {e}"),
        Ok(_) => panic!("connected to a closed port"),
    }
    // A server that accepts but never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    let started = Instant::now();
    match Connection::connect(&silent_addr, "t", timeouts(300)) {
        Err(e @ RpcError::TimedOut { .. }) => assert!(e.to_string().contains(&silent_addr)),
        Err(e) => panic!("expected a timeout, got {e}"),
        Ok(_) => panic!("handshake with a silent server succeeded"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(silent);
}
