//! Policy tests: each policy against its naive model on random traces (with pinned
//! keys, cold admissions, removals and preference marks), ARC's invariants after every
//! step, and tiny traces whose hit counts and end states were worked out by hand.

use proptest::prelude::*;

use super::model::{NaiveArc, NaiveLfu, NaivePreferLru, NaiveQueue, NaiveS3};
use super::*;

const KEYS: u32 = 16;

#[derive(Debug, Clone)]
enum Op {
    /// A reference: a hit touches, a miss evicts while full (keys in the mask are
    /// pinned) and admits.
    Access(u32, Admission, u32),
    Touch(u32),
    Remove(u32),
    /// A victim request with no incoming key.
    Evict(u32),
    Prefer(u32, bool),
}

fn pins() -> impl Strategy<Value = u32> {
    prop_oneof![4 => Just(0u32), 2 => (0u32..KEYS).prop_map(|b| 1 << b), 1 => any::<u32>()]
}

fn op() -> impl Strategy<Value = Op> {
    let admission = prop_oneof![4 => Just(Admission::Normal), 1 => Just(Admission::Cold)];
    prop_oneof![
        12 => (0..KEYS, admission, pins()).prop_map(|(k, a, m)| Op::Access(k, a, m)),
        2 => (0..KEYS).prop_map(Op::Touch),
        1 => (0..KEYS).prop_map(Op::Remove),
        1 => pins().prop_map(Op::Evict),
        2 => (0..KEYS, any::<bool>()).prop_map(|(k, p)| Op::Prefer(k, p)),
    ]
}

fn trace() -> impl Strategy<Value = (usize, Vec<Op>)> {
    (1usize..9, prop::collection::vec(op(), 0..250))
}

/// Runs `ops` on both policies, comparing every answer, and `check` after each step.
fn run_pair<A: Policy<u32>, B: Policy<u32>>(
    real: &mut A,
    model: &mut B,
    ops: &[Op],
    check: impl Fn(&A, &B) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    for op in ops {
        match *op {
            Op::Access(k, admission, mask) => {
                let evictable = move |x: &u32| mask & (1 << x) == 0;
                prop_assert_eq!(real.contains(&k), model.contains(&k));
                if real.contains(&k) {
                    if admission == Admission::Normal {
                        prop_assert!(real.touch(&k) && model.touch(&k));
                    }
                } else {
                    let incoming = Some(Incoming { key: k, admission });
                    while real.len() >= real.capacity() {
                        let victim = real.evict(incoming, &evictable);
                        prop_assert_eq!(victim, model.evict(incoming, &evictable), "victim for {}", k);
                        if victim.is_none() {
                            break;
                        }
                    }
                    if real.len() < real.capacity() {
                        real.admit(k, admission);
                        model.admit(k, admission);
                    }
                }
            }
            Op::Touch(k) => prop_assert_eq!(real.touch(&k), model.touch(&k)),
            Op::Remove(k) => prop_assert_eq!(real.remove(&k), model.remove(&k)),
            Op::Evict(mask) => {
                let evictable = move |x: &u32| mask & (1 << x) == 0;
                prop_assert_eq!(real.evict(None, &evictable), model.evict(None, &evictable));
            }
            Op::Prefer(k, p) => {
                real.set_preferred(&k, p);
                model.set_preferred(&k, p);
            }
        }
        prop_assert_eq!(real.len(), model.len());
        prop_assert!(real.len() <= real.capacity());
        for k in 0..KEYS {
            prop_assert_eq!(real.contains(&k), model.contains(&k), "key {}", k);
        }
        check(real, model)?;
    }
    Ok(())
}

fn check_arc_invariants(s: ArcSizes, c: usize) -> Result<(), TestCaseError> {
    prop_assert!(s.t1 + s.t2 <= c, "{:?}", s);
    prop_assert!(s.t1 + s.b1 <= c, "{:?}", s);
    prop_assert!(s.t1 + s.t2 + s.b1 + s.b2 <= 2 * c, "{:?}", s);
    prop_assert!(s.p <= c, "{:?}", s);
    Ok(())
}

fn naive_queue(capacity: usize, move_on_hit: bool) -> NaiveQueue {
    NaiveQueue {
        keys: vec![],
        capacity,
        move_on_hit,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn lru_matches_model((c, ops) in trace()) {
        let mut real = Lru::new(c);
        run_pair(&mut real, &mut naive_queue(c, true), &ops, |r, m| {
            prop_assert_eq!(r.keys(), m.keys.clone());
            Ok(())
        })?;
    }

    #[test]
    fn fifo_matches_model((c, ops) in trace()) {
        let mut real = Fifo::new(c);
        run_pair(&mut real, &mut naive_queue(c, false), &ops, |r, m| {
            prop_assert_eq!(r.keys(), m.keys.clone());
            Ok(())
        })?;
    }

    #[test]
    fn lfu_matches_model((c, ops) in trace()) {
        let mut model = NaiveLfu { entries: vec![], capacity: c, tick: 0, cold_tick: 0 };
        run_pair(&mut Lfu::new(c), &mut model, &ops, |r, m| {
            for e in &m.entries {
                prop_assert_eq!(r.count(&e.0), Some(e.1));
            }
            Ok(())
        })?;
    }

    #[test]
    fn arc_matches_model_and_keeps_its_invariants((c, ops) in trace()) {
        run_pair(&mut ArcPolicy::new(c), &mut NaiveArc::new(c), &ops, |r, m| {
            check_arc_invariants(r.sizes(), c)?;
            let [t1, t2, b1, b2] = r.lists();
            prop_assert_eq!((t1, t2, b1, b2), (m.t1.clone(), m.t2.clone(), m.b1.clone(), m.b2.clone()));
            prop_assert_eq!(r.sizes().p, m.p);
            Ok(())
        })?;
    }

    #[test]
    fn s3fifo_matches_model((c, ops) in (1usize..30, prop::collection::vec(op(), 0..250))) {
        run_pair(&mut S3Fifo::new(c), &mut NaiveS3::new(c), &ops, |r, m| {
            let [s, main, g] = r.queues();
            prop_assert_eq!((s, main, g), (m.small.clone(), m.main.clone(), m.ghost.clone()));
            for &(k, f) in &m.freq {
                prop_assert_eq!(r.frequency(&k), Some(f));
            }
            Ok(())
        })?;
    }

    #[test]
    fn prefer_lru_matches_model((c, ops) in trace()) {
        let mut model = NaivePreferLru { lru: naive_queue(c, true), preferred: vec![] };
        run_pair(&mut Prefer::new(Lru::new(c)), &mut model, &ops, |r, m| {
            prop_assert_eq!(r.preferred_len(), m.preferred.len());
            prop_assert_eq!(r.inner().keys(), m.lru.keys.clone());
            Ok(())
        })?;
    }

    /// ARC's bounds on long traces over many keys and a larger cache, with the
    /// simulator's access path (no pins).
    #[test]
    fn arc_invariants_on_long_traces(c in 1usize..40, keys in prop::collection::vec(0u32..120, 0..2000)) {
        let mut arc = ArcPolicy::new(c);
        for (i, k) in keys.into_iter().enumerate() {
            let admission = if i % 7 == 3 { Admission::Cold } else { Admission::Normal };
            access(&mut arc, k, admission);
            check_arc_invariants(arc.sizes(), c)?;
        }
    }
}

/// Hits of a trace run through [`access`] with normal admissions.
fn hits<P: Policy<u32>>(policy: &mut P, trace: &[u32]) -> usize {
    trace
        .iter()
        .filter(|&&k| access(policy, k, Admission::Normal) == Access::Hit)
        .count()
}

const BELADY: [u32; 12] = [1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5];

#[test]
fn lru_and_fifo_on_beladys_trace() {
    // The textbook reference string: LRU with 3 frames faults 10 times; FIFO faults 9
    // times with 3 frames and 10 with 4 (Belady's anomaly).
    let mut lru = Lru::new(3);
    assert_eq!(hits(&mut lru, &BELADY), 2);
    assert_eq!(lru.keys(), vec![3, 4, 5]);
    assert_eq!(hits(&mut Fifo::new(3), &BELADY), 3);
    let mut fifo4 = Fifo::new(4);
    assert_eq!(hits(&mut fifo4, &BELADY), 2);
    assert_eq!(fifo4.keys(), vec![2, 3, 4, 5]);
}

#[test]
fn lfu_breaks_ties_by_recency() {
    // Capacity 2: 1 2 2(h) 1(h) leaves both at count 2, 2 referenced less recently;
    // 3 evicts 2; 1(h) makes 1:3; 2 evicts 3 (count 1). Hits: 2, 1, 1.
    let mut lfu = Lfu::new(2);
    assert_eq!(hits(&mut lfu, &[1, 2, 2, 1, 3, 1, 2]), 3);
    assert_eq!(
        (lfu.count(&1), lfu.count(&2), lfu.count(&3)),
        (Some(3), Some(1), None)
    );
    // LRU on the same trace: 3 evicts 2, 1 hits, 2 evicts 3: also 3 hits; but on
    // 1 1 2 3 1, LFU keeps 1 (count 2) and hits twice where LRU hits once.
    assert_eq!(hits(&mut Lfu::new(2), &[1, 1, 2, 3, 1]), 2);
    assert_eq!(hits(&mut Lru::new(2), &[1, 1, 2, 3, 1]), 1);
}

#[test]
fn arc_by_hand() {
    // c = 2. Worked through the paper's cases:
    //  1 miss T1=[1]; 1 hit T2=[1]; 2 miss T1=[2];
    //  3 miss: REPLACE (|T1|=1 > p=0) 2 -> B1; T1=[3];
    //  2 ghost B1: p=1; REPLACE (|T1|=1 = p) 1 -> B2; T2=[2];
    //  1 ghost B2: p=0; REPLACE (|T1|=1 > 0) 3 -> B1; T2=[2,1];
    //  3 ghost B1: p=1; REPLACE (T1 empty) 2 -> B2; T2=[1,3];
    //  1 hit T2=[3,1];
    //  4 miss: REPLACE 3 -> B2 (|T1|=0); T1=[4];
    //  5 miss: REPLACE (|T1|=1 = p, 5 not in B2) 1 -> B2; directory at 2c: drop 2 from
    //    B2; T1=[4,5], B2=[3,1].
    let mut arc = ArcPolicy::new(2);
    assert_eq!(hits(&mut arc, &[1, 1, 2, 3, 2, 1, 3, 1, 4, 5]), 2);
    let [t1, t2, b1, b2] = arc.lists();
    assert_eq!((t1, t2, b1, b2), (vec![4, 5], vec![], vec![], vec![3, 1]));
    assert_eq!(arc.sizes().p, 1);
}

#[test]
fn s3fifo_by_hand() {
    // c = 3: S holds 1, the ghost queue 2.
    //  1, 2 miss S=[1,2]; 1 hit (freq 1); 3 miss S=[1,2,3];
    //  4 miss: S over its share: 1 (hit) moves to M, 2 goes to G; S=[3,4];
    //  2 miss, in G: evict 3 into G=[2,3]; 2 enters M=[1,2], G=[3]; S=[4];
    //  1 hit (freq 1); 5 miss: 4 -> G=[3,4]; S=[5];
    //  4 miss, in G: 5 -> G=[3,4,5] drops 3; 4 enters M=[1,2,4]; S=[], G=[5];
    //  6 miss: S below its share, evict from M: 1 (freq 1) is reinserted with 0,
    //    2 is evicted (no ghost); S=[6], M=[4,1].
    let mut s3 = S3Fifo::new(3);
    assert_eq!(hits(&mut s3, &[1, 2, 1, 3, 4, 2, 1, 5, 4, 6]), 2);
    let [s, m, g] = s3.queues();
    assert_eq!((s, m, g), (vec![6], vec![4, 1], vec![5]));
    assert_eq!(s3.frequency(&1), Some(0));
}

#[test]
fn prefer_evicts_marked_keys_first_least_recent_first() {
    let mut p = Prefer::new(Lru::new(3));
    for k in [1, 2, 3] {
        access(&mut p, k, Admission::Normal);
    }
    p.set_preferred(&2, true);
    // 4 evicts 2 (preferred) although 1 is least recently used.
    assert_eq!(
        access(&mut p, 4, Admission::Normal),
        Access::Miss { evicted: Some(2) }
    );
    p.set_preferred(&3, true);
    p.set_preferred(&1, true);
    p.touch(&3);
    // Preferred in recency order: 1, then 3.
    assert_eq!(p.evict(None, &|_| true), Some(1));
    assert_eq!(p.evict(None, &|&k| k != 3), Some(4));
    assert_eq!(p.evict(None, &|_| true), Some(3));
    assert!(p.is_empty());
}

#[test]
fn cold_admissions_go_first_and_leave_no_ghost() {
    for kind in PolicyKind::ALL {
        let mut p = AnyPolicy::new(kind, 4);
        for k in [1, 2, 3] {
            access(&mut p, k, Admission::Normal);
            p.touch(&k);
        }
        access(&mut p, 9, Admission::Cold);
        // Full: the cold key is the victim whatever the policy.
        assert_eq!(
            access(&mut p, 4, Admission::Normal),
            Access::Miss { evicted: Some(9) },
            "{kind}"
        );
    }
    // ARC: an unreferenced cold key leaves no ghost, so coming back is a plain miss
    // that does not move the target p.
    let mut arc = ArcPolicy::new(2);
    access(&mut arc, 1, Admission::Normal);
    access(&mut arc, 2, Admission::Cold);
    access(&mut arc, 3, Admission::Normal);
    assert_eq!(arc.sizes().b1 + arc.sizes().b2, 0);
}

#[test]
fn policy_names_parse() {
    for kind in PolicyKind::ALL {
        assert_eq!(kind.as_str().parse::<PolicyKind>(), Ok(kind));
        assert_eq!(AnyPolicy::<u64>::new(kind, 8).name(), kind.as_str());
    }
    assert_eq!("S3-FIFO".parse::<PolicyKind>(), Ok(PolicyKind::S3Fifo));
    assert!("mru".parse::<PolicyKind>().is_err());
}

#[test]
#[should_panic(expected = "full policy")]
fn admitting_into_a_full_policy_is_a_bug() {
    let mut lru = Lru::new(1);
    lru.admit(1u32, Admission::Normal);
    lru.admit(2u32, Admission::Normal);
}

/// Growing a policy keeps its keys (resident, ghost, counts) and lets it hold more: a
/// grown policy then acts as one built with the larger capacity would from that state
/// on, checked against a policy built at the larger size fed the same keys while the
/// smaller one was never full. Lowering is ignored.
#[test]
fn grow_raises_the_capacity_and_keeps_every_key() {
    for kind in [
        PolicyKind::Lru,
        PolicyKind::Lfu,
        PolicyKind::Fifo,
        PolicyKind::Arc,
        PolicyKind::S3Fifo,
    ] {
        let mut grown: AnyPolicy<u32> = AnyPolicy::new(kind, 4);
        let mut built: AnyPolicy<u32> = AnyPolicy::new(kind, 40);
        for k in [1, 2, 3, 1] {
            access(&mut grown, k, Admission::Normal);
            access(&mut built, k, Admission::Normal);
        }
        grown.grow(2);
        assert_eq!(grown.capacity(), 4, "{kind:?}: never lowered");
        grown.grow(40);
        assert_eq!(grown.capacity(), 40, "{kind:?}");
        assert!([1, 2, 3].iter().all(|k| grown.contains(k)), "{kind:?}");
        let (mut a, mut b) = (0, 0);
        for i in 0..400u32 {
            let k = (i * 7 + i / 13) % 60;
            a += matches!(access(&mut grown, k, Admission::Normal), Access::Hit) as u32;
            b += matches!(access(&mut built, k, Admission::Normal), Access::Hit) as u32;
            assert_eq!(grown.len(), built.len(), "{kind:?} after {i}");
        }
        assert_eq!(a, b, "{kind:?}: the grown policy acts as the one built at 40");
        assert!(a > 0, "{kind:?}");
    }
}
