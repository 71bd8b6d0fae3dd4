//! `weftd`: one server binary carrying the meta and/or io roles. Thin: it reads the
//! cluster description or flags, opens each role's store, and serves.

mod launch;
mod roles;

use anyhow::{bail, Context, Result};
use clap::Parser;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use weft_config::{ClusterConfig, Role, ServerEntry};
use weft_layout::ServerId;
use weft_rpc::{ServerIdentity, ServerLimits};

#[derive(Parser, Debug)]
#[command(
    name = "weftd",
    version = weft_build_info::version!(),
    about = "The Weft server: metadata manager (meta role), I/O daemon (io role), cache manager (cache role).",
    long_about = "The Weft server: metadata manager (meta role), I/O daemon (io role) and/or cache manager \
(cache role: a share of the cluster's cooperative cache; with the io role in the same process, it caches that \
server's stripes and reaches them without a socket).\n\n\
Most users never start weftd by hand: `weft up` starts a whole cluster on this machine.\n\n\
Three ways to run it:\n\
  weftd --config cluster.toml --id N      server N of a cluster description (one per machine)\n\
  weftd --role io --data DIR [--listen 127.0.0.1:0] [--ready-file F]\n\
                                          a standalone server; F receives the bound address\n\
  weftd --role cache|io,cache --cluster-file cluster.toml --data DIR ...\n\
                                          a standalone cache manager (alone, or in an io server)\n\
  mpirun -np K weftd --mpi --home DIR     a job-scoped cluster: rank 0 meta, the other ranks io with a\n\
                                          colocated cache manager each (--mpi-cache none: without;\n\
                                          --cache-ranks N: the last N ranks cache managers only);\n\
                                          writes DIR/cluster.toml for clients (WEFT_HOME=DIR)"
)]
struct Args {
    /// Cluster description file (TOML); use with --id.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// This server's id in the cluster description (or the id to report when standalone).
    #[arg(long, value_name = "N")]
    id: Option<u32>,
    /// Roles when standalone: meta, io, or both ("meta,io").
    #[arg(long, value_delimiter = ',', value_name = "ROLES")]
    role: Vec<String>,
    /// Address to listen on (default 127.0.0.1:0 standalone; with --config it overrides
    /// the description's address). Port 0 picks a free port.
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,
    /// Data directory (objects for io, the metadata database for meta).
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Home directory of the cluster (data and logs when not given elsewhere).
    #[arg(long, value_name = "DIR")]
    home: Option<PathBuf>,
    /// Write the bound address to this file once the server is ready to serve.
    #[arg(long, value_name = "FILE")]
    ready_file: Option<PathBuf>,
    /// Launch inside an MPI job (rank 0 meta, other ranks io); requires --home.
    #[arg(long)]
    mpi: bool,
    /// With --mpi: the host name or address this rank listens on and advertises
    /// ("auto" = this machine's host name). Default 127.0.0.1 (single machine).
    #[arg(long, default_value = "127.0.0.1", value_name = "HOST")]
    host: String,
    /// With --mpi: `colocated` (the default) gives every io rank a cache manager that
    /// caches its own stripes (disk-directed I/O); `none` starts no cache tier (unless
    /// --cache-ranks).
    #[arg(long, default_value = "colocated", value_name = "colocated|none")]
    mpi_cache: String,
    /// With --mpi: the last N ranks are cache managers only (Clusterfile's separate cache
    /// managers; blocks then hash over all cache managers).
    #[arg(long, default_value_t = 0, value_name = "N")]
    cache_ranks: u32,
    /// Also listen on this Unix socket, for clients on this machine (with --config, the
    /// description's `socket` is used unless this is given).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Worker threads handling requests.
    #[arg(long, default_value_t = 16, value_name = "N")]
    workers: usize,
    /// Standalone cache role: the cluster description to find the io servers in, read
    /// when first needed (it may be written after this server starts, as `weft up` does).
    #[arg(long, value_name = "FILE")]
    cluster_file: Option<PathBuf>,
    /// Cache role: most bytes of file data held (suffixes K, M, G); default: the
    /// description's [cache] memory, else 512M.
    #[arg(long, value_name = "BYTES", value_parser = parse_size_arg)]
    cache_memory: Option<u64>,
    /// Cache role: replacement policy (lru, lfu, fifo, arc, s3fifo); default: the
    /// description's [cache] policy, else arc.
    #[arg(long, value_name = "POLICY")]
    cache_policy: Option<String>,
    /// Cache role, collective-I/O-aware reads: a block an aggregated read fetched but no
    /// process asked for is kept at the cold end of the policy (cold) or not at all
    /// (none).
    #[arg(long, default_value = "cold", value_name = "cold|none")]
    cache_cio_unrequested: String,
}

fn parse_size_arg(s: &str) -> Result<u64, String> {
    weft_config::parse_size(s)
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("weftd: error: {e:#}");
        std::process::exit(1);
    }
}

/// What one server process needs to start.
pub struct Plan {
    pub id: ServerId,
    pub roles: Vec<Role>,
    pub listen: String,
    pub data_dir: PathBuf,
    /// The whole cluster (the meta role serves it to clients).
    pub cluster: Option<ClusterConfig>,
    /// A Unix socket to serve on as well, for clients on this machine.
    pub socket: Option<PathBuf>,
    /// Where the description will appear when `cluster` is not known at start (io and
    /// cache ranks of an MPI launch): the cache role reads io servers' addresses there.
    pub cluster_file: Option<PathBuf>,
    /// Cache role: memory bound and replacement policy, overriding the description.
    pub cache_memory: Option<u64>,
    pub cache_policy: Option<String>,
    /// Cache role: `cold` or `none` (see `--cache-cio-unrequested`).
    pub cache_cio_unrequested: String,
}

fn run(args: Args) -> Result<()> {
    if args.mpi {
        let home = args
            .home
            .clone()
            .context("--mpi needs --home DIR (a directory all ranks can reach)")?;
        let cache = match args.mpi_cache.as_str() {
            "colocated" => launch::MpiCache {
                colocated: true,
                cache_ranks: args.cache_ranks,
            },
            "none" => launch::MpiCache {
                colocated: false,
                cache_ranks: args.cache_ranks,
            },
            other => bail!("--mpi-cache {other:?}: expected colocated or none"),
        };
        return launch::mpi(&home, &args.host, args.workers, cache);
    }
    let plan = if let Some(path) = &args.config {
        let id = args
            .id
            .context("--config needs --id N (which server of the description this is)")?;
        let config = ClusterConfig::load(path)?;
        let entry: ServerEntry = config
            .server(id)
            .cloned()
            .with_context(|| format!("server id {id} is not in {}", path.display()))?;
        let home = args
            .home
            .clone()
            .unwrap_or_else(|| path.parent().map(PathBuf::from).unwrap_or_default());
        Plan {
            id: ServerId(id),
            roles: entry.roles.clone(),
            listen: args.listen.clone().unwrap_or_else(|| entry.addr.clone()),
            data_dir: args
                .data
                .clone()
                .unwrap_or_else(|| config.data_dir(&entry, &home)),
            socket: args.socket.clone().or_else(|| entry.socket.clone()),
            cluster: Some(config),
            cluster_file: None,
            cache_memory: args.cache_memory,
            cache_policy: args.cache_policy.clone(),
            cache_cio_unrequested: args.cache_cio_unrequested.clone(),
        }
    } else {
        let roles = args
            .role
            .iter()
            .map(|r| match r.trim() {
                "meta" => Ok(Role::Meta),
                "io" => Ok(Role::Io),
                "cache" if args.cluster_file.is_some() => Ok(Role::Cache),
                "cache" => bail!(
                    "a cache manager needs to know the io servers: use --config FILE --id N, or --cluster-file FILE"
                ),
                other => bail!("unknown role {other:?}; roles are meta, io and cache"),
            })
            .collect::<Result<Vec<_>>>()?;
        if roles.is_empty() {
            bail!("give --config FILE --id N, or --role meta|io with --data DIR (see --help)");
        }
        if roles.contains(&Role::Meta) {
            bail!("a standalone meta server needs to know its io servers: use --config FILE --id N");
        }
        Plan {
            id: ServerId(args.id.unwrap_or(0)),
            roles,
            listen: args.listen.clone().unwrap_or_else(|| "127.0.0.1:0".into()),
            data_dir: args.data.clone().context("--data DIR is required")?,
            cluster: None,
            socket: args.socket.clone(),
            cluster_file: args.cluster_file.clone(),
            cache_memory: args.cache_memory,
            cache_policy: args.cache_policy.clone(),
            cache_cio_unrequested: args.cache_cio_unrequested.clone(),
        }
    };
    let handle = start(&plan, args.workers)?;
    if let Some(path) = &args.ready_file {
        write_atomically(path, &handle.to_string())?;
    }
    loop {
        std::thread::park();
    }
}

/// Opens the roles' stores, binds and starts serving; returns the bound address.
pub fn start(plan: &Plan, workers: usize) -> Result<std::net::SocketAddr> {
    std::fs::create_dir_all(&plan.data_dir)
        .with_context(|| format!("creating data directory {}", plan.data_dir.display()))?;
    let incarnation = weft_rpc::new_incarnation();
    let handler = roles::Roles::open(plan, incarnation)?;
    let roles_bits = handler.role_bits();
    let listener = bind(&plan.listen).with_context(|| format!("cannot listen on {}", plan.listen))?;
    let limits = ServerLimits {
        workers,
        ..ServerLimits::default()
    };
    let handle = weft_rpc::serve(
        listener,
        Arc::new(handler),
        ServerIdentity {
            server_id: plan.id,
            roles: roles_bits,
            incarnation,
            build: weft_build_info::version!(),
        },
        limits,
    )?;
    let names: Vec<&str> = plan
        .roles
        .iter()
        .map(|r| match r {
            Role::Meta => "meta",
            Role::Io => "io",
            Role::Cache => "cache",
        })
        .collect();
    eprintln!(
        "weftd: server {} ({}) listening on {}, data in {}",
        plan.id,
        names.join(","),
        handle.local_addr,
        plan.data_dir.display()
    );
    if let Some(path) = &plan.socket {
        // Clients fall back to TCP when the socket is missing: a failure here only
        // costs local clients speed.
        match handle.serve_unix(path) {
            Ok(address) => eprintln!("weftd: server {} also listening on {address}", plan.id),
            Err(e) => eprintln!(
                "weftd: warning: cannot listen on socket {}: {e}; TCP only",
                path.display()
            ),
        }
    }
    // Give the accept loop a moment before a ready file tells anyone to connect.
    std::thread::sleep(Duration::from_millis(5));
    Ok(handle.local_addr)
}

/// How long a restarted server keeps trying its recorded address while the kernel
/// still holds it (a server restarted right after a crash; peers' old connections).
const BIND_RETRY: Duration = Duration::from_secs(5);

/// Binds `addr`; a fixed port still in use is tried again for up to `BIND_RETRY`.
fn bind(addr: &str) -> std::io::Result<TcpListener> {
    let deadline = std::time::Instant::now() + BIND_RETRY;
    loop {
        match TcpListener::bind(addr) {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

pub fn write_atomically(path: &std::path::Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}
