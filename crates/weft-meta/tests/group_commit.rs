//! Group commit: operations from many threads at once share durable commits, every one
//! of them is there afterwards (and after reopening), and a refused operation in a group
//! neither fails nor leaks into the others.

mod common;

use std::collections::BTreeSet;
use std::sync::Barrier;

use common::*;
use weft_layout::InodeId;
use weft_proto::ErrorCode;

const THREADS: usize = 8;
const CREATES_PER_THREAD: usize = 200;

#[test]
fn concurrent_creates_share_commits_and_all_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let r = root();
    let inodes: BTreeSet<u64> = {
        let store = open(dir.path());
        let barrier = Barrier::new(THREADS);
        let inodes: Vec<Vec<u64>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (store, barrier, r) = (&store, &barrier, &r);
                    scope.spawn(move || {
                        barrier.wait();
                        let mut mine = Vec::new();
                        for k in 0..CREATES_PER_THREAD {
                            let name = format!("f{t}.{k}");
                            mine.push(create(store, r, InodeId::ROOT, &name).unwrap().inode.0);
                            // Every other operation, a refusal in the middle of the storm:
                            // it must neither fail nor undo anyone else's create.
                            if k % 2 == 0 {
                                assert_eq!(
                                    code(store.mkdir(r, InodeId::ROOT, &name, 0o755)),
                                    ErrorCode::Exists
                                );
                            }
                        }
                        mine
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let (groups, operations) = store.group_commits();
        eprintln!("{operations} operations in {groups} commits");
        assert!(
            operations >= (THREADS * CREATES_PER_THREAD) as u64,
            "{operations} operations committed"
        );
        assert!(
            groups < operations,
            "{THREADS} threads creating at once never shared a commit ({groups} commits)"
        );
        inodes.into_iter().flatten().collect()
    };
    assert_eq!(
        inodes.len(),
        THREADS * CREATES_PER_THREAD,
        "inode numbers are distinct"
    );
    let store = open(dir.path());
    let (entries, more) = store.readdir(&r, InodeId::ROOT, b"", 4096).unwrap();
    assert!(!more);
    let listed: BTreeSet<u64> = entries.iter().map(|e| e.inode.0).collect();
    assert_eq!(
        listed, inodes,
        "every acknowledged create is there after reopening"
    );
    assert_eq!(
        store.getattr(&r, InodeId::ROOT).unwrap().nlink as usize,
        2,
        "the root counts no subdirectories"
    );
    assert_eq!(
        store.statfs(&r).unwrap().files as usize,
        THREADS * CREATES_PER_THREAD
    );
}

/// With a commit interval, operations are acknowledged before they are durable: the
/// store counts them (sequence numbers), `commit` makes them durable at once, and the
/// numbers keep rising across a reopen (they are stored with every commit).
#[test]
fn with_an_interval_operations_wait_for_commit_and_numbers_keep_rising() {
    let dir = tempfile::tempdir().unwrap();
    let r = root();
    let last = {
        let store = open(dir.path());
        // Reserves a block of inode numbers (a durable commit of its own).
        create(&store, &r, InodeId::ROOT, "first").unwrap();
        let before = store.commit_state();
        assert_eq!(before.lag(), 0);
        store.set_commit_interval(std::time::Duration::from_secs(60));
        for k in 0..10 {
            create(&store, &r, InodeId::ROOT, format!("f{k}")).unwrap();
        }
        let state = store.commit_state();
        assert!(state.seq >= before.seq + 10, "{state:?} after {before:?}");
        assert_eq!(
            state.durable_seq, before.durable_seq,
            "nothing asked for a durable commit"
        );
        assert!(state.lag() >= 10, "{state:?}");
        store.commit().unwrap();
        let state = store.commit_state();
        assert_eq!((state.lag(), state.durable_seq), (0, state.seq), "{state:?}");
        // A refusal takes no number and leaves nothing to commit.
        assert_eq!(
            code(store.mkdir(&r, InodeId::ROOT, "f0", 0o755)),
            ErrorCode::Exists
        );
        assert_eq!(store.commit_state().lag(), 0);
        // Interval 0: durable before answered.
        store.set_commit_interval(std::time::Duration::ZERO);
        create(&store, &r, InodeId::ROOT, "g").unwrap();
        let state = store.commit_state();
        assert_eq!(state.lag(), 0, "{state:?}");
        state.seq
    };
    let store = open(dir.path());
    let state = store.commit_state();
    // (Opening commits once more: it hands the precreated pool to the purger.)
    assert!(
        state.seq >= last && state.durable_seq == state.seq,
        "{state:?} after {last}"
    );
    create(&store, &r, InodeId::ROOT, "h").unwrap();
    assert!(store.commit_state().seq > state.seq);
}
