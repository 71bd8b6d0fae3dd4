//! Speed of the store's batched writes for the pieces of fine-grained views in one
//! block: CYCLIC(k) rows of a 2x2 process grid (each process writes k bytes of every 2k
//! in its rows), two processes filling each block in turn, as a cache manager sees them.
//!
//!     cargo run --release -p weft-cache --example store_pieces

use std::time::Instant;
use weft_cache::policy::{AnyPolicy, PolicyKind};
use weft_cache::store::{Cache, CacheConfig};
use weft_cache::BlockKey;
use weft_layout::InodeId;

fn main() {
    const BLOCK: u32 = 64 << 10;
    const BLOCKS: u64 = 1024; // 64 MiB
    for k in [8u32, 32, 256] {
        let mut cache = Cache::new(
            AnyPolicy::new(PolicyKind::Arc, 4096),
            CacheConfig {
                memory_bytes_max: 1 << 30,
                prefer_full_dirty: false,
            },
        );
        let data = vec![7u8; k as usize];
        let start = Instant::now();
        let mut pieces_total = 0u64;
        for column in 0..2u32 {
            for b in 0..BLOCKS {
                let pieces: Vec<(u32, &[u8])> = (0..BLOCK / (2 * k))
                    .map(|i| (i * 2 * k + column * k, data.as_slice()))
                    .collect();
                pieces_total += pieces.len() as u64;
                cache
                    .write_pieces(BlockKey::new(InodeId(1), b), BLOCK, &pieces, 1)
                    .unwrap();
            }
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "CYCLIC({k:3}): {pieces_total} pieces in {secs:.3} s: {:.0} ns/piece, {:.0} MiB/s",
            secs * 1e9 / pieces_total as f64,
            (2 * BLOCKS * BLOCK as u64 / 2) as f64 / secs / (1 << 20) as f64
        );
    }
}
