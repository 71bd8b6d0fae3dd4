//! `ObjList`: the objects of one fan-out directory in inode order, a bounded page at a
//! time, for `weft check`'s scan. A page reads the whole directory and keeps the
//! `max` smallest numbers above the cursor (memory bounded by the page, not by the
//! directory); names that are not objects (16 hex digits) are skipped.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::SystemTime;

use weft_layout::InodeId;
use weft_proto::msg::OBJ_LIST_MAX;
use weft_proto::{ErrorCode, Response, WireError};

/// Fan-out directories of an object store (`<2 hex digits>`).
pub const FAN_OUT_DIRS: u16 = 256;

/// The `ObjList` answer for directory `dir` of the store under `root`.
pub fn list(root: &Path, dir: u16, after: InodeId, max: u32) -> Result<Response, WireError> {
    if dir >= FAN_OUT_DIRS {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("object directory {dir}: there are {FAN_OUT_DIRS} (0-255)"),
        ));
    }
    let max = (max as usize).clamp(1, OBJ_LIST_MAX);
    let path = root.join(format!("{dir:02x}"));
    let entries = match std::fs::read_dir(&path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Response::ObjectPage {
                objects: Vec::new(),
                more: false,
            })
        }
        Err(e) => {
            return Err(WireError::new(
                ErrorCode::Io,
                format!("listing {}: {e}", path.display()),
            ))
        }
    };
    // The `max` smallest numbers above `after`; `more` once one was dropped.
    let mut page = BTreeSet::new();
    let mut more = false;
    for entry in entries {
        let entry =
            entry.map_err(|e| WireError::new(ErrorCode::Io, format!("listing {}: {e}", path.display())))?;
        let name = entry.file_name();
        let Some(inode) = name
            .to_str()
            .filter(|n| n.len() == 16)
            .and_then(|n| u64::from_str_radix(n, 16).ok())
        else {
            continue;
        };
        if inode <= after.0 {
            continue;
        }
        page.insert(inode);
        if page.len() > max {
            page.pop_last();
            more = true;
        }
    }
    let now = SystemTime::now();
    let mut objects = Vec::with_capacity(page.len());
    for inode in page {
        // Gone since the listing (removed meanwhile): not an object any more.
        let Ok(meta) = std::fs::metadata(path.join(format!("{inode:016x}"))) else {
            continue;
        };
        let changed = SystemTime::UNIX_EPOCH + std::time::Duration::new(meta.ctime().max(0) as u64, 0);
        let age = now.duration_since(changed).unwrap_or_default().as_secs();
        objects.push((InodeId(inode), (meta.blocks().saturating_mul(512), age)));
    }
    Ok(Response::ObjectPage { objects, more })
}
