//! How one call drives the servers it touches: each server's part is a [`Share`], a
//! sequence of requests with a window in flight, advanced one request at a time; the
//! calling thread steps every share in turn, so a call over many servers keeps them all
//! busy without a thread each. Replies are received by the connections' reader threads
//! (into the caller's buffer for reads), so one thread sending is enough for small and
//! middling calls; a large call (at least [`THREADED_CALL_BYTES_MIN`]) spreads its
//! shares over at most [`TRANSFER_THREADS_MAX`] threads, the calling one included,
//! however many servers the file is striped over.

use crate::error::ClientError;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use weft_proto::ErrorCode;
use weft_rpc::PendingCall;

/// Most threads a call drives its servers from, the calling thread included.
pub const TRANSFER_THREADS_MAX: usize = 4;

/// Bytes from which a call over several servers uses helper threads: below, sending is
/// shorter than starting a thread.
pub const THREADED_CALL_BYTES_MIN: u64 = 16 << 20;

/// Helper threads started by calls so far in this process (tests and diagnostics).
static HELPERS_STARTED: AtomicU64 = AtomicU64::new(0);

/// Helper threads data calls started so far in this process (the calling threads not
/// counted): tests check that small calls start none and large ones a bounded number.
pub fn transfer_threads_started() -> u64 {
    HELPERS_STARTED.load(Ordering::Relaxed)
}

/// How transfers are cut and pipelined.
#[derive(Debug, Clone, Copy)]
pub struct TransferOptions {
    /// Largest payload of one request to one server.
    pub chunk_bytes: u64,
    /// Requests in flight per server.
    pub inflight_per_server: usize,
}

impl Default for TransferOptions {
    fn default() -> Self {
        TransferOptions {
            chunk_bytes: 4 << 20,
            inflight_per_server: 4,
        }
    }
}

/// Runs `work` again if a server refused it for want of a capability (one revoked
/// by a chmod since it was presented): the connection then presents a fresh one, which
/// the manager grants only if the caller still has the permission. Data requests are
/// idempotent (the same bytes to the same places), so repeating them is safe.
///
/// Up to [`CAPABILITY_RETRIES`] times: a server that forgets a connection's capabilities
/// to stay within its bound (`weft_rpc::capability::PER_CONNECTION_MAX`) may do so again
/// while threads sharing the connection present theirs, so one retry can meet a second
/// forgetting.
///
/// A write refused because its file is being migrated to a new layout (its objects
/// frozen, `weft_proto::msg::migrate_step::FROZEN_MARK`) waits, for at most
/// [`FROZEN_WAIT_MAX`], and runs again: the migration ends by thawing them, or by
/// fencing them (then this handle's requests are refused `Stale`: reopen).
pub(crate) fn retry_if_revoked<T>(work: impl Fn() -> Result<T, ClientError>) -> Result<T, ClientError> {
    let mut tries = 0;
    let mut frozen_since: Option<std::time::Instant> = None;
    loop {
        tries += 1;
        match work() {
            Err(e) if e.code() == ErrorCode::CapabilityRequired && tries <= CAPABILITY_RETRIES => {}
            Err(e) if is_frozen(&e) => {
                let since = *frozen_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= FROZEN_WAIT_MAX {
                    return Err(e);
                }
                std::thread::sleep(FROZEN_POLL);
            }
            other => return other,
        }
    }
}

/// Longest a write waits for a migration of its file (`retry_if_revoked`).
pub const FROZEN_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(120);
/// How often a write waiting for a migration tries again.
const FROZEN_POLL: std::time::Duration = std::time::Duration::from_millis(20);

fn is_frozen(e: &ClientError) -> bool {
    matches!(e, ClientError::Refused { code: ErrorCode::Busy, message }
        if message.contains(weft_proto::msg::migrate_step::FROZEN_MARK))
}

/// How many times a request refused for want of a capability is repeated.
const CAPABILITY_RETRIES: usize = 3;

/// One server's part of a call, advanced one request at a time.
pub(crate) trait Share {
    /// Sends the next request (first waiting for the oldest in flight when the window
    /// is full); false when nothing is left to send.
    fn step(&mut self) -> Result<bool, ClientError>;
    /// Waits for every request still in flight. An error ends the wait with the failed
    /// call taken off the window (calling again waits for the rest).
    fn finish(&mut self) -> Result<(), ClientError>;
}

/// Threads for a call of `bytes` over `shares` servers.
fn threads_for(shares: usize, bytes: u64) -> usize {
    if shares <= 1 || bytes < THREADED_CALL_BYTES_MIN {
        return 1;
    }
    let by_size = (bytes / THREADED_CALL_BYTES_MIN) as usize + 1;
    shares.min(TRANSFER_THREADS_MAX).min(by_size).max(1)
}

/// Runs the `count` shares `make` builds (share `i` for `i` in `0..count`) for a call
/// of `bytes`: all from the calling thread, or for a large call spread over at most
/// [`TRANSFER_THREADS_MAX`] threads (share `i` on thread `i mod threads`). Returns the
/// first error. A call a server refused for want of a capability (one revoked since
/// its connection presented it) runs once more, see [`retry_if_revoked`].
pub(crate) fn drive<'s, S: Share>(
    count: usize,
    bytes: u64,
    make: impl Fn(usize) -> Result<S, ClientError> + Sync + 's,
) -> Result<(), ClientError> {
    retry_if_revoked(|| drive_once(count, bytes, &make))
}

fn drive_once<'s, S: Share>(
    count: usize,
    bytes: u64,
    make: &(impl Fn(usize) -> Result<S, ClientError> + Sync + 's),
) -> Result<(), ClientError> {
    let threads = threads_for(count, bytes);
    if threads <= 1 {
        return drive_group((0..count).collect(), make);
    }
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads)
            .map(|t| {
                HELPERS_STARTED.fetch_add(1, Ordering::Relaxed);
                scope.spawn(move || drive_group((t..count).step_by(threads).collect(), make))
            })
            .collect();
        let mut first_error = drive_group((0..count).step_by(threads).collect(), make).err();
        for h in helpers {
            if let Err(e) = h.join().expect("transfer thread panicked") {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    })
}

/// Steps the shares `indices` round robin from this thread until every one has sent
/// all its requests, then waits for what is in flight.
fn drive_group<S: Share>(
    indices: Vec<usize>,
    make: &(impl Fn(usize) -> Result<S, ClientError> + Sync),
) -> Result<(), ClientError> {
    let mut shares: Vec<S> = indices.into_iter().map(make).collect::<Result<_, _>>()?;
    let outcome = step_all(&mut shares);
    if outcome
        .as_ref()
        .is_err_and(|e| e.code() == weft_proto::ErrorCode::CapabilityRequired)
    {
        // The other answers in flight are waited for, not dropped: a server's refusal
        // for want of a capability must be seen by its connection, which then presents
        // a fresh one when the call is repeated. A chmod or chown revokes the file's
        // capabilities on every server at once; dropped at the first refusal, the
        // others' answers left their connections trusting the revoked ones, and each
        // repetition got one more server right, so a call over more servers than its
        // repetitions failed (EACCES at the first O_DIRECT read or write of 1 MiB over 4
        // servers after a chown). Other errors (a timeout above all) return at once:
        // waiting for the rest would add a timeout per server stalled with the first.
        for share in &mut shares {
            // Each failed `finish` takes one call off the window.
            while share.finish().is_err() {}
        }
    }
    outcome
}

/// Steps every share until all have sent their requests, then waits for them.
fn step_all<S: Share>(shares: &mut [S]) -> Result<(), ClientError> {
    let mut active: Vec<usize> = (0..shares.len()).collect();
    while !active.is_empty() {
        let mut still = Vec::with_capacity(active.len());
        for &i in &active {
            if shares[i].step()? {
                still.push(i);
            }
        }
        active = still;
    }
    shares.iter_mut().try_for_each(|s| s.finish())
}

/// A [`Share`] made of a sequence of requests: `next` sends the next one (or says
/// there is none) and returns its pending call with what `done` needs to check its
/// reply; at most `inflight` are in flight.
pub(crate) struct Pipeline<'c, T, N, D> {
    next: N,
    done: D,
    window: VecDeque<(PendingCall<'c>, T)>,
    inflight: usize,
}

impl<'c, T, N, D> Pipeline<'c, T, N, D>
where
    N: FnMut() -> Result<Option<(PendingCall<'c>, T)>, ClientError>,
    D: FnMut(PendingCall<'c>, T) -> Result<(), ClientError>,
{
    pub(crate) fn new(inflight: usize, next: N, done: D) -> Self {
        Pipeline {
            next,
            done,
            window: VecDeque::new(),
            inflight: inflight.max(1),
        }
    }
}

impl<'c, T, N, D> Share for Pipeline<'c, T, N, D>
where
    N: FnMut() -> Result<Option<(PendingCall<'c>, T)>, ClientError>,
    D: FnMut(PendingCall<'c>, T) -> Result<(), ClientError>,
{
    fn step(&mut self) -> Result<bool, ClientError> {
        if self.window.len() >= self.inflight {
            let (call, what) = self.window.pop_front().expect("the window is full");
            (self.done)(call, what)?;
        }
        match (self.next)()? {
            Some(sent) => {
                self.window.push_back(sent);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn finish(&mut self) -> Result<(), ClientError> {
        while let Some((call, what)) = self.window.pop_front() {
            (self.done)(call, what)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_calls_stay_on_the_calling_thread_and_large_ones_are_bounded() {
        assert_eq!(threads_for(1, u64::MAX), 1);
        assert_eq!(threads_for(500, 1 << 20), 1);
        assert_eq!(threads_for(500, THREADED_CALL_BYTES_MIN - 1), 1);
        assert_eq!(threads_for(500, THREADED_CALL_BYTES_MIN), 2);
        assert_eq!(threads_for(500, u64::MAX), TRANSFER_THREADS_MAX);
        assert_eq!(threads_for(3, u64::MAX), 3);
    }
}
