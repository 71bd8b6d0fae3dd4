//! How fast each policy replays block references, the simulator's inner loop:
//! `cargo run --release -p weft-cache --example policy_speed [REFERENCES] [CAPACITY]`.
//! The trace mixes a hot set (half the references over 1/8 of the capacity's worth
//! of keys... times 8) with uniform references over 16x the capacity, so every policy
//! both hits and evicts. Prints references per second and the hit rate per policy.

use std::time::Instant;

use weft_cache::policy::{access, Access, Admission, AnyPolicy, PolicyKind};

fn main() {
    let mut args = std::env::args().skip(1);
    let references: usize = args.next().map_or(10_000_000, |a| a.parse().expect("REFERENCES"));
    let capacity: usize = args.next().map_or(1 << 16, |a| a.parse().expect("CAPACITY"));
    let hot = (capacity as u64) / 2;
    let cold = (capacity as u64) * 16;
    // xorshift64*: deterministic, no dependency.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let trace: Vec<u64> = (0..references)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let r = state.wrapping_mul(0x2545_F491_4F6C_DD1D);
            if r & 1 == 0 {
                (r >> 1) % hot
            } else {
                hot + (r >> 1) % cold
            }
        })
        .collect();
    println!("{references} references, capacity {capacity} keys");
    println!(
        "{:<8} {:>10} {:>14} {:>9}",
        "policy", "seconds", "refs/s", "hit rate"
    );
    for kind in PolicyKind::ALL {
        let mut policy = AnyPolicy::new(kind, capacity);
        let start = Instant::now();
        let mut hits = 0usize;
        for &k in &trace {
            if access(&mut policy, k, Admission::Normal) == Access::Hit {
                hits += 1;
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        println!(
            "{:<8} {:>10.2} {:>14.0} {:>9.3}",
            kind.as_str(),
            seconds,
            references as f64 / seconds,
            hits as f64 / references as f64
        );
    }
}
