//! Byte extents inside one block: a set of disjoint, sorted byte ranges, used for a
//! cached block's valid bytes and its dirty bytes.
//!
//! Bounded: the set is a sorted list of ranges while it has at most
//! [`Extents::list_max`] of them (at most [`EXTENTS_LIST_MAX`], and never more than one
//! range per 64 bytes of block), and a bitmap of one bit per byte of the block beyond
//! that. The list limit is chosen so that the list never takes more memory than the
//! bitmap would, so a block's extents never take more than `block_len / 8` bytes
//! whatever the access pattern (1-byte elements of a CYCLIC(1) view included), no
//! insert ever fails, and no caller has to write back or fetch to make room. A bitmap
//! turns back into a list when it becomes full or empty (the common end states: a block
//! written whole, or written back).

use std::ops::Range;

/// Most ranges a list holds before the set turns into a bitmap.
pub const EXTENTS_LIST_MAX: usize = 4096;

/// A set of byte offsets in `[0, block_len)`, as maximal disjoint ranges.
#[derive(Clone, Debug)]
pub struct Extents {
    block_len: u32,
    /// Bytes in the set.
    bytes: u32,
    repr: Repr,
}

#[derive(Clone, Debug)]
enum Repr {
    /// Sorted, disjoint, non-adjacent, non-empty `(start, end)` ranges.
    List(Vec<(u32, u32)>),
    /// One bit per byte; bits past `block_len` are zero.
    Bitmap(Box<[u64]>),
}

impl Extents {
    /// The empty set for a block of `block_len` bytes.
    pub fn new(block_len: u32) -> Self {
        Extents {
            block_len,
            bytes: 0,
            repr: Repr::List(Vec::new()),
        }
    }

    /// The whole block.
    pub fn full(block_len: u32) -> Self {
        let mut e = Extents::new(block_len);
        e.insert(0..block_len);
        e
    }

    /// How many ranges the list form holds at most for a block of `block_len` bytes.
    pub fn list_max(block_len: u32) -> usize {
        EXTENTS_LIST_MAX.min((block_len as usize / 64).max(1))
    }

    /// Heap bytes of the bitmap form: the most a set for this block ever takes.
    pub fn heap_bytes_max(block_len: u32) -> usize {
        (block_len as usize).div_ceil(64) * 8
    }

    pub fn block_len(&self) -> u32 {
        self.block_len
    }

    /// Number of bytes in the set.
    pub fn bytes(&self) -> u32 {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// Whether the set is the whole block (false for a 0-byte block).
    pub fn is_full(&self) -> bool {
        self.block_len > 0 && self.bytes == self.block_len
    }

    /// Heap memory the set holds now.
    pub fn heap_bytes(&self) -> usize {
        match &self.repr {
            Repr::List(v) => v.capacity() * 8,
            Repr::Bitmap(b) => b.len() * 8,
        }
    }

    /// The most heap memory one more insert or remove can add.
    pub fn growth_bytes_max(&self) -> usize {
        Self::heap_bytes_max(self.block_len).saturating_sub(self.heap_bytes())
    }

    /// Whether the set is in bitmap form (for tests and statistics).
    pub fn is_bitmap(&self) -> bool {
        matches!(self.repr, Repr::Bitmap(_))
    }

    fn check(&self, r: &Range<u32>) {
        assert!(
            r.start <= r.end && r.end <= self.block_len,
            "range {r:?} outside a block of {} bytes",
            self.block_len
        );
    }

    /// Adds `range` (merging with what it touches). Panics if `range` is not inside the
    /// block: callers check ranges taken from requests first.
    pub fn insert(&mut self, range: Range<u32>) {
        self.check(&range);
        let (s, e) = (range.start, range.end);
        if s == e {
            return;
        }
        let list_max = Self::list_max(self.block_len);
        if let Repr::List(v) = &mut self.repr {
            let i = v.partition_point(|x| x.1 < s);
            let j = v.partition_point(|x| x.0 <= e);
            if i < j {
                let (ns, ne) = (s.min(v[i].0), e.max(v[j - 1].1));
                let before: u32 = v[i..j].iter().map(|x| x.1 - x.0).sum();
                self.bytes += (ne - ns) - before;
                v.splice(i..j, [(ns, ne)]);
                return;
            }
            if v.len() < list_max {
                grow_for_one(v, list_max);
                v.insert(i, (s, e));
                self.bytes += e - s;
                return;
            }
            self.make_bitmap();
        }
        if let Repr::Bitmap(b) = &mut self.repr {
            self.bytes += bitmap_set(b, s, e);
            self.settle();
        }
    }

    /// Adds every range of `ranges`, which must be sorted by start (a request's pieces in
    /// one block, in file order): the same set as inserting them one by one, in one
    /// pass over the list (or straight into the bitmap), however many there are.
    /// Panics if a range is not inside the block or the ranges are not sorted.
    pub fn insert_sorted(&mut self, ranges: &[Range<u32>]) {
        for r in ranges {
            self.check(r);
        }
        assert!(
            ranges.windows(2).all(|w| w[0].start <= w[1].start),
            "insert_sorted needs ranges sorted by start"
        );
        let list_max = Self::list_max(self.block_len);
        if let Repr::List(v) = &mut self.repr {
            if v.len() + ranges.len() <= list_max {
                let mut merged: Vec<(u32, u32)> = Vec::with_capacity(v.len() + ranges.len());
                let mut push = |(s, e): (u32, u32)| {
                    if s == e {
                        return;
                    }
                    match merged.last_mut() {
                        Some(last) if last.1 >= s => last.1 = last.1.max(e),
                        _ => merged.push((s, e)),
                    }
                };
                let (mut i, mut j) = (0, 0);
                while i < v.len() || j < ranges.len() {
                    let take_old = j == ranges.len() || (i < v.len() && v[i].0 <= ranges[j].start);
                    if take_old {
                        push(v[i]);
                        i += 1;
                    } else {
                        push((ranges[j].start, ranges[j].end));
                        j += 1;
                    }
                }
                self.bytes = merged.iter().map(|x| x.1 - x.0).sum();
                *v = merged;
                return;
            }
            self.make_bitmap();
        }
        if let Repr::Bitmap(b) = &mut self.repr {
            for r in ranges {
                if r.start < r.end {
                    self.bytes += bitmap_set(b, r.start, r.end);
                }
            }
            self.settle();
        }
    }

    /// Removes `range` from the set. Panics if `range` is not inside the block.
    pub fn remove(&mut self, range: Range<u32>) {
        self.check(&range);
        let (s, e) = (range.start, range.end);
        if s == e || self.bytes == 0 {
            return;
        }
        let list_max = Self::list_max(self.block_len);
        if let Repr::List(v) = &mut self.repr {
            let i = v.partition_point(|x| x.1 <= s);
            let j = v.partition_point(|x| x.0 < e);
            if i >= j {
                return;
            }
            let left = (v[i].0 < s).then_some((v[i].0, s));
            let right = (v[j - 1].1 > e).then_some((e, v[j - 1].1));
            let remnants = left.into_iter().chain(right);
            let kept = remnants.clone().count();
            if v.len() - (j - i) + kept <= list_max {
                let before: u32 = v[i..j].iter().map(|x| x.1 - x.0).sum();
                let after: u32 = remnants.clone().map(|x| x.1 - x.0).sum();
                self.bytes -= before - after;
                if kept > j - i {
                    grow_for_one(v, list_max);
                }
                v.splice(i..j, remnants);
                return;
            }
            self.make_bitmap();
        }
        if let Repr::Bitmap(b) = &mut self.repr {
            self.bytes -= bitmap_clear(b, s, e);
            self.settle();
        }
    }

    /// Empties the set.
    pub fn clear(&mut self) {
        self.bytes = 0;
        self.repr = Repr::List(Vec::new());
    }

    /// Whether every byte of `range` is in the set (true for an empty range).
    pub fn covers(&self, range: Range<u32>) -> bool {
        self.check(&range);
        let (s, e) = (range.start, range.end);
        if s == e {
            return true;
        }
        match &self.repr {
            Repr::List(v) => {
                let k = v.partition_point(|x| x.0 <= s);
                k > 0 && v[k - 1].1 >= e
            }
            Repr::Bitmap(b) => bitmap_next(b, s, e, false) == e,
        }
    }

    /// The parts of `range` not in the set, in order.
    pub fn missing(&self, range: Range<u32>) -> Vec<Range<u32>> {
        self.check(&range);
        let (s, e) = (range.start, range.end);
        let mut gaps = Vec::new();
        let mut at = s;
        match &self.repr {
            Repr::List(v) => {
                let mut i = v.partition_point(|x| x.1 <= s);
                while i < v.len() && v[i].0 < e && at < e {
                    if v[i].0 > at {
                        gaps.push(at..v[i].0);
                    }
                    at = at.max(v[i].1);
                    i += 1;
                }
                if at < e {
                    gaps.push(at..e);
                }
            }
            Repr::Bitmap(b) => {
                while at < e {
                    let gap = bitmap_next(b, at, e, false);
                    if gap == e {
                        break;
                    }
                    let end = bitmap_next(b, gap, e, true);
                    gaps.push(gap..end);
                    at = end;
                }
            }
        }
        gaps
    }

    /// The ranges of the set, in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            extents: self,
            index: 0,
            at: 0,
        }
    }

    /// The ranges of the set as a vector.
    pub fn to_vec(&self) -> Vec<Range<u32>> {
        self.iter().collect()
    }

    fn make_bitmap(&mut self) {
        let mut b = vec![0u64; self.block_len.div_ceil(64) as usize].into_boxed_slice();
        if let Repr::List(v) = &self.repr {
            for &(s, e) in v {
                bitmap_set(&mut b, s, e);
            }
        }
        self.repr = Repr::Bitmap(b);
    }

    /// A bitmap that became full or empty goes back to the (tiny) list form.
    fn settle(&mut self) {
        if self.bytes == 0 {
            self.repr = Repr::List(Vec::new());
        } else if self.bytes == self.block_len {
            self.repr = Repr::List(vec![(0, self.block_len)]);
        }
    }
}

/// Makes room for one more range, growing by doubling but never past `list_max`, so the
/// list's capacity stays within the bitmap's size.
fn grow_for_one(v: &mut Vec<(u32, u32)>, list_max: usize) {
    if v.len() == v.capacity() {
        let target = (v.capacity() * 2).max(4).min(list_max);
        v.reserve_exact(target.max(v.len() + 1) - v.len());
    }
}

/// Bits `[lo, hi)` of word `w`, for the part of `[s, e)` inside that word.
fn word_mask(w: usize, s: u32, e: u32) -> u64 {
    let base = (w * 64) as u32;
    let lo = s.max(base) - base;
    let hi = e.min(base + 64) - base;
    if hi - lo == 64 {
        !0
    } else {
        ((1u64 << (hi - lo)) - 1) << lo
    }
}

/// Sets `[s, e)`; returns how many bits were newly set.
fn bitmap_set(b: &mut [u64], s: u32, e: u32) -> u32 {
    let first = (s / 64) as usize;
    let mut added = 0;
    for (w, word) in b[first..=((e - 1) / 64) as usize].iter_mut().enumerate() {
        let m = word_mask(first + w, s, e);
        added += (m & !*word).count_ones();
        *word |= m;
    }
    added
}

/// Clears `[s, e)`; returns how many bits were cleared.
fn bitmap_clear(b: &mut [u64], s: u32, e: u32) -> u32 {
    let first = (s / 64) as usize;
    let mut removed = 0;
    for (w, word) in b[first..=((e - 1) / 64) as usize].iter_mut().enumerate() {
        let m = word_mask(first + w, s, e);
        removed += (m & *word).count_ones();
        *word &= !m;
    }
    removed
}

/// First offset in `[from, limit)` whose bit equals `value`, or `limit`.
fn bitmap_next(b: &[u64], from: u32, limit: u32, value: bool) -> u32 {
    if from >= limit {
        return limit;
    }
    let mut w = (from / 64) as usize;
    let flip = if value { 0 } else { !0 };
    let mut word = (b[w] ^ flip) & (!0u64 << (from % 64));
    loop {
        if word != 0 {
            return ((w * 64) as u32 + word.trailing_zeros()).min(limit);
        }
        w += 1;
        if (w * 64) as u32 >= limit {
            return limit;
        }
        word = b[w] ^ flip;
    }
}

/// Iterator over the ranges of an [`Extents`], in order.
pub struct Iter<'a> {
    extents: &'a Extents,
    index: usize,
    at: u32,
}

impl Iterator for Iter<'_> {
    type Item = Range<u32>;

    fn next(&mut self) -> Option<Range<u32>> {
        match &self.extents.repr {
            Repr::List(v) => {
                let &(s, e) = v.get(self.index)?;
                self.index += 1;
                Some(s..e)
            }
            Repr::Bitmap(b) => {
                let len = self.extents.block_len;
                let s = bitmap_next(b, self.at, len, true);
                if s == len {
                    self.at = len;
                    return None;
                }
                let e = bitmap_next(b, s, len, false);
                self.at = e;
                Some(s..e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Maximal runs of `true` in a byte map.
    fn runs(model: &[bool], range: Range<u32>, value: bool) -> Vec<Range<u32>> {
        let mut out: Vec<Range<u32>> = Vec::new();
        for i in range {
            if model[i as usize] == value {
                match out.last_mut() {
                    Some(r) if r.end == i => r.end = i + 1,
                    _ => out.push(i..i + 1),
                }
            }
        }
        out
    }

    fn check_against(e: &Extents, model: &[bool]) -> Result<(), TestCaseError> {
        let len = model.len() as u32;
        prop_assert_eq!(e.to_vec(), runs(model, 0..len, true));
        prop_assert_eq!(e.bytes() as usize, model.iter().filter(|&&b| b).count());
        prop_assert_eq!(e.is_full(), len > 0 && model.iter().all(|&b| b));
        prop_assert!(
            e.heap_bytes() <= Extents::heap_bytes_max(len),
            "{} > bitmap",
            e.heap_bytes()
        );
        if let Repr::List(v) = &e.repr {
            prop_assert!(v.len() <= Extents::list_max(len));
            for w in v.windows(2) {
                prop_assert!(w[0].1 < w[1].0, "ranges touch or overlap: {:?}", w);
            }
            prop_assert!(v.iter().all(|x| x.0 < x.1));
        }
        Ok(())
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32, u32),
        /// Several ranges at once (sorted by start when applied).
        InsertSorted(Vec<(u32, u32)>),
        Remove(u32, u32),
        Clear,
    }

    fn ops(len: u32) -> impl Strategy<Value = Vec<Op>> {
        let range = (0..=len, 0..=len).prop_map(|(a, b)| (a.min(b), a.max(b)));
        let short = (0..len.max(1), 1u32..4).prop_map(move |(a, n)| (a.min(len), (a + n).min(len)));
        let op = prop_oneof![
            6 => range.clone().prop_map(|(a, b)| Op::Insert(a, b)),
            6 => short.clone().prop_map(|(a, b)| Op::Insert(a, b)),
            3 => prop::collection::vec(short.clone(), 0..12).prop_map(Op::InsertSorted),
            3 => range.prop_map(|(a, b)| Op::Remove(a, b)),
            3 => short.prop_map(|(a, b)| Op::Remove(a, b)),
            1 => Just(Op::Clear),
        ];
        prop::collection::vec(op, 0..60)
    }

    #[test]
    fn strided_bytes_fall_back_to_a_bitmap_and_return_when_full() {
        let mut e = Extents::new(4096);
        for i in (0..4096).step_by(2) {
            e.insert(i..i + 1);
        }
        assert!(e.is_bitmap());
        assert_eq!(e.bytes(), 2048);
        assert_eq!(e.heap_bytes(), 512);
        assert_eq!(e.missing(10..16), vec![11..12, 13..14, 15..16]);
        for i in (1..4096).step_by(2) {
            e.insert(i..i + 1);
        }
        assert!(!e.is_bitmap());
        assert_eq!(e.to_vec(), vec![0..4096]);
        e.remove(100..200);
        assert_eq!(e.to_vec(), vec![0..100, 200..4096]);
        assert!(e.covers(0..100) && e.covers(300..4096) && !e.covers(99..201));
    }

    proptest! {
        /// Every operation agrees with a byte map, in both representations (small blocks
        /// allow only a few list ranges, so random ops cross between them often).
        #[test]
        fn extents_match_a_byte_map((len, ops) in (1u32..300).prop_flat_map(|len| (Just(len), ops(len))),
                                    probes in prop::collection::vec((0u32..300, 0u32..300), 8)) {
            let mut e = Extents::new(len);
            let mut model = vec![false; len as usize];
            for op in ops {
                match op {
                    Op::Insert(a, b) => {
                        e.insert(a..b);
                        model[a as usize..b as usize].iter_mut().for_each(|x| *x = true);
                    }
                    Op::InsertSorted(mut ranges) => {
                        ranges.sort();
                        let ranges: Vec<Range<u32>> = ranges.into_iter().map(|(a, b)| a..b).collect();
                        e.insert_sorted(&ranges);
                        for r in ranges {
                            model[r.start as usize..r.end as usize].iter_mut().for_each(|x| *x = true);
                        }
                    }
                    Op::Remove(a, b) => {
                        e.remove(a..b);
                        model[a as usize..b as usize].iter_mut().for_each(|x| *x = false);
                    }
                    Op::Clear => {
                        e.clear();
                        model.iter_mut().for_each(|x| *x = false);
                    }
                }
                check_against(&e, &model)?;
                for &(a, b) in &probes {
                    let (a, b) = (a.min(b).min(len), a.max(b).min(len));
                    prop_assert_eq!(e.covers(a..b), model[a as usize..b as usize].iter().all(|&x| x));
                    prop_assert_eq!(e.missing(a..b), runs(&model, a..b, false));
                }
            }
        }
    }
}
