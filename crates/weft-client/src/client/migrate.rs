//! Migration of a file to a new layout in place (`weft migrate`, `weft server
//! drain`): the file keeps its inode number, attributes and extended attributes; only
//! where its bytes live changes. How (the manager's side: weft-meta `service/migrate.rs`):
//!
//! 1. A hidden file is made beside it with the new layout (the manager places it, on
//!    active io servers only).
//! 2. `MigrateBegin`: the file's io servers freeze its objects; writers' writes wait
//!    (refused `Busy`, which `drive::retry_if_revoked` waits out), readers go on.
//! 3. The bytes are copied chunk by chunk through the client's own striped reads and
//!    writes (a chunk of zeros is left a hole), the freeze renewed as it goes; the new
//!    file is cut to the size, given the file's modification time and synced.
//! 4. `MigrateEnd`: the manager switches the layout atomically (see there); on any
//!    failure it is told to abandon instead, and either way the hidden file goes.
//!
//! Handles opened before the switch get `Stale` (reopen) from io servers whose object
//! changed; nothing they wrote is lost (their writes waited, then fail, unwritten).
//! A file in the cache tier is held by every cache manager first (its dirty blocks
//! written back, its changes waiting), so the copy reads every acknowledged byte; the
//! new file itself is never cached.

use super::{Client, CreateOptions};
use crate::error::{unexpected, ClientError};
use crate::path;
use std::time::{Duration, Instant};
use weft_layout::{Layout, LayoutRequest};
use weft_proto::msg::{Request, Response};
use weft_proto::{Attr, ErrorCode, FileKind, SetAttr, TimeSet};

/// Bytes copied per read and write.
pub const MIGRATE_CHUNK_BYTES: u64 = 4 << 20;
/// How often the freeze of the file's writes is renewed (its lease at the io servers
/// is 30 s).
const RENEW_EVERY: Duration = Duration::from_secs(5);

/// Test hook `WEFT_FAULT_MIGRATE_PAUSE_MS` (at most 1000): each chunk of the copy
/// waits that long after it was read, so that a test's writes surely race the copy.
fn pause_for_tests() -> Option<Duration> {
    static PAUSE: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
    *PAUSE.get_or_init(|| {
        std::env::var("WEFT_FAULT_MIGRATE_PAUSE_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(|ms| Duration::from_millis(ms.min(1000)))
    })
}

/// What a migration did.
#[derive(Debug, Clone)]
pub struct Migrated {
    /// The layout before and after (equal when the file had the layout asked for).
    pub old: Layout,
    pub new: Layout,
    /// Bytes copied (holes not counted).
    pub bytes: u64,
    /// The file's size.
    pub size: u64,
}

/// The layout request for a migration's new file: what `asked` sets, the rest from
/// `old` (its stripe size, count and redundancy; its servers are the manager's
/// choice), never cached.
pub fn migrate_request(old: &Layout, asked: &LayoutRequest) -> LayoutRequest {
    LayoutRequest {
        stripe_size_bytes: asked.stripe_size_bytes.or(Some(old.stripe_size_bytes)),
        stripe_count: asked.stripe_count.or(Some(old.servers.len() as u32)),
        first_server: asked.first_server,
        // The copy's target goes straight to the io servers whatever the directory's
        // default: the file keeps its own caching mode.
        cache: Some(weft_layout::CacheMode::None),
        redundancy: asked.redundancy.or(Some(old.redundancy())),
    }
}

/// Whether `old` already has every field `asked` sets (a stripe count of 0, "all io
/// servers", is not judged here) and no stale copy: a user's migration to it has
/// nothing to do. Asked for no first server, the new file's would be the manager's next
/// in turn, so comparing with the new file's layout would move a file laid out as asked.
fn has_asked_layout(old: &Layout, asked: &LayoutRequest) -> bool {
    asked.first_server.is_none()
        && asked.stripe_size_bytes.is_none_or(|s| s == old.stripe_size_bytes)
        && asked
            .stripe_count
            .is_none_or(|n| n != 0 && n as usize == old.servers.len())
        && asked.redundancy.is_none_or(|r| r == old.redundancy())
        && old.replication.stale.is_empty()
}

/// Longest a failed migration waits for an unreachable manager to remove its new file.
const TEMP_REMOVE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

impl Client {
    /// Migrates the regular file at `path` to the layout `asked` (fields left out: the
    /// file's own), keeping its inode; `progress` gets the bytes copied and the size.
    /// The new file is made beside it, hidden, for the copy.
    pub fn migrate_path(
        &self,
        path: &str,
        asked: &LayoutRequest,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Migrated, ClientError> {
        let attr = self.resolve(path)?;
        let (parent, name) = path::split(path, ErrorCode::IsDirectory)?;
        let parent = self.resolve(&parent).map_err(|e| e.context(path))?;
        self.migrate_attr(&attr, (parent.inode, name), asked, &[], progress)
            .map_err(|e| e.context(path))
    }

    /// Migrates file `attr` (see [`Client::migrate_path`]), making the new file in
    /// directory `place.0` under a hidden name from `place.1`. With `avoid`, the new
    /// layout must hold no piece on these io servers (a drain: they are marked
    /// draining, so the manager places nothing there), and a file with no piece there
    /// is left as it is.
    pub fn migrate_attr(
        &self,
        attr: &Attr,
        place: (weft_layout::InodeId, &str),
        asked: &LayoutRequest,
        avoid: &[weft_layout::ServerId],
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Migrated, ClientError> {
        let old = match (&attr.kind, &attr.layout) {
            (FileKind::File, Some(layout)) => layout.clone(),
            _ => {
                return Err(ClientError::refused(
                    ErrorCode::InvalidArgument,
                    "not a regular file: only files migrate",
                ))
            }
        };
        let unchanged = |old: Layout| Migrated {
            new: old.clone(),
            old,
            bytes: 0,
            size: 0,
        };
        if !avoid.is_empty() && !old.all_servers().iter().any(|s| avoid.contains(s)) {
            return Ok(unchanged(old));
        }
        if avoid.is_empty() && has_asked_layout(&old, asked) {
            return Ok(unchanged(old));
        }
        let (dir, name) = place;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name: String = name.chars().take(64).collect();
        let temp_name = format!(".{name}.weft-migrate-{}-{nanos:x}", std::process::id());
        let options = CreateOptions {
            mode: 0o600,
            layout: migrate_request(&old, asked),
            exclusive: true,
            truncate: false,
        };
        let temp = self.create_in(dir, temp_name.as_bytes(), &options)?;
        let temp_inode = temp.inode();
        let new = temp.layout().clone();
        let unlink_temp = || {
            // A manager that is down (a crash cut the migration short) is waited for,
            // for a bounded time, so that a failed migration leaves nothing behind.
            let since = std::time::Instant::now();
            let mut said = false;
            loop {
                match self.unlink_in(dir, temp_name.as_bytes()) {
                    Ok(_) => return,
                    Err(ClientError::Transport(e)) if since.elapsed() < TEMP_REMOVE_WAIT => {
                        if !said {
                            eprintln!("weft: removing {temp_name} (a migration's new file): {e}; waiting up to {} s for the metadata manager", TEMP_REMOVE_WAIT.as_secs());
                            said = true;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(200));
                    }
                    Err(e) if e.code() == ErrorCode::NotFound => return,
                    Err(e) => {
                        eprintln!(
                            "weft: removing {temp_name} (a migration's new file) failed: {e}; remove it by hand"
                        );
                        return;
                    }
                }
            }
        };
        let placed_badly = new.all_servers().iter().any(|s| avoid.contains(s));
        if new == old || placed_badly {
            drop(temp);
            unlink_temp();
            if placed_badly {
                return Err(ClientError::refused(
                    ErrorCode::InvalidLayout,
                    format!("the new layout would still use io server(s) {avoid:?}: is the server marked draining?"),
                ));
            }
            return Ok(unchanged(old));
        }
        let result = match self.migrate_copy(attr, temp, progress) {
            Ok((bytes, size)) => self.migrate_end(attr, temp_inode, true).map(|_| (bytes, size)),
            Err(e) => {
                // The manager may have no migration to abandon (the begin failed).
                let _ = self.migrate_end(attr, temp_inode, false);
                Err(e)
            }
        };
        unlink_temp();
        let (bytes, size) = result?;
        Ok(Migrated {
            old,
            new,
            bytes,
            size,
        })
    }

    fn migrate_begin(&self, attr: &Attr, temp: weft_layout::InodeId) -> Result<(), ClientError> {
        let request = Request::MigrateBegin {
            cred: self.cred_clone(),
            inode: attr.inode,
            temp,
        };
        match self.inner.meta(&request)? {
            Response::Attr(_) => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    fn migrate_end(
        &self,
        attr: &Attr,
        temp: weft_layout::InodeId,
        commit: bool,
    ) -> Result<Attr, ClientError> {
        let request = Request::MigrateEnd {
            cred: self.cred_clone(),
            inode: attr.inode,
            temp,
            commit,
        };
        match self.inner.meta(&request)? {
            Response::Attr(attr) => Ok(attr),
            other => Err(unexpected(&other)),
        }
    }

    /// Freezes the file's writes and copies its bytes into `temp` (steps 2 and 3 of the
    /// module's text): the bytes copied and the size.
    fn migrate_copy(
        &self,
        attr: &Attr,
        temp: crate::File,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(u64, u64), ClientError> {
        let temp_inode = temp.inode();
        self.migrate_begin(attr, temp_inode)?;
        let mut renewed = Instant::now();
        // Size and time read after the freeze: no write changes them any more.
        let now = self.getattr(attr.inode)?;
        if now.layout != attr.layout {
            return Err(ClientError::refused(
                ErrorCode::Busy,
                "its layout changed meanwhile (another migration?)",
            ));
        }
        let (size, mtime) = (now.size, now.mtime);
        let source = self.open_attr(now, false)?;
        let mut buf = vec![0u8; MIGRATE_CHUNK_BYTES as usize];
        let mut offset = 0u64;
        let mut bytes = 0u64;
        while offset < size {
            if renewed.elapsed() >= RENEW_EVERY {
                self.migrate_begin(attr, temp_inode)?;
                renewed = Instant::now();
            }
            let len = (size - offset).min(MIGRATE_CHUNK_BYTES) as usize;
            let got = source.read_at(offset, &mut buf[..len])?;
            if got != len {
                return Err(ClientError::refused(
                    ErrorCode::Io,
                    format!("read {got} bytes at {offset} where {len} were expected"),
                ));
            }
            if let Some(pause) = pause_for_tests() {
                std::thread::sleep(pause);
            }
            if buf[..len].iter().any(|b| *b != 0) {
                temp.write_at(offset, &buf[..len])?;
                bytes += len as u64;
            }
            offset += len as u64;
            progress(offset, size);
        }
        temp.truncate(size)?;
        temp.sync()?;
        self.setattr_inode(
            temp_inode,
            &SetAttr {
                mtime: Some(TimeSet::At(mtime)),
                ..SetAttr::default()
            },
        )?;
        temp.close()?;
        source.close()?;
        // Renewed once more, so that the freeze surely outlasts the switch.
        self.migrate_begin(attr, temp_inode)?;
        Ok((bytes, size))
    }

    /// The files with a piece on io server `server`, after inode `after`, a page at a
    /// time (root only): their inodes, and whether there may be more.
    pub fn server_files(
        &self,
        server: weft_layout::ServerId,
        after: weft_layout::InodeId,
    ) -> Result<(Vec<weft_layout::InodeId>, bool), ClientError> {
        let request = Request::ServerFiles {
            cred: self.cred_clone(),
            server,
            after,
            max: weft_proto::msg::STALE_LIST_MAX as u32,
        };
        match self.inner.meta(&request)? {
            Response::StaleFiles { files, more } => Ok((files.into_iter().map(|(i, _)| i).collect(), more)),
            other => Err(unexpected(&other)),
        }
    }

    /// Every io server's state at the manager (`weft_proto::msg::server_state`).
    pub fn server_states(&self) -> Result<Vec<(weft_layout::ServerId, u8)>, ClientError> {
        let request = Request::ServerStates {
            cred: self.cred_clone(),
        };
        match self.inner.meta(&request)? {
            Response::ServerStates { states } => Ok(states),
            other => Err(unexpected(&other)),
        }
    }

    /// Sets io server `server`'s state (root only): every server's state after it.
    pub fn set_server_state(
        &self,
        server: weft_layout::ServerId,
        state: u8,
    ) -> Result<Vec<(weft_layout::ServerId, u8)>, ClientError> {
        let request = Request::SetServerState {
            cred: self.cred_clone(),
            server,
            state,
        };
        match self.inner.meta(&request)? {
            Response::ServerStates { states } => Ok(states),
            other => Err(unexpected(&other)),
        }
    }

    /// Adds io server `server` to the running cluster (root only; `weft server add`):
    /// the manager checks that it answers there as that io server, records it and
    /// places new files on it. This client knows it at once; others when a layout
    /// first names it. The cluster's description after it.
    pub fn add_server(
        &self,
        server: weft_proto::IoServer,
    ) -> Result<std::sync::Arc<weft_proto::ClusterInfo>, ClientError> {
        let request = Request::AddServer {
            cred: self.cred_clone(),
            server,
        };
        match self.inner.meta(&request)? {
            Response::Cluster(_) => self.inner.refresh_cluster(),
            other => Err(unexpected(&other)),
        }
    }
}
