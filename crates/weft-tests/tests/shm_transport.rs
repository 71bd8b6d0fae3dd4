//! The shared-memory transport against real weftd processes: byte-for-byte round trips
//! through shm, the Unix socket and TCP (`WEFT_TRANSPORT`), no segment left behind when
//! a client or a server is killed with SIGKILL mid-transfer (and no synced data lost),
//! fallback when the client cannot have a segment, and hostile descriptors refused by
//! a server that stays up.
//!
//! The tests run one at a time (`ENV`): some set `WEFT_TRANSPORT` in this process, and
//! all count the segments this process maps.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use weft_client::{Client, CreateOptions, OpenOptions};
use weft_layout::InodeId;
use weft_proto::frame::FrameKind;
use weft_proto::msg::{decode_result, Request, Response};
use weft_proto::{ErrorCode, Range, Striping, WireError};
use weft_rpc::frame_io::{read_exact_vec, read_header, write_frame};
use weft_rpc::shm::{send_with_fd, Mapping};
use weft_testkit::TestCluster;

/// Serialises the tests that change this process's environment.
static ENV: Mutex<()> = Mutex::new(());

const SEGMENT_NAME: &str = "memfd:weft-shm";

/// Shared segments process `pid` has mapped, and has open as descriptors.
fn segments_of(pid: u32) -> (usize, usize) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let mapped = maps.lines().filter(|l| l.contains(SEGMENT_NAME)).count();
    let open = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter(|t| t.to_string_lossy().contains("weft-shm"))
                .count()
        })
        .unwrap_or(0);
    (mapped, open)
}

fn io_pids(cluster: &TestCluster) -> Vec<u32> {
    cluster
        .config()
        .io_servers()
        .map(|s| cluster.pid(s.id).expect("io server running") as u32)
        .collect()
}

/// Waits until `what` holds, at most 15 s.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !check() {
        assert!(Instant::now() < deadline, "still not so after 15 s: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect()
}

/// Writes and reads back over sizes and offsets (crossing stripes, servers, chunks
/// and the segment's size), byte for byte, with holes read as zeros.
fn round_trips(client: &Client, path: &str) {
    let file = client.create(path, &CreateOptions::default()).unwrap();
    let sizes = [
        1usize,
        4095,
        16 * 1024 - 1,
        16 * 1024,
        65_537,
        (1 << 20) + 3,
        (9 << 20) + 7,
        40 << 20,
    ];
    let offsets = [0u64, 1, 65_535, 3 * 65_536 + 17, (17 << 20) + 5];
    let mut seed = 0;
    for &size in &sizes {
        for &offset in &offsets {
            seed += 1;
            let data = pattern(size, seed);
            assert_eq!(file.write_at(offset, &data).unwrap(), size);
            let mut back = vec![0xAAu8; size];
            assert_eq!(file.read_at(offset, &mut back).unwrap(), size);
            assert!(
                back == data,
                "{path}: {size} bytes at {offset} read back differently"
            );
        }
    }
    // List I/O: scattered, disjoint ranges (within and across stripes and servers).
    let ranges: Vec<(u64, u64)> = (0..300u64)
        .map(|k| (k * 130_001 + (k % 7) * 4093, 1 + (k * 7919) % 60_000))
        .collect();
    let total: u64 = ranges.iter().map(|r| r.1).sum();
    let data = pattern(total as usize, 99);
    assert_eq!(file.write_list(&ranges, &data).unwrap(), total as usize);
    let mut back = vec![0xAAu8; total as usize];
    assert_eq!(file.read_list(&ranges, &mut back).unwrap(), total as usize);
    assert!(back == data, "{path}: list I/O read back differently");
    // A hole between two writes reads as zeros; a read past the end stops there.
    let far = 200u64 << 20;
    file.write_at(far, b"end").unwrap();
    let mut hole = vec![0xAAu8; 1 << 20];
    assert_eq!(file.read_at(far - (1 << 20), &mut hole).unwrap(), 1 << 20);
    assert!(hole.iter().all(|&b| b == 0), "{path}: a hole read as non-zero");
    let mut tail = vec![0u8; 1 << 20];
    assert_eq!(file.read_at(far, &mut tail).unwrap(), 3);
    assert_eq!(&tail[..3], b"end");
}

#[test]
fn round_trips_through_shm_unix_and_tcp_byte_for_byte() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = TestCluster::start();
    let me = std::process::id();
    let servers = io_pids(&cluster);
    for transport in ["shm", "unix", "tcp"] {
        std::env::set_var("WEFT_TRANSPORT", transport);
        let client = cluster.client();
        round_trips(&client, &format!("/{transport}"));
        let (mapped, open) = segments_of(me);
        if transport == "shm" {
            // One segment per io server, in the client and in each server.
            assert_eq!((mapped, open), (4, 4), "client segments over shm");
            for &pid in &servers {
                assert_eq!(segments_of(pid), (1, 1), "segments of io server {pid}");
            }
        } else {
            assert_eq!((mapped, open), (0, 0), "{transport} must not use a segment");
            for &pid in &servers {
                assert_eq!(
                    segments_of(pid),
                    (0, 0),
                    "{transport}: segments of io server {pid}"
                );
            }
        }
        drop(client);
        // Dropping the client lets go of every segment, on both sides.
        // (each connection's reader thread lets go as it ends)
        eventually(&format!("{transport}: the client drops its segments"), || {
            segments_of(me) == (0, 0)
        });
        for &pid in &servers {
            eventually(&format!("io server {pid} drops its segment"), || {
                segments_of(pid) == (0, 0)
            });
        }
    }
    std::env::remove_var("WEFT_TRANSPORT");
    // What each transport wrote reads the same through every other.
    let client = cluster.client();
    let a = client.open("/shm", &OpenOptions::default()).unwrap();
    let b = client.open("/tcp", &OpenOptions::default()).unwrap();
    let (mut x, mut y) = (vec![0u8; 50 << 20], vec![0u8; 50 << 20]);
    a.read_at(0, &mut x).unwrap();
    b.read_at(0, &mut y).unwrap();
    assert!(x == y, "shm and tcp files differ");
}

/// A `weft` child process with the cluster's environment.
fn weft(cluster: &TestCluster, env: &[(&str, &str)], args: &[&str]) -> Command {
    let mut c = cluster.command("weft");
    c.env_remove("WEFT_TRANSPORT").env_remove("WEFT_SHM_BYTES");
    c.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

#[test]
fn a_killed_client_leaves_no_segment_in_the_servers_and_loses_no_synced_data() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = TestCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let synced = pattern(5 << 20, 7);
    let synced_path = dir.path().join("synced");
    std::fs::write(&synced_path, &synced).unwrap();
    let out = weft(&cluster, &[], &["put", synced_path.to_str().unwrap(), "/synced"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let big = dir.path().join("big");
    std::fs::write(&big, pattern(512 << 20, 9)).unwrap();
    let servers = io_pids(&cluster);
    let mut killed = 0;
    for attempt in 0..4 {
        let mut child = weft(
            &cluster,
            &[("WEFT_TRANSPORT", "shm")],
            &["put", big.to_str().unwrap(), "/big"],
        )
        .spawn()
        .unwrap();
        // Mid-transfer: once every server has the child's segment mapped.
        eventually("the servers map the client's segments", || {
            servers.iter().all(|&pid| segments_of(pid).0 >= 1)
        });
        std::thread::sleep(Duration::from_millis(50 * attempt));
        // SAFETY: killing the child this test started.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        if child.wait().unwrap().success() {
            // It finished first: no transfer was cut; try again.
            continue;
        }
        killed += 1;
        for &pid in &servers {
            eventually(
                &format!("io server {pid} lets go of the killed client's segment"),
                || segments_of(pid) == (0, 0),
            );
        }
    }
    assert!(killed >= 2, "only {killed} of 4 puts were killed mid-transfer");
    let client = cluster.client();
    let file = client.open("/synced", &OpenOptions::default()).unwrap();
    let mut back = vec![0u8; synced.len()];
    assert_eq!(file.read_at(0, &mut back).unwrap(), synced.len());
    assert!(back == synced, "synced data changed after clients were killed");
}

#[test]
fn a_killed_server_leaves_no_segment_in_the_client_and_loses_no_synced_data() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    std::env::set_var("WEFT_TRANSPORT", "shm");
    let cluster = TestCluster::start();
    let me = std::process::id();
    let client = cluster.client();
    std::env::remove_var("WEFT_TRANSPORT");
    let synced = pattern(8 << 20, 3);
    let file = client.create("/synced", &CreateOptions::default()).unwrap();
    file.write_at(0, &synced).unwrap();
    file.sync().unwrap();
    assert_eq!(segments_of(me), (4, 4), "one segment per io server");

    // A writer keeps transfers going while one io server is killed under it.
    let victim = cluster.config().io_servers().next().unwrap().id;
    let writer = {
        let client = client.clone();
        std::thread::spawn(move || {
            let file = client.create("/busy", &CreateOptions::default()).unwrap();
            let data = pattern(32 << 20, 5);
            for _ in 0..1000 {
                if file.write_at(0, &data).is_err() {
                    return true;
                }
            }
            false
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    cluster.kill9(victim);
    assert!(writer.join().unwrap(), "writes went on with an io server killed");
    // The dead server's segment is gone from the client; the others stay. The
    // client's reaper thread unmaps and then closes it, after the write failed.
    eventually("the client lets go of the dead server's segment", || {
        segments_of(me) == (3, 3)
    });

    cluster.restart();
    let fresh = cluster.client();
    let file = fresh.open("/synced", &OpenOptions::default()).unwrap();
    let mut back = vec![0u8; synced.len()];
    assert_eq!(file.read_at(0, &mut back).unwrap(), synced.len());
    assert!(
        back == synced,
        "synced data lost with a server killed mid-transfer"
    );
    drop(file);
    drop(fresh);
    // The first client reconnects with a new segment.
    let file = client.open("/synced", &OpenOptions::default()).unwrap();
    assert_eq!(file.read_at(0, &mut back).unwrap(), synced.len());
    assert!(back == synced);
    assert_eq!(segments_of(me), (4, 4), "a new segment for the restarted server");
}

#[test]
fn a_client_that_cannot_have_a_segment_falls_back_to_the_socket() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = TestCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let data = pattern(3 << 20, 11);
    std::fs::write(&src, &data).unwrap();
    // A segment larger than any server maps: the client cannot make one and uses the
    // Unix socket alone.
    let too_big = [("WEFT_SHM_BYTES", "1073741824")];
    let out = weft(&cluster, &too_big, &["put", src.to_str().unwrap(), "/f"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let back = dir.path().join("back");
    let out = weft(&cluster, &too_big, &["get", "/f", back.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        std::fs::read(&back).unwrap() == data,
        "fallback round trip differs"
    );
    // Forced onto shared memory, the same client fails and says why.
    let forced = [("WEFT_SHM_BYTES", "1073741824"), ("WEFT_TRANSPORT", "shm")];
    let out = weft(&cluster, &forced, &["get", "/f", back.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no shared-memory transport"), "{stderr}");
}

/// A raw, authenticated connection to an io server's Unix socket.
struct Raw {
    stream: UnixStream,
    next: u64,
}

impl Raw {
    fn connect(cluster: &TestCluster, path: &str) -> Raw {
        let mut stream = UnixStream::connect(path).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        weft_rpc::auth::client_handshake(&mut stream, path, "hostile", &cluster.auth(), 10_000).unwrap();
        Raw { stream, next: 10 }
    }

    fn frame(&mut self, request: &Request) -> (Vec<u8>, u64) {
        self.next += 1;
        let mut bytes = Vec::new();
        write_frame(
            &mut bytes,
            FrameKind::Request,
            request.opcode() as u16,
            self.next,
            &request.encode_body(),
            &[],
        )
        .unwrap();
        (bytes, self.next)
    }

    fn answer(&mut self, id: u64) -> Result<(Response, Vec<u8>), WireError> {
        let header = read_header(&mut self.stream).unwrap_or_else(|e| panic!("no answer: {e:?}"));
        assert_eq!(header.request_id, id);
        let message = read_exact_vec(&mut self.stream, header.message_len as u64).unwrap();
        let data = read_exact_vec(&mut self.stream, header.data_len).unwrap();
        decode_result(&message).unwrap().map(|r| (r, data))
    }

    fn call(&mut self, request: &Request) -> Result<(Response, Vec<u8>), WireError> {
        let (bytes, id) = self.frame(request);
        std::io::Write::write_all(&mut self.stream, &bytes).unwrap();
        self.answer(id)
    }

    fn call_with_fd(&mut self, request: &Request, fd: i32) -> Result<(Response, Vec<u8>), WireError> {
        let (bytes, id) = self.frame(request);
        send_with_fd(self.stream.as_raw_fd(), &bytes, fd).unwrap();
        self.answer(id)
    }

    /// Sends a `ShmCall` body as given (possibly one the encoder would never make).
    fn call_raw(&mut self, opcode: u16, body: &[u8]) -> Result<(Response, Vec<u8>), WireError> {
        self.next += 1;
        let mut bytes = Vec::new();
        write_frame(&mut bytes, FrameKind::Request, opcode, self.next, body, &[]).unwrap();
        std::io::Write::write_all(&mut self.stream, &bytes).unwrap();
        let id = self.next;
        self.answer(id)
    }
}

fn refused(result: Result<(Response, Vec<u8>), WireError>, says: &str) -> WireError {
    match result {
        Err(e) => {
            assert!(
                e.message.contains(says),
                "expected an error saying {says:?}, got {e}"
            );
            e
        }
        Ok((r, _)) => panic!("expected a refusal ({says}), got {r:?}"),
    }
}

fn memfd(seals: i32, size: u64) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: plain system calls on a descriptor this test owns.
    unsafe {
        let raw = libc::memfd_create(c"weft-shm".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING);
        assert!(raw >= 0);
        assert_eq!(libc::ftruncate(raw, size as libc::off_t), 0);
        if seals != 0 {
            assert_eq!(libc::fcntl(raw, libc::F_ADD_SEALS, seals), 0);
        }
        std::os::fd::OwnedFd::from_raw_fd(raw)
    }
}

#[test]
fn hostile_segment_descriptors_are_refused_and_the_server_stays_up() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = TestCluster::start();
    let config = cluster.config();
    let server = config.io_servers().next().unwrap();
    let socket = server.socket.clone().expect("io servers have a socket");
    let pid = cluster.pid(server.id).unwrap() as u32;
    let mut raw = Raw::connect(&cluster, socket.to_str().unwrap());
    let sync = Request::Sync { inode: InodeId(1) };
    let call =
        |offset, len, data_len, request: &Request| Request::encode_shm_call(offset, len, data_len, request);

    // Calls before any segment.
    refused(raw.call_raw(141, &call(0, 4096, 0, &sync)), "no shared segment");
    // Attaches without a descriptor, with an unsealed one, one of another size, a
    // regular file, a segment too large.
    refused(
        raw.call(&Request::ShmAttach { bytes: 1 << 20 }),
        "without a descriptor",
    );
    let unsealed = memfd(0, 1 << 20);
    refused(
        raw.call_with_fd(&Request::ShmAttach { bytes: 1 << 20 }, unsealed.as_raw_fd()),
        "F_SEAL_SHRINK",
    );
    let small = memfd(libc::F_SEAL_SHRINK, 4096);
    refused(
        raw.call_with_fd(&Request::ShmAttach { bytes: 1 << 20 }, small.as_raw_fd()),
        "announced",
    );
    let file = tempfile::tempfile().unwrap();
    file.set_len(1 << 20).unwrap();
    refused(
        raw.call_with_fd(&Request::ShmAttach { bytes: 1 << 20 }, file.as_raw_fd()),
        "memfd",
    );
    let huge = memfd(libc::F_SEAL_SHRINK, 4096);
    refused(
        raw.call_with_fd(&Request::ShmAttach { bytes: 1 << 40 }, huge.as_raw_fd()),
        "refused",
    );
    assert_eq!(segments_of(pid), (0, 0), "a refused segment was kept");

    // A sound segment; it cannot be truncated under the server.
    let map = Mapping::create(1 << 20).unwrap();
    let (answer, _) = raw
        .call_with_fd(&Request::ShmAttach { bytes: 1 << 20 }, map.fd())
        .unwrap();
    assert_eq!(answer, Response::Done);
    // SAFETY: a system call on the test's own descriptor.
    assert_ne!(
        unsafe { libc::ftruncate(map.fd(), 0) },
        0,
        "a sealed segment shrank"
    );
    refused(
        raw.call_with_fd(&Request::ShmAttach { bytes: 1 << 20 }, map.fd()),
        "already",
    );

    // Regions outside the segment, wrapping, or with more data than room.
    refused(raw.call_raw(141, &call(1 << 20, 1, 0, &sync)), "outside");
    refused(
        raw.call_raw(141, &call((1 << 20) - 4095, 4096, 0, &sync)),
        "outside",
    );
    refused(raw.call_raw(141, &call(0, u64::MAX, 0, &sync)), "outside");
    refused(
        raw.call_raw(141, &call(u64::MAX - 1, 2, 0, &sync)),
        "shared-memory region",
    );
    refused(raw.call_raw(141, &call(0, 10, 11, &sync)), "shared-memory region");
    // A write whose region holds less than its ranges say.
    let write = Request::Write {
        inode: InodeId(1 << 40),
        striping: Striping {
            stripe_size_bytes: 65536,
            stripe_count: 1,
            server_index: 0,
        },
        ranges: vec![Range {
            offset: 0,
            len: 100_000,
        }],
    };
    let e = refused(raw.call_raw(141, &call(0, 4096, 4096, &write)), "");
    assert_ne!(e.code, ErrorCode::Internal, "{e}");
    // A one-range write is tried on the event loop first (`try_inline`); its region is
    // checked there by the same code as on a worker, and refused alike.
    refused(raw.call_raw(141, &call(1 << 20, 1, 0, &write)), "outside");
    refused(
        raw.call_raw(141, &call((1 << 20) - 4095, 4096, 4096, &write)),
        "outside",
    );
    // Nested calls and data in the frame as well.
    let nested = call(0, 1, 0, &sync);
    let mut body = call(0, 1, 0, &sync)[..24].to_vec();
    body.extend_from_slice(&141u16.to_le_bytes());
    body.extend_from_slice(&nested);
    refused(raw.call_raw(141, &body), "request through shared memory");

    // A write through the segment needs a capability, as one over the socket does: this
    // connection presented none, so it changes nothing.
    let client = cluster.client();
    let victim = pattern(256 << 10, 7);
    let file = client.create("/victim", &CreateOptions::default()).unwrap();
    file.write_at(0, &victim).unwrap();
    let layout = file.layout().clone();
    let index = layout
        .servers
        .iter()
        .position(|s| s.0 == server.id)
        .expect("a new file is striped over every io server");
    let forged = Request::Write {
        inode: file.inode(),
        striping: Striping {
            stripe_size_bytes: layout.stripe_size_bytes,
            stripe_count: layout.servers.len() as u32,
            server_index: index as u32,
        },
        ranges: vec![Range {
            offset: index as u64 * layout.stripe_size_bytes,
            len: 4096,
        }],
    };
    let e = refused(raw.call_raw(141, &call(0, 4096, 4096, &forged)), "capability");
    assert_eq!(e.code, ErrorCode::CapabilityRequired, "{e}");
    let mut back = vec![0u8; victim.len()];
    file.read_at(0, &mut back).unwrap();
    assert!(
        back == victim,
        "a write through shared memory without a capability changed the file"
    );
    drop(file);
    drop(client);

    // The server is up, still serves this connection, and a normal client too.
    assert!(raw.call(&Request::ServerInfo).is_ok());
    assert!(cluster.pid(server.id).is_some(), "the io server died");
    let client = cluster.client();
    round_trip_small(&client);
    drop(raw);
    eventually("the hostile connection's segment goes", || {
        segments_of(pid).0 <= 1
    });
}

fn round_trip_small(client: &Client) {
    let data = pattern(3 << 20, 1);
    let file = client.create("/after", &CreateOptions::default()).unwrap();
    file.write_at(0, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    file.read_at(0, &mut back).unwrap();
    assert!(back == data);
}

/// The read pool (`ShmAttachPool`, `ShmScatter`): attaches checked as the segment's
/// are, and scatter lists outside the pool, wrapping, overlapping, or not holding the
/// reply exactly refused with a clear error before any byte is placed, by a server
/// that stays up; a sound one places the reply's bytes, in order, across its pieces.
#[test]
fn hostile_pool_descriptors_are_refused_and_the_server_stays_up() {
    use weft_rpc::CapabilitySource;
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = TestCluster::start();
    let config = cluster.config();
    let server = config.io_servers().next().unwrap();
    let socket = server.socket.clone().expect("io servers have a socket");
    let pid = cluster.pid(server.id).unwrap() as u32;
    let mut raw = Raw::connect(&cluster, socket.to_str().unwrap());

    // A file with a stripe on this server, and a read of exactly that stripe.
    let client = cluster.client();
    let data = pattern(1 << 20, 9);
    let file = client.create("/pooled", &CreateOptions::default()).unwrap();
    file.write_at(0, &data).unwrap();
    let layout = file.layout().clone();
    let index = layout
        .servers
        .iter()
        .position(|s| s.0 == server.id)
        .expect("a new file is striped over every io server");
    let stripe = layout.stripe_size_bytes;
    let read = Request::Read {
        inode: file.inode(),
        striping: Striping {
            stripe_size_bytes: stripe,
            stripe_count: layout.servers.len() as u32,
            server_index: index as u32,
        },
        ranges: vec![Range {
            offset: index as u64 * stripe,
            len: stripe,
        }],
    };
    let expected = &data[(index as u64 * stripe) as usize..((index as u64 + 1) * stripe) as usize];
    let scatter = |pieces: &[(u64, u64)], request: &Request| Request::encode_shm_scatter(pieces, request);

    // Before any pool.
    refused(raw.call_raw(190, &scatter(&[(0, stripe)], &read)), "no read pool");
    // Attaches without a descriptor, unsealed, too large.
    refused(
        raw.call(&Request::ShmAttachPool { bytes: 1 << 20 }),
        "without a descriptor",
    );
    let unsealed = memfd(0, 1 << 20);
    refused(
        raw.call_with_fd(&Request::ShmAttachPool { bytes: 1 << 20 }, unsealed.as_raw_fd()),
        "F_SEAL_SHRINK",
    );
    let huge = memfd(libc::F_SEAL_SHRINK, 4096);
    refused(
        raw.call_with_fd(&Request::ShmAttachPool { bytes: 1 << 40 }, huge.as_raw_fd()),
        "refused",
    );
    // A sound pool, once.
    let pool = std::sync::Arc::new(Mapping::create(1 << 20).unwrap());
    let (answer, _) = raw
        .call_with_fd(&Request::ShmAttachPool { bytes: 1 << 20 }, pool.fd())
        .unwrap();
    assert_eq!(answer, Response::Done);
    refused(
        raw.call_with_fd(&Request::ShmAttachPool { bytes: 1 << 20 }, pool.fd()),
        "already",
    );
    let cap = cluster
        .server_capabilities()
        .capability(InodeId(0), weft_proto::capability::rights::SERVER)
        .unwrap()
        .expect("the test cluster asks for capabilities");
    raw.call(&Request::PresentCapability { cap, reset: true })
        .unwrap();

    let whole = weft_rpc::shm::Region::new(pool.clone(), 0, 1 << 20).unwrap();
    assert!(whole.write_at(0, &vec![0xee; 1 << 20]));
    let untouched = || whole.bytes(1 << 20).iter().all(|&b| b == 0xee);
    // Outside the pool, at its end, far past it.
    refused(
        raw.call_raw(190, &scatter(&[((1 << 20) - 100, stripe)], &read)),
        "outside",
    );
    refused(
        raw.call_raw(190, &scatter(&[(0, stripe - 4096), (1 << 20, 4096)], &read)),
        "outside",
    );
    refused(
        raw.call_raw(190, &scatter(&[(1 << 40, stripe)], &read)),
        "outside",
    );
    // Wrapping, empty, overlapping (the decoder's refusals).
    refused(
        raw.call_raw(190, &scatter(&[(u64::MAX - 1, stripe)], &read)),
        "pool piece",
    );
    refused(
        raw.call_raw(190, &scatter(&[(0, 0), (0, stripe)], &read)),
        "pool piece",
    );
    refused(
        raw.call_raw(190, &scatter(&[(0, stripe / 2), (100, stripe / 2)], &read)),
        "overlap",
    );
    refused(raw.call_raw(190, &scatter(&[], &read)), "pool pieces");
    // Pieces holding more or less than the reply.
    refused(
        raw.call_raw(190, &scatter(&[(0, stripe - 1)], &read)),
        "pieces hold",
    );
    refused(
        raw.call_raw(190, &scatter(&[(0, stripe), (stripe, 1)], &read)),
        "pieces hold",
    );
    // Anything but a read.
    let sync = Request::Sync { inode: file.inode() };
    refused(raw.call_raw(190, &scatter(&[(0, 4096)], &sync)), "only Read");
    assert!(untouched(), "a refused scatter placed bytes in the pool");

    // A sound one: two pieces, the second before the first in the pool.
    let half = stripe / 2;
    let (answer, frame_data) = raw
        .call_raw(190, &scatter(&[(512 << 10, half), (4096, stripe - half)], &read))
        .unwrap();
    assert_eq!(
        answer,
        Response::ShmPlaced {
            data_len: stripe,
            response: Box::new(Response::Bytes(stripe)),
        }
    );
    assert!(frame_data.is_empty());
    let pool_bytes = whole.bytes(1 << 20);
    assert!(pool_bytes[512 << 10..(512 << 10) + half as usize] == expected[..half as usize]);
    assert!(pool_bytes[4096..4096 + (stripe - half) as usize] == expected[half as usize..]);
    assert!(
        pool_bytes[..4096].iter().all(|&b| b == 0xee),
        "bytes before a piece changed"
    );

    // The server is up and serves this connection and a normal client.
    assert!(raw.call(&Request::ServerInfo).is_ok());
    assert!(cluster.pid(server.id).is_some(), "the io server died");
    drop(file);
    round_trip_small(&client);
    drop(raw);
    drop(whole);
    eventually("the hostile connection's pool goes", || {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        maps.lines().filter(|l| l.contains(SEGMENT_NAME)).count() <= 1
    });
}
