//! The process's client of the Weft cluster, made at the first open (from the
//! environment, or from a Weft mount's address and key), and the Weft path an MPI file
//! name stands for.

use std::sync::Mutex;

use weft_client::Client;
use weft_interpose::mount::{resolve, MountCluster};

use crate::error::{ErrorClass, MpiioError, Result};
use crate::mpi;

/// The process's connection to the cluster, made at the first open.
static CLIENT: Mutex<Option<Client>> = Mutex::new(None);

pub(crate) fn client() -> Result<Client> {
    let mut c = CLIENT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(client) = c.as_ref() {
        return Ok(client.clone());
    }
    let client = Client::from_env().map_err(|e| {
        MpiioError::new(
            ErrorClass::Io,
            format!("cannot reach the Weft cluster (WEFT_HOME / WEFT_META): {e}"),
        )
    })?;
    note_servers_here(&client);
    *c = Some(client.clone());
    Ok(client)
}

/// Whether any server of the client's cluster runs on this machine (its Unix socket
/// exists here, or its address is a loopback one): then the agreeing collectives wait
/// sleeping (see `mpi::note_local_servers`).
fn note_servers_here(client: &Client) {
    let info = client.cluster_info();
    let here = info.io_servers.iter().chain(info.cache.managers.iter()).any(|s| {
        s.socket
            .as_deref()
            .is_some_and(|p| std::path::Path::new(p).exists())
            || s.addr.starts_with("127.")
            || s.addr.starts_with("localhost:")
            || s.addr.starts_with("[::1]:")
    });
    if here {
        mpi::note_local_servers();
    }
}

/// The process's client when it reaches the cluster of a Weft mount (src/mount.rs):
/// the environment's, else, when the environment names no cluster, one made from the
/// mount's address and key.
pub(crate) fn client_for_mount(cluster: &MountCluster) -> Result<Client> {
    let mut c = CLIENT.lock().unwrap_or_else(|e| e.into_inner());
    let client = weft_interpose::mount::client_for(cluster, c.clone())
        .map_err(|why| MpiioError::new(ErrorClass::Io, why))?;
    note_servers_here(&client);
    *c = Some(client.clone());
    Ok(client)
}

/// The Weft path of an MPI file name "weft:/path", or of a path inside a Weft mount.
pub fn weft_path(name: &str) -> Result<String> {
    if !name.starts_with("weft:") {
        if let Some(mounted) = resolve(name) {
            return Ok(mounted.path);
        }
    }
    let rest = name.strip_prefix("weft:").unwrap_or(name);
    if rest.is_empty() {
        return Err(MpiioError::new(
            ErrorClass::BadFile,
            format!("{name}: no path after weft:"),
        ));
    }
    Ok(if rest.starts_with('/') {
        rest.to_owned()
    } else {
        format!("/{rest}")
    })
}
