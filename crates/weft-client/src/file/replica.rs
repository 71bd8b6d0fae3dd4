//! Replicated files (`replicas=N`) on the client's stripe path, below views, list I/O
//! and collective methods: those address slots (layout indices), and `File::connection_of`
//! maps a slot to one of its copies' servers. Every copy of a slot stores the slot's
//! stripes at the same local offsets (`weft_layout::redundancy`), so a request is sent
//! to a copy unchanged.
//!
//! - A write runs once per copy (`File::with_copies`), each run's requests going to
//!   that copy of every slot: the fresh copies first, then those this handle knows
//!   stale. The runs to fresh copies go in parallel (one thread per copy beyond the
//!   first); a run that reaches a stale copy starts only after them, so that a stale
//!   piece being rebuilt gets a write only once every fresh copy of its slot has it
//!   (what the rebuild's stamps rest on: `crate::rebuild`). A run that fails because a
//!   server is unreachable (refused, lost or timed out: the client's timeout decides)
//!   gets that server's piece marked stale at the manager (`MarkStale`, in the file's
//!   layout) before the write is acknowledged, and runs again with that slot's requests
//!   sent to another fresh copy. A stale copy this handle skipped (found unreachable
//!   lately) is marked again after the write, which moves its generation: a rebuild
//!   copying it meanwhile does not clear it. The write is acknowledged once every fresh
//!   copy has it, and never while some slot has fewer fresh copies than the minimum
//!   (default all but one, at least one).
//! - A read goes to the first fresh copy of each slot that this handle has not seen down;
//!   an unreachable server is noted down (for `DOWN_RETRY`) and the read runs again
//!   (`File::with_fallback`), without an error reaching the caller while a fresh copy
//!   of every slot answers. Stale pieces are never read.
//! - A server may have been marked stale by another client while this handle was open
//!   (it was down, and came back with its old bytes). A read goes to a server only over
//!   a connection the handle's stale set was confirmed under: the file's stale set was
//!   read afresh from the manager (`GetAttr`) after that connection was made; one answer
//!   confirms every connection the pool held to the file's servers before the question,
//!   so a handle asks once while its connections stay up (not at its open: the attributes
//!   an open goes by may be older than a connection made meanwhile). A restarted server
//!   is always reached over a new connection, so
//!   its piece, if marked meanwhile, is never read. Not covered: a server that stayed up
//!   and was marked stale by a writer that could not reach it (a partition), over a
//!   connection this handle confirmed before the mark.

use super::File;
use crate::error::ClientError;
use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use weft_layout::{Layout, ServerId};
use weft_proto::msg::{Request, Response};
use weft_proto::ErrorCode;
use weft_rpc::Connection;
use weft_rpc::RpcError;

/// How long a server a read found unreachable is left alone before it is tried again.
pub const DOWN_RETRY: Duration = Duration::from_secs(10);

thread_local! {
    /// During a replicated write: the copy this thread's requests go to. `None`: a
    /// read (or anything else), which goes to the first usable copy of each slot.
    static COPY: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The smallest number of fresh copies of every slot a write may be acknowledged on:
/// `$WEFT_WRITE_COPIES_MIN` if set (1..=replicas), else all but one (at least one).
pub fn write_copies_min(replicas: usize) -> usize {
    std::env::var("WEFT_WRITE_COPIES_MIN")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| (1..=replicas).contains(n))
        .unwrap_or(replicas.saturating_sub(1).max(1))
}

/// A replicated file's copies as one handle sees them.
pub(crate) struct Replicas {
    /// `[slot][copy]`: the server and its address, primary first.
    pieces: Vec<Vec<(ServerId, String)>>,
    /// Stale pieces: the layout's at open, and those this handle marked.
    stale: Mutex<HashSet<ServerId>>,
    /// Servers this handle found unreachable while reading, and when.
    down: Mutex<HashMap<ServerId, Instant>>,
    /// Per server, the connection under which `stale` is known to hold for it (see the
    /// module's text): at most one per piece.
    confirmed: Mutex<HashMap<ServerId, Weak<Connection>>>,
    copies_min: usize,
}

impl Replicas {
    pub(crate) fn new(
        layout: &Layout,
        addr_of: impl Fn(ServerId) -> Result<String, ClientError>,
    ) -> Result<Option<Replicas>, ClientError> {
        if layout.replica_count() < 2 {
            return Ok(None);
        }
        let pieces = (0..layout.width())
            .map(|slot| {
                layout
                    .slot_servers(slot)
                    .into_iter()
                    .map(|s| Ok((s, addr_of(s)?)))
                    .collect::<Result<Vec<_>, ClientError>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(Replicas {
            pieces,
            stale: Mutex::new(layout.replication.stale.iter().copied().collect()),
            down: Mutex::new(HashMap::new()),
            confirmed: Mutex::new(HashMap::new()),
            copies_min: write_copies_min(layout.replica_count()),
        }))
    }

    fn copies(&self) -> usize {
        self.pieces[0].len()
    }

    /// The fresh copies of `slot` (and, for reads, not seen down lately), in order.
    fn usable(&self, slot: usize, reading: bool) -> Vec<usize> {
        let stale = self.stale.lock().unwrap_or_else(|p| p.into_inner());
        let down = self.down.lock().unwrap_or_else(|p| p.into_inner());
        (0..self.copies())
            .filter(|&c| {
                let server = self.pieces[slot][c].0;
                let seen_down = reading && down.get(&server).is_some_and(|at| at.elapsed() < DOWN_RETRY);
                !(stale.contains(&server) || seen_down)
            })
            .collect()
    }

    /// The copies of `slot` a write's runs go to, run `r` to the r-th: the fresh ones,
    /// then the stale ones not seen down lately.
    fn write_order(&self, slot: usize) -> Vec<usize> {
        let mut order = self.usable(slot, false);
        let stale = self.stale.lock().unwrap_or_else(|p| p.into_inner());
        let down = self.down.lock().unwrap_or_else(|p| p.into_inner());
        order.extend((0..self.copies()).filter(|&c| {
            let server = self.pieces[slot][c].0;
            stale.contains(&server) && down.get(&server).is_none_or(|at| at.elapsed() >= DOWN_RETRY)
        }));
        order
    }

    /// The fewest fresh copies any slot has (the runs before it write fresh copies only).
    fn fresh_min(&self) -> usize {
        (0..self.pieces.len())
            .map(|slot| self.usable(slot, false).len())
            .min()
            .unwrap_or(0)
    }

    fn any_stale(&self) -> bool {
        !self.stale.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }

    /// Stale pieces' servers this handle found unreachable lately: a write skips them.
    fn stale_and_down(&self) -> Vec<ServerId> {
        let stale = self.stale.lock().unwrap_or_else(|p| p.into_inner());
        let down = self.down.lock().unwrap_or_else(|p| p.into_inner());
        stale
            .iter()
            .filter(|s| down.get(s).is_some_and(|at| at.elapsed() < DOWN_RETRY))
            .copied()
            .collect()
    }

    /// The server (and its address) this thread's request for `slot` goes to.
    pub(crate) fn addr_for(&self, slot: usize) -> Result<(ServerId, &str), ClientError> {
        let copy = COPY.with(|c| c.get());
        let chosen = match copy {
            // A write's run for copy `r` (see `write_order`), or (fewer copies to write
            // than runs) the last fresh one again, which is harmless: the same bytes.
            Some(r) => {
                let order = self.write_order(slot);
                order
                    .get(r)
                    .copied()
                    .or_else(|| self.usable(slot, false).last().copied())
            }
            None => self.usable(slot, true).first().copied(),
        };
        match chosen {
            Some(c) => Ok((self.pieces[slot][c].0, &self.pieces[slot][c].1)),
            None => Err(ClientError::refused(
                ErrorCode::Unavailable,
                format!(
                    "no copy of stripe slot {slot} can be reached (servers {})",
                    self.pieces[slot]
                        .iter()
                        .map(|(s, _)| s.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }

    /// The server at `addr` (as an error names it: the address, or for a server on
    /// this machine "TCP-ADDRESS (via unix:PATH)", reached at "unix:PATH") if it holds
    /// a piece of this file.
    fn server_at(&self, addr: &str) -> Option<ServerId> {
        let address = match addr.split_once(" (via ") {
            Some((_, via)) => via.strip_suffix(')').unwrap_or(via),
            None => addr,
        };
        self.pieces
            .iter()
            .flatten()
            .find(|(_, a)| a == address)
            .map(|(s, _)| *s)
    }

    /// Whether this handle's stale set is known to hold for `server` over `connection`.
    fn is_confirmed(&self, server: ServerId, connection: &Arc<Connection>) -> bool {
        self.confirmed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&server)
            .and_then(Weak::upgrade)
            .is_some_and(|c| Arc::ptr_eq(&c, connection))
    }

    /// The stale set was read after `connection` to `server` was made.
    fn confirm(&self, server: ServerId, connection: &Arc<Connection>) {
        self.confirmed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(server, Arc::downgrade(connection));
    }

    fn is_stale(&self, server: ServerId) -> bool {
        self.stale
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&server)
    }

    fn mark_down(&self, server: ServerId) {
        self.down
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(server, Instant::now());
    }

    /// Fails when some slot has fewer fresh copies than a write needs.
    fn check_copies_min(&self) -> Result<(), ClientError> {
        for slot in 0..self.pieces.len() {
            let fresh = self.usable(slot, false).len();
            if fresh < self.copies_min {
                return Err(ClientError::refused(
                    ErrorCode::Io,
                    format!(
                        "only {fresh} fresh copies of stripe slot {slot} are left, a write needs {}",
                        self.copies_min
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The address of the server a transport error came from, if it is one (a server down
/// or not answering, as opposed to a refusal).
fn unreachable_addr(e: &ClientError) -> Option<&str> {
    match e {
        ClientError::Transport(
            RpcError::Connect { addr, .. }
            | RpcError::Disconnected { addr, .. }
            | RpcError::TimedOut { addr, .. },
        ) => Some(addr),
        _ => None,
    }
}

impl File {
    /// Runs `write` once per copy of a replicated file (once for a plain one), see the
    /// module comment; returns the first copy's result.
    pub(crate) fn with_copies<T: Send>(
        &self,
        write: impl Fn() -> Result<T, ClientError> + Sync,
    ) -> Result<T, ClientError> {
        let Some(replicas) = &self.replicas else {
            return write();
        };
        let run = |copy: usize| {
            COPY.with(|c| c.set(Some(copy)));
            let out = write();
            COPY.with(|c| c.set(None));
            out
        };
        let run_parallel = |runs: &[usize]| -> Vec<(usize, Result<T, ClientError>)> {
            std::thread::scope(|scope| {
                let helpers: Vec<_> = runs[1..]
                    .iter()
                    .map(|&copy| (copy, scope.spawn(move || run(copy))))
                    .collect();
                let mut out = vec![(runs[0], run(runs[0]))];
                for (copy, helper) in helpers {
                    out.push((copy, helper.join().expect("replica write thread panicked")));
                }
                out
            })
        };
        let mut pending: Vec<usize> = (0..replicas.copies()).collect();
        let mut first = None;
        // Each retry follows a newly stale or unreachable piece: bounded by the pieces.
        for _ in 0..=replicas.copies() * replicas.pieces.len() {
            // Runs before `fresh_min` write fresh copies only and go together; the
            // others may reach a stale copy and go one by one after them.
            let (mut now, mut later): (Vec<usize>, Vec<usize>) = match replicas.any_stale() {
                true => pending.iter().partition(|&&r| r < replicas.fresh_min()),
                false => (pending.clone(), Vec::new()),
            };
            if now.is_empty() {
                now.push(later.remove(0));
            }
            let mut results = run_parallel(&now);
            let mut again = Vec::new();
            let after_fresh = results.iter().all(|(_, r)| r.is_ok());
            if after_fresh {
                for &copy in &later {
                    results.push((copy, run(copy)));
                }
            } else {
                again.extend(later.iter().copied());
            }
            let mut unreachable = Vec::new();
            let mut stale_refused = false;
            for (copy, result) in results {
                match result {
                    Ok(value) => {
                        first.get_or_insert(value);
                    }
                    Err(e) => match unreachable_addr(&e).and_then(|a| replicas.server_at(a)) {
                        Some(server) => {
                            unreachable.push(server);
                            again.push(copy);
                        }
                        // A run after the fresh ones (which all took the write) refused:
                        // by a stale copy (its object lost with its disk, say), which a
                        // rebuild will make whole. Stale copies are left alone for now.
                        None if after_fresh && later.contains(&copy) => {
                            stale_refused = true;
                            again.push(copy);
                        }
                        None => return Err(e),
                    },
                }
            }
            if stale_refused {
                for server in replicas.stale.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                    replicas.mark_down(*server);
                }
            }
            if again.is_empty() {
                // Stale copies skipped because they were unreachable: marked again
                // (their generation moves), now that every fresh copy has the write.
                for server in replicas.stale_and_down() {
                    self.mark_stale(server)?;
                }
                return Ok(first.expect("a run succeeded"));
            }
            for server in unreachable {
                replicas.mark_down(server);
                self.mark_stale(server)?;
            }
            replicas.check_copies_min()?;
            again.sort_unstable();
            pending = again;
        }
        Err(ClientError::refused(
            ErrorCode::Io,
            format!("{}: a replicated write kept failing on its servers", self.path),
        ))
    }

    /// Runs `read` and, while it fails because a server of a replicated file cannot
    /// be reached, notes that server down and runs it again (each slot's requests then
    /// go to another fresh copy).
    pub(crate) fn with_fallback<T>(
        &self,
        mut read: impl FnMut() -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let Some(replicas) = &self.replicas else {
            return read();
        };
        let mut tries = 0;
        loop {
            match read() {
                Err(e) => match unreachable_addr(&e).and_then(|a| replicas.server_at(a)) {
                    Some(server) if tries < replicas.copies() * replicas.pieces.len() => {
                        tries += 1;
                        replicas.mark_down(server);
                    }
                    _ => return Err(e),
                },
                ok => return ok,
            }
        }
    }

    /// Records at the manager that `server`'s piece of this file missed writes, then
    /// stops reading it.
    fn mark_stale(&self, server: ServerId) -> Result<(), ClientError> {
        let Some(replicas) = &self.replicas else {
            return Ok(());
        };
        // Sent also for a piece this handle knows stale: the mark moves its generation.
        let request = Request::MarkStale {
            cred: self.inner.cred.clone(),
            inode: self.inode(),
            server,
        };
        match self.inner.meta(&request).map_err(|e| e.context(&self.path))? {
            Response::Attr(_) => {}
            other => return Err(crate::error::unexpected(&other)),
        }
        replicas
            .stale
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(server);
        Ok(())
    }

    /// The connection requests for slot `k` of the data layout go to now. For a read
    /// of a replicated file, one under which the handle's stale set holds (see the
    /// module's text): over a connection made since, the stale set is read afresh first.
    pub(crate) fn connection_of(&self, k: usize) -> Result<Arc<Connection>, ClientError> {
        let Some(replicas) = &self.replicas else {
            return self.inner.pool.get(&self.addrs[k]).map_err(ClientError::from);
        };
        let reading = COPY.with(|c| c.get()).is_none();
        // Each look that finds the chosen copy stale moves to another: bounded.
        for _ in 0..=replicas.copies() {
            let (server, addr) = replicas.addr_for(k)?;
            let connection = self.inner.pool.get(addr).map_err(ClientError::from)?;
            if !reading || replicas.is_confirmed(server, &connection) {
                return Ok(connection);
            }
            self.refresh_stale()?;
            if !replicas.is_stale(server) {
                return Ok(connection);
            }
        }
        Err(ClientError::refused(
            ErrorCode::Unavailable,
            format!("{}: every copy of stripe slot {k} is stale", self.path),
        ))
    }

    /// Reads the file's stale pieces afresh from the manager and stops reading those
    /// this handle did not know of (a layout other than this handle's, after a
    /// migration, leaves it as it is: the io servers' fences answer for those). Every
    /// connection the pool held to the file's servers before the question is then
    /// confirmed.
    fn refresh_stale(&self) -> Result<(), ClientError> {
        let Some(replicas) = &self.replicas else {
            return Ok(());
        };
        let held: Vec<(ServerId, Arc<Connection>)> = replicas
            .pieces
            .iter()
            .flatten()
            .filter_map(|(server, addr)| self.inner.pool.existing(addr).map(|c| (*server, c)))
            .collect();
        let request = Request::GetAttr {
            cred: self.inner.cred.clone(),
            inode: self.inode(),
        };
        let attr = match self.inner.meta(&request).map_err(|e| e.context(&self.path))? {
            Response::Attr(attr) => attr,
            other => return Err(crate::error::unexpected(&other)),
        };
        let Some(now) = attr
            .layout
            .filter(|l| l.all_servers() == self.layout.all_servers())
        else {
            return Ok(());
        };
        replicas
            .stale
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(now.replication.stale.iter().copied());
        for (server, connection) in &held {
            replicas.confirm(*server, connection);
        }
        Ok(())
    }
}
