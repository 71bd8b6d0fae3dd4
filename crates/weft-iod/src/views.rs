//! Views registered by clients (Clusterfile "view I/O"): kept per connection, at most
//! [`VIEWS_PER_CONNECTION_MAX`] at a time, all released when the connection closes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use weft_layout::view::View;
use weft_proto::msg::{ViewId, VIEWS_PER_CONNECTION_MAX};
use weft_proto::{ErrorCode, WireError};
use weft_rpc::ConnectionId;

/// Shared by an io role and a cache role in the same process, so a view registered
/// once on a connection serves both.
#[derive(Default)]
pub struct ViewRegistry {
    connections: Mutex<HashMap<ConnectionId, ConnectionViews>>,
}

#[derive(Default)]
struct ConnectionViews {
    next_id: u32,
    views: HashMap<ViewId, Arc<View>>,
}

impl ViewRegistry {
    pub fn register(&self, connection: ConnectionId, view: View) -> Result<ViewId, WireError> {
        let mut connections = self.connections.lock().unwrap();
        let entry = connections.entry(connection).or_default();
        if entry.views.len() >= VIEWS_PER_CONNECTION_MAX {
            return Err(WireError::new(
                ErrorCode::Busy,
                format!(
                    "{VIEWS_PER_CONNECTION_MAX} views are registered on this connection, the most \
                     allowed: release one first"
                ),
            ));
        }
        // Ids are not reused soon after release, so a stale id fails rather than
        // naming another view; the limit guarantees a free one within a few steps.
        let id = loop {
            entry.next_id = entry.next_id.wrapping_add(1);
            let candidate = ViewId(entry.next_id);
            if !entry.views.contains_key(&candidate) {
                break candidate;
            }
        };
        entry.views.insert(id, Arc::new(view));
        Ok(id)
    }

    pub fn release(&self, connection: ConnectionId, id: ViewId) -> Result<(), WireError> {
        let mut connections = self.connections.lock().unwrap();
        let removed = connections.get_mut(&connection).and_then(|c| c.views.remove(&id));
        match removed {
            Some(_) => Ok(()),
            None => Err(unknown(id)),
        }
    }

    pub fn get(&self, connection: ConnectionId, id: ViewId) -> Result<Arc<View>, WireError> {
        self.connections
            .lock()
            .unwrap()
            .get(&connection)
            .and_then(|c| c.views.get(&id).cloned())
            .ok_or_else(|| unknown(id))
    }

    /// Drops every view of a closed connection.
    pub fn close(&self, connection: ConnectionId) {
        self.connections.lock().unwrap().remove(&connection);
    }

    /// Views registered over all connections.
    pub fn count(&self) -> usize {
        self.connections
            .lock()
            .unwrap()
            .values()
            .map(|c| c.views.len())
            .sum()
    }
}

fn unknown(id: ViewId) -> WireError {
    WireError::new(
        ErrorCode::InvalidArgument,
        format!(
            "{id} is not registered on this connection (views belong to the connection that \
             registered them; register it again after reconnecting)"
        ),
    )
}
