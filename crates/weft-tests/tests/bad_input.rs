//! Bad input against real servers gets a clear, specific error, and the server keeps
//! serving everyone else: raw frames on a TCP socket (malformed, oversized, unknown,
//! wrong version, truncated, overflowing, huge sequences, stalled), then the client
//! library's own refusals (paths, names, offsets, missing and removed files).

mod common;

use common::{expect_code, pattern};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use weft_client::{CreateOptions, ErrorCode, OpenOptions, SetAttr};
use weft_layout::InodeId;
use weft_proto::frame::{DATA_BYTES_MAX, MESSAGE_BYTES_MAX, PROTOCOL_VERSION};
use weft_proto::msg::{decode_result, Request, Response};
use weft_proto::{Cred, Range, Striping, Wire, WireError, Writer};
use weft_testkit::TestCluster;

/// The documented header layout, written out here rather than with the codec under
/// test: 0 magic u32 "WEFT", 4 version u16, 6 kind u8, 7 reserved, 8 opcode u16,
/// 10 reserved, 12 request id u64, 20 message length u32, 24 data length u64.
fn header(version: u16, kind: u8, opcode: u16, id: u64, message_len: u32, data_len: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(32);
    h.extend_from_slice(b"TFEW"); // 0x5745_4654 little endian
    h.extend_from_slice(&version.to_le_bytes());
    h.push(kind);
    h.push(0);
    h.extend_from_slice(&opcode.to_le_bytes());
    h.extend_from_slice(&[0, 0]);
    h.extend_from_slice(&id.to_le_bytes());
    h.extend_from_slice(&message_len.to_le_bytes());
    h.extend_from_slice(&data_len.to_le_bytes());
    assert_eq!(h.len(), 32);
    h
}

/// A request frame with the right lengths.
fn frame(opcode: u16, id: u64, body: &[u8], data: &[u8]) -> Vec<u8> {
    let mut f = header(
        PROTOCOL_VERSION,
        0,
        opcode,
        id,
        body.len() as u32,
        data.len() as u64,
    );
    f.extend_from_slice(body);
    f.extend_from_slice(data);
    f
}

/// A raw connection that speaks frames byte by byte, once it did the handshake (what
/// a client holding the cluster's key, but not using the library, could send).
struct Raw {
    stream: TcpStream,
}

/// A response frame: its request id and its decoded result.
type Reply = (u64, Result<Response, WireError>);

impl Raw {
    fn connect(cluster: &TestCluster, addr: &str) -> Raw {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        weft_rpc::auth::client_handshake(&mut stream, addr, "bad_input", &cluster.auth(), 10_000).unwrap();
        Raw { stream }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// The next response frame, or `None` once the server has closed the connection.
    fn reply(&mut self) -> Option<Reply> {
        let mut h = [0u8; 32];
        match self.stream.read_exact(&mut h) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return None,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
            Err(e) => panic!("reading a reply: {e}"),
        }
        assert_eq!(&h[0..4], b"TFEW", "reply magic");
        assert_eq!(u16::from_le_bytes([h[4], h[5]]), PROTOCOL_VERSION);
        assert_eq!(h[6], 1, "reply is a response frame");
        let id = u64::from_le_bytes(h[12..20].try_into().unwrap());
        let message_len = u32::from_le_bytes(h[20..24].try_into().unwrap()) as usize;
        let data_len = u64::from_le_bytes(h[24..32].try_into().unwrap()) as usize;
        let mut message = vec![0u8; message_len];
        self.stream.read_exact(&mut message).unwrap();
        let mut data = vec![0u8; data_len];
        self.stream.read_exact(&mut data).unwrap();
        Some((id, decode_result(&message).expect("a decodable reply")))
    }

    /// The error the server answered with; panics on success or silence.
    #[track_caller]
    fn error(&mut self, code: ErrorCode) -> String {
        match self.reply() {
            Some((_, Err(e))) => {
                assert_eq!(e.code, code, "wrong code; message: {}", e.message);
                e.message
            }
            Some((_, Ok(r))) => panic!("expected {code:?}, got {r:?}"),
            None => panic!("expected {code:?}, the server closed the connection silently"),
        }
    }

    /// Asserts that the server closed this connection (after a frame it cannot skip).
    #[track_caller]
    fn closed(&mut self) {
        if let Some(reply) = self.reply() {
            panic!("expected the connection to be closed, got {reply:?}");
        }
    }

    /// Asserts that this connection still serves a well-formed request.
    #[track_caller]
    fn still_serves(&mut self) {
        self.send(&frame(2, 4242, &Request::ServerInfo.encode_body(), &[]));
        match self.reply() {
            Some((4242, Ok(Response::ServerInfo { .. }))) => {}
            other => panic!("the connection stopped serving: {other:?}"),
        }
    }
}

/// A full client round trip on fresh connections: the servers still serve others.
#[track_caller]
fn assert_serves(cluster: &TestCluster) {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let client = cluster.client();
    let path = format!("/probe-{n}");
    let data = pattern(n, 0, 300_000);
    let file = client.create(&path, &CreateOptions::default()).unwrap();
    file.write_at(0, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(file.read_at(0, &mut back).unwrap(), data.len());
    assert!(back == data, "round trip after bad input");
    for id in 0..=4 {
        assert!(cluster.pid(id).is_some(), "server {id} died");
    }
}

fn striping() -> Striping {
    Striping {
        stripe_size_bytes: 65536,
        stripe_count: 1,
        server_index: 0,
    }
}

/// A read or write body with raw range values (the codec's encoder cannot make an
/// invalid one on purpose, so it is written field by field).
fn io_body(ranges: &[(u64, u64)]) -> Vec<u8> {
    let mut w = Writer::default();
    InodeId(12345).encode(&mut w);
    striping().encode(&mut w);
    w.u32(ranges.len() as u32);
    for (offset, len) in ranges {
        w.u64(*offset);
        w.u64(*len);
    }
    w.bytes
}

#[test]
fn malformed_frames_get_clear_errors_and_servers_keep_serving() {
    let cluster = TestCluster::start();
    let io = cluster.addr(1);
    let meta = cluster.meta_addr();
    for addr in [&io, &meta] {
        // Not the Weft magic: the stream cannot be resynchronised, so say why and close.
        let mut c = Raw::connect(&cluster, addr);
        let mut bad = frame(10, 1, &[], &[]);
        bad[0] = b'X';
        c.send(&bad);
        assert!(c.error(ErrorCode::Malformed).contains("magic"));
        c.closed();

        // Not a request or response kind.
        let mut c = Raw::connect(&cluster, addr);
        c.send(&header(PROTOCOL_VERSION, 9, 10, 2, 0, 0));
        assert!(c.error(ErrorCode::Malformed).contains("kind"));
        c.closed();

        // A response sent to a server.
        let mut c = Raw::connect(&cluster, addr);
        c.send(&header(PROTOCOL_VERSION, 1, 10, 3, 0, 0));
        assert!(c.error(ErrorCode::Malformed).contains("request"));
        c.closed();

        // Oversized: message and bulk data lengths beyond the limits, refused from the
        // header alone (nothing that large is sent or allocated).
        let mut c = Raw::connect(&cluster, addr);
        c.send(&header(PROTOCOL_VERSION, 0, 42, 4, MESSAGE_BYTES_MAX + 1, 0));
        let m = c.error(ErrorCode::TooLarge);
        assert!(m.contains(&(MESSAGE_BYTES_MAX + 1).to_string()), "{m}");
        assert!(m.contains(&MESSAGE_BYTES_MAX.to_string()), "{m}");
        c.closed();
        let mut c = Raw::connect(&cluster, addr);
        c.send(&header(PROTOCOL_VERSION, 0, 42, 5, 10, u64::MAX));
        let m = c.error(ErrorCode::TooLarge);
        assert!(m.contains(&DATA_BYTES_MAX.to_string()), "{m}");
        c.closed();

        // Another protocol version: the error names both versions.
        for version in [0, PROTOCOL_VERSION + 98] {
            let mut c = Raw::connect(&cluster, addr);
            let mut f = frame(1, 6, &Request::Hello { client: "old".into() }.encode_body(), &[]);
            f[4..6].copy_from_slice(&version.to_le_bytes());
            c.send(&f);
            let m = c.error(ErrorCode::ProtocolVersion);
            assert!(
                m.contains(&format!("version {version}"))
                    && m.contains(&format!("version {PROTOCOL_VERSION}")),
                "{m}"
            );
            c.closed();
        }

        // An unknown opcode, with and without bulk data: refused, and the connection,
        // whose framing is intact, goes on serving.
        let mut c = Raw::connect(&cluster, addr);
        c.send(&frame(999, 7, &[1, 2, 3], &[]));
        assert!(c.error(ErrorCode::UnknownOpcode).contains("999"));
        c.send(&frame(0xFFFF, 8, &[], &[0xAB; 100_000]));
        assert!(c.error(ErrorCode::UnknownOpcode).contains("65535"));
        c.still_serves();

        // A body shorter than its fields: a string claims 100 bytes, 3 follow.
        let mut w = Writer::default();
        Cred::root().encode(&mut w);
        w.u32(100);
        w.bytes.extend_from_slice(b"/ab");
        c.send(&frame(11, 9, &w.bytes, &[]));
        assert!(c.error(ErrorCode::Malformed).contains("truncated"));
        // A body longer than its fields.
        c.send(&frame(10, 10, &[0; 5], &[]));
        assert!(c.error(ErrorCode::Malformed).contains("trailing"));
        // Invalid values: a bool that is 7, a string that is not UTF-8.
        let mut w = Writer::default();
        Cred::root().encode(&mut w);
        w.bytes.extend_from_slice(&[0xFF, 0xFE]);
        let mut resolve = Writer::default();
        Cred::root().encode(&mut resolve);
        resolve.bytes(&[0xFF, 0xFE, 0xFD]);
        c.send(&frame(11, 11, &resolve.bytes, &[]));
        assert!(c.error(ErrorCode::Malformed).contains("UTF-8"));
        c.still_serves();

        // Huge sequence lengths, claimed without the elements: refused before any
        // allocation of that size.
        let mut w = Writer::default();
        w.u32(u32::MAX);
        c.send(&frame(40, 12, &w.bytes, &[]));
        assert!(c.error(ErrorCode::TooLarge).contains("sequence"));
        let mut w = Writer::default();
        w.u32(60_000); // under the limit, but the elements are missing
        c.send(&frame(41, 13, &w.bytes, &[]));
        assert!(c.error(ErrorCode::Malformed).contains("truncated"));
        // A credential with more groups than allowed.
        let mut w = Writer::default();
        w.u32(0);
        w.u32(0);
        w.seq(&(0..100u32).collect::<Vec<_>>());
        w.str("/");
        c.send(&frame(11, 14, &w.bytes, &[]));
        assert!(c.error(ErrorCode::TooLarge).contains("group"));
        c.still_serves();
        drop(c);
        assert_serves(&cluster);
    }
}

/// Presents a server capability on `c`, as a server would: the io tests here are about
/// bad ranges and payloads, not missing capabilities (see capabilities.rs).
fn present_server_capability(c: &mut Raw, cluster: &TestCluster) {
    let cap = weft_rpc::CapabilitySource::capability(&*cluster.server_capabilities(), InodeId(0), 0)
        .unwrap()
        .unwrap();
    let present = Request::PresentCapability { cap, reset: false }.encode_body();
    c.send(&frame(100, 99, &present, &[]));
    assert!(
        matches!(c.reply(), Some((99, Ok(Response::Done)))),
        "the server capability was refused"
    );
}

#[test]
fn io_requests_with_bad_ranges_and_sizes_are_refused() {
    let cluster = TestCluster::start();
    let mut c = Raw::connect(&cluster, &cluster.addr(1));
    present_server_capability(&mut c, &cluster);
    // Ranges whose end overflows, or passes the largest file offset (2^62).
    for (offset, len) in [(u64::MAX - 5, 10), (1 << 62, 1), (0, u64::MAX)] {
        c.send(&frame(43, 1, &io_body(&[(0, 10), (offset, len)]), &[]));
        let m = c.error(ErrorCode::Malformed);
        assert!(m.contains("range"), "{m}");
        c.send(&frame(42, 2, &io_body(&[(offset, len)]), &[]));
        c.error(ErrorCode::Malformed);
    }
    // More ranges than one request may carry.
    let many: Vec<(u64, u64)> = (0..16_385u64).map(|k| (k * 10, 1)).collect();
    c.send(&frame(43, 3, &io_body(&many), &[]));
    assert!(c.error(ErrorCode::TooLarge).contains("range"));
    // A read of more than one frame can carry back.
    c.send(&frame(43, 4, &io_body(&[(0, DATA_BYTES_MAX + 1)]), &[]));
    c.error(ErrorCode::TooLarge);
    // Striping that contradicts itself: server index 3 of 2.
    let mut w = Writer::default();
    InodeId(1).encode(&mut w);
    w.u64(65536);
    w.u32(2);
    w.u32(3);
    w.u32(0);
    c.send(&frame(43, 5, &w.bytes, &[]));
    c.error(ErrorCode::Malformed);
    // A write whose payload does not match its ranges; I/O on an object that does not
    // exist (a removed file).
    let client = cluster.client();
    let file = client.create("/f", &CreateOptions::default()).unwrap();
    let layout = file.layout().clone();
    let striping = |k: u32| Striping {
        stripe_size_bytes: layout.stripe_size_bytes,
        stripe_count: layout.servers.len() as u32,
        server_index: k,
    };
    let write = |inode, len| Request::Write {
        inode,
        striping: striping(0),
        ranges: vec![Range { offset: 0, len }],
    };
    let mut c = Raw::connect(&cluster, &cluster.addr(layout.servers[0].0));
    present_server_capability(&mut c, &cluster);
    c.send(&frame(42, 6, &write(file.inode(), 100).encode_body(), &[1; 99]));
    assert!(c.error(ErrorCode::InvalidArgument).contains("99"));
    c.send(&frame(
        42,
        7,
        &write(InodeId(987_654), 10).encode_body(),
        &[1; 10],
    ));
    c.error(ErrorCode::Stale);
    // Truncate to a size past the largest file offset.
    let truncate = Request::Truncate {
        inode: file.inode(),
        striping: striping(0),
        size: u64::MAX,
    };
    c.send(&frame(46, 8, &truncate.encode_body(), &[]));
    c.error(ErrorCode::InvalidArgument);
    c.still_serves();
    assert_serves(&cluster);
    assert_eq!(file.size().unwrap(), 0, "refused requests changed the file");
}

#[test]
fn the_manager_checks_names_and_paths_itself() {
    let cluster = TestCluster::start();
    let mut c = Raw::connect(&cluster, &cluster.meta_addr());
    // What a client that skips the library's checks could send.
    let resolve = |path: &str| Request::Resolve {
        cred: Cred::root(),
        path: path.into(),
    };
    for (path, code) in [
        ("/a/../b", ErrorCode::InvalidArgument),
        ("/./a", ErrorCode::InvalidArgument),
        ("/a//b", ErrorCode::InvalidArgument),
        ("relative", ErrorCode::InvalidArgument),
        ("", ErrorCode::InvalidArgument),
    ] {
        c.send(&frame(11, 1, &resolve(path).encode_body(), &[]));
        c.error(code);
    }
    let long = format!("/{}", "n".repeat(256));
    c.send(&frame(11, 2, &resolve(&long).encode_body(), &[]));
    c.error(ErrorCode::NameTooLong);
    let mkdir = |name: &str| Request::Mkdir {
        cred: Cred::root(),
        parent: InodeId::ROOT,
        name: name.into(),
        mode: 0o755,
    };
    for (name, code) in [
        ("a/b", ErrorCode::InvalidArgument),
        ("", ErrorCode::InvalidArgument),
        ("..", ErrorCode::InvalidArgument),
        (".", ErrorCode::InvalidArgument),
        ("nul\0byte", ErrorCode::InvalidArgument),
    ] {
        c.send(&frame(15, 3, &mkdir(name).encode_body(), &[]));
        c.error(code);
    }
    let m = {
        c.send(&frame(15, 4, &mkdir(&"x".repeat(256)).encode_body(), &[]));
        c.error(ErrorCode::NameTooLong)
    };
    assert!(m.contains("255"), "{m}");
    // An inode number that does not exist is a stale handle (ESTALE), as in NFS.
    let getattr = Request::GetAttr {
        cred: Cred::root(),
        inode: InodeId(1 << 40),
    };
    c.send(&frame(13, 5, &getattr.encode_body(), &[]));
    c.error(ErrorCode::Stale);
    // An io request sent to the manager.
    c.send(&frame(47, 6, &Request::IoStatfs.encode_body(), &[]));
    c.error(ErrorCode::Unsupported);
    c.still_serves();
    // Nothing was created by any of it.
    let client = cluster.client();
    assert!(client.readdir("/").unwrap().is_empty());
    assert_serves(&cluster);
}

/// Connections that stop mid-frame, or vanish mid-frame, tie up nothing that others
/// need.
#[test]
fn truncated_and_stalled_frames_do_not_stop_other_clients() {
    let cluster = TestCluster::start();
    let mut stalled = Vec::new();
    for addr in [cluster.addr(1), cluster.addr(2), cluster.meta_addr()] {
        // Half a header, kept open.
        let mut c = Raw::connect(&cluster, &addr);
        c.send(&frame(10, 1, &[], &[])[..10]);
        stalled.push(c);
        // A header promising a body that never comes, kept open.
        let mut c = Raw::connect(&cluster, &addr);
        c.send(&header(PROTOCOL_VERSION, 0, 11, 2, 1000, 0));
        c.send(&[0; 10]);
        stalled.push(c);
        // A write promising bulk data that never comes, kept open.
        let mut c = Raw::connect(&cluster, &addr);
        c.send(&header(
            PROTOCOL_VERSION,
            0,
            42,
            3,
            io_body(&[(0, 1 << 20)]).len() as u32,
            1 << 20,
        ));
        c.send(&io_body(&[(0, 1 << 20)]));
        stalled.push(c);
        // A truncated frame, then the sender goes away.
        let mut c = Raw::connect(&cluster, &addr);
        c.send(&header(PROTOCOL_VERSION, 0, 11, 4, 100, 0));
        c.send(&[1; 20]);
        c.stream.shutdown(Shutdown::Write).unwrap();
        c.closed();
        // Random bytes.
        let mut c = Raw::connect(&cluster, &addr);
        let mut rng = common::Rng::new(7);
        c.send(&rng.bytes(64 << 10));
        // Either an error reply and a close, or (if the garbage was cut short) a close.
        while let Some((_, result)) = c.reply() {
            assert!(result.is_err());
        }
    }
    assert_serves(&cluster);
    drop(stalled);
    assert_serves(&cluster);
}

/// Frames that announce the largest bulk payload and then send nothing reserve the io
/// server's whole memory budget for bulk data (it is charged when the header arrives),
/// and the connections were only dropped after the idle timeout (an hour): 17 such
/// connections, a few kilobytes in all, stalled every write to the server. Admitted
/// bulk data must now arrive within the frame deadline (10 s).
#[test]
fn frames_that_stall_after_a_large_header_do_not_starve_writers() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    let file = client
        .create(
            "/f",
            &CreateOptions {
                layout: weft_client::LayoutRequest {
                    stripe_count: Some(1),
                    ..Default::default()
                },
                ..CreateOptions::default()
            },
        )
        .unwrap();
    let addr = cluster.addr(file.layout().servers[0].0);
    let body = io_body(&[(0, DATA_BYTES_MAX)]);
    let stalled: Vec<Raw> = (0..17)
        .map(|k| {
            let mut c = Raw::connect(&cluster, &addr);
            c.send(&header(
                PROTOCOL_VERSION,
                0,
                42,
                k,
                body.len() as u32,
                DATA_BYTES_MAX,
            ));
            c.send(&body);
            c
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let (done, wait) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(file.write_at(0, &[1u8; 1 << 20]).map_err(|e| e.to_string()));
    });
    match wait.recv_timeout(Duration::from_secs(15)) {
        Ok(result) => {
            result.expect("a write next to stalled frames");
        }
        Err(_) => panic!("a 1 MiB write did not finish in 15 s next to 17 stalled frames"),
    }
    drop(stalled);
}

#[test]
fn the_client_refuses_bad_paths_names_and_ranges_with_specific_codes() {
    let cluster = TestCluster::start();
    let client = cluster.client();
    client.mkdir("/dir", 0o755).unwrap();
    let file = client.create("/dir/file", &CreateOptions::default()).unwrap();
    file.write_at(0, b"0123456789").unwrap();
    let create = CreateOptions::default();

    for bad in ["/dir/../x", "/./x", "/dir//x", "dir/x", "", "/dir/\0"] {
        let m = expect_code(client.create(bad, &create).map(drop), ErrorCode::InvalidArgument);
        assert!(m.contains("path"), "{m}");
        expect_code(client.mkdir(bad, 0o755), ErrorCode::InvalidArgument);
        expect_code(client.stat(bad), ErrorCode::InvalidArgument);
        expect_code(client.unlink(bad), ErrorCode::InvalidArgument);
        expect_code(client.rename("/dir/file", bad), ErrorCode::InvalidArgument);
    }
    let name_255 = "n".repeat(255);
    let name_256 = "n".repeat(256);
    client
        .create(&format!("/dir/{name_255}"), &create)
        .expect("a 255-byte name is fine");
    expect_code(
        client.create(&format!("/dir/{name_256}"), &create).map(drop),
        ErrorCode::NameTooLong,
    );
    expect_code(
        client.mkdir(&format!("/{name_256}"), 0o755),
        ErrorCode::NameTooLong,
    );
    expect_code(
        client.rename("/dir/file", &format!("/dir/{name_256}")),
        ErrorCode::NameTooLong,
    );
    // A path longer than PATH_MAX made of valid names: too long, like ENAMETOOLONG.
    let deep = format!("/{}", vec!["d".repeat(200); 21].join("/"));
    assert!(deep.len() > 4096);
    expect_code(client.stat(&deep), ErrorCode::NameTooLong);

    // Offsets and lengths that overflow, or pass the largest file offset (2^62): a
    // write or truncate there is too large (EFBIG), a read there is at the end.
    let mut buf = [0u8; 16];
    for offset in [u64::MAX - 10, u64::MAX, 1 << 62, (1 << 62) - 1] {
        expect_code(file.write_at(offset, b"abc"), ErrorCode::TooLarge);
        assert_eq!(file.read_at(offset, &mut buf).unwrap(), 0, "read at {offset}");
    }
    expect_code(file.truncate(u64::MAX), ErrorCode::TooLarge);
    let huge = SetAttr {
        size: Some(u64::MAX - 1),
        ..SetAttr::default()
    };
    expect_code(client.setattr("/dir/file", &huge), ErrorCode::TooLarge);
    assert_eq!(
        client.stat("/dir/file").unwrap().size,
        10,
        "the file is unchanged"
    );

    // Missing directories, and files where directories should be.
    let m = expect_code(
        client.create("/missing/f", &create).map(drop),
        ErrorCode::NotFound,
    );
    assert!(m.contains("/missing"), "{m}");
    expect_code(client.mkdir("/missing/d", 0o755), ErrorCode::NotFound);
    expect_code(
        client.create("/dir/file/x", &create).map(drop),
        ErrorCode::NotDirectory,
    );
    expect_code(client.readdir("/dir/file"), ErrorCode::NotDirectory);
    expect_code(
        client.open("/dir", &OpenOptions::default()).map(drop),
        ErrorCode::IsDirectory,
    );
    expect_code(
        client
            .create(
                "/dir/file",
                &CreateOptions {
                    exclusive: true,
                    ..CreateOptions::default()
                },
            )
            .map(drop),
        ErrorCode::Exists,
    );
    expect_code(client.mkdir("/dir", 0o755), ErrorCode::Exists);

    // I/O on a removed file.
    client.unlink("/dir/file").unwrap();
    common::wait_orphans_purged(&client);
    expect_code(file.read_at(0, &mut buf), ErrorCode::Stale);
    expect_code(file.write_at(0, b"x"), ErrorCode::Stale);
    assert_serves(&cluster);
}
