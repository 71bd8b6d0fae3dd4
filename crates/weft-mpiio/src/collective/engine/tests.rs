//! The engine's unit tests: file domains, the exchange plan and the agreement helpers.

use super::*;
use crate::collective::interleaved::RoundRobinChunks;
use crate::collective::stripe_aligned::StripeDomains;
use crate::collective::two_phase::EvenDomains;

/// Every byte of every rank's pieces lands exactly once, at the window position of
/// its file offset, in the rank's stream order: checked against a byte map.
fn check_plans(domains: &dyn Domains, aggregators: usize, requests: &[Vec<(u64, u64)>]) {
    // What each aggregator receives from each rank: pieces cut at owner boundaries.
    let mut others: Vec<Vec<Vec<(u64, u64)>>> = vec![vec![Vec::new(); requests.len()]; aggregators];
    for (r, pieces) in requests.iter().enumerate() {
        for &(offset, len) in pieces {
            let mut at = offset;
            while at < offset + len {
                let (a, end) = domains.owner(at);
                let step = end.min(offset + len) - at;
                others[a][r].push((at, step));
                at += step;
            }
        }
    }
    let mut seen = std::collections::HashMap::new();
    for (a, lists) in others.iter().enumerate() {
        let lo = lists.iter().filter_map(|v| v.first().map(|p| p.0)).min();
        let hi = lists.iter().filter_map(|v| v.last().map(|p| p.0 + p.1)).max();
        let (Some(lo), Some(hi)) = (lo, hi) else { continue };
        let plans = plan_rounds(lists, domains.windows(a, lo, hi)).unwrap();
        let mut next_in_stream = vec![0usize; requests.len()];
        for plan in &plans {
            let window = plan.window.as_ref().unwrap();
            // Window position -> file offset.
            let file_of = |pos: u64| {
                let mut base = 0;
                for &(start, len) in &window.ranges {
                    if pos < base + len {
                        return start + (pos - base);
                    }
                    base += len;
                }
                panic!("position {pos} outside the window");
            };
            for (r, list) in plan.per_rank.iter().enumerate() {
                // The rank's bytes for this aggregator, in order.
                let flat: Vec<u64> = lists[r].iter().flat_map(|&(o, l)| o..o + l).collect();
                for &(pos, len) in list {
                    for k in 0..len {
                        let x = file_of(pos + k);
                        assert_eq!(flat[next_in_stream[r]], x, "rank {r} stream order");
                        next_in_stream[r] += 1;
                        assert!(seen.insert((r, x), a).is_none(), "byte {x} of rank {r} twice");
                    }
                }
            }
        }
    }
    let total: u64 = requests.iter().flatten().map(|p| p.1).sum();
    assert_eq!(seen.len() as u64, total);
}

fn cyclic_requests(ranks: u64, block: u64, blocks: u64) -> Vec<Vec<(u64, u64)>> {
    (0..ranks)
        .map(|r| {
            (0..blocks)
                .filter(|b| b % ranks == r)
                .map(|b| (b * block, block))
                .collect()
        })
        .collect()
}

#[test]
fn plans_place_every_byte_once_for_every_partition() {
    for requests in [
        cyclic_requests(3, 7, 200),
        cyclic_requests(4, 100, 50),
        vec![vec![(5, 1000)], vec![], vec![(2000, 3)]],
    ] {
        let lo = requests.iter().flatten().map(|p| p.0).min().unwrap();
        let hi = requests.iter().flatten().map(|p| p.0 + p.1).max().unwrap();
        check_plans(&EvenDomains::new(lo, hi, 3, 97, None), 3, &requests);
        check_plans(&EvenDomains::new(lo, hi, 2, 64, Some(50)), 2, &requests);
        check_plans(&RoundRobinChunks::new(lo, 128, 64, 3), 3, &requests);
        check_plans(&StripeDomains::new(64, 4, 2, 200), 2, &requests);
        check_plans(&StripeDomains::new(32, 2, 4, 64), 4, &requests);
    }
}

#[test]
fn window_positions_map_to_file_segments_across_ranges() {
    let window = Window {
        ranges: vec![(100, 10), (500, 5), (900, 20)],
    };
    let mut got = Vec::new();
    window_segments(&window, 8, 10, &mut |offset, len| got.push((offset, len)));
    // 2 bytes at the end of the first range, all of the second, 3 of the third.
    assert_eq!(got, vec![(108, 2), (500, 5), (900, 3)]);
    got.clear();
    window_segments(&window, 16, 4, &mut |offset, len| got.push((offset, len)));
    assert_eq!(got, vec![(901, 4)]);
    got.clear();
    window_segments(&window, 0, 0, &mut |offset, len| got.push((offset, len)));
    assert!(got.is_empty());
}

#[test]
fn streams_hand_out_bytes_in_order_across_runs() {
    let mut s = Stream {
        runs: vec![(0, 5), (10, 3)],
        ..Default::default()
    };
    let mut got = Vec::new();
    s.take(4, |at, len| got.push((at, len))).unwrap();
    s.take(3, |at, len| got.push((at, len))).unwrap();
    assert_eq!(got, vec![(0, 4), (4, 1), (10, 2)]);
    assert!(s.take(2, |_, _| {}).is_err(), "only one byte is left");
}

#[test]
fn exchanges_go_direct_only_for_single_ordered_runs() {
    let counts = [4, 0, 3];
    let direct = SendPlan::new(&counts, &[(0, vec![(10, 4)]), (2, vec![(20, 3)])]).unwrap();
    assert!(
        matches!(direct, SendPlan::Direct { base: 10, end: 23, ref displs } if displs == &vec![0, 0, 10])
    );
    // Two runs for one peer, or peers out of order, or a short run: packed.
    let two_runs = SendPlan::new(&counts, &[(0, vec![(10, 2), (13, 2)]), (2, vec![(20, 3)])]).unwrap();
    assert!(matches!(two_runs, SendPlan::Copy { total: 7, .. }));
    let unordered = SendPlan::new(&counts, &[(0, vec![(30, 4)]), (2, vec![(20, 3)])]).unwrap();
    assert!(matches!(unordered, SendPlan::Copy { .. }));
    let short = SendPlan::new(&counts, &[(0, vec![(10, 3)]), (2, vec![(20, 3)])]).unwrap();
    assert!(matches!(short, SendPlan::Copy { .. }));
}
