//! Whose identity the manager's requests act with. In `owner` mode (the default) it is
//! the user who owns the cluster key file: holding the key (proved by every
//! connection's handshake) is being that user, so a request's claimed uid and groups
//! are replaced by the owner's before the manager checks any permission.

use anyhow::{Context, Result};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use weft_proto::{Cred, GROUPS_MAX};

/// The credential of the user who owns `key_path`: their uid, primary group and
/// supplementary groups (this process's own when it runs as that user, else from the
/// user database; the key file's group if the user has no entry there).
pub fn key_owner(key_path: &Path) -> Result<Cred> {
    let meta = std::fs::metadata(key_path)
        .with_context(|| format!("finding the owner of the cluster key {}", key_path.display()))?;
    let uid = meta.uid();
    // SAFETY: no preconditions.
    if uid == unsafe { libc::geteuid() } {
        // SAFETY: getegid has no preconditions; getgroups writes at most `n` entries.
        let (gid, mut groups) = unsafe {
            let mut groups = vec![0 as libc::gid_t; GROUPS_MAX];
            let n = libc::getgroups(groups.len() as i32, groups.as_mut_ptr());
            groups.truncate(n.max(0) as usize);
            (libc::getegid(), groups)
        };
        groups.truncate(GROUPS_MAX);
        return Ok(Cred { uid, gid, groups });
    }
    Ok(lookup(uid).unwrap_or(Cred {
        uid,
        gid: meta.gid(),
        groups: Vec::new(),
    }))
}

/// A user's primary group and groups from the user database, if it knows `uid`.
fn lookup(uid: u32) -> Option<Cred> {
    // SAFETY: getpwuid_r fills `pwd` with pointers into `buf`, which outlives their use;
    // getgrouplist writes at most `count` entries.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut buf = vec![0 as libc::c_char; 16 * 1024];
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found);
        if rc != 0 || found.is_null() {
            return None;
        }
        let gid = pwd.pw_gid;
        let mut groups = vec![0 as libc::gid_t; GROUPS_MAX];
        let mut count = groups.len() as libc::c_int;
        if libc::getgrouplist(pwd.pw_name, gid, groups.as_mut_ptr(), &mut count) < 0 {
            // More groups than a credential carries: the first GROUPS_MAX.
            count = GROUPS_MAX as libc::c_int;
        }
        groups.truncate(count.max(0) as usize);
        Some(Cred { uid, gid, groups })
    }
}

/// Longest wait for `unmunge` to decode a credential.
const UNMUNGE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Credentials remembered against replay, at most.
const MUNGE_SEEN_MAX: usize = 65_536;

/// `munge` mode: decodes each connection's MUNGE credential with `unmunge` and
/// remembers the credentials it accepted until their TTL runs out, refusing a replay.
pub struct Munge {
    socket: Option<std::path::PathBuf>,
    trusted_uids: Vec<u32>,
    /// Credential text -> when its TTL ends.
    seen: std::sync::Mutex<std::collections::HashMap<Vec<u8>, std::time::Instant>>,
}

/// What a connection's MUNGE credential established.
#[derive(Debug, Clone)]
pub enum Verified {
    /// Requests act as this user, whatever they claim.
    As(Cred),
    /// A trusted uid (a root FUSE daemon): requests act with what they claim.
    Trusted,
    /// No valid credential: metadata requests are refused with this reason.
    Refused(String),
}

/// A connection's MUNGE verdict checked against its Unix-socket peer's user (`socket_uid`,
/// from SO_PEERCRED), where it has one: a credential of another user than the process
/// presenting it is refused (root's processes may present any: a mount's daemon acts
/// for its users).
pub fn same_user(verified: Verified, socket_uid: Option<u32>) -> Verified {
    match (verified, socket_uid) {
        (Verified::As(cred), Some(uid)) if uid != 0 && uid != cred.uid => Verified::Refused(format!(
            "munge credential refused: it is uid {}'s, but the process presenting it on the manager's socket is uid {uid}",
            cred.uid
        )),
        (verified, _) => verified,
    }
}

/// The message for a connection that brought no credential.
pub const MUNGE_REQUIRED: &str = "munge credential required: is munged running? (this cluster's metadata manager acts only with MUNGE-verified identities; set WEFT_MUNGE_SOCKET if munged listens elsewhere)";

impl Munge {
    pub fn new(socket: Option<std::path::PathBuf>, trusted_uids: Vec<u32>) -> Munge {
        Munge {
            socket,
            trusted_uids,
            seen: Default::default(),
        }
    }

    /// Decodes `credential` and says whom the connection's requests act as.
    pub fn verify(&self, credential: &[u8]) -> Verified {
        let now = std::time::Instant::now();
        {
            let mut seen = self.seen.lock().unwrap();
            seen.retain(|_, until| *until > now);
            if seen.contains_key(credential) {
                return Verified::Refused(
                    "munge credential refused: it was already used (replayed credential)".into(),
                );
            }
            if seen.len() >= MUNGE_SEEN_MAX {
                return Verified::Refused(format!(
                    "munge credential refused: {MUNGE_SEEN_MAX} credentials within their TTL already; retry later"
                ));
            }
        }
        let decoded = match self.unmunge(credential) {
            Ok(d) => d,
            Err(reason) => return Verified::Refused(format!("munge credential refused: {reason}")),
        };
        {
            let mut seen = self.seen.lock().unwrap();
            if seen.contains_key(credential) {
                return Verified::Refused(
                    "munge credential refused: it was already used (replayed credential)".into(),
                );
            }
            let ttl = std::time::Duration::from_secs(decoded.ttl_s.clamp(1, 24 * 3600));
            seen.insert(credential.to_vec(), now + ttl);
        }
        if self.trusted_uids.contains(&decoded.uid) {
            return Verified::Trusted;
        }
        Verified::As(with_groups(decoded.uid, decoded.gid))
    }

    fn unmunge(&self, credential: &[u8]) -> std::result::Result<Decoded, String> {
        use std::io::Write;
        let mut command = std::process::Command::new("unmunge");
        if let Some(socket) = &self.socket {
            command.arg("--socket").arg(socket);
        }
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run unmunge on the metadata manager: {e}"))?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        let written = stdin.write_all(credential);
        drop(stdin);
        // munged that does not answer costs a worker at most this long.
        let deadline = std::time::Instant::now() + UNMUNGE_WAIT;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(2))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "unmunge did not answer within {} s (is munged running on the metadata manager's host?)",
                        UNMUNGE_WAIT.as_secs()
                    ));
                }
            }
        }
        // The output is a few hundred bytes: the pipe held it while unmunge exited.
        let out = child
            .wait_with_output()
            .map_err(|e| format!("unmunge failed: {e}"))?;
        written.map_err(|e| format!("writing to unmunge: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_owned())
        };
        if !out.status.success() {
            let why =
                field("STATUS:").unwrap_or_else(|| String::from_utf8_lossy(&out.stderr).trim().to_owned());
            return Err(format!("unmunge: {why}"));
        }
        // "root (0)": the number in parentheses (or the whole value, if numeric).
        let number = |name: &str| -> std::result::Result<u32, String> {
            let v = field(name).ok_or_else(|| format!("unmunge printed no {name} line"))?;
            let n = match (v.rfind('('), v.rfind(')')) {
                (Some(a), Some(b)) if a < b => &v[a + 1..b],
                _ => v.as_str(),
            };
            n.trim()
                .parse()
                .map_err(|_| format!("unmunge printed {name} {v:?}"))
        };
        Ok(Decoded {
            uid: number("UID:")?,
            gid: number("GID:")?,
            ttl_s: field("TTL:").and_then(|v| v.parse().ok()).unwrap_or(300),
        })
    }
}

struct Decoded {
    uid: u32,
    gid: u32,
    ttl_s: u64,
}

/// `uid` acting with primary group `gid` and its supplementary groups from this host's
/// group database (MUNGE carries only uid and gid).
fn with_groups(uid: u32, gid: u32) -> Cred {
    let mut groups = lookup(uid)
        .filter(|c| c.gid == gid || c.groups.contains(&gid))
        .map(|c| c.groups)
        .unwrap_or_default();
    if !groups.contains(&gid) {
        groups.insert(0, gid);
    }
    groups.truncate(GROUPS_MAX);
    Cred { uid, gid, groups }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn as_uid(uid: u32) -> Verified {
        Verified::As(Cred {
            uid,
            gid: uid,
            groups: Vec::new(),
        })
    }

    /// On the manager's Unix socket the kernel names the presenting process's user:
    /// a credential of another user is refused (bob presenting alice's, captured), one's
    /// own passes, and root's processes (a mount's daemon) or TCP (no peer user) pass.
    #[test]
    fn a_munge_credential_must_be_the_socket_peers_own() {
        assert!(
            matches!(same_user(as_uid(1000), Some(1001)), Verified::Refused(r) if r.contains("uid 1001"))
        );
        assert!(matches!(same_user(as_uid(1000), Some(1000)), Verified::As(c) if c.uid == 1000));
        assert!(matches!(same_user(as_uid(1000), Some(0)), Verified::As(_)));
        assert!(matches!(same_user(as_uid(1000), None), Verified::As(_)));
        assert!(matches!(
            same_user(Verified::Trusted, Some(1001)),
            Verified::Trusted
        ));
    }
}
