//! The trace-driven cache simulator: a reference stream ([`crate::refs`]) replayed
//! through the cache tier's own replacement policies (weft-cache's, unchanged: what is
//! simulated is what runs).
//!
//! 1. The tier is `managers` cache managers of `cache_bytes / managers` each, in blocks;
//!    block `x` of a file belongs to manager `x mod managers` (weft-cache's `Mapping`).
//! 2. A reference to a block some process asked for is one `policy::access` on its
//!    manager: a hit touches it, a miss fetches it (evicting while full) and admits it.
//! 3. Aggregated stream: every block of a sent request is such a reference (the cache
//!    cannot tell which ones a process wanted); a miss on an unasked block is also a
//!    block fetched that no process asked for.
//! 4. Original stream (collective-I/O-aware): the processes' references in their time
//!    order; the blocks of an aggregated request that no process asked for are fetched
//!    but are not references: admitted at the cold end ([`Unrequested::Cold`]) or not
//!    admitted ([`Unrequested::None`]).
//! 5. Hit rate counts references (hits / references), byte hit rate the bytes the
//!    references wanted.

use weft_cache::policy::{access, Access, Admission, AnyPolicy, Policy, PolicyKind};
use weft_cache::Mapping;

use crate::refs::{Ref, RefKind, Refs};

/// Which reference stream the cache is fed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stream {
    /// The requests sent after collective aggregation (what a cache sees today).
    Aggregated,
    /// The processes' original requests (collective-I/O-aware caching).
    Original,
}

impl Stream {
    pub fn as_str(&self) -> &'static str {
        match self {
            Stream::Aggregated => "aggregated",
            Stream::Original => "original",
        }
    }
}

impl std::str::FromStr for Stream {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "aggregated" => Ok(Stream::Aggregated),
            "original" | "cio" | "cio-aware" => Ok(Stream::Original),
            _ => Err(format!("unknown stream {s:?} (aggregated or original)")),
        }
    }
}

/// What the original stream does with blocks fetched that no process asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unrequested {
    /// Admitted at the cold end (evicted first, no frequency, no ghost entry).
    Cold,
    /// Not admitted: passed through.
    None,
}

impl Unrequested {
    pub fn as_str(&self) -> &'static str {
        match self {
            Unrequested::Cold => "cold",
            Unrequested::None => "none",
        }
    }
}

impl std::str::FromStr for Unrequested {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cold" => Ok(Unrequested::Cold),
            "none" | "skip" => Ok(Unrequested::None),
            _ => Err(format!(
                "unknown admission {s:?} of unrequested blocks (cold or none)"
            )),
        }
    }
}

/// How blocks are dealt over the managers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MappingKind {
    /// Hash Distributed Caching: block `x` to manager `x mod managers`.
    Hashed,
    /// Server-aligned delegates: the same function, blocks being stripes (checked).
    Aligned,
}

impl std::str::FromStr for MappingKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "hashed" => Ok(MappingKind::Hashed),
            "aligned" => Ok(MappingKind::Aligned),
            _ => Err(format!("unknown mapping {s:?} (hashed or aligned)")),
        }
    }
}

/// One simulation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SimConfig {
    pub policy: PolicyKind,
    pub stream: Stream,
    /// Only for the original stream.
    pub unrequested: Unrequested,
    /// The whole tier's capacity.
    pub cache_bytes: u64,
    pub managers: u32,
    pub mapping: MappingKind,
}

/// What one simulation counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SimResult {
    /// Blocks per manager.
    pub capacity_blocks: u64,
    pub references: u64,
    pub hits: u64,
    pub bytes: u64,
    pub hit_bytes: u64,
    /// Blocks fetched (on a miss) that no process asked for.
    pub unasked_fetched: u64,
}

impl SimResult {
    pub fn misses(&self) -> u64 {
        self.references - self.hits
    }
    pub fn hit_rate(&self) -> f64 {
        ratio(self.hits, self.references)
    }
    pub fn byte_hit_rate(&self) -> f64 {
        ratio(self.hit_bytes, self.bytes)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    #[error("a cache of {cache_bytes} bytes over {managers} managers holds less than one block of {block_size} bytes each")]
    TooSmall {
        cache_bytes: u64,
        managers: u32,
        block_size: u64,
    },
    #[error("no cache managers")]
    NoManagers,
    #[error("the aligned mapping needs blocks that are stripes: {path} has {stripe_size}-byte stripes, the blocks are {block_size} bytes")]
    NotAligned {
        path: String,
        stripe_size: u64,
        block_size: u64,
    },
}

/// Checks that `config` can run on `refs`.
pub fn check(refs: &Refs, config: &SimConfig) -> Result<u64, SimError> {
    if config.managers == 0 {
        return Err(SimError::NoManagers);
    }
    if config.mapping == MappingKind::Aligned {
        if let Some(f) = refs
            .files
            .iter()
            .find(|f| f.stripe_size_bytes != refs.block_size_bytes)
        {
            return Err(SimError::NotAligned {
                path: f.path.clone(),
                stripe_size: f.stripe_size_bytes,
                block_size: refs.block_size_bytes,
            });
        }
    }
    let capacity = config.cache_bytes / refs.block_size_bytes.max(1) / u64::from(config.managers);
    if capacity == 0 {
        return Err(SimError::TooSmall {
            cache_bytes: config.cache_bytes,
            managers: config.managers,
            block_size: refs.block_size_bytes,
        });
    }
    Ok(capacity)
}

/// Replays the configured stream of `refs`.
pub fn simulate(refs: &Refs, config: &SimConfig) -> Result<SimResult, SimError> {
    let capacity = check(refs, config)?;
    let mut policies: Vec<AnyPolicy<u64>> = (0..config.managers)
        .map(|_| AnyPolicy::new(config.policy, capacity as usize))
        .collect();
    let mut result = replay(refs, config, &mut policies, |r| r.key);
    result.capacity_blocks = capacity;
    Ok(result)
}

/// The simulator's loop over any policies (one per manager) and key type: the tier's
/// policies in [`simulate`], naive reference models in tests.
pub fn replay<K: Copy, P: Policy<K>>(
    refs: &Refs,
    config: &SimConfig,
    policies: &mut [P],
    key_of: impl Fn(&Ref) -> K,
) -> SimResult {
    let mapping = Mapping::Hashed {
        managers: policies.len() as u32,
    };
    let stripe_counts: Vec<u32> = refs.files.iter().map(|f| f.stripe_count).collect();
    let single = policies.len() == 1;
    let mut result = SimResult::default();
    let stream: &[Ref] = match config.stream {
        Stream::Aggregated => &refs.aggregated,
        Stream::Original => &refs.original,
    };
    for r in stream {
        let policy = if single {
            &mut policies[0]
        } else {
            let m = mapping.owner(r.block(), stripe_counts[r.file()]);
            &mut policies[m as usize]
        };
        let key = key_of(r);
        match r.kind {
            RefKind::Asked | RefKind::Unasked => {
                result.references += 1;
                result.bytes += u64::from(r.bytes);
                match access(policy, key, Admission::Normal) {
                    Access::Hit => {
                        result.hits += 1;
                        result.hit_bytes += u64::from(r.bytes);
                    }
                    Access::Miss { .. } => {
                        if r.kind == RefKind::Unasked {
                            result.unasked_fetched += 1;
                        }
                    }
                }
            }
            RefKind::Extra => {
                if policy.contains(&key) {
                    continue;
                }
                result.unasked_fetched += 1;
                if config.unrequested == Unrequested::Cold {
                    access(policy, key, Admission::Cold);
                }
            }
        }
    }
    result
}

/// Runs every configuration on up to `threads` threads; results in the given order.
pub fn simulate_all(refs: &Refs, configs: &[SimConfig], threads: usize) -> Vec<Result<SimResult, SimError>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut out: Vec<Option<Result<SimResult, SimError>>> = vec![None; configs.len()];
    let slots = std::sync::Mutex::new(&mut out);
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, configs.len().max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(config) = configs.get(i) else { break };
                let r = simulate(refs, config);
                slots.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
            });
        }
    });
    out.into_iter()
        .map(|r| r.expect("every configuration ran"))
        .collect()
}

/// The default cache sizes: nine sizes from 1/16 to 2x `touched_bytes`, evenly spaced
/// on a log scale (each 32^(1/8) ≈ 1.54 times the last), rounded down to whole blocks
/// per manager (at least one).
pub fn default_sizes(touched_bytes: u64, block_size: u64, managers: u32) -> Vec<u64> {
    let unit = block_size.max(1) * u64::from(managers.max(1));
    (0..9)
        .map(|k| {
            let fraction = 2f64.powf(-4.0 + 5.0 * f64::from(k) / 8.0);
            let bytes = (touched_bytes as f64 * fraction) as u64;
            (bytes / unit).max(1) * unit
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Flags, Record};
    use crate::refs::{build, RefOptions, SimFile, BLOCK_BITS};
    use weft_cache::policy::Lru;

    fn refs_of(blocks: &[(u64, RefKind)]) -> Refs {
        let stream: Vec<Ref> = blocks
            .iter()
            .map(|&(block, kind)| Ref {
                key: block,
                bytes: 10,
                kind,
            })
            .collect();
        Refs {
            block_size_bytes: 10,
            files: vec![SimFile {
                inode: 1,
                path: "/f".into(),
                stripe_size_bytes: 10,
                stripe_count: 2,
            }],
            aggregated: stream.clone(),
            original: stream,
            touched_blocks: 0,
            ..Refs::default()
        }
    }

    fn config(policy: PolicyKind, stream: Stream, blocks: u64) -> SimConfig {
        SimConfig {
            policy,
            stream,
            unrequested: Unrequested::Cold,
            cache_bytes: blocks * 10,
            managers: 1,
            mapping: MappingKind::Hashed,
        }
    }

    /// Worked by hand: references 1 2 3 1 4 1 2 with two blocks.
    /// LRU: miss miss miss(evict 1) miss(evict 2) miss(evict 3) hit miss(evict 4): 1 hit.
    /// FIFO: 1 2 | 3 evicts 1 | 1 evicts 2 | 4 evicts 3 | 1 hit | 2 evicts 1: 1 hit.
    /// LFU: 1 2 | 3 evicts 1 (count 1, older) | 1 evicts 2 | 4 evicts 3 | 1 hit
    ///      (count 2) | 2 evicts 4: 1 hit.
    #[test]
    fn tiny_traces_worked_by_hand() {
        let trace: Vec<(u64, RefKind)> = [1, 2, 3, 1, 4, 1, 2]
            .iter()
            .map(|&b| (b, RefKind::Asked))
            .collect();
        let refs = refs_of(&trace);
        for (policy, hits) in [(PolicyKind::Lru, 1), (PolicyKind::Fifo, 1), (PolicyKind::Lfu, 1)] {
            let r = simulate(&refs, &config(policy, Stream::Original, 2)).unwrap();
            assert_eq!((r.references, r.hits), (7, hits), "{policy}");
        }
        // Three blocks: LRU 1 2 3 1(hit) 4(evict 2) 1(hit) 2(evict 3): 2 hits;
        // FIFO 1 2 3 1(hit) 4(evict 1) 1(evict 2) 2(evict 3): 1 hit.
        let r = simulate(&refs, &config(PolicyKind::Lru, Stream::Original, 3)).unwrap();
        assert_eq!(r.hits, 2);
        assert_eq!(r.hit_bytes, 20);
        let r = simulate(&refs, &config(PolicyKind::Fifo, Stream::Original, 3)).unwrap();
        assert_eq!(r.hits, 1);
        // A loop over three blocks in a cache of two: LRU never hits, LFU keeps... the
        // first two it saw longest? No: every key has count 1 when evicted. 0 hits too.
        let looping: Vec<(u64, RefKind)> = [1, 2, 3, 1, 2, 3, 1, 2, 3]
            .iter()
            .map(|&b| (b, RefKind::Asked))
            .collect();
        let r = simulate(&refs_of(&looping), &config(PolicyKind::Lru, Stream::Original, 2)).unwrap();
        assert_eq!(r.hits, 0);
    }

    /// Blocks nobody asked for: admitted cold they are evicted before anything a
    /// process referenced; not admitted they take no room at all.
    #[test]
    fn unrequested_blocks_cold_or_not_admitted() {
        use RefKind::*;
        // 1 and 2 asked, 3 extra, then 1 and 2 again; cache of two blocks.
        let trace = [(1, Asked), (2, Asked), (3, Extra), (1, Asked), (2, Asked)];
        let refs = refs_of(&trace);
        let mut c = config(PolicyKind::Lru, Stream::Original, 2);
        let cold = simulate(&refs, &c).unwrap();
        // Cold: 3 evicts 1 (the LRU end, below it nothing colder), then 1 misses and
        // evicts 3 (cold end), 2 hits.
        assert_eq!((cold.references, cold.hits, cold.unasked_fetched), (4, 1, 1));
        c.unrequested = Unrequested::None;
        let none = simulate(&refs, &c).unwrap();
        assert_eq!((none.references, none.hits, none.unasked_fetched), (4, 2, 1));
        // The aggregated stream counts the unasked block as a reference.
        let trace = [(1, Asked), (2, Asked), (3, Unasked), (1, Asked), (2, Asked)];
        let agg = simulate(&refs_of(&trace), &config(PolicyKind::Lru, Stream::Aggregated, 2)).unwrap();
        assert_eq!((agg.references, agg.hits, agg.unasked_fetched), (5, 0, 1));
    }

    /// The simulator's loop is `policy::access` on the tier's own policies: with one
    /// manager it agrees step by step with a plain replay through `Lru`.
    #[test]
    fn one_manager_agrees_with_a_plain_replay() {
        let mut state = 7u64;
        let trace: Vec<(u64, RefKind)> = (0..5000)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 33) % 64, RefKind::Asked)
            })
            .collect();
        let refs = refs_of(&trace);
        let r = simulate(&refs, &config(PolicyKind::Lru, Stream::Original, 20)).unwrap();
        let mut lru = Lru::new(20);
        let hits = trace
            .iter()
            .filter(|(b, _)| access(&mut lru, *b, Admission::Normal) == Access::Hit)
            .count();
        assert_eq!(r.hits, hits as u64);
    }

    /// Managers split the capacity and the blocks: with two managers of one block each,
    /// blocks 0 and 1 (different managers) both stay, 0 and 2 (same manager) do not.
    #[test]
    fn managers_split_blocks_and_capacity() {
        use RefKind::*;
        let mut c = config(PolicyKind::Lru, Stream::Original, 2);
        c.managers = 2;
        let r = simulate(&refs_of(&[(0, Asked), (1, Asked), (0, Asked), (1, Asked)]), &c).unwrap();
        assert_eq!(r.hits, 2);
        let r = simulate(&refs_of(&[(0, Asked), (2, Asked), (0, Asked), (2, Asked)]), &c).unwrap();
        assert_eq!(r.hits, 0);
        assert_eq!(r.capacity_blocks, 1);
        c.cache_bytes = 10;
        assert!(matches!(
            simulate(&refs_of(&[]), &c),
            Err(SimError::TooSmall { .. })
        ));
        c.mapping = MappingKind::Aligned;
        c.cache_bytes = 20;
        let mut refs = refs_of(&[]);
        refs.block_size_bytes = 20;
        refs.files[0].stripe_size_bytes = 10;
        c.cache_bytes = 40;
        assert!(matches!(simulate(&refs, &c), Err(SimError::NotAligned { .. })));
    }

    /// With the aggregated stream equal to the original one (no aggregation), the
    /// collective-I/O-aware mode gives the same results for every policy and size.
    #[test]
    fn aware_mode_equals_aggregated_when_the_streams_are_equal() {
        use crate::refs::tests::{file, request, trace};
        let mut records = vec![file(1)];
        let mut state = 3u64;
        for t in 0..400u64 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let offset = (state >> 33) % 5000;
            records.push(request(
                t,
                Flags::SENT,
                None,
                &[(offset, 1 + (state >> 20) % 300)],
            ));
        }
        let bytes = trace(0, &records);
        let refs = build(&[("p".into(), &bytes[..])], &RefOptions::default()).unwrap();
        assert_eq!(refs.original, refs.aggregated);
        for policy in PolicyKind::ALL {
            for blocks in [1, 3, 10, 30] {
                let mut c = config(policy, Stream::Aggregated, 0);
                c.cache_bytes = blocks * refs.block_size_bytes;
                let a = simulate(&refs, &c).unwrap();
                c.stream = Stream::Original;
                let o = simulate(&refs, &c).unwrap();
                assert_eq!(a, o, "{policy} {blocks}");
                assert!(a.references > 0);
            }
        }
        let _ = Record::Note(String::new());
        let _ = BLOCK_BITS;
    }

    proptest::proptest! {
        /// Each policy, through the simulator's loop, against weft-cache's naive model
        /// of it (written from the papers, vectors and linear scans), on random
        /// streams with unasked and extra blocks, both streams, one or three managers.
        #[test]
        fn policies_agree_with_the_naive_models(
            stream in proptest::collection::vec((0u64..24, 0u8..6), 0..300),
            blocks in 1u64..12,
            managers in proptest::sample::select(vec![1u32, 3]),
            cold in proptest::bool::ANY,
        ) {
            use weft_cache::policy::model::{NaiveArc, NaiveLfu, NaiveQueue, NaiveS3};
            let kinds = |k: u8, extra: RefKind| if k == 0 { extra } else { RefKind::Asked };
            let mut refs = refs_of(&[]);
            refs.original = stream.iter().map(|&(b, k)| Ref { key: b, bytes: 1 + b as u32, kind: kinds(k, RefKind::Extra) }).collect();
            refs.aggregated = stream.iter().map(|&(b, k)| Ref { key: b, bytes: 1 + b as u32, kind: kinds(k, RefKind::Unasked) }).collect();
            for stream in [Stream::Aggregated, Stream::Original] {
                for policy in PolicyKind::ALL {
                    let mut c = config(policy, stream, blocks * u64::from(managers));
                    c.managers = managers;
                    c.unrequested = if cold { Unrequested::Cold } else { Unrequested::None };
                    let real = simulate(&refs, &c).unwrap();
                    let cap = real.capacity_blocks as usize;
                    let key = |r: &Ref| r.key as u32;
                    let mut naive = match policy {
                        PolicyKind::Lru => replay(&refs, &c, &mut (0..managers).map(|_| NaiveQueue::lru(cap)).collect::<Vec<_>>(), key),
                        PolicyKind::Fifo => replay(&refs, &c, &mut (0..managers).map(|_| NaiveQueue::fifo(cap)).collect::<Vec<_>>(), key),
                        PolicyKind::Lfu => replay(&refs, &c, &mut (0..managers).map(|_| NaiveLfu::new(cap)).collect::<Vec<_>>(), key),
                        PolicyKind::Arc => replay(&refs, &c, &mut (0..managers).map(|_| NaiveArc::new(cap)).collect::<Vec<_>>(), key),
                        PolicyKind::S3Fifo => replay(&refs, &c, &mut (0..managers).map(|_| NaiveS3::new(cap)).collect::<Vec<_>>(), key),
                    };
                    naive.capacity_blocks = real.capacity_blocks;
                    proptest::prop_assert_eq!(real, naive, "{} {:?}", policy, stream);
                }
            }
        }
    }

    #[test]
    fn default_sizes_span_a_sixteenth_to_twice() {
        let sizes = default_sizes(1 << 30, 65536, 1);
        assert_eq!(sizes.len(), 9);
        assert_eq!(sizes[0], 1 << 26);
        assert_eq!(sizes[8], 1 << 31);
        assert!(sizes.windows(2).all(|w| w[0] < w[1]));
        assert!(default_sizes(10, 65536, 4).iter().all(|&s| s == 65536 * 4));
    }

    #[test]
    fn many_threads_give_the_results_of_one() {
        let trace: Vec<(u64, RefKind)> = (0..3000u64).map(|i| ((i * 7919) % 97, RefKind::Asked)).collect();
        let refs = refs_of(&trace);
        let configs: Vec<SimConfig> = PolicyKind::ALL
            .iter()
            .flat_map(|&p| [5u64, 20, 50].map(|b| config(p, Stream::Original, b)))
            .collect();
        let one = simulate_all(&refs, &configs, 1);
        let four = simulate_all(&refs, &configs, 4);
        assert_eq!(one, four);
    }
}
