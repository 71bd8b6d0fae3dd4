//! The hand-written parts of `Request`'s wire layout: a request carried inside another
//! (its opcode, then its body to the end of the message, admitted only from the list
//! the carrier allows), the shared-memory descriptors, the lock test without its pid,
//! and checks that span several fields.

use super::Request;
use crate::capability;
use crate::codec::{DecodeError, Reader, Writer};
use crate::msg::opcode::Opcode;
use crate::msg::{SCATTER_PIECES_MAX, VIEW_BYTES_MAX};
use crate::types::LockRequest;
use weft_layout::view::View;

/// A carried request: its opcode, then its body.
pub(super) fn encode(request: &Request, w: &mut Writer) {
    w.u16(request.opcode() as u16);
    request.encode_body_to(w);
}

/// A carried request of an opcode in `allowed` (checked before it is decoded, so that
/// nesting never recurses into what the carrier refuses), decoded from the rest of
/// the message.
fn carried(r: &mut Reader<'_>, allowed: &[Opcode], what: &'static str) -> Result<Box<Request>, DecodeError> {
    let inner = r.u16()?;
    if !allowed.iter().any(|o| *o as u16 == inner) {
        return Err(DecodeError::Invalid {
            what,
            value: inner as u64,
        });
    }
    Ok(Box::new(Request::decode(inner, r.take_rest())?))
}

/// `ViaCache`: only reads and writes travel through a cache manager.
pub(super) fn data_request(r: &mut Reader<'_>) -> Result<Box<Request>, DecodeError> {
    carried(
        r,
        &[Opcode::Read, Opcode::Write, Opcode::ReadView, Opcode::WriteView],
        "request through a cache manager (only reads and writes are)",
    )
}

/// `ViaCacheAware`: only reads carry an access pattern.
pub(super) fn read_request(r: &mut Reader<'_>) -> Result<Box<Request>, DecodeError> {
    carried(
        r,
        &[Opcode::Read, Opcode::ReadView],
        "request with an access pattern (only reads carry one)",
    )
}

/// `ShmScatter`: only reads are placed into the pool.
pub(super) fn pooled_request(r: &mut Reader<'_>) -> Result<Box<Request>, DecodeError> {
    carried(
        r,
        &[Opcode::Read, Opcode::ReadView],
        "request placed into the pool (only Read and ReadView)",
    )
}

/// `WithParent`: `Request::MAKES_NAMES` only.
pub(super) fn name_making_request(r: &mut Reader<'_>) -> Result<Box<Request>, DecodeError> {
    carried(
        r,
        &Request::MAKES_NAMES,
        "request answered with its directory (only create, mkdir, symlink, mknod and link are)",
    )
}

/// `Vouched`: `Request::VOUCHABLE` only.
pub(super) fn vouchable_request(r: &mut Reader<'_>) -> Result<Box<Request>, DecodeError> {
    carried(
        r,
        &Request::VOUCHABLE,
        "request answered with a vouch (only lookup, revalidate and getattr are)",
    )
}

/// `Tracked`: `Request::TRACKED`, alone or in a `WithParent`, `CreateGranted` or
/// `CreateStamped`.
pub(super) fn tracked_request(r: &mut Reader<'_>) -> Result<Box<Request>, DecodeError> {
    const WRAPPED: [Opcode; 3] = [Opcode::WithParent, Opcode::CreateGranted, Opcode::CreateStamped];
    let mut allowed = [Opcode::Create; Request::TRACKED.len() + WRAPPED.len()];
    allowed[..Request::TRACKED.len()].copy_from_slice(&Request::TRACKED);
    allowed[Request::TRACKED.len()..].copy_from_slice(&WRAPPED);
    carried(r, &allowed, "tracked request (only namespace changes are)")
}

/// `CreateGranted`, `CreateStamped`: always a `Create`, so its body alone, without the
/// opcode.
pub(super) fn encode_create(request: &Request, w: &mut Writer) {
    request.encode_body_to(w);
}

pub(super) fn granted_create(r: &mut Reader<'_>) -> Result<Box<Request>, DecodeError> {
    Ok(Box::new(Request::decode(Opcode::Create as u16, r.take_rest())?))
}

/// `ShmCall`'s body: the region, then the carried request.
pub(super) fn shm_call_to(w: &mut Writer, offset: u64, len: u64, data_len: u64, request: &Request) {
    w.u64(offset);
    w.u64(len);
    w.u64(data_len);
    encode(request, w);
}

pub(super) fn encode_shm_call(call: &Request, w: &mut Writer) {
    if let Request::ShmCall {
        offset,
        len,
        data_len,
        request,
    } = call
    {
        shm_call_to(w, *offset, *len, *data_len, request);
    }
}

/// `ShmCall`, by hand: its region is checked before the carried request is read.
pub(super) fn decode_shm_call(r: &mut Reader<'_>) -> Result<Request, DecodeError> {
    let offset = r.u64()?;
    let len = r.u64()?;
    let data_len = r.u64()?;
    if offset.checked_add(len).is_none() || data_len > len {
        return Err(DecodeError::Invalid {
            what: "shared-memory region (data longer than the region, or past 2^64)",
            value: data_len,
        });
    }
    let inner = r.u16()?;
    if [
        Opcode::Hello,
        Opcode::Authenticate,
        Opcode::ShmAttach,
        Opcode::ShmCall,
    ]
    .iter()
    .any(|o| *o as u16 == inner)
    {
        return Err(DecodeError::Invalid {
            what: "request through shared memory (not a handshake or shared-memory request)",
            value: inner as u64,
        });
    }
    Ok(Request::ShmCall {
        offset,
        len,
        data_len,
        request: Box::new(Request::decode(inner, r.take_rest())?),
    })
}

/// `ShmScatter`'s pieces of the pool: 1 to `SCATTER_PIECES_MAX`, none empty, none past
/// 2^64, none overlapping another.
pub(super) fn pool_pieces(r: &mut Reader<'_>) -> Result<Vec<(u64, u64)>, DecodeError> {
    let count = r.u32()? as usize;
    if count == 0 || count > SCATTER_PIECES_MAX {
        return Err(DecodeError::Invalid {
            what: "number of pool pieces (1 to SCATTER_PIECES_MAX)",
            value: count as u64,
        });
    }
    let mut pieces = Vec::with_capacity(count.min(r.remaining() / 16));
    for _ in 0..count {
        let (offset, len) = (r.u64()?, r.u64()?);
        if len == 0 || offset.checked_add(len).is_none() {
            return Err(DecodeError::Invalid {
                what: "pool piece (empty, or past 2^64)",
                value: offset,
            });
        }
        pieces.push((offset, len));
    }
    let mut sorted = pieces.clone();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0].0 + w[0].1 > w[1].0) {
        return Err(DecodeError::Invalid {
            what: "pool pieces that overlap, at pool offset",
            value: w[1].0,
        });
    }
    Ok(pieces)
}

/// `FileLockTest`'s lock as first defined: without the pid (decoded as 0).
pub(super) mod lock_without_pid {
    use super::*;
    use crate::codec::Wire;
    use crate::types::LockKind;
    use weft_layout::InodeId;

    pub fn encode(lock: &LockRequest, w: &mut Writer) {
        w.u64(lock.session);
        w.u64(lock.owner);
        lock.inode.encode(w);
        lock.kind.encode(w);
        w.u64(lock.start);
        w.u64(lock.end);
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<LockRequest, DecodeError> {
        Ok(LockRequest {
            session: r.u64()?,
            owner: r.u64()?,
            inode: InodeId::decode(r)?,
            pid: 0,
            kind: LockKind::decode(r)?,
            start: r.u64()?,
            end: r.u64()?,
        })
    }
}

/// `RegisterView`'s view: its own wire form as one byte string of at most
/// `VIEW_BYTES_MAX`, decoded with every limit of the view checked.
pub(super) mod registered_view {
    use super::*;

    pub fn encode(view: &View, w: &mut Writer) {
        w.bytes(&view.encode());
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<View, DecodeError> {
        let bytes = r.bytes_max(VIEW_BYTES_MAX)?;
        View::decode(bytes).map_err(|e| DecodeError::View(e.to_string()))
    }
}

/// `WriteView`, `ReadView`: the view interval ends within 2^64.
pub(super) fn view_interval(request: &Request) -> Result<(), DecodeError> {
    if let Request::WriteView { view_offset, len, .. } | Request::ReadView { view_offset, len, .. } = *request
    {
        if view_offset.checked_add(len).is_none() {
            return Err(DecodeError::Invalid {
                what: "view interval end (offset + length overflows)",
                value: view_offset,
            });
        }
    }
    Ok(())
}

/// `Allocate`: the range ends within the largest file.
pub(super) fn allocated_range(request: &Request) -> Result<(), DecodeError> {
    if let Request::Allocate { offset, len, .. } = *request {
        weft_layout::stripe::check_range(offset, len).map_err(|_| DecodeError::Invalid {
            what: "allocated range end (offset + length overflows)",
            value: offset,
        })?;
    }
    Ok(())
}

/// `GrantCapability`: a client asks for read, write or both, never a server's rights.
pub(super) fn requested_rights(r: &mut Reader<'_>) -> Result<u8, DecodeError> {
    let rights = r.u8()?;
    if rights == 0 || rights & !(capability::rights::READ | capability::rights::WRITE) != 0 {
        return Err(DecodeError::Invalid {
            what: "requested capability rights (read, write or both)",
            value: rights as u64,
        });
    }
    Ok(rights)
}
