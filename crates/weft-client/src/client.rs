//! The client handle: cluster discovery, credentials, and namespace operations through
//! the metadata manager.

use crate::error::ClientError;
use crate::file::{File, TransferOptions};
use crate::path;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use weft_layout::{InodeId, LayoutRequest, ServerId};
use weft_proto::msg::{Request, Response, XattrSet, BATCH_INODES_MAX, LOOKUP_MANY_MAX, READDIR_ENTRIES_MAX};
use weft_proto::{
    Attr, ClusterInfo, Cred, DirEntry, ErrorCode, FileKind, HeldLock, IoServer, IoStatfs, LockRequest,
    LockState, MetaStatfs, Name, ObjStamped, PathStep, SetAttr, Striping,
};
use weft_rpc::{ClientAuth, ConnectionPool, Timeouts};

pub(crate) struct Inner {
    pub pool: Arc<ConnectionPool>,
    pub meta_addr: String,
    /// What calls to the manager go to: `meta_addr`, or its Unix socket on its machine
    /// (`meta_route`).
    pub meta_route: String,
    pub cluster: ClusterInfo,
    pub io_addrs: HashMap<ServerId, Arc<ServerAddress>>,
    /// Addresses of the cache managers.
    pub cache_addrs: HashMap<ServerId, Arc<ServerAddress>>,
    pub cred: Cred,
    pub transfer: TransferOptions,
    /// The manager answered a `WithParent` with `UnknownOpcode` (it predates it): the
    /// `*_made` operations send their request alone from then on. Shared by every
    /// client made from this one.
    pub no_parent_attrs: Arc<AtomicBool>,
    /// The manager answered a `CreateGranted` with `UnknownOpcode` (it predates it):
    /// creates are sent without asking for the new file's capability from then on.
    pub no_create_grants: Arc<AtomicBool>,
    /// The manager answered a `Vouched` with `UnknownOpcode`: lookups are sent alone.
    pub no_vouch: Arc<AtomicBool>,
    /// What this client learnt of files' data under the manager's vouch (see
    /// `vouched`). Shared by every client made from this one.
    pub(crate) vouched: Arc<crate::vouched::Vouched>,
    /// Namespace changes kept until durable, replayed after a manager restart
    /// (`replay.rs`); one per connection pool.
    pub tracker: Arc<crate::replay::Tracker>,
}

impl Inner {
    /// See `Client::hold_write_grant`.
    pub fn hold_write_grant(&self, inode: InodeId) {
        if let Some(source) = self.pool.capability_source() {
            let _ = source.capability(inode, weft_proto::capability::rights::WRITE);
        }
    }
}

/// Where to reach a server, chosen when it is first used (see `io_address`): a client
/// pays for no server it does not use, and a hung one costs one timeout, not two.
pub(crate) struct ServerAddress {
    server: IoServer,
    chosen: OnceLock<String>,
}

impl ServerAddress {
    fn new(server: &IoServer) -> Arc<ServerAddress> {
        Arc::new(ServerAddress {
            server: server.clone(),
            chosen: OnceLock::new(),
        })
    }

    fn get(&self, pool: &ConnectionPool) -> &str {
        self.chosen.get_or_init(|| io_address(pool, &self.server))
    }
}

impl Inner {
    pub fn io_addr(&self, server: ServerId) -> Result<&str, ClientError> {
        match self.io_addrs.get(&server) {
            Some(address) => Ok(address.get(&self.pool)),
            None => Err(ClientError::refused(
                ErrorCode::Unavailable,
                format!("io server {server} is not in the cluster description"),
            )),
        }
    }

    pub fn cache_addr(&self, server: ServerId) -> Result<&str, ClientError> {
        match self.cache_addrs.get(&server) {
            Some(address) => Ok(address.get(&self.pool)),
            None => Err(ClientError::refused(
                ErrorCode::Unavailable,
                format!("cache manager {server} is not in the cluster description"),
            )),
        }
    }

    pub fn meta(&self, request: &Request) -> Result<Response, ClientError> {
        if request.is_tracked() {
            return self.tracker.call(self, request);
        }
        self.tracker.before(self)?;
        Ok(self.pool.call(&self.meta_route, request, &[])?.0)
    }

    /// Returns once every metadata operation the manager acknowledged so far (this
    /// client's and everyone's) is durable: a manager with a commit interval answers
    /// operations before they are (docs/src/consistency.md, Durability). A manager that predates the
    /// request commits every operation before answering it: nothing to wait for.
    /// The connection to the manager, for requests sent pipelined (never namespace
    /// changes): after a manager restart, what this client kept is replayed first.
    pub fn meta_connection(&self) -> Result<Arc<weft_rpc::Connection>, ClientError> {
        self.tracker.before(self)?;
        Ok(self.pool.get(&self.meta_route)?)
    }

    /// Skipped when the manager's answers said every operation of this client is
    /// durable already (interval 0, or committed since).
    pub fn commit_metadata(&self) -> Result<(), ClientError> {
        if self.tracker.all_durable() {
            return Ok(());
        }
        match self.meta(&Request::CommitMetadata { wait: true }) {
            Ok(Response::Committed(info)) => {
                self.tracker.durable(info.durable_seq);
                Ok(())
            }
            Ok(other) => Err(unexpected(&other)),
            Err(e) if e.code() == ErrorCode::UnknownOpcode => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// A connection to a Weft cluster. Cheap to clone; clones share connections.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

/// F_GETLK's answer (`Client::file_lock_test`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockTest {
    /// The first conflicting lock, if any.
    Holder(Option<HeldLock>),
    /// The manager's grace after a restart holds the question back: ask again.
    Grace(LockState),
}

/// How to create a file.
#[derive(Debug, Clone, Copy)]
pub struct CreateOptions {
    /// Permission bits.
    pub mode: u32,
    /// Fields left out come from the directory default, then the cluster default.
    pub layout: LayoutRequest,
    /// Fail if the file exists (O_EXCL); otherwise open it as it is.
    pub exclusive: bool,
    /// Truncate an existing file to zero length (O_TRUNC).
    pub truncate: bool,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            mode: 0o644,
            layout: LayoutRequest::default(),
            exclusive: false,
            truncate: true,
        }
    }
}

/// What an operation that makes a name (`create_in_made`, `mkdir_in_made`, ...) made,
/// with the attributes of the directory the name went into.
#[derive(Debug)]
pub struct Made<T> {
    pub made: T,
    /// The directory's attributes as the manager's transaction of the operation left
    /// them (as fresh as a `getattr` sent when the operation was; a group commit may
    /// have added other clients' changes by its answer). `None` from a manager that
    /// predates `WithParent`.
    pub parent: Option<Attr>,
}

/// How to open a file.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenOptions {
    pub write: bool,
    /// Create the file if missing, with these options.
    pub create: Option<CreateOptions>,
    pub truncate: bool,
}

/// Namespace counts and each io server's space.
#[derive(Debug, Clone)]
pub struct FsStats {
    pub meta: MetaStatfs,
    pub servers: Vec<(IoServer, Result<IoStatfs, ClientError>)>,
}

/// `FsStats` as statfs(2)/statvfs(3) report a file system: what a mount's `df` and an
/// MPI program's statvfs of a `weft:` name show alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatfsBlocks {
    /// Block and fragment size: `STATFS_BLOCK_BYTES`.
    pub block_bytes: u64,
    /// Blocks of the file systems of the io servers that answered (each counted once
    /// however many servers share it): in all, free (f_bfree) and free for unprivileged
    /// writers (f_bavail).
    pub blocks: u64,
    pub blocks_free: u64,
    pub blocks_avail: u64,
    /// Inodes: those in use plus `files_free`, and `files_free` (u32::MAX: no fixed
    /// table limits them).
    pub files: u64,
    pub files_free: u64,
    pub name_bytes_max: u64,
}

/// The block size statfs reports. Not the stripe size: callers (mdtest, IOR, df, Go's
/// Statfs users) take blocks x block size as the space, so the block size must be the
/// unit the counts are in; the I/O size hint is each file's st_blksize.
pub const STATFS_BLOCK_BYTES: u64 = 4096;

impl FsStats {
    pub fn blocks(&self) -> StatfsBlocks {
        let (mut total, mut free, mut avail) = (0u64, 0u64, 0u64);
        // Io servers on one machine's one file system (`weft up`, or several servers per
        // node) report the same space: count it once, or df shows N times the disk.
        let mut seen = std::collections::HashSet::new();
        for s in self.servers.iter().filter_map(|(_, s)| s.as_ref().ok()) {
            if s.file_system != 0 && !seen.insert(s.file_system) {
                continue;
            }
            total = total.saturating_add(s.bytes_total);
            free = free.saturating_add(s.bytes_unused.max(s.bytes_free));
            avail = avail.saturating_add(s.bytes_free);
        }
        let files_free = u32::MAX as u64;
        StatfsBlocks {
            block_bytes: STATFS_BLOCK_BYTES,
            blocks: total / STATFS_BLOCK_BYTES,
            blocks_free: free / STATFS_BLOCK_BYTES,
            blocks_avail: avail / STATFS_BLOCK_BYTES,
            files: (self.meta.files + self.meta.directories).saturating_add(files_free),
            files_free,
            name_bytes_max: crate::path::NAME_BYTES_MAX as u64,
        }
    }
}

/// The address to reach an io server by: its Unix socket when this machine has it and
/// the server behind it is the one expected (same id), else TCP. Over the socket, bulk
/// data moves through a shared segment where one can be had (`weft_rpc::shm`).
/// `WEFT_TRANSPORT=tcp` forces TCP; `unix` the socket without a segment; `shm` the
/// segment (a server on this machine that cannot have one is an error, not TCP).
fn io_address(pool: &ConnectionPool, server: &weft_proto::IoServer) -> String {
    local_address(pool, server.id, &server.addr, server.socket.as_deref())
}

/// The address to reach the metadata manager at `meta_addr` by: its Unix socket when
/// the cluster description this client found ($WEFT_HOME's) names one for that
/// manager and it answers as the manager, else `meta_addr`. On the socket the
/// manager counts this client's connections per user, as the kernel tells it
/// (SO_PEERCRED), rather than per address: other local users, and strangers without
/// the key, cannot fill its share.
fn meta_route(pool: &ConnectionPool, meta_addr: &str) -> String {
    match weft_config::local_meta_socket(meta_addr) {
        Some((id, socket)) => local_address(pool, ServerId(id), meta_addr, Some(&socket.to_string_lossy())),
        None => meta_addr.to_owned(),
    }
}

/// The Unix socket `socket` of server `id` when this machine has it and the server
/// behind it is that one, else its TCP address `addr` (see `io_address`).
fn local_address(pool: &ConnectionPool, id: ServerId, addr: &str, socket: Option<&str>) -> String {
    let server = LocalServer { id, addr, socket };
    let transport = weft_rpc::shm::Transport::from_env();
    let tcp_only = transport == weft_rpc::shm::Transport::Tcp;
    let Some(path) = server.socket.filter(|_| !tcp_only) else {
        return server.addr.to_owned();
    };
    if !std::path::Path::new(path).exists() {
        return server.addr.to_owned();
    }
    let local = format!("{}{path}", weft_rpc::stream::UNIX_PREFIX);
    pool.set_label(&local, &format!("{} (via {local})", server.addr));
    match pool.get(&local) {
        Ok(connection) if connection.server().0 == server.id => local,
        // The server took the connection and did not answer: it is there, hung, and
        // would not answer over TCP either. Its TCP address fails at once for a while,
        // so that the caller waits one timeout, not two.
        Err(e @ weft_rpc::RpcError::TimedOut { .. }) => {
            pool.note_unresponsive(server.addr, e);
            server.addr.to_owned()
        }
        // Forced shared memory that cannot be had: calls fail with the reason.
        Err(_) if transport == weft_rpc::shm::Transport::Shm => local,
        _ => server.addr.to_owned(),
    }
}

struct LocalServer<'a> {
    id: ServerId,
    addr: &'a str,
    socket: Option<&'a str>,
}

/// A file none of whose io servers holds an object.
fn no_objects(inode: InodeId) -> ClientError {
    ClientError::refused(
        ErrorCode::Stale,
        format!("inode {inode} has no data objects on its io servers (removed?)"),
    )
}

/// The calling process's credentials.
pub fn process_cred() -> Cred {
    // SAFETY: these calls have no preconditions; getgroups writes at most `n` entries.
    unsafe {
        let mut groups = vec![0 as libc::gid_t; 64];
        let n = libc::getgroups(groups.len() as i32, groups.as_mut_ptr());
        groups.truncate(n.max(0) as usize);
        Cred {
            uid: libc::geteuid(),
            gid: libc::getegid(),
            groups,
        }
    }
}

impl Client {
    /// Connects to the metadata manager at `meta_addr` (`host:port`) and learns the
    /// cluster's io servers from it; the cluster key is found as
    /// `weft_config::client_key_path` says ($WEFT_KEY, else beside the cluster.toml).
    pub fn connect(meta_addr: &str) -> Result<Client, ClientError> {
        let path = weft_config::client_key_path()?;
        let key = weft_rpc::ClusterKey::load(&path).map_err(|e| ClientError::Config(e.to_string()))?;
        Client::connect_with(meta_addr, ClientAuth::cluster(key))
    }

    /// Connects as `connect` does, proving `auth` to every server.
    pub fn connect_with(meta_addr: &str, auth: ClientAuth) -> Result<Client, ClientError> {
        Client::connect_as(meta_addr, auth, process_cred())
    }

    /// Connects as `connect_with` does, acting as `cred` (where the cluster believes a
    /// claimed identity), capabilities included. `with_cred` instead shares this
    /// client's connections and the capabilities granted to its credential: a FUSE
    /// daemon checks each user's permission itself at open.
    pub fn connect_as(meta_addr: &str, auth: ClientAuth, cred: Cred) -> Result<Client, ClientError> {
        let pool = Arc::new(ConnectionPool::new(&client_name(), auth, Timeouts::from_env()));
        let meta_route = meta_route(&pool, meta_addr);
        pool.set_capability_source(Arc::new(weft_rpc::capability::ManagerGrants::new(
            Arc::downgrade(&pool),
            &meta_route,
            cred.clone(),
        )));
        let cluster = match pool.call(&meta_route, &Request::GetCluster, &[])?.0 {
            Response::Cluster(c) => c,
            other => return Err(unexpected(&other)),
        };
        let io_addrs = cluster
            .io_servers
            .iter()
            .map(|s| (s.id, ServerAddress::new(s)))
            .collect();
        let cache_addrs = cluster
            .cache
            .managers
            .iter()
            .map(|s| (s.id, ServerAddress::new(s)))
            .collect();
        let client = Client {
            inner: Arc::new(Inner {
                pool,
                meta_addr: meta_addr.to_owned(),
                meta_route,
                cluster,
                io_addrs,
                cache_addrs,
                cred,
                transfer: TransferOptions::default(),
                no_parent_attrs: Arc::new(AtomicBool::new(false)),
                no_create_grants: Arc::new(AtomicBool::new(false)),
                no_vouch: Arc::new(AtomicBool::new(false)),
                vouched: Arc::default(),
                tracker: Arc::new(crate::replay::Tracker::new()),
            }),
        };
        crate::replay::watch(&client.inner);
        Ok(client)
    }

    /// Finds the cluster through $WEFT_META, else $WEFT_HOME (or ~/.weft)/cluster.toml.
    pub fn from_env() -> Result<Client, ClientError> {
        Client::connect(&weft_config::meta_address()?)
    }

    /// The same connections acting with other credentials (a FUSE daemon serving many
    /// users, or a test).
    pub fn with_cred(&self, cred: Cred) -> Client {
        self.rebuild(|inner| inner.cred = cred)
    }

    /// The same connections with other transfer settings.
    pub fn with_transfer(&self, transfer: TransferOptions) -> Client {
        self.rebuild(|inner| inner.transfer = transfer)
    }

    fn rebuild(&self, change: impl FnOnce(&mut Inner)) -> Client {
        let i = &self.inner;
        let mut inner = Inner {
            pool: i.pool.clone(),
            meta_addr: i.meta_addr.clone(),
            meta_route: i.meta_route.clone(),
            cluster: i.cluster.clone(),
            io_addrs: i.io_addrs.clone(),
            cache_addrs: i.cache_addrs.clone(),
            cred: i.cred.clone(),
            transfer: i.transfer,
            no_parent_attrs: i.no_parent_attrs.clone(),
            no_create_grants: i.no_create_grants.clone(),
            no_vouch: i.no_vouch.clone(),
            vouched: i.vouched.clone(),
            tracker: i.tracker.clone(),
        };
        change(&mut inner);
        Client {
            inner: Arc::new(inner),
        }
    }

    /// Namespace changes this client was answered for that the manager has not made
    /// durable yet: kept to replay after a manager restart (README: Durability).
    pub fn metadata_kept(&self) -> usize {
        self.inner.tracker.kept()
    }

    pub fn cred(&self) -> &Cred {
        &self.inner.cred
    }

    /// Per io server, how this client reaches it and moves bulk data: "shm", "unix"
    /// or "tcp" (connecting if not yet connected), or the error that stops it.
    pub fn io_transports(&self) -> Vec<(ServerId, Result<&'static str, ClientError>)> {
        self.inner
            .cluster
            .io_servers
            .iter()
            .map(|s| {
                let transport = self
                    .inner
                    .io_addr(s.id)
                    .and_then(|addr| Ok(self.inner.pool.get(addr)?.transport()));
                (s.id, transport)
            })
            .collect()
    }

    pub fn cluster_info(&self) -> &ClusterInfo {
        &self.inner.cluster
    }

    pub fn meta_addr(&self) -> &str {
        &self.inner.meta_addr
    }

    fn cred_clone(&self) -> Cred {
        self.inner.cred.clone()
    }

    fn attr_of(&self, request: Request, what: &str) -> Result<Attr, ClientError> {
        match self.inner.meta(&request).map_err(|e| e.context(what))? {
            Response::Attr(a) => Ok(a),
            other => Err(unexpected(&other)),
        }
    }

    /// `request` (one that makes a name) answered with its directory's attributes: sent
    /// in a `WithParent`, or alone to a manager that does not know it.
    fn made_of(&self, request: Request, what: &str) -> Result<Made<Attr>, ClientError> {
        let plain = if self.inner.no_parent_attrs.load(Ordering::Relaxed) {
            request
        } else {
            let wrapped = Request::WithParent {
                request: Box::new(request),
            };
            match self.inner.meta(&wrapped) {
                Ok(Response::Made { attr, parent }) => {
                    return Ok(Made {
                        made: attr,
                        parent: Some(parent),
                    })
                }
                Ok(other) => return Err(unexpected(&other)),
                // Refused at decode, before anything was done: the request alone.
                Err(e) if e.code() == ErrorCode::UnknownOpcode => {
                    self.inner.no_parent_attrs.store(true, Ordering::Relaxed);
                    match wrapped {
                        Request::WithParent { request } => *request,
                        other => other,
                    }
                }
                Err(e) => return Err(e.context(what)),
            }
        };
        self.attr_of(plain, what).map(|made| Made { made, parent: None })
    }

    /// `attr_of`, or with `parent` `made_of`.
    fn attr_made(&self, request: Request, what: &str, parent: bool) -> Result<Made<Attr>, ClientError> {
        if parent {
            self.made_of(request, what)
        } else {
            self.attr_of(request, what)
                .map(|made| Made { made, parent: None })
        }
    }

    /// A `Create` sent as a `CreateGranted`: made, with its directory's attributes (kept
    /// if `parent`) and the capability to write the new file, which this client's
    /// connections keep, so that the file's first write asks the manager for nothing.
    /// To a manager that predates it, `attr_made`.
    fn create_granted(&self, request: Request, what: &str, parent: bool) -> Result<Made<Attr>, ClientError> {
        let request = if self.inner.no_create_grants.load(Ordering::Relaxed) {
            request
        } else {
            let wrapped = Request::CreateGranted {
                request: Box::new(request),
            };
            match self.inner.meta(&wrapped) {
                Ok(Response::MadeGranted {
                    attr,
                    parent: dir,
                    capability,
                }) => {
                    if let (Some(cap), Some(source)) = (capability, self.inner.pool.capability_source()) {
                        source.granted(&cap);
                    }
                    return Ok(Made {
                        made: attr,
                        parent: parent.then_some(dir),
                    });
                }
                Ok(other) => return Err(unexpected(&other)),
                // Refused at decode, before anything was done: the create alone.
                Err(e) if e.code() == ErrorCode::UnknownOpcode => {
                    self.inner.no_create_grants.store(true, Ordering::Relaxed);
                    match wrapped {
                        Request::CreateGranted { request } => *request,
                        other => other,
                    }
                }
                Err(e) => return Err(e.context(what)),
            }
        };
        self.attr_made(request, what, parent)
    }

    fn done(&self, request: Request, what: &str) -> Result<(), ClientError> {
        match self.inner.meta(&request).map_err(|e| e.context(what))? {
            Response::Done => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// The manager's attributes of a path, without the derived file size.
    pub fn resolve(&self, path: &str) -> Result<Attr, ClientError> {
        // The manager takes canonical paths: "/a/b/" is sent as "/a/b".
        let canonical = format!("/{}", path::components(path)?.join("/"));
        let attr = self.attr_of(
            Request::Resolve {
                cred: self.cred_clone(),
                path: canonical,
            },
            path,
        )?;
        // "/a/b/" names a directory (or a link to one), as in Linux.
        if path::names_a_directory(path) && !matches!(attr.kind, FileKind::Directory | FileKind::Symlink) {
            return Err(not_a_directory(path));
        }
        Ok(attr)
    }

    /// Attributes of a path; a file's size is derived from its io servers.
    pub fn stat(&self, path: &str) -> Result<Attr, ClientError> {
        let mut attr = self.resolve(path)?;
        self.fill_sizes(std::slice::from_mut(&mut attr))
            .map_err(|e| e.context(path))?;
        Ok(attr)
    }

    /// Makes sure the manager granted this client writing `inode` (a write capability
    /// kept, or asked for now): the open the manager checks a MUNGE-verified user's
    /// handle-based request (`SetAttr { by_handle }`: ftruncate, a write dropping
    /// setuid) against. Call it before such a request. A refusal is no error here: the
    /// request is then checked against the file's mode, as a path-based one is.
    pub fn hold_write_grant(&self, inode: InodeId) {
        self.inner.hold_write_grant(inode);
    }

    /// Attributes of an inode, with the derived size.
    pub fn getattr(&self, inode: InodeId) -> Result<Attr, ClientError> {
        let mut attr = self.attr_of(
            Request::GetAttr {
                cred: self.cred_clone(),
                inode,
            },
            &format!("inode {inode}"),
        )?;
        self.fill_sizes(std::slice::from_mut(&mut attr))?;
        Ok(attr)
    }

    /// Attributes of an inode with the derived size, in one round trip's wait when the
    /// caller knows the inode's layout from before (`known`: layouts never change): the
    /// io servers are asked for the size while the manager answers.
    pub fn getattr_sized(&self, inode: InodeId, known: Option<&Attr>) -> Result<Attr, ClientError> {
        let request = Request::GetAttr {
            cred: self.cred_clone(),
            inode,
        };
        self.attr_sized(request, &format!("inode {inode}"), known)
    }

    /// `lookup` with the derived size; `guess`, the attributes of the inode the name led
    /// to before, lets the size be asked while the manager looks the name up (used only
    /// if the name still leads to that inode).
    pub fn lookup_sized(
        &self,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        guess: Option<&Attr>,
    ) -> Result<Attr, ClientError> {
        let name = name.as_ref();
        let request = Request::Lookup {
            cred: self.cred_clone(),
            parent,
            name: Name::from(name),
        };
        self.attr_sized(request, &lossy(name), guess)
    }

    /// Sends `request` (answered with attributes) and, while it travels, fills in the size
    /// of `known`; that size is used if the answer is the same file (inode and layout),
    /// else the size is asked afresh.
    fn attr_sized(&self, request: Request, what: &str, known: Option<&Attr>) -> Result<Attr, ClientError> {
        self.answer_sized(request, what, known, false)
            .map(|(attr, _)| attr)
    }

    /// Sends `request` (answered with one inode's attributes) and fills in a file's
    /// size, times and `DataStamp` (`stamped`: one is wanted; facts held without one do
    /// not serve). Sent as a `Vouched`: when the manager vouches for the file at the
    /// stamp under which this client read them from the io servers (see `vouched`),
    /// they serve and the io servers are not asked. Otherwise, while the request travels,
    /// the io servers are asked about `known` (the file the caller expects), used if the
    /// answer is that file (inode and layout); else they are asked afterwards.
    fn answer_sized(
        &self,
        request: Request,
        what: &str,
        known: Option<&Attr>,
        stamped: bool,
    ) -> Result<(Attr, Option<DataStamp>), ClientError> {
        let vouching = !self.inner.no_vouch.load(Ordering::Relaxed);
        let sent = if vouching {
            Request::Vouched {
                request: Box::new(request),
            }
        } else {
            request
        };
        let meta = self.inner.meta_connection()?;
        let pending = meta.send(&sent, &[])?;
        let guess = known.filter(|a| a.kind == FileKind::File);
        let before = guess.and_then(|a| self.inner.vouched.get(a.inode));
        let usable = |facts: &crate::vouched::Facts| !stamped || facts.stamp.is_some();
        // Facts held for the guess: the io servers are asked only if the vouch moved.
        let early = match &before {
            Some(seen) if seen.facts.as_ref().is_some_and(usable) => None,
            _ => guess.map(|a| self.attr_stamped(objects_only(a))),
        };
        let (mut attr, vouch) = match pending.wait() {
            Ok((Response::AttrVouched { attr, vouch }, _)) => (attr, vouch),
            Ok((Response::Attr(attr), _)) => (attr, None),
            Ok((other, _)) => return Err(unexpected(&other)),
            Err(e) => {
                let e = ClientError::from(e);
                if vouching && e.code() == ErrorCode::UnknownOpcode {
                    self.inner.no_vouch.store(true, Ordering::Relaxed);
                    let Request::Vouched { request } = sent else {
                        unreachable!("sent as a Vouched")
                    };
                    return self.answer_sized(*request, what, known, stamped);
                }
                return Err(e.context(what));
            }
        };
        if attr.kind != FileKind::File {
            return Ok((attr, None));
        }
        let tier = attr.cache.uses_tier();
        let trusted = |stamp: Option<DataStamp>| stamp.filter(|_| !tier);
        let Some(vouch) = vouch else {
            self.inner.vouched.forget(attr.inode);
            return match early {
                Some(Ok((sized, stamp))) if sized.inode == attr.inode && sized.layout == attr.layout => {
                    take_sized(&mut attr, &sized);
                    let stamp = trusted(stamp);
                    Ok((attr, stamp))
                }
                _ => self.attr_stamped(attr),
            };
        };
        if let Some(facts) = self
            .inner
            .vouched
            .facts(attr.inode, vouch, &attr.layout)
            .filter(usable)
        {
            facts.fill(&mut attr);
            return Ok((attr, facts.stamp));
        }
        match early {
            Some(Ok((sized, stamp))) if sized.inode == attr.inode && sized.layout == attr.layout => {
                // Asked after this client was told the same vouch: the facts hold.
                let told_before = before.as_ref().is_some_and(|seen| seen.vouch == vouch);
                let facts = told_before.then(|| crate::vouched::Facts::of(&sized, stamp.clone()));
                self.inner.vouched.record(attr.inode, vouch, facts);
                take_sized(&mut attr, &sized);
                Ok((attr, trusted(stamp)))
            }
            _ => {
                // Asked after the vouch was told: what the io servers say holds under it.
                let (attr, stamp) = self.attr_stamped(attr)?;
                self.inner.vouched.record(
                    attr.inode,
                    vouch,
                    Some(crate::vouched::Facts::of(&attr, stamp.clone())),
                );
                Ok((attr, stamp))
            }
        }
    }

    /// Opens and stats this client (and every client made from it) answered without
    /// asking the io servers, on the manager's vouch that nobody wrote the file since it
    /// last asked them.
    pub fn vouched_skips(&self) -> u64 {
        self.inner.vouched.skipped()
    }

    /// Attributes of each of `names` in directory `parent`, files' sizes included, in
    /// the order given (`None`: no such name, or a file removed meanwhile): one request to
    /// the manager per `LOOKUP_MANY_MAX` names (`LookupMany`), then one to each io server
    /// involved, where a stat of each costs a lookup and a size query per name. Against a
    /// manager without `LookupMany`, the lookups one by one (pipelined).
    pub fn stat_many<N: AsRef<[u8]>>(
        &self,
        parent: InodeId,
        names: &[N],
    ) -> Result<Vec<Option<Attr>>, ClientError> {
        let mut found: Vec<Option<Attr>> = Vec::with_capacity(names.len());
        for chunk in names.chunks(LOOKUP_MANY_MAX) {
            found.extend(self.lookup_many(parent, chunk)?);
        }
        let at: Vec<usize> = (0..found.len()).filter(|k| found[*k].is_some()).collect();
        let mut attrs: Vec<Attr> = at.iter().filter_map(|k| found[*k].take()).collect();
        let gone = self.sizes(&mut attrs)?;
        for ((k, attr), gone) in at.into_iter().zip(attrs).zip(gone) {
            if !gone {
                found[k] = Some(attr);
            }
        }
        Ok(found)
    }

    /// Up to `LOOKUP_MANY_MAX` `names` in `parent`, without the sizes.
    fn lookup_many<N: AsRef<[u8]>>(
        &self,
        parent: InodeId,
        names: &[N],
    ) -> Result<Vec<Option<Attr>>, ClientError> {
        let request = Request::LookupMany {
            cred: self.cred_clone(),
            parent,
            names: names.iter().map(|n| Name::from(n.as_ref())).collect(),
        };
        match self.inner.meta(&request) {
            Ok(Response::EntriesPlus { entries, .. }) => {
                // In the order asked, the names not found left out.
                let mut entries = entries.into_iter().peekable();
                Ok(names
                    .iter()
                    .map(|n| match entries.peek() {
                        Some((name, _)) if name.as_bytes() == n.as_ref() => entries.next().map(|(_, a)| a),
                        _ => None,
                    })
                    .collect())
            }
            Ok(other) => Err(unexpected(&other)),
            Err(e) if e.code() == ErrorCode::UnknownOpcode => {
                let meta = self.inner.meta_connection()?;
                let pending: Vec<_> = names
                    .iter()
                    .map(|n| {
                        meta.send(
                            &Request::Lookup {
                                cred: self.cred_clone(),
                                parent,
                                name: Name::from(n.as_ref()),
                            },
                            &[],
                        )
                    })
                    .collect::<Result<_, _>>()?;
                let mut out = Vec::with_capacity(names.len());
                for call in pending {
                    match call.wait().map_err(ClientError::from) {
                        Ok((Response::Attr(a), _)) => out.push(Some(a)),
                        Ok((other, _)) => return Err(unexpected(&other)),
                        Err(e) if e.code() == ErrorCode::NotFound => out.push(None),
                        Err(e) => return Err(e),
                    }
                }
                Ok(out)
            }
            Err(e) => Err(e),
        }
    }

    /// Looks a name up in a directory (without the derived size). Names are bytes, as
    /// in POSIX: `&str` and `&[u8]` both do.
    pub fn lookup(&self, parent: InodeId, name: impl AsRef<[u8]>) -> Result<Attr, ClientError> {
        let name = name.as_ref();
        self.attr_of(
            Request::Lookup {
                cred: self.cred_clone(),
                parent,
                name: Name::from(name),
            },
            &lossy(name),
        )
    }

    /// Checks that a path resolved earlier still holds step by step (each directory's
    /// entry still names the same inode) and returns the last inode's attributes with
    /// the derived size. `Stale` when another client removed, renamed or replaced a name
    /// on the way: look the path up again. `known`, the inode's attributes from before
    /// (layouts never change), lets the size be asked of the io servers while the
    /// manager checks the path: one round trip's wait rather than two.
    pub fn revalidate(&self, steps: Vec<PathStep>, known: Option<&Attr>) -> Result<Attr, ClientError> {
        self.revalidate_stamped(steps, known).map(|(attr, _)| attr)
    }

    /// `revalidate` that also tells what the file's data was (see `DataStamp`), from the
    /// same requests to the io servers. Same round trips as `revalidate`.
    pub fn revalidate_stamped(
        &self,
        steps: Vec<PathStep>,
        known: Option<&Attr>,
    ) -> Result<(Attr, Option<DataStamp>), ClientError> {
        let what = steps.last().map(|s| s.name.to_string()).unwrap_or_default();
        let last = steps.last().map(|s| s.child);
        let request = Request::Revalidate {
            cred: self.cred_clone(),
            steps,
        };
        // The path holds if answered, so a failed size is a real failure (asked once
        // more after the answer).
        self.answer_sized(request, &what, known.filter(|a| Some(a.inode) == last), true)
    }

    /// An inode's attributes with its size and `DataStamp` filled in (the rest as given).
    pub fn attr_stamped(&self, mut attr: Attr) -> Result<(Attr, Option<DataStamp>), ClientError> {
        if attr.kind != FileKind::File {
            return Ok((attr, None));
        }
        let mut stamp = [None];
        let missing = self.sizes_stamped(std::slice::from_mut(&mut attr), Some(&mut stamp))?;
        if missing[0] {
            return Err(no_objects(attr.inode));
        }
        let [stamp] = stamp;
        Ok((attr, stamp))
    }

    /// Fills in the size and allocated blocks of every regular file in `attrs`, asking    /// Fills in the size and allocated blocks of every regular file in `attrs`, asking
    /// each io server once per batch of files rather than once per file, all servers
    /// at once.
    pub fn fill_sizes(&self, attrs: &mut [Attr]) -> Result<(), ClientError> {
        let missing = self.sizes(attrs)?;
        match attrs.iter().zip(missing).find(|(_, missing)| *missing) {
            Some((attr, _)) => Err(no_objects(attr.inode)),
            None => Ok(()),
        }
    }

    /// `fill_sizes`, answering for each file whether its objects are gone from every
    /// one of its servers (removed since its attributes were read, or lost) rather
    /// than failing.
    pub fn fill_sizes_or_gone(&self, attrs: &mut [Attr]) -> Result<Vec<bool>, ClientError> {
        self.sizes(attrs)
    }

    /// `fill_sizes_or_gone` that goes on when io servers or cache managers cannot be
    /// reached: each file's size is then known, gone, or unknown (a server of its
    /// objects failed to answer, or for a file in the cache tier, a cache manager did),
    /// and each server that failed is named with its error, once. For
    /// listings, which show what they can rather than nothing (`weft ls -l`).
    pub fn fill_sizes_partial(&self, attrs: &mut [Attr]) -> Result<PartialSizes, ClientError> {
        let mut failed = Vec::new();
        let gone = self.sizes_tolerant(attrs, None, Some(&mut failed))?;
        // A cache manager that did not answer may hold any cached file's last bytes.
        let tier_down = failed
            .iter()
            .any(|(server, _)| self.inner.cluster.cache.managers.iter().any(|m| m.id == *server));
        let sizes = attrs
            .iter()
            .zip(gone)
            .map(|(attr, gone)| {
                let unknown = attr.kind == FileKind::File
                    && (attr
                        .layout
                        .as_ref()
                        .is_some_and(|l| failed.iter().any(|(server, _)| l.servers.contains(server)))
                        || (tier_down && attr.cache.uses_tier()));
                match (unknown, gone) {
                    (true, _) => SizeOf::Unknown,
                    (false, true) => SizeOf::Gone,
                    (false, false) => SizeOf::Known,
                }
            })
            .collect();
        Ok(PartialSizes { sizes, failed })
    }

    fn sizes(&self, attrs: &mut [Attr]) -> Result<Vec<bool>, ClientError> {
        self.sizes_stamped(attrs, None)
    }

    /// `sizes`; with `stamps` (one per attr), also each file's `DataStamp` (`None` for
    /// files whose stamp cannot be had).
    fn sizes_stamped(
        &self,
        attrs: &mut [Attr],
        stamps: Option<&mut [Option<DataStamp>]>,
    ) -> Result<Vec<bool>, ClientError> {
        self.sizes_tolerant(attrs, stamps, None)
    }

    /// `sizes_stamped`; with `failed`, an io server that cannot be reached or fails to
    /// answer is put there (with its error) instead of failing the call, and its files
    /// get no stamp.
    fn sizes_tolerant(
        &self,
        attrs: &mut [Attr],
        stamps: Option<&mut [Option<DataStamp>]>,
        mut failed: Option<&mut Vec<(ServerId, ClientError)>>,
    ) -> Result<Vec<bool>, ClientError> {
        let mut per_server: HashMap<ServerId, Vec<(usize, Striping)>> = HashMap::new();
        for (k, attr) in attrs.iter_mut().enumerate() {
            if attr.kind != FileKind::File {
                continue;
            }
            attr.size = 0;
            attr.blocks = 0;
            let Some(layout) = &attr.layout else { continue };
            for (index, server) in layout.servers.iter().enumerate() {
                let striping = Striping {
                    stripe_size_bytes: layout.stripe_size_bytes,
                    stripe_count: layout.servers.len() as u32,
                    server_index: index as u32,
                };
                per_server.entry(*server).or_default().push((k, striping));
            }
        }
        // Cache managers first, io servers after: a cache manager marks a block clean
        // only once its write-back is on the io servers, so a block is counted either
        // way. Asked the other way round, a write-back landing between the two
        // answers was in neither (a size of 0 right after `cp` of a cached file).
        self.add_cached_ends(attrs, failed.as_deref_mut())?;
        // Per file, (server index, stamp) of each object; a file with any object
        // unstamped gets none.
        let mut objects: Vec<Option<Vec<(u32, u64)>>> = vec![Some(Vec::new()); attrs.len()];
        let mut missing = vec![0usize; attrs.len()];
        let mut asked = vec![0usize; attrs.len()];
        // Every server is asked before any answer is awaited: one round trip's wait.
        // A server that failed (only with `failed`) is named once, and its files get
        // no stamp: a stamp must cover every object.
        let mut fail = |server: ServerId,
                        error: ClientError,
                        items: &[(usize, Striping)],
                        objects: &mut [Option<Vec<(u32, u64)>>]| {
            let Some(failed) = failed.as_mut() else {
                return Err(error);
            };
            if !failed.iter().any(|(s, _)| *s == server) {
                failed.push((server, error));
            }
            for (k, _) in items {
                objects[*k] = None;
            }
            Ok(())
        };
        let mut connections = Vec::new();
        for (server, items) in per_server {
            match self
                .inner
                .io_addr(server)
                .and_then(|addr| Ok(self.inner.pool.get(addr)?))
            {
                Ok(connection) => connections.push((server, connection, items)),
                Err(e) => fail(server, e, &items, &mut objects)?,
            }
        }
        let mut pending = Vec::new();
        for (server, connection, items) in &connections {
            for batch in items.chunks(BATCH_INODES_MAX) {
                let items: Vec<_> = batch.iter().map(|(k, s)| (attrs[*k].inode, *s)).collect();
                // Always the stamped stat: it also carries each object's mtime.
                let request = Request::ObjStamp { items };
                match connection.send(&request, &[]) {
                    Ok(call) => pending.push((*server, batch, connection, call)),
                    Err(e) => fail(*server, e.into(), batch, &mut objects)?,
                }
            }
        }
        for (server, batch, connection, call) in pending {
            let answers = match obj_stamps(batch, attrs, connection, call) {
                Ok(answers) => answers,
                Err(e) => {
                    fail(server, e, batch, &mut objects)?;
                    continue;
                }
            };
            for ((k, striping), stamped) in batch.iter().zip(answers) {
                asked[*k] += 1;
                if stamped.end == u64::MAX {
                    missing[*k] += 1;
                } else {
                    let attr = &mut attrs[*k];
                    attr.size = attr.size.max(stamped.end);
                    attr.blocks += stamped.allocated.div_ceil(512);
                    // Writes change only the objects: their latest time is the file's
                    // modification (and change) time when later than the manager's.
                    attr.mtime = attr.mtime.max(stamped.mtime);
                    attr.ctime = attr.ctime.max(stamped.mtime);
                }
                let file = &mut objects[*k];
                match (file.as_mut(), stamped.stamp) {
                    (Some(_), ObjStamped::UNSETTLED) | (None, _) => *file = None,
                    (Some(list), stamp) => list.push((striping.server_index, stamp)),
                }
            }
        }
        if let Some(stamps) = stamps {
            for (k, object_stamps) in objects.into_iter().enumerate() {
                let attr = &attrs[k];
                // Data held by a cache manager changes without its objects changing.
                let trusted = attr.kind == FileKind::File && attr.layout.is_some() && !attr.cache.uses_tier();
                stamps[k] = object_stamps.filter(|_| trusted).map(|mut list| {
                    list.sort_unstable();
                    DataStamp {
                        inode: attr.inode,
                        objects: list.into_iter().map(|(_, stamp)| stamp).collect(),
                    }
                });
            }
        }
        Ok((0..attrs.len())
            .map(|k| asked[k] > 0 && missing[k] == asked[k])
            .collect())
    }

    /// Cached files' sizes also count what their cache managers hold unwritten: asks
    /// every manager of the tier about all cached files of `attrs` at once.
    /// With `failed`, a cache manager that cannot be reached or fails to answer is put
    /// there (with its error) instead of failing the call (its cached files' sizes are
    /// then unknown: see `fill_sizes_partial`).
    fn add_cached_ends(
        &self,
        attrs: &mut [Attr],
        mut failed: Option<&mut Vec<(ServerId, ClientError)>>,
    ) -> Result<(), ClientError> {
        let cached: Vec<usize> = (0..attrs.len())
            .filter(|&k| attrs[k].layout.is_some() && attrs[k].cache.uses_tier())
            .collect();
        if cached.is_empty() {
            return Ok(());
        }
        for manager in &self.inner.cluster.cache.managers {
            let asked = (|| -> Result<(), ClientError> {
                let connection = self.inner.pool.get(self.inner.cache_addr(manager.id)?)?;
                for batch in cached.chunks(BATCH_INODES_MAX) {
                    let request = Request::CacheExtents {
                        inodes: batch.iter().map(|&k| attrs[k].inode).collect(),
                    };
                    match connection.call(&request, &[])?.0 {
                        Response::Extents(ends) if ends.len() == batch.len() => {
                            for (&k, end) in batch.iter().zip(ends) {
                                attrs[k].size = attrs[k].size.max(end);
                            }
                        }
                        other => return Err(unexpected(&other)),
                    }
                }
                Ok(())
            })();
            match (asked, failed.as_deref_mut()) {
                (Ok(()), _) => {}
                (Err(e), None) => return Err(e),
                (Err(e), Some(failed)) => {
                    if !failed.iter().any(|(s, _)| *s == manager.id) {
                        failed.push((manager.id, e));
                    }
                }
            }
        }
        Ok(())
    }

    pub fn mkdir(&self, path: &str, mode: u32) -> Result<Attr, ClientError> {
        let (parent, name) = path::split(path, ErrorCode::Exists)?;
        let parent = self.resolve(&parent).map_err(|e| e.context(path))?;
        self.mkdir_named(parent.inode, name.as_bytes(), mode, path, false)
            .map(|made| made.made)
    }

    /// Creates directory `name` in directory `parent`. This and the other `*_in`
    /// operations serve adapters that track inodes rather than paths (FUSE).
    pub fn mkdir_in(&self, parent: InodeId, name: impl AsRef<[u8]>, mode: u32) -> Result<Attr, ClientError> {
        let name = name.as_ref();
        self.mkdir_named(parent, name, mode, &lossy(name), false)
            .map(|made| made.made)
    }

    /// `mkdir_in`, with `parent`'s attributes after it (see [`Made`]).
    pub fn mkdir_in_made(
        &self,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        mode: u32,
    ) -> Result<Made<Attr>, ClientError> {
        let name = name.as_ref();
        self.mkdir_named(parent, name, mode, &lossy(name), true)
    }

    fn mkdir_named(
        &self,
        parent: InodeId,
        name: &[u8],
        mode: u32,
        what: &str,
        with_parent: bool,
    ) -> Result<Made<Attr>, ClientError> {
        let request = Request::Mkdir {
            cred: self.cred_clone(),
            parent,
            name: Name::from(name),
            mode,
        };
        self.attr_made(request, what, with_parent)
    }

    /// Creates a directory and any missing parents; existing directories are fine.
    pub fn mkdir_all(&self, path: &str, mode: u32) -> Result<Attr, ClientError> {
        let parts = path::components(path)?;
        let mut current = self.resolve("/")?;
        let mut so_far = String::new();
        for name in parts {
            so_far = path::join(if so_far.is_empty() { "/" } else { &so_far }, name);
            current = match self.lookup(current.inode, name) {
                Ok(a) if a.kind == FileKind::Directory => a,
                Ok(_) => {
                    return Err(ClientError::refused(
                        ErrorCode::NotDirectory,
                        format!("{so_far}: not a directory"),
                    ))
                }
                Err(e) if e.code() == ErrorCode::NotFound => {
                    let request = Request::Mkdir {
                        cred: self.cred_clone(),
                        parent: current.inode,
                        name: Name::from(name),
                        mode,
                    };
                    match self.attr_of(request, &so_far) {
                        Ok(a) => a,
                        // Someone else made it meanwhile.
                        Err(e) if e.code() == ErrorCode::Exists => self.lookup(current.inode, name)?,
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e.context(&so_far)),
            };
        }
        Ok(current)
    }

    /// Creates (or with `exclusive: false` opens) a file for reading and writing.
    pub fn create(&self, path: &str, options: &CreateOptions) -> Result<File, ClientError> {
        let (parent, name) = path::split(path, ErrorCode::IsDirectory)?;
        if path::names_a_directory(path) {
            return Err(ClientError::refused(
                ErrorCode::IsDirectory,
                format!("{path}: a path ending with / names a directory, not a file to create"),
            ));
        }
        let parent = self.resolve(&parent).map_err(|e| e.context(path))?;
        self.create_named(parent.inode, name.as_bytes(), options, path, false)
            .map(|made| made.made)
    }

    /// Creates (or with `exclusive: false` opens) file `name` in directory `parent`.
    pub fn create_in(
        &self,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        options: &CreateOptions,
    ) -> Result<File, ClientError> {
        let name = name.as_ref();
        self.create_named(parent, name, options, &lossy(name), false)
            .map(|made| made.made)
    }

    /// `create_in`, with `parent`'s attributes after it (see [`Made`]).
    pub fn create_in_made(
        &self,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        options: &CreateOptions,
    ) -> Result<Made<File>, ClientError> {
        let name = name.as_ref();
        self.create_named(parent, name, options, &lossy(name), true)
    }

    fn create_named(
        &self,
        parent: InodeId,
        name: &[u8],
        options: &CreateOptions,
        path: &str,
        with_parent: bool,
    ) -> Result<Made<File>, ClientError> {
        let request = Request::Create {
            cred: self.cred_clone(),
            parent,
            name: Name::from(name),
            mode: options.mode,
            layout: options.layout,
            exclusive: options.exclusive,
        };
        let Made {
            made: attr,
            parent: parent_attr,
        } = self.create_granted(request, path, with_parent)?;
        if attr.kind != FileKind::File {
            return Err(ClientError::refused(
                ErrorCode::IsDirectory,
                format!("{path}: not a regular file"),
            ));
        }
        let file = File::new(self.inner.clone(), attr, path.to_owned(), true)?;
        if options.truncate {
            file.truncate(0)?;
        }
        Ok(Made {
            made: file,
            parent: parent_attr,
        })
    }

    /// Opens a file. Reading is always allowed by the handle; the manager checked
    /// permission for what `options` asks.
    pub fn open(&self, path: &str, options: &OpenOptions) -> Result<File, ClientError> {
        let attr = match self.resolve(path) {
            Err(e) if e.code() == ErrorCode::NotFound && options.create.is_some() => {
                let mut create = options.create.unwrap_or_default();
                create.exclusive = false;
                create.truncate = options.truncate;
                return self.create(path, &create);
            }
            other => other?,
        };
        match attr.kind {
            FileKind::File => {}
            FileKind::Directory => {
                return Err(ClientError::refused(
                    ErrorCode::IsDirectory,
                    format!("{path}: is a directory"),
                ))
            }
            FileKind::Symlink => {
                return Err(ClientError::refused(
                    ErrorCode::InvalidArgument,
                    format!("{path}: is a symbolic link"),
                ))
            }
            special => {
                // FIFOs, devices and sockets have no data in Weft: their I/O is local.
                return Err(ClientError::refused(
                    ErrorCode::Unsupported,
                    format!("{path}: is a {special:?}: only regular files are read and written through Weft"),
                ));
            }
        }
        check_access(&self.inner.cred, &attr, if options.write { 0o6 } else { 0o4 })
            .map_err(|e| e.context(path))?;
        let file = File::new(self.inner.clone(), attr, path.to_owned(), options.write)?;
        if options.truncate && options.write {
            file.truncate(0)?;
        }
        Ok(file)
    }

    /// Opens, without asking the manager, the file another process of the same job
    /// opened: `handoff` is that handle's [`File::handoff`]. The kind and this process's
    /// permission for what `write` asks are checked here, as [`Client::open`] checks
    /// them; the path walk and the create were done once, by the process that opened.
    /// A collective open (MPI-IO) costs the manager one request instead of one per
    /// process this way. A handoff from [`File::handoff_with_capability`] also spares
    /// this process the manager's capability grant, when it is the same user's.
    pub fn open_handoff(&self, handoff: &[u8], path: &str, write: bool) -> Result<File, ClientError> {
        let Handed { attr, capability } = Handoff::decode(handoff).map_err(|e| {
            ClientError::refused(
                ErrorCode::InvalidArgument,
                format!("{path}: a damaged open handoff: {e}"),
            )
        })?;
        if attr.kind != FileKind::File {
            return Err(ClientError::refused(
                ErrorCode::InvalidArgument,
                format!("{path}: the open handoff is not of a regular file"),
            ));
        }
        check_access(&self.inner.cred, &attr, if write { 0o6 } else { 0o4 }).map_err(|e| e.context(path))?;
        // The maker's capability serves this process too when it is the same user's
        // and covers the access asked for; a server that refuses it (revoked, expired)
        // makes the connection forget it and ask the manager.
        if let Some((uid, cap)) = capability {
            use weft_proto::capability::rights::{READ, WRITE};
            let wanted = if write { WRITE } else { READ };
            if uid == self.inner.cred.uid && cap.rights & wanted != 0 {
                if let Some(source) = self.inner.pool.capability_source() {
                    source.adopt(&cap);
                }
            }
        }
        File::new(self.inner.clone(), attr, path.to_owned(), write)
    }

    /// Opens a file known by its attributes (for adapters that track inodes).
    /// `attr.size` is taken as the size the io servers gave just now (as `getattr_sized`
    /// and `revalidate` fill it in): reads within it need not ask them again.
    pub fn open_attr(&self, attr: Attr, writable: bool) -> Result<File, ClientError> {
        let size = attr.size;
        let file = File::new(
            self.inner.clone(),
            attr.clone(),
            format!("inode {}", attr.inode),
            writable,
        )?;
        file.known_size.store(size, std::sync::atomic::Ordering::SeqCst);
        Ok(file)
    }

    /// One page of a directory: up to `max_entries` names strictly after `after`.
    pub fn readdir_page(
        &self,
        dir: InodeId,
        after: impl AsRef<[u8]>,
        max_entries: u32,
    ) -> Result<(Vec<DirEntry>, bool), ClientError> {
        let request = Request::Readdir {
            cred: self.cred_clone(),
            dir,
            after: Name::from(after.as_ref()),
            max_entries: max_entries.min(READDIR_ENTRIES_MAX),
        };
        match self.inner.meta(&request)? {
            Response::Entries { entries, more } => Ok((entries, more)),
            other => Err(unexpected(&other)),
        }
    }

    /// One page of a directory with every entry's attributes, file sizes included: one
    /// round trip to the manager, then one to each io server involved (`ls -l`). Files
    /// removed since the manager listed them are left out. Against a manager without
    /// `ReaddirPlus`, a plain page and the attributes one by one (pipelined).
    pub fn readdir_plus_page(
        &self,
        dir: InodeId,
        after: impl AsRef<[u8]>,
        max_entries: u32,
    ) -> Result<(Vec<(Name, Attr)>, bool), ClientError> {
        let (entries, more) = self.readdir_attrs_page(dir, after, max_entries)?;
        let (names, mut attrs): (Vec<Name>, Vec<Attr>) = entries.into_iter().unzip();
        let gone = self.sizes(&mut attrs)?;
        let entries = names
            .into_iter()
            .zip(attrs)
            .zip(gone)
            .filter(|(_, gone)| !gone)
            .map(|(entry, _)| entry)
            .collect();
        Ok((entries, more))
    }

    /// `readdir_plus_page` without the sizes (the manager's attributes only; files' sizes
    /// are 0 until `fill_sizes_or_gone`).
    pub fn readdir_attrs_page(
        &self,
        dir: InodeId,
        after: impl AsRef<[u8]>,
        max_entries: u32,
    ) -> Result<(Vec<(Name, Attr)>, bool), ClientError> {
        let request = Request::ReaddirPlus {
            cred: self.cred_clone(),
            dir,
            after: Name::from(after.as_ref()),
            max_entries: max_entries.min(READDIR_ENTRIES_MAX),
        };
        let (names, attrs, more): (Vec<Name>, Vec<Attr>, bool) = match self.inner.meta(&request) {
            Ok(Response::EntriesPlus { entries, more }) => {
                let (names, attrs) = entries.into_iter().unzip();
                (names, attrs, more)
            }
            Ok(other) => return Err(unexpected(&other)),
            Err(e) if matches!(e.code(), ErrorCode::UnknownOpcode | ErrorCode::Unsupported) => {
                let (entries, more) = self.readdir_page(dir, after, max_entries)?;
                let names = entries.iter().map(|e| e.name.clone()).collect();
                let mut attrs = Vec::with_capacity(entries.len());
                let meta = self.inner.meta_connection()?;
                let pending: Vec<_> = entries
                    .iter()
                    .map(|e| {
                        meta.send(
                            &Request::GetAttr {
                                cred: self.cred_clone(),
                                inode: e.inode,
                            },
                            &[],
                        )
                    })
                    .collect::<Result<_, _>>()?;
                for call in pending {
                    match call.wait()?.0 {
                        Response::Attr(a) => attrs.push(a),
                        other => return Err(unexpected(&other)),
                    }
                }
                (names, attrs, more)
            }
            Err(e) => return Err(e),
        };
        Ok((names.into_iter().zip(attrs).collect(), more))
    }

    /// Every entry of a directory, in name order, fetched page by page.
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>, ClientError> {
        let dir = self.resolve(path)?;
        if dir.kind != FileKind::Directory {
            return Err(ClientError::refused(
                ErrorCode::NotDirectory,
                format!("{path}: not a directory"),
            ));
        }
        let mut all = Vec::new();
        let mut after = Name::default();
        loop {
            let (page, more) = self
                .readdir_page(dir.inode, &after, READDIR_ENTRIES_MAX)
                .map_err(|e| e.context(path))?;
            if let Some(last) = page.last() {
                after = last.name.clone();
            }
            all.extend(page);
            if !more {
                return Ok(all);
            }
        }
    }

    /// Attributes (with sizes) of many entries of one directory, pipelined.
    pub fn getattr_many(&self, entries: &[DirEntry]) -> Result<Vec<Attr>, ClientError> {
        let meta = self.inner.meta_connection()?;
        let mut attrs = Vec::with_capacity(entries.len());
        for chunk in entries.chunks(256) {
            let pending: Vec<_> = chunk
                .iter()
                .map(|e| {
                    meta.send(
                        &Request::GetAttr {
                            cred: self.cred_clone(),
                            inode: e.inode,
                        },
                        &[],
                    )
                })
                .collect::<Result<_, _>>()?;
            for (entry, call) in chunk.iter().zip(pending) {
                match call
                    .wait()
                    .map_err(ClientError::from)
                    .map_err(|e| e.context(&entry.name.to_string()))?
                    .0
                {
                    Response::Attr(a) => attrs.push(a),
                    other => return Err(unexpected(&other)),
                }
            }
        }
        self.fill_sizes(&mut attrs)?;
        Ok(attrs)
    }

    pub fn unlink(&self, path: &str) -> Result<(), ClientError> {
        let (parent, name) = path::split(path, ErrorCode::IsDirectory)?;
        if path::names_a_directory(path) {
            // Never a file to unlink: ENOTDIR for a file, EISDIR for a directory.
            self.resolve(path)?;
            return Err(ClientError::refused(
                ErrorCode::IsDirectory,
                format!("{path}: is a directory (unlink removes files)"),
            ));
        }
        let parent = self.resolve(&parent).map_err(|e| e.context(path))?;
        self.remove_named(parent.inode, name.as_bytes(), false, path)
    }

    pub fn unlink_in(&self, parent: InodeId, name: impl AsRef<[u8]>) -> Result<(), ClientError> {
        let name = name.as_ref();
        self.remove_named(parent, name, false, &lossy(name))
    }

    /// Removes `name` from `parent`. If that was the last name of a file that mount
    /// session `keep` has open, the file lives on, nameless (link count 0), until the
    /// session releases it (`release`); returns it then.
    pub fn unlink_keeping(
        &self,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        keep: Option<u64>,
    ) -> Result<Option<InodeId>, ClientError> {
        let name = name.as_ref();
        let request = Request::Unlink {
            cred: self.cred_clone(),
            parent,
            name: Name::from(name),
            keep,
        };
        match self.inner.meta(&request).map_err(|e| e.context(&lossy(name)))? {
            Response::Unlinked { kept } => Ok(kept),
            other => Err(unexpected(&other)),
        }
    }

    /// Mount session `session` closed its last descriptor of `inode`, which an unlink or
    /// rename kept for it: the file goes if it still has no name.
    pub fn release(&self, session: u64, inode: InodeId) -> Result<(), ClientError> {
        self.done(Request::Release { session, inode }, &format!("inode {inode}"))
    }

    /// Tells the manager that mount session `session` is alive (the files it keeps stay).
    pub fn renew_session(&self, session: u64) -> Result<(), ClientError> {
        self.done(Request::RenewSession { session }, "session")
    }

    /// Takes, changes or drops the cluster-wide lock `request` asks for (see the
    /// manager's `file_locks`). A conflicting lock of another owner refuses it with
    /// `Busy`; to wait, ask again. `Some`: the manager's grace after its restart held
    /// it back (not granted; its incarnation and grace left): ask again.
    pub fn file_lock(&self, request: &LockRequest) -> Result<Option<LockState>, ClientError> {
        match self
            .inner
            .meta(&Request::FileLock(*request))
            .map_err(|e| e.context(&format!("lock of inode {}", request.inode)))?
        {
            Response::Done => Ok(None),
            Response::LockState(state) => Ok(Some(state)),
            other => Err(unexpected(&other)),
        }
    }

    /// Takes again, during the manager's grace after its restart, a lock this mount
    /// held before it; refused (`Busy`, `Stale`) when the lock is lost.
    pub fn file_lock_reclaim(&self, request: &LockRequest) -> Result<LockState, ClientError> {
        self.lock_state(Request::FileLockReclaim(*request), request.inode)
    }

    /// Tells the manager that mount session `session`, which holds locks, is alive;
    /// answers its incarnation (changed: it restarted, reclaim) and grace.
    pub fn lock_session(&self, session: u64) -> Result<LockState, ClientError> {
        match self
            .inner
            .meta(&Request::LockSession { session })
            .map_err(|e| e.context("lock session"))?
        {
            Response::LockState(state) => Ok(state),
            other => Err(unexpected(&other)),
        }
    }

    /// Tells manager `incarnation` that mount session `session` reclaimed every lock it
    /// holds (or holds none), so its grace need not wait for it; answers its lock state.
    pub fn lock_reclaim_complete(&self, session: u64, incarnation: u64) -> Result<LockState, ClientError> {
        match self
            .inner
            .meta(&Request::LockReclaimComplete { session, incarnation })
            .map_err(|e| e.context("lock reclaim complete"))?
        {
            Response::LockState(state) => Ok(state),
            other => Err(unexpected(&other)),
        }
    }

    /// Tells the manager that mount session `session` ends, holding no lock: it need not
    /// be waited for after a restart.
    pub fn lock_session_end(&self, session: u64) -> Result<(), ClientError> {
        match self
            .inner
            .meta(&Request::LockSessionEnd { session })
            .map_err(|e| e.context("lock session end"))?
        {
            Response::Done => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    fn lock_state(&self, request: Request, inode: InodeId) -> Result<LockState, ClientError> {
        match self
            .inner
            .meta(&request)
            .map_err(|e| e.context(&format!("lock of inode {inode}")))?
        {
            Response::LockState(state) => Ok(state),
            other => Err(unexpected(&other)),
        }
    }

    /// The first lock of another owner that would refuse `file_lock(request)` (F_GETLK),
    /// if any; during the manager's grace, when no reclaimed lock does,
    /// `LockTest::Grace` (ask again).
    pub fn file_lock_test(&self, request: &LockRequest) -> Result<LockTest, ClientError> {
        match self
            .inner
            .meta(&Request::FileLockTest(*request))
            .map_err(|e| e.context(&format!("lock of inode {}", request.inode)))?
        {
            Response::LockHolder(holder) => Ok(LockTest::Holder(holder)),
            Response::LockState(state) => Ok(LockTest::Grace(state)),
            other => Err(unexpected(&other)),
        }
    }

    pub fn rmdir(&self, path: &str) -> Result<(), ClientError> {
        let (parent, name) = path::split(path, ErrorCode::Busy)?;
        let parent = self.resolve(&parent).map_err(|e| e.context(path))?;
        self.remove_named(parent.inode, name.as_bytes(), true, path)
    }

    pub fn rmdir_in(&self, parent: InodeId, name: impl AsRef<[u8]>) -> Result<(), ClientError> {
        let name = name.as_ref();
        self.remove_named(parent, name, true, &lossy(name))
    }

    fn remove_named(
        &self,
        parent: InodeId,
        name: &[u8],
        directory: bool,
        what: &str,
    ) -> Result<(), ClientError> {
        if !directory {
            return self
                .unlink_keeping(parent, name, None)
                .map(drop)
                .map_err(|e| e.context(what));
        }
        let (cred, name) = (self.cred_clone(), Name::from(name));
        self.done(Request::Rmdir { cred, parent, name }, what)
    }

    /// Renames atomically, replacing an existing target as POSIX rename(2) does.
    /// Returns the moved inode's attributes (without the derived size).
    pub fn rename(&self, from: &str, to: &str) -> Result<Attr, ClientError> {
        let (src_dir, src_name) = path::split(from, ErrorCode::Busy)?;
        let (dst_dir, dst_name) = path::split(to, ErrorCode::Busy)?;
        if path::names_a_directory(from) || path::names_a_directory(to) {
            // Only a directory moves by a name ending with /.
            let moved = self
                .resolve(from.trim_end_matches('/'))
                .map_err(|e| e.context(from))?;
            if moved.kind != FileKind::Directory {
                return Err(not_a_directory(if path::names_a_directory(from) {
                    from
                } else {
                    to
                }));
            }
        }
        let src_parent = self.resolve(&src_dir).map_err(|e| e.context(from))?.inode;
        let dst_parent = self.resolve(&dst_dir).map_err(|e| e.context(to))?.inode;
        let what = format!("rename {from} -> {to}");
        self.rename_named(
            (src_parent, src_name.as_bytes()),
            (dst_parent, dst_name.as_bytes()),
            &what,
        )
    }

    /// Renames `src_name` in `src_parent` to `dst_name` in `dst_parent`, as `rename`.
    pub fn rename_in(
        &self,
        src_parent: InodeId,
        src_name: impl AsRef<[u8]>,
        dst_parent: InodeId,
        dst_name: impl AsRef<[u8]>,
    ) -> Result<Attr, ClientError> {
        let (src_name, dst_name) = (src_name.as_ref(), dst_name.as_ref());
        let what = format!("rename {} -> {}", lossy(src_name), lossy(dst_name));
        self.rename_named((src_parent, src_name), (dst_parent, dst_name), &what)
    }

    /// Renames without replacing (rename(2) with RENAME_NOREPLACE): `Exists` when the
    /// target name exists, checked by the manager in the move's own transaction.
    /// Returns the moved inode's attributes.
    pub fn rename_no_replace(
        &self,
        (src_parent, src_name): (InodeId, &[u8]),
        (dst_parent, dst_name): (InodeId, &[u8]),
    ) -> Result<Attr, ClientError> {
        let request = Request::RenameNoReplace {
            cred: self.cred_clone(),
            src_parent,
            src_name: Name::from(src_name),
            dst_parent,
            dst_name: Name::from(dst_name),
        };
        self.moved(&request)
    }

    /// Swaps two names atomically (rename(2) with RENAME_EXCHANGE): each then leads to
    /// what the other led to. Both must exist. Returns what `a` led to.
    pub fn rename_exchange(
        &self,
        (a_parent, a_name): (InodeId, &[u8]),
        (b_parent, b_name): (InodeId, &[u8]),
    ) -> Result<Attr, ClientError> {
        let request = Request::RenameExchange {
            cred: self.cred_clone(),
            a_parent,
            a_name: Name::from(a_name),
            b_parent,
            b_name: Name::from(b_name),
        };
        self.moved(&request)
    }

    /// Sends a rename-like `request` to the manager: the moved inode's attributes.
    fn moved(&self, request: &Request) -> Result<Attr, ClientError> {
        match self.inner.meta(request)? {
            Response::Renamed { moved, .. } => Ok(moved),
            other => Err(unexpected(&other)),
        }
    }

    /// `rename_in`, keeping a replaced file that mount session `keep` has open as
    /// `unlink_keeping` does. Returns the moved inode's attributes and the kept inode.
    pub fn rename_keeping(
        &self,
        (src_parent, src_name): (InodeId, &[u8]),
        (dst_parent, dst_name): (InodeId, &[u8]),
        keep: Option<u64>,
    ) -> Result<(Attr, Option<InodeId>), ClientError> {
        let request = Request::Rename {
            cred: self.cred_clone(),
            src_parent,
            src_name: Name::from(src_name),
            dst_parent,
            dst_name: Name::from(dst_name),
            keep,
        };
        match self.inner.meta(&request)? {
            Response::Renamed { moved, kept } => Ok((moved, kept)),
            other => Err(unexpected(&other)),
        }
    }

    fn rename_named(
        &self,
        src: (InodeId, &[u8]),
        dst: (InodeId, &[u8]),
        what: &str,
    ) -> Result<Attr, ClientError> {
        self.rename_keeping(src, dst, None)
            .map(|(moved, _)| moved)
            .map_err(|e| e.context(what))
    }

    /// Changes attributes. A size change also truncates (or extends) the file's data on
    /// its io servers.
    pub fn setattr(&self, path: &str, changes: &SetAttr) -> Result<Attr, ClientError> {
        let attr = self.resolve(path)?;
        self.setattr_inode(attr.inode, changes)
            .map_err(|e| e.context(path))
    }

    pub fn setattr_inode(&self, inode: InodeId, changes: &SetAttr) -> Result<Attr, ClientError> {
        if let Some(size) = changes.size {
            // Past the largest file: EFBIG, before anything changes.
            weft_layout::stripe::check_range(size, 0)
                .map_err(|e| ClientError::refused(ErrorCode::TooLarge, format!("inode {inode}: {e}")))?;
        }
        let mut attr = self.attr_of(
            Request::SetAttr {
                cred: self.cred_clone(),
                inode,
                changes: changes.clone(),
            },
            &format!("inode {inode}"),
        )?;
        if let Some(size) = changes.size {
            File::new(self.inner.clone(), attr.clone(), format!("inode {inode}"), true)?
                .truncate_objects(size)?;
        }
        self.fill_sizes(std::slice::from_mut(&mut attr))?;
        Ok(attr)
    }

    /// `setattr_inode` of changes that leave the size alone (mode, owner, times), answered
    /// with the manager's attributes only: the size is not asked of the io servers.
    pub fn setattr_unsized(&self, inode: InodeId, changes: &SetAttr) -> Result<Attr, ClientError> {
        if changes.size.is_some() {
            return Err(ClientError::InvalidArgument(format!(
                "inode {inode}: a size change needs setattr_inode"
            )));
        }
        self.attr_of(
            Request::SetAttr {
                cred: self.cred_clone(),
                inode,
                changes: changes.clone(),
            },
            &format!("inode {inode}"),
        )
    }

    /// Sets (or with `None` clears) the default layout of new files in a directory.
    pub fn set_dir_layout(&self, path: &str, layout: Option<LayoutRequest>) -> Result<Attr, ClientError> {
        let dir = self.resolve(path)?;
        self.set_dir_layout_named(dir.inode, layout, path)
    }

    pub fn set_dir_layout_in(
        &self,
        dir: InodeId,
        layout: Option<LayoutRequest>,
    ) -> Result<Attr, ClientError> {
        self.set_dir_layout_named(dir, layout, &format!("inode {dir}"))
    }

    fn set_dir_layout_named(
        &self,
        dir: InodeId,
        layout: Option<LayoutRequest>,
        what: &str,
    ) -> Result<Attr, ClientError> {
        let request = Request::SetDirLayout {
            cred: self.cred_clone(),
            dir,
            layout,
        };
        self.attr_of(request, what)
    }

    pub fn symlink(&self, target: &str, link_path: &str) -> Result<Attr, ClientError> {
        let (parent, name) = path::split(link_path, ErrorCode::Exists)?;
        let parent = self.resolve(&parent).map_err(|e| e.context(link_path))?;
        self.symlink_named(target.as_bytes(), parent.inode, name.as_bytes(), link_path, false)
            .map(|made| made.made)
    }

    /// Creates symbolic link `name` in directory `parent`, pointing at `target` (bytes,
    /// stored verbatim).
    pub fn symlink_in(
        &self,
        target: impl AsRef<[u8]>,
        parent: InodeId,
        name: impl AsRef<[u8]>,
    ) -> Result<Attr, ClientError> {
        let name = name.as_ref();
        self.symlink_named(target.as_ref(), parent, name, &lossy(name), false)
            .map(|made| made.made)
    }

    /// `symlink_in`, with `parent`'s attributes after it (see [`Made`]).
    pub fn symlink_in_made(
        &self,
        target: impl AsRef<[u8]>,
        parent: InodeId,
        name: impl AsRef<[u8]>,
    ) -> Result<Made<Attr>, ClientError> {
        let name = name.as_ref();
        self.symlink_named(target.as_ref(), parent, name, &lossy(name), true)
    }

    fn symlink_named(
        &self,
        target: &[u8],
        parent: InodeId,
        name: &[u8],
        what: &str,
        with_parent: bool,
    ) -> Result<Made<Attr>, ClientError> {
        let request = Request::Symlink {
            cred: self.cred_clone(),
            parent,
            name: Name::from(name),
            target: Name::from(target),
        };
        self.attr_made(request, what, with_parent)
    }

    /// A symlink's target, as the bytes stored.
    pub fn readlink(&self, path: &str) -> Result<Name, ClientError> {
        let attr = self.resolve(path)?;
        self.readlink_inode(attr.inode).map_err(|e| e.context(path))
    }

    pub fn readlink_inode(&self, inode: InodeId) -> Result<Name, ClientError> {
        match self.inner.meta(&Request::Readlink {
            cred: self.cred_clone(),
            inode,
        })? {
            Response::Link(target) => Ok(target),
            other => Err(unexpected(&other)),
        }
    }

    /// Gives non-directory `inode` another name, `name` in `parent` (link(2)).
    pub fn link_in(
        &self,
        inode: InodeId,
        parent: InodeId,
        name: impl AsRef<[u8]>,
    ) -> Result<Attr, ClientError> {
        self.link_made(inode, parent, name.as_ref(), false)
            .map(|made| made.made)
    }

    /// `link_in`, with `parent`'s attributes after it (see [`Made`]).
    pub fn link_in_made(
        &self,
        inode: InodeId,
        parent: InodeId,
        name: impl AsRef<[u8]>,
    ) -> Result<Made<Attr>, ClientError> {
        self.link_made(inode, parent, name.as_ref(), true)
    }

    fn link_made(
        &self,
        inode: InodeId,
        parent: InodeId,
        name: &[u8],
        with_parent: bool,
    ) -> Result<Made<Attr>, ClientError> {
        let request = Request::Link {
            cred: self.cred_clone(),
            inode,
            parent,
            name: Name::from(name),
        };
        self.attr_made(request, &lossy(name), with_parent)
    }

    /// Makes `new_path` another name of the file at `existing` (link(2)).
    pub fn link(&self, existing: &str, new_path: &str) -> Result<Attr, ClientError> {
        let inode = self.resolve(existing)?.inode;
        let (parent, name) = path::split(new_path, ErrorCode::Exists)?;
        let parent = self.resolve(&parent).map_err(|e| e.context(new_path))?;
        self.link_in(inode, parent.inode, name)
            .map_err(|e| e.context(new_path))
    }

    /// Makes a FIFO, character or block device (`rdev`), or socket `name` in `parent`
    /// (mknod(2)): a namespace object only; its I/O never reaches Weft.
    pub fn mknod_in(
        &self,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        kind: FileKind,
        mode: u32,
        rdev: u64,
    ) -> Result<Attr, ClientError> {
        self.mknod_made(parent, name.as_ref(), (kind, mode, rdev), false)
            .map(|made| made.made)
    }

    /// `mknod_in`, with `parent`'s attributes after it (see [`Made`]).
    pub fn mknod_in_made(
        &self,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        kind: FileKind,
        mode: u32,
        rdev: u64,
    ) -> Result<Made<Attr>, ClientError> {
        self.mknod_made(parent, name.as_ref(), (kind, mode, rdev), true)
    }

    fn mknod_made(
        &self,
        parent: InodeId,
        name: &[u8],
        (kind, mode, rdev): (FileKind, u32, u64),
        with_parent: bool,
    ) -> Result<Made<Attr>, ClientError> {
        let request = Request::Mknod {
            cred: self.cred_clone(),
            parent,
            name: Name::from(name),
            kind,
            mode,
            rdev,
        };
        self.attr_made(request, &lossy(name), with_parent)
    }

    /// Sets extended attribute `name` (`user.*`, or `trusted.*` as root) of `inode`.
    pub fn setxattr(
        &self,
        inode: InodeId,
        name: impl AsRef<[u8]>,
        value: &[u8],
        how: XattrSet,
    ) -> Result<(), ClientError> {
        let name = name.as_ref();
        let request = Request::SetXattr {
            cred: self.cred_clone(),
            inode,
            name: Name::from(name),
            value: value.to_vec(),
            how,
        };
        self.done(request, &lossy(name))
    }

    /// The value of extended attribute `name` of `inode`; `NoData` if it is not set.
    pub fn getxattr(&self, inode: InodeId, name: impl AsRef<[u8]>) -> Result<Vec<u8>, ClientError> {
        let name = name.as_ref();
        let request = Request::GetXattr {
            cred: self.cred_clone(),
            inode,
            name: Name::from(name),
        };
        match self.inner.meta(&request).map_err(|e| e.context(&lossy(name)))? {
            Response::Value(value) => Ok(value),
            other => Err(unexpected(&other)),
        }
    }

    /// The names of `inode`'s extended attributes that this caller may see.
    pub fn listxattr(&self, inode: InodeId) -> Result<Vec<Name>, ClientError> {
        let request = Request::ListXattr {
            cred: self.cred_clone(),
            inode,
        };
        match self.inner.meta(&request)? {
            Response::Names(names) => Ok(names),
            other => Err(unexpected(&other)),
        }
    }

    pub fn removexattr(&self, inode: InodeId, name: impl AsRef<[u8]>) -> Result<(), ClientError> {
        let name = name.as_ref();
        let request = Request::RemoveXattr {
            cred: self.cred_clone(),
            inode,
            name: Name::from(name),
        };
        self.done(request, &lossy(name))
    }

    /// Makes every metadata operation acknowledged so far durable (sync(2), syncfs(2),
    /// fsync of a directory): see docs/src/consistency.md, Durability.
    pub fn sync_metadata(&self) -> Result<(), ClientError> {
        self.inner.commit_metadata()
    }

    /// Namespace counts and every io server's space (an unreachable server is reported,
    /// not fatal).
    pub fn statfs(&self) -> Result<FsStats, ClientError> {
        let meta = match self.inner.meta(&Request::Statfs {
            cred: self.cred_clone(),
        })? {
            Response::Statfs(s) => s,
            other => return Err(unexpected(&other)),
        };
        let servers = self
            .inner
            .cluster
            .io_servers
            .iter()
            .map(|s| {
                let r = self
                    .inner
                    .pool
                    .call(&s.addr, &Request::IoStatfs, &[])
                    .map_err(ClientError::from)
                    .and_then(|(r, _)| match r {
                        Response::IoStatfs(st) => Ok(st),
                        other => Err(unexpected(&other)),
                    });
                (s.clone(), r)
            })
            .collect();
        Ok(FsStats { meta, servers })
    }
}

/// The mode-bit check a local open(2) would do, so that a read-only file is refused at
/// open rather than at the first write (io servers do not check permissions).
fn check_access(cred: &Cred, attr: &Attr, want: u32) -> Result<(), ClientError> {
    if cred.permits(attr.kind, attr.mode, attr.uid, attr.gid, want) {
        Ok(())
    } else {
        Err(ClientError::refused(
            ErrorCode::PermissionDenied,
            "permission denied",
        ))
    }
}

/// A name for messages (not UTF-8: replacement characters).
fn lossy(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// What [`File::handoff`] carries: the manager's answer to the open (its attributes,
/// layout included), versioned so that a handoff between mismatched builds fails
/// clearly. Whatever else a manager's open answer grants a handle belongs here too.
pub(crate) struct Handoff;

/// What a handoff carries.
pub(crate) struct Handed {
    pub attr: Attr,
    /// The capability of the process that made it, and its uid.
    pub capability: Option<(u32, weft_proto::Capability)>,
}

impl Handoff {
    /// The attributes alone.
    const VERSION: u8 = 1;
    /// The attributes' length, the attributes, then optionally the uid and capability.
    const VERSION_CAPABLE: u8 = 2;

    pub(crate) fn encode(attr: &Attr, capability: Option<&(u32, weft_proto::Capability)>) -> Vec<u8> {
        use weft_proto::Wire;
        let attr = attr.to_bytes();
        let Some((uid, cap)) = capability else {
            let mut out = vec![Handoff::VERSION];
            out.extend_from_slice(&attr);
            return out;
        };
        let mut out = vec![Handoff::VERSION_CAPABLE];
        out.extend_from_slice(&(attr.len() as u64).to_le_bytes());
        out.extend_from_slice(&attr);
        out.extend_from_slice(&uid.to_le_bytes());
        out.extend_from_slice(&cap.to_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<Handed, String> {
        use weft_proto::Wire;
        match bytes.split_first() {
            Some((&Handoff::VERSION, rest)) => Ok(Handed {
                attr: Attr::from_bytes(rest).map_err(|e| e.to_string())?,
                capability: None,
            }),
            Some((&Handoff::VERSION_CAPABLE, rest)) => {
                let short = || "truncated".to_owned();
                let len = rest.get(..8).ok_or_else(short)?;
                let len = usize::try_from(u64::from_le_bytes(len.try_into().expect("8 bytes")))
                    .map_err(|_| short())?;
                let attr_end = len.checked_add(8).ok_or_else(short)?;
                let attr = rest.get(8..attr_end).ok_or_else(short)?;
                let attr = Attr::from_bytes(attr).map_err(|e| e.to_string())?;
                let uid = rest.get(attr_end..attr_end + 4).ok_or_else(short)?;
                let uid = u32::from_le_bytes(uid.try_into().expect("4 bytes"));
                let cap = weft_proto::Capability::from_bytes(&rest[attr_end + 4..])
                    .map_err(|e| format!("its capability: {e}"))?;
                if cap.inode != attr.inode {
                    return Err(format!(
                        "its capability is for inode {}, the file is inode {}",
                        cap.inode, attr.inode
                    ));
                }
                Ok(Handed {
                    attr,
                    capability: Some((uid, cap)),
                })
            }
            Some((v, _)) => Err(format!(
                "version {v}, this build reads {} and {}",
                Handoff::VERSION,
                Handoff::VERSION_CAPABLE
            )),
            None => Err("empty".into()),
        }
    }
}

pub(crate) fn unexpected(response: &Response) -> ClientError {
    ClientError::refused(
        ErrorCode::Io,
        format!("unexpected answer from server: {response:?}"),
    )
}

fn client_name() -> String {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    let name = format!(
        "{} pid {}",
        exe.unwrap_or_else(|| "client".into()),
        std::process::id()
    );
    match job_id() {
        // Servers attribute this connection's requests to the job (their metrics).
        Some(job) => format!("{name} job {job}"),
        None => name,
    }
}

/// The job this process belongs to, for the servers' per-job metrics: $WEFT_JOB, else
/// the batch system's or the MPI launcher's job id.
fn job_id() -> Option<String> {
    [
        "WEFT_JOB",
        "SLURM_JOB_ID",
        "PBS_JOBID",
        "PMIX_NAMESPACE",
        "OMPI_MCA_ess_base_jobid",
    ]
    .iter()
    .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    // Servers keep 64 bytes of it; a long one must not make the handshake too large.
    .map(|job| job.chars().take(64).collect())
}

/// The answer to one batch's `ObjStamp` (`call`), asking with `ObjStat` instead a
/// server from before `ObjStamp` (or one whose roles do not route it): sizes without
/// stamps.
fn obj_stamps(
    batch: &[(usize, Striping)],
    attrs: &[Attr],
    connection: &weft_rpc::Connection,
    call: weft_rpc::PendingCall<'_>,
) -> Result<Vec<ObjStamped>, ClientError> {
    match call.wait() {
        Ok((Response::ObjStamps(stamped), _)) => Ok(stamped),
        Ok((Response::ObjStats(stats), _)) => Ok(unstamped(stats)),
        Err(weft_rpc::RpcError::Remote { error, .. })
            if matches!(error.code, ErrorCode::UnknownOpcode | ErrorCode::Unsupported) =>
        {
            let request = Request::ObjStat {
                items: batch.iter().map(|(k, s)| (attrs[*k].inode, *s)).collect(),
            };
            match connection.call(&request, &[])?.0 {
                Response::ObjStats(stats) => Ok(unstamped(stats)),
                _ => Err(not_a_stat()),
            }
        }
        Err(e) => Err(e.into()),
        Ok(_) => Err(not_a_stat()),
    }
}

/// What `Client::fill_sizes_partial` learnt of each file's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeOf {
    /// Every object's server answered (directories and others: nothing to ask).
    Known,
    /// Every object is gone from its server (removed meanwhile, or lost).
    Gone,
    /// A server of its objects could not be reached or failed to answer.
    Unknown,
}

/// `Client::fill_sizes_partial`'s answer: one `SizeOf` per attr, and each io server
/// that failed, once, with its error.
#[derive(Debug)]
pub struct PartialSizes {
    pub sizes: Vec<SizeOf>,
    pub failed: Vec<(ServerId, ClientError)>,
}

/// A file's data as its io servers last changed it: the change stamps of its objects
/// (`ObjStamped`, each object's ctime on its server). Two equal stamps of one file, taken
/// at two moments, mean no write, truncate or allocation by any client touched its
/// objects between them. Not to be had (`None` where it is returned) while an object
/// changed within the last `ObjStamped::SETTLE_NS`, from servers that predate it, and
/// for files whose data a cache manager holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataStamp {
    inode: InodeId,
    objects: Vec<u64>,
}

/// `known` with no times of its own, for asking the io servers about its objects while
/// the manager answers: what the size query then adds is the objects' latest time only.
fn objects_only(known: &Attr) -> Attr {
    Attr {
        mtime: weft_proto::Timespec::default(),
        ctime: weft_proto::Timespec::default(),
        ..known.clone()
    }
}

/// The manager's answer `attr` completed with what the io servers said of the same
/// file's objects (`objects_only`): size, blocks, and the later of their times.
fn take_sized(attr: &mut Attr, sized: &Attr) {
    attr.size = sized.size;
    attr.blocks = sized.blocks;
    attr.mtime = attr.mtime.max(sized.mtime);
    attr.ctime = attr.ctime.max(sized.mtime);
}

fn unstamped(stats: Vec<(u64, u64)>) -> Vec<ObjStamped> {
    stats
        .into_iter()
        .map(|(end, allocated)| ObjStamped {
            end,
            allocated,
            stamp: ObjStamped::UNSETTLED,
            mtime: Default::default(),
        })
        .collect()
}

fn not_a_stat() -> ClientError {
    ClientError::refused(
        ErrorCode::Io,
        "io server answered an object stat with something else",
    )
}

fn not_a_directory(path: &str) -> ClientError {
    ClientError::refused(
        ErrorCode::NotDirectory,
        format!("{path}: not a directory (a path ending with / names one)"),
    )
}
