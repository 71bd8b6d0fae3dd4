//! Tracked namespace changes (`Request::Tracked`): each answered once, and answered
//! again from the store when a client replays it after a restart (see `crate::replay`).

use super::*;

impl MetaService {
    /// Loads the records of tracked requests; with `window` (a start that may have lost
    /// acknowledged operations: a commit interval above 0) holds the replay window
    /// (see `replay.rs`).
    pub fn start_replay(&self, window: Option<Duration>) -> Result<(), WireError> {
        let records = self.store.replies()?;
        self.replay.start(records, window);
        Ok(())
    }

    /// Acts as a restarted manager whenever the store loses acknowledged operations (a
    /// disk error made it reopen its database without its non-durable commits), before
    /// any other operation reaches the reopened store, in this order: `hand_out` is
    /// given a new incarnation, which every handshake must give from then on, and from
    /// which on no reply may reach a connection of before (a request served across the
    /// loss is answered from the state it lost); the record of tracked requests is
    /// reloaded from the reopened store and the replay window opens for `window`; then
    /// `close` closes every connection, so that clients find the new epoch and replay
    /// exactly what was lost (their replays find the window ready). `serving` tells the
    /// incarnation of the connection a request came on (weft-rpc's
    /// `serving_incarnation`): a tracked request that came before the restart is refused
    /// (its client asks again on a new connection).
    pub fn restart_on_loss(
        self: &Arc<Self>,
        window: Duration,
        new_incarnation: fn() -> u64,
        serving: fn() -> Option<u64>,
        hand_out: Arc<dyn Fn(u64) + Send + Sync>,
        close: Arc<dyn Fn() + Send + Sync>,
    ) {
        let _ = self.serving.set(serving);
        let service = Arc::downgrade(self);
        self.store.on_loss(Box::new(move |records| {
            let Some(service) = service.upgrade() else { return };
            let incarnation = new_incarnation();
            hand_out(incarnation);
            service.set_incarnation(incarnation);
            service.feed.new_epoch();
            service.replay.restart(records, window);
            eprintln!(
                "weftd meta: new incarnation {incarnation:x}: every connection closed, clients replay what they were answered for and was lost"
            );
            close();
        }));
    }

    /// Whether the replay window after the start is still open.
    pub fn replay_window_open(&self) -> bool {
        self.replay.window_open()
    }

    /// A `Tracked` request (see `replay.rs`): answered from its record if it was done,
    /// else done, with its answer recorded in its own transaction.
    pub(super) fn tracked(&self, caller: &Caller, tracked: Request) -> Result<Response, WireError> {
        let Request::Tracked {
            client,
            slot,
            xid,
            replay,
            made,
            request,
        } = tracked
        else {
            unreachable!("tracked() is given Tracked requests");
        };
        // Both before anything else: a loss (and the restart it makes) after these is
        // noticed (`replies::fence`, `Replay::recorded`).
        let ((restarts, before), losses) = self.store.losses_seen(|| {
            let now = self.incarnation.load(Ordering::Relaxed);
            let came_on = self.serving.get().and_then(|serving| serving());
            (self.replay.restarts(), came_on.is_some_and(|c| c != now))
        });
        if before {
            // Its connection is of the incarnation before a restart: the state it was
            // sent against is gone, and its reply would be dropped.
            return Err(crate::store::replies::acted_restarted());
        }
        if replay == 0 {
            self.replay.wait_open();
        }
        let answer = |seq: u64, response: Response| {
            Ok(Response::Tracked {
                seq,
                durable_seq: self.store.commit_state().durable_seq,
                epoch: self.incarnation.load(Ordering::Relaxed),
                response: Box::new(response),
            })
        };
        let key = (client, slot);
        let (_hold, seen) = self.replay.claim(key, xid);
        match seen {
            crate::replay::Seen::Done(seq, body) => {
                let response = match (crate::replay::decode_reply(&body)?, &*request) {
                    // The capability is not recorded: the client asks at its first write
                    // (and, with no grant, has no stamp).
                    (Response::Made { attr, parent }, Request::CreateGranted { .. }) => {
                        Response::MadeGranted {
                            attr,
                            parent,
                            capability: None,
                        }
                    }
                    (Response::Made { attr, parent }, Request::CreateStamped { .. }) => {
                        Response::MadeStamped {
                            attr,
                            parent,
                            capability: None,
                            stamp: 0,
                        }
                    }
                    (response, _) => response,
                };
                return answer(seq, response);
            }
            crate::replay::Seen::Superseded if replay > 0 => return answer(0, Response::Done),
            crate::replay::Seen::Superseded => {
                return Err(WireError::new(
                    ErrorCode::Stale,
                    format!("request {xid} of client {client:x} slot {slot} was overtaken by a later one"),
                ))
            }
            crate::replay::Seen::New => {}
        }
        if replay > 0 {
            self.replay.turn(client, replay);
        }
        // A client's first tracked request commits durably before it is answered: its
        // record must survive a crash for the next start's replay window to wait for it
        // (a client whose every record a crash undid would not be expected, and its
        // replays would come after others had seen the namespace without them).
        let first_of_client = !self.replay.knows(client);
        crate::store::replies::track(crate::store::replies::Tracking {
            client,
            slot,
            xid,
            reuse: made.map(|attr| (attr.inode, attr.layout)),
            reply_of: crate::replay::reply_of(&request),
            forget: self.replay.to_forget(),
            recorded: None,
            losses,
        });
        let result = self.serve(caller, *request);
        let tracking = crate::store::replies::untrack();
        if replay > 0 {
            self.replay.turn_over(client);
        }
        let seq = match tracking.and_then(|t| t.recorded) {
            Some(reply) => {
                let seq = reply.seq;
                if !self.replay.recorded(key, reply, restarts) {
                    return Err(crate::store::replies::acted_restarted());
                }
                seq
            }
            None => 0,
        };
        // Served across a loss, its answer (an error too: `no entry` for what the loss
        // took) tells of a state the client must not see; the connection it came on is
        // of the old incarnation, so the client never hears this and asks again.
        if self.replay.restarts() != restarts {
            return Err(crate::store::replies::acted_restarted());
        }
        let response = result?;
        if first_of_client && seq > 0 {
            self.store.commit()?;
        }
        answer(seq, response)
    }
}
