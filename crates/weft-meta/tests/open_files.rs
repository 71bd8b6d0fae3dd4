//! What the manager does for clients' open files: files a mount keeps alive, nameless,
//! after their last name went, and the revalidation of names a mount cached.

mod common;

use common::*;
use weft_layout::InodeId;
use weft_meta::MetaStore;
use weft_proto::{ErrorCode, MetaStatfs, PathStep};

fn store() -> (tempfile::TempDir, MetaStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    (dir, store)
}

#[test]
fn a_file_kept_for_a_session_lives_nameless_until_released() {
    let (_dir, store) = store();
    let f = create(&store, &root(), InodeId::ROOT, "f").unwrap();
    let session = 0xfeed;
    assert_eq!(
        store.unlink(&root(), InodeId::ROOT, "f", Some(session)).unwrap(),
        Some(f.inode)
    );
    // The name is gone, the inode is not: link count 0, and no orphan yet.
    assert_eq!(
        code(store.lookup(&root(), InodeId::ROOT, "f")),
        ErrorCode::NotFound
    );
    let attr = store.getattr(&root(), f.inode).unwrap();
    assert_eq!(attr.nlink, 0);
    assert!(store.orphans(10).unwrap().is_empty());
    assert_eq!(store.kept(10).unwrap(), vec![(f.inode, session)]);
    assert!(store.readdir(&root(), InodeId::ROOT, "", 0).unwrap().0.is_empty());
    assert_eq!(store.statfs(&root()).unwrap().files, 0);
    // Another session's release does nothing; the keeper's makes it an orphan.
    store.release(f.inode, session + 1).unwrap();
    assert!(store.getattr(&root(), f.inode).is_ok());
    store.release(f.inode, session).unwrap();
    assert_eq!(code(store.getattr(&root(), f.inode)), ErrorCode::Stale);
    assert_eq!(
        store.orphans(10).unwrap(),
        vec![(f.inode, f.layout.clone().unwrap())]
    );
    assert!(store.kept(10).unwrap().is_empty());
    // Released twice: harmless.
    store.release(f.inode, session).unwrap();
    assert_eq!(
        store.statfs(&root()).unwrap(),
        MetaStatfs {
            files: 0,
            directories: 1,
            orphans: 1
        }
    );
}

#[test]
fn rename_over_an_open_file_keeps_it_in_the_same_transaction() {
    let (_dir, store) = store();
    let old = create(&store, &root(), InodeId::ROOT, "pub").unwrap();
    let new = create(&store, &root(), InodeId::ROOT, "pub.tmp").unwrap();
    let (moved, kept) = store
        .rename(
            &root(),
            (InodeId::ROOT, "pub.tmp"),
            (InodeId::ROOT, "pub"),
            Some(9),
        )
        .unwrap();
    assert_eq!((moved.inode, kept), (new.inode, Some(old.inode)));
    assert_eq!(
        store.lookup(&root(), InodeId::ROOT, "pub").unwrap().inode,
        new.inode
    );
    assert_eq!(store.getattr(&root(), old.inode).unwrap().nlink, 0);
    // Without a session the replaced file goes at once.
    create(&store, &root(), InodeId::ROOT, "next").unwrap();
    let (_, kept) = store
        .rename(&root(), (InodeId::ROOT, "next"), (InodeId::ROOT, "pub"), None)
        .unwrap();
    assert_eq!(kept, None);
    assert_eq!(code(store.getattr(&root(), new.inode)), ErrorCode::Stale);
    assert_eq!(store.kept(10).unwrap(), vec![(old.inode, 9)]);
}

#[test]
fn revalidation_finds_removed_renamed_and_replaced_names() {
    let (_dir, store) = store();
    let d = store.mkdir(&root(), InodeId::ROOT, "d", 0o755).unwrap().inode;
    let f = create(&store, &root(), d, "f").unwrap().inode;
    let step = |parent, name: &str, child| PathStep {
        parent,
        name: name.into(),
        child,
    };
    let path = || vec![step(InodeId::ROOT, "d", d), step(d, "f", f)];
    assert_eq!(store.revalidate(&alice(), &path()).unwrap().inode, f);
    // The directory on the way is renamed away and replaced by another.
    store
        .rename(&root(), (InodeId::ROOT, "d"), (InodeId::ROOT, "old"), None)
        .unwrap();
    let d2 = store.mkdir(&root(), InodeId::ROOT, "d", 0o755).unwrap().inode;
    assert_eq!(code(store.revalidate(&alice(), &path())), ErrorCode::Stale);
    let moved = vec![step(InodeId::ROOT, "old", d), step(d, "f", f)];
    assert_eq!(store.revalidate(&alice(), &moved).unwrap().inode, f);
    // The file itself replaced.
    let g = create(&store, &root(), d, "g").unwrap().inode;
    store.rename(&root(), (d, "g"), (d, "f"), None).unwrap();
    assert_eq!(code(store.revalidate(&alice(), &moved)), ErrorCode::Stale);
    let replaced = vec![step(InodeId::ROOT, "old", d), step(d, "f", g)];
    assert_eq!(store.revalidate(&alice(), &replaced).unwrap().inode, g);
    // Removed.
    store.unlink(&root(), d, "f", None).unwrap();
    assert_eq!(code(store.revalidate(&alice(), &replaced)), ErrorCode::Stale);
    // A directory the caller may not search is refused as such, not as stale.
    let private = store.mkdir(&root(), d2, "private", 0o700).unwrap().inode;
    let h = create(&store, &root(), private, "h").unwrap().inode;
    let hidden = vec![
        step(InodeId::ROOT, "d", d2),
        step(d2, "private", private),
        step(private, "h", h),
    ];
    assert_eq!(store.revalidate(&root(), &hidden).unwrap().inode, h);
    assert_eq!(
        code(store.revalidate(&alice(), &hidden)),
        ErrorCode::PermissionDenied
    );
    // Bad input.
    assert_eq!(code(store.revalidate(&alice(), &[])), ErrorCode::InvalidArgument);
    assert_eq!(
        code(store.revalidate(&alice(), &[step(InodeId::ROOT, "a/b", d)])),
        ErrorCode::InvalidArgument
    );
}
