//! Weft's metadata manager as a library: the durable namespace ([`store`]) and the
//! service that answers metadata requests and keeps io-server objects in step
//! ([`service`]).
//!
//! Invariant: this crate opens no sockets; it reaches io servers only through the
//! [`service::ObjectServers`] trait.
//!
//! # Code map
//!
//! The metadata manager. `store/` is the durable namespace on redb (tables: inodes,
//! names keyed by (parent, name bytes), orphans, kept, xattrs, lock_sessions,
//! file_parents, counters), one file per
//! operation in `store/ops/` (links, special files and each extended attribute call
//! included), POSIX permission checks in `store/access.rs`, the extended attribute rules
//! and limits in `store/xattrs.rs`, group commit in `store/group.rs` (operations that
//! arrive while a commit is running share the next write transaction and its one fsync;
//! the leader waits for as many members as the last group had, at most half the recent
//! commit time (2 ms), since a flush costs the same for one operation as for many;
//! each is answered only once its group is durable, or with a commit interval
//! (`commit_interval_ms`) once its group committed non-durably, a background committer
//! (`MetaService::spawn_committer`) and `CommitMetadata` (fsync, sync) making them durable;
//! every operation gets a sequence number, the last one stored with each commit (counter
//! `commit_seq`); a refusal stays out of the group, a storage error fails the whole group;
//! the database file holds its disk blocks ahead of its commits, `store/room.rs`, so that a
//! full disk fails no commit). Non-directories carry a link count; a file whose last name goes while a mount has it open is kept, nameless,
//! for that mount's session (`ops/release.rs`) until the mount releases it. `file_locks.rs`
//! keeps mounts' `fcntl` and `flock` locks in memory (per file, per owner: a mount session
//! and the kernel's lock owner there; POSIX splitting and replacing of an owner's ranges;
//! at most 4,096 per file and 2^20 in all, past which a lock is refused as too many; the
//! rules are weft-proto's `lock_table.rs`); a lock request renews its session, a lapsed
//! session's locks are dropped with its kept files, and the session is remembered
//! (`lapsed.rs`, at most 4,096): its next `FileLock` or `FileLockReclaim` is answered
//! `Stale`, and its next `LockSession` too, which forgets it. The mount then counts every
//! lock it held as lost (`LOST LOCK`, EIO on descriptors open at the loss), unlocks them
//! at the manager and asks again; otherwise a mount stopped past the lease came back to
//! the same incarnation and took its locks for confirmed while another process held
//! them. A mount that has had no answer from the manager to a lock request or renewal for
//! 5/6 of the lease (50 s) fails I/O on its locked files with EIO (weft-fuse `locks.rs`,
//! `locks_trusted`) until one comes, as an NFS client stops at its lease's end: a mount cut
//! off from the manager but not from the io servers would otherwise write on under locks
//! the manager may have given away. `WEFT_SESSION_LEASE_MS` shortens the 60 s lease for
//! tests, in weftd and the mount alike. Locks live in memory; after a start
//! the manager grants only reclaims for a grace (`--lock-grace-ms`, default
//! `LOCK_GRACE_DEFAULT`, 10 s, ten of the mounts' 1 s `LOCK_RENEW_PERIOD`; none when the
//! start created the database: `MetaStore::created`), as NFS does: a lock that a reclaimed
//! one refuses is refused at once, any other lock or F_GETLK is held back until the grace
//! ends, and the grace, measured from the start, ends for good once passed. The grace waits
//! only for the sessions in the durable record of lock holders (table `lock_sessions`,
//! `ops/lock_sessions.rs`, as knfsd's client-tracking database): a session is written there
//! (a small transaction of its own, which waits for the group committing at the time)
//! before its first lock is granted (`Outcome::Unrecorded`: record, then ask again), and
//! dropped at its `LockSessionEnd` (unless it still holds locks) or once it has held no
//! lock for `LOCK_RECORD_IDLE` (the purger's round looks at most every 7.5 s). `service/locks.rs`: the `lock_records` mutex orders each session's additions and
//! removals, and a grant checks the in-memory copy under `file_locks`' mutex, where a
//! removal is decided: a session holding a lock is always in the durable record. At a start
//! none recorded means no grace; else it ends once every recorded session has sent
//! `LockReclaimComplete`, or when its time is up. At most 4,096 sessions (`RECORDED_MAX`);
//! past that a durable full mark (counter `lock_sessions_overflow`) stands for the rest,
//! and the next start waits its whole grace (the mark goes after that grace). A stale
//! record (a session that held none at the crash, or whose mount is gone) only makes the
//! grace run its whole time; a start that wants no grace (new database, clean stop with
//! none held, `--lock-grace-ms 0`) clears the record.
//! `ops/lookup.rs`'s `may_access_data` is the check behind `GrantCapability` (a regular
//! file; the open's read/write permission, owner and root always; a removed file waiting
//! for its purge, read only, and for a verified user only if granted before);
//! `MetaService::handle_as` takes the `Caller` weft-server established: `Trusted` (`owner`
//! and `claimed` modes, a `munge_trusted_uids` daemon) or `User(cred)` (a MUNGE-verified
//! user), whose requests `screen` checks first: every inode they name by number must be
//! reachable (`ops/search.rs`'s `may_reach`: search permission on each directory from the
//! root down, walked up from any directory holding one of a file's names, `file_parents`,
//! built at the first open of a store made before it), a `SetAttr { by_handle }`
//! keeps its handle only for the owner, root, or a uid `handles.rs` records a live write
//! grant for (else it is checked as a path-based change), and a lock needs
//! `may_access_data` in the lock's mode. `handles.rs` is the record of the capabilities
//! granted to verified users, (inode, uid, right) -> expiry, at most 262,144, forgotten
//! at the inode's chmod or chown. `service/capabilities.rs` grants
//! through a `CapabilityIssuer` the server process provides, taking the issue time
//! before the check and after every earlier revocation, and revokes after every chmod
//! and chown (`SetAttr` with mode, uid or gid).
//! `ops/revalidate.rs` checks, in one snapshot, that a path a mount cached still holds
//! name by name; `ops/precreated.rs` the numbers of precreated objects. `service/` turns
//! requests into store operations (`mod.rs`: the dispatch, `serve`), hands creates
//! precreated numbers from its pools (`create.rs`, `precreate.rs`: refilling a pool, or
//! making one file's objects, before committing a create; a refiller thread,
//! `spawn_refiller`, refills pools running low in the background), tracks mount sessions
//! (`locks.rs`: releasing the kept files of sessions that stop renewing), answers tracked
//! changes once (`tracked.rs`), takes io servers added while it runs (`servers.rs`,
//! recorded in table `added_io_servers`, `store/ops/servers.rs`, merged with the
//! description at start), and purges orphans' objects in the background
//! (`background.rs`), each one round after it first saw it. `shared_pointer.rs`: MPI-IO shared file pointers, in
//! memory only (at most 65,536, the longest unused one making room), served as an atomic
//! fetch-and-add; a restart loses them and their requests fail with `NotFound`, never
//! handing out an offset twice. `writers.rs`: per inode the write capabilities granted
//! and not given back (`ReleaseWrites`), per holder (the authenticated user, or the
//! servers: a release counts only against its sender's own grants), their latest expiry
//! and the stamp of the latest grant (stamps rise, starting above any of an earlier run);
//! `Vouched` answers a file's attributes with that stamp when none is live (a grant never
//! given back counts until its expiry plus 2 s), so a client that read the file's size and
//! change stamps under it can skip the io servers. Bounded (65,536 inodes, 16 holders
//! each): an inode without an entry is vouched for at a floor raised past every entry let
//! go; a table full of live entries starts over and, like a restarted manager (not one
//! whose database is new), vouches for nothing until every capability granted before can
//! have expired. A `SetAttr` of size or times moves the inode's stamp.
//!
//! ## Replay (`replay.rs`, `store/replies.rs`)
//!
//! Replay after a restart (as Lustre's recovery). The store records, per
//! (client, slot), the last tracked request's number, sequence number and encoded answer
//! in table `replies`, in the operation's own write transaction: the service sets the
//! thread's `Tracking` before calling the store, and the group commit records it for the
//! first body whose value `reply_of` turns into the answer (so a create's durable inode
//! reservation records nothing). A request whose slot record has its number is answered
//! from the record; a later number there means it was done. A replayed create, mkdir,
//! symlink or mknod gets its first inode number back (`allocate_inode` takes it from the
//! `Tracking`; a file also its layout, its number leaves the precreated table or the
//! orphans, and its existing objects are kept). After a start with a commit interval the
//! manager holds a window (`WEFT_REPLAY_WINDOW_MS`, default 3 s): replays go in their
//! original sequence order across clients (the lowest waiting once every expected client
//! has one waiting or said `ReplayDone`), other requests wait, the purger pauses; it ends
//! when every client with a record within 60 s of the newest said `ReplayDone`, and new
//! requests then still wait for the clients replaying at its end to finish. At most
//! 4,096 clients' records, the least recently active forgotten first.

pub mod feed;
pub mod file_locks;
pub mod handles;
pub mod lapsed;
pub mod replay;
pub mod service;
pub mod shared_pointer;
pub mod sizes;
pub mod store;
pub mod writers;

pub use service::{Caller, CapabilityIssuer, MeasurerHandle, MetaService, ObjectServers, PurgerHandle};
pub use store::{
    ClusterLayout, CreateCheck, Made, MetaStore, PendingCreate, StoreError, LINKS_MAX, XATTRS_PER_INODE_MAX,
    XATTR_BYTES_PER_INODE_MAX,
};
