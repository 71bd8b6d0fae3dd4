//! `weft up`, `weft down`, `weft status`: a whole cluster on this machine, as background
//! `weftd` processes with their logs, pids and data under the cluster's home, and the
//! cluster key there (`cluster.key`, made before any server starts).

use anyhow::{bail, Context, Result};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weft_config::{ClusterConfig, Role, ServerEntry, CLUSTER_FILE_NAME, KEY_FILE_NAME};
use weft_proto::msg::{Request, Response};
use weft_rpc::{ClientAuth, ClusterKey, Connection, RpcError, Timeouts};

/// Most io servers `weft up` starts on one machine.
pub const IO_SERVERS_MAX: u32 = 64;
/// How long a starting server may take to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Most separate cache managers `weft up` starts on one machine.
pub const CACHE_SERVERS_MAX: u32 = 64;

/// Where `weft up` puts the cache tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CachePlacement {
    None,
    /// A cache role in every io server.
    Colocated,
    /// This many separate cache managers.
    Separate(u32),
}

impl std::str::FromStr for CachePlacement {
    type Err = String;
    fn from_str(s: &str) -> Result<CachePlacement, String> {
        match s {
            "none" => Ok(CachePlacement::None),
            "colocated" => Ok(CachePlacement::Colocated),
            n => match n.parse::<u32>() {
                Ok(0) => Ok(CachePlacement::None),
                Ok(k) if k <= CACHE_SERVERS_MAX => Ok(CachePlacement::Separate(k)),
                _ => Err(format!(
                    "--cache {s:?}: expected none, colocated, or a number of cache managers (1..={CACHE_SERVERS_MAX})"
                )),
            },
        }
    }
}

pub struct UpOptions {
    pub home: PathBuf,
    pub io_servers: u32,
    /// The description's `precreate` (objects per refill of the manager's pool).
    pub precreate: Option<u32>,
    pub stripe_size: u64,
    pub stripe_count: u32,
    pub cache: CachePlacement,
    /// The description's `[cache]` section (memory, policy, mapping, default mode).
    pub cache_settings: weft_config::CacheSettings,
    /// Whose identity requests act with (the description's `identity`).
    pub identity: weft_config::IdentityMode,
    /// The description's `capabilities` (off only for measuring their cost).
    pub capabilities: bool,
    /// The description's `capability_lifetime_ms`.
    pub capability_lifetime_ms: Option<u64>,
    /// The description's `lock_grace_ms`.
    pub lock_grace_ms: Option<u64>,
    /// The description's `commit_interval_ms`.
    pub commit_interval_ms: Option<u64>,
    /// Each server in its own network namespace behind a shaped link (see `netemu`).
    pub network: Option<weft_config::netemu::NetworkSpec>,
    /// The options given on the command line (long names, `io-servers` for `--io`):
    /// on an existing cluster, those that would shape it differently are refused.
    pub given: Vec<String>,
    /// Every server started gets this command's standard input and exits at its end
    /// (`weftd --exit-on-stdin-eof`): `--tie-to-stdin`.
    pub tie_to_stdin: bool,
}

/// The options of `weft up` that shape a new cluster and whose value differs from
/// the existing description's, as `--flag (asked X, cluster has Y)`: a restart cannot
/// apply them, and ignoring one silently (`--insecure-no-capabilities`, `--identity
/// munge`) would leave a user believing their cluster is what they asked for.
fn unappliable(options: &UpOptions, config: &ClusterConfig) -> Vec<String> {
    let io = config.servers.iter().filter(|s| s.has(Role::Io)).count() as u32;
    let cache_only = config
        .servers
        .iter()
        .filter(|s| s.has(Role::Cache) && !s.has(Role::Io))
        .count() as u32;
    let placement = if cache_only > 0 {
        CachePlacement::Separate(cache_only)
    } else if config
        .servers
        .iter()
        .any(|s| s.has(Role::Io) && s.has(Role::Cache))
    {
        CachePlacement::Colocated
    } else {
        CachePlacement::None
    };
    let show = |p: &CachePlacement| match p {
        CachePlacement::None => "none".to_owned(),
        CachePlacement::Colocated => "colocated".to_owned(),
        CachePlacement::Separate(n) => n.to_string(),
    };
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "default".into());
    let num = |v: Option<u64>| v.map_or_else(|| "default".into(), |n| n.to_string());
    let mut out = Vec::new();
    for flag in &options.given {
        let (asked, has) = match flag.as_str() {
            "io-servers" => (options.io_servers.to_string(), io.to_string()),
            "precreate" => (
                num(options.precreate.map(u64::from)),
                num(config.precreate.map(u64::from)),
            ),
            "stripe-size" => (options.stripe_size.to_string(), config.stripe_size.to_string()),
            "stripe-count" => (options.stripe_count.to_string(), config.stripe_count.to_string()),
            "cache" => (show(&options.cache), show(&placement)),
            "cache-memory" => (num(options.cache_settings.memory), num(config.cache.memory)),
            "cache-policy" => (opt(&options.cache_settings.policy), opt(&config.cache.policy)),
            "cache-mapping" => (opt(&options.cache_settings.mapping), opt(&config.cache.mapping)),
            "cache-default" => (opt(&options.cache_settings.default), opt(&config.cache.default)),
            "identity" => (
                format!("{:?}", options.identity).to_lowercase(),
                format!("{:?}", config.identity).to_lowercase(),
            ),
            "insecure-no-capabilities" => (
                format!("capabilities {}", if options.capabilities { "on" } else { "off" }),
                format!("capabilities {}", if config.capabilities { "on" } else { "off" }),
            ),
            "capability-lifetime-ms" => (
                num(options.capability_lifetime_ms),
                num(config.capability_lifetime_ms),
            ),
            "lock-grace-ms" => (num(options.lock_grace_ms), num(config.lock_grace_ms)),
            "commit-interval-ms" => (num(options.commit_interval_ms), num(config.commit_interval_ms)),
            _ => continue,
        };
        if asked != has {
            let name = if flag == "io-servers" { "io" } else { flag.as_str() };
            out.push(format!("--{name} (asked {asked}, the cluster has {has})"));
        }
    }
    out
}

fn run_dir(home: &Path) -> PathBuf {
    home.join("run")
}
fn pid_file(home: &Path, id: u32) -> PathBuf {
    run_dir(home).join(format!("server-{id}.pid"))
}
fn log_file(home: &Path, id: u32) -> PathBuf {
    home.join("logs").join(format!("server-{id}.log"))
}

/// The Unix socket of io server `id`, for clients on this machine; none when the path
/// would be too long for a socket address.
fn socket_path(home: &Path, id: u32) -> Option<PathBuf> {
    let path = run_dir(home).join(format!("server-{id}.sock"));
    let absolute = if path.is_absolute() {
        path
    } else {
        std::env::current_dir().ok()?.join(path)
    };
    (absolute.as_os_str().len() <= weft_rpc::stream::UNIX_PATH_BYTES_MAX).then_some(absolute)
}

/// The `weftd` binary: next to this executable, else on PATH.
pub fn weftd_path() -> PathBuf {
    if let Ok(exe) = std::env::current_exe() {
        let sibling = exe.with_file_name("weftd");
        if sibling.exists() {
            return sibling;
        }
    }
    PathBuf::from("weftd")
}

/// The pid of a live weftd recorded for server `id`, if any.
pub fn running_pid(home: &Path, id: u32) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(pid_file(home, id))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    // A recycled pid belongs to some other program: check it is a weftd.
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let is_weftd = cmdline
        .split(|b| *b == 0)
        .next()
        .is_some_and(|argv0| argv0.ends_with(b"weftd"));
    is_weftd.then_some(pid)
}

/// The cluster key of `home`, made now if it has none (a home from before keys).
fn ensure_key(home: &Path) -> Result<PathBuf> {
    let path = home.join(KEY_FILE_NAME);
    let (_, created) = ClusterKey::load_or_create(&path)?;
    if created {
        println!("created the cluster key {} (mode 0600)", path.display());
    }
    Ok(path)
}

fn role_names(entry: &ServerEntry) -> String {
    role_list(&entry.roles)
}

/// Roles as weftd's `--role` takes them: "io,cache".
fn role_list(roles: &[Role]) -> String {
    roles.iter().map(|r| r.name()).collect::<Vec<_>>().join(",")
}

/// Starts one weftd in the background, detached from this terminal's session, in the
/// network namespace `netns` if given. `tied`: the server reads this process's standard
/// input and exits at its end, so that it ends with whoever holds the other end of it
/// (the test harness's pipe), however that process dies.
fn spawn_server(
    home: &Path,
    id: u32,
    args: &[String],
    netns: Option<&std::fs::File>,
    tied: bool,
) -> Result<i32> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_file(home, id))
        .with_context(|| format!("opening log {}", log_file(home, id).display()))?;
    let mut command = Command::new(weftd_path());
    command.args(args);
    if tied {
        command.arg("--exit-on-stdin-eof").stdin(Stdio::inherit());
    } else {
        command.stdin(Stdio::null());
    }
    command.stdout(log.try_clone()?).stderr(log);
    let netns_fd = netns.map(std::os::unix::io::AsRawFd::as_raw_fd);
    // SAFETY: setsid and setns are async-signal-safe; setsid detaches the server from
    // our terminal so that Ctrl-C in this shell does not stop the cluster; the
    // namespace's descriptor stays open in the child until exec.
    unsafe {
        command.pre_exec(move || {
            libc::setsid();
            if let Some(fd) = netns_fd {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = command
        .spawn()
        .with_context(|| format!("starting {} (is weftd built?)", weftd_path().display()))?;
    let pid = child.id() as i32;
    std::fs::write(pid_file(home, id), pid.to_string())?;
    Ok(pid)
}

/// Waits for a server's ready file (its bound address), failing early if it died.
fn wait_ready(home: &Path, id: u32, pid: i32, ready: &Path) -> Result<String> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(addr) = std::fs::read_to_string(ready) {
            return Ok(addr.trim().to_owned());
        }
        // SAFETY: kill with signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0 && !is_zombie(pid);
        if !alive || Instant::now() > deadline {
            bail!(
                "server {id} {} ; its log {} ends with:\n{}",
                if alive {
                    "did not become ready in time"
                } else {
                    "exited during startup"
                },
                log_file(home, id).display(),
                log_tail(home, id)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

fn log_tail(home: &Path, id: u32) -> String {
    let text = std::fs::read_to_string(log_file(home, id)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

pub fn up(options: &UpOptions) -> Result<()> {
    let home = &options.home;
    let description = home.join(CLUSTER_FILE_NAME);
    if description.exists() {
        if options.network.is_some()
            && weft_config::netemu::NetworkEmulation::load(home)
                .map_err(anyhow::Error::msg)?
                .is_none()
        {
            bail!(
                "{} already holds a cluster on this machine's loopback: --emulate-network applies to a new \
                 cluster (another --home), not to a restart",
                home.display()
            );
        }
        let config = ClusterConfig::load(&description)?;
        let refused = unappliable(options, &config);
        if !refused.is_empty() {
            bail!(
                "{} already holds a cluster, and `weft up` there restarts it as it was made; it cannot apply {}. \
                 For a cluster with these settings use another --home, or stop this one (`weft down`) and remove \
                 its home (its files go with it)",
                home.display(),
                refused.join(", ")
            );
        }
        return restart(home, options.tie_to_stdin);
    }
    if options.io_servers == 0 || options.io_servers > IO_SERVERS_MAX {
        bail!("--io must be between 1 and {IO_SERVERS_MAX}");
    }
    if options.cache == CachePlacement::None
        && options.cache_settings != weft_config::CacheSettings::default()
    {
        bail!("the --cache-* options set up a cache tier: add --cache colocated or --cache N");
    }
    if options.stripe_count > options.io_servers {
        bail!(
            "--stripe-count {} is more than the {} io servers",
            options.stripe_count,
            options.io_servers
        );
    }
    if home.exists() && !home.is_dir() {
        bail!(
            "the cluster home {} is not a directory (--home, else $WEFT_HOME, else ~/.weft)",
            home.display()
        );
    }
    for dir in ["logs", "run", "data"] {
        std::fs::create_dir_all(home.join(dir))
            .with_context(|| format!("creating {}", home.join(dir).display()))?;
    }
    let key = ensure_key(home)?;
    // The servers' own key for capabilities: clients never read it, so holding the
    // cluster key is not enough to make one.
    let capability_key = home.join(weft_config::CAPABILITY_KEY_FILE_NAME);
    ClusterKey::load_or_create(&capability_key)?;
    let mut started: Vec<i32> = Vec::new();
    let separate = match options.cache {
        CachePlacement::Separate(n) => n,
        _ => 0,
    };
    // The emulated network first: without it nothing starts.
    let (network, mut network_lock) = match options.network {
        Some(spec) => {
            let ids: Vec<u32> = (0..=options.io_servers + separate).collect();
            let (emu, lock) = crate::netemu::create(home, spec, &ids, options.io_servers)?;
            (Some(emu), Some(lock))
        }
        None => (None, None),
    };
    // Where server `id` listens, and the namespace it runs in.
    let listen = |id: u32| match &network {
        Some(emu) => format!("{}:0", crate::netemu::address(emu, id)),
        None => "127.0.0.1:0".to_owned(),
    };
    let namespace = |id: u32| -> Result<Option<std::fs::File>> {
        network
            .as_ref()
            .map(|emu| crate::netemu::namespace_file(emu, id))
            .transpose()
    };
    let result = (|| -> Result<ClusterConfig> {
        let mut servers = Vec::new();
        for id in 1..=options.io_servers + separate {
            let roles: Vec<Role> = if id > options.io_servers {
                vec![Role::Cache]
            } else if options.cache == CachePlacement::Colocated {
                vec![Role::Io, Role::Cache]
            } else {
                vec![Role::Io]
            };
            let ready = run_dir(home).join(format!("server-{id}.addr"));
            std::fs::remove_file(&ready).ok();
            let data = home.join("data").join(format!("server-{id}"));
            let mut args: Vec<String> = vec![
                "--role".into(),
                role_list(&roles),
                "--id".into(),
                id.to_string(),
                "--data".into(),
                data.display().to_string(),
                "--listen".into(),
                listen(id),
                "--ready-file".into(),
                ready.display().to_string(),
                "--key".into(),
                key.display().to_string(),
                // Metrics on a free port of its address; recorded in the description below.
                "--metrics-addr".into(),
                listen(id),
            ];
            if roles.contains(&Role::Cache) {
                // The description is written once every server is up; the cache role
                // reads the io servers' addresses from it when it first needs them.
                args.extend(["--cluster-file".into(), description.display().to_string()]);
                if let Some(memory) = options.cache_settings.memory {
                    args.extend(["--cache-memory".into(), memory.to_string()]);
                }
                if let Some(policy) = &options.cache_settings.policy {
                    args.extend(["--cache-policy".into(), policy.clone()]);
                }
                // Server-aligned cache managers are delegates: fully dirty blocks are
                // evicted first.
                if options.cache_settings.mapping.as_deref() == Some("aligned") {
                    args.push("--delegate".into());
                }
            }
            if !options.capabilities {
                args.push("--insecure-no-capabilities".into());
            }
            args.extend(["--capability-key".into(), capability_key.display().to_string()]);
            // Behind an emulated network, clients must take it: no Unix socket.
            let socket = socket_path(home, id).filter(|_| network.is_none());
            if let Some(socket) = &socket {
                args.extend(["--socket".into(), socket.display().to_string()]);
            }
            let pid = spawn_server(home, id, &args, namespace(id)?.as_ref(), options.tie_to_stdin)?;
            started.push(pid);
            servers.push((id, pid, ready, roles));
        }
        let mut entries = vec![ServerEntry {
            id: 0,
            roles: vec![Role::Meta],
            addr: listen(0),
            data_dir: None,
            // Local clients reach the manager on it: limits per user, not per address.
            socket: socket_path(home, 0).filter(|_| network.is_none()),
            metrics_addr: Some(listen(0)),
        }];
        let auth = ClientAuth::cluster(ClusterKey::load(&key)?);
        for (id, pid, ready, roles) in &servers {
            let addr = wait_ready(home, *id, *pid, ready)?;
            entries.push(ServerEntry {
                id: *id,
                roles: roles.clone(),
                metrics_addr: metrics_address(&addr, &auth),
                addr,
                data_dir: None,
                socket: socket_path(home, *id).filter(|_| network.is_none()),
            });
        }
        let mut config = ClusterConfig {
            key_file: None,
            identity: options.identity,
            munge_trusted_uids: Vec::new(),
            munge_socket: None,
            capabilities: options.capabilities,
            capability_lifetime_ms: options.capability_lifetime_ms,
            lock_grace_ms: options.lock_grace_ms,
            commit_interval_ms: options.commit_interval_ms,
            replay_window_ms: None,
            capability_key_file: Some(weft_config::CAPABILITY_KEY_FILE_NAME.into()),
            cache: options.cache_settings.clone(),
            name: "weft".into(),
            stripe_size: options.stripe_size,
            stripe_count: options.stripe_count,
            redundancy: None,
            precreate: options.precreate,
            servers: entries,
        };
        config.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
        config.save(&description)?;
        let ready = run_dir(home).join("server-0.addr");
        std::fs::remove_file(&ready).ok();
        let args: Vec<String> = vec![
            "--config".into(),
            description.display().to_string(),
            "--id".into(),
            "0".into(),
            "--listen".into(),
            listen(0),
            "--ready-file".into(),
            ready.display().to_string(),
        ];
        let pid = spawn_server(home, 0, &args, namespace(0)?.as_ref(), options.tie_to_stdin)?;
        started.push(pid);
        config.servers[0].addr = wait_ready(home, 0, pid, &ready)?;
        config.servers[0].metrics_addr = metrics_address(&config.servers[0].addr, &auth);
        config.save(&description)?;
        Ok(config)
    })();
    match result {
        Ok(config) => {
            drop(network_lock);
            println!("Weft cluster \"{}\" is up (home {})", config.name, home.display());
            if let Some(emu) = &network {
                println!("{}", emu.describe());
            }
            print_servers(home, &config);
            let count = if config.stripe_count == 0 {
                config.io_servers().count() as u32
            } else {
                config.stripe_count
            };
            println!(
                "default layout: {} stripes over {count} io servers",
                human_bytes(config.stripe_size)
            );
            let managers = config.cache_managers().len();
            if managers > 0 {
                println!(
                    "cache tier: {managers} cache managers ({}, {} mapping, {} each); new files are {} by default",
                    match options.cache {
                        CachePlacement::Colocated => "one in each io server: disk-directed",
                        _ => "separate processes: two-phase",
                    },
                    config.cache_mapping().map(|m| m.name()).unwrap_or("?"),
                    human_bytes(config.cache.memory.unwrap_or(weft_config::CACHE_MEMORY_BYTES_DEFAULT)),
                    config.cache_default_mode().map(|m| m.name()).unwrap_or("?"),
                );
            }
            println!("logs in {}/logs; stop with `weft down`", home.display());
            Ok(())
        }
        Err(e) => {
            for &pid in &started {
                // SAFETY: signalling processes we started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::fs::remove_file(&description).ok();
            if let Some(emu) = &network {
                // The namespaces go only once their servers are gone.
                for pid in &started {
                    // SAFETY: signal 0 only checks that the process exists.
                    while !is_zombie(*pid) && unsafe { libc::kill(*pid, 0) } == 0 {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
                if let Err(removing) = crate::netemu::remove(emu, network_lock.take()) {
                    eprintln!("weft: {removing:#}");
                }
                std::fs::remove_file(home.join(weft_config::netemu::NETEMU_FILE_NAME)).ok();
            }
            Err(e.context("weft up failed; the servers it started were stopped"))
        }
    }
}

/// The `host:port` of the metrics endpoint of the server at `addr`, as it says (kept in
/// the description, so that a restart serves at the same address).
fn metrics_address(addr: &str, auth: &ClientAuth) -> Option<String> {
    let url = metrics_url(addr, auth, status_timeouts()).ok()??;
    let rest = url.strip_prefix("http://")?;
    Some(rest.split('/').next()?.to_owned())
}

/// The server's metrics URL: `Ok(None)` when it serves none (or is older than metrics).
fn metrics_url(addr: &str, auth: &ClientAuth, timeouts: Timeouts) -> Result<Option<String>, RpcError> {
    let connection = Connection::connect(addr, "weft status", auth, timeouts)?;
    match connection.call(&Request::Metrics { text: false }, &[]) {
        Ok((Response::Metrics { url }, _)) => Ok((!url.is_empty()).then_some(url)),
        Ok(_) => Ok(None),
        Err(RpcError::Remote { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

fn status_timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(2),
        request: Duration::from_secs(5),
    }
}

/// Starts the servers of an existing description that are not running, at the same
/// addresses and with their data: `weft up` after `weft down` (or a crash).
fn restart(home: &Path, tied: bool) -> Result<()> {
    let description = home.join(CLUSTER_FILE_NAME);
    let config = ClusterConfig::load(&description)?;
    std::fs::create_dir_all(run_dir(home))?;
    std::fs::create_dir_all(home.join("logs"))?;
    if config.key_file.is_none() {
        ensure_key(home)?;
    }
    let down: Vec<&ServerEntry> = config
        .servers
        .iter()
        .filter(|s| running_pid(home, s.id).is_none())
        .collect();
    if down.is_empty() {
        bail!(
            "a Weft cluster is already running in {} (meta at {}); `weft status` shows it, `weft down` stops it",
            home.display(),
            config.meta().addr
        );
    }
    // A home made before the servers had a key of their own signs capabilities with a
    // key derived from the cluster key, which every client holds. When every server
    // starts anew, they can take their own key without disturbing anyone's
    // capabilities (none outlives its servers' restart by more than its lifetime, and
    // clients renew refused ones).
    if down.len() == config.servers.len() && config.key_file.is_none() && config.capability_key_file.is_none()
    {
        let path = home.join(weft_config::CAPABILITY_KEY_FILE_NAME);
        ClusterKey::load_or_create(&path)?;
        let mut upgraded = config.clone();
        upgraded.capability_key_file = Some(weft_config::CAPABILITY_KEY_FILE_NAME.into());
        upgraded.save(&description)?;
        println!(
            "weft up: this cluster's servers now sign capabilities with their own key ({}), which clients do not hold",
            path.display()
        );
        return restart(home, tied);
    }
    // An emulated network: what is missing of it is made again first.
    let mut network = weft_config::netemu::NetworkEmulation::load(home).map_err(anyhow::Error::msg)?;
    let _network_lock = match &mut network {
        Some(emu) => {
            let ids: Vec<u32> = down.iter().map(|s| s.id).collect();
            Some(crate::netemu::ensure(home, emu, &ids)?)
        }
        None => None,
    };
    // io servers first, so that the manager's first requests find them.
    let mut order = down.clone();
    order.sort_by_key(|s| s.has(Role::Meta));
    for entry in order {
        let ready = run_dir(home).join(format!("server-{}.addr", entry.id));
        std::fs::remove_file(&ready).ok();
        let args: Vec<String> = vec![
            "--config".into(),
            description.display().to_string(),
            "--id".into(),
            entry.id.to_string(),
            "--ready-file".into(),
            ready.display().to_string(),
        ];
        let netns = match &network {
            Some(emu) => Some(crate::netemu::namespace_file(emu, entry.id)?),
            None => None,
        };
        let pid = spawn_server(home, entry.id, &args, netns.as_ref(), tied)?;
        wait_ready(home, entry.id, pid, &ready)?;
    }
    println!(
        "Weft cluster \"{}\" restarted from {} ({} servers started)",
        config.name,
        description.display(),
        down.len()
    );
    if let Some(emu) = &network {
        println!("{}", emu.describe());
    }
    print_servers(home, &config);
    Ok(())
}

fn print_servers(home: &Path, config: &ClusterConfig) {
    for s in &config.servers {
        let pid = running_pid(home, s.id).map_or("-".to_string(), |p| p.to_string());
        println!(
            "  server {:<3} {:<8} {:<22} pid {}",
            s.id,
            role_names(s),
            s.addr,
            pid
        );
    }
}

pub fn down(home: &Path) -> Result<()> {
    let description = home.join(CLUSTER_FILE_NAME);
    if !description.exists() {
        bail!(
            "no Weft cluster in {} (no {CLUSTER_FILE_NAME}); nothing to stop",
            home.display()
        );
    }
    let config = ClusterConfig::load(&description)?;
    let running: Vec<(u32, i32)> = config
        .servers
        .iter()
        .filter_map(|s| running_pid(home, s.id).map(|p| (s.id, p)))
        .collect();
    if running.is_empty() {
        if answers_without_pids(home, &config, &description) {
            bail!(
                "the Weft cluster in {} is running but was not started by `weft up` here (no pid files: \
                 an MPI job's `weftd --mpi`, or servers started by hand): stop it through what started it \
                 (end the mpirun job), or stop each weftd on its machine",
                home.display()
            );
        }
        println!(
            "the Weft cluster in {} is not running; nothing to stop",
            home.display()
        );
        return remove_network(home);
    }
    // Separate cache managers first: on SIGTERM each writes its dirty blocks back to the
    // io servers, which must still be up to take them. Then the rest (a colocated cache
    // manager writes back into its own process's io role).
    let cache_only = |id: u32| {
        config
            .servers
            .iter()
            .any(|s| s.id == id && s.roles.contains(&Role::Cache) && !s.roles.contains(&Role::Io))
    };
    let (first, then): (Vec<_>, Vec<_>) = running.iter().partition(|(id, _)| cache_only(*id));
    for group in [first, then] {
        stop_servers(home, &group);
    }
    println!(
        "stopped {} Weft servers in {} (data kept; `weft up` starts them again)",
        running.len(),
        home.display()
    );
    remove_network(home)
}

/// Stops `servers` (id, pid) with SIGTERM and waits for them: a server with dirty cache
/// blocks writes them back first, so it gets up to a minute (then SIGKILL, as for one
/// that does not answer), and a wait over a second says what it waits for.
fn stop_servers(home: &Path, servers: &[(u32, i32)]) {
    for (_, pid) in servers {
        // SAFETY: signalling weftd processes recorded in our pid files.
        unsafe { libc::kill(*pid, libc::SIGTERM) };
    }
    let started = Instant::now();
    let deadline = started + STOP_WAIT;
    let mut told = false;
    for (id, pid) in servers {
        while running_pid(home, *id).is_some() && !is_zombie(*pid) && Instant::now() < deadline {
            if !told && started.elapsed() > Duration::from_secs(1) {
                eprintln!("waiting for server {id} to write its dirty cache blocks back and exit...");
                told = true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if running_pid(home, *id).is_some() && !is_zombie(*pid) {
            eprintln!(
                "server {id} did not exit within {} s of SIGTERM; killed (data it had not written back is lost)",
                STOP_WAIT.as_secs()
            );
            // SAFETY: as above.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        std::fs::remove_file(pid_file(home, *id)).ok();
    }
}

/// Longest wait for a server to exit after SIGTERM.
const STOP_WAIT: Duration = Duration::from_secs(60);

/// Removes the emulated network of the cluster in `home`, if it has one (its record
/// stays, so that `weft up` makes it again).
fn remove_network(home: &Path) -> Result<()> {
    let Some(emu) = weft_config::netemu::NetworkEmulation::load(home).map_err(anyhow::Error::msg)? else {
        return Ok(());
    };
    crate::netemu::remove(&emu, None)?;
    println!(
        "removed the emulated network weft-{} (namespaces, links and their tc disciplines)",
        emu.cluster_id
    );
    Ok(())
}

/// `weft down --stale-networks`: removes the emulated networks whose servers are all gone.
/// `weft down` with $WEFT_META set and no --home: stops the cluster of the default
/// home when it is the one $WEFT_META names; any other cluster was not started by
/// `weft up` here, so say how to stop it instead of "nothing to stop".
pub fn down_meta(home: &Path, meta: &str) -> Result<()> {
    let description = home.join(CLUSTER_FILE_NAME);
    if let Ok(config) = ClusterConfig::load(&description) {
        if config.meta().addr == meta {
            return down(home);
        }
    }
    bail!(
        "WEFT_META={meta} names a cluster `weft up` did not start in {}: `weft down` stops only \
         a cluster it started (--home DIR, $WEFT_HOME or ~/.weft). Stop servers run as services \
         with `systemctl stop weft.target` on each machine, an MPI job's servers by ending the job, \
         and servers started by hand with SIGTERM to each weftd (unset WEFT_META to stop the \
         home's cluster)",
        home.display()
    )
}

pub fn down_stale_networks() -> Result<()> {
    let removed = crate::netemu::sweep()?;
    if removed.is_empty() {
        println!("no stale emulated network");
    } else {
        for id in removed {
            println!("removed the stale emulated network weft-{id}");
        }
    }
    Ok(())
}

/// A server as `weft status` lists it.
struct Listed {
    id: u32,
    roles: Vec<Role>,
    addr: String,
    pid: Option<i32>,
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

/// Prints the servers of the cluster; true when all are up. With `web`, prints the
/// status page's URL instead.
pub fn status(of: &StatusOf, web: bool) -> Result<bool> {
    let mut trusted: Vec<u32> = Vec::new();
    let mut capabilities: Option<String> = None;
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
            capabilities = Some(if !config.capabilities {
                "capabilities: OFF (--insecure-no-capabilities: every key holder may read and write every file by inode number)".into()
            } else {
                format!(
                    "capabilities: io servers and cache managers serve a file's bytes only with a capability the manager grants after its permission check ({} s lifetime; chmod/chown revoke at once), signed with {}",
                    config
                        .capability_lifetime_ms
                        .unwrap_or(weft_rpc::capability::LIFETIME_DEFAULT_MS)
                        / 1000,
                    match config.capability_key_path(&description) {
                        Some(path) => format!("the servers-only key {}", path.display()),
                        None => "a key derived from the cluster key (every key holder can make capabilities)".into(),
                    }
                )
            });
            let servers = config
                .servers
                .iter()
                .map(|s| Listed {
                    id: s.id,
                    roles: s.roles.clone(),
                    addr: s.addr.clone(),
                    pid: running_pid(home, s.id),
                })
                .collect();
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
            (
                name,
                key_path,
                network,
                servers,
                format!("metadata manager at WEFT_META={meta}"),
                None,
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
            let owner = std::fs::metadata(&key_path).map_or("?".into(), |m| m.uid().to_string());
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
fn commit_line(connection: &Connection) -> Option<String> {
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

/// True when no server of `config` has a pid file in `home` and yet its metadata
/// manager answers: the cluster runs, started by something other than `weft up`.
fn answers_without_pids(home: &Path, config: &ClusterConfig, description: &Path) -> bool {
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
fn lock_line(addr: &str, auth: &ClientAuth, timeouts: Timeouts) -> Option<String> {
    let connection = Connection::connect(addr, "weft status", auth, timeouts).ok()?;
    match connection.call(&Request::LockStats, &[]) {
        Ok((Response::LockStats(st), _)) => Some(format!(
            "extent locks: {} requests, {} grants, {} conflicts, {} waits, {} held, {} lapsed",
            st.requests, st.grants, st.conflicts, st.waits, st.held, st.lapsed
        )),
        _ => None,
    }
}

fn cache_line(addr: &str, auth: &ClientAuth, timeouts: Timeouts) -> String {
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
fn server_versions(connection: &Result<std::sync::Arc<Connection>, RpcError>) -> (String, String) {
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
