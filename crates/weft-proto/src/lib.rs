//! Weft's wire protocol: frame headers, a bounded binary codec, messages and error codes.
//!
//! Invariant: this crate does no I/O; it turns bytes into typed messages and back, and
//! rejects anything malformed or oversized with a [`DecodeError`] instead of panicking.
//!
//! A frame is a fixed 32-byte [`FrameHeader`], then `header_len` bytes of encoded
//! message, then `data_len` bytes of bulk data that travel raw (never re-encoded).
//!
//! # Declared once
//!
//! Every message and value type is declared once and its encoder and decoder derived
//! (`#[derive(Wire)]`, crate weft-wire-derive, whose `//!` docs list the attributes):
//! fields in declaration order; a response's reply tag and a tagged enum's tag as
//! `#[wire(tag = N)]`; a request's opcode by its name (`Request::Read` travels as
//! `Opcode::Read`); limits as field attributes (`#[wire(max = RANGES_MAX, what = "range
//! list")]`, `bytes_max`, `fixed`), checks that span fields as `check = fn`, and the few
//! layouts that are not fields in order (a request carried in another, `Layout`'s flag
//! bit, `SharedOp`, `Identity`, `AccessPattern`, `WireError`) by hand.
//!
//! We chose our own derive over serde with a compact format (postcard, bincode): the
//! existing format has to stay byte for byte (fixed-width little-endian integers, `u32`
//! lengths, `u8` option tags and reply tags, opcodes out of band in the frame header,
//! fields an older peer leaves off at the end), which no serde format writes without a
//! custom serializer as large as the codec; and every limit and error of the
//! hand-written decoders had to stay exactly as it was. The derive writes the code a
//! person would, so the hot messages cost what they did: `cargo run --release -p
//! weft-proto --example codec_bench` times them against a frozen copy of the
//! hand-written codec, alternated in one run.
//!
//! `tests/golden.rs` pins the bytes of every request, response and value type
//! (`tests/golden/wire.txt`); a decoder that knows an opcode or tag without a sample
//! fails it, and so does a new variant not named there. A deliberate format change
//! updates that file and `PROTOCOL_VERSION` together.
//!
//! # Code map
//!
//! The wire protocol. A frame is a 32-byte header (magic, version, kind, opcode, request
//! id, message length, bulk length), an encoded message, and raw bulk data that is never
//! re-encoded. `codec.rs` is a bounded reader/writer; `msg/` the requests
//! (`request.rs`, opcodes in `opcode.rs`, carried requests and shared-memory descriptors
//! in `request/nested.rs`) and responses (`response.rs`); `types.rs` shared value types (`Attr`, `Cred`, `Striping`, ...); `name.rs`
//! `Name`, the byte string of entry names and symlink targets; `error.rs` the stable numbered error codes and their errno mapping. `frame.rs` holds
//! `PROTOCOL_VERSION` (8: `AddServer` (meta, opcode 237), an io server joining a running
//! cluster (`weft server add`), answered `Cluster`; `AttrSized` (tag 119), the manager's
//! answer to `Vouched` (which may carry a `Resolve`) with a quiet file's size as its io
//! servers told it; within 8, `SecurityInfo` (opcode 238) answered `Security` (tag 120),
//! how the cluster protects itself, for `weft status`, and `CacheMigrate` (cache, opcode 89), a migration's hold of a cached file at each cache manager; 7: quotas, `QuotaSet`, `QuotaGet`, `QuotaGrace`, `Project`,
//! `QuotaRecount` (meta, opcodes 240-244), replies `Quota`, `ProjectId` (tags 95-96), error
//! `QuotaExceeded` (45, EDQUOT); migration to a new layout and io servers' states,
//! `MigrateObject` (io, opcode 250), `MigrateBegin`, `MigrateEnd`, `ServerFiles`,
//! `SetServerState`, `ServerStates` (meta, 251-255), reply `ServerStates` (tag 100);
//! metadata backup, `BackupBegin`, `BackupRead`, `BackupEnd` (meta, opcodes 260-262), and
//! `weft check`'s scan, `ObjList` (io, 263), `InodeStates`, `AdoptOrphans`, `LayoutScan`
//! (meta, 264-266), replies `BackupReady`, `BackupChunk`, `ObjectPage`, `States`,
//! `Layouts` (tags 105-109); 6: the rebuild of replicated files' stale pieces, `RebuildStamp`,
//! `RebuildWrite` (io, opcodes 232-233), `StaleGeneration`, `ClearStale`, `StaleList` (meta,
//! 234-236), replies `Stamp`, `Generation`, `StaleFiles` (tags 90-92); 5: `Tracked`, opcode 210, wraps every namespace change with the
//! client's identity, slot and request number and is answered `Tracked`, tag 80, with the
//! operation's sequence number, the durable one and the manager's epoch; `ReplayDone`,
//! opcode 211; `Vouched`, `ReleaseWrites` and `MarkStale` below; 4: `IoStatfs` carries f_bfree and a file-system identity, so that
//! a cluster's space counts a file system shared by several io servers once; 3: the
//! authenticated handshake); `ServerInfo` (opcode 2, added
//! within version 1) asks a server for its protocol version and build, for `weft status`.
//! `handshake.rs`: what the handshake carries (nonces, proofs, the claimed `Identity`:
//! `Cluster`, kind 0, or `Munge`, kind 1, with a MUNGE credential;
//! the size limit of frames before it is done); the proofs themselves are weft-rpc's.
//! `space.rs`: the reserve of a full file system the manager and the io servers agree on
//! (`meta_reserve_bytes`, `io_reserve_bytes`: twice the manager's), pure arithmetic.
//! `capability.rs`: the `Capability` a manager grants (inode, rights `READ`/`WRITE`, or
//! `SERVER` for servers' own, issue and expiry in Unix ms, a 32-byte MAC over the fixed
//! fields) and `need(request)`, what each request needs before an io server or cache
//! manager serves it (reads, views, shared locks: read; writes, truncate, allocate,
//! append and exclusive locks, cache truncate: write; sync, flush, close: either;
//! object create/precreate/remove/list and times, cache drop, revocations: server; sizes, statistics,
//! view registration and unlocks: none). Opcodes 100-102 (added within version 3; no
//! existing message changed): `PresentCapability` (a capability, and `reset` to forget
//! the connection's earlier ones), `GrantCapability` (meta: cred, inode, rights; reply tag
//! 40 `Capability`), `RevokeCapabilities` (servers only: inodes and the manager's time),
//! `VerifyCapability` (opcode 103, meta: a capability; `Done` when it verifies there, for
//! a job's delegate, which holds no key);
//! error code 44 `CapabilityRequired` (EACCES).
//! `Metrics` (opcode 130, reply tag 55, added within version 3) asks any server for its
//! metrics endpoint's URL and, with `text`, its metrics as bulk data.
//! `ExtentLock`, `ExtentUnlock` and `LockStats` (opcodes 120-122, reply tag 50, added
//! within version 3) lock file byte ranges at an io server and read its lock counts.
//! metrics endpoint's URL and, with `text`, its metrics as bulk data. `ObjPrecreate`
//! (opcode 73, added within version 3) makes fresh objects exclusively and durably for the
//! manager's pool. `ReaddirPlus` (opcode 74, reply `EntriesPlus`, tag 21, added within
//! version 3) is a readdir page with every entry's attributes, at most 512 KiB of them.
//! `pattern.rs`: the original access pattern of a collective read (each process's view
//! interval, in time order, views sent once) that `ViaCacheAware` (opcode 87) carries to
//! cache managers with a read.
//! `SharedPointer` (opcode 125, reply `Position`, tag 53, added within version 3): an
//! MPI-IO shared file pointer at the metadata manager (create, get, fetch-and-add, set,
//! drop), keyed by inode and a random id per collective open.
//! `ObjStamp` (opcode 151, reply `ObjStamps`, tag 65, added within version 3; an older
//! server answers `UnknownOpcode` and the client asks `ObjStat`): `ObjStat` with each
//! object's change stamp (`ObjStamped`: the object file's ctime in ns, `ABSENT` for a
//! missing object, `UNSETTLED` within `SETTLE_NS`, 1 s, of its last change, since a coarse
//! clock may leave a write right after a stat unseen), by which the mount keeps pages;
//! each entry also carries the object's mtime, so every size query asks `ObjStamp`.
//! `ObjTimes` (opcode 160, servers only; added within version 3): the manager sets the
//! mtime of a file's objects after a utimensat that set an explicit time.
//! `WithParent` (opcode 152, reply `Made`, tag 66, added within version 3; an older manager
//! answers `UnknownOpcode` and the client sends the request alone from then on): carries a
//! `Create`, `Mkdir`, `Symlink`, `Mknod` or `Link` (the decoder refuses anything else,
//! itself included) and is answered with what it made and the directory's attributes as
//! the operation's own transaction left them. The manager's metrics count it as the
//! request it carries ("create", "mkdir", ...).
//! `CreateGranted` (opcode 191, reply `MadeGranted`, tag 68, added within version 4; an older
//! manager answers `UnknownOpcode` and the client sends a `WithParent` from then on): carries a
//! `Create` (encoded as its body) and is answered with `Made`'s fields and `Option<Capability>`,
//! the read+write capability `GrantCapability` would grant for the new file (same permission
//! check, same issue time, recorded for verified users alike), `None` when the cluster asks
//! for none or the check refuses. Every file create of the native client, the C API, the
//! mount and MPI-IO goes this way, and the client keeps the capability (`adopt`), so a new
//! file's first write asks the manager for nothing. Counted as a "create".
//! `CreateStamped` (opcode 239, reply `MadeStamped`, tag 97, added within version 8; an older
//! manager answers `UnknownOpcode` and the client sends a `CreateGranted` from then on): a
//! `CreateGranted` whose answer also carries the stamp of the capability's grant among the
//! manager's write grants (0: none), the stamp the manager's vouch for the file stays at while
//! no other grant follows. Counted as a "create".
//! `LookupMany` (opcode 192, reply `EntriesPlus`, added within version 4; an older manager
//! answers `UnknownOpcode` and the client sends pipelined `Lookup`s): cred, directory, at most
//! `LOOKUP_MANY_MAX` (4,096) names; answered with the names found, in the order asked, and
//! their attributes (names not there left out; any other failure fails the request). Behind
//! `Client::stat_many` and the C API's `weft_stat_many`.
//! `CreateMany` (opcode 267, reply `MadeMany`, tag 98, added within version 8; an older
//! manager answers `UnknownOpcode` and the client creates one file at a time): cred,
//! directory, at most `CREATE_MANY_MAX` (256) names, mode, layout; each name created as an
//! exclusive create would be, all in one transaction made durable before the answer, which
//! lists the files made and the names refused with why. Sent `Tracked`. Behind
//! `Client::create_many` and the C API's `weft_create_many`. Counted as "create_many".
//! `Vouched` (opcode 220, reply `AttrVouched`, tag 85, version 5): carries a `Lookup`,
//! `Revalidate` or `GetAttr` (its opcode and body, as `WithParent`) and is answered with its
//! attributes and `Option<u64>`, the manager's vouch for a regular file outside the cache
//! tier: no write capability of it live, none issued since that stamp (weft-meta
//! `writers.rs`). `ReleaseWrites` (opcode 221, reply `Done`, version 5): at most
//! `RELEASE_WRITES_MAX` (4,096) (inode, (count, first issue time)) entries, the write grants
//! a client gives back after its last writable handle of each file closed (a manager
//! started after that issue time ignores the entry; only the sender's own grants count).
//! Both count as what they carry ("lookup", ...) or as "release_writes" in the metrics.
//! `VouchedReadable` (opcode 268, reply `ReadableVouched`, tag 99, added within version 8; an
//! older manager answers `UnknownOpcode` and the client sends `Vouched` from then on): a
//! `Vouched` whose answer (attributes, vouch, whether the size is the manager's own measure)
//! also carries a read capability of a regular file the caller may read (none if refused):
//! the mount's open check and the read after it ask the manager once. Counted as what it
//! carries.
//! `Changes` (opcode 269, reply `Changed`, tag 101, added within version 8; an older manager
//! answers `UnknownOpcode` and the mount keeps its attribute timeout): the manager's change
//! feed, the inodes whose attributes or entries changed since a position (numbers only,
//! never names), which a mount polls to hold names and attributes in the kernel past the
//! attribute timeout. Counted as "changes".
//! `ReaddirSized` (opcode 270, reply `EntriesSized`, tag 102, added within version 8; an
//! older manager answers `UnknownOpcode` and the client sends `ReaddirPlus` from then on):
//! `ReaddirPlus` whose answer says, per entry, whether the attributes carry the file's
//! size as the manager measured it under its vouch (see `Vouched`), so that a listing asks
//! the io servers only for the other files' sizes. Counted as "readdir_sized".
//! `CommitMetadata` (opcode 200, reply `Committed`, tag 67, added within version 4; an older
//! manager answers `UnknownOpcode`, which the client takes as "already durable": older
//! managers commit before they answer): `wait`, and the answer `CommitInfo` (commit
//! interval, last sequence number acknowledged, last one durable, time since the last
//! durable commit); with `wait` it returns once everything acknowledged before it is
//! durable. `File::sync` and the mount's `fsyncdir` end with it; `weft status` asks without
//! `wait` for the commit lag.
//! `ShmAttach` and `ShmCall` (opcodes 140-141, reply `ShmPlaced`, tag 60, added within
//! version 3; an older server answers `UnknownOpcode` and the client keeps to the socket):
//! the shared-memory transport (weft-rpc's `shm.rs`). The decoder refuses a region that
//! wraps past 2^64 or holds less than its data, and a `ShmCall` carrying a handshake or
//! shared-memory request; a `ShmPlaced` inside a `ShmPlaced` is refused before recursing.
//! `ShmAttachPool` and `ShmScatter` (opcodes 186 and 190, reply `ShmPlaced`; added within
//! version 3; an older server answers `UnknownOpcode` and the client reads as before): the
//! read pool of the same transport. The decoder refuses a scatter list with no pieces or
//! more than `SCATTER_PIECES_MAX` (4,096), an empty piece, one past 2^64, overlapping
//! pieces, and anything but a `Read` or `ReadView` inside.
//! drop), keyed by inode and a random id per collective open. `SharedPointerSince`
//! (opcode 150, reply `Position`): the same for an open that made no pointer (MPI-IO's
//! opens since): the first request makes it at 0, if the manager's incarnation is the
//! one the open saw (a restarted manager answers `NotFound`, as for a lost pointer) and the
//! pointer was not let go to make room (the last 65,536 such keys are remembered).
//! `RenameExchange` (opcode 188, reply `Renamed`; added within version 3): rename(2)'s
//! RENAME_EXCHANGE, two names swapped in one transaction, each move checked as `Rename`
//! checks it (a mount answered it EINVAL before; RENAME_WHITEOUT still is).
//! `RenameNoReplace` (opcode 189, reply `Renamed`; added within version 3): RENAME_NOREPLACE,
//! `Exists` when the target exists, in the move's own transaction (a mount used to look the
//! target up and then rename, replacing a file another client created in between; against
//! an older manager it still does).
//! `FileLock` and `FileLockTest` (opcodes 180-181, reply `Done` or `LockHolder`, tag 76):
//! a mount's `fcntl`/`flock` lock taken, changed or dropped at the manager (a conflict is
//! `Busy`), and F_GETLK's question; both carry a `LockRequest` (types.rs: session, owner,
//! inode, pid, kind, range), the one description of a lock request that the client, the
//! manager and the mount pass on (`FileLockTest` without the pid, as first defined).
//! `FileLockReclaim` and `LockSession` (opcodes 182-183, reply `LockState`, tag 77: the
//! manager's incarnation and the grace left, in ms; added within version 3): a lock
//! taken again after a manager restart, during its grace (a conflict with another reclaim
//! is `Busy`, a reclaim after the grace `Stale` unless the owner already holds it), and a
//! mount holding locks saying it is alive and asking the incarnation. During the grace a
//! `FileLock` or `FileLockTest` that no reclaimed lock answers is answered `LockState`
//! (not granted: ask again). `LockReclaimComplete` (opcode 184, reply `LockState`; added
//! within version 3, an older manager answers `UnknownOpcode`): a mount that reclaimed every
//! lock it holds from the incarnation it names (or holds none) says so, as NFSv4.1's
//! RECLAIM_COMPLETE; one naming another incarnation is ignored. `LockSessionEnd` (opcode
//! 185, reply `Done`, added within version 3): a mount unmounting, its locks dropped, ends its
//! session, which leaves the record (and a grace stops waiting for it). `LOCK_RECORD_IDLE` (30 s,
//! types.rs): how long the manager keeps a session holding no lock in its record, and half
//! of how long a mount goes on asking the incarnation after its last lock. `lock_table.rs`
//! holds the POSIX lock rules over a table of owners' locks (pure: the manager's table and
//! each mount's copy of its own are one type).

pub mod capability;
pub mod codec;
pub mod error;
pub mod frame;
pub mod handshake;
pub mod lock_table;
pub mod msg;
pub mod name;
pub mod pattern;
pub mod quota;
pub mod space;
pub mod types;

pub use capability::{Capability, Need};
pub use codec::{DecodeError, Reader, Wire, Writer};
pub use error::{ErrorCode, WireError};
pub use frame::{FrameHeader, FrameKind, FRAME_HEADER_BYTES, PROTOCOL_VERSION};

pub use msg::{CommitInfo, Opcode, Request, Response, SharedOp, ViewId, XattrSet};
pub use name::Name;
pub use pattern::{AccessPattern, PatternRef};
pub use types::*;
