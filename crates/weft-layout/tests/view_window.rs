//! Gathering and scattering view bytes through a buffer that holds a stretch of the
//! file, against the plain reference (each piece copied on its own), for random views,
//! intervals and window placements; bytes of the window outside the view stay as they
//! were; an interval reaching outside the window is refused.

use proptest::prelude::*;
use weft_layout::view::{Datatype, Distribution, Order, View};

fn check(view: &View, start: u64, len: u64, before: u64, after: u64) {
    let (first, end) = view.file_extent(start, len).unwrap();
    let window_offset = first.saturating_sub(before);
    let window_len = (end - window_offset + after) as usize;
    let window: Vec<u8> = (0..window_len).map(|i| (i * 7 + 3) as u8).collect();
    // Reference: piece by piece.
    let mut expected = vec![0u8; len as usize];
    for p in view.pieces(start, len).unwrap() {
        let from = (p.file_offset - window_offset) as usize;
        let to = (p.view_offset - start) as usize;
        expected[to..to + p.len as usize].copy_from_slice(&window[from..from + p.len as usize]);
    }
    let mut got = vec![0xEEu8; len as usize];
    view.gather_window(start, window_offset, &window, &mut got)
        .unwrap();
    assert_eq!(got, expected);

    let data: Vec<u8> = (0..len).map(|i| (i * 13 + 1) as u8).collect();
    let mut scattered = window.clone();
    view.scatter_window(start, &data, window_offset, &mut scattered)
        .unwrap();
    let mut reference = window.clone();
    for p in view.pieces(start, len).unwrap() {
        let to = (p.file_offset - window_offset) as usize;
        let from = (p.view_offset - start) as usize;
        reference[to..to + p.len as usize].copy_from_slice(&data[from..from + p.len as usize]);
    }
    assert_eq!(scattered, reference);

    // One byte short at either end: refused, nothing touched.
    if window_offset == first && first > 0 {
        let mut short = window[1..].to_vec();
        let copy = short.clone();
        assert!(view
            .scatter_window(start, &data, window_offset + 1, &mut short)
            .is_err());
        assert_eq!(short, copy);
    }
    if after == 0 {
        assert!(view
            .gather_window(start, window_offset, &window[..window_len - 1], &mut got)
            .is_err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn darray_windows(
        rank in 0u64..4,
        k in 1u64..20,
        rows in 1u64..60,
        cols in 1u64..60,
        element in prop::sample::select(vec![1u64, 3, 8, 16, 32]),
        displacement in 0u64..500,
        start in 0u64..400,
        len in 1u64..3000,
        before in 0u64..3,
        after in 0u64..3,
    ) {
        let t = Datatype::darray(4, rank, &[rows, cols], &[Distribution::Cyclic(Some(k)); 2], &[2, 2], Order::C, &Datatype::bytes(element).unwrap()).unwrap();
        prop_assume!(t.size_bytes() > 0);
        let view = View::new(displacement, t).unwrap();
        check(&view, start, len.min(4 * view.filetype().size_bytes()), before, after);
    }

    #[test]
    fn partition_and_indexed_windows(
        block in 1u64..80,
        gap in 0u64..200,
        offset in 0u64..1000,
        blocks in prop::collection::vec((1u64..20, 0u64..30), 1..6),
        start in 0u64..500,
        len in 1u64..4000,
        before in 0u64..2,
        after in 0u64..2,
    ) {
        check(&View::partition(offset, block, block + gap).unwrap(), start, len, before, after);
        let mut at = 0i64;
        let (mut lens, mut displacements) = (Vec::new(), Vec::new());
        for (n, skip) in blocks {
            at += skip as i64;
            lens.push(n);
            displacements.push(at);
            at += n as i64;
        }
        let t = Datatype::hindexed(&lens, &displacements, &Datatype::bytes(1).unwrap()).unwrap();
        let t = Datatype::resized(&t, 0, at + 5).unwrap();
        check(&View::new(offset, t).unwrap(), start, len, before, after);
    }
}

#[test]
fn an_empty_interval_moves_nothing() {
    let view = View::partition(0, 4, 8).unwrap();
    view.gather_window(3, 0, &[], &mut []).unwrap();
    assert!(view.file_extent(3, 0).is_err());
}
