//! What each request changes, for the change feed (`crate::feed`): the inodes whose
//! attributes a kernel may hold (mode, owner, times, size, link count) or, for a
//! directory, whose entries changed. Told to the feed before the answer leaves, so a
//! poll after it sees them.

use super::*;
use weft_proto::capability::rights;

impl MetaService {
    /// The inodes `request` may change if it succeeds, each with whether a name of it
    /// goes or moves (looked up before it runs: a removal or rename changes the link
    /// count and times of the inode a name led to, and that name).
    pub(super) fn touched(&self, request: &Request) -> Vec<(InodeId, bool)> {
        let store = &self.store;
        let child = |cred: &Cred, parent: InodeId, name: &Name| {
            store.lookup(cred, parent, name).ok().map(|a| (a.inode, true))
        };
        let attrs = |inodes: &[InodeId]| inodes.iter().map(|i| (*i, false)).collect::<Vec<_>>();
        match request.meta_request() {
            Request::SetAttr { inode, .. }
            | Request::SetXattr { inode, .. }
            | Request::RemoveXattr { inode, .. } => attrs(&[*inode]),
            // A writer may change the size and times without the manager: the file's
            // attributes are not to be held from the grant on (the mount holds only
            // files the manager vouches for, which a live grant is not).
            Request::GrantCapability { inode, rights, .. } if rights & rights::WRITE != 0 => attrs(&[*inode]),
            Request::Create { parent, .. }
            | Request::Mkdir { parent, .. }
            | Request::Mknod { parent, .. }
            | Request::Symlink { parent, .. }
            | Request::CreateMany { parent, .. } => attrs(&[*parent]),
            Request::Link { inode, parent, .. } => attrs(&[*inode, *parent]),
            Request::Unlink {
                cred, parent, name, ..
            }
            | Request::Rmdir { cred, parent, name } => {
                let mut v = attrs(&[*parent]);
                v.extend(child(cred, *parent, name));
                v
            }
            Request::Rename {
                cred,
                src_parent,
                src_name,
                dst_parent,
                dst_name,
                ..
            }
            | Request::RenameNoReplace {
                cred,
                src_parent,
                src_name,
                dst_parent,
                dst_name,
            }
            | Request::RenameExchange {
                cred,
                a_parent: src_parent,
                a_name: src_name,
                b_parent: dst_parent,
                b_name: dst_name,
            } => {
                let mut v = attrs(&[*src_parent, *dst_parent]);
                v.extend(child(cred, *src_parent, src_name));
                v.extend(child(cred, *dst_parent, dst_name));
                v
            }
            _ => Vec::new(),
        }
    }

    /// `Changes`: the feed from `after` on.
    pub(super) fn changes(&self, after: u64, max: u32) -> Response {
        let max = (max as usize).clamp(1, weft_proto::msg::CHANGES_MAX);
        let since = self.feed.since(after, max);
        Response::Changed {
            epoch: since.epoch,
            next: since.next,
            lost: since.lost,
            inodes: since.inodes,
        }
    }
}
