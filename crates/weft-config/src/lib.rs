//! The cluster description (`cluster.toml`): which servers exist, their roles,
//! addresses and data directories, and the default layout; and how a client finds the
//! cluster ($WEFT_META, else $WEFT_HOME/cluster.toml, else ~/.weft/cluster.toml).
//!
//! Example:
//! ```toml
//! name = "weft"
//! stripe_size = 65536     # bytes; default layout for new files
//! stripe_count = 0        # 0 = all io servers
//!
//! [[server]]
//! id = 0
//! roles = ["meta"]
//! addr = "node0:7400"
//! data_dir = "/var/lib/weft/meta"
//!
//! [[server]]
//! id = 1
//! roles = ["io"]
//! addr = "node1:7400"
//! ```

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use weft_layout::stripe::STRIPE_SIZE_BYTES_DEFAULT;
use weft_layout::{LayoutRequest, ServerId};

/// Most servers a cluster description may list.
pub const SERVERS_MAX: usize = 4096;
/// Largest cluster description file read.
pub const CLUSTER_FILE_BYTES_MAX: u64 = 4 << 20;
pub const CLUSTER_FILE_NAME: &str = "cluster.toml";

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("cannot read cluster description {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("cluster description {path} is invalid: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("no Weft cluster found: set WEFT_META=host:port, or WEFT_HOME to a directory with cluster.toml (looked for {looked})")]
    NotFound { looked: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Meta,
    Io,
    Cache,
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
    #[serde(rename = "server", default)]
    pub servers: Vec<ServerEntry>,
}

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

    pub fn validate(&self) -> Result<(), String> {
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

    pub fn default_layout(&self) -> LayoutRequest {
        LayoutRequest {
            stripe_size_bytes: Some(self.stripe_size),
            stripe_count: Some(self.stripe_count),
            first_server: None,
        }
    }

    /// The data directory of a server: its own setting, else under `home`.
    pub fn data_dir(&self, server: &ServerEntry, home: &Path) -> PathBuf {
        server
            .data_dir
            .clone()
            .unwrap_or_else(|| home.join("data").join(format!("server-{}", server.id)))
    }
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

/// The metadata manager's address: $WEFT_META, else the meta server of
/// `home_dir()/cluster.toml`.
pub fn meta_address() -> Result<String, ConfigError> {
    if let Ok(addr) = std::env::var("WEFT_META") {
        if !addr.is_empty() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_round_trip_and_bad_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.toml");
        let config = ClusterConfig {
            name: "t".into(),
            stripe_size: 4096,
            stripe_count: 2,
            servers: vec![
                ServerEntry {
                    id: 0,
                    roles: vec![Role::Meta],
                    addr: "127.0.0.1:1".into(),
                    data_dir: None,
                    socket: None,
                },
                ServerEntry {
                    id: 1,
                    roles: vec![Role::Io],
                    addr: "127.0.0.1:2".into(),
                    data_dir: Some("/x".into()),
                    socket: None,
                },
                ServerEntry {
                    id: 2,
                    roles: vec![Role::Io, Role::Cache],
                    addr: "127.0.0.1:3".into(),
                    data_dir: None,
                    socket: None,
                },
            ],
        };
        config.save(&path).unwrap();
        assert_eq!(ClusterConfig::load(&path).unwrap(), config);

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
    }
}
