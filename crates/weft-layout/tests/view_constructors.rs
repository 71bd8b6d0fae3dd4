//! Each datatype constructor against typemaps and bounds computed by hand from the MPI
//! definitions, plus hand-checked views, server splits and decoder rejections.

use std::sync::Arc;

use weft_layout::view::{
    pack, unpack, Datatype, Distribution, Field, Order, Piece, ServerPiece, View, ViewError,
};
use weft_layout::{Layout, ServerId};

/// Byte offsets of the typemap, in type order.
fn typemap(datatype: &Datatype) -> Vec<i64> {
    let mut bytes = Vec::new();
    datatype.for_each_run(1, |offset, len| bytes.extend(offset..offset + len as i64));
    bytes
}

/// Expands `(offset, len)` runs into byte offsets.
fn runs(list: &[(i64, i64)]) -> Vec<i64> {
    list.iter().flat_map(|&(o, l)| o..o + l).collect()
}

fn bounds(datatype: &Datatype) -> (u64, i64, i64, i64, i64) {
    (
        datatype.size_bytes(),
        datatype.lb(),
        datatype.extent(),
        datatype.true_lb(),
        datatype.true_extent(),
    )
}

fn byte() -> Arc<Datatype> {
    Datatype::bytes(1).unwrap()
}

#[test]
fn contiguous_of_bytes_is_one_run() {
    let t = Datatype::contiguous(5, &Datatype::bytes(3).unwrap()).unwrap();
    assert_eq!(typemap(&t), runs(&[(0, 15)]));
    assert_eq!(bounds(&t), (15, 0, 15, 0, 15));
    assert!(t.is_contiguous());
}

#[test]
fn vector_matches_mpi_typemap() {
    // MPI_Type_vector(3, 2, 4, byte): blocks at 0, 4, 8; ub = 8 + 2.
    let t = Datatype::vector(3, 2, 4, &byte()).unwrap();
    assert_eq!(typemap(&t), vec![0, 1, 4, 5, 8, 9]);
    assert_eq!(bounds(&t), (6, 0, 10, 0, 10));
    assert!(t.is_monotonic());
    // Stride equal to the block length is contiguous.
    let dense = Datatype::vector(4, 3, 3, &Datatype::bytes(2).unwrap()).unwrap();
    assert!(dense.is_contiguous());
    assert_eq!(typemap(&dense), runs(&[(0, 24)]));
}

#[test]
fn vector_stride_is_in_extents_of_a_resized_child() {
    // Child: 2 bytes with extent 5. vector(2, 2, 3): block starts 0 and 15, copies at 5.
    let child = Datatype::resized(&Datatype::bytes(2).unwrap(), 0, 5).unwrap();
    let t = Datatype::vector(2, 2, 3, &child).unwrap();
    assert_eq!(typemap(&t), runs(&[(0, 2), (5, 2), (15, 2), (20, 2)]));
    // lb 0, ub = 20 + 5 (sticky markers of the child).
    assert_eq!(bounds(&t), (8, 0, 25, 0, 22));
    assert!(t.has_explicit_bounds());
}

#[test]
fn hvector_with_negative_stride_runs_backwards() {
    let t = Datatype::hvector(3, 1, -10, &Datatype::bytes(2).unwrap()).unwrap();
    assert_eq!(typemap(&t), runs(&[(0, 2), (-10, 2), (-20, 2)]));
    assert_eq!(bounds(&t), (6, -20, 22, -20, 22));
    assert!(!t.is_monotonic());
}

#[test]
fn indexed_keeps_block_order() {
    // Extent of the child is 2: displacements 4 and 0 are bytes 8 and 0.
    let t = Datatype::indexed(&[2, 1], &[4, 0], &Datatype::bytes(2).unwrap()).unwrap();
    assert_eq!(typemap(&t), runs(&[(8, 4), (0, 2)]));
    assert_eq!(bounds(&t), (6, 0, 12, 0, 12));
    assert!(!t.is_monotonic());
}

#[test]
fn hindexed_and_block_variants() {
    let t = Datatype::hindexed(&[1, 0, 3], &[3, 100, 10], &byte()).unwrap();
    // The empty block contributes nothing, not even to the bounds.
    assert_eq!(typemap(&t), vec![3, 10, 11, 12]);
    assert_eq!(bounds(&t), (4, 3, 10, 3, 10));
    let t = Datatype::indexed_block(2, &[1, 5], &Datatype::bytes(3).unwrap()).unwrap();
    assert_eq!(typemap(&t), runs(&[(3, 6), (15, 6)]));
    let t = Datatype::hindexed_block(2, &[7, 1], &Datatype::bytes(3).unwrap()).unwrap();
    assert_eq!(typemap(&t), runs(&[(7, 6), (1, 6)]));
    // Adjacent blocks in order merge into one run.
    let t = Datatype::hindexed(&[2, 3], &[0, 2], &byte()).unwrap();
    assert!(t.is_contiguous());
}

#[test]
fn struct_bounds_follow_sticky_markers() {
    // Field 0 is resized to [-2, 8): its markers win over field 1's data at 20..24.
    let marked = Datatype::resized(&Datatype::bytes(4).unwrap(), -2, 10).unwrap();
    let t = Datatype::structure(&[
        Field {
            block_len: 1,
            displacement_bytes: 0,
            datatype: marked,
        },
        Field {
            block_len: 1,
            displacement_bytes: 20,
            datatype: Datatype::bytes(4).unwrap(),
        },
    ])
    .unwrap();
    assert_eq!(typemap(&t), runs(&[(0, 4), (20, 4)]));
    assert_eq!(bounds(&t), (8, -2, 10, 0, 24));
    // Without markers the bounds are the data bounds.
    let plain = Datatype::structure(&[
        Field {
            block_len: 2,
            displacement_bytes: 16,
            datatype: Datatype::bytes(3).unwrap(),
        },
        Field {
            block_len: 1,
            displacement_bytes: 1,
            datatype: byte(),
        },
    ])
    .unwrap();
    assert_eq!(typemap(&plain), runs(&[(16, 6), (1, 1)]));
    assert_eq!(bounds(&plain), (7, 1, 21, 1, 21));
}

#[test]
fn subarray_c_order() {
    // 4 x 5 array of 2-byte elements, rows 1..3, columns 2..5.
    let t = Datatype::subarray(&[4, 5], &[2, 3], &[1, 2], Order::C, &Datatype::bytes(2).unwrap()).unwrap();
    // Element (r, c) at (5r + c) * 2.
    assert_eq!(typemap(&t), runs(&[(14, 6), (24, 6)]));
    assert_eq!(bounds(&t), (12, 0, 40, 14, 16));
}

#[test]
fn subarray_fortran_order() {
    // 4 x 3 (dimension 0 fastest), subsizes 2 x 2 from (1, 1): element (i, j) at i + 4j.
    let t = Datatype::subarray(
        &[4, 3],
        &[2, 2],
        &[1, 1],
        Order::Fortran,
        &Datatype::bytes(2).unwrap(),
    )
    .unwrap();
    assert_eq!(typemap(&t), runs(&[(10, 4), (18, 4)]));
    assert_eq!(bounds(&t), (8, 0, 24, 10, 12));
}

#[test]
fn darray_cyclic_2_on_a_2x2_grid() {
    // 5 x 6 array of bytes, CYCLIC(2) both ways, 2 x 2 processes, C order.
    // Rows for grid row 0: blocks 0, 2 -> rows {0, 1, 4}; grid row 1: {2, 3}.
    // Columns for grid column 0: blocks 0, 2 -> {0, 1, 4, 5}; column 1: {2, 3}.
    let cyclic = [Distribution::Cyclic(Some(2)); 2];
    let expected: [Vec<i64>; 4] = [
        vec![0, 1, 4, 5, 6, 7, 10, 11, 24, 25, 28, 29],
        vec![2, 3, 8, 9, 26, 27],
        vec![12, 13, 16, 17, 18, 19, 22, 23],
        vec![14, 15, 20, 21],
    ];
    for (rank, want) in expected.iter().enumerate() {
        let t = Datatype::darray(4, rank as u64, &[5, 6], &cyclic, &[2, 2], Order::C, &byte()).unwrap();
        assert_eq!(&typemap(&t), want, "rank {rank}");
        assert_eq!((t.lb(), t.extent()), (0, 30));
    }
}

#[test]
fn darray_fortran_order_and_default_blocks() {
    // 4 x 4, BLOCK default (2) in dimension 0, CYCLIC default (1) in dimension 1,
    // 2 x 2 grid, Fortran order: element (i, j) at i + 4j, dimension 0 fastest.
    // Rank 1 = grid (0, 1): rows {0, 1}, columns {1, 3}.
    let t = Datatype::darray(
        4,
        1,
        &[4, 4],
        &[Distribution::Block(None), Distribution::Cyclic(None)],
        &[2, 2],
        Order::Fortran,
        &byte(),
    )
    .unwrap();
    assert_eq!(typemap(&t), vec![4, 5, 12, 13]);
    // Default block size ceil(10 / 3) = 4: coordinate 2 holds 8..10.
    let t = Datatype::darray(3, 2, &[10], &[Distribution::Block(None)], &[3], Order::C, &byte()).unwrap();
    assert_eq!(typemap(&t), vec![8, 9]);
    // More processes than elements: coordinate 3 of 4 over 3 elements holds nothing.
    let t = Datatype::darray(4, 3, &[3], &[Distribution::Block(None)], &[4], Order::C, &byte()).unwrap();
    assert_eq!(bounds(&t), (0, 0, 3, 0, 0));
    // NONE keeps the whole dimension.
    let t = Datatype::darray(
        2,
        1,
        &[2, 3],
        &[Distribution::Block(None), Distribution::None],
        &[2, 1],
        Order::C,
        &byte(),
    )
    .unwrap();
    assert_eq!(typemap(&t), vec![3, 4, 5]);
}

#[test]
fn darray_rejects_bad_arguments() {
    let d = [Distribution::Block(Some(2))];
    assert!(matches!(
        Datatype::darray(2, 0, &[5], &d, &[2], Order::C, &byte()),
        Err(ViewError::Dimension { dimension: 0, .. })
    ));
    assert!(matches!(
        Datatype::darray(2, 0, &[4], &[Distribution::None], &[2], Order::C, &byte()),
        Err(ViewError::Dimension { .. })
    ));
    assert!(matches!(
        Datatype::darray(3, 0, &[4], &d, &[2], Order::C, &byte()),
        Err(ViewError::ProcessGrid {
            grid: 2,
            process_count: 3
        })
    ));
    assert!(matches!(
        Datatype::darray(2, 2, &[4], &d, &[2], Order::C, &byte()),
        Err(ViewError::Rank { .. })
    ));
}

#[test]
fn resized_sets_bounds_and_refuses_negative_extent() {
    let t = Datatype::resized(&Datatype::bytes(4).unwrap(), -3, 11).unwrap();
    assert_eq!(bounds(&t), (4, -3, 11, 0, 4));
    assert_eq!(
        Datatype::resized(&byte(), 0, -1),
        Err(ViewError::NegativeExtent(-1))
    );
}

#[test]
fn overflowing_types_are_refused() {
    let big = Datatype::bytes(1 << 40).unwrap();
    assert!(matches!(
        Datatype::contiguous(1 << 30, &big),
        Err(ViewError::Overflow { .. })
    ));
    assert!(matches!(
        Datatype::hvector(2, 1, i64::MAX, &byte()),
        Err(ViewError::Overflow { .. })
    ));
    assert!(matches!(
        Datatype::vector(u64::MAX, 2, 1, &byte()),
        Err(ViewError::Overflow { .. })
    ));
}

#[test]
fn depth_is_limited() {
    let mut t = byte();
    let mut failed = None;
    for level in 0..40 {
        // Non-foldable nesting: two copies, stride three times the child's extent.
        match Datatype::hvector(2, 1, 3 * t.extent() + 1, &t) {
            Ok(next) => t = next,
            Err(error) => {
                failed = Some((level, error));
                break;
            }
        }
    }
    let (level, error) = failed.expect("nesting must hit the limit");
    assert_eq!(error, ViewError::TooDeep { depth: 17 });
    assert_eq!(level, 15);
}

#[test]
fn view_rejects_non_monotonic_and_overlapping_filetypes() {
    let backwards = Datatype::hindexed(&[1, 1], &[4, 0], &byte()).unwrap();
    assert_eq!(View::new(0, backwards), Err(ViewError::NotMonotonic));
    let overlapping = Datatype::resized(&Datatype::bytes(4).unwrap(), 0, 2).unwrap();
    assert!(matches!(
        View::new(0, overlapping),
        Err(ViewError::TilesOverlap {
            true_extent: 4,
            extent: 2
        })
    ));
    let before_zero = Datatype::hindexed(&[1], &[-5], &byte()).unwrap();
    assert!(matches!(
        View::new(4, before_zero.clone()),
        Err(ViewError::NegativeFileOffset { .. })
    ));
    assert!(View::new(5, before_zero).is_ok());
}

#[test]
fn a_view_for_reading_takes_overlapping_data_in_typemap_order_but_not_decreasing_runs() {
    // 12 bytes at 0, then 4 bytes at 4 (MPICH's tst_fileview: an indexed type of ints
    // with blocks of 3 and 1 at 0 and 1): legal for reading only.
    let overlapping = Datatype::hindexed(&[12, 4], &[0, 4], &byte()).unwrap();
    assert_eq!(View::new(0, overlapping.clone()), Err(ViewError::NotMonotonic));
    let view = View::for_reading(100, overlapping).unwrap();
    let pieces: Vec<(u64, u64)> = view
        .pieces(0, 32)
        .unwrap()
        .map(|p| (p.file_offset, p.len))
        .collect();
    // Two tiles of extent 12, each run in typemap order, the overlapping one read again.
    assert_eq!(pieces, vec![(100, 12), (104, 4), (112, 12), (116, 4)]);
    assert_eq!(view.view_to_file(13).unwrap(), 105);
    let backwards = Datatype::hindexed(&[1, 1], &[4, 0], &byte()).unwrap();
    assert_eq!(View::for_reading(0, backwards), Err(ViewError::NotMonotonic));
    let before_zero = Datatype::hindexed(&[4, 4], &[-8, -6], &byte()).unwrap();
    assert!(matches!(
        View::for_reading(4, before_zero),
        Err(ViewError::NegativeFileOffset { .. })
    ));
}

#[test]
fn a_tree_past_the_wire_limit_builds_and_walks_but_has_no_wire_form() {
    // HDF5's point selections: one block per point.
    let n = weft_layout::view::BLOCKS_TOTAL_MAX as usize + 1;
    let lens = vec![1u64; n];
    let disps: Vec<i64> = (0..n as i64).map(|k| 2 * k).collect();
    let points = Datatype::hindexed(&lens, &disps, &byte()).unwrap();
    assert!(!points.fits_wire());
    let view = View::new(0, points).unwrap();
    assert_eq!(view.view_to_file(n as u64 - 1).unwrap(), 2 * (n as u64 - 1));
    assert_eq!(view.pieces(0, n as u64).unwrap().count(), n);
    let small = Datatype::hindexed(&[1, 1], &[0, 2], &byte()).unwrap();
    assert!(small.fits_wire());
    let too_many = vec![1u64; weft_layout::view::TREE_BLOCKS_MAX as usize + 1];
    let far: Vec<i64> = (0..too_many.len() as i64).collect();
    assert!(matches!(
        Datatype::hindexed(&too_many, &far, &byte()),
        Err(ViewError::TooManyBlocks { .. })
    ));
}

#[test]
fn partition_view_maps_and_iterates() {
    // PVFS partition: 3 bytes every 10 from offset 100.
    let view = View::partition(100, 3, 10).unwrap();
    assert_eq!(view.view_to_file(0).unwrap(), 100);
    assert_eq!(view.view_to_file(4).unwrap(), 111);
    assert_eq!(view.file_to_view(0), 0);
    assert_eq!(view.file_to_view(103), 3);
    assert_eq!(view.file_to_view(111), 4);
    assert_eq!(view.file_to_view(112), 5);
    let pieces: Vec<Piece> = view.pieces(2, 5).unwrap().collect();
    let expected = [(102, 1, 2), (110, 3, 3), (120, 1, 6)];
    let expected: Vec<Piece> = expected
        .iter()
        .map(|&(file_offset, len, view_offset)| Piece {
            file_offset,
            len,
            view_offset,
        })
        .collect();
    assert_eq!(pieces, expected);
}

#[test]
fn contiguous_view_is_one_piece_split_by_stripes() {
    let view = View::contiguous();
    let pieces: Vec<Piece> = view.pieces(1000, 1 << 40).unwrap().collect();
    assert_eq!(
        pieces,
        vec![Piece {
            file_offset: 1000,
            len: 1 << 40,
            view_offset: 1000
        }]
    );
    let layout = Layout {
        stripe_size_bytes: 1024,
        servers: (0..3).map(ServerId).collect(),
        replication: Default::default(),
    };
    // Bytes 1000..5000: stripes 0 (0..1024), 1, 2, 3, 4 (4096..5120). Server 1 holds
    // stripes 1 and 4.
    let mine: Vec<ServerPiece> = view.pieces_on(1000, 4000, &layout, 1).unwrap().collect();
    assert_eq!(
        mine,
        vec![
            ServerPiece {
                file_offset: 1024,
                local_offset: 0,
                len: 1024,
                view_offset: 1024
            },
            ServerPiece {
                file_offset: 4096,
                local_offset: 1024,
                len: 904,
                view_offset: 4096
            },
        ]
    );
    assert!(matches!(
        view.pieces_on(0, 1, &layout, 3),
        Err(ViewError::ServerIndex { .. })
    ));
}

#[test]
fn view_ranges_past_the_largest_offset_are_refused() {
    let view = View::contiguous();
    assert!(view.pieces((1 << 62) - 1, 1).is_ok());
    assert!(matches!(
        view.pieces((1 << 62) - 1, 2),
        Err(ViewError::RangeOverflow { .. })
    ));
    assert!(view.pieces(u64::MAX, 2).is_err());
    let empty = View::new(0, Datatype::bytes(0).unwrap()).unwrap();
    assert_eq!(empty.pieces(0, 1).err(), Some(ViewError::EmptyView));
    assert_eq!(empty.pieces(0, 0).unwrap().count(), 0);
}

#[test]
fn pack_checks_bounds_and_stream_range_up_front() {
    let t = Datatype::vector(2, 1, 3, &Datatype::bytes(2).unwrap()).unwrap();
    // Data at 0..2 and 6..8; two copies (extent 8) need 16 bytes.
    let memory: Vec<u8> = (0..16).collect();
    let mut packed = [0u8; 8];
    pack(&t, 2, &memory, 0, &mut packed).unwrap();
    assert_eq!(packed, [0, 1, 6, 7, 8, 9, 14, 15]);
    let mut part = [0u8; 3];
    pack(&t, 2, &memory, 3, &mut part).unwrap();
    assert_eq!(part, [7, 8, 9]);
    assert!(matches!(
        pack(&t, 2, &memory[..15], 0, &mut packed),
        Err(ViewError::OutOfBounds { .. })
    ));
    assert!(matches!(
        pack(&t, 2, &memory, 1, &mut packed),
        Err(ViewError::StreamRange { .. })
    ));
    let mut back = vec![0u8; 16];
    unpack(&t, 2, &packed, 0, &mut back).unwrap();
    assert_eq!(back, [0, 1, 0, 0, 0, 0, 6, 7, 8, 9, 0, 0, 0, 0, 14, 15]);
    let negative = Datatype::hindexed(&[1], &[-1], &byte()).unwrap();
    assert!(matches!(
        pack(&negative, 1, &memory, 0, &mut [0u8; 1]),
        Err(ViewError::OutOfBounds { .. })
    ));
}

#[test]
fn decoder_rejects_malformed_input() {
    let good = Datatype::vector(3, 2, 5, &Datatype::bytes(4).unwrap()).unwrap();
    let bytes = good.encode();
    assert_eq!(*Datatype::decode(&bytes).unwrap(), *good);
    // Every strict prefix is truncated, and extra bytes trail.
    for end in 0..bytes.len() {
        assert!(Datatype::decode(&bytes[..end]).is_err(), "prefix {end}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(Datatype::decode(&longer).is_err());
    // Unknown version, unknown tag, forward child reference, huge counts.
    assert!(Datatype::decode(&[2, 1, 0, 1, 0]).is_err());
    assert!(Datatype::decode(&[1, 1, 7]).is_err());
    assert!(Datatype::decode(&[1, 1, 1, 2, 1, 2, 0, 0, 0, 0]).is_err());
    let mut many_blocks = vec![1, 2, 0, 1, 0, 2];
    many_blocks.extend([0xff, 0xff, 0xff, 0xff, 0x0f]);
    assert!(Datatype::decode(&many_blocks).is_err());
    // An overlong varint.
    assert!(
        Datatype::decode(&[1, 1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0]).is_err()
    );
}
