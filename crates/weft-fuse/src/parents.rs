//! Directories' attributes as the manager's answer to a create in them had them.
//!
//! Every create, mkdir, symlink, mknod or link makes the kernel drop the attributes it
//! cached of the directory, and with `default_permissions` it asks for them again
//! (GETATTR) at the next permission check there: for `tar x` one more manager round
//! trip per file. The manager answers those operations with the directory's
//! attributes as the operation's own transaction left them (`WithParent`), and the
//! next GETATTR of that directory is answered with them: once, and only while the
//! attribute timeout, counted from when the operation was *sent*, has not run out;
//! the kernel keeps the answer for what remains of it. So no answer is older than
//! one the kernel could have cached from a GETATTR sent with the operation: the
//! promise "attributes at most `attr_ttl` old" is unchanged.
//!
//! This mount's own changes must show at once, so an answer is kept only if no other
//! change of the directory by this mount began or ended while the operation was on its
//! way (its answer may predate theirs at the manager), and any change of the
//! directory drops it. A rename changes more than its two directories (the moved
//! directory's `..` and times), so it drops every kept answer, and an answer is kept
//! only if no rename began or ended meanwhile.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use weft_client::{Attr, InodeId};

/// Directories tracked at once (changes in flight or an answer kept). Past it, kept
/// answers are dropped (the kernel then asks the manager, as without them).
const DIRECTORIES_MAX: usize = 4096;

pub struct Parents {
    ttl: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    dirs: HashMap<InodeId, Dir>,
    /// Renames in flight.
    renaming: u32,
    /// Bumped as a rename begins and as it ends.
    renames: u64,
}

#[derive(Default)]
struct Dir {
    /// Changes of the directory by this mount in flight.
    busy: u32,
    /// Bumped as each change begins and as it ends.
    generation: u64,
    /// The attributes the last change's answer carried, and when it was sent.
    fresh: Option<(Attr, Instant)>,
}

/// A change of directory `dir` under way (see `Parents::begin`).
#[must_use = "end the change with `Parents::end`"]
pub struct Change {
    dir: InodeId,
    generation: u64,
    renames: u64,
    sent: Instant,
}

impl Parents {
    pub fn new(ttl: Duration) -> Parents {
        Parents {
            ttl,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This mount is about to change directory `dir` (make or remove a name in it,
    /// change its attributes): what is kept of it goes. Call before sending the change.
    pub fn begin(&self, dir: InodeId) -> Change {
        let mut state = self.lock();
        let renames = state.renames;
        let d = state.dirs.entry(dir).or_default();
        d.busy += 1;
        d.generation += 1;
        d.fresh = None;
        Change {
            dir,
            generation: d.generation,
            renames,
            sent: Instant::now(),
        }
    }

    /// The change is answered, with `parent` the directory's attributes the answer
    /// carried (if any): kept if nothing else changed the directory here meanwhile.
    pub fn end(&self, change: Change, parent: Option<&Attr>) {
        let mut state = self.lock();
        let quiet = state.renaming == 0 && state.renames == change.renames;
        let full = state.dirs.len() > DIRECTORIES_MAX;
        let Some(d) = state.dirs.get_mut(&change.dir) else {
            return;
        };
        if let Some(attr) = parent {
            if quiet && !full && d.busy == 1 && d.generation == change.generation && attr.inode == change.dir
            {
                d.fresh = Some((attr.clone(), change.sent));
            }
        }
        d.busy -= 1;
        d.generation += 1;
        if d.busy == 0 && d.fresh.is_none() {
            state.dirs.remove(&change.dir);
        }
        if full {
            // Kept answers never asked for: drop them, keep what is in flight.
            state.dirs.retain(|_, d| d.busy > 0);
        }
    }

    /// A rename is about to be sent: every kept answer goes, and none is kept until it
    /// has ended.
    pub fn rename_begins(&self) {
        let mut state = self.lock();
        state.renaming += 1;
        state.renames += 1;
        state.dirs.retain(|_, d| {
            d.fresh = None;
            d.busy > 0
        });
    }

    /// The rename begun with `rename_begins` is answered.
    pub fn rename_ends(&self) {
        let mut state = self.lock();
        state.renaming -= 1;
        state.renames += 1;
    }

    /// The kept attributes of directory `dir`, taken (a second GETATTR asks the
    /// manager), with how long the kernel may keep them; `None` if none are kept or
    /// the timeout has run out.
    pub fn take(&self, dir: InodeId) -> Option<(Attr, Duration)> {
        let mut state = self.lock();
        let d = state.dirs.get_mut(&dir)?;
        let fresh = d.fresh.take();
        if d.busy == 0 {
            state.dirs.remove(&dir);
        }
        let (attr, sent) = fresh?;
        let left = self.ttl.checked_sub(sent.elapsed())?;
        (!left.is_zero()).then_some((attr, left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_client::FileKind;

    fn dir(inode: u64, nlink: u32) -> Attr {
        Attr {
            inode: InodeId(inode),
            kind: FileKind::Directory,
            mode: 0o755,
            uid: 0,
            gid: 0,
            nlink,
            size: 0,
            atime: Default::default(),
            mtime: Default::default(),
            ctime: Default::default(),
            layout: None,
            cache: Default::default(),
            dir_layout: None,
            rdev: 0,
            blocks: 8,
        }
    }

    #[test]
    fn an_answer_is_taken_once_within_the_timeout() {
        let parents = Parents::new(Duration::from_secs(1));
        let change = parents.begin(InodeId(5));
        parents.end(change, Some(&dir(5, 3)));
        let (attr, left) = parents.take(InodeId(5)).expect("kept");
        assert_eq!(attr.nlink, 3);
        assert!(left <= Duration::from_secs(1) && !left.is_zero());
        assert!(parents.take(InodeId(5)).is_none(), "taken once");
        // Another directory's answer, or none.
        let change = parents.begin(InodeId(6));
        parents.end(change, Some(&dir(7, 2)));
        assert!(parents.take(InodeId(6)).is_none());
        assert!(parents.take(InodeId(7)).is_none());
        let change = parents.begin(InodeId(6));
        parents.end(change, None);
        assert!(parents.take(InodeId(6)).is_none());
        assert!(parents.lock().dirs.is_empty(), "nothing left behind");
    }

    #[test]
    fn the_timeout_counts_from_the_send() {
        let parents = Parents::new(Duration::from_millis(50));
        let change = parents.begin(InodeId(5));
        std::thread::sleep(Duration::from_millis(60));
        parents.end(change, Some(&dir(5, 2)));
        assert!(parents.take(InodeId(5)).is_none());
    }

    #[test]
    fn overlapping_changes_keep_nothing() {
        let parents = Parents::new(Duration::from_secs(1));
        // Begun before, answered after: its answer may be later at the manager.
        let unlink = parents.begin(InodeId(5));
        let create = parents.begin(InodeId(5));
        parents.end(unlink, None);
        parents.end(create, Some(&dir(5, 2)));
        assert!(parents.take(InodeId(5)).is_none());
        // Begun after, still in flight.
        let create = parents.begin(InodeId(5));
        let rmdir = parents.begin(InodeId(5));
        parents.end(create, Some(&dir(5, 3)));
        parents.end(rmdir, None);
        assert!(parents.take(InodeId(5)).is_none());
        // Begun and ended within.
        let create = parents.begin(InodeId(5));
        let other = parents.begin(InodeId(5));
        parents.end(other, Some(&dir(5, 3)));
        parents.end(create, Some(&dir(5, 3)));
        assert!(parents.take(InodeId(5)).is_none());
        // A later change drops what was kept.
        let create = parents.begin(InodeId(5));
        parents.end(create, Some(&dir(5, 3)));
        let setattr = parents.begin(InodeId(5));
        assert!(parents.take(InodeId(5)).is_none());
        parents.end(setattr, None);
        assert!(parents.lock().dirs.is_empty());
    }

    #[test]
    fn renames_drop_everything_and_keep_nothing_while_in_flight() {
        let parents = Parents::new(Duration::from_secs(1));
        let create = parents.begin(InodeId(5));
        parents.end(create, Some(&dir(5, 3)));
        parents.rename_begins();
        assert!(parents.take(InodeId(5)).is_none());
        let create = parents.begin(InodeId(6));
        parents.end(create, Some(&dir(6, 3)));
        assert!(parents.take(InodeId(6)).is_none(), "rename in flight");
        let create = parents.begin(InodeId(6));
        parents.rename_ends();
        parents.end(create, Some(&dir(6, 3)));
        assert!(
            parents.take(InodeId(6)).is_none(),
            "rename ended during the create"
        );
        let create = parents.begin(InodeId(6));
        parents.end(create, Some(&dir(6, 3)));
        assert!(parents.take(InodeId(6)).is_some());
    }

    #[test]
    fn the_table_is_bounded() {
        let parents = Parents::new(Duration::from_secs(1));
        for k in 0..(DIRECTORIES_MAX as u64 + 10) {
            let change = parents.begin(InodeId(k));
            parents.end(change, Some(&dir(k, 2)));
        }
        assert!(parents.lock().dirs.len() <= DIRECTORIES_MAX + 1);
    }
}
