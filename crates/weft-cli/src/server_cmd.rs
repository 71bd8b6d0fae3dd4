//! `weft server`: io servers joining the running cluster (`add`), their states at the
//! manager (active, draining, drained, removed) and the drain that migrates every file
//! with a piece on a server off it (`Client::migrate_attr`), online, as BeeGFS's
//! `beegfs-ctl --migrate`.

use anyhow::{bail, Result};
use std::io::Write;
use std::time::{Duration, Instant};
use weft_client::{Client, ErrorCode, InodeId, LayoutRequest, ServerId};
use weft_proto::msg::server_state;

#[derive(clap::Subcommand, Debug)]
pub enum ServerCommand {
    /// Each io server's state: active (new files go there), draining, drained, removed.
    List,
    /// Move every file with a piece on io server N off it, online (root): N takes no
    /// new files from now on, each of its files is migrated to other io servers with
    /// its stripe size, count and redundancy (narrowed to the active servers if it was
    /// striped over more), then N is marked drained.
    Drain {
        /// The io server (as `weft status` numbers them).
        server: u32,
        /// No progress line on stderr.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Take a drained io server out of service (root): refused while a file has a
    /// piece there. It may then leave the cluster description.
    Remove {
        /// The io server (as `weft status` numbers them).
        server: u32,
    },
    /// Place new files on io server N again (after a drain, or a remove; root).
    Activate {
        /// The io server (as `weft status` numbers them).
        server: u32,
    },
    /// Add an io server to the running cluster (root): the manager checks that it
    /// answers at ADDR as io server ID of this cluster (cluster key, io role, protocol),
    /// records it (kept across manager restarts) and places new files on it at once;
    /// clients learn of it when a layout first names it. Without --addr, a new io
    /// server is started in the home of a `weft up` cluster, as `weft up` starts
    /// them, and kept in its cluster.toml (`weft down` stops it, `weft up` restarts it).
    #[command(
        after_help = "Examples:\n  weft server add\n      start io server N+1 in this `weft up` home and add it\n  weft server add --id 5 --addr node5:7400\n      add the io server started on node5 with the cluster's keys:\n      weftd --role io --id 5 --listen node5:7400 --data /srv/weft \\\n            --key cluster.key --capability-key capability.key"
    )]
    Add {
        /// The new server's id: unique among the cluster's servers, as its weftd was
        /// started with (`--id`). Without --addr: the next free id by default.
        #[arg(long)]
        id: Option<u32>,
        /// Where the new io server listens (host:port), already running.
        #[arg(long, value_name = "HOST:PORT")]
        addr: Option<String>,
        /// The new io server's Unix socket, for clients on its machine (with --addr).
        #[arg(long, requires = "addr")]
        socket: Option<String>,
        /// The new server exits at the end of this command's standard input (as `weft
        /// up --tie-to-stdin`).
        #[arg(long, hide = true)]
        tie_to_stdin: bool,
    },
}

pub fn run(client: &Client, command: ServerCommand) -> Result<()> {
    match command {
        ServerCommand::List => print_states(&client.server_states()?),
        ServerCommand::Drain { server, quiet } => drain(client, ServerId(server), quiet)?,
        ServerCommand::Remove { server } => {
            print_states(&client.set_server_state(ServerId(server), server_state::REMOVED)?)
        }
        ServerCommand::Activate { server } => {
            print_states(&client.set_server_state(ServerId(server), server_state::ACTIVE)?)
        }
        ServerCommand::Add {
            id,
            addr,
            socket,
            tie_to_stdin,
        } => add(client, id, addr, socket, tie_to_stdin)?,
    }
    Ok(())
}

fn add(
    client: &Client,
    id: Option<u32>,
    addr: Option<String>,
    socket: Option<String>,
    tied: bool,
) -> Result<()> {
    let cluster = match addr {
        Some(addr) => {
            let Some(id) = id else {
                bail!("--addr needs --id: the id the io server at {addr} was started with (weftd --id)");
            };
            client.add_server(weft_proto::IoServer {
                id: ServerId(id),
                addr,
                socket,
            })?
        }
        None => {
            // The home of the cluster this client uses ($WEFT_HOME, else ~/.weft).
            let home = weft_config::home_dir();
            let description = home.join(weft_config::CLUSTER_FILE_NAME);
            let described = match weft_config::ClusterConfig::load(&description) {
                Ok(config) if config.meta().addr == client.meta_addr() => config,
                _ => bail!(
                    "no `weft up` cluster of this manager ({}) in {}: start the new io server yourself (weftd --role io --id N ...) and give --id and --addr",
                    client.meta_addr(),
                    home.display()
                ),
            };
            let known = client.refresh_cluster()?;
            let next = known
                .io_servers
                .iter()
                .chain(&known.cache.managers)
                .map(|s| s.id.0)
                .chain(described.servers.iter().map(|s| s.id))
                .max()
                .map_or(1, |m| m + 1);
            let id = id.unwrap_or(next);
            let started = crate::cluster::start_io_server(&home, id, tied)?;
            let server = weft_proto::IoServer {
                id: ServerId(id),
                addr: started.entry.addr.clone(),
                socket: started.entry.socket.as_ref().map(|p| p.display().to_string()),
            };
            match client.add_server(server) {
                Ok(cluster) => {
                    started.keep(&home)?;
                    cluster
                }
                Err(e) => {
                    started.discard(&home);
                    return Err(e.into());
                }
            }
        }
    };
    println!("the cluster's io servers now (new files are placed on the active ones):");
    for s in &cluster.io_servers {
        println!("  io server {}: {}", s.id, s.addr);
    }
    Ok(())
}

fn print_states(states: &[(ServerId, u8)]) {
    for (server, state) in states {
        println!("io server {server}: {}", server_state::name(*state));
    }
}

/// Every io server's state as the manager at `addr` says (none if it cannot).
pub fn states_at(
    addr: &str,
    auth: &weft_rpc::ClientAuth,
    timeouts: weft_rpc::Timeouts,
) -> Vec<(ServerId, u8)> {
    let request = weft_proto::msg::Request::ServerStates {
        cred: weft_proto::Cred::default(),
    };
    match weft_rpc::Connection::connect(addr, "weft status", auth, timeouts).map(|c| c.call(&request, &[])) {
        Ok(Ok((weft_proto::msg::Response::ServerStates { states }, _))) => states,
        _ => Vec::new(),
    }
}

/// The line `weft status` prints under an io server that is not active, if any.
pub fn status_note(states: &[(ServerId, u8)], server: u32) -> Option<String> {
    let (_, state) = states.iter().find(|(s, _)| s.0 == server)?;
    (*state != server_state::ACTIVE).then(|| {
        format!(
            "placement: {} (takes no new files; see `weft server`)",
            server_state::name(*state)
        )
    })
}

fn drain(client: &Client, server: ServerId, quiet: bool) -> Result<()> {
    client.set_server_state(server, server_state::DRAINING)?;
    let started = Instant::now();
    let mut last = Instant::now();
    let (mut files, mut bytes) = (0u64, 0u64);
    let mut failed: Vec<String> = Vec::new();
    let mut after = InodeId(0);
    loop {
        let (page, more) = client.server_files(server, after)?;
        for inode in &page {
            let attr = match client.getattr(*inode) {
                Ok(attr) => attr,
                // Removed meanwhile: nothing to move.
                Err(e) if matches!(e.code(), ErrorCode::NotFound | ErrorCode::Stale) => continue,
                Err(e) => {
                    failed.push(format!("inode {inode}: {e}"));
                    continue;
                }
            };
            let root = client.resolve("/")?;
            // A file striped over more servers than remain active is narrowed to the
            // active ones (as `lfs migrate` restripes off a removed target); others
            // keep their stripe count.
            let active = client
                .server_states()?
                .iter()
                .filter(|(_, state)| *state == server_state::ACTIVE)
                .count() as u32;
            let count = attr.layout.as_ref().map_or(0, |l| l.servers.len() as u32);
            let asked = LayoutRequest {
                stripe_count: (active > 0 && count > active).then_some(active),
                ..LayoutRequest::default()
            };
            match client.migrate_attr(&attr, (root.inode, "drain"), &asked, &[server], &mut |_, _| {}) {
                Ok(m) => {
                    files += u64::from(m.old != m.new);
                    bytes += m.bytes;
                }
                Err(e) if matches!(e.code(), ErrorCode::NotFound | ErrorCode::Stale) => {}
                Err(e) => failed.push(format!("inode {inode}: {e}")),
            }
            if !quiet && last.elapsed() >= Duration::from_millis(500) {
                last = Instant::now();
                let mut err = std::io::stderr().lock();
                let _ = write!(
                    err,
                    "\rdrain io server {server}: {files} files moved, {} copied, {} failed   ",
                    crate::cluster::human_bytes(bytes),
                    failed.len()
                );
                let _ = err.flush();
            }
        }
        match page.last() {
            Some(last) if more => after = *last,
            _ => break,
        }
    }
    if !quiet && last.elapsed() < started.elapsed() {
        eprintln!();
    }
    println!(
        "drained io server {server}: {files} files moved off it, {} copied in {:.2} s",
        crate::cluster::human_bytes(bytes),
        started.elapsed().as_secs_f64()
    );
    for why in &failed {
        eprintln!("weft: not moved: {why}");
    }
    if !failed.is_empty() {
        anyhow::bail!(
            "{} files are still on io server {server} (it stays draining: run `weft server drain {server}` again)",
            failed.len()
        );
    }
    match client.set_server_state(server, server_state::DRAINED) {
        Ok(_) => {
            println!("io server {server}: drained (no file has a piece there; `weft server remove {server}` takes it out of service)");
            Ok(())
        }
        Err(e) => anyhow::bail!("io server {server} stays draining: {e} (files were created there meanwhile? run the drain again)"),
    }
}
