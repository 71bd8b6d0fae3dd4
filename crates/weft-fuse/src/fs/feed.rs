//! The thread that polls the manager's change feed and drops from the kernel's cache
//! what another client changed (see `leases`).

use super::WeftFs;
use crate::kept::OpenInodes;
use crate::leases::{Leases, POLL_PERIOD};
use crate::names::Names;
use fuser::{INodeNo, Notifier};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;
use weft_client::{Client, ErrorCode, InodeId};
use weft_proto::msg::CHANGES_MAX;

/// What the polling thread needs of the file system (weakly: it ends with it).
struct Feed {
    leases: Weak<Leases>,
    names: Weak<Names>,
    /// Files open here: never leased while open (see `Leases::end`), their
    /// attributes live in the kernel for the attribute timeout only, and a drop of
    /// them while the kernel holds pages a mapping dirtied made programs that map the
    /// file (fsx) fault past a size read from the io servers meanwhile.
    open: Weak<OpenInodes>,
    notifier: Arc<OnceLock<Notifier>>,
}

impl Feed {
    /// Drops `inodes`' attributes and, of those whose name went or moved, the name
    /// the kernel knows them by.
    fn drop_named(&self, names: &Names, inodes: &[(InodeId, bool)]) {
        let Some(n) = self.notifier.get() else { return };
        let open = self.open.upgrade();
        for &(inode, moved) in inodes {
            if !open.as_ref().is_some_and(|o| o.is_open(inode)) {
                let _ = n.inval_inode(INodeNo(inode.0), -1, 0);
            }
            if let Some((parent, name)) = names.entry_of(inode).filter(|_| moved) {
                let _ = n.inval_entry(INodeNo(parent.0), OsStr::from_bytes(name.as_bytes()));
            }
        }
    }

    /// Drops every name and attribute the kernel holds of an inode this mount knows.
    fn drop_all(&self, names: &Names) {
        let Some(n) = self.notifier.get() else { return };
        let _ = n.inval_inode(INodeNo(InodeId::ROOT.0), -1, 0);
        for (inode, parent, name) in names.all() {
            let _ = n.inval_inode(INodeNo(inode.0), -1, 0);
            let _ = n.inval_entry(INodeNo(parent.0), OsStr::from_bytes(name.as_bytes()));
        }
    }
}

impl WeftFs {
    /// Starts the feed's polling thread and its watchdog, if leases are on.
    pub(super) fn keep_leases_in_background(&self) {
        if !self.leases.on() {
            return;
        }
        let feed = Arc::new(Feed {
            leases: Arc::downgrade(&self.leases),
            names: Arc::downgrade(&self.names),
            open: Arc::downgrade(&self.open_inodes),
            notifier: Arc::clone(&self.notifier),
        });
        let client = self.clients.base();
        let poller = Arc::clone(&feed);
        let polling = std::thread::Builder::new()
            .name("weft-fuse-feed".into())
            .spawn(move || poll(&poller, &client));
        // The poll may wait long for an answer (a manager gone): the watchdog drops
        // the leased answers when no poll succeeded for half the attribute timeout.
        let watching = std::thread::Builder::new()
            .name("weft-fuse-leases".into())
            .spawn(move || loop {
                std::thread::sleep(POLL_PERIOD);
                let (Some(leases), Some(names)) = (feed.leases.upgrade(), feed.names.upgrade()) else {
                    return;
                };
                if leases.due_drop(Instant::now()) {
                    eprintln!(
                        "weft-fuse: the manager's change feed is late: names and attributes are asked again"
                    );
                    feed.drop_all(&names);
                }
            });
        if let Err(e) = polling.and(watching) {
            eprintln!(
                "weft-fuse: no change feed thread ({e}); a file system of many clients may show changes late"
            );
        }
    }
}

fn poll(feed: &Feed, client: &Client) {
    // Epoch and position of the feed, once known.
    let mut at: Option<(u64, u64)> = None;
    // What the previous poll dropped, dropped once more (see `leases`).
    let mut again: Vec<(InodeId, bool)> = Vec::new();
    let mut failed_before = false;
    loop {
        let (Some(leases), Some(names)) = (feed.leases.upgrade(), feed.names.upgrade()) else {
            return;
        };
        let after = at.map(|(_, next)| next).unwrap_or(u64::MAX);
        match client.changes(after, CHANGES_MAX as u32) {
            Ok(changes) => {
                failed_before = false;
                let carried_on = at.is_some_and(|(epoch, _)| epoch == changes.epoch) && !changes.lost;
                if at.is_some() && !carried_on {
                    leases.lost();
                    feed.drop_all(&names);
                    again.clear();
                }
                // The first answer (or one after a loss) only tells where the feed is.
                let named = if carried_on { changes.inodes } else { Vec::new() };
                let inodes: Vec<InodeId> = named.iter().map(|(inode, _)| *inode).collect();
                leases.polled(&inodes, Instant::now());
                feed.drop_named(&names, &named);
                feed.drop_named(&names, &again);
                at = Some((changes.epoch, changes.next));
                let full = named.len() >= CHANGES_MAX;
                again = named;
                if full {
                    continue;
                }
            }
            Err(e) if e.code() == ErrorCode::UnknownOpcode => {
                eprintln!("weft-fuse: the manager keeps no change feed: names and attributes are kept for the attribute timeout only");
                return;
            }
            Err(e) => {
                if !failed_before {
                    eprintln!("weft-fuse: polling the manager's change feed: {e}");
                }
                failed_before = true;
            }
        }
        drop((leases, names));
        std::thread::sleep(POLL_PERIOD);
    }
}
