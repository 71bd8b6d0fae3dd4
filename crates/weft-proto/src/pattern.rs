//! The original access pattern of one collective read, as it travels to the cache
//! managers with the aggregated requests (collective-I/O-aware caching, request
//! `ViaCacheAware`): every process's request of the call as a view interval (the views
//! the servers already understand, never byte lists), in time order.
//!
//! Wire form: `call:u64 view_count:u32 (view_wire:bytes)* ref_count:u32 ref*`, with
//! `ref := rank:u32 time_ns:u64 view:u32 view_offset:u64 len:u64`. Decoding checks
//! every limit, that each reference names a view of the pattern and fits the file's
//! offsets, and that references come in time order (ties by rank).

use std::sync::Arc;

use weft_layout::view::View;

use crate::codec::{DecodeError, Reader, Wire, Writer};
use crate::msg::VIEW_BYTES_MAX;

/// Most distinct views in one pattern (a process has one view per call; equal views
/// are sent once).
pub const PATTERN_VIEWS_MAX: usize = 4096;
/// Most references in one pattern (one per process of the call).
pub const PATTERN_REFS_MAX: usize = 65_536;
/// Largest encoded pattern a client attaches: bigger ones are not sent (the call is
/// then cached the ordinary way), so a request stays well within the message limit.
pub const PATTERN_BYTES_MAX: usize = 256 << 10;

/// One process's request in a collective call: view bytes `[view_offset, +len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PatternRef {
    /// Rank in the file's communicator.
    pub rank: u32,
    /// When the process made the call: wall-clock nanoseconds since the Unix epoch.
    pub time_ns: u64,
    /// Index into [`AccessPattern::views`].
    pub view: u32,
    pub view_offset: u64,
    pub len: u64,
}

/// The processes' requests of one collective read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessPattern {
    /// Names the call: the same in every request of the call from every aggregator,
    /// different for the file's other calls. A manager applies a call's references
    /// once, whichever of its requests arrives first.
    pub call: u64,
    pub views: Vec<Arc<View>>,
    /// In time order, ties by rank.
    pub refs: Vec<PatternRef>,
}

impl AccessPattern {
    /// The encoded size.
    pub fn encoded_len(&self) -> usize {
        let mut w = Writer::default();
        self.encode(&mut w);
        w.bytes.len()
    }
}

impl Wire for AccessPattern {
    fn encode(&self, w: &mut Writer) {
        w.u64(self.call);
        w.u32(self.views.len() as u32);
        for v in &self.views {
            w.bytes(&v.encode());
        }
        w.u32(self.refs.len() as u32);
        for r in &self.refs {
            w.u32(r.rank);
            w.u64(r.time_ns);
            w.u32(r.view);
            w.u64(r.view_offset);
            w.u64(r.len);
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let call = r.u64()?;
        let nviews = r.u32()? as usize;
        if nviews > PATTERN_VIEWS_MAX {
            return Err(DecodeError::TooLarge {
                what: "pattern views",
                len: nviews as u64,
                max: PATTERN_VIEWS_MAX as u64,
            });
        }
        // Views are at least a few bytes each: nothing is reserved beyond the input.
        let mut views = Vec::with_capacity(nviews.min(r.remaining()));
        for _ in 0..nviews {
            let bytes = r.bytes_max(VIEW_BYTES_MAX)?;
            let view = View::decode(bytes).map_err(|e| DecodeError::View(e.to_string()))?;
            views.push(Arc::new(view));
        }
        let nrefs = r.u32()? as usize;
        if nrefs > PATTERN_REFS_MAX {
            return Err(DecodeError::TooLarge {
                what: "pattern references",
                len: nrefs as u64,
                max: PATTERN_REFS_MAX as u64,
            });
        }
        const REF_BYTES: usize = 32;
        let mut refs = Vec::with_capacity(nrefs.min(r.remaining() / REF_BYTES));
        for _ in 0..nrefs {
            let x = PatternRef {
                rank: r.u32()?,
                time_ns: r.u64()?,
                view: r.u32()?,
                view_offset: r.u64()?,
                len: r.u64()?,
            };
            if x.view as usize >= views.len() {
                return Err(DecodeError::Invalid {
                    what: "pattern reference's view",
                    value: u64::from(x.view),
                });
            }
            views[x.view as usize]
                .pieces(x.view_offset, x.len)
                .map_err(|e| DecodeError::View(e.to_string()))?;
            if let Some(last) = refs.last() {
                let last: &PatternRef = last;
                if (x.time_ns, x.rank) < (last.time_ns, last.rank) {
                    return Err(DecodeError::Invalid {
                        what: "pattern reference order (time, then rank)",
                        value: x.time_ns,
                    });
                }
            }
            refs.push(x);
        }
        Ok(AccessPattern { call, views, refs })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use weft_layout::view::Datatype;

    pub(crate) fn pattern() -> AccessPattern {
        let tile = Datatype::subarray(
            &[64, 64],
            &[32, 32],
            &[16, 0],
            weft_layout::view::Order::C,
            &Datatype::bytes(8).unwrap(),
        )
        .unwrap();
        AccessPattern {
            call: 0xfeed,
            views: vec![
                Arc::new(View::new(0, tile).unwrap()),
                Arc::new(View::contiguous()),
            ],
            refs: vec![
                PatternRef {
                    rank: 3,
                    time_ns: 100,
                    view: 0,
                    view_offset: 0,
                    len: 8192,
                },
                PatternRef {
                    rank: 0,
                    time_ns: 105,
                    view: 1,
                    view_offset: 4096,
                    len: 100,
                },
                PatternRef {
                    rank: 1,
                    time_ns: 105,
                    view: 1,
                    view_offset: 0,
                    len: 10,
                },
            ],
        }
    }

    fn encode(p: &AccessPattern) -> Vec<u8> {
        let mut w = Writer::default();
        p.encode(&mut w);
        w.bytes
    }

    fn decode(bytes: &[u8]) -> Result<AccessPattern, DecodeError> {
        let mut r = Reader::new(bytes);
        let p = AccessPattern::decode(&mut r)?;
        r.finish()?;
        Ok(p)
    }

    #[test]
    fn patterns_round_trip() {
        let p = pattern();
        let bytes = encode(&p);
        assert_eq!(p.encoded_len(), bytes.len());
        assert_eq!(decode(&bytes).unwrap(), p);
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn bad_patterns_are_refused() {
        let mut p = pattern();
        p.refs[2].view = 2;
        assert!(matches!(decode(&encode(&p)), Err(DecodeError::Invalid { .. })));
        let mut p = pattern();
        p.refs.swap(1, 2);
        assert!(matches!(decode(&encode(&p)), Err(DecodeError::Invalid { .. })));
        let mut p = pattern();
        p.refs[0].view_offset = u64::MAX - 5;
        assert!(matches!(decode(&encode(&p)), Err(DecodeError::View(_))));
        // Counts past the limits are refused before anything is allocated for them.
        let mut w = Writer::default();
        w.u64(1);
        w.u32(PATTERN_VIEWS_MAX as u32 + 1);
        assert!(matches!(decode(&w.bytes), Err(DecodeError::TooLarge { .. })));
        let mut w = Writer::default();
        w.u64(1);
        w.u32(0);
        w.u32(u32::MAX);
        assert!(matches!(decode(&w.bytes), Err(DecodeError::TooLarge { .. })));
        // A view that is not one.
        let mut w = Writer::default();
        w.u64(1);
        w.u32(1);
        w.bytes(&[1, 2, 3]);
        w.u32(0);
        assert!(matches!(decode(&w.bytes), Err(DecodeError::View(_))));
    }
}
