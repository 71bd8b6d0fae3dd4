//! `weft up`, `weft down`, `weft status`: a whole cluster on this machine, as background
//! `weftd` processes with their logs, pids and data under the cluster's home, and the
//! cluster key there (`cluster.key`, made before any server starts). `weft status` is in
//! `status.rs`.

use anyhow::{bail, Context, Result};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weft_config::{ClusterConfig, Role, ServerEntry, CLUSTER_FILE_NAME, KEY_FILE_NAME};
use weft_proto::msg::{Request, Response};
use weft_rpc::{ClientAuth, ClusterKey, Connection, RpcError, Timeouts};

mod status;

use status::{answers_without_pids, metrics_address};
pub use status::{human_bytes, status, StatusOf};

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
    /// The description's `auto_rebuild` ("off" or a rate).
    pub auto_rebuild: Option<String>,
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
            "auto-rebuild" => (opt(&options.auto_rebuild), opt(&config.auto_rebuild)),
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

/// The first arguments of a new server `id` of `weft up` (before the description
/// exists): roles, data directory, address, ready file, key and metrics address.
fn new_server_args(
    home: &Path,
    id: u32,
    roles: &[Role],
    key: &Path,
    listen: &str,
    ready: &Path,
) -> Vec<String> {
    std::fs::remove_file(ready).ok();
    let data = home.join("data").join(format!("server-{id}"));
    vec![
        "--role".into(),
        role_list(roles),
        "--id".into(),
        id.to_string(),
        "--data".into(),
        data.display().to_string(),
        "--listen".into(),
        listen.to_owned(),
        "--ready-file".into(),
        ready.display().to_string(),
        "--key".into(),
        key.display().to_string(),
        // Metrics on a free port of its address; recorded in the description.
        "--metrics-addr".into(),
        listen.to_owned(),
    ]
}

/// The capability and socket arguments of a new server of `weft up`.
fn secure_server_args(
    args: &mut Vec<String>,
    capabilities: bool,
    capability_key: &Path,
    socket: Option<&Path>,
) {
    if !capabilities {
        args.push("--insecure-no-capabilities".into());
    }
    args.extend(["--capability-key".into(), capability_key.display().to_string()]);
    if let Some(socket) = socket {
        args.extend(["--socket".into(), socket.display().to_string()]);
    }
}

/// An io server started in the home of a running `weft up` cluster for `weft server
/// add`, not yet in its description.
pub struct Started {
    pub entry: ServerEntry,
    pid: i32,
}

/// Starts io server `id` in `home` as `weft up` starts its io servers (data directory,
/// log, pid file, Unix socket, metrics), and waits until it listens. `tied`: as `weft
/// up --tie-to-stdin`.
pub fn start_io_server(home: &Path, id: u32, tied: bool) -> Result<Started> {
    let description = home.join(CLUSTER_FILE_NAME);
    let config = ClusterConfig::load(&description)?;
    if weft_config::netemu::NetworkEmulation::load(home)
        .map_err(anyhow::Error::msg)?
        .is_some()
    {
        bail!("the cluster in {} runs behind an emulated network: start the new io server yourself and give --addr", home.display());
    }
    if config.servers.iter().any(|s| s.id == id) {
        bail!("server {id} is in {} already", description.display());
    }
    if running_pid(home, id).is_some() {
        bail!("a weftd runs as server {id} of {} already", home.display());
    }
    let key = config.key_path(&description);
    let capability_key = config
        .capability_key_path(&description)
        .context("this cluster's servers sign capabilities with a key derived from the cluster key: restart it with `weft down; weft up` first")?;
    let roles = [Role::Io];
    let ready = run_dir(home).join(format!("server-{id}.addr"));
    let mut args = new_server_args(home, id, &roles, &key, "127.0.0.1:0", &ready);
    let socket = socket_path(home, id);
    secure_server_args(&mut args, config.capabilities, &capability_key, socket.as_deref());
    let pid = spawn_server(home, id, &args, None, tied)?;
    let addr = match wait_ready(home, id, pid, &ready) {
        Ok(addr) => addr,
        Err(e) => {
            stop_started(home, id, pid);
            return Err(e);
        }
    };
    let auth = ClientAuth::cluster(ClusterKey::load(&key)?);
    let entry = ServerEntry {
        id,
        roles: roles.to_vec(),
        metrics_addr: metrics_address(&addr, &auth),
        addr,
        data_dir: None,
        socket,
    };
    Ok(Started { entry, pid })
}

impl Started {
    /// The manager took the server: the description lists it from now on, so that
    /// `weft down` stops it and `weft up` starts it again.
    pub fn keep(self, home: &Path) -> Result<()> {
        let description = home.join(CLUSTER_FILE_NAME);
        let mut config = ClusterConfig::load(&description)?;
        config.servers.push(self.entry);
        config.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(config.save(&description)?)
    }

    /// The manager refused the server: it stops (its empty data directory stays).
    pub fn discard(self, home: &Path) {
        stop_started(home, self.entry.id, self.pid);
    }
}

fn stop_started(home: &Path, id: u32, pid: i32) {
    // SAFETY: signalling the weftd this command started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    while !is_zombie(pid) && unsafe { libc::kill(pid, 0) } == 0 {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::remove_file(pid_file(home, id)).ok();
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
            let mut args = new_server_args(home, id, &roles, &key, &listen(id), &ready);
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
            // Behind an emulated network, clients must take it: no Unix socket.
            let socket = socket_path(home, id).filter(|_| network.is_none());
            secure_server_args(
                &mut args,
                options.capabilities,
                &capability_key,
                socket.as_deref(),
            );
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
            auto_rebuild: options.auto_rebuild.clone(),
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
