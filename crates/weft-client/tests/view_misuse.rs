//! Misuse of view I/O gets clear errors from real servers: unknown view ids, intervals
//! past the largest file offset, malformed, too deep and oversized views (raw frames),
//! and more registered views than a connection may hold.

use std::io::{Read, Write};
use std::net::TcpStream;
use weft_client::{Datatype, ErrorCode, View};
use weft_layout::InodeId;
use weft_proto::frame::{FrameHeader, FrameKind, FRAME_HEADER_BYTES, PROTOCOL_VERSION};
use weft_proto::msg::{
    decode_result, Opcode, Request, Response, ViewId, VIEWS_PER_CONNECTION_MAX, VIEW_BYTES_MAX,
};
use weft_proto::{Striping, WireError, Writer};
use weft_rpc::{Connection, RpcError, Timeouts};
use weft_testkit::TestCluster;

fn io_addr(cluster: &TestCluster) -> String {
    cluster.client().cluster_info().io_servers[0].addr.clone()
}

fn connect(cluster: &TestCluster, addr: &str) -> std::sync::Arc<Connection> {
    // As a server would: this test is about bad views, not missing capabilities.
    cluster.server_connection(addr, Timeouts::default())
}

fn remote(result: Result<(Response, Vec<u8>), RpcError>) -> WireError {
    match result {
        Err(RpcError::Remote { error, .. }) => error,
        other => panic!("expected an error reply, got {other:?}"),
    }
}

fn striping() -> Striping {
    Striping {
        stripe_size_bytes: 65536,
        stripe_count: 1,
        server_index: 0,
    }
}

/// Sends one raw request frame and returns the decoded reply.
fn raw_call(stream: &mut TcpStream, opcode: u16, message: &[u8]) -> Result<Response, WireError> {
    let header = FrameHeader {
        version: PROTOCOL_VERSION,
        kind: FrameKind::Request,
        opcode,
        request_id: 9,
        message_len: message.len() as u32,
        data_len: 0,
    };
    stream.write_all(&header.encode()).unwrap();
    stream.write_all(message).unwrap();
    let mut head = [0u8; FRAME_HEADER_BYTES];
    stream.read_exact(&mut head).unwrap();
    let reply = FrameHeader::decode(&head).unwrap();
    let mut body = vec![0; reply.message_len as usize];
    stream.read_exact(&mut body).unwrap();
    let mut data = vec![0; reply.data_len as usize];
    stream.read_exact(&mut data).unwrap();
    decode_result(&body).unwrap()
}

fn register_raw(stream: &mut TcpStream, view_bytes: &[u8]) -> Result<Response, WireError> {
    let mut w = Writer::default();
    w.bytes(view_bytes);
    raw_call(stream, Opcode::RegisterView as u16, &w.bytes)
}

#[test]
fn malformed_deep_and_oversized_views_are_refused_and_the_connection_keeps_serving() {
    let cluster = TestCluster::start();
    let mut s = TcpStream::connect(io_addr(&cluster)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    weft_rpc::auth::client_handshake(&mut s, "io", "view-misuse", &cluster.auth(), 10_000).unwrap();
    let good = View::partition(0, 8, 32).unwrap().encode();

    let mut bad_version = good.clone();
    bad_version[0] = 0x7f;
    let e = register_raw(&mut s, &bad_version).unwrap_err();
    assert_eq!(e.code, ErrorCode::Malformed);
    assert!(e.message.contains("view"), "{}", e.message);

    let e = register_raw(&mut s, &good[..good.len() - 1]).unwrap_err();
    assert_eq!(e.code, ErrorCode::Malformed, "{}", e.message);

    // A child index naming a later node (a cycle, were it allowed).
    let e = register_raw(&mut s, &[1, 0, 1, 1, 2, 1, 0, 0, 0, 5]).unwrap_err();
    assert_eq!(e.code, ErrorCode::Malformed, "{}", e.message);

    // 17 levels of vectors: deeper than the limit of 16.
    let mut deep = vec![weft_layout::view::WIRE_VERSION, 0, 18, 0, 1, 0];
    for level in 0..17u32 {
        deep.extend_from_slice(&[1, 2, 1, 0]);
        let mut stride = (1u64 << (2 * level + 2)) << 1;
        while stride >= 0x80 {
            deep.push((stride as u8) | 0x80);
            stride >>= 7;
        }
        deep.push(stride as u8);
        deep.extend_from_slice(&[0, level as u8]);
    }
    let e = register_raw(&mut s, &deep).unwrap_err();
    assert_eq!(e.code, ErrorCode::Malformed);
    assert!(e.message.contains("depth"), "{}", e.message);

    // Bigger than a view may be: refused from its length.
    let mut w = Writer::default();
    w.u32(VIEW_BYTES_MAX as u32 + 1);
    let e = raw_call(&mut s, Opcode::RegisterView as u16, &w.bytes).unwrap_err();
    assert_eq!(e.code, ErrorCode::TooLarge, "{}", e.message);

    // A view that decodes but breaks the filetype rules (bytes going backwards).
    let backwards = Datatype::hindexed(&[1, 1], &[10, 0], &Datatype::bytes(1).unwrap()).unwrap();
    let mut wire = vec![weft_layout::view::WIRE_VERSION, 0];
    wire.extend_from_slice(&backwards.encode()[1..]);
    let e = register_raw(&mut s, &wire).unwrap_err();
    assert_eq!(e.code, ErrorCode::Malformed);
    assert!(e.message.contains("monoton"), "{}", e.message);

    // The same connection still registers a good view.
    assert!(matches!(register_raw(&mut s, &good), Ok(Response::View(_))));
}

#[test]
fn unknown_ids_and_intervals_past_the_end_are_refused() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    let file = client.create("/f", &Default::default()).unwrap();
    let inode: InodeId = file.inode();
    let addr = io_addr(&cluster);
    let c = connect(&cluster, &addr);
    let read = |view, view_offset, len| Request::ReadView {
        inode,
        striping: striping(),
        view,
        view_offset,
        len,
    };
    let e = remote(c.call(&read(ViewId(4242), 0, 10), &[]));
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert!(e.message.contains("not registered"), "{}", e.message);

    let id = match c.call(
        &Request::RegisterView {
            view: View::partition(0, 8, 32).unwrap(),
        },
        &[],
    ) {
        Ok((Response::View(id), _)) => id,
        other => panic!("{other:?}"),
    };
    // Views belong to their connection: another connection does not see it.
    let other = connect(&cluster, &addr);
    let e = remote(other.call(&read(id, 0, 10), &[]));
    assert!(e.message.contains("not registered"), "{}", e.message);

    // An interval reaching past the largest file offset (2^62).
    let e = remote(c.call(&read(id, 1 << 61, 100), &[]));
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert!(e.message.contains("2^62"), "{}", e.message);
    // A write whose payload does not match its pieces changes nothing.
    let write = Request::WriteView {
        inode,
        striping: striping(),
        view: id,
        view_offset: 0,
        len: 16,
    };
    let e = remote(c.call(&write, &[1u8; 15]));
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert!(e.message.contains("16 bytes"), "{}", e.message);
    assert_eq!(c.call(&write, &[1u8; 16]).unwrap().0, Response::Bytes(16));

    // Releasing twice: the second time the id is unknown.
    assert_eq!(
        c.call(&Request::ReleaseView { view: id }, &[]).unwrap().0,
        Response::Done
    );
    let e = remote(c.call(&Request::ReleaseView { view: id }, &[]));
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    // The released id is not given to the next view.
    match c.call(
        &Request::RegisterView {
            view: View::partition(0, 8, 32).unwrap(),
        },
        &[],
    ) {
        Ok((Response::View(next), _)) => assert_ne!(next, id),
        other => panic!("{other:?}"),
    }

    // Through the client: an interval past the end is refused before anything is sent.
    file.set_partition(0, 1, 1 << 40).unwrap();
    let e = file.write_view(1 << 22, &[0u8; 4]).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument, "{e}");
    assert!(e.to_string().contains("2^62"), "{e}");
    let e = file.set_view(0, Datatype::bytes(0).unwrap()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument, "{e}");
    let read_only = client.open("/f", &Default::default()).unwrap();
    read_only.set_partition(0, 4, 8).unwrap();
    assert_eq!(
        read_only.write_view(0, &[1; 4]).unwrap_err().code(),
        ErrorCode::PermissionDenied
    );
}

#[test]
fn a_connection_holds_a_bounded_number_of_views_released_when_it_closes() {
    let cluster = TestCluster::start();
    let addr = io_addr(&cluster);
    let register = |c: &Connection, n: u64| {
        c.call(
            &Request::RegisterView {
                view: View::partition(n, 4, 64).unwrap(),
            },
            &[],
        )
    };
    for round in 0..2 {
        let c = connect(&cluster, &addr);
        let mut ids = Vec::new();
        for n in 0..VIEWS_PER_CONNECTION_MAX as u64 {
            match register(&c, n) {
                Ok((Response::View(id), _)) => ids.push(id),
                other => panic!("round {round}, view {n}: {other:?}"),
            }
        }
        let e = remote(register(&c, 99));
        assert_eq!(e.code, ErrorCode::Busy, "{}", e.message);
        assert!(
            e.message.contains(&VIEWS_PER_CONNECTION_MAX.to_string()),
            "{}",
            e.message
        );
        // Releasing one makes room for one.
        c.call(&Request::ReleaseView { view: ids[10] }, &[]).unwrap();
        assert!(matches!(register(&c, 100), Ok((Response::View(_), _))));
        assert!(remote(register(&c, 101)).code == ErrorCode::Busy);
        // Closing the connection leaves the next one its full allowance. (That the
        // server drops the closed connection's views is checked where it can be seen:
        // weft-rpc's lifecycle test and weft-iod's registry test.)
        drop(c);
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
