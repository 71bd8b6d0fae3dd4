//! `weftd`: one server binary carrying the meta and/or io roles. Thin: it reads the
//! cluster description or flags, opens each role's store, and serves.
//!
//! # Code map
//!
//! `weftd`, thin: reads the description or flags and the cluster key (`load_key`: no key,
//! no server, with a message saying how to make one and, for a description with network
//! addresses, that the cluster spans machines), raises its open-file limit to its
//! connection limit, opens the roles, serves. At start it sets malloc's mmap threshold
//! (32 MiB) and trim threshold (256 MiB) so that requests' bulk-data buffers are reused
//! from the heap rather than faulted in afresh per request (2 pages in 5 of a TCP write
//! were page faults with glibc's defaults; `weft-tests/tests/tcp_write_buffers.rs`);
//! what is kept is bounded by the peak in use, which the byte budget bounds. `--connections-max`, `--inflight-memory`,
//! `--send-timeout-ms` and the other limit flags fill `ServerLimits`. `identity.rs`: the
//! key file owner's credential (uid, primary group, groups), which `roles.rs` puts in
//! place of every metadata request's claimed one in `owner` mode; `Munge`, which in
//! `munge` mode decodes a connection's credential with `unmunge` at its first request
//! that carries a credential (once per connection, kept in `roles.rs`'s per-connection
//! map, dropped at `connection_closed`), refuses a credential it accepted before within
//! its TTL (at most 65,536 remembered), and gives the decoded uid and gid with that
//! user's groups from this host's group database (`getgrouplist`); a uid in
//! `munge_trusted_uids` keeps the credentials its requests claim.
//! A standalone cache role may learn the io servers from the metadata manager instead of
//! a description (`--meta`, `roles.rs`'s `meta_directory`), and with `--exit-on-stdin-eof`
//! writes every dirty block back and exits when its standard input closes: how a
//! job-scoped delegate runs under its launcher.
//! `stop.rs`: how a server ends cleanly. SIGTERM, SIGINT and SIGHUP (and, with
//! `--exit-on-stdin-eof`, the input's end) wake the main thread through a pipe the handler
//! writes one byte to; it writes every dirty cache block back, then exits (a second signal
//! exits at once). `weft down` (weft-cli `cluster.rs`) stops separate cache managers first
//! and waits for them (up to 60 s, then SIGKILL with a message), then the other servers,
//! so write-backs find their io servers up; a colocated manager writes into its own
//! process's io role (`weft-tests/tests/cache_tier.rs`: written, not synced, `weft down`,
//! `weft up`: every byte there; main's servers lost all of it). A stopping metadata
//! manager grants no lock from then on and, with none held, leaves `locks-clean-stop`
//! (fsynced) in its data directory; the next start removes it durably before serving and
//! skips the lock grace (weft-fuse `tests/locks.rs`: the first lock after a clean stop
//! without locks is granted at once; with one held the grace still comes, and ends when
//! its holder has reclaimed).
//! `capability.rs` is the manager's `CapabilityIssuer`: it signs with the capability key
//! and sends revocations to every io server and cache manager from a background thread
//! (at most 1,024 queued; a dropped or failed one leaves the lifetime as the bound). The
//! io and cache roles put a `Gate` in front of their requests (`roles.rs`: in `handle`,
//! in `handle_borrowed` for writes over shared memory, and in `reply_from_file` for reads
//! answered from the object file); the
//! manager's and cache managers' pools present the server's own capability; a job's
//! delegate (`--meta` without `--capability-key`) has no capability key: its gate is
//! `Gate::remote`, which has the manager verify each capability presented
//! (`VerifyCapability`, answered by `roles.rs` with the `Issuer`'s key and the
//! revocations it made), and it writes back with capabilities the manager grants the
//! user it runs as. Such a delegate must be given `--job-key FILE` and its handshake
//! asks for that key (`Plan::listen_key`), not the cluster key.
//! `roles.rs` dispatches requests by opcode to the meta, io or cache role (cache opcodes
//! and, without an io role, view registration go to the cache role; with one, both share
//! its view registry and the cache role reaches its objects directly); `objects.rs`
//! implements the manager's calls to io servers and cache managers; the server's incarnation is chosen once and given to
//! the handshake and the cache role alike. `observe.rs` wraps the roles in `Metered` (every request counted and timed by the role
//! that serves it; `Metrics` answered there), adds the roles' own counters as metric
//! sources (cache statistics, weft-iod's `io_counts`, the transport's held bytes), and
//! serves the metrics endpoint (`--metrics-addr`, else `metrics_addr` in the description;
//! a taken port falls back to any); on the metadata manager the endpoint also serves the
//! status page, whose view `status_page.rs` makes from every server's metrics read over
//! the cluster's authenticated connections (one round at a time, reused for 0.9 s).
//! `launch.rs` starts a job-scoped cluster inside
//! an MPI job without linking MPI (ranks meet through files in the shared home; rank 0
//! makes the home's cluster key first, the others wait for it): rank 0 meta, the others io with a colocated cache manager each (`--mpi-cache none` to leave
//! it out), the last `--cache-ranks N` cache managers only.

mod capability;
mod identity;
mod launch;
mod objects;
mod observe;
mod rebuilder;
mod roles;
mod status_page;
mod stop;

use anyhow::{bail, Context, Result};
use clap::{CommandFactory, Parser};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use weft_config::{ClusterConfig, Role, ServerEntry};
use weft_layout::ServerId;
use weft_rpc::{ClusterKey, ServerIdentity, ServerLimits};

#[derive(Parser, Debug)]
#[command(
    name = "weftd",
    version = weft_build_info::version!(),
    about = "The Weft server: metadata manager (meta role), I/O daemon (io role), cache manager (cache role).",
    // concat! rather than one literal with `\` line continuations: a continuation
    // swallows the next line's leading spaces, which the forms below need.
    long_about = concat!(
        "The Weft server: metadata manager (meta role), I/O daemon (io role) and/or cache manager \
(cache role: a share of the cluster's cooperative cache; with the io role in the same process, it caches that \
server's stripes and reaches them without a socket).\n\n\
Most users never start weftd by hand: `weft up` starts a whole cluster on this machine.\n\n\
SIGTERM, SIGINT or SIGHUP stop a server cleanly: a cache manager first writes its dirty blocks back to the io \
servers (a second signal stops it at once). `weft down` stops separate cache managers before the io servers for this.\n\n\
Every server needs the cluster key (32 random bytes in a file only its owner may read): a connection \
is served only once it proved it holds the same key. `weft up` and the MPI launch make one in the cluster's \
home; `weft key create FILE` makes one for a cluster set up by hand.\n\n\
Four ways to run it:\n",
        "  weftd --config cluster.toml --id N\n",
        "      server N of a cluster description (one per machine, any roles); the key is\n",
        "      cluster.key beside it (or key_file, or --key)\n",
        "  weftd --role io --data DIR --key FILE [--listen 127.0.0.1:0] [--ready-file F]\n",
        "      a standalone io server; F receives the bound address\n",
        "  weftd --role cache|io,cache --cluster-file cluster.toml --data DIR --key FILE ...\n",
        "      a standalone cache manager (alone, or in an io server)\n",
        "  mpirun -np K weftd --mpi --home DIR\n",
        "      a job-scoped cluster: rank 0 meta, the other ranks io with a colocated cache\n",
        "      manager each (--mpi-cache none: without; --cache-ranks N: the last N ranks\n",
        "      cache managers only); writes DIR/cluster.toml for clients (WEFT_HOME=DIR)\n\n",
        "A metadata manager runs only from a cluster description or in an MPI launch: it\n",
        "must know its io servers."
    )
)]
struct Args {
    /// Cluster description file (TOML); use with --id.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// This server's id in the cluster description (or the id to report when standalone).
    #[arg(long, value_name = "N")]
    id: Option<u32>,
    /// Roles when standalone: io, cache, or both ("io,cache"); a cache manager also needs
    /// --cluster-file or --meta. The meta role runs only with --config or --mpi.
    #[arg(long, value_delimiter = ',', value_name = "ROLES")]
    role: Vec<String>,
    /// Address to listen on (default 127.0.0.1:0 standalone: this machine only; with
    /// --config it overrides the description's address). Port 0 picks a free port.
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,
    /// The servers-only key capabilities are signed with (default with --config: the
    /// description's capability_key_file; without one, a key derived from the cluster
    /// key, which clients hold too).
    #[arg(long, value_name = "FILE")]
    capability_key: Option<PathBuf>,
    /// The cluster key file (default with --config: the description's key_file, else
    /// cluster.key beside it; with --mpi: cluster.key in --home, created by rank 0).
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
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
    /// description's `[cache]` memory, else 512M.
    #[arg(long, value_name = "BYTES", value_parser = parse_size_arg)]
    cache_memory: Option<u64>,
    /// Cache role: replacement policy (lru, lfu, fifo, arc, s3fifo); default: the
    /// description's `[cache]` policy, else arc.
    #[arg(long, value_name = "POLICY")]
    cache_policy: Option<String>,
    /// Cache role, collective-I/O-aware reads: a block an aggregated read fetched but no
    /// process asked for is kept at the cold end of the policy (cold) or not at all
    /// (none).
    #[arg(long, default_value = "cold", value_name = "cold|none")]
    cache_cio_unrequested: String,
    /// For benchmarks only: the io and cache roles serve every holder of the key by
    /// inode number, asking for no capability (to measure what capabilities cost).
    #[arg(long)]
    insecure_no_capabilities: bool,
    /// Cache role as a delegate (I/O delegation's write-back cache): evict fully dirty
    /// blocks first (written whole, no fetch), then by the policy. On by default when
    /// the description's cache mapping is `aligned`.
    #[arg(long)]
    delegate: bool,
    /// Standalone cache role: learn the io servers' addresses from the metadata manager
    /// at HOST:PORT (when first needed) instead of a description file. Job-scoped
    /// delegates started by the MPI-IO layer use this.
    #[arg(long, value_name = "HOST:PORT")]
    meta: Option<String>,
    /// Standalone cache role with --meta (a job's delegate): serve only clients that
    /// prove this key (the job's own, made at the spawn and held by the job's
    /// processes alone) instead of the cluster key, which every user may hold. Required
    /// for a delegate that holds no capability key.
    #[arg(long, value_name = "FILE")]
    job_key: Option<PathBuf>,
    /// Run while standard input stays open: at its end (the process that started this
    /// server closed it or died), write every dirty cache block back and exit. Job-scoped
    /// delegates run so under their launcher, so they never outlive their job.
    #[arg(long)]
    exit_on_stdin_eof: bool,
    /// With --exit-on-stdin-eof: once everything was written back (at the input's end,
    /// or at SIGTERM, SIGINT or SIGHUP), remove this directory (a job-scoped delegate's scratch directory, which would otherwise stay
    /// behind when the job was killed with its launcher); kept when the write-back
    /// failed, for its log.
    #[arg(long, value_name = "DIR", requires = "exit_on_stdin_eof")]
    remove_on_exit: Option<PathBuf>,
    /// Serve metrics (Prometheus text format) over HTTP at this address, at /metrics;
    /// the metadata manager also serves its status page at /. Port 0 picks a free port.
    /// Default: the description's `metrics_addr` for this server, else none. With --mpi
    /// every rank serves one; a host left empty (":0") is the rank's --host.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<String>,
    /// Meta role: the grace after this start, in milliseconds, during which the manager
    /// grants only reclaims of the fcntl/flock locks mounts held from its previous run
    /// (other lock requests wait for its end; a lock not reclaimed in time is lost, and
    /// its holder's I/O fails with EIO). Mounts holding locks notice a restart within
    /// about a second. Default: the description's `lock_grace_ms`, else 10000; 0: none.
    /// The grace ends early once every mount recorded as holding locks has reclaimed them
    /// (each says so), and there is none when no mount is recorded: a crash nobody held
    /// locks at, a new database, or a clean stop (SIGTERM, `weft down`) with no lock held.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(..=weft_config::LOCK_GRACE_MS_MAX))]
    lock_grace_ms: Option<u64>,
    /// Meta role: how long an acknowledged metadata operation may wait for a durable
    /// commit, in milliseconds. 0: every operation is committed durably (one disk flush
    /// per group of concurrent operations) before it is answered; above 0 operations are
    /// answered once applied and committed in the background this often, and fsync,
    /// sync and MPI_File_sync commit at once. A crash of the manager loses at most this
    /// much acknowledged and unsynced work of clients that die with it; surviving clients
    /// replay theirs (docs/src/consistency.md: Durability). Default: the description's `commit_interval_ms`, else 5.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(..=weft_config::COMMIT_INTERVAL_MS_MAX))]
    commit_interval_ms: Option<u64>,
    #[command(flatten)]
    limits: LimitArgs,
}

/// How much one server takes on (defaults: weft_rpc::ServerLimits).
#[derive(clap::Args, Debug)]
#[command(next_help_heading = "Limits")]
struct LimitArgs {
    /// Most connections served at once; more are told "too many connections".
    #[arg(long, value_name = "N", default_value_t = ServerLimits::default().connections_max)]
    connections_max: usize,
    /// Most connections from one peer (an address; on the Unix socket, a user).
    #[arg(long, value_name = "N", default_value_t = ServerLimits::default().peer_connections_max)]
    peer_connections_max: usize,
    /// Most bytes of requests and replies held in memory (suffixes K, M, G).
    #[arg(long, value_name = "BYTES", value_parser = parse_size_arg,
          default_value_t = ServerLimits::default().data_bytes_inflight_max)]
    inflight_memory: u64,
    /// Most bytes of requests and replies held in memory for one peer.
    #[arg(long, value_name = "BYTES", value_parser = parse_size_arg,
          default_value_t = ServerLimits::default().peer_data_bytes_max)]
    peer_inflight_memory: u64,
    /// Threads serving connections (each serves thousands).
    #[arg(long, value_name = "N", default_value_t = ServerLimits::default().event_loops)]
    event_loops: usize,
    /// A peer whose replies cannot be written for this long is dropped.
    #[arg(long, value_name = "MS", default_value_t = millis(ServerLimits::default().send_timeout))]
    send_timeout_ms: u64,
    /// A frame must arrive within this time of its first byte.
    #[arg(long, value_name = "MS", default_value_t = millis(ServerLimits::default().frame_deadline))]
    frame_deadline_ms: u64,
    /// A connection must complete its handshake within this time.
    #[arg(long, value_name = "MS", default_value_t = millis(ServerLimits::default().handshake_timeout))]
    handshake_timeout_ms: u64,
}

/// A limit's default duration as `--help` shows it, in milliseconds.
fn millis(d: Duration) -> u64 {
    d.as_millis() as u64
}

impl LimitArgs {
    fn limits(&self, workers: usize) -> ServerLimits {
        let d = ServerLimits::default();
        let ms = |v: u64| Duration::from_millis(v.max(1));
        ServerLimits {
            workers,
            connections_max: self.connections_max.max(1),
            peer_connections_max: self.peer_connections_max.max(1),
            data_bytes_inflight_max: self.inflight_memory.max(1),
            peer_data_bytes_max: self.peer_inflight_memory.max(1),
            event_loops: self.event_loops.max(1),
            send_timeout: ms(self.send_timeout_ms),
            frame_deadline: ms(self.frame_deadline_ms),
            handshake_timeout: ms(self.handshake_timeout_ms),
            ..d
        }
    }
}

fn parse_size_arg(s: &str) -> Result<u64, String> {
    weft_config::parse_size(s)
}

/// Requests' bulk data up to this size is allocated from malloc's heaps, not mapped
/// afresh (glibc's largest allowed value on 64-bit).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MALLOC_MMAP_THRESHOLD: libc::c_int = 32 << 20;
/// Freed heap memory up to this much at a heap's top is kept for the next requests.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MALLOC_TRIM_THRESHOLD: libc::c_int = 256 << 20;

/// Keeps the memory of requests' bulk data for the next requests instead of handing it
/// back to the kernel after each one. With glibc's defaults a 4 MiB request buffer
/// (received over TCP, then written to an object) came from a fresh mapping or a heap
/// that was trimmed (`MADV_DONTNEED`) when the previous one was freed, so receiving it
/// took a page fault (and a page zeroed) on about one page in four: 49,000 faults per
/// 768 MiB rewritten through 4 io servers, against 1,000 with these settings. What is
/// kept is at most what was in use at once, which the server's byte budget
/// (`data_bytes_inflight_max`) bounds.
fn keep_freed_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before any thread starts.
    unsafe {
        if libc::mallopt(libc::M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD) != 1
            || libc::mallopt(libc::M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD) != 1
        {
            eprintln!("weftd: note: malloc refused the buffer-keeping settings; going on with its defaults");
        }
    }
}

fn main() {
    // Packagers: `weftd --generate-man-pages DIR` writes weftd.1 (weft-man).
    if let Some(dir) = weft_man::requested(std::env::args_os().skip(1)) {
        weft_man::write_and_exit("weftd", Args::command(), &dir);
    }
    keep_freed_buffers();
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
    /// Where to ask for the io servers when neither `cluster` nor `cluster_file` is
    /// given (standalone cache role, `--meta`).
    pub meta: Option<String>,
    /// Cache role: memory bound and replacement policy, overriding the description.
    pub cache_memory: Option<u64>,
    pub cache_policy: Option<String>,
    /// Cache role: `cold` or `none` (see `--cache-cio-unrequested`).
    pub cache_cio_unrequested: String,
    /// Cache role: run as a delegate (see `--delegate`).
    pub delegate: bool,
    /// Where to serve metrics over HTTP, if anywhere.
    pub metrics_addr: Option<String>,
    /// The cluster key: clients must prove they hold it, and this server proves it to
    /// the servers it calls.
    pub key: ClusterKey,
    /// Its file: in `owner` mode the manager acts as the user who owns it.
    pub key_path: PathBuf,
    /// Whether the io and cache roles ask for capabilities (off only with
    /// `--insecure-no-capabilities` or `capabilities = false`, for benchmarks).
    pub capabilities: bool,
    /// What capabilities are signed with.
    pub capability_key: weft_rpc::CapabilityKey,
    /// A job's delegate (a cache role started by the job with `--meta` and no
    /// capability key): it holds no servers' key, so the manager verifies the
    /// capabilities its clients present, and it asks the manager for capabilities as
    /// the user it runs as, for what it writes back.
    pub acts_for_user: bool,
    /// What clients must prove they hold to be served: the cluster key, or a job's
    /// delegate's job key (`--job-key`).
    pub listen_key: ClusterKey,
}

fn run(args: Args) -> Result<()> {
    let limits = args.limits.limits(args.workers);
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
        return launch::mpi(&home, &args.host, limits, cache, args.metrics_addr.as_deref());
    }
    let plan = if let Some(path) = &args.config {
        let id = args
            .id
            .context("--config needs --id N (which server of the description this is)")?;
        let mut config = ClusterConfig::load(path)?;
        if let Some(ms) = args.lock_grace_ms {
            config.lock_grace_ms = Some(ms);
        }
        if let Some(ms) = args.commit_interval_ms {
            config.commit_interval_ms = Some(ms);
        }
        let entry: ServerEntry = config
            .server(id)
            .cloned()
            .with_context(|| format!("server id {id} is not in {}", path.display()))?;
        let home = args
            .home
            .clone()
            .unwrap_or_else(|| path.parent().map(PathBuf::from).unwrap_or_default());
        let network = config.network_addresses().join(", ");
        let key_path = args.key.clone().unwrap_or_else(|| config.key_path(path));
        let key = load_key(&key_path).with_context(|| {
            if network.is_empty() {
                String::new()
            } else {
                format!(
                    "this cluster spans machines ({network}): its servers refuse to start without the key"
                )
            }
        })?;
        if args.job_key.is_some() {
            bail!("--job-key is for a job's delegate (a standalone cache role with --meta), not a server of a description");
        }
        let config_capabilities = config.capabilities;
        let capability_key = capability_key(
            args.capability_key
                .clone()
                .or_else(|| config.capability_key_path(path)),
            &key,
        )?;
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
            meta: None,
            cache_memory: args.cache_memory,
            cache_policy: args.cache_policy.clone(),
            cache_cio_unrequested: args.cache_cio_unrequested.clone(),
            delegate: args.delegate,
            metrics_addr: args.metrics_addr.clone().or_else(|| entry.metrics_addr.clone()),
            key_path,
            capabilities: !args.insecure_no_capabilities && config_capabilities,
            capability_key,
            acts_for_user: false,
            listen_key: key.clone(),
            key,
        }
    } else {
        let roles = args
            .role
            .iter()
            .map(|r| match r.trim() {
                "meta" => Ok(Role::Meta),
                "io" => Ok(Role::Io),
                "cache" if args.cluster_file.is_some() || args.meta.is_some() => Ok(Role::Cache),
                "cache" => bail!(
                    "a cache manager needs to know the io servers: use --config FILE --id N, --cluster-file FILE or --meta HOST:PORT"
                ),
                other => bail!("unknown role {other:?}; roles are meta, io and cache"),
            })
            .collect::<Result<Vec<_>>>()?;
        if roles.is_empty() {
            bail!("give --config FILE --id N, or --role io with --data DIR and --key FILE (see --help)");
        }
        if roles.contains(&Role::Meta) {
            bail!("a standalone meta server needs to know its io servers: use --config FILE --id N");
        }
        let key_path = args
            .key
            .clone()
            .context("a server needs the cluster key: give --key FILE (`weft up` makes one in its home, `weft key create FILE` one for a cluster set up by hand)")?;
        let key = load_key(&key_path)?;
        let acts_for_user =
            args.capability_key.is_none() && args.meta.is_some() && args.cluster_file.is_none();
        let listen_key = match &args.job_key {
            Some(path) => ClusterKey::load(path).with_context(|| "reading the job key (--job-key)")?,
            None if acts_for_user && roles.contains(&Role::Cache) => bail!(
                "a job's delegate (--meta, no --capability-key) serves only its job: give --job-key FILE, a key \
                 only the job's processes hold (`weft key create FILE`); the MPI-IO layer makes one per job"
            ),
            None => key.clone(),
        };
        Plan {
            id: ServerId(args.id.unwrap_or(0)),
            roles,
            listen: args.listen.clone().unwrap_or_else(|| "127.0.0.1:0".into()),
            data_dir: args.data.clone().context("--data DIR is required")?,
            cluster: None,
            socket: args.socket.clone(),
            cluster_file: args.cluster_file.clone(),
            meta: args.meta.clone(),
            cache_memory: args.cache_memory,
            cache_policy: args.cache_policy.clone(),
            cache_cio_unrequested: args.cache_cio_unrequested.clone(),
            delegate: args.delegate,
            metrics_addr: args.metrics_addr.clone(),
            capability_key: capability_key(args.capability_key.clone(), &key)?,
            key,
            key_path,
            capabilities: !args.insecure_no_capabilities,
            acts_for_user,
            listen_key,
        }
    };
    let (address, roles) = start(&plan, limits)?;
    if let Some(path) = &args.ready_file {
        write_atomically(path, &address.to_string())?;
    }
    let reason = stop::wait(args.exit_on_stdin_eof)?;
    eprintln!(
        "weftd: server {}: {reason}; writing dirty blocks back, then exiting",
        plan.id
    );
    roles.stop_locks(&plan.data_dir);
    if let Err(e) = roles.write_back_all() {
        eprintln!("weftd: server {}: {e}", plan.id);
        std::process::exit(1);
    }
    if let Some(dir) = &args.remove_on_exit {
        if let Err(e) = std::fs::remove_dir_all(dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!("weftd: server {}: removing {}: {e}", plan.id, dir.display());
            }
        }
    }
    std::process::exit(0);
}

/// The key capabilities are signed with: the servers-only key in `path`, else one
/// derived from the cluster key.
fn capability_key(path: Option<PathBuf>, key: &ClusterKey) -> Result<weft_rpc::CapabilityKey> {
    Ok(match path {
        Some(path) => weft_rpc::CapabilityKey::new(
            &ClusterKey::load(&path)
                .with_context(|| format!("reading the capability key {}", path.display()))?,
        ),
        None => weft_rpc::CapabilityKey::new(key),
    })
}

/// The metadata manager's rebuilder (`rebuilder.rs`), unless the description's
/// `auto_rebuild` is off: a client of this manager at `local_addr` (loopback when it
/// listens on every address), its counters in the metrics.
fn start_rebuilder(
    config: &ClusterConfig,
    service: &weft_meta::service::MetaService,
    local_addr: std::net::SocketAddr,
    plan: &Plan,
    metrics: &weft_metrics::ServerMetrics,
) -> Result<()> {
    let Some(rate) = config.auto_rebuild_rate().map_err(anyhow::Error::msg)? else {
        eprintln!(
            "weftd meta: the rebuilder is off (auto_rebuild = \"off\"): stale pieces of replicated files wait for `weft rebuild`"
        );
        return Ok(());
    };
    let mut addr = local_addr;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let rebuilder = rebuilder::Rebuilder::spawn(service, addr.to_string(), plan.key.clone(), rate);
    metrics.add_source(move || rebuilder.metrics());
    eprintln!(
        "weftd meta: stale pieces of replicated files are rebuilt in the background once their servers answer, at up to {} MiB/s (auto_rebuild)",
        rate >> 20
    );
    Ok(())
}

/// Reads the cluster key, saying what to do when there is none.
pub fn load_key(path: &std::path::Path) -> Result<ClusterKey> {
    if !path.exists() {
        bail!(
            "no cluster key at {}: every server and client of a cluster proves it holds the cluster's key \
             (`weft up` makes one in its home; for a cluster set up by hand, `weft key create {}` and copy it, \
             mode 0600, to every machine)",
            path.display(),
            path.display()
        );
    }
    Ok(ClusterKey::load(path)?)
}

/// Lets this process open as many descriptors as its connection limit needs, as far
/// as the hard limit allows.
fn raise_descriptor_limit(limits: &ServerLimits) {
    let wanted = (limits.connections_max as u64).saturating_add(1024);
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) != 0 || rl.rlim_cur >= wanted {
            return;
        }
        let target = wanted.min(rl.rlim_max);
        if target > rl.rlim_cur {
            rl.rlim_cur = target;
            libc::setrlimit(libc::RLIMIT_NOFILE, &rl);
        }
        if target < wanted {
            eprintln!(
                "weftd: warning: at most {target} open files (hard limit): fewer connections than --connections-max {} can be served",
                limits.connections_max
            );
        }
    }
}

/// Opens the roles' stores, binds and starts serving; returns the bound address and
/// the roles being served.
pub fn start(plan: &Plan, limits: ServerLimits) -> Result<(std::net::SocketAddr, Arc<roles::Roles>)> {
    std::fs::create_dir_all(&plan.data_dir)
        .with_context(|| format!("creating data directory {}", plan.data_dir.display()))?;
    let incarnation = weft_rpc::new_incarnation();
    let handler = Arc::new(roles::Roles::open(plan, incarnation)?);
    let roles_bits = handler.role_bits();
    let metrics = Arc::new(weft_metrics::ServerMetrics::new(
        &weft_metrics::ServerDescription {
            server_id: plan.id.0,
            roles: plan
                .roles
                .iter()
                .map(|r| match r {
                    Role::Meta => weft_metrics::RoleKind::Meta,
                    Role::Io => weft_metrics::RoleKind::Io,
                    Role::Cache => weft_metrics::RoleKind::Cache,
                })
                .collect(),
            build: weft_build_info::version!().to_owned(),
        },
    ));
    let listener = bind(&plan.listen).with_context(|| format!("cannot listen on {}", plan.listen))?;
    raise_descriptor_limit(&limits);
    let handle = weft_rpc::serve(
        listener,
        Arc::new(observe::Metered {
            roles: handler.clone(),
            metrics: metrics.clone(),
        }),
        ServerIdentity {
            server_id: plan.id,
            roles: roles_bits,
            incarnation,
            build: weft_build_info::version!(),
            munge: handler.munge(),
        },
        limits,
        plan.listen_key.clone(),
    )?;
    let names: Vec<&str> = plan.roles.iter().map(|r| r.name()).collect();
    eprintln!(
        "weftd: server {} ({}) listening on {}, data in {}; only clients holding the {} are served{}",
        plan.id,
        names.join(","),
        handle.local_addr,
        plan.data_dir.display(),
        if plan.acts_for_user {
            "job key (--job-key), with capabilities the metadata manager verifies,"
        } else {
            "cluster key"
        },
        if handle.local_addr.ip().is_loopback() {
            " (loopback: this machine only)"
        } else {
            " (reachable from the network)"
        }
    );
    if let Some(owner) = handler.owner() {
        eprintln!(
            "weftd: server {}: identity owner: every metadata request acts as uid {} gid {} (the cluster key's owner), whatever it claims",
            plan.id, owner.uid, owner.gid
        );
    }
    if handler.munge() {
        eprintln!(
            "weftd: server {}: identity munge: every metadata request acts as the uid and gid its connection's MUNGE credential vouches for",
            plan.id
        );
    }
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
    handler.set_restarter(handle.restarter());
    let local_addr = handle.local_addr;
    observe::add_sources(&metrics, &handler, handle, limits.data_bytes_inflight_max);
    if let Some(addr) = &plan.metrics_addr {
        let page = match (&plan.cluster, plan.roles.contains(&Role::Meta)) {
            (Some(config), true) => Some(Arc::new(status_page::StatusPage::new(
                config,
                &local_addr.to_string(),
                plan.key.clone(),
            ))),
            _ => None,
        };
        let url = observe::serve_endpoint(addr, local_addr, metrics.clone(), page)?;
        eprintln!("weftd: server {} serves its metrics at {url}", plan.id);
        metrics.set_url(url);
    }
    if let (Some(config), Some(service)) = (&plan.cluster, handler.meta_service()) {
        start_rebuilder(config, &service, local_addr, plan, &metrics)?;
    }
    // Give the accept loop a moment before a ready file tells anyone to connect.
    std::thread::sleep(Duration::from_millis(5));
    Ok((local_addr, handler))
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn help_shows_each_limit_default_and_keeps_the_ways_to_run_indented() {
        let help = Args::command().render_long_help().to_string();
        let d = ServerLimits::default();
        for (flag, default) in [
            ("--connections-max", d.connections_max.to_string()),
            ("--peer-connections-max", d.peer_connections_max.to_string()),
            ("--inflight-memory", d.data_bytes_inflight_max.to_string()),
            ("--peer-inflight-memory", d.peer_data_bytes_max.to_string()),
            ("--event-loops", d.event_loops.to_string()),
            ("--send-timeout-ms", millis(d.send_timeout).to_string()),
            ("--frame-deadline-ms", millis(d.frame_deadline).to_string()),
            ("--handshake-timeout-ms", millis(d.handshake_timeout).to_string()),
        ] {
            let entry = &help[help.find(&format!("{flag} <")).expect(flag)..];
            let entry = &entry[..entry[2..].find("\n      --").map_or(entry.len(), |e| e + 2)];
            assert!(
                entry.contains(&format!("[default: {default}]")),
                "{flag}:\n{entry}"
            );
        }
        for line in [
            "\n  weftd --config cluster.toml --id N\n",
            "\n  mpirun -np K weftd --mpi --home DIR\n",
            "\nFour ways to run it:\n",
        ] {
            assert!(help.contains(line), "{line:?} in:\n{help}");
        }
    }
}
