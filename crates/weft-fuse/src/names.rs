//! The names the kernel knows inodes by, so that an open can check them.
//!
//! The kernel caches names (dentries) and opens an inode it found through a cached name
//! without asking again; FUSE's open carries only the inode. If another client removed,
//! renamed or replaced that name meanwhile, the open must not go ahead: close-to-open
//! means the open sees the name as it is now. So the mount remembers, for every inode it
//! handed to the kernel, the directory and name it came from (and the same for that
//! directory, up to the root), and an open revalidates that path with the manager in one
//! round trip. When it no longer holds, the open answers ESTALE; the kernel's path walk
//! then retries once with every name looked up afresh (`LOOKUP_REVAL`), which finds the
//! new file or nothing.
//!
//! The retried open must not be refused again when yet another rename lands between the
//! fresh lookup and the open (an atomic-publish loop does that all the time): the open
//! began before that rename, so the inode the fresh lookup found is a correct answer.
//! So a thread that was just answered ESTALE is remembered ([`Retries`]) with the
//! inodes its next lookups returned; its next open of one of those inodes is trusted
//! without a second check.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use weft_client::{InodeId, Name, PathStep};

/// Inodes whose name is remembered; past this the table starts over (opens of the
/// inodes forgotten that way check only that the inode still exists).
pub const NAMES_MAX: usize = 1 << 20;

/// Deepest path an open checks (the manager's limit for one request).
const PATH_STEPS_MAX: usize = weft_client::REVALIDATE_STEPS_MAX;

/// Threads between an ESTALE answer and their retried open, at most.
const RETRIES_MAX: usize = 4096;

/// How long a retry marker lives: the kernel retries at once, so anything older is not
/// that retry. (A walk retried for stat(2) opens nothing and so leaves its marker behind
/// until then; this bounds how long it may vouch for what that walk found.)
const RETRY_WINDOW: Duration = Duration::from_millis(500);

struct Known {
    parent: InodeId,
    name: Name,
    /// Lookups the kernel holds (each entry reply adds one, `forget` takes them away).
    lookups: u64,
}

/// Inode -> the (directory, name) the kernel last learnt it by, and each directory's
/// children among them (what a lock makes the kernel forget, `siblings_of`).
#[derive(Default)]
pub struct Names {
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    known: HashMap<InodeId, Known>,
    children: HashMap<InodeId, HashSet<InodeId>>,
    /// (directory, name) -> the inode the kernel last got for it: an inode another
    /// client renamed or removed no longer owns the name once the kernel looked the
    /// name up again (`entry_of`).
    by_name: HashMap<(InodeId, Name), InodeId>,
}

impl Table {
    fn unlink(&mut self, parent: InodeId, child: InodeId) {
        if let Some(set) = self.children.get_mut(&parent) {
            set.remove(&child);
            if set.is_empty() {
                self.children.remove(&parent);
            }
        }
    }
}

impl Names {
    /// The kernel got an entry for `child` as `name` in `parent` (one more lookup).
    pub fn entered(&self, parent: InodeId, name: &[u8], child: InodeId) {
        if child == InodeId::ROOT {
            return;
        }
        let mut table = self.lock();
        if table.known.len() >= NAMES_MAX && !table.known.contains_key(&child) {
            table.known.clear();
            table.children.clear();
            table.by_name.clear();
        }
        table.by_name.insert((parent, Name::from(name)), child);
        let before = table.known.get(&child).map(|k| (k.parent, k.name.clone()));
        if let Some(old_key) = before
            .clone()
            .filter(|key| key.0 != parent || key.1.as_bytes() != name)
        {
            if table.by_name.get(&old_key) == Some(&child) {
                table.by_name.remove(&old_key);
            }
        }
        if let Some((old, _)) = before.filter(|(old, _)| *old != parent) {
            table.unlink(old, child);
        }
        table.children.entry(parent).or_default().insert(child);
        let known = table.known.entry(child).or_insert_with(|| Known {
            parent,
            name: Name::default(),
            lookups: 0,
        });
        known.parent = parent;
        if known.name.as_bytes() != name {
            known.name = Name::from(name);
        }
        known.lookups += 1;
    }

    /// `child` was renamed to `name` in `parent` through this mount; the kernel moves its
    /// entry without a new lookup.
    pub fn renamed(&self, parent: InodeId, name: &[u8], child: InodeId) {
        let mut table = self.lock();
        let Some(known) = table.known.get_mut(&child) else {
            return;
        };
        let old = std::mem::replace(&mut known.parent, parent);
        let old_name = std::mem::replace(&mut known.name, Name::from(name));
        if table.by_name.get(&(old, old_name.clone())) == Some(&child) {
            table.by_name.remove(&(old, old_name));
        }
        table.by_name.insert((parent, Name::from(name)), child);
        if old != parent {
            table.unlink(old, child);
            table.children.entry(parent).or_default().insert(child);
        }
    }

    /// The kernel dropped `count` lookups of `inode`.
    pub fn forget(&self, inode: InodeId, count: u64) {
        let mut table = self.lock();
        if let Some(known) = table.known.get_mut(&inode) {
            known.lookups = known.lookups.saturating_sub(count);
            if known.lookups == 0 {
                let parent = known.parent;
                if let Some(known) = table.known.remove(&inode) {
                    let key = (parent, known.name);
                    if table.by_name.get(&key) == Some(&inode) {
                        table.by_name.remove(&key);
                    }
                }
                table.unlink(parent, inode);
            }
        }
    }

    /// The path the kernel knows `inode` by, root first, as far up as names are known;
    /// empty when not even `inode`'s own name is.
    pub fn path_of(&self, inode: InodeId) -> Vec<PathStep> {
        let table = self.lock();
        let mut steps = Vec::new();
        let mut at = inode;
        while steps.len() < PATH_STEPS_MAX {
            let Some(known) = table.known.get(&at) else { break };
            steps.push(PathStep {
                parent: known.parent,
                name: known.name.clone(),
                child: at,
            });
            if known.parent == InodeId::ROOT {
                break;
            }
            at = known.parent;
        }
        steps.reverse();
        steps
    }

    /// The names the kernel holds entries for in the directory `inode`'s name is in (at
    /// most `max`), with that directory: what a lock taken on `inode` makes the kernel
    /// forget, since another client may have removed or made files beside it (SQLite
    /// looks for its journal there right after locking its database).
    pub fn siblings_of(&self, inode: InodeId, max: usize) -> Option<(InodeId, Vec<Name>)> {
        let table = self.lock();
        let parent = table.known.get(&inode)?.parent;
        let names = table
            .children
            .get(&parent)
            .into_iter()
            .flatten()
            .filter(|child| **child != inode)
            .filter_map(|child| table.known.get(child).map(|k| k.name.clone()))
            .take(max)
            .collect();
        Some((parent, names))
    }

    /// The (directory, name) the kernel knows `inode` by, unless the kernel got
    /// another inode for that name since.
    pub fn entry_of(&self, inode: InodeId) -> Option<(InodeId, Name)> {
        let table = self.lock();
        let known = table.known.get(&inode)?;
        let key = (known.parent, known.name.clone());
        (table.by_name.get(&key) == Some(&inode)).then_some(key)
    }

    /// Every inode the kernel holds an entry for, with its (directory, name).
    pub fn all(&self) -> Vec<(InodeId, InodeId, Name)> {
        let table = self.lock();
        table
            .known
            .iter()
            .map(|(inode, k)| (*inode, k.parent, k.name.clone()))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().expect("name table poisoned")
    }
}

struct Retry {
    since: Instant,
    /// Inodes this thread's lookups returned since it was answered ESTALE.
    looked_up: Vec<InodeId>,
}

/// Threads answered ESTALE on open, until their retried open.
#[derive(Default)]
pub struct Retries {
    table: Mutex<HashMap<u32, Retry>>,
}

impl Retries {
    /// Thread `pid` is answered ESTALE (on open, or on the attributes of a path it
    /// walks): its walk is about to be retried.
    pub fn refused(&self, pid: u32) {
        let mut table = self.lock();
        if table.len() >= RETRIES_MAX {
            table.retain(|_, r| r.since.elapsed() < RETRY_WINDOW);
            if table.len() >= RETRIES_MAX {
                // Never refuse to remember: the oldest marker is worth the least.
                if let Some(oldest) = table.iter().min_by_key(|(_, r)| r.since).map(|(p, _)| *p) {
                    table.remove(&oldest);
                }
            }
        }
        table.insert(
            pid,
            Retry {
                since: Instant::now(),
                looked_up: Vec::new(),
            },
        );
    }

    /// Thread `pid` looked a name up and found `inode`.
    pub fn looked_up(&self, pid: u32, inode: InodeId) {
        if let Some(retry) = self.lock().get_mut(&pid) {
            if retry.looked_up.len() < PATH_STEPS_MAX {
                retry.looked_up.push(inode);
            }
        }
    }

    /// Whether thread `pid` was just answered ESTALE and is retrying its walk (its
    /// lookups must then ask the manager, see `recent`).
    pub fn retrying(&self, pid: u32) -> bool {
        let table = self.lock();
        !table.is_empty() && table.get(&pid).is_some_and(|r| r.since.elapsed() < RETRY_WINDOW)
    }

    /// Whether thread `pid` is retrying a walk (it was just answered ESTALE) and found
    /// `inode` since: the kernel may ask its attributes before it opens it.
    pub fn expects(&self, pid: u32, inode: InodeId) -> bool {
        let table = self.lock();
        table
            .get(&pid)
            .is_some_and(|r| r.since.elapsed() < RETRY_WINDOW && r.looked_up.contains(&inode))
    }

    /// Whether thread `pid`'s open of `inode` is the retry of an open just refused, for an
    /// inode its fresh walk found. Ends the retry either way.
    pub fn trusts(&self, pid: u32, inode: InodeId) -> bool {
        let mut table = self.lock();
        if table.is_empty() {
            return false;
        }
        table
            .remove(&pid)
            .is_some_and(|r| r.since.elapsed() < RETRY_WINDOW && r.looked_up.contains(&inode))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Retry>> {
        self.table.lock().expect("retry table poisoned")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_the_kernel_got_another_inode_for_is_no_longer_the_old_ones() {
        let names = Names::default();
        let d = InodeId(10);
        names.entered(InodeId::ROOT, b"d", d);
        assert_eq!(names.entry_of(d), Some((InodeId::ROOT, Name::from(&b"d"[..]))));
        // Another client replaced "d"; the kernel looked it up again.
        names.entered(InodeId::ROOT, b"d", InodeId(11));
        assert_eq!(names.entry_of(d), None, "a drop of d's name would hit the new d");
        assert!(names.entry_of(InodeId(11)).is_some());
        // Renamed here: the new name is its own, the old one no one's.
        names.renamed(InodeId::ROOT, b"e", InodeId(11));
        assert_eq!(
            names.entry_of(InodeId(11)),
            Some((InodeId::ROOT, Name::from(&b"e"[..])))
        );
        names.forget(InodeId(11), 1);
        assert_eq!(names.entry_of(InodeId(11)), None);
    }

    #[test]
    fn paths_are_built_from_remembered_names_up_to_the_root() {
        let names = Names::default();
        names.entered(InodeId::ROOT, b"a", InodeId(10));
        names.entered(InodeId(10), b"b\xff", InodeId(11));
        names.entered(InodeId(11), b"f", InodeId(12));
        let path = names.path_of(InodeId(12));
        let shown: Vec<(u64, &[u8], u64)> = path
            .iter()
            .map(|s| (s.parent.0, s.name.as_bytes(), s.child.0))
            .collect();
        assert_eq!(
            shown,
            [(1, &b"a"[..], 10), (10, &b"b\xff"[..], 11), (11, &b"f"[..], 12)]
        );
        // A rename through this mount moves the name; forgetting drops it once every
        // lookup is forgotten.
        names.renamed(InodeId::ROOT, b"g", InodeId(12));
        assert_eq!(names.path_of(InodeId(12))[0].name, "g");
        names.entered(InodeId::ROOT, b"g", InodeId(12));
        names.forget(InodeId(12), 1);
        assert_eq!(names.path_of(InodeId(12)).len(), 1);
        names.forget(InodeId(12), 1);
        assert!(names.path_of(InodeId(12)).is_empty());
        // An unknown directory ends the path there.
        names.entered(InodeId(99), b"x", InodeId(13));
        assert_eq!(names.path_of(InodeId(13)).len(), 1);
    }

    #[test]
    fn only_the_retried_open_of_a_freshly_found_inode_is_trusted() {
        let retries = Retries::default();
        assert!(!retries.trusts(7, InodeId(5)));
        retries.refused(7);
        retries.looked_up(7, InodeId(5));
        retries.looked_up(8, InodeId(6));
        assert!(!retries.trusts(8, InodeId(6)), "thread 8 was never refused");
        assert!(retries.trusts(7, InodeId(5)));
        assert!(!retries.trusts(7, InodeId(5)), "trusted once only");
        retries.refused(7);
        retries.looked_up(7, InodeId(5));
        assert!(!retries.trusts(7, InodeId(6)), "not what the walk found");
    }

    #[test]
    fn siblings_follow_lookups_renames_and_forgets() {
        let names = Names::default();
        let (dir, other) = (InodeId(10), InodeId(11));
        names.entered(dir, b"db", InodeId(20));
        names.entered(dir, b"db-journal", InodeId(21));
        names.entered(dir, b"moved", InodeId(22));
        names.entered(other, b"elsewhere", InodeId(23));
        let sorted = |v: Vec<Name>| {
            let mut v: Vec<Vec<u8>> = v.iter().map(|n| n.as_bytes().to_vec()).collect();
            v.sort();
            v
        };
        let (parent, beside) = names.siblings_of(InodeId(20), 100).unwrap();
        assert_eq!(parent, dir);
        assert_eq!(sorted(beside), vec![b"db-journal".to_vec(), b"moved".to_vec()]);
        names.renamed(other, b"away", InodeId(22));
        names.forget(InodeId(21), 1);
        assert!(names.siblings_of(InodeId(20), 100).unwrap().1.is_empty());
        let (parent, beside) = names.siblings_of(InodeId(23), 100).unwrap();
        assert_eq!(parent, other);
        assert_eq!(sorted(beside), vec![b"away".to_vec()]);
        assert_eq!(names.siblings_of(InodeId(99), 100), None);
    }
}
