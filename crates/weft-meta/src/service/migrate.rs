//! Migrations of files to a new layout and io servers' states, the manager's part
//! (`weft migrate`, `weft server drain|remove`). The client makes a hidden file with
//! the new layout (`temp`) and copies the bytes; the manager keeps writers out and
//! switches the layout:
//!
//! 1. `MigrateBegin`: every io server of the file's old layout freezes its object
//!    (changes refused `Busy`, so clients' writes wait; a lease the client renews by
//!    asking again). The freezes' epochs are remembered here.
//! 2. The client copies the file's bytes into `temp` (reads go on meanwhile).
//! 3. `MigrateEnd` with `commit`: every freeze must still hold with its first epoch
//!    (else a write may have landed after its bytes were copied: nothing is switched).
//!    Then each io server of the old or new layout sets the old object aside and gives
//!    `temp`'s object the file's name, fenced so that only the new striping is served;
//!    the layout switch commits durably; the set-aside objects go and writes resume.
//!    A failure before the commit puts every object back.
//!
//! Readers see the old layout or the new, never a mix: the bytes are the same on both
//! while writes are frozen, and a request with the old striping at a server that took
//! the new object is refused `Stale` (reopen). Io servers' states are in the store;
//! only active io servers get new files (`apply_server_states`).

use super::*;
use weft_proto::msg::{migrate_step, server_state};
use weft_proto::Striping;

/// Most migrations under way at once.
pub const MIGRATIONS_MAX: usize = 1024;

/// A migration under way: its new file and the old layout's freezes.
struct Migration {
    temp: InodeId,
    epochs: Vec<(ServerId, u64)>,
}

/// The migrations under way (in memory: a manager restart abandons them, and the io
/// servers' freezes lapse).
#[derive(Default)]
pub(super) struct Migrations {
    map: Mutex<HashMap<InodeId, Migration>>,
}

impl Migrations {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<InodeId, Migration>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
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
        let request = Request::MigrateObject {
            inode,
            temp,
            striping: new.and_then(|l| striping_in(l, server)),
            step,
        };
        self.objects.migrate_object(server, request)
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
        let epochs = match self.migrate_step_on(&servers, inode, temp, None, migrate_step::FREEZE) {
            Ok(epochs) => epochs,
            Err((done, e)) => {
                if !self.migrations.lock().contains_key(&inode) {
                    self.migrate_step_quietly(&servers[..done], inode, temp, None, migrate_step::THAW);
                }
                return Err(e);
            }
        };
        let mut map = self.migrations.lock();
        match map.get(&inode) {
            // A renewal: each freeze must have held since the first.
            Some(m) if m.epochs != epochs => {
                map.remove(&inode);
                drop(map);
                self.migrate_step_quietly(&servers, inode, temp, None, migrate_step::THAW);
                Err(WireError::new(
                    ErrorCode::Busy,
                    format!("inode {inode}: a freeze of its writes lapsed during the copy (an io server restarted, or the copy stalled); start again"),
                ))
            }
            Some(_) => Ok(Response::Attr(attr)),
            None => {
                map.insert(inode, Migration { temp, epochs });
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
        let thaw = || self.migrate_step_quietly(&frozen, inode, temp, None, migrate_step::THAW);
        if !commit {
            thaw();
            return Ok(Response::Attr(attr));
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
        if let Err((done, e)) = self.migrate_step_on(&servers, inode, temp, Some(&new), migrate_step::ADOPT) {
            self.migrate_step_quietly(
                &servers[..=done.min(servers.len() - 1)],
                inode,
                temp,
                Some(&new),
                migrate_step::UNDO,
            );
            thaw();
            return Err(e);
        }
        let switched = self.store.switch_layout(cred, inode, temp, &old);
        let attr = match switched {
            Ok(attr) => attr,
            Err(e) => {
                self.migrate_step_quietly(&servers, inode, temp, Some(&new), migrate_step::UNDO);
                thaw();
                return Err(e);
            }
        };
        self.migrate_step_quietly(&frozen, inode, temp, None, migrate_step::DROP);
        thaw();
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
