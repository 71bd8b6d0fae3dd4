//! Servers of this process found not answering lately (a handshake step or a liveness
//! probe got no answer in time): for `SUSPECT_FOR`, a new connection to one is first
//! probed with a short wait (`RECHECK_WAIT`) and fails at once if that gets no answer,
//! rather than each waiting out a handshake. A mount's `ls -l` stats entry after entry,
//! each a new connection to a stopped io server: 10 s each before. A server that
//! answers is used at once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a server that did not answer is not asked again.
pub const SUSPECT_FOR: Duration = Duration::from_secs(5);

/// How long a new connection to a suspect waits for its probe's answer.
pub const RECHECK_WAIT: Duration = Duration::from_millis(500);

/// Servers remembered at most (a table this full starts over).
const SUSPECTS_MAX: usize = 1024;

static SUSPECTS: Mutex<Option<HashMap<String, Instant>>> = Mutex::new(None);

/// `addr` did not answer in time, now.
pub(super) fn suspect(addr: &str) {
    let mut table = SUSPECTS.lock().unwrap_or_else(|e| e.into_inner());
    let map = table.get_or_insert_with(HashMap::new);
    if map.len() >= SUSPECTS_MAX {
        map.clear();
    }
    map.insert(addr.to_owned(), Instant::now());
}

/// How long ago `addr` did not answer, if within `SUSPECT_FOR`.
pub(super) fn suspected(addr: &str) -> Option<Duration> {
    let mut table = SUSPECTS.lock().unwrap_or_else(|e| e.into_inner());
    let map = table.as_mut()?;
    let ago = map.get(addr)?.elapsed();
    if ago < SUSPECT_FOR {
        return Some(ago);
    }
    map.remove(addr);
    None
}

/// `addr` answered a handshake.
pub(super) fn cleared(addr: &str) {
    let mut table = SUSPECTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(map) = table.as_mut() {
        map.remove(addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suspect_is_remembered_until_cleared_or_its_time_is_up() {
        let addr = "127.0.0.1:1 (suspects test)";
        assert!(suspected(addr).is_none());
        suspect(addr);
        assert!(suspected(addr).is_some_and(|ago| ago < SUSPECT_FOR));
        cleared(addr);
        assert!(suspected(addr).is_none());
    }
}
