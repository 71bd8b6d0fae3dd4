//! Capabilities at the io servers and cache managers: a raw client holding the cluster
//! key gets a file's bytes only with a capability the manager granted after its
//! permission check, and only for that inode and that operation; forged, altered,
//! expired and revoked capabilities are refused (chmod revokes at once, expiry bounds
//! the rest); requests without one are refused for every operation class and change
//! nothing (checksums); the normal client renews transparently, so a long-lived open
//! file works past many expiries.

mod common;

use common::pattern;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_client::{Client, CreateOptions, Cred, InodeId, OpenOptions, SetAttr};
use weft_proto::capability::rights::{READ, WRITE};
use weft_proto::msg::{CacheFile, Request, Response};
use weft_proto::{Capability, ErrorCode, Range, Striping, WireError};
use weft_rpc::{CallReply, Connection, RpcError, Timeouts};
use weft_testkit::{ClusterOptions, TestCluster};

fn timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(5),
        request: Duration::from_secs(10),
    }
}

/// A connection that presents nothing by itself (a raw client with the key).
fn raw(cluster: &TestCluster, addr: &str) -> Arc<Connection> {
    Connection::connect(addr, "raw", &cluster.auth(), timeouts()).unwrap()
}

#[track_caller]
fn refused(result: Result<CallReply, RpcError>) -> WireError {
    match result {
        Err(RpcError::Remote { error, .. }) => error,
        Ok((response, _)) => panic!("expected a refusal, got {response:?}"),
        Err(e) => panic!("expected a refusal, got {e}"),
    }
}

#[track_caller]
fn capability_required(result: Result<CallReply, RpcError>) -> String {
    let e = refused(result);
    assert_eq!(e.code, ErrorCode::CapabilityRequired, "{}", e.message);
    e.message
}

fn grant(meta: &Connection, cred: &Cred, inode: InodeId, rights: u8) -> Result<Capability, WireError> {
    let request = Request::GrantCapability {
        cred: cred.clone(),
        inode,
        rights,
    };
    match meta.call(&request, &[]) {
        Ok((Response::Capability(cap), _)) => Ok(cap),
        Ok((other, _)) => panic!("GrantCapability answered {other:?}"),
        Err(RpcError::Remote { error, .. }) => Err(error),
        Err(e) => panic!("GrantCapability: {e}"),
    }
}

fn present(io: &Connection, cap: &Capability) -> Result<CallReply, RpcError> {
    io.call(
        &Request::PresentCapability {
            cap: cap.clone(),
            reset: false,
        },
        &[],
    )
}

/// FNV-1a of a file's bytes, read by the normal client.
fn checksum(client: &Client, path: &str, len: usize) -> u64 {
    let file = client.open(path, &OpenOptions::default()).unwrap();
    let mut back = vec![0u8; len];
    assert_eq!(file.read_at(0, &mut back).unwrap(), len, "{path} shrank");
    back.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// A one-io-server file's striping (every byte on server index 0).
fn whole(file: &weft_client::File) -> Striping {
    Striping {
        stripe_size_bytes: file.layout().stripe_size_bytes,
        stripe_count: file.layout().servers.len() as u32,
        server_index: 0,
    }
}

fn read(inode: InodeId, striping: Striping, len: u64) -> Request {
    Request::Read {
        inode,
        striping,
        ranges: vec![Range { offset: 0, len }],
    }
}

fn write(inode: InodeId, striping: Striping, len: u64) -> Request {
    Request::Write {
        inode,
        striping,
        ranges: vec![Range { offset: 0, len }],
    }
}

fn one_server() -> ClusterOptions {
    ClusterOptions {
        io_servers: 1,
        ..Default::default()
    }
}

fn make(client: &Client, path: &str, mode: u32, data: &[u8]) -> weft_client::File {
    let options = CreateOptions {
        mode,
        ..Default::default()
    };
    let file = client.create(path, &options).unwrap();
    file.write_at(0, data).unwrap();
    file.sync().unwrap();
    file
}

#[test]
fn a_capability_grants_only_its_inode_and_its_right() {
    let cluster = TestCluster::start_with(&one_server());
    let client = cluster.client();
    let data = pattern(1, 0, 64 << 10);
    let a = make(&client, "/a", 0o644, &data);
    let b = make(&client, "/b", 0o644, &data);
    let (sum_a, sum_b) = (
        checksum(&client, "/a", data.len()),
        checksum(&client, "/b", data.len()),
    );
    let meta = raw(&cluster, &cluster.meta_addr());
    let io = raw(&cluster, &cluster.addr(a.layout().servers[0].0));
    let striping = whole(&a);

    // Nothing presented: not even a read.
    capability_required(io.call(&read(a.inode(), striping, 4096), &[]));
    let read_a = grant(&meta, client.cred(), a.inode(), READ).unwrap();
    assert_eq!(read_a.inode, a.inode());
    present(&io, &read_a).unwrap();
    let (_, bytes) = io.call(&read(a.inode(), striping, 4096), &[]).unwrap();
    assert_eq!(bytes, data[..4096]);

    // A read capability writes nothing, truncates nothing, allocates nothing.
    let m = capability_required(io.call(&write(a.inode(), striping, 4096), &[0xEE; 4096]));
    assert!(m.contains("write capability for inode"), "{m}");
    let truncate = Request::Truncate {
        inode: a.inode(),
        striping,
        size: 0,
    };
    capability_required(io.call(&truncate, &[]));
    let allocate = Request::Allocate {
        inode: a.inode(),
        striping,
        offset: 0,
        len: 1 << 20,
        mode: 0,
    };
    capability_required(io.call(&allocate, &[]));
    capability_required(io.call(&Request::AppendLock { inode: a.inode() }, &[]));

    // A's capabilities are worth nothing for b, whatever their rights.
    capability_required(io.call(&read(b.inode(), striping, 4096), &[]));
    let write_a = grant(&meta, client.cred(), a.inode(), WRITE).unwrap();
    present(&io, &write_a).unwrap();
    capability_required(io.call(&write(b.inode(), striping, 4096), &[0xEE; 4096]));
    // A capability for a, altered to name b, does not verify.
    let mut renamed = write_a.clone();
    renamed.inode = b.inode();
    assert_eq!(refused(present(&io, &renamed)).code, ErrorCode::PermissionDenied);
    capability_required(io.call(&write(b.inode(), striping, 4096), &[0xEE; 4096]));

    // The write capability writes a (the test can tell a refusal from a success).
    io.call(&write(a.inode(), striping, 4), &[1, 2, 3, 4]).unwrap();
    a.write_at(0, &data[..4]).unwrap();
    assert_eq!(checksum(&client, "/a", data.len()), sum_a);
    assert_eq!(checksum(&client, "/b", data.len()), sum_b);

    // Directories have no data to grant; clients may ask for read and write only.
    let e = grant(&meta, client.cred(), InodeId::ROOT, READ).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument, "{}", e.message);
}

#[test]
fn requests_without_a_capability_are_refused_for_every_operation_class_and_change_nothing() {
    // One io server (1) and a separate cache manager (2).
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 1,
        ..ClusterOptions::cached("1", "16M")
    });
    let client = cluster.client();
    let data = pattern(2, 0, 256 << 10);
    let file = make(&client, "/precious", 0o600, &data);
    let before = checksum(&client, "/precious", data.len());
    let inode = file.inode();
    let striping = whole(&file);
    let io = raw(&cluster, &cluster.addr(file.layout().servers[0].0));
    let manager = cluster.config().cache_managers()[0].id;
    let cache = raw(&cluster, &cluster.addr(manager));
    let cached = CacheFile {
        inode,
        layout: file.layout().clone(),
        incarnation: 0,
    };
    let blocks = Striping {
        stripe_size_bytes: 64 << 10,
        stripe_count: 1,
        server_index: 0,
    };
    let next = InodeId(inode.0 + 1);
    let attempts: Vec<(&str, &Connection, Request, Vec<u8>, ErrorCode)> = vec![
        (
            "read",
            &io,
            read(inode, striping, 4096),
            vec![],
            ErrorCode::CapabilityRequired,
        ),
        (
            "write",
            &io,
            write(inode, striping, 4096),
            vec![0xEE; 4096],
            ErrorCode::CapabilityRequired,
        ),
        (
            "truncate",
            &io,
            Request::Truncate {
                inode,
                striping,
                size: 0,
            },
            vec![],
            ErrorCode::CapabilityRequired,
        ),
        (
            "remove",
            &io,
            Request::ObjRemove { inodes: vec![inode] },
            vec![],
            ErrorCode::PermissionDenied,
        ),
        // Setting an object's time (what a stat shows) is the manager's, after its
        // permission check of a utimensat.
        (
            "set times",
            &io,
            Request::ObjTimes {
                inodes: vec![inode],
                mtime: weft_proto::Timespec::default(),
            },
            vec![],
            ErrorCode::PermissionDenied,
        ),
        // Planting an object for the next inode number is a server's operation too.
        (
            "create",
            &io,
            Request::ObjCreate { inodes: vec![next] },
            vec![],
            ErrorCode::PermissionDenied,
        ),
        (
            "sync",
            &io,
            Request::Sync { inode },
            vec![],
            ErrorCode::CapabilityRequired,
        ),
        (
            "lock",
            &io,
            Request::ExtentLock {
                inode,
                exclusive: true,
                attempt: 0,
                ranges: vec![Range { offset: 0, len: 4096 }],
            },
            vec![],
            ErrorCode::CapabilityRequired,
        ),
        (
            "revoke",
            &io,
            Request::RevokeCapabilities {
                inodes: vec![inode],
                at_ms: u64::MAX,
            },
            vec![],
            ErrorCode::PermissionDenied,
        ),
        (
            "cached write",
            &cache,
            Request::ViaCache {
                file: cached.clone(),
                request: Box::new(write(inode, blocks, 4096)),
            },
            vec![0xEE; 4096],
            ErrorCode::CapabilityRequired,
        ),
        (
            "cached read",
            &cache,
            Request::ViaCache {
                file: cached.clone(),
                request: Box::new(read(inode, blocks, 4096)),
            },
            vec![],
            ErrorCode::CapabilityRequired,
        ),
        (
            "cached truncate",
            &cache,
            Request::CacheTruncate {
                file: cached.clone(),
                size: 0,
            },
            vec![],
            ErrorCode::CapabilityRequired,
        ),
        (
            "cached punch",
            &cache,
            Request::CachePunch {
                file: cached.clone(),
                offset: 0,
                len: 4096,
            },
            vec![],
            ErrorCode::CapabilityRequired,
        ),
        (
            "cache drop",
            &cache,
            Request::CacheDrop { inodes: vec![inode] },
            vec![],
            ErrorCode::CapabilityRequired,
        ),
        (
            "cache drop of removed files",
            &cache,
            Request::CacheDrop {
                inodes: vec![inode, next],
            },
            vec![],
            ErrorCode::PermissionDenied,
        ),
        // A migration's hold of a cached file is the manager's alone: a client holding
        // one would stall every writer of the file.
        (
            "cache migration hold",
            &cache,
            Request::CacheMigrate {
                inode,
                step: weft_proto::msg::migrate_step::FREEZE,
                layout: None,
            },
            vec![],
            ErrorCode::PermissionDenied,
        ),
    ];
    for (what, connection, request, bulk, code) in attempts {
        let e = refused(connection.call(&request, &bulk));
        assert_eq!(e.code, code, "{what}: {}", e.message);
        assert!(
            e.message.contains("server"),
            "{what}: the refusal names no server: {}",
            e.message
        );
    }
    assert_eq!(checksum(&client, "/precious", data.len()), before);
    assert_eq!(client.stat("/precious").unwrap().size, data.len() as u64);
    // The next file gets a fresh, empty object (nothing was planted).
    let fresh = client.create("/fresh", &CreateOptions::default()).unwrap();
    assert_eq!(fresh.size().unwrap(), 0);
}

#[test]
fn forged_and_altered_capabilities_are_refused() {
    let cluster = TestCluster::start_with(&one_server());
    let client = cluster.client();
    let data = pattern(3, 0, 8192);
    let file = make(&client, "/f", 0o644, &data);
    let meta = raw(&cluster, &cluster.meta_addr());
    let io = raw(&cluster, &cluster.addr(file.layout().servers[0].0));
    let genuine = grant(&meta, client.cred(), file.inode(), READ | WRITE).unwrap();

    // Every byte of every field, flipped in its lowest and highest bit.
    let mut tried = 0;
    for field in 0..5 {
        let width = [8, 1, 8, 8, 32][field];
        for byte in 0..width {
            for mask in [0x01u8, 0x80] {
                let mut cap = genuine.clone();
                match field {
                    0 => cap.inode.0 ^= (mask as u64) << (8 * byte),
                    1 => cap.rights ^= mask,
                    2 => cap.issued_ms ^= (mask as u64) << (8 * byte),
                    3 => cap.expiry_ms ^= (mask as u64) << (8 * byte),
                    _ => cap.mac[byte] ^= mask,
                }
                assert!(
                    present(&io, &cap).is_err(),
                    "field {field} byte {byte} ^ {mask:#x} was accepted"
                );
                tried += 1;
            }
        }
    }
    assert_eq!(tried, 2 * (8 + 1 + 8 + 8 + 32));
    // Random MACs.
    let mut rng = common::Rng::new(3);
    for _ in 0..200 {
        let mut cap = genuine.clone();
        for b in cap.mac.iter_mut() {
            *b = rng.next_u64() as u8;
        }
        let e = refused(present(&io, &cap));
        assert_eq!(e.code, ErrorCode::PermissionDenied, "{}", e.message);
        assert!(e.message.contains("does not verify"), "{}", e.message);
    }
    // A key holder who derives a capability key from the cluster key, as the servers
    // would without their own key (`weft up` makes capability.key, servers only).
    let cluster_key = weft_rpc::ClusterKey::load(&cluster.key_path()).unwrap();
    let derived = weft_rpc::CapabilityKey::new(&cluster_key).issue(
        file.inode(),
        READ | WRITE,
        weft_rpc::capability::now_ms(),
        60_000,
    );
    let e = refused(present(&io, &derived));
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{}", e.message);
    let server = weft_rpc::CapabilityKey::new(&cluster_key).server();
    assert_eq!(refused(present(&io, &server)).code, ErrorCode::PermissionDenied);
    // None of them let anything through; the genuine one does.
    capability_required(io.call(&read(file.inode(), whole(&file), 4096), &[]));
    present(&io, &genuine).unwrap();
    let (_, bytes) = io.call(&read(file.inode(), whole(&file), 4096), &[]).unwrap();
    assert_eq!(bytes, data[..4096]);
}

/// In `claimed` mode requests act as the uid they claim, so one test process can be
/// two users: the owner, and another user whose rights a chmod takes away.
#[test]
fn chmod_revokes_capabilities_at_once_and_clients_still_permitted_renew() {
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 1,
        ..ClusterOptions::claimed_identity()
    });
    let owner = cluster.client();
    let other = Cred {
        uid: 4242,
        gid: 4242,
        groups: vec![],
    };
    let data = pattern(4, 0, 64 << 10);
    let file = make(&owner, "/shared", 0o644, &data);
    let meta = raw(&cluster, &cluster.meta_addr());
    let io = raw(&cluster, &cluster.addr(file.layout().servers[0].0));
    let striping = whole(&file);

    // The other user may read (0644), not write.
    let e = grant(&meta, &other, file.inode(), WRITE).unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{}", e.message);
    let cap = grant(&meta, &other, file.inode(), READ).unwrap();
    present(&io, &cap).unwrap();
    io.call(&read(file.inode(), striping, 4096), &[]).unwrap();

    // A normal client of that user, with the file open.
    let reader = Client::connect_as(&cluster.meta_addr(), cluster.auth(), other.clone()).unwrap();
    let open = reader.open("/shared", &OpenOptions::default()).unwrap();
    let mut back = vec![0u8; data.len()];
    open.read_at(0, &mut back).unwrap();
    assert_eq!(back, data);

    // A chmod that leaves it the read permission: the old capabilities go (the raw
    // client's is refused), and the normal client renews without noticing.
    owner
        .setattr(
            "/shared",
            &SetAttr {
                mode: Some(0o604),
                ..Default::default()
            },
        )
        .unwrap();
    let revoked = Instant::now();
    let message = loop {
        match io.call(&read(file.inode(), striping, 4096), &[]) {
            Ok(_) => {
                assert!(
                    revoked.elapsed() < Duration::from_secs(5),
                    "still served 5 s after the chmod"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => break e.to_string(),
        }
    };
    // Well within the 60 s lifetime: the manager pushed the revocation.
    eprintln!("capability refused {:?} after the chmod", revoked.elapsed());
    assert!(message.contains("revoked"), "{message}");
    let e = refused(present(&io, &cap));
    assert_eq!(e.code, ErrorCode::CapabilityRequired, "{}", e.message);
    back.fill(0);
    open.read_at(0, &mut back).unwrap();
    assert_eq!(back, data);

    // A chmod that takes the permission away: the open file stops reading, with a
    // permission error (the manager checked again), and no new capability is granted.
    owner
        .setattr(
            "/shared",
            &SetAttr {
                mode: Some(0o600),
                ..Default::default()
            },
        )
        .unwrap();
    let revoked = Instant::now();
    let e = loop {
        match open.read_at(0, &mut back) {
            Ok(_) => {
                assert!(
                    revoked.elapsed() < Duration::from_secs(5),
                    "still read 5 s after the chmod"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => break e,
        }
    };
    assert_eq!(e.code(), ErrorCode::PermissionDenied, "{e}");
    let e = grant(&meta, &other, file.inode(), READ).unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{}", e.message);
    // The owner is unaffected.
    let mine = owner.open("/shared", &OpenOptions::default()).unwrap();
    mine.read_at(0, &mut back).unwrap();
    assert_eq!(back, data);
}

#[test]
fn expired_capabilities_are_refused_and_a_long_open_file_keeps_working() {
    let lifetime = Duration::from_millis(2000);
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 2,
        extra: vec![
            "--capability-lifetime-ms".into(),
            lifetime.as_millis().to_string(),
        ],
        ..Default::default()
    });
    let client = cluster.client();
    let data = pattern(5, 0, 1 << 20);
    let file = make(&client, "/long", 0o644, &data);
    let meta = raw(&cluster, &cluster.meta_addr());
    let index = 0;
    let io = raw(&cluster, &cluster.addr(file.layout().servers[index].0));
    let striping = Striping {
        stripe_size_bytes: file.layout().stripe_size_bytes,
        stripe_count: file.layout().servers.len() as u32,
        server_index: index as u32,
    };
    let cap = grant(&meta, client.cred(), file.inode(), READ).unwrap();
    assert!(cap.expiry_ms - cap.issued_ms <= lifetime.as_millis() as u64);
    present(&io, &cap).unwrap();
    io.call(&read(file.inode(), striping, 4096), &[]).unwrap();
    std::thread::sleep(lifetime + Duration::from_millis(300));
    let m = capability_required(io.call(&read(file.inode(), striping, 4096), &[]));
    assert!(m.contains("expired"), "{m}");
    let m = capability_required(present(&io, &cap));
    assert!(m.contains("expired"), "{m}");

    // The normal client: one open handle, used across four lifetimes.
    let open = client
        .open(
            "/long",
            &OpenOptions {
                write: true,
                ..Default::default()
            },
        )
        .unwrap();
    let start = Instant::now();
    let mut round = 0u64;
    while start.elapsed() < 4 * lifetime {
        let chunk = pattern(100 + round, 0, 64 << 10);
        open.write_at(round * 4096, &chunk).unwrap();
        let mut back = vec![0u8; chunk.len()];
        open.read_at(round * 4096, &mut back).unwrap();
        assert_eq!(back, chunk, "round {round}");
        round += 1;
        std::thread::sleep(lifetime / 3);
    }
    assert!(round >= 10, "{round} rounds");
}

#[test]
fn unlinking_a_file_ends_what_old_capabilities_can_do() {
    let cluster = TestCluster::start_with(&one_server());
    let client = cluster.client();
    let data = pattern(6, 0, 8192);
    let file = make(&client, "/gone", 0o644, &data);
    let inode = file.inode();
    let striping = whole(&file);
    let io = raw(&cluster, &cluster.addr(file.layout().servers[0].0));
    drop(file);
    let meta = raw(&cluster, &cluster.meta_addr());
    let cap = grant(&meta, client.cred(), inode, WRITE).unwrap();
    present(&io, &cap).unwrap();
    io.call(&write(inode, striping, 4), &[9, 9, 9, 9]).unwrap();
    client.unlink("/gone").unwrap();
    // The manager purges the objects within a second or two; the old capability then
    // writes nothing (no object is recreated) and no new one is granted.
    let unlinked = Instant::now();
    loop {
        match io.call(&write(inode, striping, 4), &[9, 9, 9, 9]) {
            Ok(_) => {
                assert!(
                    unlinked.elapsed() < Duration::from_secs(10),
                    "still written 10 s after unlink"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(RpcError::Remote { error, .. }) => {
                assert_eq!(error.code, ErrorCode::Stale, "{}", error.message);
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    // The io server refuses once it removed the objects; the manager forgets the
    // orphan (until then it still grants reads, see `may_access_data`) once every
    // server answered its purge, a moment later.
    let purged = Instant::now();
    let e = loop {
        match grant(&meta, client.cred(), inode, READ) {
            Ok(_) => {
                assert!(
                    purged.elapsed() < Duration::from_secs(10),
                    "a read capability still granted 10 s after the objects were purged"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => break e,
        }
    };
    assert_eq!(e.code, ErrorCode::Stale, "{}", e.message);
    let stats = io
        .call(
            &Request::ObjStat {
                items: vec![(inode, striping)],
            },
            &[],
        )
        .unwrap();
    assert_eq!(
        stats.0,
        Response::ObjStats(vec![(u64::MAX, 0)]),
        "the object came back"
    );
}

/// A collective open's handoff (`File::handoff_with_capability`) carries the opener's
/// capability: another process of the same user that opens from it reads and writes
/// without a grant of its own, shown by doing so with the manager killed, where a
/// process given the plain handoff cannot (it must ask the manager). One whose carried
/// capability was revoked since (a chmod) asks the manager and goes on.
#[test]
fn a_handoff_carries_the_capability_and_a_revoked_one_is_asked_for_again() {
    let cluster = TestCluster::start();
    let opener = cluster.client();
    let data = pattern(7, 0, 256 << 10);

    // Revoked after the handoff: the receiver's present is refused, it asks anew.
    let revoked = make(&opener, "/revoked", 0o644, &data);
    let handoff = revoked.handoff_with_capability();
    opener
        .setattr(
            "/revoked",
            &SetAttr {
                mode: Some(0o664),
                ..Default::default()
            },
        )
        .unwrap();
    let receiver = cluster.client();
    let file = receiver.open_handoff(&handoff, "/revoked", true).unwrap();
    let new = pattern(8, 0, data.len());
    file.write_at(0, &new).unwrap();
    let mut back = vec![0u8; new.len()];
    assert_eq!(file.read_at(0, &mut back).unwrap(), new.len());
    assert!(
        back == new,
        "the receiver of a revoked capability read back other bytes"
    );

    // The manager gone: only the receiver of the capability can touch the data.
    let carried = make(&opener, "/carried", 0o644, &data);
    let with_cap = carried.handoff_with_capability();
    let plain = carried.handoff();
    assert!(with_cap.len() > plain.len(), "no capability in the handoff");
    let receiver = cluster.client();
    let control = cluster.client();
    cluster.kill9(0);
    let file = receiver.open_handoff(&with_cap, "/carried", true).unwrap();
    let new = pattern(9, 0, data.len());
    file.write_at(0, &new).unwrap();
    let mut back = vec![0u8; new.len()];
    assert_eq!(file.read_at(0, &mut back).unwrap(), new.len());
    assert!(back == new, "the receiver read back other bytes");
    let without = control.open_handoff(&plain, "/carried", true).unwrap();
    let e = without
        .write_at(0, &data)
        .expect_err("a process without the capability wrote with the manager gone");
    assert!(
        e.to_string().contains("127.0.0.1"),
        "the error names no server: {e}"
    );
}

/// A damaged capable handoff is refused with a clear error, not adopted.
#[test]
fn a_handoff_whose_capability_names_another_inode_is_refused() {
    let cluster = TestCluster::start_with(&one_server());
    let client = cluster.client();
    let data = pattern(3, 0, 4096);
    let a = make(&client, "/a", 0o644, &data);
    let b = make(&client, "/b", 0o644, &data);
    let (ha, hb) = (a.handoff_with_capability(), b.handoff_with_capability());
    // Version, attributes' length, attributes, uid, capability: give a's attributes
    // b's capability.
    let head = |plain: &[u8]| 1 + 8 + (plain.len() - 1) + 4;
    let mut spliced = ha[..head(&a.handoff())].to_vec();
    spliced.extend_from_slice(&hb[head(&b.handoff())..]);
    let e = client
        .open_handoff(&spliced, "/a", true)
        .err()
        .expect("a spliced handoff was accepted");
    assert_eq!(e.code(), ErrorCode::InvalidArgument, "{e}");
    assert!(e.to_string().contains("its capability is for inode"), "{e}");
    // Each genuine one opens.
    assert!(client.open_handoff(&ha, "/a", true).is_ok());
    let truncated = &ha[..ha.len() - 3];
    assert!(client.open_handoff(truncated, "/a", true).is_err());
}

/// A writer is granted reading too where the user may read, so reading back what it
/// wrote needs no second grant (shown with the manager killed after the write); a user
/// who may write a file but not read it still writes (the grant falls back to the
/// write right alone) and still cannot read.
#[test]
fn a_writers_grant_covers_reading_back_and_write_only_users_still_write() {
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 2,
        ..ClusterOptions::claimed_identity()
    });
    let owner = cluster.client();
    let data = pattern(11, 0, 192 << 10);

    // Write-only for others: 0622.
    make(&owner, "/drop-box", 0o622, &data);
    let other = Cred {
        uid: 4343,
        gid: 4343,
        groups: vec![],
    };
    let writer = Client::connect_as(&cluster.meta_addr(), cluster.auth(), other.clone()).unwrap();
    // The manager refuses this user both rights at once and grants writing alone.
    let meta = raw(&cluster, &cluster.meta_addr());
    let inode = owner.stat("/drop-box").unwrap().inode;
    let both = grant(&meta, &other, inode, READ | WRITE).unwrap_err();
    assert_eq!(both.code, ErrorCode::PermissionDenied, "{}", both.message);
    grant(&meta, &other, inode, WRITE).expect("write alone is granted");
    // A write-only handle (as FUSE opens for O_WRONLY): its client asks for both,
    // is refused, and asks for writing alone.
    let file = writer
        .open_attr(writer.resolve("/drop-box").unwrap(), true)
        .unwrap();
    let new = pattern(12, 0, data.len());
    file.write_at(0, &new).unwrap();
    assert_eq!(checksum(&owner, "/drop-box", new.len()), {
        new.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ *b as u64).wrapping_mul(0x100_0000_01b3)
        })
    });

    let mut back = vec![0u8; 16];
    let e = file.read_at(0, &mut back).expect_err("a write-only user read");
    assert_eq!(e.code(), ErrorCode::PermissionDenied, "{e}");

    // The owner writes, the manager dies, the owner reads back on the same handle.
    let file = owner.create("/mine", &CreateOptions::default()).unwrap();
    file.write_at(0, &data).unwrap();
    cluster.kill9(0);
    let mut back = vec![0u8; data.len()];
    assert_eq!(file.read_at(0, &mut back).unwrap(), data.len());
    assert!(back == data, "read back other bytes");
}
