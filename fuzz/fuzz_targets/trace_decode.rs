//! Fuzz target: decoding untrusted trace files. Decoding must never panic and must stop;
//! whatever decodes must re-encode to records that decode equal; building reference
//! streams and the text form from it must stay within their bounds.

#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_trace::format::{encode_header, Encoder, Reader, Record};
use weft_trace::refs::{self, Ops, RefOptions};

/// References built per input: bounds the time of one iteration.
const REFS_MAX: usize = 10_000;

fuzz_target!(|bytes: &[u8]| {
    let Ok(reader) = Reader::new(bytes) else {
        return;
    };
    let header = reader.header().clone();
    let records: Vec<Record> = reader.map_while(Result::ok).collect();
    let mut again = encode_header(&header);
    let mut encoder = Encoder::new(&header);
    for r in &records {
        match r {
            Record::Request(q) => encoder.request(q, &mut again),
            other => encoder.record(other, &mut again),
        }
    }
    let back: Vec<Record> = Reader::new(&again)
        .expect("a re-encoded header reads")
        .map(|r| r.expect("a re-encoded record reads"))
        .collect();
    assert_eq!(back, records);
    let _ = refs::build(
        &[("fuzz".to_string(), bytes)],
        &RefOptions {
            block_size_bytes: None,
            ops: Ops::All,
            refs_max: REFS_MAX,
        },
    );
    let _ = weft_trace::text::show(bytes, 4, &mut |_| {});
});
