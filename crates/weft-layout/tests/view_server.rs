//! Per-server piece iteration at scale against the plain reference (every view piece
//! split by `Layout::pieces` and filtered by server), including the re-seek path that
//! skips runs of small pieces on other servers and the row jumps inside large pieces;
//! and decoding of arbitrary or corrupted wire bytes.

use proptest::collection::vec;
use proptest::prelude::*;
use weft_layout::view::{Datatype, Distribution, Order, ServerPiece, View};
use weft_layout::{Layout, ServerId};

fn layout(stripe_size_bytes: u64, count: u32) -> Layout {
    Layout {
        stripe_size_bytes,
        servers: (0..count).map(ServerId).collect(),
        replication: Default::default(),
    }
}

/// The reference: split every view piece at stripe boundaries, keep this server's.
fn filtered(view: &View, view_offset: u64, len: u64, layout: &Layout, server: usize) -> Vec<ServerPiece> {
    let mut out = Vec::new();
    for piece in view.pieces(view_offset, len).unwrap() {
        for stripe_piece in layout.pieces(piece.file_offset, piece.len).unwrap() {
            if stripe_piece.server_index == server {
                out.push(ServerPiece {
                    file_offset: stripe_piece.file_offset,
                    local_offset: stripe_piece.local_offset,
                    len: stripe_piece.len,
                    view_offset: piece.view_offset + (stripe_piece.file_offset - piece.file_offset),
                });
            }
        }
    }
    out
}

fn check_all_servers(view: &View, view_offset: u64, len: u64, layout: &Layout) {
    let mut total = 0;
    for server in 0..layout.stripe_count() {
        let mine: Vec<ServerPiece> = view
            .pieces_on(view_offset, len, layout, server)
            .unwrap()
            .collect();
        assert_eq!(
            mine,
            filtered(view, view_offset, len, layout, server),
            "server {server}"
        );
        total += mine.iter().map(|p| p.len).sum::<u64>();
    }
    assert_eq!(total, len);
}

#[test]
fn cyclic_darray_on_three_servers() {
    let cyclic = [Distribution::Cyclic(Some(8)); 2];
    for rank in 0..4 {
        let t = Datatype::darray(
            4,
            rank,
            &[1024, 1024],
            &cyclic,
            &[2, 2],
            Order::C,
            &Datatype::bytes(1).unwrap(),
        )
        .unwrap();
        let view = View::new(4096, t).unwrap();
        check_all_servers(&view, 1000, 200_000, &layout(4096, 3));
    }
}

#[test]
fn small_pieces_on_other_servers_are_skipped_by_seeking() {
    // 16 bytes every 64: 8 pieces per 512-byte stripe, so runs of misses trigger seeks.
    let view = View::partition(100, 16, 64).unwrap();
    check_all_servers(&view, 7, 50_000, &layout(512, 4));
    check_all_servers(&view, 7, 50_000, &layout(1536, 5));
}

#[test]
fn large_pieces_jump_stripe_rows() {
    // 1 MiB every 4 MiB over 64 KiB stripes on 8 servers: each piece spans 16 stripes.
    let view = View::partition(12_345, 1 << 20, 4 << 20).unwrap();
    check_all_servers(&view, 999, 10 << 20, &layout(64 << 10, 8));
    let whole = View::contiguous();
    check_all_servers(&whole, 77, 3 << 20, &layout(4096, 7));
}

#[test]
fn nested_struct_view_on_servers() {
    // A subarray of records, each record two runs: exercises Blocks under Vector.
    let record = Datatype::hindexed(&[3, 5], &[0, 8], &Datatype::bytes(1).unwrap()).unwrap();
    let record = Datatype::resized(&record, 0, 16).unwrap();
    let t = Datatype::subarray(&[40, 50], &[20, 30], &[5, 10], Order::Fortran, &record).unwrap();
    let view = View::new(0, t).unwrap();
    check_all_servers(&view, 123, 40_000, &layout(512, 3));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Arbitrary bytes never panic the decoder; what decodes re-encodes to an equal
    /// type and can be walked.
    #[test]
    fn decoding_arbitrary_bytes_is_safe(bytes in vec(any::<u8>(), 0..64)) {
        if let Ok(t) = Datatype::decode(&bytes) {
            prop_assert_eq!(&*Datatype::decode(&t.encode()).unwrap(), &*t);
        }
        if let Ok(view) = View::decode(&bytes) {
            prop_assert_eq!(View::decode(&view.encode()).unwrap(), view.clone());
            if let Ok(pieces) = view.pieces(0, 1 << 20) {
                prop_assert!(pieces.take(1000).all(|p| p.len > 0));
            }
        }
    }

    /// Corrupting one byte of a valid encoding gives an error or a valid type, never a
    /// panic.
    #[test]
    fn decoding_corrupted_views_is_safe(position in any::<usize>(), value in any::<u8>(), rank in 0u64..4) {
        let cyclic = [Distribution::Cyclic(Some(3)), Distribution::Block(None)];
        let t = Datatype::darray(4, rank, &[10, 12], &cyclic, &[2, 2], Order::C, &Datatype::bytes(8).unwrap()).unwrap();
        let mut bytes = View::new(64, t).unwrap().encode();
        let position = position % bytes.len();
        bytes[position] = value;
        if let Ok(view) = View::decode(&bytes) {
            if let Ok(pieces) = view.pieces(0, 4096) {
                prop_assert!(pieces.take(1000).all(|p| p.len > 0));
            }
        }
    }
}
