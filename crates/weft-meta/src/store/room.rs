//! The database file's room, allocated ahead: its blocks, and some past its end, are
//! held by the file (fallocate) so that a commit writes only into blocks it has.
//!
//! Why: redb keeps the pages of non-durable commits in memory and writes them at the
//! next durable commit, into pages it may just have added to the file (a length change,
//! no blocks yet). On a full disk that write fails (`ENOSPC`) and the store reopens
//! without the operations acknowledged since the last durable commit. Clients that are
//! still there replay them, but one that ended in between (a failed `weft put` that
//! removed its hidden file and exited) is nobody's to replay (hostile_conn's full-disk
//! attack found the file back). With the blocks held ahead, the durable commit needs no
//! new room: the headroom (half the manager's reserve of its file system, at most
//! 1 MiB, as the reserve file) covers what the operations of one interval add.
//!
//! After every durable commit the store asks again (`keep`): a stat of the file; only
//! when its length changed (redb grew or shrank it) are blocks allocated up to the new
//! length plus the headroom. On a full disk that fails and is tried again at most every
//! `RETRY`, keeping what the file holds. File systems without fallocate (some network
//! and FUSE ones) keep the old behaviour: the first commit that finds no room fails.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The test hook that turns the room off (see `Room::new`).
const NO_ROOM_VARIABLE: &str = "WEFT_FAULT_NO_ROOM";

/// How long after a failed allocation (a full disk) the next durable commit tries again.
const RETRY: Duration = Duration::from_millis(100);

/// See the module comment.
pub(super) struct Room {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The file's length when its blocks were last allocated ahead of it.
    kept_len: Option<u64>,
    /// No new try before this (after a failure).
    retry_at: Option<Instant>,
    /// The file system refuses fallocate: nothing more to try.
    unsupported: bool,
}

impl Room {
    /// The room of the database file at `path`; nothing is allocated before `keep`.
    /// The test hook `WEFT_FAULT_NO_ROOM=1` holds none, as a file system without
    /// fallocate, so that tests can still make a commit fail on a full disk.
    pub(super) fn new(path: PathBuf) -> Room {
        let state = State {
            unsupported: std::env::var_os(NO_ROOM_VARIABLE).is_some_and(|v| v == "1"),
            ..State::default()
        };
        Room {
            path,
            state: Mutex::new(state),
        }
    }

    /// Allocates the file's blocks up to its length plus the headroom if its length
    /// changed since the last success (see the module comment).
    pub(super) fn keep(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.unsupported || state.retry_at.is_some_and(|t| Instant::now() < t) {
            return;
        }
        let Ok(len) = std::fs::metadata(&self.path).map(|m| m.len()) else {
            return;
        };
        if state.kept_len == Some(len) {
            return;
        }
        match self.allocate(len) {
            Ok(()) => {
                state.kept_len = Some(len);
                state.retry_at = None;
            }
            Err(e) if is_unsupported(&e) => state.unsupported = true,
            Err(_) => state.retry_at = Some(Instant::now() + RETRY),
        }
    }

    /// Blocks for `[0, len)` (the holes redb's growth left) and then for the headroom
    /// past it, each on its own so that a full disk still fills the holes.
    fn allocate(&self, len: u64) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let directory = self.path.parent().filter(|d| !d.as_os_str().is_empty());
        let (_, total) = super::file_system_space(directory.unwrap_or(std::path::Path::new(".")))?;
        let headroom = (weft_proto::space::meta_reserve_bytes(total) / 2).min(super::RESERVE_FILE_BYTES_MAX);
        // Opened afresh each time: a held descriptor would pin the blocks of a file
        // put in the database's place (a restore) until the process ends.
        let file = std::fs::OpenOptions::new().write(true).open(&self.path)?;
        for (offset, bytes) in [(0, len), (len, headroom)] {
            if bytes == 0 {
                continue;
            }
            // SAFETY: fallocate on an open descriptor of ours; KEEP_SIZE leaves the
            // file's length (redb's) as it is.
            let done = unsafe {
                libc::fallocate(
                    file.as_raw_fd(),
                    libc::FALLOC_FL_KEEP_SIZE,
                    offset as libc::off_t,
                    bytes as libc::off_t,
                )
            };
            if done != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// Bytes of blocks the file holds, for tests.
    #[cfg(test)]
    fn held_bytes(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&self.path).map_or(0, |m| m.blocks() * 512)
    }
}

fn is_unsupported(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparse_file_gets_its_holes_and_headroom_allocated_once_per_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(1 << 20).unwrap();
        let room = Room::new(path.clone());
        assert_eq!(room.held_bytes(), 0, "a new sparse file holds blocks");
        room.keep();
        let held = room.held_bytes();
        if room.state.lock().unwrap().unsupported {
            return; // This file system has no fallocate: nothing to check.
        }
        // The whole length, and some headroom past it.
        assert!(held > 1 << 20, "held {held} bytes of a 1 MiB file");
        // Grown by redb: allocated again, past the new end.
        file.set_len(3 << 20).unwrap();
        room.keep();
        assert!(
            room.held_bytes() > 3 << 20,
            "held {} after growth",
            room.held_bytes()
        );
    }
}
