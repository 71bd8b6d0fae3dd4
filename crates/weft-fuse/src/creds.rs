//! Who is calling: each request acts with the calling process's uid, gid and
//! supplementary groups, so that the metadata manager checks permissions as it would
//! for that user's own client. One `Client` per credential, sharing connections.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use weft_client::{Client, Cred};

/// Distinct credentials remembered; past this the table starts over (a client per
/// credential is only an `Arc` and a few maps: rebuilding is cheap).
const CREDS_CACHED_MAX: usize = 1024;

/// Supplementary groups read from /proc per request, at most (as `Cred` carries).
const GROUPS_MAX: usize = weft_proto::GROUPS_MAX;

/// How long the supplementary groups read for a process are used again for its next
/// requests. The kernel checks every access with the caller's current credentials
/// first (`default_permissions`); this only spares a /proc read per request, as the
/// attribute cache spares a getattr. A process that changed its groups (setgroups) is
/// seen with the new ones by the manager after this long.
const GROUPS_KEPT: Duration = Duration::from_secs(1);

/// Processes whose groups are kept, at most; past this the table starts over.
const GROUPS_KEPT_MAX: usize = 4096;

/// uid, gid and supplementary groups.
type CredKey = (u32, u32, Vec<u32>);

/// A process (pid, uid, gid): a pid reused under another uid or gid is another key.
type CallerKey = (u32, u32, u32);

pub struct Clients {
    base: Client,
    by_cred: Mutex<HashMap<CredKey, Client>>,
    /// Groups read from /proc lately, with when they were read.
    groups: Mutex<HashMap<CallerKey, (Instant, Vec<u32>)>>,
}

impl Clients {
    pub fn new(base: Client) -> Clients {
        Clients {
            base,
            by_cred: Mutex::new(HashMap::new()),
            groups: Mutex::new(HashMap::new()),
        }
    }

    /// The mount's own client (its owner's credentials), for what no caller asks.
    pub fn base(&self) -> Client {
        self.base.clone()
    }

    /// A client acting as the process `pid` running as `uid`/`gid`.
    pub fn for_caller(&self, uid: u32, gid: u32, pid: u32) -> Client {
        // FUSE passes uid and gid only; the supplementary groups come from /proc. Root
        // passes every check, so its groups do not matter.
        let groups = if uid == 0 {
            Vec::new()
        } else {
            self.groups_kept(uid, gid, pid)
        };
        let key = (uid, gid, groups);
        let mut table = self.by_cred.lock().expect("credential table poisoned");
        if let Some(client) = table.get(&key) {
            return client.clone();
        }
        if table.len() >= CREDS_CACHED_MAX {
            table.clear();
        }
        let client = self.base.with_cred(Cred {
            uid: key.0,
            gid: key.1,
            groups: key.2.clone(),
        });
        table.insert(key, client.clone());
        client
    }

    /// The groups of `pid`, read from /proc at most once per [`GROUPS_KEPT`].
    fn groups_kept(&self, uid: u32, gid: u32, pid: u32) -> Vec<u32> {
        let key = (pid, uid, gid);
        let now = Instant::now();
        if let Some((read, groups)) = self.groups.lock().expect("groups poisoned").get(&key) {
            if now.duration_since(*read) < GROUPS_KEPT {
                return groups.clone();
            }
        }
        let groups = groups_of(pid);
        let mut kept = self.groups.lock().expect("groups poisoned");
        if kept.len() >= GROUPS_KEPT_MAX {
            kept.retain(|_, (read, _)| now.duration_since(*read) < GROUPS_KEPT);
            if kept.len() >= GROUPS_KEPT_MAX {
                kept.clear();
            }
        }
        kept.insert(key, (now, groups.clone()));
        groups
    }
}

/// The supplementary groups of process `pid` (empty if it is gone or unknown: the
/// kernel, with `default_permissions`, has already checked its full credentials).
fn groups_of(pid: u32) -> Vec<u32> {
    if pid == 0 {
        return Vec::new();
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    parse_groups(&status)
}

fn parse_groups(status: &str) -> Vec<u32> {
    let Some(line) = status.lines().find_map(|l| l.strip_prefix("Groups:")) else {
        return Vec::new();
    };
    let mut groups: Vec<u32> = line
        .split_whitespace()
        .filter_map(|g| g.parse().ok())
        .take(GROUPS_MAX)
        .collect();
    groups.sort_unstable();
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_come_from_proc_status() {
        let status = "Name:\tsh\nUid:\t1000\t1000\t1000\t1000\nGroups:\t27 4 1000 \nVmPeak:\t1 kB\n";
        assert_eq!(parse_groups(status), vec![4, 27, 1000]);
        assert!(parse_groups("Groups:\t\n").is_empty());
        assert!(parse_groups("Name:\tx\n").is_empty());
        // Our own process is readable.
        let own = groups_of(std::process::id());
        assert!(own.len() <= GROUPS_MAX);
    }
}
