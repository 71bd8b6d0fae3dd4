//! Runs: a list of file ranges stored compactly as runs of equal, evenly strided
//! ranges `(offset, len, stride, count)`. The pieces of a regular noncontiguous access
//! (a vector type, a tile's rows, an interleaved pattern) fold into one run each, so a
//! trace of millions of pieces stays small.

use weft_layout::stripe::FILE_OFFSET_MAX;

/// `count` ranges of `len` bytes starting at `offset`, `offset + stride`, ... .
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Run {
    pub offset: u64,
    pub len: u64,
    /// Distance between range starts (0 when `count == 1`).
    pub stride: u64,
    pub count: u64,
}

impl Run {
    /// A run, if it is one: at least one range of at least one byte, ranges that do not
    /// overlap (`stride >= len`), and the last byte within the largest file offset.
    pub fn new(offset: u64, len: u64, stride: u64, count: u64) -> Option<Run> {
        if len == 0 || count == 0 || (count > 1 && stride < len) {
            return None;
        }
        let stride = if count == 1 { 0 } else { stride };
        let last = stride.checked_mul(count - 1)?.checked_add(offset)?;
        let end = last.checked_add(len)?;
        if end > FILE_OFFSET_MAX {
            return None;
        }
        Some(Run {
            offset,
            len,
            stride,
            count,
        })
    }

    /// Bytes in the run.
    pub fn bytes(&self) -> u64 {
        self.len * self.count
    }

    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.offset + self.stride * (self.count - 1) + self.len
    }

    /// The run's ranges, (offset, len), in order.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        (0..self.count).map(move |i| (self.offset + i * self.stride, self.len))
    }
}

/// Folds ranges into runs as they come (empty ranges are dropped).
#[derive(Clone, Debug, Default)]
pub struct RunsBuilder {
    runs: Vec<Run>,
}

impl RunsBuilder {
    pub fn push(&mut self, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        if let Some(last) = self.runs.last_mut() {
            if last.len == len {
                if last.count == 1 && offset >= last.offset + len {
                    last.stride = offset - last.offset;
                    last.count = 2;
                    return;
                }
                if last.count > 1 && Some(offset) == last.offset.checked_add(last.stride * last.count) {
                    last.count += 1;
                    return;
                }
            }
        }
        self.runs.push(Run {
            offset,
            len,
            stride: 0,
            count: 1,
        });
    }

    pub fn len(&self) -> usize {
        self.runs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    pub fn finish(self) -> Vec<Run> {
        self.runs
    }
}

/// The runs of `ranges`.
pub fn fold(ranges: impl IntoIterator<Item = (u64, u64)>) -> Vec<Run> {
    let mut b = RunsBuilder::default();
    for (offset, len) in ranges {
        b.push(offset, len);
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn strided_pieces_fold_into_one_run() {
        let ranges: Vec<(u64, u64)> = (0..1000).map(|i| (4096 + i * 15360, 8192)).collect();
        let runs = fold(ranges.iter().copied());
        assert_eq!(runs, vec![Run::new(4096, 8192, 15360, 1000).unwrap()]);
        assert_eq!(runs[0].ranges().collect::<Vec<_>>(), ranges);
        assert_eq!(runs[0].bytes(), 8192 * 1000);
        assert_eq!(runs[0].end(), 4096 + 999 * 15360 + 8192);
    }

    #[test]
    fn bad_runs_are_refused() {
        assert!(Run::new(0, 0, 0, 1).is_none());
        assert!(Run::new(0, 1, 0, 0).is_none());
        assert!(Run::new(0, 10, 5, 2).is_none());
        assert!(Run::new(FILE_OFFSET_MAX, 1, 0, 1).is_none());
        assert!(Run::new(0, 1, u64::MAX, 3).is_none());
        assert_eq!(Run::new(7, 3, 99, 1).unwrap().stride, 0);
    }

    proptest! {
        /// Folding keeps every nonempty range, in order.
        #[test]
        fn fold_keeps_the_ranges(ranges in prop::collection::vec((0u64..1000, 0u64..40), 0..60)) {
            let runs = fold(ranges.iter().copied());
            let back: Vec<(u64, u64)> = runs.iter().flat_map(|r| r.ranges().collect::<Vec<_>>()).collect();
            let nonempty: Vec<(u64, u64)> = ranges.into_iter().filter(|r| r.1 > 0).collect();
            prop_assert_eq!(back, nonempty);
            for r in runs {
                prop_assert_eq!(Run::new(r.offset, r.len, r.stride, r.count), Some(r));
            }
        }
    }
}
