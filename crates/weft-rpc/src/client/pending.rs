//! A call sent and not yet answered (`PendingCall`): waiting for its reply (leading
//! the reading when asked), its timeout, and forgetting it when dropped unanswered.

use super::waiters::{Delivery, Notice, SinkReply};
use super::{CallReply, Connection};
use crate::error::RpcError;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Instant;
use weft_proto::ErrorCode;

/// A request sent and not yet answered.
pub struct PendingCall<'a> {
    pub(super) connection: &'a Connection,
    pub(super) id: u64,
    pub(super) receiver: Receiver<Notice>,
    /// The call has a sink and has not been answered yet: dropping it must make sure
    /// the thread reading its reply is done with the sink's memory.
    pub(super) sink_outstanding: bool,
    /// The inode whose capability the request relied on: forgotten when the server
    /// refuses it, so that the next request presents a fresh one.
    pub(super) capability_of: Option<weft_layout::InodeId>,
    /// Sent right behind its capability's present, unanswered (see
    /// `Connection::send_presenting`).
    pub(super) behind_present: bool,
}

impl PendingCall<'_> {
    /// Waits for the answer, at most the request timeout.
    pub fn wait(self) -> Result<CallReply, RpcError> {
        let delivery = self.wait_delivery()?;
        Ok((delivery.response, delivery.data.unwrap_or_default()))
    }

    /// Waits for the answer to a call made with `send_into`.
    pub fn wait_sink(self) -> Result<SinkReply, RpcError> {
        let delivery = self.wait_delivery()?;
        Ok(match delivery.data {
            None => SinkReply::Filled(delivery.response),
            Some(data) => SinkReply::Other(delivery.response, data),
        })
    }

    pub(super) fn wait_delivery(self) -> Result<Delivery, RpcError> {
        let c = self.connection;
        let inode = self.capability_of;
        let behind_present = self.behind_present;
        let delivery = self.wait_delivery_raw();
        if let (Some(inode), Err(RpcError::Remote { error, .. })) = (inode, &delivery) {
            if error.code == ErrorCode::CapabilityRequired {
                c.capability_refused(inode);
                if behind_present {
                    c.presents_unordered.store(true, Ordering::Relaxed);
                }
            }
        }
        delivery
    }

    pub(super) fn wait_delivery_raw(mut self) -> Result<Delivery, RpcError> {
        let c = self.connection;
        let deadline = Instant::now() + c.timeouts.request;
        loop {
            // Read the connection ourselves unless another thread does, or our answer
            // is on its way to us already (our waiter is gone from the table).
            let lead = {
                let mut table = c.pending.lock().unwrap();
                let vacant = !table.leader && table.broken.is_none();
                match table.waiters.get_mut(&self.id) {
                    Some(waiter) => {
                        waiter.waiting = true;
                        waiter.promoted = false;
                        let lead = vacant && !waiter.big;
                        if lead {
                            table.leader = true;
                        }
                        lead
                    }
                    None => {
                        // We may have been asked to lead: pass it on.
                        table.promote_next();
                        false
                    }
                }
            };
            if lead && c.lead(self.id, deadline).is_err() {
                return self.timed_out();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.receiver.recv_timeout(left) {
                Ok(Notice::Reply(reply)) => {
                    // Whoever read it has let go of the sink.
                    self.sink_outstanding = false;
                    return reply;
                }
                Ok(Notice::Lead) => {}
                Err(RecvTimeoutError::Timeout) => return self.timed_out(),
                Err(RecvTimeoutError::Disconnected) => {
                    self.sink_outstanding = false;
                    let reason = c
                        .pending
                        .lock()
                        .unwrap()
                        .broken
                        .clone()
                        .unwrap_or_else(|| "connection closed".into());
                    return Err(RpcError::Disconnected {
                        addr: c.addr.clone(),
                        reason,
                    });
                }
            }
        }
    }

    /// No answer within the request timeout.
    pub(super) fn timed_out(&mut self) -> Result<Delivery, RpcError> {
        let c = self.connection;
        if c.pending.lock().unwrap().forget(self.id) {
            self.sink_outstanding = false;
        }
        // Otherwise another thread is reading the answer into the sink: dropping `self`
        // waits for it. The request may still be done later (a hung server resumes):
        // the connection goes, so that the server sees it closed and drops such a write
        // rather than doing it after a newer one sent elsewhere.
        c.break_with("no answer within the request timeout");
        Err(RpcError::TimedOut {
            addr: c.addr.clone(),
            after_ms: c.timeouts.request.as_millis() as u64,
        })
    }
}

impl Drop for PendingCall<'_> {
    fn drop(&mut self) {
        if !self.sink_outstanding {
            return;
        }
        let c = self.connection;
        if c.pending.lock().unwrap().forget(self.id) {
            // The reader never took the sink; it will skip the late answer.
            return;
        }
        // Another thread is filling the sink: wait until it is done, breaking the
        // connection (which ends its read at once) if the server stalls mid-answer.
        let deadline = Instant::now() + c.timeouts.request;
        let mut broke = false;
        loop {
            let notice = if broke {
                self.receiver.recv().map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                self.receiver
                    .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            };
            match notice {
                Ok(Notice::Reply(_)) | Err(RecvTimeoutError::Disconnected) => return,
                // Not ours to act on any more: pass it on.
                Ok(Notice::Lead) => c.pending.lock().unwrap().promote_next(),
                Err(RecvTimeoutError::Timeout) => {
                    c.break_with("a reply stalled while its data was being received");
                    broke = true;
                }
            }
        }
    }
}
