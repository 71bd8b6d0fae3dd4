//! MPI-IO shared file pointers, held by the metadata manager (see weft-meta's
//! `shared_pointer`): `Client::shared_pointer`.

use weft_layout::InodeId;
use weft_proto::{Request, Response, SharedOp};

use crate::client::Client;
use crate::error::unexpected;
use crate::error::ClientError;

impl Client {
    /// Applies `op` to the shared file pointer of open `open` (a random id) of
    /// `inode` in view `epoch`, at the metadata manager; returns the value before.
    pub fn shared_pointer(
        &self,
        inode: InodeId,
        open: u64,
        epoch: u64,
        op: SharedOp,
    ) -> Result<u64, ClientError> {
        let request = Request::SharedPointer {
            inode,
            open,
            epoch,
            op,
        };
        self.pointer_request(request)
    }

    /// The incarnation of the metadata manager this client talks to (its handshake's):
    /// what an open that makes no shared pointer records for `shared_pointer_since`.
    pub fn meta_incarnation(&self) -> Result<u64, ClientError> {
        Ok(self.inner.pool.get(&self.inner.meta_route)?.incarnation())
    }

    /// `shared_pointer` for an open that made no pointer: the manager makes it (at 0)
    /// at the first request, if it is still the manager of `incarnation`
    /// ([`Client::meta_incarnation`] at the open); after a restart, `NotFound`.
    pub fn shared_pointer_since(
        &self,
        inode: InodeId,
        open: u64,
        epoch: u64,
        incarnation: u64,
        op: SharedOp,
    ) -> Result<u64, ClientError> {
        self.pointer_request(Request::SharedPointerSince {
            inode,
            open,
            epoch,
            incarnation,
            op,
        })
    }

    fn pointer_request(&self, request: Request) -> Result<u64, ClientError> {
        match self
            .inner
            .meta(&request)
            .map_err(|e| e.context("shared file pointer"))?
        {
            Response::Position(value) => Ok(value),
            other => Err(unexpected(&other)),
        }
    }
}
