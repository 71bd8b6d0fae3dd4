//! A shared file pointer's identity at the manager: drawn by rank 0 at the open with the
//! manager's incarnation, broadcast with the open's outcome.

use crate::error::{MpiioError, Result};

/// A random open id (64 bits from the process's randomly keyed hasher, the time and
/// the pid).
fn draw_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish() | 1
}

/// At open, on rank 0 only: draws the open's id and notes the manager's incarnation.
/// The open broadcasts both with the rest of what rank 0 learnt; the manager makes the
/// pointer (at 0) at its first use, so an open whose program never uses it costs the
/// manager nothing (the lazy request refuses a pointer a restart lost).
pub fn new_pointer(client: &weft_client::Client, path: &str) -> Result<SharedId> {
    let incarnation = client.meta_incarnation().map_err(|e| {
        let mut e = MpiioError::from(e);
        e.message = format!("{path}: shared file pointer: {}", e.message);
        e
    })?;
    Ok(SharedId {
        open: draw_id(),
        incarnation,
    })
}

/// One open's shared file pointer at the manager: the open's id and the manager's
/// incarnation at the open.
#[derive(Debug, Clone, Copy)]
pub struct SharedId {
    pub open: u64,
    pub incarnation: u64,
}
