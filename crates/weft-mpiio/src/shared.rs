//! Shared file pointers (`MPI_File_read/write_shared`, `read/write_ordered`,
//! `seek_shared`, `get_position_shared`, their nonblocking and split forms, and
//! `MPI_MODE_SEQUENTIAL`).
//!
//! The pointer of one collective open is held by the metadata manager (in memory,
//! keyed by the file's inode and a random id rank 0 draws at open), which serves an
//! atomic fetch-and-add: an independent shared access takes its offset with one call,
//! so concurrent ranks never get the same bytes. The ordered calls take one prefix sum
//! (`MPI_Exscan`) of the ranks' counts: the last rank adds the total to the pointer and
//! broadcasts where the call starts, and every rank then accesses its part collectively
//! (`read/write_at_all`), in rank order. The pointer counts etypes of the view, as the
//! individual pointer does, and `MPI_File_set_view` sets it to 0: each view change is
//! an epoch, and the manager resets the pointer at the first request of a newer one.
//! A manager that restarted has lost the pointers of files open at the time: their
//! shared calls fail with `MPI_ERR_IO` saying so (nothing is read or written at a
//! wrong offset).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use weft_proto::msg::SharedOp;

use crate::error::{ErrorClass, MpiioError, Result};
use crate::file::MpiFile;
use crate::mpi::{self, Handle};
use crate::nonblocking::{self, Op};
pub use crate::shared_id::{new_pointer, SharedId};

extern "C" {
    /// `csrc/requests.c`: MPI_Exscan (sum) of one int64; rank 0 gets 0.
    fn wm_exscan_i64(comm: Handle, value: i64, out: *mut i64) -> std::ffi::c_int;
}

/// The sum of `value` over the ranks before this one.
fn exscan_sum(comm: &mpi::Comm, value: i64) -> Result<i64> {
    let mut out = 0i64;
    // SAFETY: a valid communicator and output pointer.
    let rc = unsafe { wm_exscan_i64(comm.handle(), value, &mut out) };
    if rc != 0 {
        return Err(MpiioError::new(
            ErrorClass::Intern,
            format!("MPI_Exscan failed ({rc})"),
        ));
    }
    Ok(out)
}

/// One open's shared pointer at the manager: (open id, view epoch).
#[derive(Clone, Copy)]
struct Key {
    open: u64,
    epoch: u64,
    /// The manager's incarnation at the open: it makes the pointer at the first use.
    incarnation: u64,
}

static KEYS: LazyLock<Mutex<HashMap<usize, Key>>> = LazyLock::new(Default::default);

fn keys() -> std::sync::MutexGuard<'static, HashMap<usize, Key>> {
    KEYS.lock().unwrap_or_else(|e| e.into_inner())
}

fn key_of(f: &MpiFile) -> Result<Key> {
    keys()
        .get(&(f as *const MpiFile as usize))
        .copied()
        .ok_or_else(|| {
            MpiioError::new(
                ErrorClass::Intern,
                format!("{}: no shared file pointer", f.path()),
            )
        })
}

fn call(f: &MpiFile, key: Key, op: SharedOp) -> Result<u64> {
    let client = crate::cluster::client()?;
    f.shared_pointer_used();
    client
        .shared_pointer_since(f.weft_file().inode(), key.open, key.epoch, key.incarnation, op)
        .map_err(|e| {
            let mut e = MpiioError::from(e);
            e.message = format!("{}: shared file pointer: {}", f.path(), e.message);
            if e.class != ErrorClass::Intern {
                e.class = ErrorClass::Io;
            }
            e
        })
}

/// At open, on every rank: remembers the open's pointer (its id came with the open's
/// broadcast; nothing is communicated here).
pub fn opened(f: &MpiFile) {
    let id = f.shared_id();
    keys().insert(
        f as *const MpiFile as usize,
        Key {
            open: id.open,
            epoch: 0,
            incarnation: id.incarnation,
        },
    );
}

/// After a view change (collective): the pointer starts again at 0.
pub fn view_changed(f: &MpiFile) {
    if let Some(k) = keys().get_mut(&(f as *const MpiFile as usize)) {
        k.epoch += 1;
    }
}

/// Before close: forgets the key; returns what rank 0 needs to drop the pointer at
/// the manager once every rank is done ([`drop_pointer`]).
pub fn closing(f: &MpiFile) -> Option<(weft_layout::InodeId, u64, bool)> {
    let key = keys().remove(&(f as *const MpiFile as usize))?;
    Some((f.weft_file().inode(), key.open, f.comm().rank() == 0))
}

/// After close (every rank is past its last shared access): rank 0 drops the pointer,
/// if any rank used it (`used`, agreed at close): one never used was never made.
pub fn drop_pointer(closed: Option<(weft_layout::InodeId, u64, bool)>, used: bool) {
    if let (Some((inode, open, true)), true) = (closed, used) {
        if let Ok(client) = crate::cluster::client() {
            let _ = client.shared_pointer(inode, open, 0, SharedOp::Drop);
        }
    }
}

/// Etypes of an access of `count` items of `datatype`.
fn etypes(f: &MpiFile, count: i32, datatype: Handle) -> Result<u64> {
    if count < 0 {
        return Err(MpiioError::new(
            ErrorClass::Count,
            format!("negative count {count}"),
        ));
    }
    let size = mpi::type_size(datatype)?;
    let bytes = u64::try_from(size)
        .ok()
        .and_then(|s| s.checked_mul(count as u64))
        .ok_or_else(|| MpiioError::new(ErrorClass::Count, "count times datatype size overflows"))?;
    let etype = f.etype_size();
    if bytes % etype != 0 {
        return Err(MpiioError::new(
            ErrorClass::Type,
            "the access is not a whole number of etypes",
        ));
    }
    Ok(bytes / etype)
}

use crate::file::THROUGH_SHARED;

const WRITE: i32 = 1;
const COLLECTIVE: i32 = 2;
const EXPLICIT: i32 = 4;

/// read/write_shared: takes the offset from the pointer, then accesses it.
pub fn independent(f: &MpiFile, write: bool, buf: *mut u8, count: i32, datatype: Handle) -> Result<u64> {
    let n = etypes(f, count, datatype)?;
    let at = call(f, key_of(f)?, SharedOp::FetchAdd(n))?;
    let offset =
        i64::try_from(at).map_err(|_| MpiioError::new(ErrorClass::Io, "shared file pointer overflows"))?;
    f.io(
        EXPLICIT | THROUGH_SHARED | if write { WRITE } else { 0 },
        offset,
        buf,
        count,
        datatype,
    )
}

/// iread/iwrite_shared: the offset now, the I/O in the background.
pub fn start(
    fh: Handle,
    f: &MpiFile,
    write: bool,
    buf: *mut u8,
    count: i32,
    datatype: Handle,
) -> Result<Arc<Op>> {
    let n = etypes(f, count, datatype)?;
    let at = call(f, key_of(f)?, SharedOp::FetchAdd(n))?;
    let offset =
        i64::try_from(at).map_err(|_| MpiioError::new(ErrorClass::Io, "shared file pointer overflows"))?;
    nonblocking::start(
        fh,
        f,
        EXPLICIT | THROUGH_SHARED | if write { WRITE } else { 0 },
        offset,
        buf,
        count,
        datatype,
    )
}

/// read/write_ordered (collective): rank order, one prefix sum.
pub fn ordered(f: &MpiFile, write: bool, buf: *mut u8, count: i32, datatype: Handle) -> Result<u64> {
    let comm = f.comm();
    // A bad count or type is agreed on by the access below; it counts 0 here.
    let n = etypes(f, count, datatype).unwrap_or(0);
    let before = exscan_sum(comm, n as i64)? as u64;
    let last = comm.size() - 1;
    // The last rank knows the total; it moves the pointer and tells everybody where
    // the call starts (u64::MAX: it could not, and every rank fails alike).
    let mut base = [0u8; 8];
    if comm.rank() == last {
        let taken = key_of(f).and_then(|k| call(f, k, SharedOp::FetchAdd(before + n)));
        base = match &taken {
            Ok(b) => b.to_le_bytes(),
            Err(e) => {
                crate::file::report(e);
                u64::MAX.to_le_bytes()
            }
        };
    }
    comm.bcast(&mut base, last)?;
    let base = u64::from_le_bytes(base);
    if base == u64::MAX {
        return Err(MpiioError::new(
            ErrorClass::Io,
            format!(
                "{}: the ordered call could not move the shared file pointer",
                f.path()
            ),
        ));
    }
    let offset = base
        .checked_add(before)
        .and_then(|o| i64::try_from(o).ok())
        .ok_or_else(|| MpiioError::new(ErrorClass::Io, "shared file pointer overflows"))?;
    f.io(
        EXPLICIT | COLLECTIVE | if write { WRITE } else { 0 },
        offset,
        buf,
        count,
        datatype,
    )
}

/// seek_shared (collective; every rank passes the same arguments).
pub fn seek(f: &MpiFile, offset: i64, whence: i32) -> Result<()> {
    let comm = f.comm();
    // Every rank's earlier shared accesses are over (and sent: MPI_SEEK_END reads the
    // size, which every rank's buffered writes may extend) before the pointer moves.
    f.flush_behind();
    comm.barrier()?;
    let r = if comm.rank() == 0 {
        (|| {
            let key = key_of(f)?;
            let base = match whence {
                0 => 0i128,
                1 => i128::from(call(f, key, SharedOp::Get)?),
                2 => i128::from(f.size_in_etypes()?),
                _ => return Err(MpiioError::new(ErrorClass::Arg, format!("bad whence {whence}"))),
            };
            let to = base + i128::from(offset);
            let to = u64::try_from(to)
                .map_err(|_| MpiioError::new(ErrorClass::Arg, "seek_shared before the start of the view"))?;
            call(f, key, SharedOp::Set(to)).map(|_| ())
        })()
    } else {
        Ok(())
    };
    crate::collective::engine::agree(comm, r)
}

/// get_position_shared.
pub fn position(f: &MpiFile) -> Result<u64> {
    call(f, key_of(f)?, SharedOp::Get)
}

/// Under `MPI_MODE_SEQUENTIAL` only the shared file pointer may be used.
pub fn check_individual(f: &MpiFile) -> Result<()> {
    if f.amode() & crate::file::amode::SEQUENTIAL != 0 {
        return Err(MpiioError::new(
            ErrorClass::UnsupportedOperation,
            format!(
                "{}: opened with MPI_MODE_SEQUENTIAL: only shared file pointer calls may access it",
                f.path()
            ),
        ));
    }
    Ok(())
}

/// `MPI_File_set_view`'s displacement: under `MPI_MODE_SEQUENTIAL`,
/// `MPI_DISPLACEMENT_CURRENT` is where the shared file pointer is, in bytes (collective:
/// rank 0 asks, every rank learns it); any other value is returned as it is.
pub fn displacement(f: &MpiFile, disp: i64) -> Result<i64> {
    let current = i64::from(mpi::constant(mpi::Constant::DisplacementCurrent));
    if disp != current || f.amode() & crate::file::amode::SEQUENTIAL == 0 {
        return Ok(disp);
    }
    let comm = f.comm();
    // Every rank's earlier shared accesses are over.
    comm.barrier()?;
    let mut bytes = [0u8; 8];
    let r = if comm.rank() == 0 {
        key_of(f)
            .and_then(|k| call(f, k, SharedOp::Get))
            .and_then(|pos| {
                let pos = i64::try_from(pos)
                    .map_err(|_| MpiioError::new(ErrorClass::Io, "shared file pointer overflows"))?;
                f.byte_offset(pos)
            })
            .map(|b| bytes = b.to_le_bytes())
    } else {
        Ok(())
    };
    crate::collective::engine::agree(comm, r)?;
    comm.bcast(&mut bytes, 0)?;
    i64::try_from(u64::from_le_bytes(bytes))
        .map_err(|_| MpiioError::new(ErrorClass::Arg, "displacement overflows"))
}
