//! Append locks. A file's end is the largest logical end over all its objects, so an
//! appender must learn it from every server and write there before anyone else appends.
//! One server (the one holding the file's first stripe, which every client finds from
//! the layout alone) keeps a lock per file: the holder reads the extents, writes at the
//! end and unlocks. The lock is never waited for on the server (a worker thread is
//! never parked): a busy lock is answered `Busy` and the client tries again.
//!
//! A lock goes with the connection that took it: when the connection closes (the client
//! ended or crashed) its locks are released; a lock held longer than
//! [`APPEND_LOCK_HOLD_MAX`] (a hung client) may be taken over.

use crate::token::Tokens;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use weft_layout::InodeId;
use weft_proto::{ErrorCode, WireError};
use weft_rpc::ConnectionId;

/// Files whose append lock is held at once on one server.
pub const APPEND_LOCKS_MAX: usize = 65_536;
/// Longest a holder keeps a lock before another client may take it over. Longer than
/// any one append takes (a write of at most a frame, at the clients' 60 s timeout).
pub const APPEND_LOCK_HOLD_MAX: Duration = Duration::from_secs(90);

struct Holder {
    token: u64,
    connection: ConnectionId,
    since: Instant,
}

pub struct AppendLocks {
    held: Mutex<HashMap<InodeId, Holder>>,
    next_token: Tokens,
}

impl Default for AppendLocks {
    fn default() -> Self {
        AppendLocks {
            held: Mutex::new(HashMap::new()),
            next_token: Tokens::default(),
        }
    }
}

impl AppendLocks {
    /// Takes `inode`'s lock for `connection`, or `Busy` while someone holds it.
    pub fn lock(&self, connection: ConnectionId, inode: InodeId) -> Result<u64, WireError> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(holder) = held.get(&inode) {
            if holder.since.elapsed() < APPEND_LOCK_HOLD_MAX {
                return Err(WireError::new(
                    ErrorCode::Busy,
                    format!("the append lock of inode {inode} is held"),
                ));
            }
        }
        if held.len() >= APPEND_LOCKS_MAX && !held.contains_key(&inode) {
            held.retain(|_, h| h.since.elapsed() < APPEND_LOCK_HOLD_MAX);
            if held.len() >= APPEND_LOCKS_MAX {
                return Err(WireError::new(
                    ErrorCode::Busy,
                    format!("{APPEND_LOCKS_MAX} append locks are held on this server"),
                ));
            }
        }
        let token = self.next_token.next();
        held.insert(
            inode,
            Holder {
                token,
                connection,
                since: Instant::now(),
            },
        );
        Ok(token)
    }

    /// Releases the lock taken with `token`. A lock that lapsed and was taken over is
    /// left to its new holder, and the late unlock is told so.
    pub fn unlock(&self, inode: InodeId, token: u64) -> Result<(), WireError> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        match held.get(&inode) {
            Some(holder) if holder.token == token => {
                held.remove(&inode);
                Ok(())
            }
            _ => Err(WireError::new(
                ErrorCode::Stale,
                format!("append lock {token} of inode {inode} is not held (it lapsed)"),
            )),
        }
    }

    /// Releases every lock taken on `connection`.
    pub fn connection_closed(&self, connection: ConnectionId) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.retain(|_, h| h.connection != connection);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_until_unlock_or_disconnect() {
        let locks = AppendLocks::default();
        let (a, b) = (ConnectionId(1), ConnectionId(2));
        let file = InodeId(7);
        let token = locks.lock(a, file).unwrap();
        assert_eq!(locks.lock(b, file).unwrap_err().code, ErrorCode::Busy);
        // Another file is independent.
        let other = locks.lock(b, InodeId(8)).unwrap();
        // A wrong token releases nothing.
        assert_eq!(locks.unlock(file, token + 2).unwrap_err().code, ErrorCode::Stale);
        assert_eq!(locks.lock(b, file).unwrap_err().code, ErrorCode::Busy);
        locks.unlock(file, token).unwrap();
        let second = locks.lock(b, file).unwrap();
        assert_ne!(second, token);
        // b's connection goes: both its locks go with it.
        locks.connection_closed(b);
        locks.lock(a, file).unwrap();
        locks.lock(a, InodeId(8)).unwrap();
        assert_eq!(
            locks.unlock(InodeId(8), other).unwrap_err().code,
            ErrorCode::Stale
        );
    }

    /// Another connection that holds a lock of its own cannot release someone else's
    /// by trying the tokens near its own (an unlock needs no capability).
    #[test]
    fn a_token_tells_nothing_of_the_others() {
        let locks = AppendLocks::default();
        let (alice, bob) = (ConnectionId(1), ConnectionId(2));
        let (hers, his) = (InodeId(7), InodeId(8));
        locks.lock(alice, hers).unwrap();
        let own = locks.lock(bob, his).unwrap();
        for k in 1..=4096u64 {
            for guess in [own.wrapping_sub(k), own.wrapping_add(k)] {
                assert!(locks.unlock(hers, guess).is_err(), "released with {guess}");
            }
        }
        assert_eq!(locks.lock(bob, hers).unwrap_err().code, ErrorCode::Busy);
    }
}
