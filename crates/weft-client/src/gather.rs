//! Gathering one server's pieces of a noncontiguous write from the caller's buffer into
//! the bulk data of one request. Large pieces travel straight from the caller's buffer
//! (the kernel gathers them, writev); small ones are copied into a staging buffer first,
//! since one iovec per 8-byte piece would cost more than the copy.

/// Pieces at least this long are sent from the caller's buffer without a copy.
pub(crate) const SLICE_BYTES_MIN: usize = 16 * 1024;

#[derive(Debug, Clone, Copy)]
enum Part {
    /// `len` bytes at `at` of the caller's buffer.
    Caller { at: usize, len: usize },
    /// `len` bytes at `at` of the staging buffer.
    Staged { at: usize, len: usize },
}

/// The bulk data of one request being assembled; reused from request to request.
#[derive(Default)]
pub(crate) struct Gather {
    parts: Vec<Part>,
    staging: Vec<u8>,
}

impl Gather {
    pub(crate) fn with_capacity(bytes: usize) -> Gather {
        Gather {
            parts: Vec::new(),
            staging: Vec::with_capacity(bytes),
        }
    }

    pub(crate) fn clear(&mut self) {
        self.parts.clear();
        self.staging.clear();
    }

    /// Appends `source[at..at + len]` to the request's data.
    #[inline]
    pub(crate) fn push(&mut self, source: &[u8], at: usize, len: usize) {
        if len >= SLICE_BYTES_MIN {
            self.parts.push(Part::Caller { at, len });
            return;
        }
        let start = self.staging.len();
        self.staging.extend_from_slice(&source[at..at + len]);
        match self.parts.last_mut() {
            Some(Part::Staged { len: last, .. }) => *last += len,
            _ => self.parts.push(Part::Staged { at: start, len }),
        }
    }

    /// The request's data as slices, in order, for a vectored send.
    pub(crate) fn slices<'a>(&'a self, source: &'a [u8]) -> Vec<&'a [u8]> {
        self.parts
            .iter()
            .map(|part| match *part {
                Part::Caller { at, len } => &source[at..at + len],
                Part::Staged { at, len } => &self.staging[at..at + len],
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_pieces_are_staged_and_large_ones_borrowed_in_order() {
        let source: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut gather = Gather::default();
        let pieces = [(10, 8), (30, 8), (1000, 20_000), (50_000, 3), (60_000, 17_000)];
        for round in 0..2 {
            gather.clear();
            let mut expected = Vec::new();
            for &(at, len) in &pieces {
                gather.push(&source, at, len);
                expected.extend_from_slice(&source[at..at + len]);
            }
            let slices = gather.slices(&source);
            // Two staged pieces merge; each large piece is its own slice.
            assert_eq!(slices.len(), 4, "round {round}");
            assert_eq!(slices.concat(), expected);
        }
    }
}
