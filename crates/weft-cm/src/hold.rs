//! A migration's hold of a cached file (`CacheMigrate`, the manager's `weft migrate`
//! of a file in the cache tier): while it lasts, changes of the file here (writes,
//! truncates, punches) are refused `Busy` with `FROZEN_MARK`, which clients wait out as
//! they wait for frozen io objects; the hold waits for the changes under way, so once
//! it is taken and the file's dirty blocks are written back, the io objects hold every
//! byte this manager acknowledged. A hold is a lease: it lapses unless renewed (the
//! migrating client renews through the manager every 5 s), so a migration cut short
//! leaves nothing held for long.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use weft_layout::InodeId;
use weft_proto::msg::migrate_step::FROZEN_MARK;
use weft_proto::{ErrorCode, WireError};

/// How long a hold lasts unless renewed (as an io server's freeze).
pub const HOLD_LEASE: Duration = Duration::from_secs(30);
/// Most files held at once (each a migration under way at the manager, which allows
/// 1,024).
pub const HOLDS_MAX: usize = 4096;
/// Longest a hold waits for the changes under way to end.
const SETTLE_WAIT: Duration = Duration::from_secs(30);

struct Hold {
    epoch: u64,
    until: Instant,
}

#[derive(Default)]
struct State {
    held: HashMap<InodeId, Hold>,
    /// Changes under way, by file (an entry only while one runs).
    changing: HashMap<InodeId, usize>,
    next_epoch: u64,
}

impl State {
    /// Whether `inode` is held now (a lapsed hold is forgotten).
    fn held(&mut self, inode: InodeId) -> bool {
        match self.held.get(&inode) {
            Some(h) if h.until > Instant::now() => true,
            Some(_) => {
                self.held.remove(&inode);
                false
            }
            None => false,
        }
    }
}

/// The holds of one cache manager.
#[derive(Default)]
pub(crate) struct Holds {
    state: Mutex<State>,
    settled: Condvar,
}

/// A change of a file under way; ends when dropped.
pub(crate) struct Changing<'h> {
    holds: &'h Holds,
    inode: InodeId,
}

impl Drop for Changing<'_> {
    fn drop(&mut self) {
        let mut state = self.holds.state();
        if let Some(n) = state.changing.get_mut(&self.inode) {
            *n -= 1;
            if *n == 0 {
                state.changing.remove(&self.inode);
                self.holds.settled.notify_all();
            }
        }
    }
}

impl Holds {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a change of `inode`, or refuses it while a migration holds the file.
    pub fn begin_change(&self, inode: InodeId) -> Result<Changing<'_>, WireError> {
        let mut state = self.state();
        if !state.held.is_empty() && state.held(inode) {
            return Err(WireError::new(
                ErrorCode::Busy,
                format!("inode {inode} {FROZEN_MARK}: its changes wait"),
            ));
        }
        *state.changing.entry(inode).or_insert(0) += 1;
        Ok(Changing { holds: self, inode })
    }

    /// Holds `inode` (or renews its hold) and waits until no change of it is under
    /// way: the hold's epoch, the same as the last one unless that lapsed.
    pub fn hold(&self, inode: InodeId) -> Result<u64, WireError> {
        let mut state = self.state();
        let until = Instant::now() + HOLD_LEASE;
        let epoch = if state.held(inode) {
            let hold = state.held.get_mut(&inode).expect("held");
            hold.until = until;
            hold.epoch
        } else {
            if state.held.len() >= HOLDS_MAX {
                let now = Instant::now();
                state.held.retain(|_, h| h.until > now);
                if state.held.len() >= HOLDS_MAX {
                    return Err(WireError::new(
                        ErrorCode::Busy,
                        format!("{HOLDS_MAX} cached files are being migrated here: try again later"),
                    ));
                }
            }
            state.next_epoch += 1;
            let epoch = state.next_epoch;
            state.held.insert(inode, Hold { epoch, until });
            epoch
        };
        let deadline = Instant::now() + SETTLE_WAIT;
        while state.changing.contains_key(&inode) {
            let now = Instant::now();
            if now >= deadline {
                return Err(WireError::new(
                    ErrorCode::Busy,
                    format!(
                        "inode {inode}: changes through this cache manager did not end within {} s",
                        SETTLE_WAIT.as_secs()
                    ),
                ));
            }
            state = self
                .settled
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(epoch)
    }

    /// Ends the hold of `inode` (if any).
    pub fn release(&self, inode: InodeId) {
        self.state().held.remove(&inode);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_hold_refuses_changes_until_released_and_keeps_its_epoch_when_renewed() {
        let holds = Holds::default();
        let inode = InodeId(7);
        let epoch = holds.hold(inode).unwrap();
        let refused = holds.begin_change(inode).err().expect("held");
        assert_eq!(refused.code, ErrorCode::Busy);
        assert!(refused.message.contains(FROZEN_MARK));
        // Another file is not held.
        drop(holds.begin_change(InodeId(8)).unwrap());
        assert_eq!(holds.hold(inode).unwrap(), epoch);
        holds.release(inode);
        drop(holds.begin_change(inode).unwrap());
        assert_ne!(holds.hold(inode).unwrap(), epoch);
    }

    #[test]
    fn a_hold_waits_for_the_changes_under_way() {
        let holds = Arc::new(Holds::default());
        let inode = InodeId(3);
        let change = holds.begin_change(inode).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let h = holds.clone();
        let t = std::thread::spawn(move || {
            let epoch = h.hold(inode);
            tx.send(()).unwrap();
            epoch
        });
        // The hold waits while the change runs.
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        drop(change);
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the hold ended its wait");
        assert!(t.join().unwrap().is_ok());
    }
}
