//! The manager's change feed (`Changes`) and the answers a mount may hold past its
//! attribute timeout (see weft-fuse's `leases`).

use super::Client;
use crate::error::{unexpected, ClientError};
use crate::vouched::{DataStamp, StampBy};
use weft_layout::InodeId;
use weft_proto::msg::{Request, Response};
use weft_proto::{Attr, FileKind, Name};

/// One poll of the change feed: the inodes whose attributes, entries or names changed
/// from the position asked up to `next` (each with whether a name of it went or
/// moved), in the manager run `epoch`; `lost`: the position was older than the feed
/// keeps (everything may have changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changes {
    pub epoch: u64,
    pub next: u64,
    pub lost: bool,
    pub inodes: Vec<(InodeId, bool)>,
}

impl Client {
    /// The inodes changed since position `after` of the manager's feed (at most
    /// `max`). Asked once, not again after a restart (the caller polls anyway). An
    /// older manager answers `UnknownOpcode`.
    pub fn changes(&self, after: u64, max: u32) -> Result<Changes, ClientError> {
        let meta = self.inner.meta_connection()?;
        let (response, _) = meta.send(&Request::Changes { after, max }, &[])?.wait()?;
        match response {
            Response::Changed {
                epoch,
                next,
                lost,
                inodes,
            } => Ok(Changes {
                epoch,
                next,
                lost,
                inodes,
            }),
            other => Err(unexpected(&other)),
        }
    }

    /// `getattr_sized`, and whether the answer may be held until the feed names the
    /// inode (`leasable`).
    pub fn getattr_leasable(
        &self,
        inode: InodeId,
        known: Option<&Attr>,
    ) -> Result<(Attr, bool), ClientError> {
        let request = Request::GetAttr {
            cred: self.cred_clone(),
            inode,
        };
        let (attr, stamp) = self.answer_sized(request, &format!("inode {inode}"), known, false)?;
        let leasable = leasable(&attr, stamp.as_ref());
        Ok((attr, leasable))
    }

    /// `lookup_sized`, and whether the answer may be held until the feed names the
    /// inode or its directory (`leasable`).
    pub fn lookup_leasable(
        &self,
        parent: InodeId,
        name: impl AsRef<[u8]>,
        guess: Option<&Attr>,
    ) -> Result<(Attr, bool), ClientError> {
        let name = name.as_ref();
        let request = Request::Lookup {
            cred: self.cred_clone(),
            parent,
            name: Name::from(name),
        };
        let (attr, stamp) = self.answer_sized(request, &String::from_utf8_lossy(name), guess, false)?;
        let leasable = leasable(&attr, stamp.as_ref());
        Ok((attr, leasable))
    }
}

/// Whether attributes may be held until the change feed names the inode: what only
/// the manager changes (a directory's, a symbolic link's), or a regular file the
/// manager vouched for (no write capability live: its size and times change only
/// after a grant, which the feed names). Not a file whose data a cache manager
/// holds (its size moves with write-backs).
pub fn leasable(attr: &Attr, stamp: Option<&DataStamp>) -> bool {
    match attr.kind {
        FileKind::Directory | FileKind::Symlink => true,
        FileKind::File => {
            !attr.cache.uses_tier()
                && matches!(
                    stamp,
                    Some(DataStamp {
                        by: StampBy::Vouch(_),
                        ..
                    })
                )
        }
        _ => false,
    }
}
