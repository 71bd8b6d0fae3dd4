//! Weft's transport: framed requests multiplexed over one authenticated connection
//! per peer (TCP, or a Unix socket on the server's machine, whose bulk data moves
//! through a segment of shared memory where one can be had: `shm`).
//!
//! Invariant: one connection carries many requests in flight, matched to responses by
//! request id; no call waits longer than its timeout; a broken connection fails every
//! call waiting on it with an error naming the peer; no request is served on a
//! connection before both ends proved they hold the cluster key.
//!
//! # Code map
//!
//! Transport. `stream.rs`: a stream is TCP (`host:port`) or a Unix socket
//! (`unix:/path`); servers listen on TCP and, when given `--socket`, on a Unix socket
//! too; a client on the server's machine uses the socket when it exists and the
//! handshake names the expected server id (bulk data then skips the TCP stack on both
//! sides), else TCP. `shm/`: the shared-memory transport on the Unix socket (`mod.rs`;
//! the read pool in `pool.rs`, descriptor passing in `fds.rs`). Right
//! after the handshake the client makes a memfd (`WEFT_SHM_BYTES`, default 16 MiB),
//! seals it against shrinking and growing, maps it and passes it with `ShmAttach`
//! (opcode 140; the descriptor rides the frame's bytes, SCM_RIGHTS); the server's event
//! loop receives descriptors with `recvmsg` (keeping the last one per connection) and maps
//! one only if it is a tmpfs memfd of the announced size (at most 256 MiB) sealed with
//! `F_SEAL_SHRINK`, so it can never be truncated under the mapping (no SIGBUS). A call
//! whose payload or expected reply is 16 KiB or more then leases a region of the segment
//! (first fit, 4 KiB units), copies its data in and sends `ShmCall` (opcode 141: region
//! offset and length, data length, the inner request); the worker checks the region
//! against the segment, serves a plain read by `pread` straight into it
//! (`reply_from_file`'s runs), a read the handler places itself through
//! `Handler::reply_into` (the cache role, from its blocks), and anything else through
//! `Handler::handle_borrowed` (the io role writes the region's bytes to the object with no
//! copy; other roles get a copy),
//! and answers `ShmPlaced` (tag 60: the inner response, bytes placed); a reply too large
//! for its region travels in the frame. Each side populates its page-table entries for a
//! region's pages before the first copy through them (`Region::populate`:
//! `MADV_POPULATE_READ`/`_WRITE`, once per page, a bitmap on the `Mapping`): the server
//! because pwrite copies into a *new* page-cache folio with page faults disabled, and an
//! unmapped source page made ext4 zero the folio, discard the copy and retry with smaller
//! folios (most of a fresh file's write time on the server); the client to take one call
//! instead of a fault per page of a fresh segment. The region is held until its answer came (a timed
//! out call parks it), so the server never writes into a region handed out again. A
//! segment lives as long as its connection on each side (server: until the connection
//! closed and its last request finished; client: until the connection broke and its last
//! call let go; a segment of 1 MiB or more is then unmapped and closed by the process's
//! `weft-shm-reaper` thread, since freeing its pages took milliseconds on the io server's
//! event loop), and a memfd vanishes with its last descriptor and mapping, so a killed
//! peer leaves nothing behind. No segment (memfd or mmap failed, an older server answers
//! `UnknownOpcode`, the server refuses): the socket carries the data; no region free: that
//! call goes over the socket. `WEFT_TRANSPORT=shm|unix|tcp` forces one (`shm` fails a
//! connection that cannot have a segment, with the reason). The read pool (`Pool`): a
//! process that wants its reads placed (the mount) makes one more sealed memfd,
//! `weft-shm-pool`, of fixed-size buffers (the mount: one 4 MiB buffer per FUSE worker),
//! before it connects; each connection that got a segment attaches it too
//! (`ShmAttachPool`, opcode 186, request id 4 of the connection; an older server answers
//! `UnknownOpcode` and that connection has no pool), and the server maps it with the
//! segment's checks. A `Read`/`ReadView` whose reply sink lies wholly inside the pool goes
//! as `ShmScatter` (opcode 190: the sink's parts as pool (offset, length) pieces, the reply's
//! bytes in order filling them); the server checks every piece against its mapping of the
//! pool, refuses a reply of another length than the pieces (nothing placed), `pread`s each
//! run of the object straight into the pieces (`fill_regions`) and answers `ShmPlaced`: no
//! process copies the bytes (`weft_io_pool_placed_bytes` counts them). A buffer is leased
//! by one reader (`PoolSlot`) and held by every call in flight that names it (`PoolHold`):
//! a call given up on keeps it held until its late answer; a call whose connection broke
//! first retires it for good (the server may go on writing into it while it runs the
//! read), which shrinks the pool and never grows anything. `WEFT_TRANSPORT=unix|tcp` (and,
//! for the mount, `WEFT_READ_POOL=0`) makes no pool. `auth.rs`: the cluster key (32 random bytes; its file is hex, mode
//! 0600, refused when others may read it, created atomically by `load_or_create`), keys
//! derived from it per purpose (`derive(label)`), the handshake's proofs
//! (HMAC-SHA256 under the derived handshake key over a side label, both nonces and the
//! claimed identity; verified in constant time), `ClientAuth` (key and identity a client
//! proves) and the client side of the handshake. The handshake: client `Hello`, server
//! `Challenge` (its nonce), client `Authenticate` (its nonce, identity, proof), server
//! `Hello` (id, roles, incarnation, its own proof, which the client checks: an impostor
//! server is refused too). A manager in `munge` mode answers `Hello` with
//! `MungeChallenge` (reply tag 41) instead of `Challenge`; a client whose `ClientAuth`
//! claims no identity of its own (`Cluster`) then runs `munge -n` (`munge_credential`,
//! on `$WEFT_MUNGE_SOCKET`) and claims `Munge(credential)`, or stays `Cluster` when munge
//! fails (the manager then says a credential is required). `error.rs`: `RpcError`. `client/`
//! (`mod.rs` the `Connection`, `waiters.rs` the calls it waits for, `pending.rs` a call
//! waiting, `reader.rs` reading replies and the watcher, `pool.rs` the `ConnectionPool`):
//! a `Connection` does the handshake before its
//! watcher thread starts, then multiplexes many requests over one socket, matched by
//! request id by whichever thread reads the socket (leader/follower): a waiting call's
//! thread reads replies, handing each to its call, until its own comes, then asks another
//! waiting call's thread to go on, so a call alone on its connection reads its own reply
//! with no thread hand-off; the watcher reads what nobody waits for yet (every 50 ms while
//! calls are outstanding), notices a server that closed an idle connection (`is_broken`
//! looks at once too), and reads the connection itself while a reply of 256 KiB or more
//! (`BIG_REPLY_BYTES`, known from the call's sink or `send_expecting`) is due, so that a
//! thread waiting on several servers in turn still has their large replies received in
//! parallel; every wait is bounded; a broken connection fails all
//! waiters with an error naming the server; a frame with request id 0 is the server
//! telling why it drops the connection ("too many connections"), and becomes the waiters'
//! error; a reply framed in another protocol version fails with
//! `RpcError::ProtocolVersion` carrying that version (its body is not decoded); a refused
//! handshake is `RpcError::Authentication`; `Connection::server_info` asks for a server's
//! versions; `ConnectionPool` reconnects to a restarted server. A call may carry a
//! `ReplySink` (parts of the caller's memory): the thread reading the reply then reads its
//! bulk data straight into it, and the call does not return, even dropped or timed out,
//! while that thread may still write there. `server/`: `mod.rs` the `Handler` a role
//! implements, `ServerLimits`, `serve` and the worker pool (a request answered 10 s or
//! more after it arrived is logged, `weftd: slow request: ...`, with the time it waited
//! to run and the time it ran); `event_loop/` the event
//! loops (mio, epoll; `event_loops` threads, default 1), which accept (loop 0), run the
//! handshake, read each connection's frames into its own buffers (bulk data straight into
//! the request's buffer), hand whole requests to the workers (one queue, one wake-up per job), run those the
//! handler calls quick (`Handler::runs_inline`: an io server's plain reads and writes of
//! one range up to 64 KiB) themselves, right away, if they wait for nothing
//! (`Handler::try_inline`: the io server reads only from the page cache,
//! `preadv2(RWF_NOWAIT)`, writes with `pwritev2(RWF_NOWAIT)` where the file system takes
//! it, and touches no object a sieving write holds; what would wait goes to a worker,
//! counted as `weft_io_inline_to_worker`), answer `ServerInfo`
//! themselves, and end connections past a deadline (handshake, frame, send, idle;
//! `admission.rs` the handshake and admission, `frames.rs` frames in and replies out);
//! `order.rs` the arrival order of data-changing requests: each one the handler says
//! changes bytes (`Handler::changes`: an io server's writes, view writes, truncates and
//! allocations, as runs of its object) registers them on dispatch, and one that overlaps
//! an earlier request not yet finished is kept aside (no thread waits) and queued when
//! that one finishes; disjoint ones go on at once;
//! `outbox.rs` each connection's queue of replies, written by whoever finishes one
//! (worker) or finds the socket writable again (loop), never blocking, sendfile resuming
//! where the socket filled; `peers.rs` the accounting by peer (an address; on the Unix
//! socket, a user) and in all: connections (a peer's pending handshakes, at most
//! `peer_handshakes_max`, the oldest ended by its loop, `LoopMsg::Evict`, to make way;
//! and its established connections, counted once the handshake proved the key), failed
//! handshakes (only a Unix-socket user over the limit is refused for the rest of the
//! window; an address is logged, never refused), and bytes of requests and replies held. A
//! connection costs its buffers, not a thread. Per-connection lifecycle for handlers:
//! `connection_opened` (with the `Peer`: address, Unix user, client name, proven
//! identity) once its handshake succeeded, `connection_closed` once after its last
//! request (registered views are released when their connection closes).
//! `capability/` (`mod.rs`; the client side's `ManagerGrants` in `grants.rs`): `CapabilityKey` (HMAC-SHA256 key: `derive("weft capability v1")` of
//! the servers-only capability key, or of the cluster key when there is none; issues and
//! verifies in constant time); `Gate`, the io and cache roles' check: `present` verifies a
//! capability once and remembers per connection (64 shards of maps, at most 1,024 entries
//! a connection, past which it starts over) until when it may read or write which inode, `check` is a map lookup
//! per request, `revoke` records inode -> time (capabilities issued at or before it are
//! void; at most 65,536 remembered, past that everything issued before the newest
//! forgotten one is void) and bumps an epoch so connections recheck what they remember;
//! `verify` is the stateless check (MAC, expiry, lifetime, revocations) the manager
//! answers `VerifyCapability` with. `Gate::remote` (a job's delegate, no key) asks a
//! `CapabilityVerifier` (the manager) instead of checking the MAC, remembers a verified
//! capability by all its fields (never the MAC alone: a relabelled one would pass) for
//! 2 s so that a job's ranks presenting the same one cost one question (at most 4,096),
//! and where the manager answers `Unsupported` (capabilities off) serves unchecked.
//! `ConnectionPool::set_auth` proves another key to given addresses (a job's delegates).
//! Client side: a `CapabilitySource` (`ManagerGrants`: asks the manager as one
//! credential, keeps grants per inode and right until a quarter of the lifetime is left,
//! at most 4,096; one request per inode and right at a time, the other connections
//! wanting it wait for its answer; a writer asks for read and write in one grant, and
//! for write alone where the user may not read, so reading back needs no second grant
//! and no second present; `adopt` keeps a capability another process of the same user
//! handed over; `ServerCapabilities`: a server's own) set on a `ConnectionPool` is
//! given to its connections; `Connection::send*` presents what a data request needs
//! before sending it (once per connection, inode and right, renewed before expiry), and
//! a reply `CapabilityRequired` (revoked) forgets it so the next request presents a fresh
//! one (`ConnectionPool::call` and weft-client's `retry_if_revoked` repeat the request
//! once).
//! Write capabilities go back at close: `ManagerGrants` counts the write grants it got per
//! inode (asked, or with a create: `granted`) and the writable handles open
//! (`writer_opened`/`writer_closed`, called by weft-client's `File` at open and drop); when
//! the last one closes it forgets the kept write capability (under the same lock as
//! `writer_opened`) and a thread of its own sends the counts back in batches
//! (`ReleaseWrites`). A connection uses a write capability it presented only while the
//! source still `holds` it, so a writer after the release asks for (and is counted with) a
//! new grant. Never given back, expiring instead: a capability handed to other processes
//! (`shared`, MPI handoff), one of a file written through cache managers or delegates
//! (they write back after the close), grants of a source with a pool of its own.

pub mod auth;
pub mod capability;
pub mod client;
mod error;
pub mod frame_io;
pub mod server;
pub mod shm;
pub mod stream;

pub use auth::{munge_credential, munge_socket, ClientAuth, ClusterKey, KeyError};
pub use capability::{CapabilityKey, CapabilitySource, CapabilityVerifier, Gate, ServerCapabilities};
pub use client::{
    CallReply, Connection, ConnectionPool, PendingCall, ReplySink, RpcError, SinkReply, Timeouts,
    BIG_REPLY_BYTES,
};
pub use server::{
    new_incarnation, serve, serving_incarnation, Changes, ConnectionId, FileReply, Handler, Inline, Peer,
    ReplyInto, Restarter, ServerHandle, ServerIdentity, ServerLimits,
};
