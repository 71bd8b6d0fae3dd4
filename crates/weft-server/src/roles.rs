//! The roles of one server process behind one request handler, dispatching by opcode,
//! and the network side of the metadata manager's calls to io servers.

use crate::Plan;
use anyhow::{Context, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weft_cache::policy::PolicyKind;
use weft_cm::{Backing, CacheConfig, CacheService};
use weft_config::Role;
use weft_iod::IoService;
use weft_layout::{InodeId, ServerId};
use weft_meta::{Caller, MetaService, MetaStore};
use weft_proto::msg::{roles, Request, Response};
use weft_proto::{CacheTier, ClusterInfo, ErrorCode, IoServer, WireError};
use weft_rpc::{ClientAuth, ConnectionId, ConnectionPool, Handler, Timeouts};

/// How often the manager purges objects of removed files.
const PURGE_PERIOD: Duration = Duration::from_millis(500);

/// For tests only: `WEFT_SESSION_LEASE_MS` (1,000 to 3,600,000) replaces the manager's
/// mount session lease (`weft_meta::service::SESSION_LEASE`, 60 s), so that a test can
/// let a session lapse in seconds. Not documented for users: mounts renew on the
/// assumption of the default.
fn session_lease_for_tests() -> Option<Duration> {
    let ms: u64 = std::env::var("WEFT_SESSION_LEASE_MS").ok()?.parse().ok()?;
    Some(Duration::from_millis(ms.clamp(1000, 3_600_000)))
}

pub struct Roles {
    meta: Option<Arc<MetaService>>,
    /// In `owner` mode, the key owner's credential, which replaces whatever credential
    /// a metadata request claims.
    owner: Option<weft_proto::Cred>,
    /// In `munge` mode, the credential decoder and, per open connection, the identity
    /// it claimed and (once its first metadata request asked) what that proved.
    munge: Option<crate::identity::Munge>,
    connections: std::sync::Mutex<HashMap<ConnectionId, Arc<MungeConnection>>>,
    io: Option<Arc<IoService>>,
    cache: Option<CacheService>,
    /// With an io or cache role: which connections may touch which objects.
    gate: Option<weft_rpc::Gate>,
    /// With the meta role in a cluster that asks for capabilities: what signs them, and
    /// verifies them for servers without the key (`VerifyCapability`).
    issuer: Option<Arc<crate::capability::Issuer>>,
    /// With the meta role: how the manager acts as restarted when its store loses
    /// acknowledged operations (set once serving, `set_restarter`).
    restarter: Arc<std::sync::OnceLock<weft_rpc::Restarter>>,
    /// With the meta role: the answer to `SecurityInfo`.
    security: Option<Response>,
}

impl Roles {
    /// Opens the roles of `plan`; `incarnation` is the one the server's handshake
    /// gives clients (a cache manager refuses requests of another).
    pub fn open(plan: &Plan, incarnation: u64) -> Result<Roles> {
        let io = if plan.roles.contains(&Role::Io) {
            let io = IoService::open(&plan.data_dir)
                .with_context(|| format!("opening io data in {}", plan.data_dir.display()))?;
            let io = match write_stall_from_env()? {
                Some((offset, pause)) => io.stall_write_once(offset, pause),
                None => io,
            };
            if let Some(pause) = slow_free_from_env()? {
                io.objects().set_slow_free(pause);
            }
            Some(Arc::new(io.named(format!("io server {}", plan.id))))
        } else {
            None
        };
        let cache = if plan.roles.contains(&Role::Cache) {
            Some(open_cache(plan, io.as_ref(), incarnation)?)
        } else {
            None
        };
        let mut owner = None;
        let mut munge = None;
        let mut issuer = None;
        let mut security = None;
        let restarter: Arc<std::sync::OnceLock<weft_rpc::Restarter>> = Arc::default();
        let meta = if plan.roles.contains(&Role::Meta) {
            let config = plan
                .cluster
                .as_ref()
                .context("the meta role needs the cluster description")?;
            if config.identity == weft_config::IdentityMode::Owner {
                owner = Some(crate::identity::key_owner(&plan.key_path)?);
            }
            security = Some(security_info(plan, config, owner.as_ref()));
            if config.identity == weft_config::IdentityMode::Munge {
                let socket = config.munge_socket.clone().or_else(weft_rpc::munge_socket);
                munge = Some(crate::identity::Munge::new(
                    socket,
                    config.munge_trusted_uids.clone(),
                ));
            }
            let db = plan.data_dir.join("meta.redb");
            let fresh = !db.exists();
            // The file system's root belongs to whoever created it.
            let owner = unsafe { (libc::geteuid(), libc::getegid()) };
            let store = MetaStore::open(&db, owner)
                .map_err(|e| anyhow::anyhow!("opening metadata database {}: {e}", db.display()))?;
            let as_seen = |s: &weft_config::ServerEntry| IoServer {
                id: s.server_id(),
                addr: s.addr.clone(),
                socket: s.socket.as_ref().map(|p| p.display().to_string()),
            };
            let io_servers: Vec<IoServer> = config.io_servers().map(as_seen).collect();
            let cache = CacheTier {
                managers: config.cache_managers().into_iter().map(as_seen).collect(),
                mapping: config.cache_mapping().map_err(|e| anyhow::anyhow!("{e}"))?,
                block_size_bytes: config.cache.block_size,
            };
            // Io servers added while an earlier run served (`weft server add`).
            let mut io_servers = io_servers;
            let described: Vec<(ServerId, String)> = config
                .servers
                .iter()
                .map(|s| (s.server_id(), s.addr.clone()))
                .collect();
            let added = store
                .added_io_servers()
                .map_err(|e| anyhow::anyhow!("reading the record of added io servers: {e}"))?;
            weft_meta::service::merge_added(&mut io_servers, &described, added)
                .map_err(anyhow::Error::msg)?;
            let objects = Arc::new(crate::objects::NetObjectServers {
                pool: server_pool("weftd meta", plan),
                auth: ClientAuth::cluster(plan.key.clone()),
                incarnation_failed: Default::default(),
                addrs: Arc::new(std::sync::RwLock::new(
                    io_servers
                        .iter()
                        .chain(&cache.managers)
                        .map(|s| (s.id, s.addr.clone()))
                        .collect(),
                )),
            });
            let object_addrs = objects.addrs.clone();
            let cluster = ClusterInfo {
                cache,
                name: config.name.clone(),
                io_servers,
                default_layout: config.default_layout(),
                root: InodeId::ROOT,
            };
            let mut service =
                MetaService::new(store, cluster, objects).map_err(|e| anyhow::anyhow!("{e}"))?;
            service.set_reserved(described);
            if let Some(lease) = session_lease_for_tests() {
                service.set_session_lease(lease);
            }
            let service = Arc::new(service);
            if plan.capabilities {
                let addrs = object_addrs;
                let started = Arc::new(crate::capability::Issuer::start(
                    plan.capability_key.clone(),
                    config
                        .capability_lifetime_ms
                        .unwrap_or(weft_rpc::capability::LIFETIME_DEFAULT_MS),
                    Arc::new(server_pool("weftd meta", plan)),
                    addrs,
                ));
                service.set_capability_issuer(started.clone());
                if fresh {
                    service.fresh_start();
                }
                issuer = Some(started);
            }
            service.set_incarnation(incarnation);
            // After a clean stop with no lock held there is nothing to reclaim.
            let grace = if crate::stop::take_no_locks(&plan.data_dir) {
                Duration::ZERO
            } else {
                config
                    .lock_grace_ms
                    .map_or(weft_proto::LOCK_GRACE_DEFAULT, Duration::from_millis)
            };
            service.set_lock_grace(grace);
            if let Some(grace) = service.lock_grace_left() {
                let until = match service.lock_grace_waiting_for() {
                    Some(n) => {
                        format!(", or until the {n} mounts recorded as holding locks have reclaimed them")
                    }
                    None => String::new(),
                };
                eprintln!(
                    "weftd meta: granting only reclaims of mounts' file locks for the next {} ms{until} (the grace after a restart; --lock-grace-ms)",
                    grace.as_millis()
                );
            }
            // The purger runs for the life of the process.
            if let Some(batch) = config.precreate {
                service.set_precreate_batch(batch as usize);
            }
            std::mem::forget(service.spawn_purger(PURGE_PERIOD));
            // So does the measurer of quiet files' sizes (stats without the io servers).
            std::mem::forget(service.spawn_measurer());
            let interval = config
                .commit_interval_ms
                .map_or(weft_proto::COMMIT_INTERVAL_DEFAULT, Duration::from_millis);
            if !interval.is_zero() {
                eprintln!(
                    "weftd meta: acknowledging metadata operations once applied, committed durably every {} ms and at every fsync (--commit-interval-ms)",
                    interval.as_millis()
                );
            }
            // With an interval, acknowledged operations may have been lost with the last
            // process: clients replay them in a window (weft-meta `replay.rs`). Not after
            // a clean stop, which made everything it answered durable first.
            let window = std::env::var("WEFT_REPLAY_WINDOW_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .or(config.replay_window_ms)
                .map_or(weft_meta::replay::WINDOW_DEFAULT, Duration::from_millis);
            // A disk error that loses acknowledged operations later in this process
            // acts as a restart toward clients (a new incarnation), so that they replay
            // them. Not with a cache role here: its requests carry the incarnation.
            if plan.roles.contains(&Role::Cache) {
                eprintln!(
                    "weftd meta: with a cache role in the same process, a disk error that loses acknowledged operations is not announced to clients (no replay)"
                );
            } else {
                let (handing, closing) = (restarter.clone(), restarter.clone());
                service.restart_on_loss(
                    window,
                    weft_rpc::new_incarnation,
                    weft_rpc::serving_incarnation,
                    Arc::new(move |incarnation| match handing.get() {
                        Some(restarter) => restarter.hand_out(incarnation),
                        None => eprintln!("weftd meta: not serving yet: no connection to close"),
                    }),
                    Arc::new(move || {
                        if let Some(restarter) = closing.get() {
                            restarter.close_all();
                        }
                    }),
                );
            }
            let lost_nothing = crate::stop::take_all_durable(&plan.data_dir);
            service
                .start_replay((!interval.is_zero() && !lost_nothing).then_some(window))
                .map_err(|e| anyhow::anyhow!("reading the record of tracked requests: {e}"))?;
            std::mem::forget(service.spawn_committer(interval));
            service.spawn_refiller();
            Some(service)
        } else {
            None
        };
        let name = format!("server {}", plan.id);
        let gate = (io.is_some() || cache.is_some()).then(|| match (&plan.meta, plan.acts_for_user) {
            // A job's delegate holds no capability key: the manager verifies for it.
            (Some(meta), true) if plan.capabilities => weft_rpc::Gate::remote(
                Arc::new(ManagerVerifier {
                    pool: ConnectionPool::new(
                        "weftd delegate",
                        ClientAuth::cluster(plan.key.clone()),
                        Timeouts::from_env(),
                    ),
                    meta: meta.clone(),
                }),
                name,
            ),
            _ => weft_rpc::Gate::new(plan.capabilities.then(|| plan.capability_key.clone()), name),
        });
        Ok(Roles {
            meta,
            issuer,
            owner,
            munge,
            connections: Default::default(),
            io,
            cache,
            gate,
            restarter,
            security,
        })
    }

    /// Lets the meta role act as a restarted server (see `restart_on_loss`).
    pub fn set_restarter(&self, restarter: weft_rpc::Restarter) {
        let _ = self.restarter.set(restarter);
    }

    /// The metadata manager, with the meta role.
    pub fn meta_service(&self) -> Option<Arc<MetaService>> {
        self.meta.clone()
    }

    /// The credential every metadata request acts with, in `owner` mode.
    pub fn owner(&self) -> Option<&weft_proto::Cred> {
        self.owner.as_ref()
    }

    /// Whether this server is a metadata manager in `munge` mode.
    pub fn munge(&self) -> bool {
        self.munge.is_some()
    }

    /// In `munge` mode, who `request` comes from on `connection`: the user its MUNGE
    /// credential vouches for, whose credential replaces the claimed one (a trusted uid
    /// keeps what it claims and is a trusted caller). The credential is decoded at the
    /// connection's first request that is not the connection's own plumbing (the
    /// cluster's description, its session's renewals and handle releases, commits,
    /// metrics: `plumbing`), which acts as a trusted caller as in the other modes. Every
    /// other request is the verified user's, credential or not (a backup, the check's
    /// scans, and whatever request is added later: refused unless its handler lets a
    /// user in).
    /// Whether `connection`'s requests need no MUNGE verification first (none is asked
    /// for, or it was done): `munge_identity` then waits for nothing.
    fn verified(&self, connection: ConnectionId) -> bool {
        self.munge.is_none()
            || self
                .connections
                .lock()
                .unwrap()
                .get(&connection)
                .is_some_and(|state| state.verified.get().is_some())
    }

    fn munge_identity(&self, connection: ConnectionId, request: &mut Request) -> Result<Caller, WireError> {
        let Some(munge) = &self.munge else {
            return Ok(Caller::Trusted);
        };
        if plumbing(request) {
            return Ok(Caller::Trusted);
        }
        let state = self.connections.lock().unwrap().get(&connection).cloned();
        let Some(state) = state else {
            return Err(WireError::new(
                ErrorCode::PermissionDenied,
                crate::identity::MUNGE_REQUIRED,
            ));
        };
        let verified = state.verified.get_or_init(|| match &state.identity {
            weft_proto::handshake::Identity::Munge(credential) => {
                crate::identity::same_user(munge.verify(credential), state.socket_uid)
            }
            _ => crate::identity::Verified::Refused(crate::identity::MUNGE_REQUIRED.into()),
        });
        match verified {
            crate::identity::Verified::As(cred) => {
                if let Some(claimed) = request.cred_mut() {
                    claimed.clone_from(cred);
                }
                Ok(Caller::User(cred.clone()))
            }
            crate::identity::Verified::Trusted => Ok(Caller::Trusted),
            crate::identity::Verified::Refused(reason) => {
                Err(WireError::new(ErrorCode::PermissionDenied, reason.clone()))
            }
        }
    }

    /// Writes every dirty block of the cache role back to the io servers (nothing to
    /// do without one).
    /// The metadata role's part of a clean stop: no lock granted from here, and with
    /// none held, a record in `data_dir` that spares the next start its grace.
    pub fn stop_locks(&self, data_dir: &std::path::Path) {
        let Some(meta) = &self.meta else { return };
        // From here every operation is durable before it is answered, so that after
        // this commit nothing acknowledged can be lost with the process.
        match meta.store().commit_final() {
            Ok(()) => {
                if let Err(e) = crate::stop::record_all_durable(data_dir) {
                    eprintln!("weftd meta: recording a stop with every operation durable: {e} (the next start waits for replays)");
                }
            }
            Err(e) => eprintln!("weftd meta: committing the metadata store at the stop: {e}"),
        }
        match meta.stop_locks() {
            0 => {
                if let Err(e) = crate::stop::record_no_locks(data_dir) {
                    eprintln!("weftd meta: recording a stop with no lock held: {e} (the next start gives a grace)");
                }
            }
            held => eprintln!(
                "weftd meta: {held} file locks held at this stop; the next start gives their mounts a grace to reclaim them"
            ),
        }
    }

    pub fn write_back_all(&self) -> Result<()> {
        if let Some(cache) = &self.cache {
            cache
                .write_back_all()
                .map_err(|e| anyhow::anyhow!("writing dirty blocks back: {}", e.message))?;
        }
        Ok(())
    }

    /// The role that serves `request` (as `handle` dispatches it), for the metrics.
    pub fn role_of(&self, request: &Request) -> weft_metrics::RoleKind {
        if self.cache.as_ref().is_some_and(|c| c.serves(request)) {
            weft_metrics::RoleKind::Cache
        } else if is_io_request(request) {
            weft_metrics::RoleKind::Io
        } else {
            weft_metrics::RoleKind::Meta
        }
    }

    /// The cache role's counters, if this server has one.
    pub fn cache_stats(&self) -> Option<weft_proto::msg::CacheStats> {
        self.cache.as_ref().map(|c| c.stats())
    }

    /// The metadata role's group commits so far: (commits, operations in them), if this
    /// server has one.
    pub fn group_commits(&self) -> Option<(u64, u64)> {
        self.meta.as_ref().map(|m| m.store().group_commits())
    }

    /// Where the metadata store's commits stand (none without the meta role).
    pub fn commit_state(&self) -> Option<weft_meta::store::CommitState> {
        self.meta.as_ref().map(|m| m.store().commit_state())
    }

    /// The io role's extent-lock counts, if this server has one.
    pub fn lock_stats(&self) -> Option<weft_proto::msg::LockStats> {
        self.io.as_ref().map(|io| io.lock_stats())
    }

    pub fn role_bits(&self) -> u32 {
        let mut bits = 0;
        if self.meta.is_some() {
            bits |= roles::META;
        }
        if self.io.is_some() {
            bits |= roles::IO;
        }
        if self.cache.is_some() {
            bits |= roles::CACHE;
        }
        bits
    }
}

/// The cache role: memory and policy from `weftd`'s flags, else the description's
/// `[cache]` section, else the defaults; the io servers from the description; this
/// process's io role, if any, reached directly.
fn open_cache(plan: &Plan, io: Option<&Arc<IoService>>, incarnation: u64) -> Result<CacheService> {
    let settings = plan.cluster.as_ref().map(|c| c.cache.clone()).unwrap_or_default();
    let capacity = plan
        .cache_memory
        .or(settings.memory)
        .unwrap_or(weft_config::CACHE_MEMORY_BYTES_DEFAULT);
    if !(weft_config::CACHE_MEMORY_BYTES_MIN..=weft_cm::CACHE_MEMORY_BYTES_MAX).contains(&capacity) {
        anyhow::bail!(
            "cache memory {capacity} bytes is outside {}..={} bytes",
            weft_config::CACHE_MEMORY_BYTES_MIN,
            weft_cm::CACHE_MEMORY_BYTES_MAX
        );
    }
    let policy_name = plan
        .cache_policy
        .clone()
        .or_else(|| settings.policy.clone())
        .unwrap_or_else(|| "arc".into());
    let policy: PolicyKind = policy_name.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    let directory = io_directory(plan)?;
    let pool = match (&plan.meta, plan.acts_for_user) {
        (Some(meta), true) => user_pool(meta, plan),
        _ => server_pool("weftd cache", plan),
    };
    let backing = Backing::new(io.map(|io| (plan.id, io.clone())), pool, directory);
    let mut cache_config = CacheConfig::new(capacity, policy);
    cache_config.cio_unrequested = match plan.cache_cio_unrequested.as_str() {
        "cold" => Some(weft_cache::Admission::Cold),
        "none" => None,
        other => anyhow::bail!("--cache-cio-unrequested {other:?}: expected cold or none"),
    };
    cache_config.prefer_full_dirty = plan.delegate || settings.mapping.as_deref() == Some("aligned");
    cache_config.cio_record = cio_record_from_env(plan.id)?;
    Ok(CacheService::new(
        cache_config,
        backing,
        io.map(|io| io.views()),
        incarnation,
    ))
}

/// The test hook `WEFT_CIO_RECORD=<directory>`: the cache role records every
/// collective-I/O-aware reference it applies, in order, in `<directory>/cio-<server
/// id>.txt` (weft-cm's `cio::Record`, at most 2^20 lines), for a test to compare with
/// the trace the simulator replays. Unset or empty: nothing. Not a directory: weftd
/// refuses to start.
fn cio_record_from_env(id: impl std::fmt::Display) -> Result<Option<std::path::PathBuf>> {
    const NAME: &str = "WEFT_CIO_RECORD";
    let Some(dir) = std::env::var_os(NAME).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let dir = std::path::PathBuf::from(dir);
    anyhow::ensure!(dir.is_dir(), "{NAME}={}: not a directory", dir.display());
    Ok(Some(dir.join(format!("cio-{id}.txt"))))
}

/// The test hook `WEFT_FAULT_STALL_WRITE=<offset>:<ms>`: the io role's first write
/// whose first range starts at file offset `offset` sleeps `ms` milliseconds (1 to
/// 600000) after it began, before it writes (`IoService::stall_write_once`), so that
/// tests can have a write begun and stuck. Unset: nothing. Set badly: weftd refuses to
/// start, rather than run without the stall a test counts on.
fn write_stall_from_env() -> Result<Option<(u64, std::time::Duration)>> {
    const NAME: &str = "WEFT_FAULT_STALL_WRITE";
    let Some(value) = std::env::var_os(NAME) else {
        return Ok(None);
    };
    let value = value.to_string_lossy();
    let parsed = value.split_once(':').and_then(|(offset, ms)| {
        let offset = offset.trim().parse::<u64>().ok()?;
        let ms = ms.trim().parse::<u64>().ok()?;
        let max = weft_iod::WRITE_STALL_MAX.as_millis() as u64;
        (1..=max).contains(&ms).then_some((offset, ms))
    });
    match parsed {
        Some((offset, ms)) => {
            eprintln!("weftd: test hook {NAME}: the first write at offset {offset} stalls {ms} ms");
            Ok(Some((offset, std::time::Duration::from_millis(ms))))
        }
        None => anyhow::bail!(
            "{NAME}={value:?}: expected <offset>:<ms>, a file offset and 1 to {} milliseconds (a test hook; unset it)",
            weft_iod::WRITE_STALL_MAX.as_millis()
        ),
    }
}

/// The test hook `WEFT_FAULT_SLOW_FREE_MS=<ms>`: the io role takes `ms` milliseconds
/// (1 to 600000) longer to free the blocks of any object holding at least
/// `weft_iod::REAP_MIN_BYTES` (`ObjectStore::set_slow_free`), as a synchronous discard
/// of gigabytes does on ext4 mounted with `discard`. Unset: nothing. Set badly: weftd
/// refuses to start.
fn slow_free_from_env() -> Result<Option<std::time::Duration>> {
    const NAME: &str = "WEFT_FAULT_SLOW_FREE_MS";
    let Some(value) = std::env::var_os(NAME) else {
        return Ok(None);
    };
    let value = value.to_string_lossy();
    let max = weft_iod::SLOW_FREE_MAX.as_millis() as u64;
    match value.trim().parse::<u64>() {
        Ok(ms) if (1..=max).contains(&ms) => {
            eprintln!("weftd: test hook {NAME}: freeing a big object's blocks takes {ms} ms longer");
            Ok(Some(std::time::Duration::from_millis(ms)))
        }
        _ => anyhow::bail!("{NAME}={value:?}: expected 1 to {max} milliseconds (a test hook; unset it)"),
    }
}

/// Where the cache role finds io servers' addresses: the cluster description it was
/// given (read when first needed, once it exists: an MPI launch writes it last), else
/// the metadata manager's `GetCluster`. An io server it does not know (one added by
/// `weft server add` since) makes it look again, at most once per `DIRECTORY_REFRESH`:
/// the manager first (it knows added servers), the description file second.
fn io_directory(plan: &Plan) -> Result<weft_cm::Directory> {
    let meta = plan
        .meta
        .clone()
        .or_else(|| plan.cluster.as_ref().map(|c| c.meta().addr.clone()));
    if meta.is_none() && plan.cluster.is_none() && plan.cluster_file.is_none() {
        anyhow::bail!(
            "the cache role needs the cluster description or the metadata manager's address (to reach the io servers)"
        );
    }
    let first: HashMap<ServerId, String> = plan
        .cluster
        .as_ref()
        .map(|c| c.io_servers().map(|s| (s.server_id(), s.addr.clone())).collect())
        .unwrap_or_default();
    let file = plan.cluster_file.clone();
    let pool = ConnectionPool::new(
        "weftd cache",
        ClientAuth::cluster(plan.key.clone()),
        Timeouts::from_env(),
    );
    let fetch = move || -> Option<HashMap<ServerId, String>> {
        let from_file = file
            .as_ref()
            .and_then(|path| weft_config::ClusterConfig::load(path).ok());
        let manager = meta
            .clone()
            .or_else(|| from_file.as_ref().map(|c| c.meta().addr.clone()));
        if let Some(manager) = manager {
            match pool.call(&manager, &Request::GetCluster, &[]) {
                Ok((Response::Cluster(info), _)) => {
                    return Some(info.io_servers.iter().map(|s| (s.id, s.addr.clone())).collect())
                }
                Ok(_) => eprintln!("weftd: cache: {manager} answered GetCluster with something else"),
                Err(e) => eprintln!("weftd: cache: asking {manager} for the io servers: {e}"),
            }
        }
        from_file.map(|c| c.io_servers().map(|s| (s.server_id(), s.addr.clone())).collect())
    };
    Ok(refreshing_directory(first, DIRECTORY_REFRESH, Box::new(fetch)))
}

/// Least time between two looks of the cache role for io servers it does not know.
const DIRECTORY_REFRESH: std::time::Duration = std::time::Duration::from_millis(200);

/// A directory answering from `known`, looking again with `fetch` when asked for a
/// server it does not list (at most once per `every`: a look within `every` of the
/// last waits until then).
#[allow(clippy::type_complexity)]
fn refreshing_directory(
    known: HashMap<ServerId, String>,
    every: std::time::Duration,
    fetch: Box<dyn Fn() -> Option<HashMap<ServerId, String>> + Send + Sync>,
) -> weft_cm::Directory {
    let known = std::sync::RwLock::new(known);
    let looked = Mutex::new(None::<std::time::Instant>);
    Box::new(move |server: ServerId| {
        if let Some(addr) = known.read().unwrap_or_else(|p| p.into_inner()).get(&server) {
            return Some(addr.clone());
        }
        {
            // A look just made may have missed a server added since: the next one
            // waits out the interval rather than answering "unknown" meanwhile.
            let mut looked = looked.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(at) = *looked {
                std::thread::sleep(every.saturating_sub(at.elapsed()));
                if let Some(addr) = known.read().unwrap_or_else(|p| p.into_inner()).get(&server) {
                    return Some(addr.clone());
                }
            }
            *looked = Some(std::time::Instant::now());
            if let Some(fresh) = fetch() {
                *known.write().unwrap_or_else(|p| p.into_inner()) = fresh;
            }
        }
        known
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&server)
            .cloned()
    })
}

/// A pool for a server's own calls to io servers and cache managers: its data
/// requests present the server's own capability.
fn server_pool(name: &str, plan: &Plan) -> ConnectionPool {
    let pool = ConnectionPool::new(name, ClientAuth::cluster(plan.key.clone()), Timeouts::from_env());
    pool.set_capability_source(Arc::new(weft_rpc::ServerCapabilities::new(
        plan.capability_key.clone(),
    )));
    pool
}

/// How a job's delegate has capabilities verified: by the metadata manager, which
/// holds the key (`VerifyCapability`), over the delegate's own connection to it.
struct ManagerVerifier {
    pool: ConnectionPool,
    meta: String,
}

impl weft_rpc::CapabilityVerifier for ManagerVerifier {
    fn verify(&self, cap: &weft_proto::Capability) -> Result<(), WireError> {
        match self
            .pool
            .call(&self.meta, &Request::VerifyCapability { cap: cap.clone() }, &[])
        {
            Ok((Response::Done, _)) => Ok(()),
            Ok((other, _)) => Err(WireError::new(
                ErrorCode::Io,
                format!(
                    "the metadata manager {} answered a capability check with {other:?}",
                    self.meta
                ),
            )),
            Err(weft_rpc::RpcError::Remote { error, .. }) => Err(error),
            Err(e) => Err(WireError::new(
                ErrorCode::Unavailable,
                format!(
                    "asking the metadata manager {} to verify a capability: {e}",
                    self.meta
                ),
            )),
        }
    }
}

/// A job's delegate's pool: its writes back present capabilities the manager grants
/// the user the delegate runs as (it holds no servers' key).
fn user_pool(meta: &str, plan: &Plan) -> ConnectionPool {
    let new_pool = || {
        ConnectionPool::new(
            "weftd delegate",
            ClientAuth::cluster(plan.key.clone()),
            Timeouts::from_env(),
        )
    };
    let pool = new_pool();
    // SAFETY: no preconditions; getgroups writes at most `n` entries.
    let cred = unsafe {
        let mut groups = vec![0 as libc::gid_t; 64];
        let n = libc::getgroups(groups.len() as i32, groups.as_mut_ptr());
        groups.truncate(n.max(0) as usize);
        weft_proto::Cred {
            uid: libc::geteuid(),
            gid: libc::getegid(),
            groups,
        }
    };
    pool.set_capability_source(Arc::new(weft_rpc::capability::ManagerGrants::with_own_pool(
        new_pool(),
        meta,
        cred,
    )));
    pool
}

fn is_io_request(request: &Request) -> bool {
    use weft_proto::Opcode::*;
    match request.opcode() {
        AppendLock | AppendUnlock | ObjStat | ObjStamp | ObjTimes | Allocate | ObjPrecreate | ExtentLock
        | ExtentUnlock | LockStats | RebuildStamp | RebuildWrite | MigrateObject | ObjList => true,
        Revalidate | Release | RenewSession | FileLock | FileLockTest | FileLockReclaim | LockSession
        | LockReclaimComplete | LockSessionEnd | Link | Mknod | SetXattr | GetXattr | ListXattr
        | RemoveXattr => false,
        other => (40..60).contains(&(other as u16)),
    }
}

impl Handler for Roles {
    fn handle(
        &self,
        connection: ConnectionId,
        request: Request,
        data: Vec<u8>,
    ) -> Result<(Response, Vec<u8>), WireError> {
        if let Some(gate) = &self.gate {
            match &request {
                Request::PresentCapability { cap, reset } => {
                    gate.present(connection, cap, *reset)?;
                    return Ok((Response::Done, Vec::new()));
                }
                Request::RevokeCapabilities { inodes, at_ms } => {
                    gate.check(connection, &request)?;
                    gate.revoke(inodes, *at_ms);
                    return Ok((Response::Done, Vec::new()));
                }
                _ => gate.check(connection, &request)?,
            }
        }
        if let (Request::SecurityInfo, Some(security)) = (&request, &self.security) {
            return Ok((security.clone(), Vec::new()));
        }
        if let Request::VerifyCapability { cap } = &request {
            return match (&self.meta, &self.issuer) {
                (Some(_), Some(issuer)) => issuer.verify(cap).map(|()| (Response::Done, Vec::new())),
                (Some(_), None) => Err(WireError::new(
                    ErrorCode::Unsupported,
                    "this cluster's io servers ask for no capabilities",
                )),
                (None, _) => Err(WireError::new(
                    ErrorCode::Unsupported,
                    "this server has no meta role; ask the metadata manager",
                )),
            };
        }
        if let Some(cache) = self.cache.as_ref().filter(|c| c.serves(&request)) {
            return cache.handle(connection, request, data);
        }
        match (is_io_request(&request), &self.meta, &self.io) {
            (true, _, Some(io)) => io.handle(connection, request, data),
            (false, Some(meta), _) => {
                let mut request = request;
                if let (Some(owner), Some(claimed)) = (&self.owner, request.cred_mut()) {
                    claimed.clone_from(owner);
                }
                let caller = self.munge_identity(connection, &mut request)?;
                meta.handle_as(&caller, request).map(|r| (r, Vec::new()))
            }
            (true, _, None) => Err(WireError::new(
                ErrorCode::Unsupported,
                "this server has no io role",
            )),
            (false, None, _) => Err(WireError::new(
                ErrorCode::Unsupported,
                "this server has no meta role; ask the metadata manager",
            )),
        }
    }

    fn handle_borrowed(
        &self,
        connection: ConnectionId,
        request: Request,
        data: &[u8],
    ) -> Result<(Response, Vec<u8>), WireError> {
        let cached = self.cache.as_ref().is_some_and(|c| c.serves(&request));
        if let (Some(cache), true, Request::ViaCache { .. }) = (&self.cache, cached, &request) {
            // A write through the cache copies its bytes from the segment into the
            // blocks; the same capability gate as `handle`'s.
            if let Some(gate) = &self.gate {
                gate.check(connection, &request)?;
            }
            return cache.handle_borrowed(connection, request, data);
        }
        match &self.io {
            Some(io) if !cached && is_io_request(&request) => {
                // The shared-memory path: the same capability gate as `handle`.
                if let Some(gate) = &self.gate {
                    gate.check(connection, &request)?;
                }
                io.handle_borrowed(connection, request, data)
            }
            _ => self.handle(connection, request, data.to_vec()),
        }
    }

    /// Small plain reads and writes of the io role (its `runs_inline`), also inside a
    /// shared-memory call, and the meta role's reads of what it holds
    /// (`MetaService::runs_inline`); never what the cache role serves (it may call
    /// other servers).
    fn runs_inline(&self, request: &Request) -> bool {
        // Applied in the order the connection sent it: the request a client sends right
        // behind it without waiting (its first data request of the file) finds it.
        if let (Request::PresentCapability { .. }, Some(gate)) = (request, &self.gate) {
            return gate.verifies_locally();
        }
        let inner = match request {
            Request::ShmCall { request, .. } | Request::ShmScatter { request, .. } => request,
            other => other,
        };
        if self.cache.as_ref().is_some_and(|c| c.serves(inner)) {
            return false;
        }
        match (is_io_request(inner), &self.io, &self.meta) {
            (true, Some(io), _) => io.runs_inline(inner),
            (false, _, Some(_)) => std::ptr::eq(inner, request) && MetaService::runs_inline(inner),
            _ => false,
        }
    }

    /// The io role's small reads and writes, after the same capability check as
    /// `handle`'s. A meta request is left to the loop's usual path (`handle`, on the
    /// loop) unless it would wait there: for the replay window after a restart, or for
    /// MUNGE to verify the connection's credential (its first request).
    fn try_inline(&self, connection: ConnectionId, request: &Request, data: &[u8]) -> weft_rpc::Inline {
        if let (Request::PresentCapability { cap, reset }, Some(gate)) = (request, &self.gate) {
            return weft_rpc::Inline::Done(
                gate.present(connection, cap, *reset)
                    .map(|()| (Response::Done, Vec::new())),
            );
        }
        if self.cache.as_ref().is_some_and(|c| c.serves(request)) {
            return weft_rpc::Inline::NotTried;
        }
        match (is_io_request(request), &self.io, &self.meta) {
            (true, Some(io), _) => {
                if let Some(gate) = &self.gate {
                    if let Err(e) = gate.check(connection, request) {
                        return weft_rpc::Inline::Done(Err(e));
                    }
                }
                io.try_inline(connection, request, data)
            }
            (false, _, Some(meta)) => {
                if meta.serves_at_once() && self.verified(connection) {
                    weft_rpc::Inline::NotTried
                } else {
                    weft_rpc::Inline::WouldBlock
                }
            }
            _ => weft_rpc::Inline::NotTried,
        }
    }

    /// What a request of the io role changes (never one the cache role serves).
    fn changes(&self, connection: ConnectionId, request: &Request) -> Option<weft_rpc::Changes> {
        let cached = self.cache.as_ref().is_some_and(|c| c.serves(request));
        match &self.io {
            Some(io) if !cached && is_io_request(request) => io.changes(connection, request),
            _ => None,
        }
    }

    fn reply_bytes_hint(&self, request: &Request) -> u64 {
        if let Some(cache) = self.cache.as_ref().filter(|c| c.serves(request)) {
            return cache.reply_bytes_hint(request);
        }
        self.io.as_ref().map_or(0, |io| io.reply_bytes_hint(request))
    }

    /// A read through the cache from a colocated client: the cache role writes its
    /// reply from the blocks straight into the client's shared region, after the same
    /// capability gate as `handle`'s.
    fn reply_into(
        &self,
        connection: ConnectionId,
        request: &Request,
        region: &weft_rpc::shm::Region,
    ) -> Option<Result<(Response, weft_rpc::ReplyInto), WireError>> {
        let cache = self.cache.as_ref().filter(|c| c.serves(request))?;
        if let Some(gate) = &self.gate {
            if let Err(e) = gate.check(connection, request) {
                return Some(Err(e));
            }
        }
        cache.reply_into(connection, request, region)
    }

    fn reply_from_file(
        &self,
        connection: ConnectionId,
        request: &Request,
    ) -> Option<Result<(Response, weft_rpc::FileReply), WireError>> {
        let io = self.io.as_ref()?;
        if let (Some(gate), Request::Read { .. }) = (&self.gate, request) {
            if let Err(e) = gate.check(connection, request) {
                return Some(Err(e));
            }
        }
        io.reply_from_file(connection, request)
    }

    fn connection_opened(&self, connection: ConnectionId, peer: &weft_rpc::Peer) {
        if self.munge.is_some() {
            self.connections.lock().unwrap().insert(
                connection,
                Arc::new(MungeConnection {
                    identity: peer.identity.clone(),
                    socket_uid: peer.uid,
                    verified: Default::default(),
                }),
            );
        }
    }

    fn connection_closed(&self, connection: ConnectionId) {
        self.connections.lock().unwrap().remove(&connection);
        if let Some(gate) = &self.gate {
            gate.connection_closed(connection);
        }
        if let Some(io) = &self.io {
            io.connection_closed(connection);
        }
        if let Some(cache) = &self.cache {
            cache.connection_closed(connection);
        }
    }
}

/// A connection of a manager in `munge` mode.
struct MungeConnection {
    identity: weft_proto::handshake::Identity,
    /// On the Unix socket, the connecting process's user as the kernel tells it.
    socket_uid: Option<u32>,
    verified: std::sync::OnceLock<crate::identity::Verified>,
}

/// The requests that name no user's file and act for the connection itself, so need no
/// verified identity in `munge` mode: the cluster's description, the connection's
/// sessions (their ids are the connection's secret), commits of metadata, the end of a
/// client's replay, a capability's verification and metrics.
fn plumbing(request: &Request) -> bool {
    matches!(
        request,
        Request::GetCluster
            | Request::RenewSession { .. }
            | Request::Release { .. }
            | Request::LockSession { .. }
            | Request::LockReclaimComplete { .. }
            | Request::LockSessionEnd { .. }
            | Request::CommitMetadata { .. }
            | Request::ReplayDone { .. }
            | Request::VerifyCapability { .. }
            | Request::Metrics { .. }
            | Request::Hello { .. }
            | Request::Authenticate { .. }
            | Request::ServerInfo
            | Request::SecurityInfo
    )
}

/// The manager's answer to `SecurityInfo` (`weft status` without the description).
fn security_info(
    plan: &Plan,
    config: &weft_config::ClusterConfig,
    owner: Option<&weft_proto::Cred>,
) -> Response {
    use weft_proto::msg::identity_mode;
    Response::Security {
        capabilities: plan.capabilities,
        capability_lifetime_ms: config
            .capability_lifetime_ms
            .unwrap_or(weft_rpc::capability::LIFETIME_DEFAULT_MS),
        servers_only_key: config.capability_key_file.is_some(),
        identity: match config.identity {
            weft_config::IdentityMode::Owner => identity_mode::OWNER,
            weft_config::IdentityMode::Claimed => identity_mode::CLAIMED,
            weft_config::IdentityMode::Munge => identity_mode::MUNGE,
        },
        owner_uid: owner.map_or(0, |c| c.uid),
        trusted_uids: config.munge_trusted_uids.iter().copied().take(1024).collect(),
    }
}

#[cfg(test)]
mod directory_tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn an_unknown_server_makes_the_directory_look_again_at_most_once_per_interval() {
        let looks = Arc::new(AtomicUsize::new(0));
        let counted = looks.clone();
        let directory = refreshing_directory(
            HashMap::from([(ServerId(1), "a:1".to_string())]),
            std::time::Duration::from_millis(200),
            Box::new(move || {
                let n = counted.fetch_add(1, Ordering::SeqCst);
                // The second look finds the added server.
                Some(if n == 0 {
                    HashMap::from([(ServerId(1), "a:1".to_string())])
                } else {
                    HashMap::from([(ServerId(1), "a:1".to_string()), (ServerId(2), "b:2".to_string())])
                })
            }),
        );
        assert_eq!(directory(ServerId(1)).as_deref(), Some("a:1"));
        assert_eq!(looks.load(Ordering::SeqCst), 0, "a known server needs no look");
        // The first look misses server 2; the second, an interval later, finds it.
        let started = std::time::Instant::now();
        assert_eq!(directory(ServerId(2)), None);
        assert_eq!(looks.load(Ordering::SeqCst), 1);
        assert_eq!(directory(ServerId(2)).as_deref(), Some("b:2"));
        assert_eq!(looks.load(Ordering::SeqCst), 2);
        assert!(
            started.elapsed() >= std::time::Duration::from_millis(200),
            "looked again within the interval"
        );
        assert_eq!(directory(ServerId(2)).as_deref(), Some("b:2"));
        assert_eq!(looks.load(Ordering::SeqCst), 2);
    }
}
