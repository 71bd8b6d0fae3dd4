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
    /// disk error made it reopen its database without its non-durable commits): the
    /// record of tracked requests is reloaded from the reopened store, the replay window
    /// opens for `window`, and `announce` is given a new incarnation, which it must
    /// hand out in every handshake from then on and close every connection, so that
    /// clients find a new epoch and replay exactly what was lost. All of it before any
    /// other operation reaches the reopened store.
    pub fn restart_on_loss(
        self: &Arc<Self>,
        window: Duration,
        new_incarnation: fn() -> u64,
        announce: Arc<dyn Fn(u64) + Send + Sync>,
    ) {
        let service = Arc::downgrade(self);
        self.store.on_loss(Box::new(move |records| {
            let Some(service) = service.upgrade() else { return };
            service.replay.restart(records, window);
            let incarnation = new_incarnation();
            service.set_incarnation(incarnation);
            eprintln!(
                "weftd meta: new incarnation {incarnation:x}: every connection closed, clients replay what they were answered for and was lost"
            );
            announce(incarnation);
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
        let losses = self.store.losses();
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
        let response = result?;
        let seq = match tracking.and_then(|t| t.recorded) {
            Some(reply) => {
                let seq = reply.seq;
                self.replay.recorded(key, reply);
                seq
            }
            None => 0,
        };
        if first_of_client && seq > 0 {
            self.store.commit()?;
        }
        answer(seq, response)
    }
}
