//! Malformed and hostile input to the request and response decoders (the wire form of
//! every well-formed message is pinned by `tests/golden.rs`).

use super::*;
use crate::capability::{self, Capability};
use crate::codec::{DecodeError, Reader, Wire, Writer};
use crate::handshake::{Identity, NONCE_BYTES, PROOF_BYTES};
use crate::name::Name;
use crate::types::*;
use weft_layout::view::View;
use weft_layout::{InodeId, Layout, ServerId};

fn test_capability() -> Capability {
    Capability {
        inode: InodeId(77),
        rights: capability::rights::WRITE,
        issued_ms: 1,
        expiry_ms: u64::MAX,
        mac: std::array::from_fn(|i| i as u8),
    }
}

#[test]
fn capabilities_with_unknown_rights_or_short_macs_are_refused() {
    let mut cap = test_capability();
    for rights in [0u8, 8, 0x80, 0xff] {
        cap.rights = rights;
        let body = Request::PresentCapability {
            cap: cap.clone(),
            reset: false,
        }
        .encode_body();
        assert!(
            Request::decode(Opcode::PresentCapability as u16, &body).is_err(),
            "{rights}"
        );
    }
    // A client may ask for read and write only, never for a server's rights.
    for rights in [0u8, capability::rights::SERVER, 0x10] {
        let body = Request::GrantCapability {
            cred: cred(),
            inode: InodeId(3),
            rights,
        }
        .encode_body();
        assert!(
            Request::decode(Opcode::GrantCapability as u16, &body).is_err(),
            "{rights}"
        );
    }
    // A MAC of another length.
    let mut w = Writer::default();
    InodeId(1).encode(&mut w);
    w.u8(capability::rights::READ);
    w.u64(0);
    w.u64(1);
    w.bytes(&[0u8; 31]);
    w.bool(false);
    assert!(Request::decode(Opcode::PresentCapability as u16, &w.bytes).is_err());
}

fn cred() -> Cred {
    Cred {
        uid: 1000,
        gid: 100,
        groups: vec![4, 27],
    }
}

fn cache_file() -> CacheFile {
    CacheFile {
        inode: InodeId(3),
        layout: Layout {
            stripe_size_bytes: 4096,
            servers: vec![ServerId(2), ServerId(5)],
            replication: Default::default(),
        },
        incarnation: 77,
    }
}

/// Only reads and writes travel through a cache manager: anything else nested in a
/// `ViaCache` (another `ViaCache` included) is refused at decode.
#[test]
fn only_data_requests_nest_in_via_cache() {
    for inner in [
        Request::Sync { inode: InodeId(3) },
        Request::ObjRemove {
            inodes: vec![InodeId(3)],
        },
        Request::ViaCache {
            file: cache_file(),
            request: Box::new(Request::Sync { inode: InodeId(1) }),
        },
    ] {
        let mut w = Writer::default();
        cache_file().encode(&mut w);
        w.u16(inner.opcode() as u16);
        w.bytes.extend_from_slice(&inner.encode_body());
        assert!(
            Request::decode(Opcode::ViaCache as u16, &w.bytes).is_err(),
            "{inner:?}"
        );
    }
}

/// Only requests that make a name travel in a `WithParent`: a lookup, a removal or
/// another `WithParent` is refused at decode, and the inner request still gets its
/// own checks.
#[test]
fn only_name_making_requests_carry_their_directory() {
    for inner in [
        Request::Lookup {
            cred: cred(),
            parent: InodeId(1),
            name: "x".into(),
        },
        Request::Unlink {
            cred: cred(),
            parent: InodeId(1),
            name: "x".into(),
            keep: None,
        },
        Request::WithParent {
            request: Box::new(Request::Mkdir {
                cred: cred(),
                parent: InodeId(1),
                name: "d".into(),
                mode: 0o755,
            }),
        },
    ] {
        let mut w = Writer::default();
        w.u16(inner.opcode() as u16);
        w.bytes.extend_from_slice(&inner.encode_body());
        assert!(
            Request::decode(Opcode::WithParent as u16, &w.bytes).is_err(),
            "{inner:?}"
        );
    }
    let mkdir = Request::WithParent {
        request: Box::new(Request::Mkdir {
            cred: cred(),
            parent: InodeId(1),
            name: "d".into(),
            mode: 0o755,
        }),
    };
    let mut body = mkdir.encode_body();
    body.push(0);
    assert!(
        Request::decode(Opcode::WithParent as u16, &body).is_err(),
        "trailing byte"
    );
    assert_eq!(mkdir.meta_request().opcode(), Opcode::Mkdir);
}

/// Only reads carry an access pattern: a write (or anything else) nested in a
/// `ViaCacheAware` is refused at decode, and a pattern cut short fails the request.
#[test]
fn only_reads_carry_a_pattern() {
    let s = Striping {
        stripe_size_bytes: 65536,
        stripe_count: 4,
        server_index: 2,
    };
    let pattern = crate::pattern::tests::pattern();
    let body = |inner: &Request, cut: usize| {
        let mut w = Writer::default();
        cache_file().encode(&mut w);
        let mut p = Writer::default();
        pattern.encode(&mut p);
        w.bytes.extend_from_slice(&p.bytes[..p.bytes.len() - cut]);
        w.u16(inner.opcode() as u16);
        w.bytes.extend_from_slice(&inner.encode_body());
        w.bytes
    };
    let write = Request::Write {
        inode: InodeId(3),
        striping: s,
        ranges: vec![Range { offset: 0, len: 1 }],
    };
    let read = Request::Read {
        inode: InodeId(3),
        striping: s,
        ranges: vec![Range { offset: 0, len: 1 }],
    };
    let aware = Opcode::ViaCacheAware as u16;
    assert!(Request::decode(aware, &body(&write, 0)).is_err());
    assert!(Request::decode(aware, &body(&Request::Sync { inode: InodeId(3) }, 0)).is_err());
    assert!(Request::decode(aware, &body(&read, 0)).is_ok());
    assert!(Request::decode(aware, &body(&read, 1)).is_err());
    // The pattern's request as an io server sees it.
    let r = Request::decode(aware, &body(&read, 0)).unwrap();
    assert_eq!(r.data_request(), &read);
    assert_eq!(r.opcode(), Opcode::ViaCacheAware);
}

/// 16 bytes every 48 from offset 4096.
fn strided_view() -> View {
    View::partition(4096, 16, 48).unwrap()
}

#[test]
fn view_registration_checks_the_view_and_its_size() {
    let register = |bytes: &[u8]| {
        let mut w = Writer::default();
        w.bytes(bytes);
        Request::decode(Opcode::RegisterView as u16, &w.bytes)
    };
    let good = strided_view().encode();
    assert_eq!(
        register(&good).unwrap(),
        Request::RegisterView { view: strided_view() }
    );
    // Malformed: a bad version byte, a truncated tree, trailing garbage.
    let mut bad_version = good.clone();
    bad_version[0] ^= 0x40;
    for bad in [
        &bad_version[..],
        &good[..good.len() - 1],
        &[good.clone(), vec![0]].concat(),
    ] {
        assert!(matches!(register(bad), Err(DecodeError::View(_))), "{bad:?}");
    }
    // Too deep: nested two-copy vectors whose strides (4^(level+1)) never continue
    // their child's spacing, so normalisation cannot fold the levels.
    let mut deep = weft_layout::view::Datatype::bytes(1).unwrap();
    let mut nested = None;
    for level in 0..20 {
        match weft_layout::view::Datatype::hvector(2, 1, 1 << (2 * level + 2), &deep) {
            Ok(t) => deep = t,
            Err(e) => {
                nested = Some(e);
                break;
            }
        }
    }
    assert!(nested.is_some(), "the constructors refuse depth past the limit");
    // Hand-built wire form of the same chain, past the limit: refused on decode.
    // view := version displacement node_count nodes; node 0 is one byte (tag 0,
    // size 1, displacement 0), node n a vector over node n - 1.
    let mut body = vec![weft_layout::view::WIRE_VERSION, 0, 18, 0, 1, 0];
    for level in 0..17u32 {
        // tag 1 vector: count 2, block_len 1, element_stride 0 (zigzag 0),
        // block_stride 4^(level+1) (zigzag), displacement 0, child = previous node.
        body.push(1);
        body.extend_from_slice(&[2, 1, 0]);
        let mut stride = (1u64 << (2 * level + 2)) << 1;
        while stride >= 0x80 {
            body.push((stride as u8) | 0x80);
            stride >>= 7;
        }
        body.push(stride as u8);
        body.extend_from_slice(&[0, level as u8]);
    }
    match register(&body) {
        Err(DecodeError::View(m)) => assert!(m.contains("depth"), "{m}"),
        other => panic!("expected a depth error, got {other:?}"),
    }
    // Oversized: refused by length before anything is decoded.
    let mut w = Writer::default();
    w.u32(VIEW_BYTES_MAX as u32 + 1);
    assert!(matches!(
        Request::decode(Opcode::RegisterView as u16, &w.bytes),
        Err(DecodeError::TooLarge { .. })
    ));
    // A view interval whose end overflows.
    let mut w = Writer::default();
    InodeId(1).encode(&mut w);
    one_server().encode(&mut w);
    ViewId(1).encode(&mut w);
    w.u64(u64::MAX);
    w.u64(2);
    assert!(Request::decode(Opcode::ReadView as u16, &w.bytes).is_err());
}

#[test]
fn bad_input_is_an_error() {
    assert!(matches!(
        Request::decode(999, &[]),
        Err(DecodeError::UnknownOpcode(999))
    ));
    // A range whose end overflows.
    let mut w = Writer::default();
    InodeId(1).encode(&mut w);
    one_server().encode(&mut w);
    w.seq(&[Range {
        offset: u64::MAX - 5,
        len: 10,
    }]);
    assert!(Request::decode(Opcode::Read as u16, &w.bytes).is_err());
    // A server index outside the stripe count.
    let mut w = Writer::default();
    InodeId(1).encode(&mut w);
    w.u64(65536);
    w.u32(2);
    w.u32(2);
    w.u32(0);
    assert!(Request::decode(Opcode::Read as u16, &w.bytes).is_err());
    // A huge sequence length claims more than is there.
    let mut w = Writer::default();
    w.u32(u32::MAX);
    assert!(Request::decode(Opcode::ObjCreate as u16, &w.bytes).is_err());
}

fn shm_call_body(offset: u64, len: u64, data_len: u64, inner: &Request) -> Vec<u8> {
    let mut w = Writer::default();
    w.u64(offset);
    w.u64(len);
    w.u64(data_len);
    w.u16(inner.opcode() as u16);
    w.bytes.extend_from_slice(&inner.encode_body());
    w.bytes
}

#[test]
fn hostile_shared_memory_descriptors_are_refused() {
    let sync = Request::Sync { inode: InodeId(1) };
    // Data longer than its region; a region past 2^64.
    assert!(Request::decode(141, &shm_call_body(0, 10, 11, &sync)).is_err());
    assert!(Request::decode(141, &shm_call_body(u64::MAX, 2, 0, &sync)).is_err());
    // Nested shared-memory calls and handshakes inside one.
    let nested = Request::ShmCall {
        offset: 0,
        len: 1,
        data_len: 0,
        request: Box::new(sync.clone()),
    };
    assert!(Request::decode(141, &shm_call_body(0, 1, 0, &nested)).is_err());
    assert!(Request::decode(141, &shm_call_body(0, 1, 0, &Request::ShmAttach { bytes: 1 })).is_err());
    let hello = Request::Hello { client: "x".into() };
    assert!(Request::decode(141, &shm_call_body(0, 1, 0, &hello)).is_err());
    // A deep nest of ShmPlaced answers is refused without recursing.
    let mut body = vec![0u8];
    for _ in 0..100_000 {
        body.push(60);
        body.extend_from_slice(&0u64.to_le_bytes());
    }
    body.push(5);
    assert!(decode_result(&body).is_err());
    // A sound one decodes.
    assert!(Request::decode(141, &shm_call_body(8, 16, 16, &sync)).is_ok());
}

fn scatter_body(pieces: &[(u64, u64)], inner: &Request) -> Vec<u8> {
    Request::encode_shm_scatter(pieces, inner)
}

#[test]
fn hostile_pool_descriptors_are_refused() {
    let read = Request::Read {
        inode: InodeId(1),
        striping: Striping {
            stripe_size_bytes: 65536,
            stripe_count: 1,
            server_index: 0,
        },
        ranges: vec![Range { offset: 0, len: 10 }],
    };
    // Sound: pieces in any order, adjacent but not overlapping.
    assert!(Request::decode(190, &scatter_body(&[(100, 5), (0, 100), (105, 1)], &read)).is_ok());
    // No pieces, an empty piece, a piece past 2^64, overlapping pieces.
    assert!(Request::decode(190, &scatter_body(&[], &read)).is_err());
    assert!(Request::decode(190, &scatter_body(&[(0, 0)], &read)).is_err());
    assert!(Request::decode(190, &scatter_body(&[(u64::MAX, 2)], &read)).is_err());
    assert!(Request::decode(190, &scatter_body(&[(0, 10), (9, 1)], &read)).is_err());
    assert!(Request::decode(190, &scatter_body(&[(50, 10), (0, 51)], &read)).is_err());
    assert!(Request::decode(190, &scatter_body(&[(5, 5), (5, 5)], &read)).is_err());
    // Too many pieces.
    let many: Vec<(u64, u64)> = (0..SCATTER_PIECES_MAX as u64 + 1).map(|i| (i * 2, 1)).collect();
    assert!(Request::decode(190, &scatter_body(&many, &read)).is_err());
    assert!(Request::decode(190, &scatter_body(&many[1..], &read)).is_ok());
    // A count claiming more pieces than the body holds.
    let mut w = Writer::default();
    w.u32(4000);
    assert!(Request::decode(190, &w.bytes).is_err());
    // Anything but a read inside: writes, syncs, handshakes, shared-memory calls.
    let sync = Request::Sync { inode: InodeId(1) };
    assert!(Request::decode(190, &scatter_body(&[(0, 1)], &sync)).is_err());
    let nested = Request::ShmScatter {
        pieces: vec![(0, 1)],
        request: Box::new(read.clone()),
    };
    assert!(Request::decode(190, &scatter_body(&[(0, 1)], &nested)).is_err());
    assert!(Request::decode(
        190,
        &scatter_body(&[(0, 1)], &Request::ShmAttachPool { bytes: 1 })
    )
    .is_err());
    let hello = Request::Hello { client: "x".into() };
    assert!(Request::decode(190, &scatter_body(&[(0, 1)], &hello)).is_err());
}

proptest::proptest! {
    /// Any segment descriptor decodes to exactly what was sent, or is refused: the
    /// decoder never yields a region whose data overruns it or that wraps.
    #[test]
    fn shm_descriptors_decode_only_when_sound(
        offset in proptest::prelude::any::<u64>(),
        len in proptest::prelude::any::<u64>(),
        data_len in proptest::prelude::any::<u64>(),
        trailing in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..16),
    ) {
        let inner = Request::Sync { inode: InodeId(7) };
        let mut body = shm_call_body(offset, len, data_len, &inner);
        match Request::decode(141, &body) {
            Ok(Request::ShmCall { offset: o, len: l, data_len: d, request }) => {
                proptest::prop_assert!(o.checked_add(l).is_some() && d <= l);
                proptest::prop_assert_eq!((o, l, d), (offset, len, data_len));
                proptest::prop_assert_eq!(*request, inner);
            }
            Ok(other) => proptest::prop_assert!(false, "decoded as {:?}", other),
            Err(_) => proptest::prop_assert!(offset.checked_add(len).is_none() || data_len > len),
        }
        body.extend_from_slice(&trailing);
        let _ = Request::decode(141, &body);
        let _ = decode_result(&body);
    }

    /// Any pool scatter list decodes to exactly what was sent, or is refused: the
    /// decoder never yields an empty, wrapping or overlapping piece.
    #[test]
    fn pool_descriptors_decode_only_when_sound(
        pieces in proptest::collection::vec(
            proptest::prelude::Strategy::prop_map(
                (proptest::prelude::any::<u64>(), 0u64..1 << 20),
                |(o, l)| (o >> (o % 64), l),
            ),
            0..12,
        ),
        trailing in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..16),
    ) {
        let inner = Request::Read {
            inode: InodeId(7),
            striping: Striping { stripe_size_bytes: 65536, stripe_count: 2, server_index: 1 },
            ranges: vec![Range { offset: 0, len: 1 }],
        };
        let mut body = scatter_body(&pieces, &inner);
        let mut sorted = pieces.clone();
        sorted.sort_unstable();
        let sound = !pieces.is_empty()
            && pieces.iter().all(|&(o, l)| l > 0 && o.checked_add(l).is_some())
            && sorted.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0);
        match Request::decode(190, &body) {
            Ok(Request::ShmScatter { pieces: p, request }) => {
                proptest::prop_assert!(sound);
                proptest::prop_assert_eq!(p, pieces);
                proptest::prop_assert_eq!(*request, inner);
            }
            Ok(other) => proptest::prop_assert!(false, "decoded as {:?}", other),
            Err(_) => proptest::prop_assert!(!sound),
        }
        body.extend_from_slice(&trailing);
        let _ = Request::decode(190, &body);
    }
}

/// The limits the derived decoders check, each with the error the hand-written decoders
/// gave: a list one past its limit is `TooLarge` naming the list, a value out of range
/// `Invalid` naming it, an unknown tag or nested message refused.
#[test]
fn derived_decoders_keep_every_limit() {
    let too_large = |opcode: Opcode, body: &[u8], what: &str| match Request::decode(opcode as u16, body) {
        Err(DecodeError::TooLarge { what: w, .. }) if w == what => {}
        other => panic!("{opcode:?}: {other:?}, expected too large {what}"),
    };
    let cred_bytes = |groups: usize| {
        let mut w = Writer::default();
        w.u32(1);
        w.u32(1);
        w.seq(&vec![7u32; groups]);
        w.bytes
    };
    let mut lookup = cred_bytes(crate::types::GROUPS_MAX + 1);
    lookup.extend_from_slice(&InodeId(1).to_bytes());
    lookup.extend_from_slice(&Name::from("x").to_bytes());
    too_large(Opcode::Lookup, &lookup, "group list");
    // Lists at their limit + 1 (elements need not be read for the count to be refused:
    // they are, so each list holds real elements).
    let inodes = |n: usize| {
        let mut w = Writer::default();
        w.seq(&vec![InodeId(1); n]);
        w.bytes
    };
    too_large(Opcode::ObjCreate, &inodes(BATCH_INODES_MAX + 1), "inode batch");
    too_large(Opcode::CacheDrop, &inodes(BATCH_INODES_MAX + 1), "inode batch");
    let mut times = inodes(BATCH_INODES_MAX + 1);
    times.extend_from_slice(&Timespec::default().to_bytes());
    too_large(Opcode::ObjTimes, &times, "object batch");
    let ranges = |n: usize| {
        let mut w = Writer::default();
        InodeId(1).encode(&mut w);
        one_server().encode(&mut w);
        w.seq(&vec![Range { offset: 0, len: 1 }; n]);
        w.bytes
    };
    too_large(Opcode::Write, &ranges(RANGES_MAX + 1), "range list");
    assert!(Request::decode(Opcode::Write as u16, &ranges(RANGES_MAX)).is_ok());
    let mut many = cred_bytes(0);
    many.extend_from_slice(&InodeId(1).to_bytes());
    let mut w = Writer::default();
    w.seq(&vec![Name::from("n"); LOOKUP_MANY_MAX + 1]);
    many.extend_from_slice(&w.bytes);
    too_large(Opcode::LookupMany, &many, "names of one lookup-many");
    // An xattr value one byte past Linux's limit.
    let mut w = Writer::default();
    Cred::root().encode(&mut w);
    InodeId(1).encode(&mut w);
    Name::from("user.x").encode(&mut w);
    w.bytes(&vec![0; XATTR_VALUE_BYTES_MAX + 1]);
    XattrSet::Either.encode(&mut w);
    too_large(Opcode::SetXattr, &w.bytes, "byte string");
    // A nonce of the wrong length, a bad tag of each tagged enum.
    let mut w = Writer::default();
    w.bytes(&[1; NONCE_BYTES - 1]);
    Identity::Cluster.encode(&mut w);
    w.bytes(&[2; PROOF_BYTES]);
    assert!(matches!(
        Request::decode(Opcode::Authenticate as u16, &w.bytes),
        Err(DecodeError::Invalid {
            what: "nonce length",
            ..
        })
    ));
    for (bytes, what) in [
        (vec![9u8], "xattr set mode"),
        (vec![0], "file kind"),
        (vec![3], "lock kind"),
        (vec![2], "time tag"),
    ] {
        let mut r = Reader::new(&bytes);
        let got = match what {
            "xattr set mode" => XattrSet::decode(&mut r).map(|_| ()),
            "file kind" => FileKind::decode(&mut r).map(|_| ()),
            "lock kind" => LockKind::decode(&mut r).map(|_| ()),
            _ => TimeSet::decode(&mut r).map(|_| ()),
        };
        assert!(
            matches!(got, Err(DecodeError::Invalid { what: w, .. }) if w == what),
            "{what}: {got:?}"
        );
    }
    assert!(matches!(
        decode_result(&[0, 200]),
        Err(DecodeError::Invalid {
            what: "response tag",
            value: 200
        })
    ));
    // Responses nested in `Tracked`: neither another `Tracked` nor a `ShmPlaced`.
    for inner in [80u8, 60] {
        let mut w = Writer::default();
        w.u8(0);
        w.u8(80);
        w.u64(1);
        w.u64(1);
        w.u64(1);
        w.u8(inner);
        assert!(decode_result(&w.bytes).is_err(), "{inner}");
    }
    // A cache manager's older, shorter `CacheStats` decodes, `write_backs_full` 0.
    let stats = CacheStats {
        policy: "lru".into(),
        write_backs: 2,
        write_backs_full: 1,
        ..Default::default()
    };
    let bytes = stats.to_bytes();
    let old = CacheStats::from_bytes(&bytes[..bytes.len() - 8]).unwrap();
    assert_eq!(
        old,
        CacheStats {
            write_backs_full: 0,
            ..stats
        }
    );
}

/// The striping of a file on one server.
fn one_server() -> Striping {
    Striping {
        stripe_size_bytes: 65536,
        stripe_count: 1,
        server_index: 0,
    }
}
