//! The policies' key hasher: a folded multiply (as in foldhash) keyed with random
//! seeds drawn per map from the standard library's `RandomState`. Several times faster
//! than SipHash on the simulator's 10^7 references, and still keyed, so a client
//! choosing block numbers cannot aim them at one bucket without knowing the seeds.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

/// Seeds for one map.
#[derive(Clone, Debug)]
pub(crate) struct KeyedState {
    seed: u64,
    multiplier: u64,
}

impl Default for KeyedState {
    fn default() -> Self {
        let random = RandomState::new();
        KeyedState {
            seed: random.hash_one(0u64),
            // Odd, so that the multiply never loses the low bit of the input.
            multiplier: random.hash_one(1u64) | 1,
        }
    }
}

impl BuildHasher for KeyedState {
    type Hasher = Folded;

    fn build_hasher(&self) -> Folded {
        Folded {
            state: self.seed,
            multiplier: self.multiplier,
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Folded {
    state: u64,
    multiplier: u64,
}

fn fold(a: u64, b: u64) -> u64 {
    let product = (a as u128) * (b as u128);
    (product as u64) ^ ((product >> 64) as u64)
}

impl Hasher for Folded {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.state = fold(self.state ^ v, self.multiplier);
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    fn finish(&self) -> u64 {
        fold(self.state, self.multiplier.rotate_left(32) | 1)
    }
}
