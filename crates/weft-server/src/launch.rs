//! Launching a job-scoped cluster inside an MPI job (`mpirun -np K weftd --mpi`):
//! rank 0 is the metadata manager, the other ranks are io servers, each with a
//! colocated cache manager unless `--mpi-cache none`; the last `--cache-ranks N` ranks
//! are cache managers only. Ranks meet through files in the shared home directory, so
//! weftd needs no MPI library: rank 0 makes the cluster key (unless the home has one),
//! the other ranks wait for it as for addresses; server ranks publish their addresses,
//! rank 0 waits for all of them and writes `cluster.toml`.

use crate::{load_key, start, write_atomically, Plan};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use weft_config::{ClusterConfig, Role, ServerEntry, CLUSTER_FILE_NAME, KEY_FILE_NAME};
use weft_layout::stripe::STRIPE_SIZE_BYTES_DEFAULT;
use weft_layout::ServerId;
use weft_rpc::{ClusterKey, ServerLimits};

/// How long rank 0 waits for every io rank to publish its address.
const RENDEZVOUS_TIMEOUT: Duration = Duration::from_secs(120);

fn env_number(names: &[&str]) -> Option<u32> {
    names.iter().find_map(|n| std::env::var(n).ok()?.parse().ok())
}

/// A key that differs between MPI jobs, so that files of an earlier job in the same
/// home are never mistaken for this job's.
fn job_key() -> String {
    for name in [
        "PMIX_NAMESPACE",
        "OMPI_MCA_ess_base_jobid",
        "OMPI_MCA_orte_ess_jobid",
        "PMI_JOBID",
        "SLURM_JOB_ID",
    ] {
        if let Ok(v) = std::env::var(name) {
            if !v.is_empty() {
                return v
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                    .collect();
            }
        }
    }
    "job".into()
}

fn hostname() -> Result<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates or truncates.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        bail!("gethostname failed");
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// How an MPI launch places cache managers.
#[derive(Debug, Clone, Copy)]
pub struct MpiCache {
    /// A cache role in every io rank.
    pub colocated: bool,
    /// Ranks (the last ones) that are cache managers only.
    pub cache_ranks: u32,
}

/// The cluster key in `home`: rank 0 creates it if missing (atomically, so that a
/// rank never reads half a key); the other ranks wait for it.
fn cluster_key(home: &Path, rank: u32) -> Result<ClusterKey> {
    let path = home.join(KEY_FILE_NAME);
    if rank == 0 {
        let (key, created) = ClusterKey::load_or_create(&path)?;
        if created {
            eprintln!("weftd --mpi: created the cluster key {}", path.display());
        }
        return Ok(key);
    }
    let deadline = Instant::now() + RENDEZVOUS_TIMEOUT;
    while !path.exists() {
        if Instant::now() > deadline {
            bail!(
                "rank 0 did not create the cluster key {} within {:?}",
                path.display(),
                RENDEZVOUS_TIMEOUT
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    load_key(&path)
}

pub fn mpi(
    home: &Path,
    host: &str,
    limits: ServerLimits,
    cache: MpiCache,
    metrics_addr: Option<&str>,
) -> Result<()> {
    let rank = env_number(&["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"])
        .context("--mpi: no MPI rank in the environment (run under mpirun/mpiexec)")?;
    let size = env_number(&["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"])
        .context("--mpi: no MPI job size in the environment (run under mpirun/mpiexec)")?;
    if size < 2 {
        bail!("--mpi needs at least 2 ranks: rank 0 is the metadata manager, the others io servers");
    }
    if cache.cache_ranks >= size - 1 {
        bail!(
            "--cache-ranks {} leaves no io server among the {} ranks after the metadata manager",
            cache.cache_ranks,
            size - 1
        );
    }
    let first_cache_only = size - cache.cache_ranks;
    let roles_of = |r: u32| -> Vec<Role> {
        if r >= first_cache_only {
            vec![Role::Cache]
        } else if cache.colocated {
            vec![Role::Io, Role::Cache]
        } else {
            vec![Role::Io]
        }
    };
    let host = if host == "auto" {
        hostname()?
    } else {
        host.to_owned()
    };
    // ":0" is this rank's host, port 0.
    let metrics_addr = metrics_addr.map(|a| match a.strip_prefix(':') {
        Some(port) => format!("{host}:{port}"),
        None => a.to_owned(),
    });
    let meeting = home.join("mpi");
    std::fs::create_dir_all(&meeting).with_context(|| format!("creating {}", meeting.display()))?;
    let cluster_key = cluster_key(home, rank)?;
    let key = job_key();
    let addr_file = |r: u32| meeting.join(format!("{key}-io-{r}.addr"));
    let data_dir = |r: u32| home.join("data").join(format!("server-{r}"));

    if rank != 0 {
        // Node-local, named by job and rank: a client on another node finds no socket
        // there (or another job's, which the handshake's server id does not match).
        let socket = std::env::temp_dir().join(format!("weft-{key}-{rank}.sock"));
        let plan = Plan {
            id: ServerId(rank),
            roles: roles_of(rank),
            listen: format!("{host}:0"),
            data_dir: data_dir(rank),
            cluster: None,
            socket: Some(socket.clone()),
            cluster_file: Some(home.join(CLUSTER_FILE_NAME)),
            meta: None,
            cache_memory: None,
            cache_policy: None,
            cache_cio_unrequested: "cold".into(),
            delegate: false,
            metrics_addr: metrics_addr.clone(),
            capability_key: weft_rpc::CapabilityKey::new(&cluster_key),
            listen_key: cluster_key.clone(),
            key: cluster_key,
            key_path: home.join(KEY_FILE_NAME),
            capabilities: true,
            acts_for_user: false,
        };
        let (bound, _) = start(&plan, limits)?;
        write_atomically(
            &addr_file(rank),
            &format!("{host}:{}\n{}", bound.port(), socket.display()),
        )?;
        loop {
            std::thread::park();
        }
    }

    let deadline = Instant::now() + RENDEZVOUS_TIMEOUT;
    let mut servers = Vec::new();
    for r in 1..size {
        let path = addr_file(r);
        let (addr, socket) = loop {
            if let Ok(text) = std::fs::read_to_string(&path) {
                let mut lines = text.lines();
                let addr = lines.next().unwrap_or_default().trim().to_owned();
                break (addr, lines.next().map(|l| PathBuf::from(l.trim())));
            }
            if Instant::now() > deadline {
                bail!(
                    "rank {r} did not publish its address in {} within {:?}",
                    path.display(),
                    RENDEZVOUS_TIMEOUT
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        servers.push(ServerEntry {
            id: r,
            roles: roles_of(r),
            addr,
            data_dir: Some(data_dir(r)),
            socket,
            metrics_addr: None,
        });
    }
    let mut config = ClusterConfig {
        key_file: None,
        identity: Default::default(),
        munge_trusted_uids: Vec::new(),
        munge_socket: None,
        capabilities: true,
        capability_lifetime_ms: None,
        lock_grace_ms: None,
        commit_interval_ms: None,
        replay_window_ms: None,
        capability_key_file: None,
        cache: Default::default(),
        name: format!("weft-mpi-{key}"),
        stripe_size: STRIPE_SIZE_BYTES_DEFAULT,
        stripe_count: 0,
        redundancy: None,
        precreate: None,
        auto_rebuild: None,
        servers,
    };
    // The manager binds first; its address goes into the description afterwards.
    config.servers.insert(
        0,
        ServerEntry {
            id: 0,
            roles: vec![Role::Meta],
            addr: format!("{host}:0"),
            data_dir: Some(data_dir(0)),
            socket: None,
            metrics_addr: None,
        },
    );
    let plan = Plan {
        id: ServerId(0),
        roles: vec![Role::Meta],
        listen: format!("{host}:0"),
        data_dir: data_dir(0),
        cluster: Some(config.clone()),
        socket: None,
        cluster_file: None,
        meta: None,
        cache_memory: None,
        cache_policy: None,
        cache_cio_unrequested: "cold".into(),
        delegate: false,
        metrics_addr,
        capability_key: weft_rpc::CapabilityKey::new(&cluster_key),
        listen_key: cluster_key.clone(),
        key: cluster_key,
        key_path: home.join(KEY_FILE_NAME),
        capabilities: true,
        acts_for_user: false,
    };
    let (bound, _) = start(&plan, limits)?;
    config.servers[0].addr = format!("{host}:{}", bound.port());
    config
        .validate()
        .map_err(|e| anyhow::anyhow!("generated cluster description is invalid: {e}"))?;
    let path = home.join(CLUSTER_FILE_NAME);
    config
        .save(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    for r in 1..size {
        std::fs::remove_file(addr_file(r)).ok();
    }
    let managers = config.cache_managers().len();
    eprintln!(
        "weftd --mpi: cluster ready: 1 meta + {} io servers, {managers} cache managers; clients use WEFT_HOME={} (or WEFT_META={})",
        size - 1 - cache.cache_ranks,
        home.display(),
        config.servers[0].addr
    );
    loop {
        std::thread::park();
    }
}
