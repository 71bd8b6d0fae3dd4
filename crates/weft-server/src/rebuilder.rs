//! The metadata manager's rebuilder (issue 33): copies replicated files' stale pieces
//! back from fresh copies in the background once their servers answer, as `weft
//! rebuild` does by hand, so that a file is fully redundant again without anyone
//! asking.
//!
//! - It learns of stale pieces from the manager as writers mark them (`MetaService::
//!   on_stale`: file and server), and from a walk of the manager's list of stale files
//!   shortly after start (marks made before a restart) and every `SCAN_PERIOD` (marks
//!   it was not told of: a full pending set, `weft rebuild --missing`).
//! - Pending pieces are kept per server, at most `PENDING_MAX` in all (past that they
//!   are dropped and the next walk finds them again). A round waits `SETTLE` after
//!   the latest mark (a write storm against a dead server marks many files at once),
//!   then, per server that answers, rebuilds its pending files one after another
//!   through an ordinary client of this manager (the cluster key: the key owner, root
//!   to the manager), paced to the rate (`--auto-rebuild`, 100 MiB/s by default). A
//!   server that does not answer, or that fails `FAILURES_MAX` files in a row, waits
//!   for the next round; rounds with work left come after a backoff from `RETRY_MIN`
//!   doubling to `RETRY_MAX`.
//! - Writes racing a rebuild are the client library's to handle (`rebuild.rs`: a chunk
//!   written meanwhile is copied again; a piece a writer marks stale again stays stale
//!   and comes back through the hook).
//! - Counters go to the metrics (`weft_rebuild_*`); `weft status` shows them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use weft_client::{
    Client, ClientAuth, ClientError, ClusterKey, ErrorCode, InodeId, RebuildOptions, ServerId,
};
use weft_meta::service::MetaService;
use weft_metrics::External;

/// How often the manager's list of stale files is walked in full.
const SCAN_PERIOD: Duration = Duration::from_secs(600);
/// The first walk, after the manager starts serving.
const FIRST_SCAN_AFTER: Duration = Duration::from_secs(2);
/// How long after the latest mark a round starts.
const SETTLE: Duration = Duration::from_secs(1);
const RETRY_MIN: Duration = Duration::from_secs(2);
const RETRY_MAX: Duration = Duration::from_secs(60);
/// Most pieces pending at once.
const PENDING_MAX: usize = 100_000;
/// Failed files in a row after which a server waits for the next round.
const FAILURES_MAX: u32 = 8;

#[derive(Default)]
struct State {
    pending: BTreeMap<ServerId, BTreeSet<InodeId>>,
    count: usize,
    /// Marks dropped for `PENDING_MAX`: the next round walks the list.
    overflowed: bool,
    /// When the latest mark came.
    marked: Option<Instant>,
}

/// What the rebuilder did since the manager started (metrics).
#[derive(Default)]
struct Counters {
    pieces: u64,
    bytes: u64,
    failures: u64,
    rounds: u64,
}

pub struct Rebuilder {
    state: Mutex<State>,
    wake: Condvar,
    counters: Mutex<Counters>,
    rate: u64,
}

impl Rebuilder {
    /// Starts the rebuilder of `service`, reaching it as a client at `addr` with `key`,
    /// copying at most `rate` bytes per second.
    pub fn spawn(service: &MetaService, addr: String, key: ClusterKey, rate: u64) -> Arc<Rebuilder> {
        let rebuilder = Arc::new(Rebuilder {
            state: Mutex::default(),
            wake: Condvar::new(),
            counters: Mutex::default(),
            rate,
        });
        let noted = rebuilder.clone();
        service.on_stale(move |inode, server| noted.note(inode, server));
        let running = rebuilder.clone();
        std::thread::Builder::new()
            .name("weft-rebuilder".into())
            .spawn(move || running.run(&addr, &key))
            .expect("starting the rebuilder thread");
        rebuilder
    }

    /// A piece marked stale: pending from now on.
    fn note(&self, inode: InodeId, server: ServerId) {
        let mut state = self.state.lock().unwrap();
        state.add(inode, server);
        state.marked = Some(Instant::now());
        self.wake.notify_all();
    }

    /// The metrics of the rebuilder.
    pub fn metrics(&self) -> Vec<External> {
        let pending = self.state.lock().unwrap().count as u64;
        let c = self.counters.lock().unwrap();
        vec![
            External::gauge(
                "weft_rebuild_pending_pieces",
                "Stale pieces of replicated files the manager's rebuilder knows of and has not rebuilt",
                pending,
            ),
            External::counter(
                "weft_rebuild_pieces",
                "Stale pieces the manager's rebuilder copied back and marked fresh",
                c.pieces,
            ),
            External::counter("weft_rebuild", "Bytes the manager's rebuilder copied", c.bytes).bytes(),
            External::counter(
                "weft_rebuild_failures",
                "Files the manager's rebuilder could not rebuild when it tried (their server or every fresh copy unreachable); tried again later",
                c.failures,
            ),
            External::counter("weft_rebuild_rounds", "Rounds of the manager's rebuilder", c.rounds),
        ]
    }

    fn run(&self, addr: &str, key: &ClusterKey) {
        let mut client: Option<Client> = None;
        let mut next_scan = Instant::now() + FIRST_SCAN_AFTER;
        let mut retry = RETRY_MIN;
        let mut left = false;
        let mut last_error = String::new();
        loop {
            // Wait for work: a mark (then `SETTLE` more), the walk, or a retry.
            let retry_at = left.then(|| Instant::now() + retry);
            {
                let mut state = self.state.lock().unwrap();
                loop {
                    let now = Instant::now();
                    let settled = state.marked.is_none_or(|m| now >= m + SETTLE);
                    let due = now >= next_scan
                        || state.overflowed
                        || (state.count > 0 && settled && retry_at.is_none_or(|r| now >= r));
                    if due {
                        break;
                    }
                    let mut until = next_scan;
                    if state.count > 0 {
                        let at = state
                            .marked
                            .map_or(now, |m| m + SETTLE)
                            .max(retry_at.unwrap_or(now));
                        until = until.min(at);
                    }
                    let wait = until
                        .saturating_duration_since(now)
                        .max(Duration::from_millis(10));
                    state = self.wake.wait_timeout(state, wait).unwrap().0;
                }
            }
            if client.is_none() {
                client = Client::connect_with(addr, ClientAuth::cluster(key.clone())).ok();
            }
            let Some(c) = client.as_ref() else {
                // Its own manager refused it (or is not listening yet): wait, the walk
                // included (due or not), before connecting again.
                say_once(
                    &mut last_error,
                    format!("cannot connect to the manager at {addr}"),
                );
                std::thread::sleep(retry);
                left = true;
                retry = (retry * 2).min(RETRY_MAX);
                continue;
            };
            if Instant::now() >= next_scan || self.state.lock().unwrap().overflowed {
                match self.walk(c) {
                    Ok(()) => next_scan = Instant::now() + SCAN_PERIOD,
                    Err(e) => {
                        say_once(&mut last_error, format!("listing stale pieces failed: {e}"));
                        next_scan = Instant::now() + RETRY_MAX;
                    }
                }
            }
            self.counters.lock().unwrap().rounds += 1;
            left = self.round(c, &mut last_error);
            retry = if left {
                (retry * 2).min(RETRY_MAX)
            } else {
                RETRY_MIN
            };
        }
    }

    /// Adds every stale piece of the manager's list to the pending ones.
    fn walk(&self, client: &Client) -> Result<(), ClientError> {
        self.state.lock().unwrap().overflowed = false;
        let mut after = InodeId(0);
        loop {
            let (files, more) = client.stale_files(after)?;
            let mut state = self.state.lock().unwrap();
            for (inode, servers) in &files {
                for server in servers {
                    state.add(*inode, *server);
                }
            }
            drop(state);
            match files.last() {
                Some((last, _)) if more => after = *last,
                _ => return Ok(()),
            }
        }
    }

    /// Rebuilds the pending pieces of every server that answers; whether some are left.
    fn round(&self, client: &Client, last_error: &mut String) -> bool {
        let servers: Vec<ServerId> = self.state.lock().unwrap().pending.keys().copied().collect();
        let mut left = false;
        for server in servers {
            if !client.io_server_answers(server) {
                left = true;
                continue;
            }
            let files: Vec<InodeId> = self
                .state
                .lock()
                .unwrap()
                .pending
                .get(&server)
                .map(|s| s.iter().copied().collect())
                .unwrap_or_default();
            let options = RebuildOptions {
                rate_bytes_per_sec: Some(self.rate),
                server: Some(server),
                missing: false,
            };
            let mut failed_in_a_row = 0;
            for inode in files {
                let mut copied = 0u64;
                let result = client.rebuild_file(inode, &options, &mut |p| {
                    self.counters.lock().unwrap().bytes += p.bytes - copied;
                    copied = p.bytes;
                });
                match result {
                    Ok(done) => {
                        self.counters.lock().unwrap().pieces += done.pieces;
                        self.state.lock().unwrap().remove(inode, server);
                        failed_in_a_row = 0;
                    }
                    // Removed, or no longer replicated: nothing to rebuild.
                    Err(e)
                        if matches!(
                            e.code(),
                            ErrorCode::Stale | ErrorCode::NotFound | ErrorCode::InvalidArgument
                        ) =>
                    {
                        self.state.lock().unwrap().remove(inode, server);
                    }
                    Err(e) => {
                        self.counters.lock().unwrap().failures += 1;
                        say_once(
                            last_error,
                            format!("rebuilding inode {inode} on io server {server} failed (tried again later): {e}"),
                        );
                        left = true;
                        failed_in_a_row += 1;
                        if failed_in_a_row >= FAILURES_MAX {
                            break;
                        }
                    }
                }
            }
        }
        left
    }
}

impl State {
    fn add(&mut self, inode: InodeId, server: ServerId) {
        if self.count >= PENDING_MAX {
            self.overflowed = true;
            return;
        }
        if self.pending.entry(server).or_default().insert(inode) {
            self.count += 1;
        }
    }

    fn remove(&mut self, inode: InodeId, server: ServerId) {
        if let Some(files) = self.pending.get_mut(&server) {
            if files.remove(&inode) {
                self.count -= 1;
            }
            if files.is_empty() {
                self.pending.remove(&server);
            }
        }
    }
}

/// Prints `message` on stderr (the manager's log) unless it was the last one printed.
fn say_once(last: &mut String, message: String) {
    if *last != message {
        eprintln!("weftd meta: rebuilder: {message}");
        *last = message;
    }
}
