//! `weft status`: each server of a cluster asked for its state (versions, commit
//! interval, locks, cache), the local run's pids checked, as text or a web page's table.

use super::*;

/// The `host:port` of the metrics endpoint of the server at `addr`, as it says (kept in
/// the description, so that a restart serves at the same address).
pub(super) fn metrics_address(addr: &str, auth: &ClientAuth) -> Option<String> {
    let url = metrics_url(addr, auth, status_timeouts()).ok()??;
    let rest = url.strip_prefix("http://")?;
    Some(rest.split('/').next()?.to_owned())
}

/// The server's metrics URL: `Ok(None)` when it serves none (or is older than metrics).
pub(super) fn metrics_url(
    addr: &str,
    auth: &ClientAuth,
    timeouts: Timeouts,
) -> Result<Option<String>, RpcError> {
    let connection = Connection::connect(addr, "weft status", auth, timeouts)?;
    match connection.call(&Request::Metrics { text: false }, &[]) {
        Ok((Response::Metrics { url }, _)) => Ok((!url.is_empty()).then_some(url)),
        Ok(_) => Ok(None),
        Err(RpcError::Remote { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

pub(super) fn status_timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(2),
        request: Duration::from_secs(5),
    }
}

/// The io servers the manager of `config` serves that the description does not list
/// (added with `weft server add --addr`); none when it does not answer.
fn added_io_servers(config: &ClusterConfig, description: &Path) -> Vec<Listed> {
    let Ok(key) = ClusterKey::load(&config.key_path(description)) else {
        return Vec::new();
    };
    let cluster = Connection::connect(
        &config.meta().addr,
        "weft status",
        &ClientAuth::cluster(key),
        status_timeouts(),
    )
    .and_then(|c| c.call(&Request::GetCluster, &[]));
    let Ok((Response::Cluster(cluster), _)) = cluster else {
        return Vec::new();
    };
    cluster
        .io_servers
        .into_iter()
        .filter(|s| !config.servers.iter().any(|known| known.id == s.id.0))
        .map(|s| Listed {
            id: s.id.0,
            roles: vec![Role::Io],
            addr: s.addr,
            pid: None,
        })
        .collect()
}

/// A server as `weft status` lists it.
pub(super) struct Listed {
    pub(super) id: u32,
    pub(super) roles: Vec<Role>,
    pub(super) addr: String,
    pub(super) pid: Option<i32>,
}

/// Which cluster `weft status` describes: the one a client would use.
pub enum StatusOf {
    /// The description in this home (`--home`, else $WEFT_HOME or ~/.weft when
    /// $WEFT_META is not set).
    Home(PathBuf),
    /// The cluster of the metadata manager at this address ($WEFT_META).
    Meta(String),
}

impl StatusOf {
    /// `--home` if given, else $WEFT_META if set, else the default home: what `weft ls`
    /// and `weft put` would use.
    pub fn choose(home: Option<PathBuf>) -> StatusOf {
        match (home, std::env::var("WEFT_META")) {
            (Some(home), _) => StatusOf::Home(home),
            (None, Ok(meta)) if !meta.is_empty() => StatusOf::Meta(meta),
            (None, _) => StatusOf::Home(weft_config::home_dir()),
        }
    }
}

/// `weft status`'s capabilities line: on or off, the lifetime, what signs them.
fn capabilities_line(on: bool, lifetime_ms: u64, signed_with: String) -> String {
    if !on {
        "capabilities: OFF (--insecure-no-capabilities: every key holder may read and write every file by inode number)".into()
    } else {
        format!(
            "capabilities: io servers and cache managers serve a file's bytes only with a capability the manager grants after its permission check ({} s lifetime; chmod/chown revoke at once), signed with {signed_with}",
            lifetime_ms / 1000
        )
    }
}

/// Prints the servers of the cluster; true when all are up. With `web`, prints the
/// status page's URL instead.
pub fn status(of: &StatusOf, web: bool) -> Result<bool> {
    let mut trusted: Vec<u32> = Vec::new();
    let mut capabilities: Option<String> = None;
    // The key owner's uid as the manager reports it (else read from the key file).
    let mut owner_uid: Option<u32> = None;
    let (name, key_path, network, servers, origin, identity) = match of {
        StatusOf::Home(home) => {
            let description = home.join(CLUSTER_FILE_NAME);
            if !description.exists() {
                bail!(
                    "no Weft cluster in {} (no {CLUSTER_FILE_NAME}); start one with `weft up`, or set WEFT_META=host:port",
                    home.display()
                );
            }
            let config = ClusterConfig::load(&description)?;
            trusted.clone_from(&config.munge_trusted_uids);
            capabilities = Some(capabilities_line(
                config.capabilities,
                config
                    .capability_lifetime_ms
                    .unwrap_or(weft_rpc::capability::LIFETIME_DEFAULT_MS),
                match config.capability_key_path(&description) {
                    Some(path) => format!("the servers-only key {}", path.display()),
                    None => {
                        "a key derived from the cluster key (every key holder can make capabilities)".into()
                    }
                },
            ));
            let mut servers: Vec<Listed> = config
                .servers
                .iter()
                .map(|s| Listed {
                    id: s.id,
                    roles: s.roles.clone(),
                    addr: s.addr.clone(),
                    pid: running_pid(home, s.id),
                })
                .collect();
            servers.extend(added_io_servers(&config, &description));
            (
                config.name.clone(),
                config.key_path(&description),
                config
                    .network_addresses()
                    .into_iter()
                    .map(str::to_owned)
                    .collect::<Vec<String>>(),
                servers,
                format!("home {}", home.display()),
                Some(config.identity),
            )
        }
        StatusOf::Meta(meta) => {
            let key_path = weft_config::client_key_path()?;
            let auth = ClientAuth::cluster(ClusterKey::load(&key_path)?);
            let pool = weft_rpc::ConnectionPool::new("weft status", auth, status_timeouts());
            let (name, targets) = weft_metrics::collect::targets(&pool, meta).with_context(|| {
                format!("asking the metadata manager at WEFT_META={meta} for its cluster")
            })?;
            let servers: Vec<Listed> = targets
                .iter()
                .map(|t| Listed {
                    id: t.id.parse().unwrap_or(0),
                    roles: t
                        .roles
                        .split(',')
                        .filter_map(|r| match r {
                            "meta" => Some(Role::Meta),
                            "io" => Some(Role::Io),
                            "cache" => Some(Role::Cache),
                            _ => None,
                        })
                        .collect(),
                    addr: t.addr.clone(),
                    pid: None,
                })
                .collect();
            let network = servers
                .iter()
                .filter(|s| !weft_config::is_loopback_address(&s.addr))
                .map(|s| s.addr.clone())
                .collect();
            // How the cluster protects itself, as the manager applies it (a manager
            // older than `SecurityInfo` answers UnknownOpcode: the lines are left out).
            let mut identity = None;
            if let Ok((
                Response::Security {
                    capabilities: on,
                    capability_lifetime_ms,
                    servers_only_key,
                    identity: mode,
                    owner_uid: uid,
                    trusted_uids,
                },
                _,
            )) = pool.call(meta, &Request::SecurityInfo, &[])
            {
                capabilities = Some(capabilities_line(
                    on,
                    capability_lifetime_ms,
                    if servers_only_key {
                        "a servers-only key (the description's capability_key_file)".into()
                    } else {
                        "a key derived from the cluster key (every key holder can make capabilities)".into()
                    },
                ));
                use weft_proto::msg::identity_mode;
                identity = match mode {
                    identity_mode::OWNER => Some(weft_config::IdentityMode::Owner),
                    identity_mode::CLAIMED => Some(weft_config::IdentityMode::Claimed),
                    identity_mode::MUNGE => Some(weft_config::IdentityMode::Munge),
                    _ => None,
                };
                owner_uid = Some(uid);
                trusted = trusted_uids;
            }
            (
                name,
                key_path,
                network,
                servers,
                format!("metadata manager at WEFT_META={meta}"),
                identity,
            )
        }
    };
    let auth = match ClusterKey::load(&key_path).map(ClientAuth::cluster) {
        Ok(a) => a,
        Err(e) => bail!("{e}: without the key no server answers"),
    };
    if web {
        let meta = servers
            .iter()
            .find(|s| s.roles.contains(&Role::Meta))
            .context("the cluster has no metadata manager")?;
        return match metrics_url(&meta.addr, &auth, status_timeouts()) {
            Ok(Some(url)) => {
                println!("{}", url.trim_end_matches("/metrics").to_owned() + "/");
                Ok(true)
            }
            Ok(None) => bail!(
                "the metadata manager at {} serves no status page: give it a metrics address \
                 (`metrics_addr = \"127.0.0.1:9100\"` in its entry of cluster.toml, or weftd --metrics-addr)",
                meta.addr
            ),
            Err(e) => bail!("the metadata manager at {} does not answer: {e}", meta.addr),
        };
    }
    println!("cluster \"{name}\" ({origin})");
    if let StatusOf::Home(home) = of {
        if let Ok(Some(emu)) = weft_config::netemu::NetworkEmulation::load(home) {
            println!("{}", emu.describe());
        }
    }
    println!(
        "this weft: {}, protocol {}",
        weft_build_info::version!(),
        weft_proto::PROTOCOL_VERSION
    );
    println!(
        "security: every connection is authenticated (both ends prove the cluster key {}); {}",
        key_path.display(),
        if network.is_empty() {
            "servers listen on loopback only (this machine)".to_string()
        } else {
            format!("servers listen on the network ({})", network.join(", "))
        }
    );
    if let Some(line) = &capabilities {
        println!("{line}");
    }
    match identity {
        Some(weft_config::IdentityMode::Owner) => {
            use std::os::unix::fs::MetadataExt;
            let owner = match owner_uid {
                Some(uid) => uid.to_string(),
                None => std::fs::metadata(&key_path).map_or("?".into(), |m| m.uid().to_string()),
            };
            println!(
                "identity: owner (every request acts as uid {owner}, the key's owner, whatever it claims)"
            )
        }
        Some(weft_config::IdentityMode::Claimed) => println!(
            "identity: claimed (requests act as the uid and groups they claim: every holder of the key is trusted with any identity)"
        ),
        Some(weft_config::IdentityMode::Munge) => println!(
            "identity: munge (every connection proves its uid and gid with a MUNGE credential; requests act as them, whatever they claim{})",
            if trusted.is_empty() {
                String::new()
            } else {
                format!("; uids {trusted:?} are trusted to act for others")
            }
        ),
        None => {}
    }
    println!(
        "{:<7} {:<8} {:<22} {:<8} {:<8} {:<6} {:<20} stored",
        "server", "roles", "address", "pid", "state", "proto", "build"
    );
    let timeouts = status_timeouts();
    let placement = servers
        .iter()
        .find(|s| s.roles.contains(&Role::Meta))
        .map(|m| crate::server_cmd::states_at(&m.addr, &auth, timeouts))
        .unwrap_or_default();
    let mut all_up = true;
    let mut mismatched = false;
    let mut refused = false;
    for s in &servers {
        let has = |role| s.roles.contains(&role);
        let connection = Connection::connect(&s.addr, "weft status", &auth, timeouts);
        let (protocol, build) = server_versions(&connection);
        let (state, stored) = match &connection {
            Ok(c) if has(Role::Io) => match c.call(&Request::IoStatfs, &[]) {
                Ok((Response::IoStatfs(st), _)) => (
                    "up",
                    format!("{} in {} objects", human_bytes(st.bytes_stored), st.objects),
                ),
                _ => ("up", "?".into()),
            },
            Ok(_) if !has(Role::Meta) => ("up", "-".into()),
            Ok(c) => match c.call(
                &Request::Statfs {
                    cred: weft_proto::Cred::default(),
                },
                &[],
            ) {
                Ok((Response::Statfs(st), _)) => (
                    "up",
                    format!("{} files, {} directories", st.files, st.directories),
                ),
                _ => ("up", "?".into()),
            },
            Err(RpcError::ProtocolVersion { .. }) => {
                all_up = false;
                mismatched = true;
                ("up", "-".into())
            }
            Err(RpcError::Authentication { .. }) => {
                all_up = false;
                refused = true;
                ("refused", "-".into())
            }
            Err(_) => {
                all_up = false;
                ("down", "-".into())
            }
        };
        let pid = s.pid.map_or("-".into(), |p| p.to_string());
        println!(
            "{:<7} {:<8} {:<22} {:<8} {:<8} {:<6} {:<20} {}",
            s.id,
            role_list(&s.roles),
            s.addr,
            pid,
            state,
            protocol,
            build,
            stored
        );
        if let Some(line) = crate::server_cmd::status_note(&placement, s.id) {
            println!("{:<7} {line}", "");
        }
        if state == "up" {
            if has(Role::Cache) {
                println!("{:<7} {}", "", cache_line(&s.addr, &auth, timeouts));
            }
            if has(Role::Io) {
                if let Some(line) = lock_line(&s.addr, &auth, timeouts) {
                    println!("{:<7} {line}", "");
                }
            }
            if let (true, Ok(c)) = (has(Role::Meta), &connection) {
                if let Some(line) = commit_line(c) {
                    println!("{:<7} {line}", "");
                }
                println!("{:<7} {}", "", rebuild_line(c));
            }
            match metrics_url(&s.addr, &auth, timeouts) {
                Ok(Some(url)) => println!("{:<7} metrics {url}", ""),
                Ok(None) => println!("{:<7} metrics: none (no metrics_addr)", ""),
                Err(_) => {}
            }
        }
    }
    if refused {
        println!(
            "refused: this server does not accept the key {} (or could not prove it holds it): it belongs to another cluster, or its key was replaced",
            key_path.display()
        );
    }
    if mismatched {
        println!(
            "!: this server speaks another protocol version than this weft ({}): upgrade the older side",
            weft_proto::PROTOCOL_VERSION
        );
    }
    Ok(all_up)
}

/// The metadata manager's commit lag (`None`: a manager that predates the question).
pub(super) fn commit_line(connection: &Connection) -> Option<String> {
    match connection.call(&Request::CommitMetadata { wait: false }, &[]) {
        Ok((Response::Committed(c), _)) if c.interval_us == 0 => {
            Some("commits: every metadata operation is durable before it is answered".into())
        }
        Ok((Response::Committed(c), _)) => Some(format!(
            "commits: durable every {} ms and at fsync; lag {} operations (acknowledged, not yet durable), last durable commit {}",
            c.interval_us as f64 / 1000.0,
            c.seq.saturating_sub(c.durable_seq),
            match c.since_durable_ms {
                u64::MAX => "none since the start".to_string(),
                ms => format!("{ms} ms ago"),
            }
        )),
        _ => None,
    }
}

/// The metadata manager's rebuilder (`auto_rebuild`), from its metrics: pieces
/// pending, rebuilt and failed since it started, or that it is off.
pub(super) fn rebuild_line(connection: &Connection) -> String {
    let samples = match connection.call(&Request::Metrics { text: true }, &[]) {
        Ok((_, body)) => weft_metrics::parse::parse(&String::from_utf8_lossy(&body)).unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    let value = |name: &str| samples.iter().find(|s| s.name == name).map(|s| s.value as u64);
    let Some(pending) = value("weft_rebuild_pending_pieces") else {
        return "rebuilder: off (auto_rebuild): `weft rebuild` copies stale pieces of replicated files back"
            .into();
    };
    format!(
        "rebuilder: {pending} stale pieces waiting (for their server, or their turn); since the start {} pieces ({}) rebuilt, {} failed attempts",
        value("weft_rebuild_pieces_total").unwrap_or(0),
        human_bytes(value("weft_rebuild_bytes_total").unwrap_or(0)),
        value("weft_rebuild_failures_total").unwrap_or(0),
    )
}

/// True when no server of `config` has a pid file in `home` and yet its metadata
/// manager answers: the cluster runs, started by something other than `weft up`.
pub(super) fn answers_without_pids(home: &Path, config: &ClusterConfig, description: &Path) -> bool {
    if config.servers.iter().any(|s| pid_file(home, s.id).exists()) {
        return false;
    }
    let Ok(key) = ClusterKey::load(&config.key_path(description)) else {
        return false;
    };
    let timeouts = Timeouts {
        connect: Duration::from_secs(1),
        request: Duration::from_secs(2),
    };
    Connection::connect(
        &config.meta().addr,
        "weft down",
        &ClientAuth::cluster(key),
        timeouts,
    )
    .is_ok()
}

/// One cache manager's state for `weft status`.
/// The io server's extent-lock counts (atomic mode), or None from a server older than
/// extent locks.
pub(super) fn lock_line(addr: &str, auth: &ClientAuth, timeouts: Timeouts) -> Option<String> {
    let connection = Connection::connect(addr, "weft status", auth, timeouts).ok()?;
    match connection.call(&Request::LockStats, &[]) {
        Ok((Response::LockStats(st), _)) => Some(format!(
            "extent locks: {} requests, {} grants, {} conflicts, {} waits, {} held, {} lapsed",
            st.requests, st.grants, st.conflicts, st.waits, st.held, st.lapsed
        )),
        _ => None,
    }
}

pub(super) fn cache_line(addr: &str, auth: &ClientAuth, timeouts: Timeouts) -> String {
    let stats = Connection::connect(addr, "weft status", auth, timeouts)
        .ok()
        .and_then(|c| match c.call(&Request::CacheStats, &[]) {
            Ok((Response::CacheStats(st), _)) => Some(st),
            _ => None,
        });
    let Some(st) = stats else {
        return "cache: ?".into();
    };
    let lookups = st.hits + st.misses;
    let hit_rate = if lookups == 0 {
        "-".to_string()
    } else {
        format!("{:.1}%", 100.0 * st.hits as f64 / lookups as f64)
    };
    format!(
        "cache ({}): {} of {} cached in {} blocks, {} dirty; hits {} misses {} ({hit_rate}); \
         evictions {}; written back {} in {} blocks ({} full, {} partial), {} errors; fetched {}",
        st.policy,
        human_bytes(st.cached_bytes),
        human_bytes(st.capacity_bytes),
        st.blocks,
        human_bytes(st.dirty_bytes),
        st.hits,
        st.misses,
        st.evictions,
        human_bytes(st.write_back_bytes),
        st.write_backs,
        st.write_backs_full,
        st.write_backs.saturating_sub(st.write_backs_full),
        st.write_back_errors,
        human_bytes(st.fetched_bytes),
    )
}

/// A server's (protocol, build) columns: "1", "0.1.0 (git 1a2b3c4)"; "2!" for a server
/// that refused this weft's protocol version; "?" for what a server older than the
/// `ServerInfo` request cannot tell.
pub(super) fn server_versions(connection: &Result<std::sync::Arc<Connection>, RpcError>) -> (String, String) {
    match connection {
        Ok(c) => match c.server_info() {
            Ok(Some((protocol, build))) => (protocol.to_string(), build),
            // It answered the handshake, so it speaks this weft's protocol.
            Ok(None) => (weft_proto::PROTOCOL_VERSION.to_string(), "?".into()),
            Err(_) => ("?".into(), "?".into()),
        },
        Err(RpcError::ProtocolVersion { server_version, .. }) => (format!("{server_version}!"), "?".into()),
        Err(_) => ("-".into(), "-".into()),
    }
}

pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else if value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
