//! MPI-IO shared file pointers, held by the metadata manager (see weft-meta's
//! `shared_pointer`): `Client::shared_pointer`.

use weft_layout::InodeId;
use weft_proto::{Request, Response, SharedOp};

use crate::client::{unexpected, Client};
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
