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
