//! Golden bytes: the exact wire form of every request, every response and every value
//! type with a `Wire` encoding, pinned in `tests/golden/wire.txt` (one `name hex` line
//! each, generated once from the hand-written codec and checked in). A change to any
//! of them fails here: a deliberate format change updates the file and bumps
//! `PROTOCOL_VERSION` (the file's first line names the version it pins).
//!
//! Every sample is also decoded back from the pinned bytes and compared with the value,
//! and every strict prefix of a message is refused. `every_opcode_and_tag_has_a_sample`
//! asks the decoder which opcodes and response tags it knows and fails for one without
//! a sample; `request_name` and `response_name` are exhaustive matches, so a new
//! variant does not compile until it has a name here.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::Arc;

use weft_layout::view::View;
use weft_layout::{
    CacheMapping, CacheMode, InodeId, Layout, LayoutRequest, Redundancy, Replication, ServerId,
};
use weft_proto::capability::{self, Capability};
use weft_proto::codec::{DecodeError, Reader, Wire, Writer};
use weft_proto::frame::{FrameHeader, FrameKind, PROTOCOL_VERSION};
use weft_proto::handshake::{Identity, NONCE_BYTES, PROOF_BYTES};
use weft_proto::msg::*;
use weft_proto::pattern::{AccessPattern, PatternRef};
use weft_proto::quota::{QuotaGrace, QuotaKind, QuotaLimits, QuotaReport, QuotaUsage};
use weft_proto::types::*;
use weft_proto::{ErrorCode, Name, WireError};

const GOLDEN: &str = include_str!("golden/wire.txt");

/// The variant's name: exhaustive, so that a new request has to be named (and then
/// sampled) here before this test compiles.
fn request_name(r: &Request) -> &'static str {
    use Request::*;
    match r {
        Allocate { .. } => "Allocate",
        AppendLock { .. } => "AppendLock",
        AppendUnlock { .. } => "AppendUnlock",
        Authenticate { .. } => "Authenticate",
        CacheCioStats => "CacheCioStats",
        CacheClose { .. } => "CacheClose",
        CacheDrop { .. } => "CacheDrop",
        CacheMigrate { .. } => "CacheMigrate",
        CacheExtents { .. } => "CacheExtents",
        CacheFlush { .. } => "CacheFlush",
        CachePunch { .. } => "CachePunch",
        CacheStats => "CacheStats",
        CacheTruncate { .. } => "CacheTruncate",
        CommitMetadata { .. } => "CommitMetadata",
        Create { .. } => "Create",
        CreateGranted { .. } => "CreateGranted",
        CreateStamped { .. } => "CreateStamped",
        CreateMany { .. } => "CreateMany",
        ExtentLock { .. } => "ExtentLock",
        ExtentUnlock { .. } => "ExtentUnlock",
        Extents { .. } => "Extents",
        FileLock { .. } => "FileLock",
        FileLockReclaim { .. } => "FileLockReclaim",
        FileLockTest { .. } => "FileLockTest",
        GetAttr { .. } => "GetAttr",
        GetCluster => "GetCluster",
        GetXattr { .. } => "GetXattr",
        GrantCapability { .. } => "GrantCapability",
        Hello { .. } => "Hello",
        IoStatfs => "IoStatfs",
        Link { .. } => "Link",
        ListXattr { .. } => "ListXattr",
        LockReclaimComplete { .. } => "LockReclaimComplete",
        LockSession { .. } => "LockSession",
        LockSessionEnd { .. } => "LockSessionEnd",
        LockStats => "LockStats",
        Lookup { .. } => "Lookup",
        LookupMany { .. } => "LookupMany",
        MarkStale { .. } => "MarkStale",
        RebuildStamp { .. } => "RebuildStamp",
        RebuildWrite { .. } => "RebuildWrite",
        StaleGeneration { .. } => "StaleGeneration",
        ClearStale { .. } => "ClearStale",
        StaleList { .. } => "StaleList",
        MigrateObject { .. } => "MigrateObject",
        MigrateBegin { .. } => "MigrateBegin",
        MigrateEnd { .. } => "MigrateEnd",
        ServerFiles { .. } => "ServerFiles",
        SetServerState { .. } => "SetServerState",
        ServerStates { .. } => "ServerStates",
        AddServer { .. } => "AddServer",
        SecurityInfo => "SecurityInfo",
        BackupBegin => "BackupBegin",
        BackupRead { .. } => "BackupRead",
        BackupEnd { .. } => "BackupEnd",
        ObjList { .. } => "ObjList",
        InodeStates { .. } => "InodeStates",
        AdoptOrphans { .. } => "AdoptOrphans",
        LayoutScan { .. } => "LayoutScan",
        Metrics { .. } => "Metrics",
        Mkdir { .. } => "Mkdir",
        Mknod { .. } => "Mknod",
        ObjCreate { .. } => "ObjCreate",
        ObjPrecreate { .. } => "ObjPrecreate",
        ObjRemove { .. } => "ObjRemove",
        ObjStamp { .. } => "ObjStamp",
        ObjStat { .. } => "ObjStat",
        ObjTimes { .. } => "ObjTimes",
        PresentCapability { .. } => "PresentCapability",
        Read { .. } => "Read",
        ReadView { .. } => "ReadView",
        Readdir { .. } => "Readdir",
        ReaddirPlus { .. } => "ReaddirPlus",
        Readlink { .. } => "Readlink",
        RegisterView { .. } => "RegisterView",
        Release { .. } => "Release",
        ReleaseView { .. } => "ReleaseView",
        ReleaseWrites { .. } => "ReleaseWrites",
        RemoveXattr { .. } => "RemoveXattr",
        Rename { .. } => "Rename",
        RenameExchange { .. } => "RenameExchange",
        RenameNoReplace { .. } => "RenameNoReplace",
        RenewSession { .. } => "RenewSession",
        ReplayDone { .. } => "ReplayDone",
        QuotaSet { .. } => "QuotaSet",
        QuotaGet { .. } => "QuotaGet",
        QuotaGrace { .. } => "QuotaGrace",
        Project { .. } => "Project",
        QuotaRecount { .. } => "QuotaRecount",
        Resolve { .. } => "Resolve",
        Revalidate { .. } => "Revalidate",
        RevokeCapabilities { .. } => "RevokeCapabilities",
        Rmdir { .. } => "Rmdir",
        ServerInfo => "ServerInfo",
        SetAttr { .. } => "SetAttr",
        SetDirLayout { .. } => "SetDirLayout",
        SetXattr { .. } => "SetXattr",
        SharedPointer { .. } => "SharedPointer",
        SharedPointerSince { .. } => "SharedPointerSince",
        ShmAttach { .. } => "ShmAttach",
        ShmAttachPool { .. } => "ShmAttachPool",
        ShmCall { .. } => "ShmCall",
        ShmScatter { .. } => "ShmScatter",
        Statfs { .. } => "Statfs",
        Symlink { .. } => "Symlink",
        Sync { .. } => "Sync",
        Tracked { .. } => "Tracked",
        Truncate { .. } => "Truncate",
        Unlink { .. } => "Unlink",
        VerifyCapability { .. } => "VerifyCapability",
        ViaCache { .. } => "ViaCache",
        ViaCacheAware { .. } => "ViaCacheAware",
        Vouched { .. } => "Vouched",
        Changes { .. } => "Changes",
        ReaddirSized { .. } => "ReaddirSized",
        VouchedReadable { .. } => "VouchedReadable",
        WithParent { .. } => "WithParent",
        Write { .. } => "Write",
        WriteView { .. } => "WriteView",
    }
}

/// As `request_name`, for responses.
fn response_name(r: &Response) -> &'static str {
    use Response::*;
    match r {
        Hello { .. } => "Hello",
        Challenge { .. } => "Challenge",
        MungeChallenge { .. } => "MungeChallenge",
        ServerInfo { .. } => "ServerInfo",
        Cluster { .. } => "Cluster",
        Attr { .. } => "Attr",
        Entries { .. } => "Entries",
        EntriesPlus { .. } => "EntriesPlus",
        EntriesSized { .. } => "EntriesSized",
        Done => "Done",
        Statfs { .. } => "Statfs",
        Link { .. } => "Link",
        Bytes { .. } => "Bytes",
        Extents { .. } => "Extents",
        IoStatfs { .. } => "IoStatfs",
        View { .. } => "View",
        CacheStats { .. } => "CacheStats",
        CacheCioStats { .. } => "CacheCioStats",
        Token { .. } => "Token",
        LockStats { .. } => "LockStats",
        Unlinked { .. } => "Unlinked",
        Renamed { .. } => "Renamed",
        Value { .. } => "Value",
        Names { .. } => "Names",
        ObjStats { .. } => "ObjStats",
        ObjStamps { .. } => "ObjStamps",
        Metrics { .. } => "Metrics",
        Position { .. } => "Position",
        LockHolder { .. } => "LockHolder",
        LockState { .. } => "LockState",
        ShmPlaced { .. } => "ShmPlaced",
        Capability { .. } => "Capability",
        Made { .. } => "Made",
        Committed { .. } => "Committed",
        MadeGranted { .. } => "MadeGranted",
        MadeStamped { .. } => "MadeStamped",
        MadeMany { .. } => "MadeMany",
        AttrVouched { .. } => "AttrVouched",
        AttrSized { .. } => "AttrSized",
        ReadableVouched { .. } => "ReadableVouched",
        Changed { .. } => "Changed",
        Security { .. } => "Security",
        Stamp { .. } => "Stamp",
        Generation { .. } => "Generation",
        StaleFiles { .. } => "StaleFiles",
        Quota { .. } => "Quota",
        ProjectId { .. } => "ProjectId",
        ServerStates { .. } => "ServerStates",
        BackupReady { .. } => "BackupReady",
        BackupChunk(_) => "BackupChunk",
        ObjectPage { .. } => "ObjectPage",
        States(_) => "States",
        Layouts { .. } => "Layouts",
        Tracked { .. } => "Tracked",
    }
}

/// Decodes pinned bytes and compares them with the sample's value.
type DecodesBack = Box<dyn Fn(&[u8]) -> Result<(), String>>;

/// One pinned encoding: its bytes as the codec writes them, and a check that decodes
/// bytes back to the sample's value.
struct Sample {
    name: String,
    bytes: Vec<u8>,
    decodes_back: DecodesBack,
}

#[derive(Default)]
struct Samples(Vec<Sample>);

impl Samples {
    fn push(&mut self, name: String, bytes: Vec<u8>, decodes_back: DecodesBack) {
        // Several samples of one variant: "Name", "Name.2", "Name.3", ...
        let taken = self
            .0
            .iter()
            .filter(|s| s.name == name || s.name.starts_with(&format!("{name}.")))
            .count();
        let name = if taken == 0 {
            name
        } else {
            format!("{name}.{}", taken + 1)
        };
        self.0.push(Sample {
            name,
            bytes,
            decodes_back,
        });
    }

    /// A value type, by its `Wire` encoding.
    fn value<T: Wire + PartialEq + Debug + 'static>(&mut self, name: &str, v: T) {
        let bytes = v.to_bytes();
        let check = move |b: &[u8]| match T::from_bytes(b) {
            Ok(d) if d == v => Ok(()),
            other => Err(format!("decoded {other:?}, expected {v:?}")),
        };
        self.push(format!("type.{name}"), bytes, Box::new(check));
    }

    /// A request: its opcode (u16, little endian) then its body.
    fn request(&mut self, r: Request) {
        let mut bytes = (r.opcode() as u16).to_le_bytes().to_vec();
        bytes.extend_from_slice(&r.encode_body());
        let name = format!("request.{}", request_name(&r));
        let check = move |b: &[u8]| {
            let opcode = u16::from_le_bytes([b[0], b[1]]);
            match Request::decode(opcode, &b[2..]) {
                Ok(d) if d == r => {}
                other => return Err(format!("decoded {other:?}, expected {r:?}")),
            }
            // Every strict prefix of a body is refused, never a panic.
            for cut in 2..b.len() {
                if Request::decode(opcode, &b[2..cut]).is_ok() {
                    return Err(format!("body cut at {} decodes", cut - 2));
                }
            }
            Ok(())
        };
        self.push(name, bytes, Box::new(check));
    }

    /// A response body (the result tag, then the response or error).
    fn response(&mut self, r: Result<Response, WireError>) {
        let bytes = encode_result(&r);
        let name = match &r {
            Ok(resp) => format!("response.{}", response_name(resp)),
            Err(_) => "response.error".to_string(),
        };
        let check = move |b: &[u8]| match decode_result(b) {
            Ok(d) if d == r => Ok(()),
            other => Err(format!("decoded {other:?}, expected {r:?}")),
        };
        self.push(name, bytes, Box::new(check));
    }
}

fn cred() -> Cred {
    Cred {
        uid: 1000,
        gid: 100,
        groups: vec![4, 27],
    }
}

fn striping() -> Striping {
    Striping {
        stripe_size_bytes: 65536,
        stripe_count: 4,
        server_index: 2,
    }
}

fn test_capability() -> Capability {
    Capability {
        inode: InodeId(77),
        rights: capability::rights::WRITE,
        issued_ms: 1,
        expiry_ms: u64::MAX,
        mac: std::array::from_fn(|i| i as u8),
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

fn replicated_layout() -> Layout {
    Layout {
        stripe_size_bytes: 1 << 20,
        servers: vec![ServerId(1), ServerId(2)],
        replication: Replication {
            copies: vec![ServerId(3), ServerId(4)],
            stale: vec![ServerId(1)],
        },
    }
}

fn pattern() -> AccessPattern {
    // A strided view and the whole file, two processes' references in time order.
    AccessPattern {
        call: 0xbeef,
        views: vec![
            Arc::new(View::partition(4096, 16, 48).unwrap()),
            Arc::new(View::contiguous()),
        ],
        refs: vec![
            PatternRef {
                rank: 1,
                time_ns: 7,
                view: 0,
                view_offset: 32,
                len: 64,
            },
            PatternRef {
                rank: 0,
                time_ns: 9,
                view: 1,
                view_offset: 0,
                len: 4096,
            },
        ],
    }
}

fn attr() -> Attr {
    Attr {
        cache: CacheMode::Cached,
        inode: InodeId(7),
        kind: FileKind::File,
        mode: 0o644,
        uid: 1,
        gid: 2,
        nlink: 1,
        size: 3,
        atime: Timespec::default(),
        mtime: Timespec { secs: 1, nanos: 2 },
        ctime: Timespec {
            secs: -1,
            nanos: 999_999_999,
        },
        layout: Some(Layout {
            stripe_size_bytes: 65536,
            servers: vec![ServerId(1), ServerId(2)],
            replication: Default::default(),
        }),
        dir_layout: None,
        rdev: 0x0801,
        blocks: 16,
    }
}

fn dir_attr() -> Attr {
    Attr {
        kind: FileKind::Directory,
        nlink: 3,
        layout: None,
        dir_layout: Some(LayoutRequest {
            stripe_size_bytes: Some(1 << 20),
            stripe_count: Some(3),
            first_server: None,
            cache: Some(CacheMode::None),
            redundancy: Some(Redundancy::Replicas(2)),
        }),
        ..attr()
    }
}

fn lock(pid: u32, kind: LockKind) -> LockRequest {
    LockRequest {
        session: 7,
        owner: u64::MAX,
        inode: InodeId(8),
        pid,
        kind,
        start: 10,
        end: u64::MAX,
    }
}

fn create(name: &str) -> Request {
    Request::Create {
        cred: cred(),
        parent: InodeId(5),
        name: name.into(),
        mode: 0o600,
        layout: LayoutRequest::default(),
        exclusive: true,
    }
}

fn read() -> Request {
    Request::Read {
        inode: InodeId(3),
        striping: striping(),
        ranges: vec![
            Range { offset: 1, len: 2 },
            Range {
                offset: 4096,
                len: 100,
            },
        ],
    }
}

fn read_view() -> Request {
    Request::ReadView {
        inode: InodeId(3),
        striping: striping(),
        view: ViewId(2),
        view_offset: 8,
        len: 9,
    }
}

fn requests(s: &mut Samples) {
    let st = striping();
    for r in [
        Request::Hello {
            client: "weft 0.1".into(),
        },
        Request::Authenticate {
            nonce: [1; NONCE_BYTES],
            identity: Identity::Cluster,
            proof: [2; PROOF_BYTES],
        },
        Request::Authenticate {
            nonce: [3; NONCE_BYTES],
            identity: Identity::Munge(b"MUNGE:abc:".to_vec()),
            proof: [4; PROOF_BYTES],
        },
        Request::ServerInfo,
        Request::GetCluster,
        Request::Resolve {
            cred: cred(),
            path: "/a/b".into(),
        },
        Request::Lookup {
            cred: cred(),
            parent: InodeId(5),
            name: "x".into(),
        },
        Request::GetAttr {
            cred: cred(),
            inode: InodeId(9),
        },
        Request::SetAttr {
            cred: cred(),
            inode: InodeId(9),
            changes: SetAttr {
                mode: Some(0o600),
                size: Some(77),
                atime: Some(TimeSet::Now),
                mtime: Some(TimeSet::At(Timespec { secs: -5, nanos: 7 })),
                ..Default::default()
            },
        },
        Request::SetAttr {
            cred: Cred::root(),
            inode: InodeId(9),
            changes: SetAttr {
                uid: Some(5),
                gid: Some(6),
                kill_privileges: true,
                by_handle: true,
                ..Default::default()
            },
        },
        Request::Mkdir {
            cred: cred(),
            parent: InodeId(1),
            name: "d".into(),
            mode: 0o755,
        },
        Request::Create {
            cred: cred(),
            parent: InodeId(1),
            name: "f".into(),
            mode: 0o644,
            layout: LayoutRequest {
                cache: None,
                stripe_size_bytes: Some(4096),
                stripe_count: Some(2),
                first_server: None,
                redundancy: None,
            },
            exclusive: true,
        },
        Request::Create {
            cred: cred(),
            parent: InodeId(1),
            name: "g".into(),
            mode: 0o600,
            layout: LayoutRequest {
                cache: Some(CacheMode::Delegated),
                stripe_size_bytes: None,
                stripe_count: None,
                first_server: Some(1),
                redundancy: Some(Redundancy::Replicas(3)),
            },
            exclusive: false,
        },
        Request::Readdir {
            cred: cred(),
            dir: InodeId(1),
            after: "m".into(),
            max_entries: 100,
        },
        Request::ReaddirPlus {
            cred: cred(),
            dir: InodeId(1),
            after: "z".into(),
            max_entries: 7,
        },
        Request::ReaddirSized {
            cred: cred(),
            dir: InodeId(1),
            after: "z".into(),
            max_entries: 7,
        },
        Request::Unlink {
            cred: cred(),
            parent: InodeId(1),
            name: "f".into(),
            keep: Some(77),
        },
        Request::Rmdir {
            cred: cred(),
            parent: InodeId(1),
            name: "d".into(),
        },
        Request::Rename {
            cred: cred(),
            src_parent: InodeId(1),
            src_name: "a".into(),
            dst_parent: InodeId(2),
            dst_name: "b".into(),
            keep: None,
        },
        Request::RenameExchange {
            cred: cred(),
            a_parent: InodeId(1),
            a_name: "a".into(),
            b_parent: InodeId(2),
            b_name: "b".into(),
        },
        Request::RenameNoReplace {
            cred: cred(),
            src_parent: InodeId(1),
            src_name: "a".into(),
            dst_parent: InodeId(2),
            dst_name: "b".into(),
        },
        Request::Statfs { cred: cred() },
        Request::SetDirLayout {
            cred: cred(),
            dir: InodeId(3),
            layout: None,
        },
        Request::SetDirLayout {
            cred: cred(),
            dir: InodeId(3),
            layout: Some(LayoutRequest {
                stripe_count: Some(2),
                ..Default::default()
            }),
        },
        Request::Symlink {
            cred: cred(),
            parent: InodeId(1),
            name: "l".into(),
            target: "/x".into(),
        },
        Request::Readlink {
            cred: cred(),
            inode: InodeId(4),
        },
        Request::ObjCreate {
            inodes: vec![InodeId(1), InodeId(2)],
        },
        Request::ObjRemove { inodes: vec![] },
        Request::ObjPrecreate {
            inodes: vec![InodeId(7), InodeId(9)],
        },
        Request::Write {
            inode: InodeId(3),
            striping: st,
            ranges: vec![Range { offset: 0, len: 10 }],
        },
        read(),
        Request::Sync { inode: InodeId(3) },
        Request::Extents {
            items: vec![(InodeId(3), st)],
        },
        Request::Truncate {
            inode: InodeId(3),
            striping: st,
            size: 1 << 33,
        },
        Request::IoStatfs,
        Request::RegisterView {
            view: View::partition(4096, 16, 48).unwrap(),
        },
        Request::ReleaseView { view: ViewId(3) },
        Request::WriteView {
            inode: InodeId(3),
            striping: st,
            view: ViewId(1),
            view_offset: 100,
            len: 1 << 20,
        },
        read_view(),
        Request::ViaCache {
            file: cache_file(),
            request: Box::new(Request::WriteView {
                inode: InodeId(3),
                striping: st,
                view: ViewId(2),
                view_offset: 8,
                len: 9,
            }),
        },
        Request::ViaCache {
            file: cache_file(),
            request: Box::new(read()),
        },
        Request::ViaCacheAware {
            file: cache_file(),
            pattern: Arc::new(pattern()),
            request: Box::new(read_view()),
        },
        Request::CacheFlush { file: cache_file() },
        Request::CacheTruncate {
            file: cache_file(),
            size: 12,
        },
        Request::CachePunch {
            file: cache_file(),
            offset: 5,
            len: 70_000,
        },
        Request::CacheExtents {
            inodes: vec![InodeId(3), InodeId(4)],
        },
        Request::CacheClose { inode: InodeId(3) },
        Request::CacheStats,
        Request::CacheCioStats,
        Request::CacheDrop {
            inodes: vec![InodeId(5)],
        },
        Request::CacheMigrate {
            inode: InodeId(5),
            step: migrate_step::FREEZE,
            layout: None,
        },
        Request::CacheMigrate {
            inode: InodeId(5),
            step: migrate_step::THAW,
            layout: Some(cache_file().layout),
        },
        Request::Metrics { text: true },
        Request::AppendLock { inode: InodeId(8) },
        Request::AppendUnlock {
            inode: InodeId(8),
            token: 1 << 40,
        },
        Request::ExtentLock {
            inode: InodeId(8),
            exclusive: true,
            attempt: 3,
            ranges: vec![Range { offset: 0, len: 8 }, Range { offset: 64, len: 1 }],
        },
        Request::ExtentUnlock {
            inode: InodeId(8),
            token: u64::MAX,
        },
        Request::LockStats,
        Request::ShmAttach { bytes: 16 << 20 },
        Request::ShmCall {
            offset: 4096,
            len: 8192,
            data_len: 100,
            request: Box::new(Request::Write {
                inode: InodeId(3),
                striping: st,
                ranges: vec![Range { offset: 0, len: 100 }],
            }),
        },
        Request::ShmAttachPool { bytes: 32 << 20 },
        Request::ShmScatter {
            pieces: vec![(8192, 100), (0, 2)],
            request: Box::new(read()),
        },
        Request::Revalidate {
            cred: cred(),
            steps: vec![
                PathStep {
                    parent: InodeId(1),
                    name: "d".into(),
                    child: InodeId(5),
                },
                PathStep {
                    parent: InodeId(5),
                    name: "f".into(),
                    child: InodeId(9),
                },
            ],
        },
        Request::Release {
            session: 5,
            inode: InodeId(8),
        },
        Request::RenewSession { session: u64::MAX },
        Request::FileLock(lock(4242, LockKind::Write)),
        // Sent without the pid, as first defined.
        Request::FileLockTest(lock(0, LockKind::Read)),
        Request::FileLockReclaim(lock(1, LockKind::Unlock)),
        Request::LockSession { session: 12 },
        Request::LockReclaimComplete {
            session: 12,
            incarnation: u64::MAX,
        },
        Request::LockSessionEnd { session: 13 },
        Request::CommitMetadata { wait: true },
        Request::MarkStale {
            cred: cred(),
            inode: InodeId(9),
            server: ServerId(3),
        },
        Request::RebuildStamp {
            inode: InodeId(9),
            striping: striping(),
            ranges: vec![Range {
                offset: 1 << 20,
                len: 4 << 20,
            }],
            create: true,
        },
        Request::RebuildWrite {
            inode: InodeId(9),
            striping: striping(),
            ranges: vec![Range { offset: 0, len: 4096 }],
            stamp: 0x1234_5678_9abc,
        },
        Request::StaleGeneration {
            cred: cred(),
            inode: InodeId(9),
            server: ServerId(3),
        },
        Request::ClearStale {
            cred: cred(),
            inode: InodeId(9),
            server: ServerId(3),
            generation: 77,
        },
        Request::StaleList {
            cred: cred(),
            server: Some(ServerId(2)),
            all: false,
            after: InodeId(1),
            max: 100,
        },
        Request::StaleList {
            cred: cred(),
            server: None,
            all: true,
            after: InodeId(0),
            max: 1,
        },
        Request::MigrateObject {
            inode: InodeId(9),
            temp: InodeId(12),
            striping: Some(striping()),
            step: migrate_step::ADOPT,
        },
        Request::MigrateObject {
            inode: InodeId(9),
            temp: InodeId(12),
            striping: None,
            step: migrate_step::FREEZE,
        },
        Request::MigrateBegin {
            cred: cred(),
            inode: InodeId(9),
            temp: InodeId(12),
        },
        Request::MigrateEnd {
            cred: cred(),
            inode: InodeId(9),
            temp: InodeId(12),
            commit: true,
        },
        Request::ServerFiles {
            cred: cred(),
            server: ServerId(3),
            after: InodeId(1),
            max: 100,
        },
        Request::SetServerState {
            cred: cred(),
            server: ServerId(3),
            state: server_state::DRAINING,
        },
        Request::ServerStates { cred: cred() },
        Request::AddServer {
            cred: cred(),
            server: IoServer {
                id: ServerId(5),
                addr: "10.0.0.5:7400".into(),
                socket: None,
            },
        },
        Request::SecurityInfo,
        Request::BackupBegin,
        Request::BackupRead {
            snapshot: 3,
            offset: 1 << 20,
            len: 65_536,
        },
        Request::BackupEnd { snapshot: 3 },
        Request::ObjList {
            dir: 0x2a,
            after: InodeId(0x12a),
            max: 100,
        },
        Request::InodeStates {
            inodes: vec![InodeId(7), InodeId(0x12a)],
        },
        Request::AdoptOrphans {
            server: ServerId(2),
            inodes: vec![InodeId(0x12a)],
        },
        Request::LayoutScan {
            after: InodeId(1),
            max: 50,
        },
        Request::Link {
            cred: cred(),
            inode: InodeId(9),
            parent: InodeId(1),
            name: Name::new(b"\xff\xfe".to_vec()),
        },
        Request::Mknod {
            cred: cred(),
            parent: InodeId(1),
            name: "fifo".into(),
            kind: FileKind::Fifo,
            mode: 0o644,
            rdev: 0x0801,
        },
        Request::SetXattr {
            cred: cred(),
            inode: InodeId(9),
            name: "user.x".into(),
            value: vec![0, 1, 2],
            how: XattrSet::Replace,
        },
        Request::GetXattr {
            cred: cred(),
            inode: InodeId(9),
            name: "trusted.y".into(),
        },
        Request::ListXattr {
            cred: cred(),
            inode: InodeId(9),
        },
        Request::RemoveXattr {
            cred: cred(),
            inode: InodeId(9),
            name: "user.x".into(),
        },
        Request::ObjStat {
            items: vec![(InodeId(3), st)],
        },
        Request::ObjStamp {
            items: vec![(InodeId(3), st), (InodeId(4), st)],
        },
        Request::ObjTimes {
            inodes: vec![InodeId(3), InodeId(9)],
            mtime: Timespec {
                secs: 978_307_200,
                nanos: 5,
            },
        },
        Request::Allocate {
            inode: InodeId(3),
            striping: st,
            offset: 4096,
            len: 1 << 20,
            mode: 1,
        },
        Request::SharedPointer {
            inode: InodeId(9),
            open: u64::MAX,
            epoch: 2,
            op: SharedOp::FetchAdd(1 << 33),
        },
        Request::SharedPointerSince {
            inode: InodeId(9),
            open: 5,
            epoch: 1,
            incarnation: u64::MAX - 3,
            op: SharedOp::Set(77),
        },
        Request::PresentCapability {
            cap: test_capability(),
            reset: true,
        },
        Request::GrantCapability {
            cred: cred(),
            inode: InodeId(9),
            rights: capability::rights::READ | capability::rights::WRITE,
        },
        Request::RevokeCapabilities {
            inodes: vec![InodeId(9), InodeId(u64::MAX)],
            at_ms: 1 << 41,
        },
        Request::VerifyCapability {
            cap: test_capability(),
        },
        Request::WithParent {
            request: Box::new(create("new")),
        },
        Request::WithParent {
            request: Box::new(Request::Link {
                cred: cred(),
                inode: InodeId(9),
                parent: InodeId(5),
                name: "other".into(),
            }),
        },
        Request::CreateGranted {
            request: Box::new(create("granted")),
        },
        Request::CreateStamped {
            request: Box::new(create("stamped")),
        },
        Request::LookupMany {
            cred: cred(),
            parent: InodeId(5),
            names: vec!["a".into(), "bb".into(), "".into()],
        },
        Request::CreateMany {
            cred: cred(),
            parent: InodeId(5),
            names: vec!["one".into(), "two".into()],
            mode: 0o640,
            layout: LayoutRequest::default(),
        },
        Request::Vouched {
            request: Box::new(Request::Lookup {
                cred: cred(),
                parent: InodeId(5),
                name: "seen".into(),
            }),
        },
        Request::Vouched {
            request: Box::new(Request::GetAttr {
                cred: cred(),
                inode: InodeId(9),
            }),
        },
        Request::Vouched {
            request: Box::new(Request::Resolve {
                cred: cred(),
                path: "/a/b".into(),
            }),
        },
        Request::VouchedReadable {
            request: Box::new(Request::Revalidate {
                cred: cred(),
                steps: vec![],
            }),
        },
        Request::ReleaseWrites {
            releases: vec![(InodeId(9), (2, 1_700_000_000_000)), (InodeId(12), (1, 5))],
        },
        Request::Changes {
            after: 70_000,
            max: 4096,
        },
        Request::Tracked {
            client: 0xc0ffee,
            slot: 3,
            xid: 41,
            replay: 0,
            made: None,
            request: Box::new(Request::Unlink {
                cred: cred(),
                parent: InodeId(1),
                name: "f".into(),
                keep: None,
            }),
        },
        Request::Tracked {
            client: 0xc0ffee,
            slot: 4,
            xid: 42,
            replay: 17,
            made: Some(attr()),
            request: Box::new(Request::CreateGranted {
                request: Box::new(create("again")),
            }),
        },
        Request::Tracked {
            client: 0x5eed,
            slot: 2,
            xid: 8,
            replay: 0,
            made: None,
            request: Box::new(Request::CreateStamped {
                request: Box::new(create("tracked")),
            }),
        },
        Request::ReplayDone { client: 0xc0ffee },
        Request::QuotaSet {
            cred: cred(),
            kind: QuotaKind::User,
            id: 5101,
            limits: quota_limits(),
        },
        Request::QuotaGet {
            cred: cred(),
            kind: QuotaKind::Project,
            id: 77,
        },
        Request::QuotaGrace {
            cred: cred(),
            kind: QuotaKind::Group,
            grace: QuotaGrace {
                bytes_s: 86_400,
                inodes_s: 3_600,
            },
        },
        Request::Project {
            cred: cred(),
            inode: InodeId(9),
            set: Some(77),
            recursive: true,
        },
        Request::Project {
            cred: cred(),
            inode: InodeId(9),
            set: None,
            recursive: false,
        },
        Request::QuotaRecount { cred: cred() },
    ] {
        s.request(r);
    }
}

fn responses(s: &mut Samples) {
    for r in [
        Response::Hello {
            server_id: ServerId(3),
            roles: roles::META | roles::IO,
            incarnation: 11,
            proof: [7; PROOF_BYTES],
        },
        Response::Challenge {
            nonce: [9; NONCE_BYTES],
        },
        Response::MungeChallenge {
            nonce: [4; NONCE_BYTES],
        },
        Response::ServerInfo {
            protocol_version: 5,
            build: "0.1.0 (git 1a2b3c4)".into(),
        },
        Response::Cluster(cluster_info()),
        Response::Attr(attr()),
        Response::Entries {
            entries: vec![DirEntry {
                name: "a".into(),
                inode: InodeId(2),
                kind: FileKind::Directory,
            }],
            more: true,
        },
        Response::EntriesPlus {
            entries: vec![("f".into(), attr())],
            more: false,
        },
        Response::EntriesSized {
            entries: vec![("f".into(), attr()), ("g".into(), attr())],
            sized: vec![true, false],
            more: true,
        },
        Response::Done,
        Response::Statfs(MetaStatfs {
            files: 10,
            directories: 3,
            orphans: 1,
        }),
        Response::Link("../target".into()),
        Response::Bytes(1 << 20),
        Response::Extents(vec![0, u64::MAX]),
        Response::IoStatfs(io_statfs()),
        Response::View(ViewId(9)),
        Response::CacheStats(cache_stats()),
        Response::CacheCioStats(CioStats {
            references: 5,
            hits: 3,
            bytes: 500,
            hit_bytes: 300,
            unasked_fetched: 1,
        }),
        Response::Token(77),
        Response::LockStats(LockStats {
            requests: 9,
            grants: 7,
            conflicts: 5,
            waits: 2,
            held: 1,
            lapsed: 0,
        }),
        Response::Unlinked {
            kept: Some(InodeId(3)),
        },
        Response::Renamed {
            moved: attr(),
            kept: None,
        },
        Response::Value(vec![1, 2, 3]),
        Response::Names(vec!["user.a".into(), Name::new(vec![0xff])]),
        Response::ObjStats(vec![(10, 4096), (u64::MAX, 0)]),
        Response::ObjStamps(vec![
            ObjStamped {
                end: 10,
                allocated: 4096,
                stamp: ObjStamped::UNSETTLED,
                mtime: Timespec {
                    secs: 1_700_000_000,
                    nanos: 999_999_999,
                },
            },
            ObjStamped {
                end: u64::MAX,
                allocated: 0,
                stamp: ObjStamped::ABSENT,
                mtime: Timespec::default(),
            },
        ]),
        Response::Metrics {
            url: "http://127.0.0.1:9100/metrics".into(),
        },
        Response::Position(1 << 50),
        Response::LockHolder(None),
        Response::LockHolder(Some(HeldLock {
            write: true,
            start: 3,
            end: u64::MAX,
            pid: 77,
        })),
        Response::LockState(LockState {
            incarnation: u64::MAX,
            grace_left_ms: 9_000,
        }),
        Response::ShmPlaced {
            data_len: 4096,
            response: Box::new(Response::Bytes(4096)),
        },
        Response::Capability(test_capability()),
        Response::Made {
            attr: attr(),
            parent: dir_attr(),
        },
        Response::Committed(CommitInfo {
            interval_us: 5000,
            seq: 9,
            durable_seq: 7,
            since_durable_ms: u64::MAX,
        }),
        Response::MadeGranted {
            attr: attr(),
            parent: dir_attr(),
            capability: Some(test_capability()),
        },
        Response::MadeGranted {
            attr: attr(),
            parent: dir_attr(),
            capability: None,
        },
        Response::MadeStamped {
            attr: attr(),
            parent: dir_attr(),
            capability: Some(test_capability()),
            stamp: 0x1234_5678_9abc,
        },
        Response::MadeMany {
            parent: dir_attr(),
            made: vec![("one".into(), attr())],
            refused: vec![("two".into(), WireError::new(ErrorCode::Exists, "taken"))],
        },
        Response::AttrVouched {
            attr: attr(),
            vouch: Some(1 << 40),
        },
        Response::AttrVouched {
            attr: attr(),
            vouch: None,
        },
        Response::AttrSized {
            attr: attr(),
            vouch: 1 << 41,
        },
        Response::ReadableVouched {
            attr: attr(),
            vouch: Some(1 << 41),
            sized: true,
            capability: Some(test_capability()),
        },
        Response::ReadableVouched {
            attr: attr(),
            vouch: None,
            sized: false,
            capability: None,
        },
        Response::Changed {
            epoch: 0x1234_5678_9abc,
            next: 70_003,
            lost: false,
            inodes: vec![(InodeId(1), false), (InodeId(42), true), (InodeId(7), false)],
        },
        Response::Changed {
            epoch: 0x1234_5678_9abc,
            next: 70_003,
            lost: true,
            inodes: vec![],
        },
        Response::Security {
            capabilities: true,
            capability_lifetime_ms: 60_000,
            servers_only_key: true,
            identity: identity_mode::MUNGE,
            owner_uid: 0,
            trusted_uids: vec![0, 1001],
        },
        Response::Stamp(u64::MAX - 1),
        Response::Generation(5),
        Response::ServerStates {
            states: vec![
                (ServerId(1), server_state::ACTIVE),
                (ServerId(3), server_state::DRAINED),
            ],
        },
        Response::StaleFiles {
            files: vec![(InodeId(9), vec![ServerId(3)]), (InodeId(12), vec![])],
            more: true,
        },
        Response::Quota(quota_report()),
        Response::ProjectId(77),
        Response::BackupReady {
            snapshot: 3,
            bytes: 1 << 20,
            sha256: [0x5a; BACKUP_CHECKSUM_BYTES],
            store_format: 2,
            protocol: 7,
        },
        Response::BackupChunk(vec![1, 2, 3]),
        Response::ObjectPage {
            objects: vec![(InodeId(0x12a), (4096, 700)), (InodeId(0x22a), (0, 1))],
            more: false,
        },
        Response::States(vec![0, 1, 2, 3]),
        Response::Layouts {
            files: vec![
                (InodeId(9), replicated_layout()),
                (InodeId(12), cache_file().layout),
            ],
            more: true,
        },
        Response::Tracked {
            seq: 12,
            durable_seq: 11,
            epoch: 0xabcdef,
            response: Box::new(Response::Made {
                attr: attr(),
                parent: dir_attr(),
            }),
        },
    ] {
        s.response(Ok(r));
    }
    s.response(Err(WireError::new(ErrorCode::NotEmpty, "dir /x is not empty")));
}

fn quota_limits() -> QuotaLimits {
    QuotaLimits {
        bytes_soft: 9 << 30,
        bytes_hard: 10 << 30,
        inodes_soft: 90_000,
        inodes_hard: 100_000,
    }
}

fn quota_report() -> QuotaReport {
    QuotaReport {
        kind: QuotaKind::User,
        id: 5101,
        limits: quota_limits(),
        usage: QuotaUsage {
            bytes: 11 << 30,
            inodes: 12,
            bytes_over_since_ms: 1_700_000_000_000,
            inodes_over_since_ms: 0,
        },
        grace: QuotaGrace::default(),
        now_ms: 1_700_000_100_000,
    }
}

fn cluster_info() -> ClusterInfo {
    let io = |id, addr: &str, socket: Option<&str>| IoServer {
        id: ServerId(id),
        addr: addr.into(),
        socket: socket.map(Into::into),
    };
    ClusterInfo {
        name: "lab".into(),
        io_servers: vec![
            io(1, "127.0.0.1:7001", Some("/run/weft/io1.sock")),
            io(2, "127.0.0.1:7002", None),
        ],
        default_layout: LayoutRequest {
            stripe_size_bytes: Some(65536),
            stripe_count: Some(2),
            ..Default::default()
        },
        root: InodeId(1),
        cache: CacheTier {
            managers: vec![io(5, "127.0.0.1:7005", None)],
            mapping: CacheMapping::Hashed,
            block_size_bytes: 1 << 20,
        },
    }
}

fn io_statfs() -> IoStatfs {
    IoStatfs {
        objects: 4,
        bytes_stored: 5,
        bytes_free: 6,
        bytes_total: 7,
        bytes_unused: 8,
        file_system: 0xf5,
    }
}

fn cache_stats() -> CacheStats {
    CacheStats {
        incarnation: 5,
        policy: "arc".into(),
        capacity_bytes: 1 << 30,
        cached_bytes: 1 << 20,
        dirty_bytes: 4096,
        blocks: 16,
        hits: 9,
        misses: 2,
        evictions: 1,
        write_backs: 4,
        write_back_bytes: 8192,
        write_back_errors: 1,
        fetched_bytes: 3,
        write_backs_full: 3,
    }
}

fn values(s: &mut Samples) {
    s.value("u8", 0xa5u8);
    s.value("u16", 0xbeefu16);
    s.value("u32", 0xdead_beefu32);
    s.value("u64", u64::MAX - 1);
    s.value("i64", -2i64);
    s.value("bool", true);
    s.value("String", "weft é".to_string());
    s.value("tuple", (InodeId(3), 7u64));
    s.value("ViewId", ViewId(7));
    s.value("CacheFile", cache_file());
    s.value(
        "CacheFile.replicated",
        CacheFile {
            layout: replicated_layout(),
            ..cache_file()
        },
    );
    s.value(
        "LockStats",
        LockStats {
            requests: 1,
            grants: 2,
            conflicts: 3,
            waits: 4,
            held: 5,
            lapsed: 6,
        },
    );
    s.value(
        "CioStats",
        CioStats {
            references: 1,
            hits: 2,
            bytes: 3,
            hit_bytes: 4,
            unasked_fetched: 5,
        },
    );
    s.value("CacheStats", cache_stats());
    for op in [
        SharedOp::Create,
        SharedOp::Get,
        SharedOp::FetchAdd(9),
        SharedOp::Set(1 << 40),
        SharedOp::Drop,
    ] {
        s.value("SharedOp", op);
    }
    for how in [XattrSet::Either, XattrSet::Create, XattrSet::Replace] {
        s.value("XattrSet", how);
    }
    s.value(
        "CommitInfo",
        CommitInfo {
            interval_us: 1,
            seq: 2,
            durable_seq: 3,
            since_durable_ms: 4,
        },
    );
    s.value("Capability", test_capability());
    s.value("Identity", Identity::Cluster);
    s.value("Identity", Identity::Munge(b"MUNGE:x:".to_vec()));
    s.value("Name", Name::new(b"caf\xe9".to_vec()));
    s.value("AccessPattern", pattern());
    s.value("WireError", WireError::new(ErrorCode::NotFound, "no such file"));
    s.value(
        "WireError.quota",
        WireError::new(ErrorCode::QuotaExceeded, "disk quota exceeded"),
    );
    s.value("QuotaReport", quota_report());
    s.value("Cred", cred());
    s.value(
        "Timespec",
        Timespec {
            secs: -1,
            nanos: 999_999_999,
        },
    );
    for kind in [
        FileKind::File,
        FileKind::Directory,
        FileKind::Symlink,
        FileKind::Fifo,
        FileKind::CharDevice,
        FileKind::BlockDevice,
        FileKind::Socket,
    ] {
        s.value("FileKind", kind);
    }
    for mode in [CacheMode::None, CacheMode::Cached, CacheMode::Delegated] {
        s.value("CacheMode", mode);
    }
    for mapping in [CacheMapping::Aligned, CacheMapping::Hashed] {
        s.value("CacheMapping", mapping);
    }
    s.value("InodeId", InodeId(0x0102_0304_0506_0708));
    s.value("ServerId", ServerId(0x0a0b_0c0d));
    s.value("Layout", cache_file().layout);
    s.value("Layout", replicated_layout());
    s.value("LayoutRequest", LayoutRequest::default());
    s.value("LayoutRequest", dir_attr().dir_layout.unwrap());
    s.value(
        "ObjStamped",
        ObjStamped {
            end: 1,
            allocated: 2,
            stamp: 3,
            mtime: Timespec { secs: 4, nanos: 5 },
        },
    );
    for kind in [LockKind::Read, LockKind::Write, LockKind::Unlock] {
        s.value("LockKind", kind);
    }
    s.value(
        "HeldLock",
        HeldLock {
            write: false,
            start: 1,
            end: 2,
            pid: 3,
        },
    );
    s.value("LockRequest", lock(99, LockKind::Write));
    s.value(
        "LockState",
        LockState {
            incarnation: 1,
            grace_left_ms: 2,
        },
    );
    s.value("Striping", striping());
    s.value("Attr", attr());
    s.value("Attr", dir_attr());
    s.value("TimeSet", TimeSet::Now);
    s.value("TimeSet", TimeSet::At(Timespec { secs: 1, nanos: 2 }));
    s.value("SetAttr", SetAttr::default());
    s.value(
        "DirEntry",
        DirEntry {
            name: "e".into(),
            inode: InodeId(4),
            kind: FileKind::Symlink,
        },
    );
    s.value(
        "PathStep",
        PathStep {
            parent: InodeId(1),
            name: "p".into(),
            child: InodeId(2),
        },
    );
    s.value("IoServer", cluster_info().io_servers[0].clone());
    s.value("CacheTier", cluster_info().cache);
    s.value("CacheTier", CacheTier::default());
    s.value("ClusterInfo", cluster_info());
    s.value(
        "MetaStatfs",
        MetaStatfs {
            files: 1,
            directories: 2,
            orphans: 3,
        },
    );
    s.value("IoStatfs", io_statfs());
    s.value(
        "Range",
        Range {
            offset: 1 << 40,
            len: 4096,
        },
    );
}

/// The frame header: a fixed layout, not a `Wire` value, pinned the same way.
fn frame_header(s: &mut Samples) {
    let header = FrameHeader {
        version: PROTOCOL_VERSION,
        kind: FrameKind::Response,
        opcode: Opcode::Read as u16,
        request_id: 0x1122_3344_5566_7788,
        message_len: 77,
        data_len: 1 << 20,
    };
    let check = move |b: &[u8]| match b.try_into().map(FrameHeader::decode) {
        Ok(Ok(d)) if d == header => Ok(()),
        other => Err(format!("decoded {other:?}, expected {header:?}")),
    };
    s.push("frame.header".into(), header.encode().to_vec(), Box::new(check));
}

fn all_samples() -> Samples {
    let mut s = Samples::default();
    requests(&mut s);
    responses(&mut s);
    values(&mut s);
    frame_header(&mut s);
    s
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("golden file: bad hex"))
        .collect()
}

/// The golden file: its pinned protocol version and `name -> bytes`.
fn golden() -> (u16, BTreeMap<String, Vec<u8>>) {
    let mut lines = GOLDEN
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'));
    let version = lines
        .next()
        .and_then(|l| l.strip_prefix("protocol "))
        .and_then(|v| v.parse().ok())
        .expect("golden file starts with `protocol N`");
    let mut pinned = BTreeMap::new();
    for line in lines {
        let (name, bytes) = line.split_once(' ').expect("golden line: `name hex`");
        assert!(
            pinned.insert(name.to_string(), unhex(bytes.trim())).is_none(),
            "{name} twice"
        );
    }
    (version, pinned)
}

#[test]
fn every_sample_encodes_to_its_pinned_bytes_and_back() {
    let (version, pinned) = golden();
    assert_eq!(
        version, PROTOCOL_VERSION,
        "the golden file pins another protocol version: update both together"
    );
    let samples = all_samples();
    let mut wrong = Vec::new();
    for sample in &samples.0 {
        match pinned.get(&sample.name) {
            Some(bytes) if *bytes == sample.bytes => {}
            _ => wrong.push(format!("{} {}", sample.name, hex(&sample.bytes))),
        }
    }
    // The lines below are what the codec writes now: a deliberate format change
    // pastes them into tests/golden/wire.txt and bumps PROTOCOL_VERSION.
    assert!(
        wrong.is_empty(),
        "{} samples differ from or are missing in tests/golden/wire.txt:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    let names: BTreeSet<&String> = samples.0.iter().map(|s| &s.name).collect();
    let stale: Vec<_> = pinned.keys().filter(|n| !names.contains(n)).collect();
    assert!(stale.is_empty(), "pinned without a sample: {stale:?}");
    for sample in &samples.0 {
        if let Err(e) = (sample.decodes_back)(&pinned[&sample.name]) {
            panic!("{}: {e}", sample.name);
        }
    }
}

#[test]
fn every_opcode_and_tag_has_a_sample() {
    let samples = all_samples();
    let sampled_opcodes: BTreeSet<u16> = samples
        .0
        .iter()
        .filter(|s| s.name.starts_with("request."))
        .map(|s| u16::from_le_bytes([s.bytes[0], s.bytes[1]]))
        .collect();
    // The decoder knows an opcode when it says anything but "unknown opcode" of it (a
    // nested request's unknown opcode, 0 here, is another matter).
    let known: BTreeSet<u16> = (0..=u16::MAX)
        .filter(|&op| !matches!(Request::decode(op, &[0; 64]), Err(DecodeError::UnknownOpcode(o)) if o == op))
        .collect();
    assert_eq!(
        known, sampled_opcodes,
        "opcodes the decoder knows vs. opcodes sampled"
    );
    let sampled_tags: BTreeSet<u8> = samples
        .0
        .iter()
        .filter(|s| s.name.starts_with("response.") && s.bytes[0] == 0)
        .map(|s| s.bytes[1])
        .collect();
    let known: BTreeSet<u8> = (0..=u8::MAX)
        .filter(|&tag| {
            let bytes = [tag];
            let mut r = Reader::new(&bytes);
            !matches!(
                Response::decode(&mut r),
                Err(DecodeError::Invalid {
                    what: "response tag",
                    ..
                })
            )
        })
        .collect();
    assert_eq!(
        known, sampled_tags,
        "response tags the decoder knows vs. tags sampled"
    );
}

/// Every request that claims a credential lets the server replace it (owner mode): one
/// that carried a claim past `cred_mut` would be believed.
#[test]
fn every_credential_a_request_claims_can_be_replaced() {
    let mut s = Samples::default();
    requests(&mut s);
    for sample in &s.0 {
        let opcode = u16::from_le_bytes([sample.bytes[0], sample.bytes[1]]);
        let mut req = Request::decode(opcode, &sample.bytes[2..]).unwrap();
        let claims = format!("{req:?}").contains("cred: Cred");
        assert_eq!(req.cred_mut().is_some(), claims, "{req:?}");
    }
}

#[test]
fn encodings_write_what_the_writer_gives() {
    // The helpers the samples rest on: a sanity check of the file's hex.
    let mut w = Writer::default();
    w.u32(0x0403_0201);
    assert_eq!(hex(&w.bytes), "01020304");
    assert_eq!(unhex("01020304"), w.bytes);
}
