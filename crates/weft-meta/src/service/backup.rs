//! `BackupBegin`, `BackupRead`, `BackupEnd`: the snapshots of the namespace `weft
//! backup` reads, each a database file beside the live one (`<db>.backup-<n>`) until it
//! is read or abandoned. At most `SNAPSHOTS_MAX` at once; one not read for
//! `SNAPSHOT_IDLE` is dropped at the next `BackupBegin`, and so are leftovers of an
//! earlier process.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use weft_proto::msg::{BACKUP_CHECKSUM_BYTES, BACKUP_CHUNK_BYTES_MAX};
use weft_proto::{ErrorCode, Response, WireError};

use super::{Caller, MetaService};

/// Most snapshots kept at once (each as big as the database).
const SNAPSHOTS_MAX: usize = 2;
/// A snapshot nobody read for this long is dropped (its reader died).
const SNAPSHOT_IDLE: Duration = Duration::from_secs(600);

struct Snapshot {
    path: PathBuf,
    bytes: u64,
    last_used: Instant,
}

/// The snapshots being read.
#[derive(Default)]
pub(super) struct Snapshots {
    next: u64,
    open: BTreeMap<u64, Snapshot>,
}

/// Refuses anyone but a key holder (root, for a verified user): a snapshot is the
/// whole namespace.
fn key_holder_only(caller: &Caller, what: &str) -> Result<(), WireError> {
    match caller {
        Caller::Trusted => Ok(()),
        Caller::User(cred) if cred.uid == 0 => Ok(()),
        Caller::User(cred) => Err(WireError::new(
            ErrorCode::PermissionDenied,
            format!("{what}: only root may (uid {} asked)", cred.uid),
        )),
    }
}

fn io_failure(what: &str, e: std::io::Error) -> WireError {
    let code = match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => ErrorCode::NoSpace,
        _ => ErrorCode::Io,
    };
    WireError::new(code, format!("{what}: {e}"))
}

impl MetaService {
    pub(super) fn backup_begin(&self, caller: &Caller) -> Result<Response, WireError> {
        key_holder_only(caller, "a metadata backup")?;
        let db = self.store.database_path().to_path_buf();
        let prefix = format!("{}.backup-", db.file_name().unwrap_or_default().to_string_lossy());
        let id = {
            let mut snapshots = self.snapshots.lock().unwrap_or_else(|p| p.into_inner());
            let idle: Vec<u64> = snapshots
                .open
                .iter()
                .filter(|(_, s)| s.last_used.elapsed() > SNAPSHOT_IDLE)
                .map(|(id, _)| *id)
                .collect();
            for id in idle {
                if let Some(s) = snapshots.open.remove(&id) {
                    let _ = std::fs::remove_file(&s.path);
                }
            }
            if snapshots.next == 0 {
                // The first backup of this process: snapshots of an earlier one are
                // nobody's now.
                remove_leftovers(&db, &prefix);
            }
            if snapshots.open.len() >= SNAPSHOTS_MAX {
                return Err(WireError::new(
                    ErrorCode::Busy,
                    format!(
                        "{SNAPSHOTS_MAX} metadata backups are being read already; try again when one is done"
                    ),
                ));
            }
            snapshots.next += 1;
            let id = snapshots.next;
            // Held in the table (at size 0) while it is written, so that it counts.
            snapshots.open.insert(
                id,
                Snapshot {
                    path: db.with_file_name(format!("{prefix}{id}")),
                    bytes: 0,
                    last_used: Instant::now(),
                },
            );
            id
        };
        let path = db.with_file_name(format!("{prefix}{id}"));
        let made = self.store.snapshot_to(&path).and_then(|_| {
            let mut file = std::fs::File::open(&path)
                .map_err(|e| io_failure("reading the metadata snapshot back", e))?;
            let mut hash = Sha256::new();
            let bytes = std::io::copy(&mut file, &mut hash)
                .map_err(|e| io_failure("reading the metadata snapshot back", e))?;
            let sha256: [u8; BACKUP_CHECKSUM_BYTES] = hash.finalize().into();
            Ok((bytes, sha256))
        });
        let mut snapshots = self.snapshots.lock().unwrap_or_else(|p| p.into_inner());
        match made {
            Ok((bytes, sha256)) => {
                if let Some(s) = snapshots.open.get_mut(&id) {
                    s.bytes = bytes;
                    s.last_used = Instant::now();
                }
                Ok(Response::BackupReady {
                    snapshot: id,
                    bytes,
                    sha256,
                    store_format: crate::store::store_format(),
                    protocol: weft_proto::frame::PROTOCOL_VERSION,
                })
            }
            Err(e) => {
                snapshots.open.remove(&id);
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
    }

    pub(super) fn backup_read(
        &self,
        caller: &Caller,
        snapshot: u64,
        offset: u64,
        len: u32,
    ) -> Result<Response, WireError> {
        key_holder_only(caller, "a metadata backup")?;
        let (path, bytes) = {
            let mut snapshots = self.snapshots.lock().unwrap_or_else(|p| p.into_inner());
            let s = snapshots
                .open
                .get_mut(&snapshot)
                .ok_or_else(|| unknown(snapshot))?;
            s.last_used = Instant::now();
            (s.path.clone(), s.bytes)
        };
        let len = (len as usize)
            .min(BACKUP_CHUNK_BYTES_MAX)
            .min(bytes.saturating_sub(offset) as usize);
        let mut chunk = vec![0u8; len];
        if len > 0 {
            let mut file =
                std::fs::File::open(&path).map_err(|e| io_failure("reading the metadata snapshot", e))?;
            file.seek(SeekFrom::Start(offset))
                .and_then(|_| file.read_exact(&mut chunk))
                .map_err(|e| io_failure("reading the metadata snapshot", e))?;
        }
        Ok(Response::BackupChunk(chunk))
    }

    pub(super) fn backup_end(&self, caller: &Caller, snapshot: u64) -> Result<Response, WireError> {
        key_holder_only(caller, "a metadata backup")?;
        let s = self
            .snapshots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .open
            .remove(&snapshot)
            .ok_or_else(|| unknown(snapshot))?;
        let _ = std::fs::remove_file(&s.path);
        Ok(Response::Done)
    }
}

fn unknown(snapshot: u64) -> WireError {
    WireError::new(
        ErrorCode::NotFound,
        format!("no metadata snapshot {snapshot} (finished, or dropped after {SNAPSHOT_IDLE:?} unread)"),
    )
}

/// Removes `<db>.backup-*` files an earlier process left.
fn remove_leftovers(db: &std::path::Path, prefix: &str) {
    let dir = match db.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(prefix) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// `Snapshots` behind its lock, for the service's state.
pub(super) type SnapshotTable = Mutex<Snapshots>;

impl MetaService {
    /// `weft check`'s requests of the namespace (`store/scan.rs`): key holders only.
    pub(super) fn check_scan(
        &self,
        caller: &Caller,
        request: weft_proto::Request,
    ) -> Result<Response, WireError> {
        use weft_proto::Request;
        key_holder_only(caller, "a consistency check")?;
        match request {
            Request::InodeStates { inodes } => self.store.inode_states(&inodes).map(Response::States),
            Request::AdoptOrphans { server, inodes } => {
                self.store.adopt_orphans(server, &inodes).map(Response::States)
            }
            Request::LayoutScan { after, max } => self
                .store
                .layout_scan(after, max)
                .map(|(files, more)| Response::Layouts { files, more }),
            other => Err(WireError::new(
                ErrorCode::Internal,
                format!("not a check request: {:?}", other.opcode()),
            )),
        }
    }
}
