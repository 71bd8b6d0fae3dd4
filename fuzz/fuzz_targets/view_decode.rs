//! Fuzz target: decoding untrusted view and datatype wire bytes. Decoding must never
//! panic; whatever decodes must re-encode to an equal value and be walkable (a bounded
//! number of pieces, offsets mapping both ways, pack of one copy).

#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_layout::view::{pack, Datatype, View};
use weft_layout::{Layout, ServerId};

/// Pieces walked per decoded view: bounds the time of one fuzz iteration.
const PIECES_MAX: usize = 4096;
/// Interval walked per decoded view, in view bytes.
const INTERVAL_BYTES: u64 = 1 << 16;
/// Largest memory type packed.
const PACK_BYTES_MAX: i64 = 1 << 16;

fuzz_target!(|bytes: &[u8]| {
    if let Ok(view) = View::decode(bytes) {
        check_view(&view);
    }
    if let Ok(datatype) = Datatype::decode(bytes) {
        let again = Datatype::decode(&datatype.encode()).expect("a re-encoded type decodes");
        assert_eq!(*again, *datatype);
        check_pack(&datatype);
    }
});

fn check_view(view: &View) {
    let again = View::decode(&view.encode()).expect("a re-encoded view decodes");
    assert_eq!(&again, view);
    if let Ok(pieces) = view.pieces(3, INTERVAL_BYTES) {
        let mut previous_end = 0;
        let mut expected_view_offset = 3;
        for piece in pieces.take(PIECES_MAX) {
            assert!(piece.len > 0);
            assert!(piece.file_offset >= previous_end, "pieces in file order");
            assert_eq!(piece.view_offset, expected_view_offset);
            assert_eq!(view.view_to_file(piece.view_offset), Ok(piece.file_offset));
            assert_eq!(view.file_to_view(piece.file_offset), piece.view_offset);
            previous_end = piece.file_offset + piece.len;
            expected_view_offset += piece.len;
        }
    }
    let layout = Layout {
        stripe_size_bytes: 4096,
        servers: (0..3).map(ServerId).collect(),
        replication: Default::default(),
    };
    if let Ok(pieces) = view.pieces_on(7, INTERVAL_BYTES, &layout, 1) {
        for piece in pieces.take(PIECES_MAX) {
            assert_eq!(layout.server_index_of(piece.file_offset), 1);
        }
    }
}

fn check_pack(datatype: &Datatype) {
    // Overlapping copies (stride 0) can pack far more bytes than the type spans.
    let small = datatype.size_bytes() <= PACK_BYTES_MAX as u64;
    if datatype.true_lb() < 0 || datatype.true_ub() > PACK_BYTES_MAX || !small {
        return;
    }
    let memory = vec![0u8; datatype.true_ub() as usize];
    let mut packed = vec![0u8; datatype.size_bytes() as usize];
    pack(datatype, 1, &memory, 0, &mut packed).expect("a type inside its buffer packs");
}
