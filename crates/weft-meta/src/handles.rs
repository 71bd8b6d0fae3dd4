//! The manager's record of the opens it granted: which user holds which inode open
//! for which rights, as the capabilities it granted after an open's permission check
//! say. A MUNGE-verified user's handle-based request (`SetAttr { by_handle }`: an
//! ftruncate, or a write dropping setuid) and a read of a removed file waiting for the
//! purge are honoured only against this record, never on the client's word.
//!
//! A record lives as long as the capability it came from: a client renews its
//! capabilities before they expire while it uses the file, and each renewal is checked
//! and recorded anew. A chmod or chown forgets the inode's records, as it revokes the
//! capabilities. In memory only: after a restart clients ask again, and are checked
//! again.

use std::collections::HashMap;
use std::sync::Mutex;
use weft_layout::InodeId;

/// Most (inode, user, right) records kept (some 10 MiB); past this, expired ones go,
/// and if that is not enough a grant is not recorded (the user's handle-based requests
/// on that file are then checked against the mode, as a path-based one is).
pub const HANDLES_MAX: usize = 262_144;

/// (inode, uid, single right) -> expiry of the capability that recorded it (Unix ms).
#[derive(Default)]
pub struct Handles {
    granted: Mutex<HashMap<(InodeId, u32, u8), u64>>,
}

impl Handles {
    /// `uid` was granted `rights` on `inode` until `expiry_ms` (Unix ms).
    pub fn record(&self, inode: InodeId, uid: u32, rights: u8, expiry_ms: u64, now_ms: u64) {
        let mut granted = self.granted.lock().unwrap_or_else(|p| p.into_inner());
        if granted.len() + 2 > HANDLES_MAX {
            granted.retain(|_, until| *until > now_ms);
            if granted.len() + 2 > HANDLES_MAX {
                return;
            }
        }
        for right in single_rights(rights) {
            let until = granted.entry((inode, uid, right)).or_insert(0);
            *until = (*until).max(expiry_ms);
        }
    }

    /// Whether `uid` holds every right of `rights` on `inode` now.
    pub fn holds(&self, inode: InodeId, uid: u32, rights: u8, now_ms: u64) -> bool {
        let granted = self.granted.lock().unwrap_or_else(|p| p.into_inner());
        rights != 0
            && single_rights(rights).all(|right| {
                granted
                    .get(&(inode, uid, right))
                    .is_some_and(|until| *until > now_ms)
            })
    }

    /// Forgets every record of `inode` (its permissions changed).
    pub fn forget(&self, inode: InodeId) {
        let mut granted = self.granted.lock().unwrap_or_else(|p| p.into_inner());
        granted.retain(|(i, _, _), _| *i != inode);
    }
}

fn single_rights(rights: u8) -> impl Iterator<Item = u8> {
    (0..8)
        .map(|bit| 1u8 << bit)
        .filter(move |right| rights & right != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_holds_for_its_user_inode_rights_and_lifetime_only() {
        let handles = Handles::default();
        let (read, write) = (1, 2);
        handles.record(InodeId(7), 1000, read | write, 2_000, 1_000);
        assert!(handles.holds(InodeId(7), 1000, write, 1_500));
        assert!(handles.holds(InodeId(7), 1000, read | write, 1_500));
        assert!(!handles.holds(InodeId(7), 1001, write, 1_500), "another user");
        assert!(!handles.holds(InodeId(8), 1000, write, 1_500), "another inode");
        assert!(!handles.holds(InodeId(7), 1000, write, 2_000), "expired");
        assert!(!handles.holds(InodeId(7), 1000, 0, 1_500), "no right asked");
        handles.record(InodeId(9), 1000, read, 2_000, 1_000);
        assert!(
            !handles.holds(InodeId(9), 1000, read | write, 1_500),
            "a right not granted"
        );
        handles.forget(InodeId(7));
        assert!(!handles.holds(InodeId(7), 1000, read, 1_500), "forgotten");
        assert!(handles.holds(InodeId(9), 1000, read, 1_500));
    }
}
