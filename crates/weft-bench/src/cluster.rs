//! The cluster a benchmark runs against: connecting to it, and the fresh file each
//! benchmark measures.

use anyhow::{Context, Result};
use weft_client::{Client, CreateOptions, ErrorCode, Layout};

/// A client of the cluster named by the environment (`WEFT_HOME`, ...).
pub fn connect() -> Result<Client> {
    Client::from_env().context("no Weft cluster to benchmark (start one with `weft up`)")
}

/// Removes `path` if it exists and creates it afresh, so that the layout asked for
/// is the one measured; returns that layout.
pub fn recreate(client: &Client, path: &str, create: &CreateOptions) -> Result<Layout> {
    match client.unlink(path) {
        Err(e) if e.code() != ErrorCode::NotFound => return Err(e.into()),
        _ => {}
    }
    Ok(client.create(path, create)?.layout().clone())
}
