//! What a client learns of a server's versions, so that mixed installations are
//! diagnosable: a real server tells its protocol and build (`ServerInfo`); a peer of
//! another protocol version is named with its version; a server older than the
//! `ServerInfo` request (it answers an unknown opcode) is told apart from a failure.

mod common;

use common::{auth, key};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;
use weft_layout::ServerId;
use weft_proto::frame::{FrameHeader, FrameKind, FRAME_HEADER_BYTES, PROTOCOL_VERSION};
use weft_proto::msg::{encode_result, Request, Response};
use weft_proto::{DecodeError, ErrorCode, WireError};
use weft_rpc::auth::{serve_handshake, ServerHello};
use weft_rpc::{serve, Connection, ConnectionId, Handler, RpcError, ServerIdentity, ServerLimits, Timeouts};

struct Nothing;

impl Handler for Nothing {
    fn handle(
        &self,
        _connection: ConnectionId,
        _request: Request,
        _data: Vec<u8>,
    ) -> Result<(Response, Vec<u8>), WireError> {
        Err(WireError::new(ErrorCode::Unsupported, "not here"))
    }
}

fn timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(5),
        request: Duration::from_secs(5),
    }
}

#[test]
fn a_server_tells_its_protocol_version_and_build() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let handle = serve(
        listener,
        Arc::new(Nothing),
        ServerIdentity {
            server_id: ServerId(3),
            roles: 2,
            build: "9.8.7 (git f00ba47)",
            incarnation: 1,
            munge: false,
        },
        ServerLimits::default(),
        key(),
    )
    .unwrap();
    let c = Connection::connect(&handle.local_addr.to_string(), "versions", &auth(), timeouts()).unwrap();
    assert_eq!(
        c.server_info().unwrap(),
        Some((PROTOCOL_VERSION, "9.8.7 (git f00ba47)".to_string()))
    );
    // The request goes on the same connection as any other; it stays usable.
    assert_eq!(c.server(), (ServerId(3), 2));
}

/// A peer on loopback that (after the handshake, if `handshake`) reads one request
/// frame per entry of `replies` and answers each with (frame version, message body).
fn scripted_peer(handshake: bool, replies: Vec<(u16, Vec<u8>)>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        if handshake {
            let hello = ServerHello {
                server_id: ServerId(1),
                roles: 1,
                incarnation: 1,
            };
            serve_handshake(&mut s, &key(), hello).unwrap();
        }
        for (version, body) in replies {
            let mut head = [0u8; FRAME_HEADER_BYTES];
            if s.read_exact(&mut head).is_err() {
                return;
            }
            let request = FrameHeader::decode(&head).unwrap();
            let mut message = vec![0; request.message_len as usize + request.data_len as usize];
            s.read_exact(&mut message).unwrap();
            let reply = FrameHeader {
                version,
                kind: FrameKind::Response,
                opcode: request.opcode,
                request_id: request.request_id,
                message_len: body.len() as u32,
                data_len: 0,
            };
            s.write_all(&reply.encode()).unwrap();
            s.write_all(&body).unwrap();
        }
        // Hold the connection until the client is done with it.
        let _ = s.read(&mut [0u8; 1]);
    });
    addr
}

#[test]
fn a_server_of_another_protocol_version_is_named_with_its_version() {
    let other = PROTOCOL_VERSION + 1;
    // Whatever a later version encodes in its refusal is not read: here, bytes that are
    // no message of this version at all.
    let addr = scripted_peer(false, vec![(other, vec![0xEE; 12])]);
    match Connection::connect(&addr, "versions", &auth(), timeouts()) {
        Err(e @ RpcError::ProtocolVersion { server_version, .. }) => {
            assert_eq!(server_version, other);
            assert_eq!(e.code(), ErrorCode::ProtocolVersion);
            let text = e.to_string();
            assert!(
                text.contains(&format!("version {other}"))
                    && text.contains(&format!("version {PROTOCOL_VERSION}")),
                "{text}"
            );
        }
        Err(e) => panic!("expected a protocol version error, got {e}"),
        Ok(_) => panic!("a server of protocol version {other} was accepted"),
    }
}

#[test]
fn a_server_older_than_server_info_is_told_apart_from_a_failure() {
    // What a server without the request answers: the decoder's unknown-opcode error.
    let unknown = encode_result(&Err(WireError::from(DecodeError::UnknownOpcode(
        weft_proto::Opcode::ServerInfo as u16,
    ))));
    let internal = encode_result(&Err(WireError::new(ErrorCode::Internal, "broken")));
    let addr = scripted_peer(
        true,
        vec![(PROTOCOL_VERSION, unknown), (PROTOCOL_VERSION, internal)],
    );
    let c = Connection::connect(&addr, "versions", &auth(), timeouts()).unwrap();
    assert_eq!(c.server_info().unwrap(), None);
    let failed = c.server_info().unwrap_err();
    assert_eq!(failed.code(), ErrorCode::Internal, "{failed}");
}
