//! List I/O end to end: irregular offset-length lists, more ranges than one request
//! may carry and ranges larger than one request's data, written and read back against
//! a reference file, through `read_list` (unordered, overlapping) and contiguously.

mod common;

use common::{Reference, Rng};
use weft_client::{ErrorCode, TransferOptions};
use weft_testkit::{ClusterOptions, TestCluster};

#[test]
fn irregular_lists_round_trip_against_a_reference() {
    let seed = 0x1157_0001;
    let mut rng = Rng::new(seed);
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 3,
        stripe_size: 4096,
        stripe_count: 0,
        ..Default::default()
    });
    let client = cluster.client().with_transfer(TransferOptions {
        chunk_bytes: 64 << 10,
        inflight_per_server: 3,
    });
    let file = client.create("/list", &Default::default()).unwrap();
    let mut reference = Reference::new();

    // 20 000 small disjoint ranges (more than RANGES_MAX = 16 384 in one request),
    // shuffled, then a few large ones past the chunk size, in one list.
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    let mut at = 0u64;
    for _ in 0..20_000 {
        at += rng.between(0, 60);
        let len = rng.between(1, 40);
        ranges.push((at, len));
        at += len;
    }
    for k in (1..ranges.len()).rev() {
        let j = rng.between(0, k as u64) as usize;
        ranges.swap(k, j);
    }
    for _ in 0..3 {
        let len = rng.between(100_000, 300_000);
        ranges.push((at + rng.between(0, 5000), len));
        at = ranges.last().unwrap().0 + len;
    }
    let total: u64 = ranges.iter().map(|r| r.1).sum();
    let data = rng.bytes(total as usize);
    assert_eq!(file.write_list(&ranges, &data).unwrap(), data.len());
    let mut position = 0usize;
    for &(offset, len) in &ranges {
        for x in 0..len {
            reference.put(offset + x, data[position]);
            position += 1;
        }
    }

    // Read back contiguously.
    let mut whole = vec![0u8; reference.size as usize];
    assert_eq!(file.read_at(0, &mut whole).unwrap(), whole.len());
    assert!(
        whole == reference.bytes,
        "seed {seed:#x}: contiguous read differs"
    );

    // Read random overlapping ranges, some past the end of the file (zeros).
    let mut reads: Vec<(u64, u64)> = (0..5000)
        .map(|_| (rng.between(0, reference.size + 1000), rng.between(0, 3000)))
        .collect();
    reads.push((0, reference.size));
    let total: u64 = reads.iter().map(|r| r.1).sum();
    let mut got = vec![0xEEu8; total as usize];
    assert_eq!(file.read_list(&reads, &mut got).unwrap(), got.len());
    let mut position = 0usize;
    for (n, &(offset, len)) in reads.iter().enumerate() {
        for x in 0..len {
            assert_eq!(
                got[position],
                reference.get(offset + x),
                "seed {seed:#x}: read {n} byte {x}"
            );
            position += 1;
        }
    }

    // A buffer that does not match the ranges is refused.
    let e = file.write_list(&[(0, 10), (20, 5)], &[0u8; 14]).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument, "{e}");
    let e = file.read_list(&[(u64::MAX - 2, 5)], &mut [0u8; 5]).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument, "{e}");
}
