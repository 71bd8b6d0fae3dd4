//! Responses: `Response`, each variant declared once with its reply tag
//! (`#[derive(Wire)]`), and a response body, `encode_result` / `decode_result`: a
//! result tag, then the response or a `WireError`.

use super::cache::{CacheStats, CioStats};
use super::values::{CommitInfo, LockStats, ViewId};
use super::{
    BACKUP_CHECKSUM_BYTES, BACKUP_CHUNK_BYTES_MAX, CHANGES_MAX, LAYOUT_SCAN_MAX, OBJ_LIST_MAX,
    SERVER_STATES_MAX, STALE_LIST_MAX, XATTR_VALUE_BYTES_MAX,
};
use crate::capability::Capability;
use crate::codec::{DecodeError, Reader, Wire, Writer};
use crate::error::WireError;
use crate::handshake::{NONCE_BYTES, PROOF_BYTES};
use crate::name::Name;
use crate::types::*;
use weft_layout::{InodeId, Layout, ServerId};
use weft_wire_derive::Wire;

#[derive(Debug, Clone, PartialEq, Eq, Wire)]
#[wire(tag_what = "response tag")]
pub enum Response {
    /// The answer to a client's `Authenticate`: the handshake is done.
    #[wire(tag = 1)]
    Hello {
        server_id: ServerId,
        roles: u32,
        /// Differs each time the server process starts: a client that sees another
        /// value than before knows state it kept in the server (a cache manager's dirty
        /// blocks) may be gone.
        incarnation: u64,
        /// The server's MAC over both nonces: it holds the cluster key too.
        #[wire(fixed = "proof length")]
        proof: [u8; PROOF_BYTES],
    },
    /// The answer to `Hello`: the nonce the client's proof must cover.
    #[wire(tag = 32)]
    Challenge {
        #[wire(fixed = "nonce length")]
        nonce: [u8; NONCE_BYTES],
    },
    /// The answer to `Hello` from a metadata manager in `munge` identity mode: as
    /// `Challenge`, and the client should claim an `Identity::Munge` for the connection.
    #[wire(tag = 41)]
    MungeChallenge {
        #[wire(fixed = "nonce length")]
        nonce: [u8; NONCE_BYTES],
    },
    #[wire(tag = 12)]
    ServerInfo {
        protocol_version: u16,
        /// The server binary's version and git revision, "0.1.0 (git 1a2b3c4)".
        build: String,
    },
    #[wire(tag = 2)]
    Cluster(ClusterInfo),
    #[wire(tag = 3)]
    Attr(Attr),
    #[wire(tag = 4)]
    Entries { entries: Vec<DirEntry>, more: bool },
    /// `ReaddirPlus`: names with their inodes' attributes.
    #[wire(tag = 21)]
    EntriesPlus { entries: Vec<(Name, Attr)>, more: bool },
    /// `ReaddirSized`: `EntriesPlus`, and for each entry whether its attributes carry
    /// the file's size (and blocks and modification time) as the manager knows it under
    /// its vouch; the other files' sizes are 0, to be asked of the io servers.
    #[wire(tag = 102)]
    EntriesSized {
        entries: Vec<(Name, Attr)>,
        sized: Vec<bool>,
        more: bool,
    },
    #[wire(tag = 5)]
    Done,
    #[wire(tag = 6)]
    Statfs(MetaStatfs),
    #[wire(tag = 7)]
    Link(Name),
    /// Bytes moved by a read or write.
    #[wire(tag = 8)]
    Bytes(u64),
    #[wire(tag = 9)]
    Extents(Vec<u64>),
    #[wire(tag = 10)]
    IoStatfs(IoStatfs),
    /// The id of a view just registered.
    #[wire(tag = 11)]
    View(ViewId),
    #[wire(tag = 13)]
    CacheStats(CacheStats),
    #[wire(tag = 17)]
    CacheCioStats(CioStats),
    /// A lock's token (`AppendLock`, `ExtentLock`).
    #[wire(tag = 14)]
    Token(u64),
    /// `LockStats`: an io server's extent-lock counts.
    #[wire(tag = 50)]
    LockStats(LockStats),
    /// A name went (`Unlink`); the inode kept for the session that asked, if any.
    #[wire(tag = 15)]
    Unlinked { kept: Option<InodeId> },
    /// `Rename`: the moved inode, and a replaced file kept for the session that asked.
    #[wire(tag = 16)]
    Renamed { moved: Attr, kept: Option<InodeId> },
    /// An extended attribute's value.
    #[wire(tag = 18)]
    Value(#[wire(bytes_max = XATTR_VALUE_BYTES_MAX)] Vec<u8>),
    /// Extended attribute names.
    #[wire(tag = 19)]
    Names(Vec<Name>),
    /// `ObjStat`: (logical end, bytes allocated) per object.
    #[wire(tag = 20)]
    ObjStats(Vec<(u64, u64)>),
    /// `ObjStamp`: per object.
    #[wire(tag = 65)]
    ObjStamps(Vec<ObjStamped>),
    /// `Metrics`: the server's metrics endpoint, `http://host:port/metrics`, or empty
    /// when it serves none.
    #[wire(tag = 55)]
    Metrics { url: String },
    /// `SharedPointer`: the pointer's value before the operation.
    #[wire(tag = 53)]
    Position(u64),
    /// `FileLockTest`: the conflicting lock, if any.
    #[wire(tag = 76)]
    LockHolder(Option<HeldLock>),
    /// `FileLockReclaim`, `LockSession`, and `FileLock` or `FileLockTest` held back by
    /// the grace: the manager's incarnation and grace left.
    #[wire(tag = 77)]
    LockState(LockState),
    /// `ShmCall`: the inner request's answer; its bulk data, `data_len` bytes, is at
    /// the start of the call's region of the shared segment.
    #[wire(tag = 60)]
    ShmPlaced {
        data_len: u64,
        #[wire(decode = placed_response)]
        response: Box<Response>,
    },
    /// `GrantCapability`: the capability.
    #[wire(tag = 40)]
    Capability(Capability),
    /// `WithParent`: the inode made (or, for a non-exclusive create of an existing
    /// file, found; for `Link`, linked) and the attributes of the directory the name is
    /// in, just after the operation.
    #[wire(tag = 66)]
    Made { attr: Attr, parent: Attr },
    /// `CommitMetadata`: where the manager's commits stand.
    #[wire(tag = 67)]
    Committed(CommitInfo),
    /// `CreateGranted`: `Made`'s fields and the capability granted with the create
    /// (`None`: the cluster asks for none, or the grant was refused; the client asks
    /// at the first write, as for any open).
    #[wire(tag = 68)]
    MadeGranted {
        attr: Attr,
        parent: Attr,
        capability: Option<Capability>,
    },
    /// `CreateStamped`: `MadeGranted`'s fields and the stamp of the capability's grant
    /// among the manager's write grants (0: no capability, or the manager keeps no
    /// record of its writers; never a stamp it vouches at).
    #[wire(tag = 97)]
    MadeStamped {
        attr: Attr,
        parent: Attr,
        capability: Option<Capability>,
        stamp: u64,
    },
    /// `CreateMany`: the directory's attributes after it, the files made (name and
    /// attributes) and the names refused (name and why), each in the order asked.
    #[wire(tag = 98)]
    MadeMany {
        parent: Attr,
        made: Vec<(Name, Attr)>,
        refused: Vec<(Name, WireError)>,
    },
    /// `Vouched`: the attributes and, for a regular file no writer may be changing,
    /// the stamp of the manager's vouch (`None`: a write capability may be live, or
    /// the manager cannot say).
    #[wire(tag = 85)]
    AttrVouched { attr: Attr, vouch: Option<u64> },
    /// `Vouched` (protocol 8): the attributes of a regular file no writer may be
    /// changing, with its size, blocks and modification time as its io servers told
    /// the manager after its last writer gave its capabilities back, under the vouch
    /// `vouch` (what `AttrVouched` says with `Some(vouch)`): the client need not ask
    /// the io servers.
    #[wire(tag = 119)]
    AttrSized { attr: Attr, vouch: u64 },
    /// `VouchedReadable`: what `Vouched` answers (`AttrSized` when `sized`, with
    /// `vouch` set; else `AttrVouched`), and for a regular file the caller may read, a
    /// read capability of it.
    #[wire(tag = 99)]
    ReadableVouched {
        attr: Attr,
        vouch: Option<u64>,
        sized: bool,
        capability: Option<Capability>,
    },
    /// `Changes`: the feed of manager incarnation `epoch` (another value than the
    /// caller's last: a restarted manager, everything may have changed), the inodes
    /// changed from position `after` up to `next` (deduplicated, in no order; ask
    /// again from `next`), each with whether a name of it went or moved (an unlink,
    /// rmdir or rename; else only its attributes or, for a directory, the names in it
    /// changed), and `lost` when `after` is older than the feed keeps (or ahead of
    /// it): then the inodes are none and everything may have changed.
    #[wire(tag = 101)]
    Changed {
        epoch: u64,
        next: u64,
        lost: bool,
        #[wire(max = CHANGES_MAX, what = "changed inode list")]
        inodes: Vec<(InodeId, bool)>,
    },
    /// `SecurityInfo`: whether io servers ask for capabilities (and their lifetime,
    /// and whether a servers-only key signs them), and the identity mode with its
    /// owner uid (`owner` mode) or trusted uids (`munge` mode).
    #[wire(tag = 120)]
    Security {
        capabilities: bool,
        capability_lifetime_ms: u64,
        servers_only_key: bool,
        /// `weft_proto::msg::identity_mode`.
        identity: u8,
        owner_uid: u32,
        #[wire(max = 1024, what = "trusted uid list")]
        trusted_uids: Vec<u32>,
    },
    /// `RebuildStamp`: the stamp of the ranges asked about.
    #[wire(tag = 90)]
    Stamp(u64),
    /// `StaleGeneration`: the piece's generation.
    #[wire(tag = 91)]
    Generation(u64),
    /// `StaleList`: replicated files and their stale pieces, in inode order; `more`
    /// when the list stopped at `max`.
    #[wire(tag = 92)]
    StaleFiles {
        #[wire(max = STALE_LIST_MAX, what = "stale file list")]
        files: Vec<(InodeId, Vec<ServerId>)>,
        more: bool,
    },
    /// `QuotaGet`, `QuotaSet`, `QuotaGrace`: one id's limits and usage.
    #[wire(tag = 95)]
    Quota(crate::quota::QuotaReport),
    /// `Project`: the inode's project (0: none).
    #[wire(tag = 96)]
    ProjectId(u32),
    /// `SetServerState`, `ServerStates`: every io server's state (`server_state`).
    #[wire(tag = 100)]
    ServerStates {
        #[wire(max = SERVER_STATES_MAX, what = "server state list")]
        states: Vec<(ServerId, u8)>,
    },
    /// `BackupBegin` (protocol 7): the snapshot's handle, its size in bytes, its
    /// SHA-256, the store format it is in and the manager's protocol version.
    #[wire(tag = 105)]
    BackupReady {
        snapshot: u64,
        bytes: u64,
        #[wire(fixed = "backup checksum length")]
        sha256: [u8; BACKUP_CHECKSUM_BYTES],
        store_format: u64,
        protocol: u16,
    },
    /// `BackupRead` (protocol 7): bytes of the snapshot from the offset asked.
    #[wire(tag = 106)]
    BackupChunk(#[wire(bytes_max = BACKUP_CHUNK_BYTES_MAX)] Vec<u8>),
    /// `ObjList` (protocol 7): objects as (inode, bytes allocated, seconds since its
    /// last change), in inode order; `more` when the page stopped at `max`.
    #[wire(tag = 107)]
    ObjectPage {
        #[wire(max = OBJ_LIST_MAX, what = "object list")]
        objects: Vec<(InodeId, (u64, u64))>,
        more: bool,
    },
    /// `InodeStates` (protocol 7): per inode asked, in order: 0 unknown to the
    /// namespace, 1 a live inode (a file, a directory, a removed file still open), 2 a
    /// removed file whose objects the purger has yet to delete, 3 in the precreated
    /// pool.
    #[wire(tag = 108)]
    States(#[wire(max = OBJ_LIST_MAX, what = "inode states")] Vec<u8>),
    /// `LayoutScan` (protocol 7): regular files and their layouts in inode order;
    /// `more` when the page stopped at `max`.
    #[wire(tag = 109)]
    Layouts {
        #[wire(max = LAYOUT_SCAN_MAX, what = "layout list")]
        files: Vec<(InodeId, Layout)>,
        more: bool,
    },
    /// `Tracked`: the operation's answer, its sequence number (0: it changed nothing),
    /// the last sequence number the manager made durable, and the manager's epoch (its
    /// incarnation: another value after a restart).
    #[wire(tag = 80)]
    Tracked {
        seq: u64,
        durable_seq: u64,
        epoch: u64,
        #[wire(decode = tracked_response)]
        response: Box<Response>,
    },
}

/// `ShmPlaced`'s answer: anything but another `ShmPlaced`, refused before recursing
/// (nesting must not grow the stack).
fn placed_response(r: &mut Reader<'_>) -> Result<Box<Response>, DecodeError> {
    let inner = r.u8()?;
    if inner == 60 {
        return Err(DecodeError::Invalid {
            what: "response tag inside ShmPlaced",
            value: 60,
        });
    }
    Ok(Box::new(Response::decode_tagged(inner, r)?))
}

/// `Tracked`'s answer: neither another `Tracked` nor a `ShmPlaced`.
fn tracked_response(r: &mut Reader<'_>) -> Result<Box<Response>, DecodeError> {
    let inner = r.u8()?;
    if inner == 80 || inner == 60 {
        return Err(DecodeError::Invalid {
            what: "response tag inside Tracked",
            value: inner as u64,
        });
    }
    Ok(Box::new(Response::decode_tagged(inner, r)?))
}

/// A response body: success with a response, or an error.
pub fn encode_result(result: &Result<Response, WireError>) -> Vec<u8> {
    let mut w = Writer::default();
    match result {
        Ok(resp) => {
            w.u8(0);
            resp.encode(&mut w);
        }
        Err(e) => {
            w.u8(1);
            e.encode(&mut w);
        }
    }
    w.bytes
}

pub fn decode_result(body: &[u8]) -> Result<Result<Response, WireError>, DecodeError> {
    let mut r = Reader::new(body);
    let out = match r.u8()? {
        0 => Ok(Response::decode(&mut r)?),
        1 => Err(WireError::decode(&mut r)?),
        v => {
            return Err(DecodeError::Invalid {
                what: "result tag",
                value: v as u64,
            })
        }
    };
    r.finish()?;
    Ok(out)
}
