//! Migrations of files to a new layout and io servers' states, the manager's part
//! (`weft migrate`, `weft server drain|remove`). The client makes a hidden file with
//! the new layout (`temp`) and copies the bytes; the manager keeps writers out and
//! switches the layout:
//!
//! 1. `MigrateBegin`: for a file in the cache tier, every cache manager first holds it
//!    (`CacheMigrate` `FREEZE`: its changes refused `Busy`, its dirty blocks written
//!    back). Then every io server of the file's old layout freezes its object
//!    (changes refused `Busy`, so clients' writes wait; a lease the client renews by
//!    asking again). The holds' and freezes' epochs are remembered here.
//! 2. The client copies the file's bytes into `temp` (reads go on meanwhile).
//! 3. `MigrateEnd` with `commit`: every hold and freeze must last with its first epoch
//!    (else a write may have landed after its bytes were copied: nothing is switched).
//!    The switch is recorded durably (`PendingSwitch`), then each io server of the old
//!    or new layout sets the old object aside and gives `temp`'s object the file's
//!    name, fenced (durably, at the io server) so that only the new striping is
//!    served; the layout switch commits durably, marking the record committed; the
//!    set-aside objects go, writes resume (the cache managers drop the file's blocks
//!    and refuse its old layout, `release_tier`) and the record goes. A failure before the
//!    commit puts every object back. What an io server could not be told (it was
//!    down) and what a manager crash cut short stays recorded and is finished by the
//!    purger's rounds (`settle_switches`): undone if the layout switch did not commit,
//!    the set-aside objects dropped if it did.
//!
//! Readers see the old layout or the new, never a mix: the bytes are the same on both
//! while writes are frozen, and a request with the old striping at a server that took
//! the new object is refused `Stale` (reopen). Io servers' states are in the store;
//! only active io servers get new files (`apply_server_states`).

use super::*;
use crate::store::{PendingSwitch, SwitchServer};
use std::collections::HashSet;
use weft_proto::msg::{migrate_step, server_state};
use weft_proto::Striping;

/// Most migrations under way at once.
pub const MIGRATIONS_MAX: usize = 1024;

/// A migration under way: its new file, the old layout's freezes and, for a file in
/// the cache tier, the cache managers' holds.
struct Migration {
    temp: InodeId,
    epochs: Vec<(ServerId, u64)>,
    holds: Vec<(ServerId, u64)>,
}

/// The migrations under way (in memory: a manager restart abandons them, and the io
/// servers' freezes lapse; a switch begun is in the store, see `PendingSwitch`).
#[derive(Default)]
pub(super) struct Migrations {
    map: Mutex<HashMap<InodeId, Migration>>,
    /// Files whose `MigrateEnd` is running: their pending switch is its, not the
    /// purger's, to finish.
    ending: Mutex<HashSet<InodeId>>,
    /// No purge round finishes switches before this (one left some unfinished: an io
    /// server is down, and the log says so once per `SETTLE_RETRY`).
    settle_after: Mutex<Option<Instant>>,
}

/// How long the purger waits after a round that left switches unfinished.
const SETTLE_RETRY: Duration = Duration::from_secs(5);

impl Migrations {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<InodeId, Migration>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ending(&self) -> std::sync::MutexGuard<'_, HashSet<InodeId>> {
        self.ending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Marks a file's `MigrateEnd` as running while it lives.
struct Ending<'m> {
    migrations: &'m Migrations,
    inode: InodeId,
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        self.migrations.ending().remove(&self.inode);
    }
}

/// The test hooks `WEFT_FAULT_MIGRATE_CRASH=<file>` (`hook`) and
/// `WEFT_FAULT_MIGRATE_CRASH_COMMITTED=<file>`: while `<file>` exists, the next
/// migration removes it and aborts the manager process once every io server adopted
/// the new objects, before the layout switch commits, or (the second) right after it
/// committed, before anything was finished (crashes at the worst moments, for the tests
/// of `settle_switches`).
fn crash_at(hook: &str, inode: InodeId, when: &str) {
    if std::env::var_os(hook).is_some_and(|f| std::fs::remove_file(f).is_ok()) {
        eprintln!("weftd meta: {hook}: aborting {when} inode {inode}'s layout switch commits");
        std::process::abort();
    }
}

/// `server`'s striping in `layout` (`None`: it holds no piece).
fn striping_in(layout: &Layout, server: ServerId) -> Option<Striping> {
    layout.piece_of(server).map(|(slot, _)| Striping {
        stripe_size_bytes: layout.stripe_size_bytes,
        stripe_count: layout.servers.len() as u32,
        server_index: slot as u32,
    })
}

/// `a`'s servers, then `b`'s not in `a`.
fn union(a: &Layout, b: &Layout) -> Vec<ServerId> {
    let mut all = a.all_servers();
    for s in b.all_servers() {
        if !all.contains(&s) {
            all.push(s);
        }
    }
    all
}

impl MetaService {
    /// Answers the migration and server-state requests.
    pub(super) fn serve_migrate(&self, request: Request) -> Result<Response, WireError> {
        match request {
            Request::MigrateBegin { cred, inode, temp } => self.migrate_begin(&cred, inode, temp),
            Request::MigrateEnd {
                cred,
                inode,
                temp,
                commit,
            } => self.migrate_end(&cred, inode, temp, commit),
            Request::ServerFiles {
                cred,
                server,
                after,
                max,
            } => self
                .store
                .server_files(&cred, server, after, max)
                .map(|(files, more)| Response::StaleFiles { files, more }),
            Request::SetServerState { cred, server, state } => self.set_server_state(&cred, server, state),
            Request::ServerStates { .. } => Ok(Response::ServerStates {
                states: self.store.server_states(&self.io_server_ids())?,
            }),
            other => Err(WireError::new(
                ErrorCode::InvalidArgument,
                format!("{:?} is no migration request", other.opcode()),
            )),
        }
    }

    fn io_server_ids(&self) -> Vec<ServerId> {
        self.cluster().io_servers.iter().map(|s| s.id).collect()
    }

    /// One migration step at io server `server`: its answer.
    fn migrate_step_at(
        &self,
        server: ServerId,
        inode: InodeId,
        temp: InodeId,
        new: Option<&Layout>,
        step: u8,
    ) -> Result<u64, WireError> {
        self.migrate_object_at(
            server,
            inode,
            temp,
            new.and_then(|l| striping_in(l, server)),
            step,
        )
    }

    fn migrate_object_at(
        &self,
        server: ServerId,
        inode: InodeId,
        temp: InodeId,
        striping: Option<Striping>,
        step: u8,
    ) -> Result<u64, WireError> {
        let request = Request::MigrateObject {
            inode,
            temp,
            striping,
            step,
        };
        self.objects.migrate_object(server, request)
    }

    /// Finishes `inode`'s pending `switch` at every io server: undone if it did not
    /// commit, the set-aside objects dropped if it did; the freezes thawed. Forgets it
    /// once every server did its part; else says which failed and leaves it for the
    /// next purge round. Whether it is finished.
    fn finish_switch(&self, inode: InodeId, switch: &PendingSwitch) -> bool {
        let mut done = true;
        for s in &switch.servers {
            let step = if switch.committed {
                migrate_step::DROP
            } else {
                migrate_step::UNDO
            };
            let mut result = Ok(0);
            if !switch.committed || s.old {
                result = self.migrate_object_at(s.server, inode, switch.temp, s.new, step);
            }
            if s.old {
                result = result.and_then(|_| {
                    self.migrate_object_at(s.server, inode, switch.temp, None, migrate_step::THAW)
                });
            }
            if let Err(e) = result {
                eprintln!(
                    "weftd meta: migration of inode {inode}: {} at io server {}: {}; will retry",
                    if switch.committed {
                        "dropping the old object"
                    } else {
                        "undoing the switch"
                    },
                    s.server,
                    e.message
                );
                done = false;
            }
        }
        if done {
            done = self.release_tier(inode, switch.committed);
        }
        if done {
            if let Err(e) = self.store.end_switch(inode) {
                eprintln!("weftd meta: migration of inode {inode}: forgetting its finished switch: {e}");
                return false;
            }
        }
        done
    }

    /// The cache managers holding `inode` for its migration, if it is in the cache
    /// tier: every cache manager of the cluster (any may hold its blocks).
    fn holding_managers(&self, cached: bool) -> Vec<ServerId> {
        match cached {
            true => self.cluster().cache.managers.iter().map(|m| m.id).collect(),
            false => Vec::new(),
        }
    }

    /// Ends the cache managers' holds of `inode` if it is in the cache tier, after a
    /// `committed` switch dropping its blocks and refusing its old layout there.
    /// Whether every manager did (else said, for the next purge round).
    fn release_tier(&self, inode: InodeId, committed: bool) -> bool {
        let attr = match self.store.getattr(&Cred::root(), inode) {
            Ok(attr) => attr,
            // Removed meanwhile: the purge drops its blocks; the holds lapse.
            Err(e) if e.code == ErrorCode::NotFound => return true,
            Err(e) => {
                eprintln!(
                    "weftd meta: migration of inode {inode}: reading it to end its cache holds: {}",
                    e.message
                );
                return false;
            }
        };
        let layout = attr.layout.as_ref().filter(|_| committed);
        let mut done = true;
        for manager in self.holding_managers(attr.cache.uses_tier()) {
            if let Err(e) = self
                .objects
                .cache_migrate(manager, inode, migrate_step::THAW, layout)
            {
                eprintln!(
                    "weftd meta: migration of inode {inode}: ending the hold at {}; will retry",
                    e.message
                );
                done = false;
            }
        }
        done
    }

    /// `FREEZE` of cached file `inode` at each of `managers`: their epochs, or the
    /// first failure and how many held before it.
    fn hold_on(
        &self,
        managers: &[ServerId],
        inode: InodeId,
    ) -> Result<Vec<(ServerId, u64)>, (usize, WireError)> {
        let mut out = Vec::with_capacity(managers.len());
        for (i, &manager) in managers.iter().enumerate() {
            match self
                .objects
                .cache_migrate(manager, inode, migrate_step::FREEZE, None)
            {
                Ok(epoch) => out.push((manager, epoch)),
                Err(e) => return Err((i, e)),
            }
        }
        Ok(out)
    }

    /// Best effort: a manager that misses it lets its hold lapse.
    fn unhold_quietly(&self, managers: &[ServerId], inode: InodeId) {
        for &manager in managers {
            if let Err(e) = self
                .objects
                .cache_migrate(manager, inode, migrate_step::THAW, None)
            {
                eprintln!(
                    "weftd meta: migration of inode {inode}: ending the hold at {}",
                    e.message
                );
            }
        }
    }

    /// One purge round's part: finishes the pending switches no `MigrateEnd` is
    /// working on (left by a crash of the manager, or by an io server unreachable at
    /// the time). Returns how many are left.
    pub(super) fn settle_switches(&self) -> usize {
        let mut after = self
            .migrations
            .settle_after
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if after.is_some_and(|t| Instant::now() < t) {
            return 0;
        }
        let pending = match self.store.pending_switches(MIGRATIONS_MAX) {
            Ok(pending) => pending,
            Err(e) => {
                eprintln!("weftd meta: reading the pending migrations: {e}");
                return 0;
            }
        };
        let mut left = 0;
        for (inode, switch) in pending {
            {
                let mut ending = self.migrations.ending();
                if ending.contains(&inode) {
                    continue;
                }
                ending.insert(inode);
            }
            let _ending = Ending {
                migrations: &self.migrations,
                inode,
            };
            if !self.finish_switch(inode, &switch) {
                left += 1;
            }
        }
        *after = (left > 0).then(|| Instant::now() + SETTLE_RETRY);
        left
    }

    /// One migration step at each of `servers`: their answers, or the first failure
    /// (naming the server).
    fn migrate_step_on(
        &self,
        servers: &[ServerId],
        inode: InodeId,
        temp: InodeId,
        new: Option<&Layout>,
        step: u8,
    ) -> Result<Vec<(ServerId, u64)>, (usize, WireError)> {
        let mut out = Vec::with_capacity(servers.len());
        for (i, &server) in servers.iter().enumerate() {
            match self.migrate_step_at(server, inode, temp, new, step) {
                Ok(stamp) => out.push((server, stamp)),
                Err(e) => {
                    return Err((
                        i,
                        WireError::new(e.code, format!("io server {server}: {}", e.message)),
                    ))
                }
            }
        }
        Ok(out)
    }

    /// Best effort (a server that misses it: its freeze lapses, or the set-aside
    /// object stays, said on stderr).
    fn migrate_step_quietly(
        &self,
        servers: &[ServerId],
        inode: InodeId,
        temp: InodeId,
        new: Option<&Layout>,
        step: u8,
    ) {
        for &server in servers {
            if let Err(e) = self.migrate_step_at(server, inode, temp, new, step) {
                eprintln!(
                    "weftd meta: migration of inode {inode}, step {step} on io server {server}: {}",
                    e.message
                );
            }
        }
    }

    fn migrate_begin(&self, cred: &Cred, inode: InodeId, temp: InodeId) -> Result<Response, WireError> {
        let (attr, old, _) = self.store.migrate_check(cred, inode, temp)?;
        if self.store.pending_switch(inode)?.is_some() {
            return Err(crate::store::migrate_pending_error(inode));
        }
        {
            let map = self.migrations.lock();
            match map.get(&inode) {
                Some(m) if m.temp != temp => {
                    return Err(WireError::new(
                        ErrorCode::Busy,
                        format!("inode {inode} is being migrated already"),
                    ))
                }
                None if map.len() >= MIGRATIONS_MAX => {
                    return Err(WireError::new(
                        ErrorCode::Busy,
                        format!("{MIGRATIONS_MAX} migrations are under way: try again later"),
                    ))
                }
                _ => {}
            }
        }
        let servers = old.all_servers();
        let renewal = self.migrations.lock().contains_key(&inode);
        // A cached file: the cache managers hold its changes and write its dirty
        // blocks back first, so the objects hold every acknowledged byte when they
        // freeze.
        let managers = self.holding_managers(attr.cache.uses_tier());
        let holds = match self.hold_on(&managers, inode) {
            Ok(holds) => holds,
            Err((done, e)) => {
                if !renewal {
                    self.unhold_quietly(&managers[..done], inode);
                }
                return Err(e);
            }
        };
        let epochs = match self.migrate_step_on(&servers, inode, temp, None, migrate_step::FREEZE) {
            Ok(epochs) => epochs,
            Err((done, e)) => {
                if !renewal {
                    self.migrate_step_quietly(&servers[..done], inode, temp, None, migrate_step::THAW);
                    self.unhold_quietly(&managers, inode);
                }
                return Err(e);
            }
        };
        let mut map = self.migrations.lock();
        match map.get(&inode) {
            // A renewal: each freeze must have held since the first.
            Some(m) if m.epochs != epochs || m.holds != holds => {
                map.remove(&inode);
                drop(map);
                self.migrate_step_quietly(&servers, inode, temp, None, migrate_step::THAW);
                self.unhold_quietly(&managers, inode);
                Err(WireError::new(
                    ErrorCode::Busy,
                    format!("inode {inode}: a freeze of its writes lapsed during the copy (an io server restarted, or the copy stalled); start again"),
                ))
            }
            Some(_) => Ok(Response::Attr(attr)),
            None => {
                map.insert(inode, Migration { temp, epochs, holds });
                Ok(Response::Attr(attr))
            }
        }
    }

    fn migrate_end(
        &self,
        cred: &Cred,
        inode: InodeId,
        temp: InodeId,
        commit: bool,
    ) -> Result<Response, WireError> {
        let (attr, old, new) = self.store.migrate_check(cred, inode, temp)?;
        let migration = {
            let mut map = self.migrations.lock();
            match map.get(&inode) {
                Some(m) if m.temp == temp => map.remove(&inode).expect("just found"),
                _ => {
                    return Err(WireError::new(
                        ErrorCode::InvalidArgument,
                        format!("no migration of inode {inode} into inode {temp} is under way (the manager restarted?)"),
                    ))
                }
            }
        };
        let frozen = old.all_servers();
        let managers = self.holding_managers(attr.cache.uses_tier());
        let thaw = || {
            self.migrate_step_quietly(&frozen, inode, temp, None, migrate_step::THAW);
            self.unhold_quietly(&managers, inode);
        };
        if !commit {
            thaw();
            return Ok(Response::Attr(attr));
        }
        // Every cache manager's hold lasted since the copy began, with nothing dirty.
        match self.hold_on(&managers, inode) {
            Ok(holds) if holds == migration.holds => {}
            Ok(_) => {
                thaw();
                return Err(WireError::new(
                    ErrorCode::Busy,
                    format!("inode {inode}: a cache manager's hold of its changes lapsed during the copy; nothing was switched, start again"),
                ));
            }
            Err((_, e)) => {
                thaw();
                return Err(e);
            }
        }
        // Every freeze held since the copy began.
        match self.migrate_step_on(&frozen, inode, temp, None, migrate_step::CHECK) {
            Ok(epochs) if epochs == migration.epochs => {}
            Ok(_) => {
                thaw();
                return Err(WireError::new(
                    ErrorCode::Busy,
                    format!("inode {inode}: a freeze of its writes lapsed during the copy; nothing was switched, start again"),
                ));
            }
            Err((_, e)) => {
                thaw();
                return Err(e);
            }
        }
        let servers = union(&old, &new);
        let switch = PendingSwitch {
            temp,
            committed: false,
            servers: servers
                .iter()
                .map(|&server| SwitchServer {
                    server,
                    old: frozen.contains(&server),
                    new: striping_in(&new, server),
                })
                .collect(),
        };
        {
            let mut ending = self.migrations.ending();
            if !ending.insert(inode) {
                drop(ending);
                thaw();
                return Err(crate::store::migrate_pending_error(inode));
            }
        }
        let _ending = Ending {
            migrations: &self.migrations,
            inode,
        };
        if let Err(e) = self.store.begin_switch(inode, &switch) {
            thaw();
            return Err(e);
        }
        if let Err((_, e)) = self.migrate_step_on(&servers, inode, temp, Some(&new), migrate_step::ADOPT) {
            self.finish_switch(inode, &switch);
            return Err(e);
        }
        crash_at("WEFT_FAULT_MIGRATE_CRASH", inode, "before");
        let attr = match self.store.switch_layout(cred, inode, temp, &old) {
            Ok(attr) => attr,
            Err(e) => {
                self.finish_switch(inode, &switch);
                return Err(e);
            }
        };
        crash_at("WEFT_FAULT_MIGRATE_CRASH_COMMITTED", inode, "after");
        self.finish_switch(
            inode,
            &PendingSwitch {
                committed: true,
                ..switch
            },
        );
        // Sizes and times come from the new objects now: a vouch given before covers
        // nothing read of the old ones.
        if let Some(writers) = self.writers.get() {
            writers.changed(inode);
        }
        Ok(Response::Attr(attr))
    }

    /// Records io server `server`'s new state and places new files only on active
    /// servers from now on. A server drains only while the default layout still fits
    /// the others, and is removed only once drained with no file left on it.
    fn set_server_state(&self, cred: &Cred, server: ServerId, state: u8) -> Result<Response, WireError> {
        let ids = self.io_server_ids();
        if !ids.contains(&server) {
            return Err(WireError::new(
                ErrorCode::NotFound,
                format!("io server {server} is not in the cluster description"),
            ));
        }
        let states = self.store.server_states(&ids)?;
        let now = states.iter().find(|(s, _)| *s == server).map_or(0, |(_, st)| *st);
        if state == server_state::REMOVED || state == server_state::DRAINED {
            let (files, _) = self.store.server_files(cred, server, InodeId(0), 1)?;
            if let Some((inode, _)) = files.first() {
                return Err(WireError::new(
                    ErrorCode::Busy,
                    format!(
                        "io server {server} still holds a piece of inode {inode} (and maybe more): drain it first (`weft server drain {server}`)"
                    ),
                ));
            }
        }
        if state == server_state::REMOVED && now == server_state::ACTIVE {
            return Err(WireError::new(
                ErrorCode::Busy,
                format!("io server {server} is active: drain it first (`weft server drain {server}`)"),
            ));
        }
        let placed: Vec<ServerId> = states
            .iter()
            .map(|&(s, st)| if s == server { (s, state) } else { (s, st) })
            .filter(|&(_, st)| st == server_state::ACTIVE)
            .map(|(s, _)| s)
            .collect();
        self.place_on(placed)?;
        self.store.set_server_state(cred, server, state)?;
        Ok(Response::ServerStates {
            states: self.store.server_states(&ids)?,
        })
    }

    /// New files go only to `servers` (refused when the default layout does not fit
    /// them, or none is left).
    fn place_on(&self, servers: Vec<ServerId>) -> Result<(), WireError> {
        if servers.is_empty() {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                "no active io server would be left for new files",
            ));
        }
        let mut layout = self.store.cluster();
        layout.io_servers = servers;
        self.store.set_cluster(layout).map_err(|e| {
            WireError::new(
                e.code,
                format!(
                    "the cluster's default layout would not fit the active io servers left: {}",
                    e.message
                ),
            )
        })
    }

    /// At start: new files go only to the io servers recorded active.
    pub(super) fn apply_server_states(&self) -> Result<(), WireError> {
        let states = self.store.server_states(&self.io_server_ids())?;
        if states.iter().all(|(_, st)| *st == server_state::ACTIVE) {
            return Ok(());
        }
        self.place_on(
            states
                .iter()
                .filter(|(_, st)| *st == server_state::ACTIVE)
                .map(|(s, _)| *s)
                .collect(),
        )
    }
}
