//! The manager's record of io servers added to the running cluster (`weft server
//! add`), table `added_io_servers`: kept durably so that a restarted manager still
//! serves them beside the cluster description's own.

use super::super::access::is_root;
use super::super::{MetaStore, StorageResult};
use redb::ReadableTable;
use weft_proto::{Cred, ErrorCode, IoServer, Wire, WireError};

impl MetaStore {
    /// The io servers recorded by `add_io_server`, in id order.
    pub fn added_io_servers(&self) -> Result<Vec<IoServer>, WireError> {
        self.read(|tx| {
            let mut out = Vec::new();
            for entry in tx.added_servers.iter().storage()? {
                let (id, value) = entry.storage()?;
                let server = IoServer::from_bytes(value.value()).map_err(|e| {
                    WireError::new(
                        ErrorCode::Internal,
                        format!("the record of added io server {} is corrupt: {e}", id.value()),
                    )
                })?;
                out.push(server);
            }
            Ok(out)
        })
    }

    /// Records `server` as added to the cluster, durably. Root only; the caller checks
    /// that it clashes with no other server.
    pub fn add_io_server(&self, cred: &Cred, server: &IoServer) -> Result<(), WireError> {
        if !is_root(cred) {
            return Err(WireError::new(
                ErrorCode::PermissionDenied,
                "only root may add an io server",
            ));
        }
        let bytes = server.to_bytes();
        let id = server.id.0;
        self.write_durable(move |tx| {
            tx.added_servers.insert(id, bytes.as_slice()).storage()?;
            Ok(())
        })
    }
}
