//! One server's share of a view interval as per-stripe slices, against the per-piece
//! iteration it replaces: byte for byte the same view offsets, file offsets and local
//! offsets, in the same order, for random views, layouts and intervals; sparse views
//! whose stripes are mostly empty are crossed without visiting every stripe.

use proptest::prelude::*;
use weft_layout::view::{Datatype, Distribution, Order, View};
use weft_layout::{Layout, ServerId};

fn layout(stripe_size_bytes: u64, count: u32) -> Layout {
    Layout {
        stripe_size_bytes,
        servers: (0..count).map(ServerId).collect(),
        replication: Default::default(),
    }
}

/// (view offset, file offset, local offset) of every byte, from `pieces_on`.
fn bytes_by_pieces(
    view: &View,
    start: u64,
    len: u64,
    layout: &Layout,
    server: usize,
) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    for p in view.pieces_on(start, len, layout, server).unwrap() {
        for k in 0..p.len {
            out.push((p.view_offset + k, p.file_offset + k, p.local_offset + k));
        }
    }
    out
}

/// The same from the slices, each walked as plain view pieces.
fn bytes_by_segments(
    view: &View,
    start: u64,
    len: u64,
    layout: &Layout,
    server: usize,
) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    let mut last_end = None;
    for s in view.slices_on(start, len, layout, server).unwrap() {
        assert!(s.len > 0);
        assert!(last_end.is_none_or(|e| e <= s.view_offset), "slices in order");
        last_end = Some(s.view_offset + s.len);
        for p in view.pieces(s.view_offset, s.len).unwrap() {
            assert!(p.file_offset >= s.stripe_file_offset);
            assert!(p.file_offset + p.len <= s.stripe_file_offset + layout.stripe_size_bytes);
            for k in 0..p.len {
                let file = p.file_offset + k;
                out.push((
                    p.view_offset + k,
                    file,
                    s.stripe_local_offset + file - s.stripe_file_offset,
                ));
            }
        }
    }
    out
}

fn check(view: &View, start: u64, len: u64, layout: &Layout) {
    let mut total = 0;
    for server in 0..layout.stripe_count() {
        let by_segments = bytes_by_segments(view, start, len, layout, server);
        assert_eq!(
            by_segments,
            bytes_by_pieces(view, start, len, layout, server),
            "server {server}"
        );
        total += by_segments.len() as u64;
    }
    assert_eq!(total, len);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn segments_match_pieces_for_partitions(
        offset in 0u64..5000,
        block in 1u64..700,
        gap in 0u64..3000,
        stripe in prop::sample::select(vec![512u64, 1024, 4096]),
        count in 1u32..6,
        start in 0u64..3000,
        len in 0u64..20_000,
    ) {
        let view = View::partition(offset, block, block + gap).unwrap();
        check(&view, start, len, &layout(stripe, count));
    }

    #[test]
    fn segments_match_pieces_for_darrays(
        rank in 0u64..4,
        k in 1u64..40,
        rows in 1u64..90,
        cols in 1u64..90,
        element in 1u64..5,
        stripe in prop::sample::select(vec![512u64, 2048]),
        count in 1u32..5,
        start in 0u64..500,
        len in 0u64..20_000,
        displacement in 0u64..3000,
    ) {
        let t = Datatype::darray(4, rank, &[rows, cols], &[Distribution::Cyclic(Some(k)); 2], &[2, 2], Order::C, &Datatype::bytes(element).unwrap()).unwrap();
        prop_assume!(t.size_bytes() > 0);
        let view = View::new(displacement, t).unwrap();
        let len = len.min(5 * view.filetype().size_bytes());
        check(&view, start, len, &layout(stripe, count));
    }

    #[test]
    fn segments_match_pieces_for_indexed_tiles(
        blocks in prop::collection::vec((1u64..50, 0u64..400), 1..8),
        extra in 0u64..2000,
        stripe in prop::sample::select(vec![512u64, 1024]),
        count in 1u32..5,
        start in 0u64..300,
        len in 1u64..10_000,
    ) {
        let mut at = 0i64;
        let mut lens = Vec::new();
        let mut displacements = Vec::new();
        for (block, gap) in blocks {
            at += gap as i64;
            lens.push(block);
            displacements.push(at);
            at += block as i64;
        }
        let t = Datatype::hindexed(&lens, &displacements, &Datatype::bytes(1).unwrap()).unwrap();
        let t = Datatype::resized(&t, 0, at + extra as i64).unwrap();
        let view = View::new(7, t).unwrap();
        check(&view, start, len, &layout(stripe, count));
    }
}

#[test]
fn a_sparse_view_jumps_over_empty_stripes() {
    // 10 bytes every 2^40 bytes: a handful of slices, found without walking the
    // millions of stripes in between.
    let view = View::partition(3, 10, 1 << 40).unwrap();
    let layout = layout(512, 4);
    let started = std::time::Instant::now();
    let mut found = 0;
    for server in 0..4 {
        found += view
            .slices_on(0, 1000, &layout, server)
            .unwrap()
            .map(|s| s.len)
            .sum::<u64>();
    }
    assert_eq!(found, 1000);
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    check(&view, 5, 95, &layout);
}

#[test]
fn misuse_is_refused() {
    let view = View::partition(0, 4, 8).unwrap();
    assert!(view.slices_on(0, 10, &layout(512, 2), 2).is_err());
    assert!(view.slices_on(1 << 61, 1 << 60, &layout(512, 2), 0).is_err());
    assert_eq!(view.slices_on(5, 0, &layout(512, 2), 1).unwrap().count(), 0);
}
