//! Recently listed directories, which answer lookups within the attribute timeout.
//!
//! The kernel keeps names and attributes for `attr_ttl` (1 s). A program that stats many
//! files of one directory more than a second after it last saw them (mdtest's stat
//! phase, `make`, a backup's second pass) makes the kernel ask for each name again:
//! one manager lookup and one size request per io server, every file. Once a directory
//! has sent `BUSY_LOOKUPS` found names to the manager within a second, the mount lists it
//! instead (a page of names with the manager's attributes, then one size request per io
//! server per page: some 5 requests per 1,024 entries rather than 5 per entry) and
//! answers its next lookups from that listing.
//!
//! The rule that keeps this within what the mount promises (attributes and names at
//! most `attr_ttl` old): a listing is used only while it is younger than the timeout,
//! timed from before its first request, and the kernel is told to keep what it was
//! answered from it only for what remains of the timeout. So an answer is never older
//! than a lookup answered by the manager and cached by the kernel for `attr_ttl`.
//! What this mount itself changes is never answered from an older listing: its own
//! namespace changes in a directory drop that directory's listing, an inode opened for
//! writing, set or closed here is dropped from every listing, an inode open here is
//! never answered from one, and a listing fetched while any of that happened is thrown
//! away. A name a listing lacks is asked of the manager (never a cached "no such
//! file": another client may have created it and closed it, and an open must find it),
//! and so is every name a thread looks up while the kernel retries its walk after an
//! ESTALE (see `names`).
//!
//! A lookup in a directory whose listing is being fetched waits for it (at most
//! `FETCH_WAIT`) rather than asking the manager: the readers of mdtest's read phase, or
//! `cat *` beside a `grep -r`, otherwise sent every name they met during the fetch to the
//! manager (755 lookups for 2,000 files on a loaded machine, where a fetch takes long).

use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};
use weft_client::{Attr, Client, ClientError, InodeId, Name};

/// Found names a directory must send to the manager within `BUSY_WINDOW` before it is
/// listed instead.
const BUSY_LOOKUPS: u32 = 16;
const BUSY_WINDOW: Duration = Duration::from_secs(1);

/// Found names a directory this mount changed less than `BUSY_WINDOW` ago must send to
/// the manager, with no change here in between, before it is listed all the same: its
/// changes have stopped and it is being read (mdtest's stat phase right after its create
/// phase, which otherwise went name by name until a second after the last create).
const RESTED_LOOKUPS: u32 = 4 * BUSY_LOOKUPS;

/// Largest directory listed this way; a larger one is left to per-name lookups for
/// `TOO_BIG_PAUSE` (listing it would cost more than the lookups it saves).
pub const LISTED_ENTRIES_MAX: usize = 16 * 1024;
const TOO_BIG_PAUSE: Duration = Duration::from_secs(60);

/// Directories followed at once (their counters and listings); past this the table
/// starts over.
const DIRS_MAX: usize = 256;

/// Longest a lookup waits for a listing of its directory being fetched.
const FETCH_WAIT: Duration = Duration::from_millis(500);

/// Names asked of the manager per listing request.
const PAGE_ENTRIES: u32 = 1024;

/// A listing is not used in its last quarter of the timeout: the kernel would keep its
/// answers for too short a time to be worth it, and a fresh listing is due.
const FRESH_FRACTION: u32 = 4;

#[derive(Default)]
struct Dir {
    /// Found names sent to the manager since `window_start`.
    lookups: u32,
    window_start: Option<Instant>,
    listing: Option<Listing>,
    /// A listing is being fetched.
    fetching: bool,
    /// Bumped by this mount's changes in the directory: a fetch that began before one
    /// is not used.
    generation: u64,
    /// Not listed again before this (too big, or listing it failed).
    too_big_until: Option<Instant>,
    /// When this mount last changed its names: a directory this mount is busy changing
    /// (mdtest's unlink phase, rm -r) is not listed, as every change would throw the
    /// listing away.
    changed_here: Option<Instant>,
    /// Found names sent to the manager since this mount last changed the directory.
    since_change: u32,
}

struct Listing {
    /// When its first request was sent: its answers are at most this old.
    taken: Instant,
    entries: HashMap<Vec<u8>, Attr>,
    /// The names of each inode (more than one for hard links).
    by_inode: HashMap<InodeId, Vec<Vec<u8>>>,
}

#[derive(Default)]
struct Table {
    dirs: HashMap<InodeId, Dir>,
    /// Bumped by every change of an inode here (dropped from every listing): a fetch
    /// that began before one is not used.
    generation: u64,
}

/// A fetch a lookup should make, with what must not change meanwhile.
pub struct Ticket {
    dir: InodeId,
    dir_generation: u64,
    generation: u64,
}

/// What the mount remembers of recently listed directories.
pub struct Recent {
    ttl: Duration,
    table: Mutex<Table>,
    /// Told when a fetch ends.
    fetched: Condvar,
}

impl Recent {
    pub fn new(ttl: Duration) -> Recent {
        Recent {
            ttl,
            table: Mutex::new(Table::default()),
            fetched: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().expect("listing table poisoned")
    }

    /// `name` in `dir` as a fresh-enough listing has it, with how long the kernel may
    /// keep the answer.
    #[cfg(test)]
    pub fn get(&self, dir: InodeId, name: &[u8]) -> Option<(Attr, Duration)> {
        self.answer(&self.lock(), dir, name)
    }

    /// As `get`, but if the directory is being listed and its listing lacks `name`,
    /// first waits for the fetch to end (at most `FETCH_WAIT`).
    pub fn get_or_wait(&self, dir: InodeId, name: &[u8]) -> Option<(Attr, Duration)> {
        let mut table = self.lock();
        let deadline = Instant::now() + FETCH_WAIT;
        loop {
            if let Some(found) = self.answer(&table, dir, name) {
                return Some(found);
            }
            if !table.dirs.get(&dir).is_some_and(|d| d.fetching) {
                return None;
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            table = self
                .fetched
                .wait_timeout(table, left)
                .expect("listing table poisoned")
                .0;
        }
    }

    fn answer(&self, table: &Table, dir: InodeId, name: &[u8]) -> Option<(Attr, Duration)> {
        let listing = table.dirs.get(&dir)?.listing.as_ref()?;
        let left = self.ttl.checked_sub(listing.taken.elapsed())?;
        if left < self.ttl / FRESH_FRACTION {
            return None;
        }
        listing.entries.get(name).map(|attr| (attr.clone(), left))
    }

    /// A lookup in `dir` went to the manager and found its name: a ticket when the
    /// directory is now busy enough to be listed (the caller then calls `fetch`).
    pub fn looked_up(&self, dir: InodeId) -> Option<Ticket> {
        let mut table = self.lock();
        if table.dirs.len() >= DIRS_MAX && !table.dirs.contains_key(&dir) {
            table.dirs.retain(|_, d| d.fetching);
        }
        let generation = table.generation;
        let now = Instant::now();
        let d = table.dirs.entry(dir).or_default();
        if d.window_start.is_none_or(|s| now.duration_since(s) > BUSY_WINDOW) {
            d.window_start = Some(now);
            d.lookups = 0;
        }
        d.lookups += 1;
        d.since_change = d.since_change.saturating_add(1);
        if d.lookups < BUSY_LOOKUPS
            || d.fetching
            || d.too_big_until.is_some_and(|t| now < t)
            || (d
                .changed_here
                .is_some_and(|t| now.duration_since(t) < BUSY_WINDOW)
                && d.since_change < RESTED_LOOKUPS)
        {
            return None;
        }
        let fresh = d
            .listing
            .as_ref()
            .is_some_and(|l| l.taken.elapsed() < self.ttl - self.ttl / FRESH_FRACTION);
        if fresh {
            // Its names were asked anyway because the listing lacks them (new since).
            return None;
        }
        d.fetching = true;
        d.lookups = 0;
        Some(Ticket {
            dir,
            dir_generation: d.generation,
            generation,
        })
    }

    /// Lists the ticket's directory as `client` and keeps the listing, unless this mount
    /// changed something meanwhile. Failures only mean no listing.
    pub fn fetch(&self, client: &Client, ticket: Ticket) {
        let taken = Instant::now();
        let listed = list(client, ticket.dir);
        self.keep(ticket, taken, listed);
    }

    /// Keeps what listing the ticket's directory from `taken` on found.
    fn keep(&self, ticket: Ticket, taken: Instant, listed: Result<Option<Vec<(Name, Attr)>>, ClientError>) {
        let mut table = self.lock();
        let unchanged = table.generation == ticket.generation;
        self.fetched.notify_all();
        let Some(d) = table.dirs.get_mut(&ticket.dir) else {
            return;
        };
        d.fetching = false;
        match listed {
            Ok(Some(attrs)) if unchanged && d.generation == ticket.dir_generation => {
                let mut by_inode: HashMap<InodeId, Vec<Vec<u8>>> = HashMap::new();
                for (n, a) in &attrs {
                    by_inode.entry(a.inode).or_default().push(n.as_ref().to_vec());
                }
                d.listing = Some(Listing {
                    taken,
                    entries: attrs.into_iter().map(|(n, a)| (n.as_ref().to_vec(), a)).collect(),
                    by_inode,
                });
            }
            Ok(None) => d.too_big_until = Some(Instant::now() + TOO_BIG_PAUSE),
            Ok(Some(_)) => {}
            Err(e) => {
                // Not readable by this caller, say: per-name lookups it is, for a while.
                d.too_big_until = Some(Instant::now() + TOO_BIG_PAUSE);
                if !matches!(e, ClientError::Refused { .. }) {
                    eprintln!("weft-fuse: listing directory {} for lookups: {e}", ticket.dir);
                }
            }
        }
    }

    /// This mount changed the names of `dir` (call once the change is made: a listing
    /// fetched before it ended is thrown away).
    pub fn dir_changed(&self, dir: InodeId) {
        let mut table = self.lock();
        if table.dirs.is_empty() {
            return;
        }
        if let Some(d) = table.dirs.get_mut(&dir) {
            d.generation += 1;
            d.listing = None;
            d.changed_here = Some(Instant::now());
            d.since_change = 0;
        }
        // Its own times and link count changed too.
        drop_inode(&mut table, dir);
    }

    /// This mount changed `inode`'s attributes or data (call once the change is made).
    pub fn inode_changed(&self, inode: InodeId) {
        let mut table = self.lock();
        if !table.dirs.is_empty() {
            drop_inode(&mut table, inode);
        }
    }
}

fn drop_inode(table: &mut Table, inode: InodeId) {
    table.generation += 1;
    for d in table.dirs.values_mut() {
        if let Some(listing) = &mut d.listing {
            for name in listing.by_inode.remove(&inode).unwrap_or_default() {
                listing.entries.remove(&name);
            }
        }
    }
}

/// The names of `dir` with sized attributes, files removed meanwhile left out; `None`
/// if it has more than `LISTED_ENTRIES_MAX`.
fn list(client: &Client, dir: InodeId) -> Result<Option<Vec<(Name, Attr)>>, ClientError> {
    let mut out = Vec::new();
    let mut after = Name::default();
    loop {
        let (page, more) = client.readdir_attrs_page(dir, &after, PAGE_ENTRIES)?;
        if out.len() + page.len() > LISTED_ENTRIES_MAX {
            return Ok(None);
        }
        let Some((last, _)) = page.last() else { break };
        after = last.clone();
        let (names, mut attrs): (Vec<Name>, Vec<Attr>) = page.into_iter().unzip();
        let gone = client.fill_sizes_or_gone(&mut attrs)?;
        out.extend(
            names
                .into_iter()
                .zip(attrs)
                .zip(gone)
                .filter(|(_, gone)| !gone)
                .map(|(entry, _)| entry),
        );
        if !more {
            break;
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_millis(400);

    fn attr(inode: u64, mode: u32) -> Attr {
        crate::attr::test_file(inode, mode)
    }

    fn listing(files: u64) -> Vec<(Name, Attr)> {
        (10..10 + files)
            .map(|k| (Name::from(format!("f{k}")), attr(k, 0o644)))
            .collect()
    }

    /// Lookups found by the manager until one hands out a ticket.
    fn busy(recent: &Recent, dir: InodeId) -> Ticket {
        for _ in 1..BUSY_LOOKUPS {
            assert!(
                recent.looked_up(dir).is_none(),
                "a ticket before the directory was busy"
            );
        }
        recent.looked_up(dir).expect("no ticket once busy")
    }

    /// A lookup during a fetch waits for it and is answered from it; without a fetch
    /// under way, or once the wait is up, it goes on to the manager.
    #[test]
    fn a_lookup_during_a_fetch_waits_for_the_listing() {
        let recent = Recent::new(TTL);
        let dir = InodeId(2);
        assert!(
            recent.get_or_wait(dir, b"f42").is_none(),
            "answered with no listing"
        );
        let ticket = busy(&recent, dir);
        let started = Instant::now();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| recent.get_or_wait(dir, b"f42"));
            std::thread::sleep(Duration::from_millis(50));
            recent.keep(ticket, Instant::now(), Ok(Some(listing(100))));
            let (found, _) = waiter.join().unwrap().expect("the waiting lookup found nothing");
            assert_eq!(found.inode, InodeId(42));
        });
        // A name the new listing lacks: no fetch under way, so no wait.
        assert!(recent.get_or_wait(dir, b"f5").is_none());
        assert!(started.elapsed() < FETCH_WAIT, "waited past the fetch");
        // A fetch that never ends holds a lookup for FETCH_WAIT at most.
        recent.dir_changed(dir);
        std::thread::sleep(BUSY_WINDOW);
        let _never_kept = std::iter::repeat_with(|| recent.looked_up(dir))
            .take((RESTED_LOOKUPS + BUSY_LOOKUPS) as usize)
            .flatten()
            .next()
            .expect("no ticket");
        let started = Instant::now();
        assert!(recent.get_or_wait(dir, b"f42").is_none());
        let waited = started.elapsed();
        assert!(
            waited >= FETCH_WAIT && waited < FETCH_WAIT * 3,
            "waited {waited:?}"
        );
    }

    #[test]
    fn a_busy_directory_is_listed_once_and_answers_until_its_fresh_time_is_up() {
        let recent = Recent::new(TTL);
        let dir = InodeId(2);
        let ticket = busy(&recent, dir);
        // One fetch at a time.
        for _ in 0..BUSY_LOOKUPS {
            assert!(recent.looked_up(dir).is_none());
        }
        recent.keep(ticket, Instant::now(), Ok(Some(listing(100))));
        let (found, left) = recent.get(dir, b"f42").expect("listed name not answered");
        assert_eq!(found.inode, InodeId(42));
        assert!(
            left <= TTL && left > TTL / 2,
            "kernel told to keep it for {left:?}"
        );
        // Missing names are never answered from the listing; nor other directories.
        assert!(recent.get(dir, b"f5").is_none());
        assert!(recent.get(InodeId(3), b"f42").is_none());
        // Once less than a quarter of the timeout is left, the listing is not used.
        std::thread::sleep(TTL - TTL / FRESH_FRACTION + Duration::from_millis(20));
        assert!(recent.get(dir, b"f42").is_none(), "an old listing answered");
    }

    #[test]
    fn a_listing_begun_before_a_change_here_is_thrown_away() {
        let recent = Recent::new(TTL);
        let dir = InodeId(2);
        let taken = Instant::now();
        let ticket = busy(&recent, dir);
        recent.inode_changed(InodeId(42));
        recent.keep(ticket, taken, Ok(Some(listing(100))));
        assert!(
            recent.get(dir, b"f42").is_none(),
            "kept a listing older than a change"
        );

        let recent = Recent::new(TTL);
        let ticket = busy(&recent, dir);
        recent.dir_changed(dir);
        recent.keep(ticket, taken, Ok(Some(listing(100))));
        assert!(
            recent.get(dir, b"f42").is_none(),
            "kept a listing older than a rename"
        );
    }

    #[test]
    fn changes_here_drop_what_they_change() {
        let recent = Recent::new(TTL);
        let (dir, other) = (InodeId(2), InodeId(3));
        let ticket = busy(&recent, dir);
        let mut entries = listing(100);
        // A hard link: both names go with the inode.
        entries.push((Name::from("link"), attr(42, 0o644)));
        // A subdirectory, whose own times change with its names.
        entries.push((Name::from("sub"), attr(3, 0o755)));
        recent.keep(ticket, Instant::now(), Ok(Some(entries)));
        recent.inode_changed(InodeId(42));
        assert!(recent.get(dir, b"f42").is_none());
        assert!(recent.get(dir, b"link").is_none());
        assert!(recent.get(dir, b"f43").is_some());
        recent.dir_changed(other);
        assert!(
            recent.get(dir, b"sub").is_none(),
            "a changed directory answered from its parent's listing"
        );
        assert!(recent.get(dir, b"f43").is_some());
        recent.dir_changed(dir);
        assert!(
            recent.get(dir, b"f43").is_none(),
            "a directory changed here still answered"
        );
    }

    #[test]
    fn a_directory_this_mount_keeps_changing_is_not_listed_until_it_rests() {
        let recent = Recent::new(TTL);
        let dir = InodeId(2);
        // Known (a lookup), then changed here: lookups between changes list nothing.
        assert!(recent.looked_up(dir).is_none());
        for _ in 0..4 {
            recent.dir_changed(dir);
            for _ in 0..BUSY_LOOKUPS {
                assert!(recent.looked_up(dir).is_none(), "listed while being changed here");
            }
        }
        std::thread::sleep(BUSY_WINDOW + Duration::from_millis(50));
        busy(&recent, dir);
    }

    #[test]
    fn a_directory_changed_here_a_moment_ago_is_listed_once_it_is_only_read() {
        let recent = Recent::new(TTL);
        let dir = InodeId(2);
        assert!(recent.looked_up(dir).is_none());
        recent.dir_changed(dir);
        // Within the window of the change, but no change since many lookups.
        for _ in 1..RESTED_LOOKUPS {
            assert!(recent.looked_up(dir).is_none(), "listed while being changed here");
        }
        assert!(
            recent.looked_up(dir).is_some(),
            "not listed after {RESTED_LOOKUPS} lookups without a change here"
        );
    }

    #[test]
    fn a_directory_too_big_or_unreadable_is_left_alone_for_a_while() {
        let recent = Recent::new(TTL);
        let dir = InodeId(2);
        let ticket = busy(&recent, dir);
        recent.keep(ticket, Instant::now(), Ok(None));
        for _ in 0..3 * BUSY_LOOKUPS {
            assert!(
                recent.looked_up(dir).is_none(),
                "a too-big directory listed again"
            );
        }
        let dir = InodeId(4);
        let ticket = busy(&recent, dir);
        let refused = ClientError::Refused {
            code: weft_client::ErrorCode::PermissionDenied,
            message: "no read".into(),
        };
        recent.keep(ticket, Instant::now(), Err(refused));
        for _ in 0..3 * BUSY_LOOKUPS {
            assert!(
                recent.looked_up(dir).is_none(),
                "an unreadable directory listed again"
            );
        }
    }

    #[test]
    fn the_table_is_bounded() {
        let recent = Recent::new(TTL);
        for d in 0..(3 * DIRS_MAX as u64) {
            recent.looked_up(InodeId(1000 + d));
        }
        assert!(recent.lock().dirs.len() <= DIRS_MAX);
    }
}
