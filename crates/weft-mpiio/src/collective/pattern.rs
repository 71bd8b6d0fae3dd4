//! Collective-I/O-aware caching (hint `weft_cio_aware`): the original pattern of a
//! collective read travels to the cache tier with the aggregated requests.
//!
//! 1. Every rank encodes its request as (time of the call, its view's wire form, view
//!    offset, length): the view, not a byte list.
//! 2. The ranks exchange them (one Alltoallv of a few hundred bytes per rank: an
//!    allgather), so every aggregator holds the whole call's pattern.
//! 3. The pattern is sorted by (time, rank), equal views kept once, and named by a hash
//!    of what was exchanged, the same on every rank and different for every call.
//! 4. The file handle attaches it to its reads to cache managers for the length of the
//!    call (`weft_client::File::set_access_pattern`), which refuse nothing: a pattern
//!    larger than the limit, or managers that predate it, leave the call cached the
//!    ordinary way.
//!
//! Only for reads of files cached by the tier: the condition is the same on every rank
//! (shared hints, one file), so every rank takes part in the exchange or none does.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use weft_client::File;
use weft_layout::view::View;
use weft_proto::pattern::{AccessPattern, PatternRef, PATTERN_REFS_MAX};

use crate::error::{ErrorClass, MpiioError, Result};
use crate::hints::Hints;
use crate::mpi::Comm;

/// One rank's part, as exchanged: time_ns, view_offset, len (u64 le each), view wire.
/// A view without a wire form (too many blocks) is left out of the pattern: the whole
/// file's view and length 0, which `assemble` drops.
fn encode(time_ns: u64, view: &View, view_offset: u64, len: u64) -> Vec<u8> {
    let whole;
    let (view, len) = if view.filetype().fits_wire() {
        (view, len)
    } else {
        whole = View::contiguous();
        (&whole, 0)
    };
    let mut out = Vec::new();
    out.extend_from_slice(&time_ns.to_le_bytes());
    out.extend_from_slice(&view_offset.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&view.encode());
    out
}

/// The pattern of the ranks' parts (`parts[r]` from rank r).
pub fn assemble(parts: &[&[u8]]) -> Result<AccessPattern> {
    let bad = |what: &str| MpiioError::new(ErrorClass::Intern, format!("access pattern exchange: {what}"));
    if parts.len() > PATTERN_REFS_MAX {
        return Err(bad("more ranks than a pattern holds"));
    }
    let mut call = 0xcbf2_9ce4_8422_2325u64;
    let mut wires: Vec<&[u8]> = Vec::new();
    let mut views = Vec::new();
    let mut refs = Vec::with_capacity(parts.len());
    for (rank, part) in parts.iter().enumerate() {
        for b in part.iter() {
            call = (call ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
        if part.len() < 24 {
            return Err(bad("a part too short"));
        }
        let word = |i: usize| u64::from_le_bytes(part[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let wire = &part[24..];
        let index = match wires.iter().position(|w| *w == wire) {
            Some(i) => i,
            None => {
                let view = View::decode(wire).map_err(|e| bad(&e.to_string()))?;
                wires.push(wire);
                views.push(Arc::new(view));
                wires.len() - 1
            }
        };
        refs.push(PatternRef {
            rank: rank as u32,
            time_ns: word(0),
            view: index as u32,
            view_offset: word(1),
            len: word(2),
        });
    }
    refs.retain(|r| r.len > 0);
    refs.sort_by_key(|r| (r.time_ns, r.rank));
    Ok(AccessPattern { call, views, refs })
}

/// Before a collective read: exchanges the ranks' requests and attaches the pattern to
/// the file's reads (see the module comment). `view_offset` and `len` are this rank's
/// request.
pub fn attach(
    comm: &Comm,
    file: &File,
    hints: &Hints,
    write: bool,
    view: &View,
    view_offset: u64,
    len: u64,
) -> Result<()> {
    if !hints.cio_aware || write || !file.cache_mode().uses_tier() {
        return Ok(());
    }
    // The time the trace gave this request, when traced: `weft sim` then orders the
    // call's ranks exactly as the cache managers do.
    let time_ns = file
        .trace()
        .and_then(|t| t.last_original_ns())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        });
    let mine = encode(time_ns, view, view_offset, len);
    let size = comm.size();
    let lens = comm.allgather(&[mine.len() as i64])?;
    let too_big = || MpiioError::new(ErrorClass::Intern, "access pattern exchange larger than 2 GiB");
    let rcounts: Vec<i32> = lens
        .iter()
        .map(|&n| i32::try_from(n).map_err(|_| too_big()))
        .collect::<Result<_>>()?;
    let mut rdispls = Vec::with_capacity(size);
    let mut total = 0i64;
    for &n in &rcounts {
        rdispls.push(i32::try_from(total).map_err(|_| too_big())?);
        total += i64::from(n);
    }
    let mut all = vec![0u8; total as usize];
    // The same bytes to every rank: every destination's slice is the whole buffer.
    let scounts = vec![mine.len() as i32; size];
    let sdispls = vec![0i32; size];
    comm.alltoallv(&mine, &scounts, &sdispls, &mut all, &rcounts, &rdispls)?;
    let parts: Vec<&[u8]> = (0..size)
        .map(|r| &all[rdispls[r] as usize..rdispls[r] as usize + rcounts[r] as usize])
        .collect();
    let pattern = assemble(&parts)?;
    file.set_access_pattern(Some(Arc::new(pattern)));
    Ok(())
}

/// After the call: the file's reads carry no pattern.
pub fn detach(file: &File) {
    file.set_access_pattern(None);
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_layout::view::Datatype;

    #[test]
    fn parts_assemble_in_time_order_with_views_once() {
        let tile = View::new(
            64,
            Datatype::vector(4, 1, 3, &Datatype::bytes(8).unwrap()).unwrap(),
        )
        .unwrap();
        let whole = View::contiguous();
        let p0 = encode(30, &tile, 0, 32);
        let p1 = encode(10, &whole, 100, 50);
        let p2 = encode(30, &tile, 8, 16);
        let p3 = encode(5, &whole, 0, 0);
        let parts = [&p0[..], &p1[..], &p2[..], &p3[..]];
        let p = assemble(&parts).unwrap();
        assert_eq!(p.views.len(), 2);
        let order: Vec<(u32, u64, u32)> = p.refs.iter().map(|r| (r.rank, r.time_ns, r.view)).collect();
        // Rank 3 asked for nothing; rank 1 first; ranks 0 and 2 tie on time.
        assert_eq!(order, vec![(1, 10, 1), (0, 30, 0), (2, 30, 0)]);
        assert_eq!(*p.views[0], tile);
        // The id depends on every part, and is the same for the same parts.
        assert_eq!(assemble(&parts).unwrap().call, p.call);
        let other = encode(31, &tile, 0, 32);
        assert_ne!(
            assemble(&[&other[..], &p1[..], &p2[..], &p3[..]]).unwrap().call,
            p.call
        );
        // The pattern travels: it encodes within the limit and decodes equal.
        let mut w = weft_proto::Writer::default();
        weft_proto::Wire::encode(&p, &mut w);
        let back =
            <AccessPattern as weft_proto::Wire>::decode(&mut weft_proto::Reader::new(&w.bytes)).unwrap();
        assert_eq!(back, p);
        assert!(assemble(&[&[1, 2, 3][..]]).is_err());
    }
}
