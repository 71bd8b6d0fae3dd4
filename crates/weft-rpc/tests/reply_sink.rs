//! Replies received straight into the caller's memory (`Connection::send_into`),
//! against a scripted server on loopback that can answer short, with an error, or
//! stall in the middle of the data.

mod common;

use common::{auth, key};
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};
use weft_layout::{InodeId, ServerId};
use weft_proto::frame::{FrameKind, PROTOCOL_VERSION};
use weft_proto::msg::{encode_result, Request, Response};
use weft_proto::{ErrorCode, WireError};
use weft_rpc::auth::{serve_handshake, ServerHello};
use weft_rpc::frame_io::{read_exact_vec, read_header, write_frame};
use weft_rpc::{Connection, ReplySink, RpcError, SinkReply, Timeouts};

/// How the scripted server answers a request other than the handshake.
#[derive(Clone, Copy)]
enum Answer {
    /// `Bytes(n)` with n bytes 0, 1, 2, ... (mod 251).
    Data(usize),
    Error,
    /// The header and half of n bytes, then silence (the connection stays open).
    Stall(usize),
}

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|k| (k % 251) as u8).collect()
}

/// A server answering the k-th request after the handshake with `answers[k]`.
fn scripted(answers: Vec<Answer>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let hello = ServerHello {
            server_id: ServerId(1),
            roles: 2,
            incarnation: 1,
        };
        if serve_handshake(&mut stream, &key(), hello).is_err() {
            return;
        }
        let mut answers = answers.into_iter();
        loop {
            let Ok(header) = read_header(&mut stream) else {
                return;
            };
            let message = read_exact_vec(&mut stream, header.message_len as u64).unwrap();
            read_exact_vec(&mut stream, header.data_len).unwrap();
            Request::decode(header.opcode, &message).unwrap();
            let reply = |s: &mut TcpStream, result: Result<Response, WireError>, data: &[u8]| {
                write_frame(
                    s,
                    FrameKind::Response,
                    header.opcode,
                    header.request_id,
                    &encode_result(&result),
                    data,
                )
                .unwrap()
            };
            match answers.next().expect("more requests than scripted") {
                Answer::Data(n) => reply(&mut stream, Ok(Response::Bytes(n as u64)), &payload(n)),
                Answer::Error => reply(
                    &mut stream,
                    Err(WireError::new(ErrorCode::Io, "disk on fire")),
                    &[],
                ),
                Answer::Stall(n) => {
                    // A header announcing n bytes, then only half of them.
                    let header = weft_proto::frame::FrameHeader {
                        version: PROTOCOL_VERSION,
                        kind: FrameKind::Response,
                        opcode: header.opcode,
                        request_id: header.request_id,
                        message_len: 0,
                        data_len: n as u64,
                    };
                    let message = encode_result(&Ok(Response::Bytes(n as u64)));
                    let header = weft_proto::frame::FrameHeader {
                        message_len: message.len() as u32,
                        ..header
                    };
                    stream.write_all(&header.encode()).unwrap();
                    stream.write_all(&message).unwrap();
                    stream.write_all(&payload(n)[..n / 2]).unwrap();
                    std::thread::sleep(Duration::from_secs(30));
                    return;
                }
            }
        }
    });
    addr
}

fn connect(addr: &str, timeout_ms: u64) -> std::sync::Arc<Connection> {
    let t = Duration::from_millis(timeout_ms);
    Connection::connect(
        addr,
        "test",
        &auth(),
        Timeouts {
            connect: t,
            request: t,
        },
    )
    .unwrap()
}

fn read_request() -> Request {
    Request::Sync { inode: InodeId(1) }
}

/// A sink over three separated parts of `buf`: [10, 110), [200, 300), [400, 400 + rest).
fn three_parts(buf: &mut [u8], total: usize) -> ReplySink {
    let base = buf.as_mut_ptr();
    assert!(total > 200 && buf.len() >= 400 + total - 200);
    // SAFETY: the parts lie inside `buf`, which the test neither touches nor frees
    // before the call is waited for.
    unsafe {
        ReplySink::new(vec![
            (base.add(10), 100),
            (base.add(200), 100),
            (base.add(400), total - 200),
        ])
    }
}

#[test]
fn a_reply_of_the_sink_length_lands_in_its_parts_in_order() {
    let addr = scripted(vec![Answer::Data(1000), Answer::Data(5)]);
    let c = connect(&addr, 5000);
    let mut buf = vec![0xEEu8; 2000];
    let call = c
        .send_into(&read_request(), &[], three_parts(&mut buf, 1000))
        .unwrap();
    match call.wait_sink().unwrap() {
        SinkReply::Filled(Response::Bytes(1000)) => {}
        _ => panic!("expected the data in the sink"),
    }
    let p = payload(1000);
    assert_eq!(&buf[10..110], &p[..100]);
    assert_eq!(&buf[200..300], &p[100..200]);
    assert_eq!(&buf[400..1200], &p[200..]);
    // The gaps between parts are untouched.
    assert!(buf[..10]
        .iter()
        .chain(&buf[110..200])
        .chain(&buf[300..400])
        .all(|&b| b == 0xEE));
    assert!(buf[1200..].iter().all(|&b| b == 0xEE));
    // The connection goes on serving plain calls.
    let (response, data) = c.call(&read_request(), &[]).unwrap();
    assert!(matches!(response, Response::Bytes(5)));
    assert_eq!(data, payload(5));
}

#[test]
fn a_reply_of_another_length_or_an_error_leaves_the_sink_untouched() {
    let addr = scripted(vec![Answer::Data(999), Answer::Error, Answer::Data(3)]);
    let c = connect(&addr, 5000);
    let mut buf = vec![0xEEu8; 2000];
    let call = c
        .send_into(&read_request(), &[], three_parts(&mut buf, 1000))
        .unwrap();
    match call.wait_sink().unwrap() {
        SinkReply::Other(Response::Bytes(999), data) => assert_eq!(data, payload(999)),
        _ => panic!("a short reply must come back as data"),
    }
    let call = c
        .send_into(&read_request(), &[], three_parts(&mut buf, 1000))
        .unwrap();
    match call.wait_sink() {
        Err(RpcError::Remote { error, .. }) => assert_eq!(error.code, ErrorCode::Io),
        _ => panic!("expected the server's error"),
    }
    assert!(buf.iter().all(|&b| b == 0xEE), "the sink was written");
    assert!(matches!(
        c.call(&read_request(), &[]).unwrap().0,
        Response::Bytes(3)
    ));
}

#[test]
fn a_reply_stalling_mid_data_times_out_and_breaks_the_connection() {
    let addr = scripted(vec![Answer::Stall(1 << 20)]);
    let c = connect(&addr, 300);
    let mut buf = vec![0u8; 2 << 20];
    let started = Instant::now();
    let call = c
        .send_into(&read_request(), &[], three_parts(&mut buf, 1 << 20))
        .unwrap();
    let outcome = call.wait_sink();
    // The reader was inside the sink when the wait ran out: giving the memory back
    // takes a second timeout and a broken connection, never a hang.
    assert!(outcome.is_err());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(c.is_broken());
    drop(buf);
}

#[test]
fn a_call_dropped_unanswered_gives_its_sink_back() {
    let addr = scripted(vec![Answer::Data(1000), Answer::Data(7)]);
    let c = connect(&addr, 5000);
    {
        let mut buf = vec![0u8; 2000];
        let call = c
            .send_into(&read_request(), &[], three_parts(&mut buf, 1000))
            .unwrap();
        drop(call);
        drop(buf);
    }
    // The late answer is read and dropped; the next call gets its own answer.
    let (response, data) = c.call(&read_request(), &[]).unwrap();
    assert!(matches!(response, Response::Bytes(7)));
    assert_eq!(data, payload(7));
}
