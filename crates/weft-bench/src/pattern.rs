//! The data benchmarks write and check: every 8-byte word is a hash of its file
//! offset and a seed naming the writer (rank), the run and the method, so that data
//! from another process, another run or the other method never passes as correct.

/// A seed for one writer in one run.
pub fn seed(rank: u32, run: u32, method: u32) -> u64 {
    splitmix64((u64::from(rank) << 40) ^ (u64::from(run) << 8) ^ u64::from(method))
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn word(seed: u64, file_offset: u64) -> [u8; 8] {
    splitmix64(seed ^ file_offset).to_le_bytes()
}

/// Fills `buf`, which lands at `file_offset`, with the pattern of `seed`.
pub fn fill(buf: &mut [u8], file_offset: u64, seed: u64) {
    assert!(
        file_offset & 7 == 0 && buf.len() & 7 == 0,
        "pattern blocks are word aligned"
    );
    for (k, chunk) in buf.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&word(seed, file_offset + 8 * k as u64));
    }
}

/// The file offset of the first byte of `got` that differs from `expected`, with
/// both bytes. Compares 1 MiB at a time so that the common case runs at memcmp speed.
pub fn first_mismatch(expected: &[u8], got: &[u8], file_offset: u64) -> Option<(u64, u8, u8)> {
    assert_eq!(expected.len(), got.len());
    const STEP: usize = 1 << 20;
    let mut at = 0;
    while at < expected.len() {
        let end = (at + STEP).min(expected.len());
        if expected[at..end] != got[at..end] {
            let k = (at..end).find(|&k| expected[k] != got[k]).unwrap();
            return Some((file_offset + k as u64, expected[k], got[k]));
        }
        at = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_depends_on_offset_and_seed_and_mismatches_are_located() {
        let mut a = vec![0u8; 4096];
        let mut b = vec![0u8; 4096];
        fill(&mut a, 1 << 20, seed(0, 0, 0));
        fill(&mut b, 1 << 20, seed(1, 0, 0));
        assert_ne!(a, b, "another rank writes other data");
        fill(&mut b, 1 << 20, seed(0, 1, 0));
        assert_ne!(a, b, "another run writes other data");
        fill(&mut b, 1 << 20, seed(0, 0, 0));
        assert_eq!(a, b, "the pattern is a function of its inputs");
        // A block filled from a later offset matches the tail of a larger one.
        let mut tail = vec![0u8; 1024];
        fill(&mut tail, (1 << 20) + 3072, seed(0, 0, 0));
        assert_eq!(&a[3072..], &tail[..]);
        assert_eq!(first_mismatch(&a, &b, 1 << 20), None);
        b[1234] ^= 0xFF;
        assert_eq!(
            first_mismatch(&a, &b, 1 << 20),
            Some(((1 << 20) + 1234, a[1234], b[1234]))
        );
    }
}
