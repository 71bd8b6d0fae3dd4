//! The cluster description (`cluster.toml`): which servers exist, their roles,
//! addresses and data directories, and the default layout; and how a client finds the
//! cluster ($WEFT_META, else $WEFT_HOME/cluster.toml, else ~/.weft/cluster.toml) and
//! its key ($WEFT_KEY, else the key file beside that cluster.toml).
//!
//! Example:
//! ```toml
//! name = "weft"
//! stripe_size = 65536     # bytes; default layout for new files
//! stripe_count = 0        # 0 = all io servers
//! # redundancy = "replicas=2"   # copies of new files' data (default "plain")
//!
//! [[server]]
//! id = 0
//! roles = ["meta"]
//! addr = "node0:7400"
//! data_dir = "/var/lib/weft/meta"
//!
//! [[server]]
//! id = 1
//! roles = ["io", "cache"]   # an io server with a colocated cache manager
//! addr = "node1:7400"
//!
//! # key_file = "/etc/weft/cluster.key"   # default: cluster.key beside this file
//!
//! [cache]                   # optional: the cache tier's settings
//! default = "cached"        # caching mode of new files: none, cached, delegated
//! memory = 1073741824       # bytes of file data each cache manager holds at most
//! ```
//!
//! # Code map
//!
//! The cluster description (`cluster.toml`): servers, roles, addresses, data
//! directories, default layout, the cache tier's `[cache]` section (default caching
//! mode of new files, mapping, block size, memory and policy of each manager; the
//! mapping defaults to aligned when every io server carries the cache role, else hashed);
//! validation; `key_file` and `key_path` (the key beside the description by default);
//! `metrics_addr` per server (its metrics endpoint, none by default);
//! how clients find the cluster and its key (`client_key_path`: `$WEFT_KEY`, else beside
//! the home's cluster.toml, else an error naming WEFT_KEY); `is_loopback_address` and
//! `network_addresses` (a description with any is a multi-host cluster); `parse_size`
//! for every size users type. `netemu.rs`: `RATE[,LATENCY]` parsed, and the emulated
//! network's record in a home (`netemu.toml`: cluster id, subnet, rate, latency asked and
//! whether applied, io servers), read by weft-cli and weft-bench. `tie.rs`: `HomeTie`,
//! a home's servers tied to one process's life (a pipe whose only write end that process
//! holds, `weft up --tie-to-stdin` on the read end, and a sweeper `sh` that at the pipe's
//! end continues stopped servers, SIGTERMs the processes recorded in `run/*.tied`, waits
//! up to 10 s and removes the home), used by weft-testkit and by weft-bench's own clusters.

pub mod netemu;
pub mod tie;

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use weft_layout::stripe::STRIPE_SIZE_BYTES_DEFAULT;
use weft_layout::{CacheMapping, CacheMode, LayoutRequest, ServerId};

/// Most servers a cluster description may list.
pub const SERVERS_MAX: usize = 4096;
/// Largest cluster description file read.
pub const CLUSTER_FILE_BYTES_MAX: u64 = 4 << 20;
pub const CLUSTER_FILE_NAME: &str = "cluster.toml";
/// The cluster key's file name in a cluster's home, beside `cluster.toml`.
pub const KEY_FILE_NAME: &str = "cluster.key";
/// The servers-only key capabilities are signed with, beside the description (`weft
/// up` makes one; clients never read it).
pub const CAPABILITY_KEY_FILE_NAME: &str = "capability.key";

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("cannot read cluster description {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("cluster description {path} is invalid: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error(
        "WEFT_META={addr:?} {reason}: it must be HOST:PORT, e.g. node0:7400 (the metadata manager's address)"
    )]
    BadMetaAddress { addr: String, reason: &'static str },
    #[error("no Weft cluster found: set WEFT_META=host:port, or WEFT_HOME to a directory with cluster.toml (looked for {looked})")]
    NotFound { looked: String },
    #[error("no key for the Weft cluster: set WEFT_KEY to the cluster's key file (cluster.key in the home of the cluster; looked for {looked})")]
    NoKey { looked: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Meta,
    Io,
    Cache,
}

impl Role {
    /// As the description, `weftd --role` and `weft status` spell it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Meta => "meta",
            Role::Io => "io",
            Role::Cache => "cache",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerEntry {
    pub id: u32,
    pub roles: Vec<Role>,
    /// `host:port` the server listens on and clients connect to.
    pub addr: String,
    /// Where the server keeps its data; defaults to `<home>/data/server-<id>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    /// A Unix socket the server also listens on; clients on the same machine use it
    /// instead of TCP (bulk data then moves at memory speed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
    /// `host:port` of the server's metrics endpoint (Prometheus text over HTTP, and
    /// the status page on the metadata manager); none: no endpoint. Port 0 picks one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_addr: Option<String>,
}

impl ServerEntry {
    pub fn has(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }
    pub fn server_id(&self) -> ServerId {
        ServerId(self.id)
    }
}

fn default_name() -> String {
    "weft".into()
}
fn default_stripe_size() -> u64 {
    STRIPE_SIZE_BYTES_DEFAULT
}

/// Smallest memory bound of a cache manager (bytes): a few blocks of the largest
/// common stripe size.
pub const CACHE_MEMORY_BYTES_MIN: u64 = 1 << 20;
/// Default memory bound of a cache manager (bytes).
pub const CACHE_MEMORY_BYTES_DEFAULT: u64 = 512 << 20;

/// The cache tier's settings (`[cache]` in the description). The cache managers are
/// the servers with the `cache` role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CacheSettings {
    /// Caching mode of new files when neither the create nor the directory says:
    /// `none`, `cached` or `delegated`. Default: `cached` when the cluster has cache
    /// managers, else `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// `aligned` (a block goes to the manager of the io server storing it) or
    /// `hashed` (block x to manager x mod n). Default: `aligned` when every io server
    /// has the cache role and no server is a cache manager only, else `hashed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mapping: Option<String>,
    /// Cache block size in bytes; 0 (the default) = each file's stripe size.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub block_size: u64,
    /// Most bytes of file data one cache manager holds; default 512 MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// Replacement policy of every cache manager: lru, lfu, fifo, arc, s3fifo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Whose identity metadata requests act with (`identity` in the description).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum IdentityMode {
    /// Every request acts as the user who owns the cluster key, whatever it claims:
    /// holding the key is being that user (a cluster of one user, as `weft up`'s).
    #[default]
    Owner,
    /// Requests act as the uid and groups they claim (NFS's AUTH_SYS): every holder
    /// of the key is trusted with any identity. Only for a key shared by clients that
    /// are all trusted (a root-run mount serving several local users).
    Claimed,
    /// Each connection to the metadata manager carries a MUNGE credential, which the
    /// manager decodes with `unmunge`; its requests act as the uid and gid it vouches
    /// for (groups from the manager's group database), whatever they claim. Only a
    /// connection whose MUNGE uid is in `munge_trusted_uids` (a FUSE daemon run by
    /// root) acts with the credentials its requests claim.
    Munge,
}

impl IdentityMode {
    fn is_default(&self) -> bool {
        *self == IdentityMode::default()
    }

    pub fn name(self) -> &'static str {
        match self {
            IdentityMode::Owner => "owner",
            IdentityMode::Claimed => "claimed",
            IdentityMode::Munge => "munge",
        }
    }
}

impl std::str::FromStr for IdentityMode {
    type Err = String;
    fn from_str(s: &str) -> Result<IdentityMode, String> {
        match s {
            "owner" => Ok(IdentityMode::Owner),
            "claimed" => Ok(IdentityMode::Claimed),
            "munge" => Ok(IdentityMode::Munge),
            other => Err(format!("identity mode {other:?}: owner, claimed or munge")),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    #[serde(default = "default_name")]
    pub name: String,
    /// Default stripe size of new files, bytes.
    #[serde(default = "default_stripe_size")]
    pub stripe_size: u64,
    /// Default number of io servers a file is striped over; 0 = all.
    #[serde(default)]
    pub stripe_count: u32,
    /// Default redundancy of new files: "plain" or "replicas=N"; default plain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redundancy: Option<String>,
    #[serde(default, skip_serializing_if = "CacheSettings::is_default")]
    pub cache: CacheSettings,
    /// Objects the metadata manager precreates on the io servers per refill of its pool
    /// (0: none, each create makes its objects); default: the manager's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precreate: Option<u32>,
    /// The metadata manager's rebuilder (`auto_rebuild_rate`): "off", or the most bytes
    /// per second it copies ("100M"); default on at `AUTO_REBUILD_RATE_DEFAULT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_rebuild: Option<String>,
    /// The cluster key (see `key_path`); default: `cluster.key` beside the description.
    /// A relative path is relative to the description's directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// Whose identity requests act with; default `owner`.
    #[serde(default, skip_serializing_if = "IdentityMode::is_default")]
    pub identity: IdentityMode,
    /// In `munge` mode, the uids (as MUNGE vouches for them) whose connections may act
    /// with the credentials their requests claim: a FUSE daemon run by root acting for
    /// the calling user needs `munge_trusted_uids = [0]`. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub munge_trusted_uids: Vec<u32>,
    /// In `munge` mode, the munged socket the manager decodes credentials with;
    /// default: `WEFT_MUNGE_SOCKET` in weftd's environment, else munge's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub munge_socket: Option<PathBuf>,
    /// Whether io servers and cache managers serve a file's data only to connections
    /// that present a capability from the manager (default `true`). `false` is for
    /// measuring what capabilities cost (`weft up --insecure-no-capabilities`): every
    /// holder of the key may then read and write every file by inode number.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub capabilities: bool,
    /// How long a capability the manager issues is valid, in milliseconds (default
    /// 60000): the bound on how long a chmod or chown reaches a server that missed its
    /// revocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability_lifetime_ms: Option<u64>,
    /// The metadata manager's grace after a restart, in milliseconds, during which it
    /// grants only reclaims of the locks mounts held (default
    /// `weft_proto::LOCK_GRACE_DEFAULT`, 10000; 0: none, restarts lose locks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_grace_ms: Option<u64>,
    /// How long the metadata manager may hold an acknowledged operation before a
    /// durable commit, in milliseconds (default `weft_proto::COMMIT_INTERVAL_DEFAULT`,
    /// 5; 0: every operation is durable before it is answered). fsync and sync commit at
    /// once whatever this says; see docs/src/consistency.md, Durability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_interval_ms: Option<u64>,
    /// How long a manager that may have lost acknowledged operations (a crash with a
    /// commit interval above 0) waits after its start for clients to replay them, in
    /// milliseconds (default 3000; the environment's `WEFT_REPLAY_WINDOW_MS` overrides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_window_ms: Option<u64>,
    /// The servers' own key that capabilities are signed with, relative to the
    /// description's directory; copied to server machines only. Without one,
    /// capabilities are signed with a key derived from the cluster key, which every
    /// client holds: a key holder who derives it can make its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability_key_file: Option<PathBuf>,
    #[serde(rename = "server", default)]
    pub servers: Vec<ServerEntry>,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

impl CacheSettings {
    fn is_default(&self) -> bool {
        *self == CacheSettings::default()
    }
}

/// The longest grace for lock reclaims a manager may be given (`lock_grace_ms`).
pub const LOCK_GRACE_MS_MAX: u64 = 600_000;
/// The longest commit interval a manager may be given (`commit_interval_ms`).
pub const COMMIT_INTERVAL_MS_MAX: u64 = 10_000;
/// The longest replay window a manager may be given (`replay_window_ms`).
pub const REPLAY_WINDOW_MS_MAX: u64 = 600_000;

impl ClusterConfig {
    pub fn load(path: &Path) -> Result<ClusterConfig, ConfigError> {
        let read_err = |reason: String| ConfigError::Read {
            path: path.to_owned(),
            reason,
        };
        let len = std::fs::metadata(path)
            .map_err(|e| read_err(e.to_string()))?
            .len();
        if len > CLUSTER_FILE_BYTES_MAX {
            return Err(read_err(format!(
                "file is {len} bytes, more than the {CLUSTER_FILE_BYTES_MAX} allowed"
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| read_err(e.to_string()))?;
        let config: ClusterConfig = toml::from_str(&text).map_err(|e| ConfigError::Invalid {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        config.validate().map_err(|reason| ConfigError::Invalid {
            path: path.to_owned(),
            reason,
        })?;
        Ok(config)
    }

    /// Writes the file atomically (temporary file, then rename), so that a reader never
    /// sees half a description.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let text = toml::to_string_pretty(self).map_err(std::io::Error::other)?;
        let tmp = path.with_extension("toml.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(tmp, path)
    }

    /// The pace of the metadata manager's rebuilder in bytes per second, `None` when
    /// it is off (`auto_rebuild`).
    pub fn auto_rebuild_rate(&self) -> Result<Option<u64>, String> {
        parse_auto_rebuild(self.auto_rebuild.as_deref())
    }

    pub fn validate(&self) -> Result<(), String> {
        self.auto_rebuild_rate()?;
        if self.servers.len() > SERVERS_MAX {
            return Err(format!(
                "{} servers listed; at most {SERVERS_MAX}",
                self.servers.len()
            ));
        }
        let metas = self.servers.iter().filter(|s| s.has(Role::Meta)).count();
        if metas != 1 {
            return Err(format!(
                "exactly one server must have the meta role, found {metas}"
            ));
        }
        if !self.servers.iter().any(|s| s.has(Role::Io)) {
            return Err("no server has the io role".into());
        }
        let mut ids: Vec<u32> = self.servers.iter().map(|s| s.id).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("server id {} is listed twice", w[0]));
        }
        for s in &self.servers {
            if s.roles.is_empty() {
                return Err(format!("server {} has no roles", s.id));
            }
            if !s.addr.contains(':') {
                return Err(format!("server {} address {:?} must be host:port", s.id, s.addr));
            }
        }
        if let Some(ms) = self.lock_grace_ms {
            if ms > LOCK_GRACE_MS_MAX {
                return Err(format!(
                    "lock_grace_ms = {ms}: expected at most {LOCK_GRACE_MS_MAX} (10 minutes)"
                ));
            }
        }
        if let Some(ms) = self.commit_interval_ms {
            if ms > COMMIT_INTERVAL_MS_MAX {
                return Err(format!(
                    "commit_interval_ms = {ms}: expected at most {COMMIT_INTERVAL_MS_MAX} (10 s)"
                ));
            }
        }
        if let Some(ms) = self.replay_window_ms {
            if ms > REPLAY_WINDOW_MS_MAX {
                return Err(format!(
                    "replay_window_ms = {ms}: expected at most {REPLAY_WINDOW_MS_MAX} (10 minutes)"
                ));
            }
        }
        if let Some(ms) = self.capability_lifetime_ms {
            if !(1_000..=3_600_000).contains(&ms) {
                return Err(format!(
                    "capability_lifetime_ms = {ms}: expected 1000 to 3600000 (1 s to an hour)"
                ));
            }
        }
        self.cache_default_mode()?;
        self.cache_mapping()?;
        if self.cache.block_size != 0
            && !(weft_layout::stripe::STRIPE_SIZE_BYTES_MIN..=weft_layout::stripe::STRIPE_SIZE_BYTES_MAX)
                .contains(&self.cache.block_size)
        {
            return Err(format!(
                "cache block_size {} is outside {}..={} bytes (or 0 for the stripe size)",
                self.cache.block_size,
                weft_layout::stripe::STRIPE_SIZE_BYTES_MIN,
                weft_layout::stripe::STRIPE_SIZE_BYTES_MAX
            ));
        }
        if let Some(m) = self.cache.memory {
            if m < CACHE_MEMORY_BYTES_MIN {
                return Err(format!(
                    "cache memory {m} bytes is below the minimum of {CACHE_MEMORY_BYTES_MIN}"
                ));
            }
        }
        if let Some(r) = &self.redundancy {
            r.parse::<weft_layout::Redundancy>()?;
        }
        let request = self.default_layout();
        let io: Vec<ServerId> = self.io_servers().map(|s| s.server_id()).collect();
        weft_layout::Layout::resolve(&request, &LayoutRequest::default(), &io)
            .map_err(|e| format!("default layout: {e}"))?;
        Ok(())
    }

    pub fn meta(&self) -> &ServerEntry {
        self.servers
            .iter()
            .find(|s| s.has(Role::Meta))
            .expect("validated: one meta server")
    }

    pub fn io_servers(&self) -> impl Iterator<Item = &ServerEntry> {
        self.servers.iter().filter(|s| s.has(Role::Io))
    }

    pub fn server(&self, id: u32) -> Option<&ServerEntry> {
        self.servers.iter().find(|s| s.id == id)
    }

    /// The cache managers (servers with the cache role), in id order.
    pub fn cache_managers(&self) -> Vec<&ServerEntry> {
        let mut managers: Vec<&ServerEntry> = self.servers.iter().filter(|s| s.has(Role::Cache)).collect();
        managers.sort_by_key(|s| s.id);
        managers
    }

    /// The caching mode of new files unless a create or directory says otherwise.
    pub fn cache_default_mode(&self) -> Result<CacheMode, String> {
        match &self.cache.default {
            Some(name) => {
                let mode: CacheMode = name.parse()?;
                if mode.uses_tier() && self.cache_managers().is_empty() {
                    return Err(format!(
                        "cache default {mode} needs servers with the cache role; none is listed"
                    ));
                }
                Ok(mode)
            }
            None if self.cache_managers().is_empty() => Ok(CacheMode::None),
            None => Ok(CacheMode::Cached),
        }
    }

    /// How blocks of cached files map onto the cache managers.
    pub fn cache_mapping(&self) -> Result<CacheMapping, String> {
        if let Some(name) = &self.cache.mapping {
            return name.parse();
        }
        let managers = self.cache_managers();
        let colocated = !managers.is_empty()
            && self.io_servers().all(|s| s.has(Role::Cache))
            && managers.iter().all(|s| s.has(Role::Io));
        Ok(if colocated || managers.is_empty() {
            CacheMapping::Aligned
        } else {
            CacheMapping::Hashed
        })
    }

    pub fn default_layout(&self) -> LayoutRequest {
        LayoutRequest {
            stripe_size_bytes: Some(self.stripe_size),
            stripe_count: Some(self.stripe_count),
            first_server: None,
            cache: self.cache_default_mode().ok(),
            redundancy: self.redundancy.as_deref().and_then(|r| r.parse().ok()),
        }
    }

    /// The cluster key's file, for the description at `description`: its `key_file`,
    /// else `cluster.key` beside it.
    pub fn key_path(&self, description: &Path) -> PathBuf {
        let dir = description.parent().unwrap_or(Path::new("."));
        match &self.key_file {
            Some(path) => dir.join(path),
            None => dir.join(KEY_FILE_NAME),
        }
    }

    /// The servers-only capability key's file, if the description names one.
    pub fn capability_key_path(&self, description: &Path) -> Option<PathBuf> {
        let dir = description.parent().unwrap_or(Path::new("."));
        self.capability_key_file.as_ref().map(|p| dir.join(p))
    }

    /// Addresses of servers that are not on this machine's loopback interface: a
    /// cluster with any spans machines, and its servers face a network.
    pub fn network_addresses(&self) -> Vec<&str> {
        self.servers
            .iter()
            .map(|s| s.addr.as_str())
            .filter(|a| !is_loopback_address(a))
            .collect()
    }

    /// The data directory of a server: its own setting, else under `home`.
    pub fn data_dir(&self, server: &ServerEntry, home: &Path) -> PathBuf {
        server
            .data_dir
            .clone()
            .unwrap_or_else(|| home.join("data").join(format!("server-{}", server.id)))
    }
}

/// The rebuilder's pace when the description names none: 100 MiB/s.
pub const AUTO_REBUILD_RATE_DEFAULT: u64 = 100 << 20;

/// An `auto_rebuild` setting ("off", or bytes per second with K, M, G suffixes, at
/// least 1M) as a pace; `None` (unset) is the default pace.
pub fn parse_auto_rebuild(text: Option<&str>) -> Result<Option<u64>, String> {
    match text.map(str::trim) {
        None => Ok(Some(AUTO_REBUILD_RATE_DEFAULT)),
        Some("off") => Ok(None),
        Some(rate) => match parse_size(rate) {
            Ok(bytes) if bytes >= 1 << 20 => Ok(Some(bytes)),
            Ok(_) => Err(format!(
                "auto_rebuild {rate:?}: at least 1M (bytes per second), or off"
            )),
            Err(e) => Err(format!(
                "auto_rebuild {rate:?}: {e}; expected a rate such as 100M, or off"
            )),
        },
    }
}

/// Parses sizes as users write them: 65536, 64K, 64KiB, 4M, 1G, 2T (powers of 1024).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim().trim_end_matches('\0');
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits.parse().map_err(|_| format!("invalid size {text:?}"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => {
            return Err(format!(
                "invalid size unit {other:?} in {text:?} (use K, M, G, T)"
            ))
        }
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("size {text:?} is too large"))
}

/// The home directory of the local cluster: $WEFT_HOME, else ~/.weft.
pub fn home_dir() -> PathBuf {
    if let Some(h) = std::env::var_os("WEFT_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    let base = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "/tmp".into());
    PathBuf::from(base).join(".weft")
}

/// True when `addr` (`host:port`) names this machine's loopback interface: a
/// 127.0.0.0/8 or ::1 address, or `localhost`. Any other name may reach a network.
pub fn is_loopback_address(addr: &str) -> bool {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The cluster key's file for a client: $WEFT_KEY, else that of the description in
/// `home_dir()` (its `key_file`, else `cluster.key` beside it), else `cluster.key` in
/// `home_dir()`. A client that found the cluster through $WEFT_META alone and has no
/// key gets an error naming WEFT_KEY.
pub fn client_key_path() -> Result<PathBuf, ConfigError> {
    if let Some(path) = std::env::var_os("WEFT_KEY").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let home = home_dir();
    let description = home.join(CLUSTER_FILE_NAME);
    if description.exists() {
        return Ok(ClusterConfig::load(&description)?.key_path(&description));
    }
    let path = home.join(KEY_FILE_NAME);
    if path.exists() {
        return Ok(path);
    }
    Err(ConfigError::NoKey {
        looked: format!("{} and {}", description.display(), path.display()),
    })
}

/// The metadata manager's Unix socket (with its server id) for a client on its machine
/// that reaches it at `meta_addr`: what the cluster description in `home_dir()` says,
/// if its manager is at `meta_addr` and the socket exists. None for a client that found
/// the cluster through $WEFT_META alone on another home, or of another machine.
pub fn local_meta_socket(meta_addr: &str) -> Option<(u32, PathBuf)> {
    let path = home_dir().join(CLUSTER_FILE_NAME);
    if !path.exists() {
        return None;
    }
    let config = ClusterConfig::load(&path).ok()?;
    let meta = config.meta();
    let socket = meta.socket.as_ref().filter(|_| meta.addr == meta_addr)?;
    socket.exists().then(|| (meta.id, socket.clone()))
}

/// The metadata manager's address: $WEFT_META, else the meta server of
/// `home_dir()/cluster.toml`.
pub fn meta_address() -> Result<String, ConfigError> {
    if let Ok(addr) = std::env::var("WEFT_META") {
        if !addr.is_empty() {
            check_meta_address(&addr)?;
            return Ok(addr);
        }
    }
    let path = home_dir().join(CLUSTER_FILE_NAME);
    if !path.exists() {
        return Err(ConfigError::NotFound {
            looked: path.display().to_string(),
        });
    }
    Ok(ClusterConfig::load(&path)?.meta().addr.clone())
}

/// $WEFT_META must be host:port (a host name, IPv4 address or [IPv6] address, and a
/// port number): without this, a missing port surfaced as "cannot connect ... is the
/// cluster running?".
fn check_meta_address(addr: &str) -> Result<(), ConfigError> {
    let invalid = |reason| ConfigError::BadMetaAddress {
        addr: addr.to_owned(),
        reason,
    };
    if addr.starts_with("unix:/") {
        return Ok(());
    }
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err(invalid("has no port"));
    };
    if host.is_empty() || (host.contains(':') && !(host.starts_with('[') && host.ends_with(']'))) {
        return Err(invalid("has no host"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(invalid("has no valid port")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weft_meta_must_be_host_and_port() {
        for good in [
            "node0:7400",
            "127.0.0.1:1",
            "[::1]:7400",
            "unix:/run/weft/server-0.sock",
        ] {
            assert!(check_meta_address(good).is_ok(), "{good}");
        }
        for bad in [
            "localhost",
            "node0:",
            ":7400",
            "node0:0",
            "node0:99999",
            "::1",
            "node0:port",
        ] {
            let e = check_meta_address(bad).unwrap_err().to_string();
            assert!(e.contains("HOST:PORT") && e.contains("WEFT_META"), "{bad}: {e}");
        }
    }

    #[test]
    fn descriptions_round_trip_and_bad_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.toml");
        let config = ClusterConfig {
            key_file: Some("keys/k".into()),
            identity: IdentityMode::Claimed,
            munge_trusted_uids: vec![0],
            munge_socket: None,
            capabilities: true,
            capability_lifetime_ms: None,
            lock_grace_ms: None,
            commit_interval_ms: None,
            replay_window_ms: None,
            capability_key_file: None,
            name: "t".into(),
            stripe_size: 4096,
            stripe_count: 2,
            redundancy: None,
            precreate: None,
            auto_rebuild: None,
            cache: CacheSettings {
                memory: Some(64 << 20),
                ..Default::default()
            },
            servers: vec![
                ServerEntry {
                    id: 0,
                    roles: vec![Role::Meta],
                    addr: "127.0.0.1:1".into(),
                    data_dir: None,
                    socket: None,
                    metrics_addr: None,
                },
                ServerEntry {
                    id: 1,
                    roles: vec![Role::Io],
                    addr: "127.0.0.1:2".into(),
                    data_dir: Some("/x".into()),
                    socket: None,
                    metrics_addr: None,
                },
                ServerEntry {
                    id: 2,
                    roles: vec![Role::Io, Role::Cache],
                    addr: "127.0.0.1:3".into(),
                    data_dir: None,
                    socket: None,
                    metrics_addr: None,
                },
            ],
        };
        config.save(&path).unwrap();
        assert_eq!(ClusterConfig::load(&path).unwrap(), config);
        assert_eq!(config.key_path(&path), dir.path().join("keys/k"));
        assert!(config.network_addresses().is_empty());

        let bad = |text: &str| {
            std::fs::write(&path, text).unwrap();
            ClusterConfig::load(&path).unwrap_err().to_string()
        };
        assert!(bad("[[server]]\nid = 1\nroles = [\"io\"]\naddr = \"h:1\"\n").contains("meta"));
        assert!(
            bad("stripe_count = 3\n[[server]]\nid = 0\nroles = [\"meta\", \"io\"]\naddr = \"h:1\"\n")
                .contains("stripe count")
        );
        assert!(
            bad("[[server]]\nid = 0\nroles = [\"meta\", \"io\"]\naddr = \"nohostport\"\n")
                .contains("host:port")
        );
        assert!(bad("bogus = 1\n").contains("bogus"));
        let io_only = "[[server]]\nid = 0\nroles = [\"meta\", \"io\"]\naddr = \"h:1\"\n";
        assert!(bad(&format!("[cache]\ndefault = \"cached\"\n{io_only}")).contains("cache role"));
        assert!(bad(&format!("[cache]\ndefault = \"sometimes\"\n{io_only}")).contains("sometimes"));
        assert!(bad(&format!("[cache]\nmemory = 5\n{io_only}")).contains("minimum"));
    }

    #[test]
    fn loopback_addresses_are_told_from_network_ones() {
        for addr in [
            "127.0.0.1:7400",
            "127.3.2.1:1",
            "localhost:9",
            "[::1]:7400",
            "LOCALHOST:1",
        ] {
            assert!(is_loopback_address(addr), "{addr}");
        }
        for addr in [
            "0.0.0.0:7400",
            "10.1.2.3:7400",
            "node1:7400",
            "[::]:1",
            "192.168.0.1:2",
            "[fe80::1]:3",
        ] {
            assert!(!is_loopback_address(addr), "{addr}");
        }
    }

    #[test]
    fn munge_mode_and_its_settings_parse() {
        let config: ClusterConfig = toml::from_str(
            "identity = \"munge\"\nmunge_trusted_uids = [0]\nmunge_socket = \"/run/m.sock\"\n",
        )
        .unwrap();
        assert_eq!(config.identity, IdentityMode::Munge);
        assert_eq!(config.munge_trusted_uids, vec![0]);
        assert_eq!(config.munge_socket, Some(PathBuf::from("/run/m.sock")));
        assert_eq!("munge".parse::<IdentityMode>(), Ok(IdentityMode::Munge));
        assert_eq!(IdentityMode::Munge.name(), "munge");
        assert!("mung".parse::<IdentityMode>().unwrap_err().contains("munge"));
        // Unset, neither is written back.
        let plain: ClusterConfig = toml::from_str("").unwrap();
        assert!(plain.munge_trusted_uids.is_empty() && plain.munge_socket.is_none());
        assert!(!toml::to_string(&plain).unwrap().contains("munge"));
    }

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        for bad in ["12Q", "M", "", "-5", "99999999999G"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_cache_mapping_follows_where_the_managers_run() {
        let server = |id, roles: &[Role]| ServerEntry {
            id,
            roles: roles.to_vec(),
            addr: format!("h:{id}"),
            data_dir: None,
            socket: None,
            metrics_addr: None,
        };
        let mut config = ClusterConfig {
            key_file: None,
            identity: IdentityMode::Owner,
            munge_trusted_uids: Vec::new(),
            munge_socket: None,
            capabilities: true,
            capability_lifetime_ms: None,
            lock_grace_ms: None,
            commit_interval_ms: None,
            replay_window_ms: None,
            capability_key_file: None,
            name: "t".into(),
            stripe_size: 4096,
            stripe_count: 0,
            redundancy: None,
            precreate: None,
            auto_rebuild: None,
            cache: CacheSettings::default(),
            servers: vec![
                server(0, &[Role::Meta]),
                server(1, &[Role::Io, Role::Cache]),
                server(2, &[Role::Io, Role::Cache]),
            ],
        };
        assert_eq!(config.cache_mapping(), Ok(CacheMapping::Aligned));
        assert_eq!(config.cache_default_mode(), Ok(CacheMode::Cached));
        config.servers.push(server(3, &[Role::Cache]));
        assert_eq!(config.cache_mapping(), Ok(CacheMapping::Hashed));
        config.cache.mapping = Some("aligned".into());
        assert_eq!(config.cache_mapping(), Ok(CacheMapping::Aligned));
        config.cache.mapping = None;
        config.servers[1].roles = vec![Role::Io];
        config.servers[2].roles = vec![Role::Io];
        assert_eq!(config.cache_mapping(), Ok(CacheMapping::Hashed));
        config.servers.retain(|s| s.id != 3);
        assert_eq!(config.cache_default_mode(), Ok(CacheMode::None));
    }
}
