//! Replay after a restart (issue 30 item 2, along the lines of Lustre's recovery): the
//! manager's side.
//!
//! A client sends every namespace change `Tracked`: its identity (a random number for
//! its life), a request slot (one request at a time per slot) and a request number
//! (`xid`, rising). The store records, per (client, slot), the last request done there
//! with its sequence number and its answer, in the operation's own transaction
//! (`store/replies.rs`). So:
//! - a request sent again (its answer was lost: the connection broke, the manager
//!   restarted) whose record is there is answered from the record, not done twice; one
//!   whose record is not there was not done (or was undone by a crash, record and all),
//!   and is done now;
//! - a request whose slot records a later one was done (the client sent the later one
//!   only after its answer): a replay of it is answered as done.
//!
//! Every answer tells the operation's sequence number, the last durable one and the
//! manager's epoch (its incarnation). A client keeps what it was answered for and is not
//! durable yet; when it finds a new epoch it replays them, in their sequence order, then
//! says `ReplayDone`. After a start that may have lost acknowledged operations (a
//! commit interval above 0), the manager holds a replay window
//! (`WEFT_REPLAY_WINDOW_MS`, default `WINDOW_DEFAULT`): replays are applied in their
//! original sequence order across clients (the lowest waiting goes once every client
//! the manager expects has a replay waiting or said it is done; the manager expects
//! the clients whose records are at most `EXPECT_RECENT` older than the newest); every
//! other request waits until the window ends, which it does once every expected client
//! said `ReplayDone`, or at its end. A client that died with the manager leaves a gap:
//! the others' replays wait for it until the window's end, then go on in order; what
//! depended on its lost operations (a file in a directory only it made) fails to
//! replay, and that client's dependants hear it as an error of that operation (logged
//! by the client; the operation is lost, as an unsynced operation on a local disk).
//! A replay arriving after the window is applied as a new request.
//!
//! Bounds: a client uses at most `weft_proto`'s slots in flight; the manager keeps the
//! records of at most `CLIENTS_MAX` clients, forgetting the least recently active
//! (its records go in the transaction of the next tracked operation).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use weft_proto::{Attr, ErrorCode, Request, Response, WireError};

use crate::store::replies::{Reply, ReplyOf};

/// How long the manager waits for replays after a start that may have lost
/// acknowledged operations, unless `WEFT_REPLAY_WINDOW_MS` says.
pub const WINDOW_DEFAULT: Duration = Duration::from_secs(3);
/// Clients whose records are at most this much older than the newest record are
/// expected to replay.
const EXPECT_RECENT: Duration = Duration::from_secs(60);
/// How long new requests wait for a client that began replaying, past its last replay,
/// for its next one or its `ReplayDone` (a client that died in the middle of its
/// replays holds new requests back no longer than this).
const REPLAYING_GRACE: Duration = Duration::from_secs(1);
/// Most clients whose records are kept.
pub const CLIENTS_MAX: usize = 4096;

type Key = (u64, u32);

#[derive(Default)]
struct State {
    records: HashMap<Key, Reply>,
    /// Client -> (last use ms, slots recorded).
    clients: HashMap<u64, (u64, u32)>,
    /// Slots with a request being served.
    busy: HashSet<Key>,
    /// The window's end (`None`: no window, or over).
    until: Option<Instant>,
    /// Clients the window waits for, until they say `ReplayDone`.
    expected: HashSet<u64>,
    /// Replays waiting for their turn: (original sequence number, ticket) -> client. The
    /// ticket tells apart two waiting under one number (a replay left waiting from
    /// before a second restart and its client's resend): keyed by the number alone, the
    /// second overwrote the first, whose entry was then gone and which waited forever.
    waiting: BTreeMap<(u64, u64), u64>,
    /// The next `waiting` ticket.
    tickets: u64,
    /// A replay is being applied.
    applying: bool,
    /// Clients that sent a replay and have not said `ReplayDone`, with when they last
    /// did: new requests wait for them (for `REPLAYING_GRACE` past their last replay).
    replaying: HashMap<u64, Instant>,
    /// `restart`s so far: a request served across one records nothing (`recorded`).
    restarts: u64,
}

/// See the module comment.
#[derive(Default)]
pub struct Replay {
    state: Mutex<State>,
    changed: Condvar,
}

/// What a tracked request is, once its slot is held.
pub enum Seen {
    /// Done before: this answer (sequence number, encoded answer).
    Done(u64, Vec<u8>),
    /// A later request of the slot was done: so was this one.
    Superseded,
    /// Not done: do it.
    New,
}

impl Replay {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Loads the records the store holds; with `window` (a start that may have lost
    /// acknowledged operations) opens the replay window.
    pub fn start(&self, records: Vec<(Key, Reply)>, window: Option<Duration>) {
        let mut state = self.lock();
        let newest = records.iter().map(|(_, r)| r.used_ms).max().unwrap_or(0);
        for (key, reply) in records {
            let client = state.clients.entry(key.0).or_insert((0, 0));
            client.0 = client.0.max(reply.used_ms);
            client.1 += 1;
            if let Some(window) = window.filter(|w| !w.is_zero()) {
                if reply.used_ms + EXPECT_RECENT.as_millis() as u64 >= newest {
                    state.expected.insert(key.0);
                }
                state.until = Some(Instant::now() + window);
            }
            state.records.insert(key, reply);
        }
        if state.until.is_some() {
            eprintln!(
                "weftd meta: waiting up to {} ms for {} clients to replay what they were answered for and is not durable (WEFT_REPLAY_WINDOW_MS)",
                window.unwrap_or_default().as_millis(),
                state.expected.len()
            );
        }
    }

    /// After the store lost acknowledged operations in this process (a disk error, see
    /// `MetaStore::on_loss`): forgets the records it had for those of the reopened
    /// store and opens the window, as a start does. Slots being served and replays
    /// waiting for their turn stay as they are.
    pub fn restart(&self, records: Vec<(Key, Reply)>, window: Duration) {
        {
            let mut state = self.lock();
            state.records.clear();
            state.clients.clear();
            state.expected.clear();
            state.until = None;
            state.restarts += 1;
        }
        self.start(records, Some(window));
        self.changed.notify_all();
    }

    /// `restart`s so far (see `recorded`).
    pub fn restarts(&self) -> u64 {
        self.lock().restarts
    }

    /// Whether the replay window is open.
    pub fn window_open(&self) -> bool {
        let mut state = self.lock();
        Self::open(&mut state)
    }

    fn open(state: &mut State) -> bool {
        match state.until {
            Some(until) if Instant::now() < until && !state.expected.is_empty() => true,
            Some(_) => {
                state.until = None;
                state.expected.clear();
                eprintln!("weftd meta: the replay window is over");
                false
            }
            None => false,
        }
    }

    /// Whether `wait_open` would return at once: the window is over and nobody is
    /// replaying (a request may be served now, without waiting).
    pub fn passes(&self) -> bool {
        Self::through(&mut self.lock())
    }

    /// `passes` under the lock.
    fn through(state: &mut State) -> bool {
        let open = Self::open(state);
        state.replaying.retain(|_, last| last.elapsed() < REPLAYING_GRACE);
        !open && state.waiting.is_empty() && !state.applying && state.replaying.is_empty()
    }

    /// Waits until the replay window is over and the clients replaying at its end are
    /// done (a new request). A window that ends at its deadline (a client that died
    /// with the manager never says `ReplayDone`) releases the replays queued behind that
    /// client and the new requests at the same moment; were the new ones let through
    /// before those replays (queued, or the next of a client that sends them one after
    /// another), a reader would see the namespace without operations their clients
    /// were answered for, and then see them come back.
    pub fn wait_open(&self) {
        let mut state = self.lock();
        loop {
            if Self::through(&mut state) {
                return;
            }
            // `through` left `until` set only while the window is open.
            let left = match state.until {
                Some(u) => u.saturating_duration_since(Instant::now()),
                None => Duration::from_millis(50),
            };
            state = self
                .changed
                .wait_timeout(
                    state,
                    left.clamp(Duration::from_millis(1), Duration::from_millis(50)),
                )
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// `ReplayDone`: the window stops waiting for `client`.
    pub fn done(&self, client: u64) {
        let mut state = self.lock();
        state.expected.remove(&client);
        state.replaying.remove(&client);
        Self::open(&mut state);
        self.changed.notify_all();
    }

    /// Holds `key`'s slot (waiting while another request of it is served) and says what
    /// the request `xid` is.
    pub fn claim(&self, key: Key, xid: u64) -> (SlotHold<'_>, Seen) {
        let mut state = self.lock();
        while state.busy.contains(&key) {
            state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        state.busy.insert(key);
        let seen = match state.records.get(&key) {
            Some(r) if r.xid == xid => Seen::Done(r.seq, r.body.clone()),
            Some(r) if r.xid > xid => Seen::Superseded,
            _ => Seen::New,
        };
        (SlotHold { replay: self, key }, seen)
    }

    /// Waits for the turn of the replay first acknowledged as `seq` (see the module
    /// comment); `turn_over` must follow.
    pub fn turn(&self, client: u64, seq: u64) {
        let mut state = self.lock();
        let key = (seq, state.tickets);
        state.tickets += 1;
        state.waiting.insert(key, client);
        state.replaying.insert(client, Instant::now());
        self.changed.notify_all();
        loop {
            let open = Self::open(&mut state);
            let ready = !state.applying
                && state.waiting.keys().next() == Some(&key)
                && (!open
                    || state
                        .expected
                        .iter()
                        .all(|c| state.waiting.values().any(|w| w == c)));
            if ready {
                break;
            }
            let left = state.until.map_or(Duration::from_millis(50), |u| {
                u.saturating_duration_since(Instant::now())
            });
            state = self
                .changed
                .wait_timeout(
                    state,
                    left.clamp(Duration::from_millis(1), Duration::from_millis(50)),
                )
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        state.waiting.remove(&key);
        state.applying = true;
    }

    /// The replay whose `turn` came by `client` is applied.
    pub fn turn_over(&self, client: u64) {
        let mut state = self.lock();
        state.applying = false;
        if let Some(last) = state.replaying.get_mut(&client) {
            *last = Instant::now();
        }
        drop(state);
        self.changed.notify_all();
    }

    /// Keeps `reply`, recorded in its operation's transaction, for `key`.
    /// Whether `client` has a record here (a client without one is not waited for in a
    /// replay window).
    pub fn knows(&self, client: u64) -> bool {
        self.lock().clients.contains_key(&client)
    }

    /// Keeps the record of `key`'s request, unless the manager acted restarted since it
    /// came (`restarts` then): it belongs to the state before, which the reopened store
    /// lost, and kept now it would answer the client's replay as done without doing it.
    /// Says whether it was kept.
    pub fn recorded(&self, key: Key, reply: Reply, restarts: u64) -> bool {
        let mut state = self.lock();
        if state.restarts != restarts {
            return false;
        }
        let used = reply.used_ms;
        if state.records.insert(key, reply).is_none() {
            state.clients.entry(key.0).or_insert((0, 0)).1 += 1;
        }
        state.clients.entry(key.0).or_insert((0, 0)).0 = used;
        true
    }

    /// Records to remove with the next tracked operation: every slot of the least
    /// recently active client while more than `CLIENTS_MAX` are kept.
    pub fn to_forget(&self) -> Vec<Key> {
        let mut state = self.lock();
        if state.clients.len() <= CLIENTS_MAX {
            return Vec::new();
        }
        let Some((&oldest, _)) = state.clients.iter().min_by_key(|(_, (used, _))| *used) else {
            return Vec::new();
        };
        state.clients.remove(&oldest);
        let keys: Vec<Key> = state.records.keys().filter(|k| k.0 == oldest).copied().collect();
        for key in &keys {
            state.records.remove(key);
        }
        keys
    }

    /// Records kept (tests, figures).
    pub fn records(&self) -> usize {
        self.lock().records.len()
    }
}

/// A slot held by `Replay::claim`, let go on drop.
pub struct SlotHold<'a> {
    replay: &'a Replay,
    key: Key,
}

impl Drop for SlotHold<'_> {
    fn drop(&mut self) {
        self.replay.lock().busy.remove(&self.key);
        self.replay.changed.notify_all();
    }
}

/// How the store's value of a tracked operation's body becomes its recorded answer.
pub fn reply_of(request: &Request) -> ReplyOf {
    use std::any::Any;
    fn made(value: &dyn Any) -> Option<&crate::store::Made> {
        value.downcast_ref::<crate::store::Made>()
    }
    fn encode(response: Response) -> Option<Vec<u8>> {
        Some(weft_proto::msg::encode_result(&Ok(response)))
    }
    match request {
        Request::WithParent { .. } | Request::CreateGranted { .. } | Request::CreateStamped { .. } => {
            Box::new(|v: &dyn Any| {
                made(v).and_then(|m| {
                    encode(Response::Made {
                        attr: m.attr.clone(),
                        parent: m.parent.clone(),
                    })
                })
            })
        }
        Request::Create { .. }
        | Request::Mkdir { .. }
        | Request::Symlink { .. }
        | Request::Mknod { .. }
        | Request::Link { .. } => {
            Box::new(|v: &dyn Any| made(v).and_then(|m| encode(Response::Attr(m.attr.clone()))))
        }
        Request::SetAttr { .. } | Request::SetDirLayout { .. } => Box::new(|v: &dyn Any| {
            v.downcast_ref::<Attr>()
                .and_then(|a| encode(Response::Attr(a.clone())))
        }),
        Request::Unlink { .. } => Box::new(|v: &dyn Any| {
            v.downcast_ref::<Option<weft_layout::InodeId>>()
                .and_then(|kept| encode(Response::Unlinked { kept: *kept }))
        }),
        Request::Rename { .. } => Box::new(|v: &dyn Any| {
            v.downcast_ref::<(Attr, Option<weft_layout::InodeId>)>()
                .and_then(|(moved, kept)| {
                    encode(Response::Renamed {
                        moved: moved.clone(),
                        kept: *kept,
                    })
                })
        }),
        Request::CreateMany { .. } => Box::new(|v: &dyn Any| {
            v.downcast_ref::<crate::store::MadeMany>().and_then(|m| {
                encode(Response::MadeMany {
                    parent: m.parent.clone(),
                    made: m.made.clone(),
                    refused: m.refused.clone(),
                })
            })
        }),
        Request::RenameExchange { .. } | Request::RenameNoReplace { .. } => Box::new(|v: &dyn Any| {
            v.downcast_ref::<Attr>().and_then(|moved| {
                encode(Response::Renamed {
                    moved: moved.clone(),
                    kept: None,
                })
            })
        }),
        _ => Box::new(|v: &dyn Any| v.downcast_ref::<()>().and_then(|()| encode(Response::Done))),
    }
}

/// A recorded answer back as a response (it was encoded as a result).
pub fn decode_reply(body: &[u8]) -> Result<Response, WireError> {
    match weft_proto::msg::decode_result(body) {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(e)) => Err(e),
        Err(e) => Err(WireError::new(
            ErrorCode::Internal,
            format!("a recorded answer does not decode: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(xid: u64, seq: u64, used_ms: u64) -> Reply {
        Reply {
            xid,
            seq,
            used_ms,
            body: weft_proto::msg::encode_result(&Ok(Response::Done)),
        }
    }

    #[test]
    fn a_request_sent_again_is_recognised_by_its_slot_record() {
        let replay = Replay::default();
        replay.start(vec![((1, 0), reply(5, 40, 1000))], None);
        assert!(matches!(replay.claim((1, 0), 5).1, Seen::Done(40, _)));
        assert!(matches!(replay.claim((1, 0), 4).1, Seen::Superseded));
        assert!(matches!(replay.claim((1, 0), 6).1, Seen::New));
        assert!(matches!(replay.claim((1, 1), 5).1, Seen::New));
        assert!(!replay.window_open());
    }

    #[test]
    fn replays_go_in_sequence_order_across_clients_and_the_window_ends_when_all_are_done() {
        let replay = std::sync::Arc::new(Replay::default());
        replay.start(
            vec![((1, 0), reply(1, 10, 1000)), ((2, 0), reply(1, 11, 1000))],
            Some(Duration::from_secs(30)),
        );
        assert!(replay.window_open());
        let order = std::sync::Arc::new(Mutex::new(Vec::new()));
        let spawn = |client: u64, seq: u64| {
            let (replay, order) = (replay.clone(), order.clone());
            std::thread::spawn(move || {
                replay.turn(client, seq);
                order.lock().unwrap().push(seq);
                replay.turn_over(client);
            })
        };
        // Client 2's replay of 13 waits for client 1's 12, though it came first.
        let late = spawn(2, 13);
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            order.lock().unwrap().is_empty(),
            "13 went before every client was ready"
        );
        let early = spawn(1, 12);
        early.join().unwrap();
        replay.done(1);
        late.join().unwrap();
        assert_eq!(*order.lock().unwrap(), vec![12, 13]);
        replay.done(2);
        assert!(!replay.window_open(), "every expected client is done");
    }

    #[test]
    fn a_window_that_ends_at_its_deadline_applies_the_queued_replays_before_new_requests() {
        // Clients 1 and 2 are expected; 2 died with the manager and never replays, so
        // 1's replays wait for the window's deadline, as a new request does.
        let replay = std::sync::Arc::new(Replay::default());
        replay.start(
            vec![((1, 0), reply(1, 10, 1000)), ((2, 0), reply(1, 11, 1000))],
            Some(Duration::from_millis(300)),
        );
        let order = std::sync::Arc::new(Mutex::new(Vec::new()));
        let replays = {
            let (replay, order) = (replay.clone(), order.clone());
            std::thread::spawn(move || {
                for seq in [12, 14] {
                    replay.turn(1, seq);
                    // Applying takes a while (a commit, a slow disk).
                    std::thread::sleep(Duration::from_millis(100));
                    order.lock().unwrap().push(format!("replay {seq}"));
                    replay.turn_over(1);
                    // The client sends its next replay once this one is answered.
                    std::thread::sleep(Duration::from_millis(30));
                }
                order.lock().unwrap().push("replay done".to_string());
                replay.done(1);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        let reader = {
            let (replay, order) = (replay.clone(), order.clone());
            std::thread::spawn(move || {
                replay.wait_open();
                order.lock().unwrap().push("new request".to_string());
            })
        };
        replays.join().unwrap();
        reader.join().unwrap();
        assert_eq!(
            *order.lock().unwrap(),
            vec!["replay 12", "replay 14", "replay done", "new request"],
            "a new request was served before the replays queued at the window's end"
        );
    }

    #[test]
    fn two_replays_waiting_under_one_number_both_get_their_turn() {
        let replay = std::sync::Arc::new(Replay::default());
        replay.turn(9, 1);
        let (done, finished) = std::sync::mpsc::channel();
        for _ in 0..2 {
            let (replay, done) = (replay.clone(), done.clone());
            std::thread::spawn(move || {
                replay.turn(9, 5);
                replay.turn_over(9);
                done.send(()).unwrap();
            });
        }
        std::thread::sleep(Duration::from_millis(100));
        replay.turn_over(9);
        for k in 0..2 {
            assert!(
                finished.recv_timeout(Duration::from_secs(5)).is_ok(),
                "replay {k} under number 5 never got its turn"
            );
        }
    }

    #[test]
    fn a_request_served_across_a_restart_leaves_no_record_in_the_new_one() {
        let replay = Replay::default();
        let before = replay.restarts();
        replay.restart(Vec::new(), Duration::from_secs(1));
        assert!(!replay.recorded((7, 0), reply(1, 7, 1000), before));
        assert!(matches!(replay.claim((7, 0), 1).1, Seen::New));
        assert!(replay.recorded((7, 0), reply(1, 7, 1000), replay.restarts()));
        assert!(matches!(replay.claim((7, 0), 1).1, Seen::Done(..)));
    }

    #[test]
    fn the_least_recently_active_client_is_forgotten_past_the_bound() {
        let replay = Replay::default();
        for c in 0..=CLIENTS_MAX as u64 {
            assert!(replay.recorded((c, 0), reply(1, c, 1000 + c), 0));
        }
        assert_eq!(replay.to_forget(), vec![(0, 0)]);
        assert!(replay.to_forget().is_empty());
        assert_eq!(replay.records(), CLIENTS_MAX);
    }
}
