//! Quotas (`weft quota`): an id's limits and usage, setting them and the grace
//! periods, a file's project, and a recount. The manager checks who may (see
//! `weft_proto::quota`); refusals of creates and writes come back as
//! `ErrorCode::QuotaExceeded` from the calls that allocate.

use super::Client;
use crate::error::{unexpected, ClientError};
use weft_proto::msg::{Request, Response};
use weft_proto::quota::{QuotaGrace, QuotaKind, QuotaLimits, QuotaReport};

impl Client {
    /// The limits and usage of `kind` id `id` (a user may see his own).
    pub fn quota(&self, kind: QuotaKind, id: u32) -> Result<QuotaReport, ClientError> {
        let request = Request::QuotaGet {
            cred: self.cred_clone(),
            kind,
            id,
        };
        report(self.inner.meta(&request)?)
    }

    /// Sets the limits of `kind` id `id` (all 0: none); root or the file system's owner.
    pub fn set_quota(
        &self,
        kind: QuotaKind,
        id: u32,
        limits: QuotaLimits,
    ) -> Result<QuotaReport, ClientError> {
        let request = Request::QuotaSet {
            cred: self.cred_clone(),
            kind,
            id,
            limits,
        };
        report(self.inner.meta(&request)?)
    }

    /// Sets the grace periods of `kind`'s soft limits.
    pub fn set_quota_grace(&self, kind: QuotaKind, grace: QuotaGrace) -> Result<QuotaReport, ClientError> {
        let request = Request::QuotaGrace {
            cred: self.cred_clone(),
            kind,
            grace,
        };
        report(self.inner.meta(&request)?)
    }

    /// The project of `path` (0: none); with `set`, gives it that project first (and
    /// with `recursive`, everything below a directory).
    pub fn project(&self, path: &str, set: Option<u32>, recursive: bool) -> Result<u32, ClientError> {
        let inode = self.resolve(path)?.inode;
        let request = Request::Project {
            cred: self.cred_clone(),
            inode,
            set,
            recursive,
        };
        match self.inner.meta(&request).map_err(|e| e.context(path))? {
            Response::ProjectId(project) => Ok(project),
            other => Err(unexpected(&other)),
        }
    }

    /// Settles every file's bytes from the io servers and counts every id's usage
    /// again (root or the file system's owner).
    pub fn quota_recount(&self) -> Result<(), ClientError> {
        let request = Request::QuotaRecount {
            cred: self.cred_clone(),
        };
        match self.inner.meta(&request)? {
            Response::Done => Ok(()),
            other => Err(unexpected(&other)),
        }
    }
}

fn report(response: Response) -> Result<QuotaReport, ClientError> {
    match response {
        Response::Quota(report) => Ok(report),
        other => Err(unexpected(&other)),
    }
}
