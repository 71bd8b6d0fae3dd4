//! `weft server`: io servers' states at the manager (active, draining, drained,
//! removed) and the drain that migrates every file with a piece on a server off it
//! (`Client::migrate_attr`), online, as BeeGFS's `beegfs-ctl --migrate`.

use anyhow::Result;
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
