//! What a client reaches the cluster through, shared by every handle made from it: the
//! connection pool, the cluster's servers and the address each is reached by (chosen
//! when first used), the route to the manager and the replay of namespace changes.

use crate::drive::TransferOptions;
use crate::error::{unexpected, ClientError};
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock, RwLock};
use weft_layout::{InodeId, ServerId};
use weft_proto::msg::{Request, Response};
use weft_proto::{ClusterInfo, Cred, ErrorCode, IoServer};
use weft_rpc::ConnectionPool;

pub(crate) mod replay;

pub(crate) struct Inner {
    pub pool: Arc<ConnectionPool>,
    pub meta_addr: String,
    /// What calls to the manager go to: `meta_addr`, or its Unix socket on its machine
    /// (`meta_route`).
    pub meta_route: String,
    /// The cluster's description and io servers as last heard from the manager;
    /// refreshed when a layout names an io server it does not list (one added while
    /// this client ran: `weft server add`). Shared by every client made from this one.
    pub directory: Arc<RwLock<Directory>>,
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
    /// The manager answered a `CreateStamped` with `UnknownOpcode`: creates are sent
    /// as `CreateGranted` from then on.
    pub no_create_stamps: Arc<AtomicBool>,
    /// The manager answered `UnknownOpcode` to a `CreateMany`: files one by one.
    pub no_create_many: Arc<AtomicBool>,
    /// The manager answered a `Vouched` with `UnknownOpcode`: lookups are sent alone.
    pub no_vouch: Arc<AtomicBool>,
    /// The manager answers no `VouchedReadable` (it predates it).
    pub no_readable_vouch: Arc<AtomicBool>,
    /// The manager answers no `ReaddirSized` (it predates it): listings are sent as
    /// `ReaddirPlus`.
    pub no_sized_listing: Arc<AtomicBool>,
    /// What this client learnt of files' data under the manager's vouch (see
    /// `vouched`). Shared by every client made from this one.
    pub(crate) vouched: Arc<crate::vouched::Vouched>,
    /// Namespace changes kept until durable, replayed after a manager restart
    /// (`replay.rs`); one per connection pool.
    pub tracker: Arc<replay::Tracker>,
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
    pub(crate) fn new(server: &IoServer) -> Arc<ServerAddress> {
        Arc::new(ServerAddress {
            server: server.clone(),
            chosen: OnceLock::new(),
        })
    }

    fn get(&self, pool: &ConnectionPool) -> &str {
        self.chosen.get_or_init(|| io_address(pool, &self.server))
    }
}

/// The cluster as a client knows it: the manager's description and how each io server
/// is reached.
pub(crate) struct Directory {
    pub cluster: Arc<ClusterInfo>,
    pub io_addrs: HashMap<ServerId, Arc<ServerAddress>>,
    /// When a layout naming an unknown io server last made this client ask again.
    looked: Option<std::time::Instant>,
}

/// Least time between two looks for io servers a layout names and this client does not
/// know: a file naming a server that does not exist costs the manager one
/// `GetCluster` per 200 ms of a client, not one per call.
pub const LOOK_AGAIN: std::time::Duration = std::time::Duration::from_millis(200);

impl Directory {
    pub(crate) fn new(cluster: ClusterInfo) -> Directory {
        let io_addrs = cluster
            .io_servers
            .iter()
            .map(|s| (s.id, ServerAddress::new(s)))
            .collect();
        Directory {
            cluster: Arc::new(cluster),
            io_addrs,
            looked: None,
        }
    }

    /// Takes `cluster`, the manager's newer description, keeping the addresses
    /// chosen for the io servers it knew (their connections stay).
    fn update(&mut self, cluster: ClusterInfo) {
        for s in &cluster.io_servers {
            let same = self.io_addrs.get(&s.id).is_some_and(|known| known.server == *s);
            if !same {
                self.io_addrs.insert(s.id, ServerAddress::new(s));
            }
        }
        self.io_addrs
            .retain(|id, _| cluster.io_servers.iter().any(|s| s.id == *id));
        self.cluster = Arc::new(cluster);
    }
}

impl Inner {
    /// The cluster's description as this client knows it now.
    pub fn cluster(&self) -> Arc<ClusterInfo> {
        self.directory
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .cluster
            .clone()
    }

    fn known_io(&self, server: ServerId) -> Option<Arc<ServerAddress>> {
        let directory = self.directory.read().unwrap_or_else(|p| p.into_inner());
        directory.io_addrs.get(&server).cloned()
    }

    /// Asks the manager for the cluster's description again (`GetCluster`).
    pub fn refresh_cluster(&self) -> Result<Arc<ClusterInfo>, ClientError> {
        let cluster = match self.pool.call(&self.meta_route, &Request::GetCluster, &[])?.0 {
            Response::Cluster(c) => c,
            other => return Err(unexpected(&other)),
        };
        let mut directory = self.directory.write().unwrap_or_else(|p| p.into_inner());
        directory.update(cluster);
        Ok(directory.cluster.clone())
    }

    /// Asks the manager for the description again because a layout names `server`,
    /// which this client does not know (added since it started), at most once per
    /// `LOOK_AGAIN` (a look within it of the last waits until then).
    fn look_again_for(&self, server: ServerId) -> Result<(), ClientError> {
        let last = self.directory.read().unwrap_or_else(|p| p.into_inner()).looked;
        if let Some(at) = last {
            std::thread::sleep(LOOK_AGAIN.saturating_sub(at.elapsed()));
            if self.known_io(server).is_some() {
                return Ok(());
            }
        }
        self.directory.write().unwrap_or_else(|p| p.into_inner()).looked = Some(std::time::Instant::now());
        self.refresh_cluster().map(|_| ())
    }

    /// The address io server `server` is reached at. A server this client does not
    /// know (added to the cluster since it started) has the description asked for
    /// again, once (`look_again_for`).
    pub fn io_addr(&self, server: ServerId) -> Result<String, ClientError> {
        let address = match self.known_io(server) {
            Some(address) => address,
            None => {
                self.look_again_for(server)?;
                self.known_io(server).ok_or_else(|| {
                    ClientError::refused(
                        ErrorCode::Unavailable,
                        format!("io server {server} is not in the cluster description"),
                    )
                })?
            }
        };
        Ok(address.get(&self.pool).to_owned())
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
        let deadline = std::time::Instant::now() + self.tracker.restart_wait();
        loop {
            self.tracker.before(self)?;
            match self.pool.call(&self.meta_route, request, &[]) {
                Ok((response, _)) => return Ok(response),
                // A read whose connection the manager closed as it acted restarted (its
                // store lost operations to a disk error, see `replay.rs`): asked again
                // once this client replayed, so that it sees them; again if the manager
                // acts restarted once more meanwhile (asked once only, a read failed in
                // disk_full.rs when two losses came within milliseconds).
                Err(e)
                    if e.is_transport()
                        && std::time::Instant::now() < deadline
                        && self.tracker.resend_after_restart(self, request) => {}
                Err(e) => return Err(e.into()),
            }
        }
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

/// A client dropped while it keeps operations that are answered and not durable asks the
/// manager to commit them first: a program that made changes and exits (a failed
/// `weft put` removing its hidden file) would otherwise lose them to a later manager
/// crash or store disk error with nobody left to replay them, which a manager with a
/// commit interval of 0 never did (hostile_conn's full-disk attack found the file back).
impl Drop for Inner {
    fn drop(&mut self) {
        if self.tracker.kept() > 0 {
            if let Err(e) = self.commit_metadata() {
                eprintln!("weft: committing this client's last metadata operations as it ends: {e}");
            }
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
pub(crate) fn meta_route(pool: &ConnectionPool, meta_addr: &str) -> String {
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

pub(crate) fn client_name() -> String {
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
