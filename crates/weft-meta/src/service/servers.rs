//! Io servers joining the running cluster (`weft server add`, `AddServer`): the manager
//! checks the new server answers as that io server of this cluster, records it durably
//! (`store/ops/servers.rs`), serves it in `GetCluster` and places new files on it. At a
//! start the recorded additions are merged with the cluster description's servers
//! (`merge_added`).

use super::*;
use weft_proto::msg::{server_state, SERVER_STATES_MAX};
use weft_proto::IoServer;

/// Adds `added` (the manager's record) to `io` (the description's io servers): one
/// already there with the same address is the same server (the description caught up);
/// an id or address that another server of the description (`others`: every server's
/// id and address, io servers included) has is a clash.
pub fn merge_added(
    io: &mut Vec<IoServer>,
    others: &[(ServerId, String)],
    added: Vec<IoServer>,
) -> Result<(), String> {
    for server in added {
        if let Some(known) = io.iter().find(|s| s.id == server.id) {
            if known.addr == server.addr {
                continue;
            }
            return Err(format!(
                "io server {} is at {} in the cluster description but at {} in the manager's record of `weft server add`: \
                 make the description say {} (or give the new server another id)",
                server.id, known.addr, server.addr, server.addr
            ));
        }
        if let Some((id, addr)) = others
            .iter()
            .find(|(id, addr)| *id == server.id || *addr == server.addr)
        {
            return Err(format!(
                "io server {} at {} (added with `weft server add`) clashes with server {id} at {addr} of the cluster description",
                server.id, server.addr
            ));
        }
        io.push(server);
    }
    Ok(())
}

impl MetaService {
    /// `AddServer`: `server` joins the cluster once it answered as an io server of
    /// this cluster at its address; it takes new files at once.
    pub(super) fn add_server(&self, cred: &Cred, server: IoServer) -> Result<Response, WireError> {
        // Root first: nobody else makes the manager connect anywhere.
        if cred.uid != 0 {
            return Err(WireError::new(
                ErrorCode::PermissionDenied,
                "only root may add an io server",
            ));
        }
        if server.addr.is_empty() || server.addr.len() > ADDR_BYTES_MAX {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!("an io server's address is host:port, at most {ADDR_BYTES_MAX} bytes"),
            ));
        }
        let _one_at_a_time = self.adding.lock().unwrap_or_else(|p| p.into_inner());
        let cluster = self.cluster();
        if let Some(known) = cluster.io_servers.iter().find(|s| s.id == server.id) {
            return Err(WireError::new(
                ErrorCode::Exists,
                format!(
                    "io server {} is in the cluster already (at {})",
                    server.id, known.addr
                ),
            ));
        }
        if let Some(known) = cluster
            .io_servers
            .iter()
            .chain(&cluster.cache.managers)
            .find(|s| s.id == server.id || s.addr == server.addr)
        {
            return Err(WireError::new(
                ErrorCode::Exists,
                format!(
                    "server {} at {} is in the cluster already: ids and addresses are one per server",
                    known.id, known.addr
                ),
            ));
        }
        if self
            .reserved
            .iter()
            .any(|(id, addr)| *id == server.id || *addr == server.addr)
        {
            return Err(WireError::new(
                ErrorCode::Exists,
                format!(
                    "io server {} at {}: that id or address is the metadata manager's",
                    server.id, server.addr
                ),
            ));
        }
        if cluster.io_servers.len() >= SERVER_STATES_MAX {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!("the cluster has {SERVER_STATES_MAX} io servers: no more can be added"),
            ));
        }
        self.objects.join(&server)?;
        self.store.add_io_server(cred, &server)?;
        let id = server.id;
        {
            let mut cluster = self.cluster.write().unwrap_or_else(|p| p.into_inner());
            cluster.io_servers.push(server);
        }
        // The default layout over all active servers (stripe count 0) takes it in now.
        let mut layout = self.store.cluster();
        let state = self
            .store
            .server_states(&[id])?
            .first()
            .map_or(server_state::ACTIVE, |(_, st)| *st);
        if state == server_state::ACTIVE && !layout.io_servers.contains(&id) {
            layout.io_servers.push(id);
            self.store.set_cluster(layout)?;
        }
        eprintln!("weftd meta: io server {id} joined the cluster (weft server add)");
        Ok(Response::Cluster(self.cluster()))
    }
}

/// Longest address of an added io server.
const ADDR_BYTES_MAX: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    fn io(id: u32, addr: &str) -> IoServer {
        IoServer {
            id: ServerId(id),
            addr: addr.into(),
            socket: None,
        }
    }

    #[test]
    fn added_servers_merge_with_the_description_or_clash() {
        let described = vec![io(1, "a:1"), io(2, "a:2")];
        let others: Vec<(ServerId, String)> = vec![
            (ServerId(0), "m:0".into()),
            (ServerId(1), "a:1".into()),
            (ServerId(2), "a:2".into()),
        ];
        // New, and one the description caught up with.
        let mut io_servers = described.clone();
        merge_added(&mut io_servers, &others, vec![io(2, "a:2"), io(3, "a:3")]).unwrap();
        assert_eq!(io_servers, vec![io(1, "a:1"), io(2, "a:2"), io(3, "a:3")]);
        // The same id elsewhere, the manager's id, another server's address.
        for clash in [io(2, "b:2"), io(0, "b:0"), io(4, "a:1"), io(5, "m:0")] {
            let mut io_servers = described.clone();
            let err = merge_added(&mut io_servers, &others, vec![clash.clone()]).unwrap_err();
            assert!(err.contains(&format!("io server {}", clash.id)), "{err}");
            assert_eq!(io_servers, described);
        }
    }
}
