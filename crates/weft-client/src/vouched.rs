//! What this client learnt of files' data from their io servers, under the manager's
//! vouch (`Request::Vouched`): "no write capability of the file is live, and none was
//! issued since stamp S". Facts read from the io servers by a query sent after this
//! client was told S, and found under S again at a later lookup, are still true: no
//! write, truncate or allocation can have reached the objects in between (each needs a
//! write capability, and every grant moves the stamp; the manager's own size and time
//! changes move it too). An open or stat that finds them skips the io servers.
//!
//! Bounded (`FACTS_MAX` files); shared by every client made from one connection.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use weft_layout::{InodeId, Layout};
use weft_proto::{Attr, Timespec};

/// Most files remembered; past this the table starts over.
pub const FACTS_MAX: usize = 65_536;

/// What a file's data is, in a form two looks at it can be compared by: equal stamps of
/// one file, taken at two moments, mean no write, truncate or allocation by any client
/// touched its objects between them. Two kinds, never equal to each other:
/// - the change stamps of its objects (`ObjStamped`, each object's ctime on its server),
///   from the io servers: not to be had while an object changed within the last
///   `ObjStamped::SETTLE_NS`, or from servers that predate them;
/// - the manager's vouch (see the module's text): "no write capability of the file live,
///   none issued since S". Every grant and every size or time the manager sets moves it,
///   and a restarted manager never gives an earlier run's value again, so the same S at
///   two looks is the same data, with no settling time and without asking the io servers.
///
/// None (`None` where it is returned) for files whose data a cache manager holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataStamp {
    pub(crate) inode: InodeId,
    pub(crate) by: StampBy,
}

/// See `DataStamp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StampBy {
    /// The objects' change stamps, in server order.
    Objects(Vec<u64>),
    /// The manager's vouch.
    Vouch(u64),
}

impl DataStamp {
    /// A stamp made up, for other crates' unit tests of tables keyed by stamps.
    #[doc(hidden)]
    pub fn for_tests(inode: InodeId, objects: Vec<u64>) -> DataStamp {
        DataStamp {
            inode,
            by: StampBy::Objects(objects),
        }
    }

    /// The stamp of `inode`'s data under the manager's `vouch`.
    pub(crate) fn vouched(inode: InodeId, vouch: u64) -> DataStamp {
        DataStamp {
            inode,
            by: StampBy::Vouch(vouch),
        }
    }
}

/// A file's data as its io servers told it.
#[derive(Debug, Clone)]
pub(crate) struct Facts {
    layout: Option<Layout>,
    size: u64,
    blocks: u64,
    /// The objects' latest modification time.
    mtime: Timespec,
}

impl Facts {
    /// From `sized`, the attributes the io servers' answer filled in.
    pub(crate) fn of(sized: &Attr) -> Facts {
        Facts {
            layout: sized.layout.clone(),
            size: sized.size,
            blocks: sized.blocks,
            mtime: sized.mtime,
        }
    }

    /// Fills `attr` (the manager's) in as the io servers' answer would.
    pub(crate) fn fill(&self, attr: &mut Attr) {
        attr.size = self.size;
        attr.blocks = self.blocks;
        attr.mtime = attr.mtime.max(self.mtime);
        attr.ctime = attr.ctime.max(self.mtime);
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// The vouch this client was last told.
    pub(crate) vouch: u64,
    /// Facts read after it was told, if any.
    pub(crate) facts: Option<Facts>,
}

#[derive(Default)]
pub(crate) struct Vouched {
    table: Mutex<HashMap<InodeId, Seen>>,
    /// Opens and stats answered without the io servers.
    skipped: AtomicU64,
}

impl Vouched {
    /// The facts of `inode` held under `vouch` for `layout`, if any (counted as a skip).
    pub(crate) fn facts(&self, inode: InodeId, vouch: u64, layout: &Option<Layout>) -> Option<Facts> {
        let table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let facts = table
            .get(&inode)
            .filter(|seen| seen.vouch == vouch)
            .and_then(|seen| seen.facts.as_ref())
            .filter(|facts| facts.layout == *layout)
            .cloned();
        if facts.is_some() {
            self.skipped.fetch_add(1, Ordering::Relaxed);
        }
        facts
    }

    /// This client was told `vouch` for `inode`, with `facts` read after it was told.
    pub(crate) fn record(&self, inode: InodeId, vouch: u64, facts: Option<Facts>) {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if table.len() >= FACTS_MAX && !table.contains_key(&inode) {
            table.clear();
        }
        table.insert(inode, Seen { vouch, facts });
    }

    /// Forgets `inode` (told no vouch: a writer may be live).
    pub(crate) fn forget(&self, inode: InodeId) {
        self.table
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&inode);
    }

    /// An open or stat answered without the io servers by other means (the manager's
    /// own measure of the file: `AttrSized`).
    pub(crate) fn count_skip(&self) {
        self.skipped.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }
}
