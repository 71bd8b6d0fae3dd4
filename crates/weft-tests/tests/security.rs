//! A cluster started with `weft up` serves only clients that hold its key, and listens
//! on this machine only: raw clients with no key, a wrong key, or a recorded handshake
//! replayed are refused by the manager, an io server and a cache manager before any
//! request runs, and the data and namespace are unchanged (checksums); the key is
//! private to its owner, `weft status` says how the cluster is secured, and every
//! listening socket is on loopback.

mod common;

use common::pattern;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use weft_client::{Client, CreateOptions, InodeId};
use weft_proto::frame::{FrameHeader, FrameKind, FRAME_HEADER_BYTES, PROTOCOL_VERSION};
use weft_proto::handshake::{Identity, NONCE_BYTES};
use weft_proto::msg::{decode_result, CacheFile, Request, Response};
use weft_proto::{Cred, ErrorCode, Range, Striping, WireError};
use weft_rpc::auth::Side;
use weft_rpc::{ClientAuth, ClusterKey, Connection, RpcError, Timeouts};
use weft_testkit::{ClusterOptions, TestCluster};

fn frame(id: u64, request: &Request, data: &[u8]) -> Vec<u8> {
    let body = request.encode_body();
    let header = FrameHeader {
        version: PROTOCOL_VERSION,
        kind: FrameKind::Request,
        opcode: request.opcode() as u16,
        request_id: id,
        message_len: body.len() as u32,
        data_len: data.len() as u64,
    };
    let mut f = header.encode().to_vec();
    f.extend_from_slice(&body);
    f.extend_from_slice(data);
    f
}

fn reply(s: &mut TcpStream) -> Option<Result<Response, WireError>> {
    let mut head = [0u8; FRAME_HEADER_BYTES];
    if s.read_exact(&mut head).is_err() {
        return None;
    }
    let h = FrameHeader::decode(&head).unwrap();
    let mut body = vec![0; h.message_len as usize + h.data_len as usize];
    s.read_exact(&mut body).unwrap();
    Some(decode_result(&body[..h.message_len as usize]).unwrap())
}

/// The connection ends with a refusal and nothing else.
#[track_caller]
fn refused(s: &mut TcpStream) -> String {
    let message = match reply(s) {
        Some(Err(e)) => {
            assert_eq!(e.code, ErrorCode::PermissionDenied, "{}", e.message);
            e.message
        }
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert!(reply(s).is_none(), "the connection went on after: {message}");
    message
}

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// FNV-1a, to compare contents before and after by a checksum.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// What an attacker would like to do to each server: remove the file's name, its
/// object, its cached blocks; overwrite its bytes.
fn attacks(inode: InodeId, cache: &CacheFile) -> Vec<(&'static str, Request, Vec<u8>)> {
    let striping = Striping {
        stripe_size_bytes: cache.layout.stripe_size_bytes,
        stripe_count: cache.layout.servers.len() as u32,
        server_index: 0,
    };
    let write = Request::Write {
        inode,
        striping,
        ranges: vec![Range { offset: 0, len: 4096 }],
    };
    vec![
        (
            "meta",
            Request::Unlink {
                cred: Cred::root(),
                parent: InodeId::ROOT,
                name: "precious".into(),
                keep: None,
            },
            Vec::new(),
        ),
        ("io", write.clone(), vec![0xEE; 4096]),
        ("io", Request::ObjRemove { inodes: vec![inode] }, Vec::new()),
        (
            "cache",
            Request::ViaCache {
                file: cache.clone(),
                request: Box::new(write),
            },
            vec![0xEE; 4096],
        ),
        ("cache", Request::CacheDrop { inodes: vec![inode] }, Vec::new()),
    ]
}

#[test]
fn clients_without_the_key_are_refused_by_every_server_and_change_nothing() {
    // A separate cache manager (server 5) besides the manager (0) and io servers.
    let cluster = TestCluster::start_with(&ClusterOptions::cached("1", "16M"));
    let client = cluster.client();
    let data = pattern(12, 0, 1 << 20);
    let file = client.create("/precious", &CreateOptions::default()).unwrap();
    file.write_at(0, &data).unwrap();
    file.sync().unwrap();
    let inode = file.inode();
    let layout = file.layout().clone();
    let before = checksum(&data);
    let addr = |role: &str| match role {
        "meta" => cluster.meta_addr(),
        "io" => cluster.addr(layout.servers[0].0),
        _ => cluster.addr(5),
    };
    let cache = CacheFile {
        inode,
        layout: layout.clone(),
        incarnation: 0,
    };
    let key = ClusterKey::load(&cluster.key_path()).unwrap();
    let wrong = ClientAuth::cluster(ClusterKey::generate().unwrap());
    let timeouts = Timeouts {
        connect: Duration::from_secs(5),
        request: Duration::from_secs(10),
    };

    for (role, request, bulk) in attacks(inode, &cache) {
        let addr = addr(role);
        // No key: the request itself, first thing on the connection.
        let mut s = connect(&addr);
        s.write_all(&frame(1, &request, &bulk)).unwrap();
        let m = refused(&mut s);
        assert!(m.contains("authenticate first"), "{role}: {m}");

        // A wrong key.
        match Connection::connect(&addr, "forger", &wrong, timeouts) {
            Err(e @ RpcError::Authentication { .. }) => {
                assert!(e.to_string().contains("WEFT_KEY"), "{role}: {e}")
            }
            other => panic!("{role}: a wrong key was accepted: {:?}", other.map(|_| ())),
        }

        // A genuine handshake recorded, then replayed with the attack behind it.
        let mut genuine = connect(&addr);
        let hello = frame(
            1,
            &Request::Hello {
                client: "victim".into(),
            },
            &[],
        );
        genuine.write_all(&hello).unwrap();
        let Some(Ok(Response::Challenge { nonce: server_nonce })) = reply(&mut genuine) else {
            panic!("{role}: no challenge");
        };
        let client_nonce = [9; NONCE_BYTES];
        let proof = key.proof(Side::Client, &server_nonce, &client_nonce, &Identity::Cluster);
        let authenticate = frame(
            2,
            &Request::Authenticate {
                nonce: client_nonce,
                identity: Identity::Cluster,
                proof,
            },
            &[],
        );
        genuine.write_all(&authenticate).unwrap();
        assert!(
            matches!(reply(&mut genuine), Some(Ok(Response::Hello { .. }))),
            "{role}"
        );
        drop(genuine);
        let mut replay = connect(&addr);
        replay.write_all(&hello).unwrap();
        replay.write_all(&authenticate).unwrap();
        replay.write_all(&frame(3, &request, &bulk)).unwrap();
        let Some(Ok(Response::Challenge { nonce })) = reply(&mut replay) else {
            panic!("{role}: no challenge on the replay");
        };
        assert_ne!(nonce, server_nonce, "{role}: a server nonce came twice");
        let m = refused(&mut replay);
        assert!(m.contains("authentication failed"), "{role}: {m}");
    }

    // Nothing changed: the name, the object, the cached and stored bytes.
    let fresh = Client::connect_with(&cluster.meta_addr(), cluster.auth()).unwrap();
    let names: Vec<String> = fresh
        .readdir("/")
        .unwrap()
        .into_iter()
        .map(|e| e.name.to_string())
        .collect();
    assert_eq!(names, vec!["precious".to_string()]);
    let reopened = fresh.open("/precious", &Default::default()).unwrap();
    assert_eq!(reopened.inode(), inode);
    let mut back = vec![0u8; data.len()];
    assert_eq!(reopened.read_at(0, &mut back).unwrap(), data.len());
    assert_eq!(checksum(&back), before, "the file's bytes changed");
    // The servers logged who they refused.
    let logs = std::fs::read_to_string(cluster.home().join("logs/server-0.log")).unwrap();
    assert!(logs.contains("does not hold this cluster's key"), "{logs}");
}

#[test]
fn the_key_is_private_status_tells_how_the_cluster_is_secured_and_nothing_listens_beyond_loopback() {
    use std::os::unix::fs::PermissionsExt;
    let cluster = TestCluster::start();
    let key = cluster.key_path();
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600,
        "weft up makes the key readable by its owner only"
    );

    let out = cluster.weft(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("every connection is authenticated"), "{text}");
    assert!(text.contains(&key.display().to_string()), "{text}");
    assert!(text.contains("loopback only"), "{text}");

    // Every socket a server of the cluster listens on is on the loopback interface.
    let config = cluster.config();
    let mut listening = 0;
    for server in &config.servers {
        let pid = cluster.pid(server.id).expect("server running");
        for address in listening_addresses(pid) {
            listening += 1;
            assert!(
                address.starts_with("127."),
                "server {} listens on {address}",
                server.id
            );
        }
    }
    // `weft up` gives every server a metrics endpoint, on loopback too.
    assert_eq!(
        listening,
        2 * config.servers.len(),
        "two TCP listeners per server: rpc and metrics"
    );

    // A key that others may read is refused, with the fix in the message.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = cluster.weft(&["ls", "/"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("chmod 600"));
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(cluster.weft(&["ls", "/"]).status.success());
}

/// Local addresses ("a.b.c.d:port") of the TCP sockets `pid` listens on, from /proc.
fn listening_addresses(pid: i32) -> Vec<String> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            l.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')
                .map(str::to_owned)
        })
        .collect();
    let mut out = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local address, state 0A = LISTEN, inode
            if f.len() > 9 && f[3] == "0A" && inodes.iter().any(|i| i == f[9]) {
                out.push(decode_address(f[1]));
            }
        }
    }
    out
}

/// /proc/net/tcp's "0100007F:1F90" as "127.0.0.1:8080" (IPv6 shown as hex).
fn decode_address(hex: &str) -> String {
    let (ip, port) = hex.split_once(':').unwrap();
    let port = u16::from_str_radix(port, 16).unwrap();
    if ip.len() == 8 {
        let v = u32::from_str_radix(ip, 16).unwrap();
        format!("{}:{port}", std::net::Ipv4Addr::from(v.to_le_bytes()))
    } else {
        format!("[{ip}]:{port}")
    }
}

#[test]
fn a_cluster_spanning_machines_does_not_start_without_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let description = dir.path().join("cluster.toml");
    // Addresses of other machines: the servers would face a network. (Nothing is
    // contacted: the server stops before it binds.)
    std::fs::write(
        &description,
        "[[server]]\nid = 0\nroles = [\"meta\"]\naddr = \"node0.example:7400\"\n\n\
         [[server]]\nid = 1\nroles = [\"io\"]\naddr = \"node1.example:7400\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(weft_testkit::bin("weftd"))
        .arg("--config")
        .arg(&description)
        .args(["--id", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("spans machines") && stderr.contains("no cluster key"),
        "{stderr}"
    );
    // A standalone server without --key is refused too.
    let out = std::process::Command::new(weft_testkit::bin("weftd"))
        .args(["--role", "io", "--data"])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--key"));
}
