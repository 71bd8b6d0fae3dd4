//! Fuzz target: the wire decoders must reject, never panic on, any bytes a peer sends.
//!
//! The input is read three ways at once: its first 32 bytes as a frame header, its first
//! two bytes as an opcode with everything after them as that request's body, and the same
//! body as a response. The body starts at byte 2 rather than after the header so that
//! short inputs reach the message decoders too: they need no valid header in front.
//! Whatever decodes as a shared-memory call (opcode 141) must name a region that does
//! not wrap and holds its data, and its inner request must be no handshake or
//! shared-memory request: the server trusts the decoder for that much. Likewise a pool
//! scatter list (opcode 190) holds 1 to `SCATTER_PIECES_MAX` pieces, none empty, none
//! wrapping, no two overlapping, and carries a read. Whatever decodes, request or
//! response, encodes (with the derived encoders) to bytes that decode to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_proto::msg::{decode_result, encode_result, Request, Response};
use weft_proto::{FrameHeader, FRAME_HEADER_BYTES};

fuzz_target!(|data: &[u8]| {
    if let Some((header, _)) = data.split_first_chunk::<FRAME_HEADER_BYTES>() {
        let _ = FrameHeader::decode(header);
    }
    let Some(([opcode_low, opcode_high], body)) = data.split_first_chunk::<2>() else {
        return;
    };
    let opcode = u16::from_le_bytes([*opcode_low, *opcode_high]);
    let decoded = Request::decode(opcode, body);
    if let Ok(request) = &decoded {
        assert_eq!(
            Request::decode(opcode, &request.encode_body()).as_ref(),
            Ok(request)
        );
    }
    if let Ok(Request::ShmCall {
        offset,
        len,
        data_len,
        request,
    }) = &decoded
    {
        assert!(offset.checked_add(*len).is_some() && data_len <= len);
        assert!(!matches!(
            **request,
            Request::ShmCall { .. }
                | Request::ShmAttach { .. }
                | Request::Hello { .. }
                | Request::Authenticate { .. }
        ));
    }
    if let Ok(Request::ShmScatter { pieces, request }) = &decoded {
        check_scatter(pieces, request);
    }
    // The descriptor bodies on their own, whatever the opcode bytes said.
    let _ = Request::decode(141, body);
    if let Ok(Request::ShmScatter { pieces, request }) = Request::decode(190, body) {
        check_scatter(&pieces, &request);
    }
    let result = decode_result(body);
    if let Ok(result) = &result {
        assert_eq!(decode_result(&encode_result(result)).as_ref(), Ok(result));
    }
    if let Ok(Ok(Response::ShmPlaced { response, .. })) = result {
        assert!(!matches!(*response, Response::ShmPlaced { .. }));
    }
});

fn check_scatter(pieces: &[(u64, u64)], request: &Request) {
    assert!(!pieces.is_empty() && pieces.len() <= weft_proto::msg::SCATTER_PIECES_MAX);
    assert!(pieces.iter().all(|&(o, l)| l > 0 && o.checked_add(l).is_some()));
    let mut sorted = pieces.to_vec();
    sorted.sort_unstable();
    assert!(sorted.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0));
    assert!(matches!(request, Request::Read { .. } | Request::ReadView { .. }));
}
