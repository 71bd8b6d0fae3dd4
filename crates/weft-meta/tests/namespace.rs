//! Namespace operations of `MetaStore`: paths, names, permissions, setattr,
//! create, layouts, unlink/rmdir/rename, symlinks, statfs and orphans.

mod common;

use common::*;
use weft_layout::{CacheMode, InodeId, Layout, LayoutRequest, ServerId};
use weft_meta::{CreateCheck, MetaStore};
use weft_proto::{Cred, ErrorCode, FileKind, MetaStatfs, SetAttr, TimeSet, Timespec};

/// Whether `layout` has stripes of `size` over `count` servers that follow each other
/// in the test cluster's order (10, 11, 12, 13, then 10 again) from any of them: a
/// layout that names no first server starts on the next server in turn.
fn in_turn(layout: &Option<Layout>, size: u64, count: usize) -> bool {
    let cluster = [10u32, 11, 12, 13];
    let Some(layout) = layout else { return false };
    let Some(first) = cluster
        .iter()
        .position(|&s| Some(ServerId(s)) == layout.servers.first().copied())
    else {
        return false;
    };
    layout.stripe_size_bytes == size
        && layout.servers.len() == count
        && layout
            .servers
            .iter()
            .enumerate()
            .all(|(k, s)| *s == ServerId(cluster[(first + k) % cluster.len()]))
        && layout.replication == Default::default()
}

fn store() -> (tempfile::TempDir, MetaStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    (dir, store)
}

/// A directory owned by `owner` with `mode`, made by root under the root.
fn dir_owned_by(store: &MetaStore, name: &str, owner: &Cred, mode: u32) -> InodeId {
    let attr = store.mkdir(&root(), InodeId::ROOT, name, mode).unwrap();
    store
        .setattr(
            &root(),
            attr.inode,
            &SetAttr {
                uid: Some(owner.uid),
                gid: Some(owner.gid),
                mode: Some(mode),
                ..Default::default()
            },
        )
        .unwrap();
    attr.inode
}

fn chmod(store: &MetaStore, inode: InodeId, mode: u32) {
    store
        .setattr(
            &root(),
            inode,
            &SetAttr {
                mode: Some(mode),
                ..Default::default()
            },
        )
        .unwrap();
}

fn names(store: &MetaStore, dir: InodeId) -> Vec<String> {
    let (entries, more) = store.readdir(&root(), dir, "", 0).unwrap();
    assert!(!more);
    entries.into_iter().map(|e| e.name.to_string()).collect()
}

#[test]
fn a_new_store_has_a_root_directory_owned_as_asked() {
    let dir = tempfile::tempdir().unwrap();
    let store = MetaStore::open(&dir.path().join("m.redb"), (500, 600)).unwrap();
    let attr = store.resolve(&root(), "/").unwrap();
    assert_eq!(attr.inode, InodeId::ROOT);
    assert_eq!(attr.kind, FileKind::Directory);
    assert_eq!((attr.mode, attr.uid, attr.gid), (0o755, 500, 600));
    assert_eq!((attr.nlink, attr.size), (2, 0));
    assert_eq!(
        store.statfs(&root()).unwrap(),
        MetaStatfs {
            files: 0,
            directories: 1,
            orphans: 0
        }
    );
    // A second open keeps the root as it was, whatever owner it is given.
    drop(store);
    let store = MetaStore::open(&dir.path().join("m.redb"), (1, 1)).unwrap();
    assert_eq!(store.getattr(&root(), InodeId::ROOT).unwrap().uid, 500);
}

#[test]
fn mkdir_then_lookup_resolve_and_getattr_agree() {
    let (_dir, store) = store();
    let before = Timespec::now();
    let a = store.mkdir(&alice(), InodeId::ROOT, "a", 0o750).unwrap_err();
    // Alice may not write the root (0755 root:root).
    assert_eq!(a.code, ErrorCode::PermissionDenied);
    let a = store.mkdir(&root(), InodeId::ROOT, "a", 0o40750).unwrap();
    assert_eq!((a.kind, a.mode, a.uid, a.gid), (FileKind::Directory, 0o750, 0, 0));
    assert!(a.ctime >= before && a.mtime == a.ctime);
    let b = store.mkdir(&root(), a.inode, "b", 0o755).unwrap();
    assert_ne!(a.inode, b.inode);
    assert_ne!(b.inode, InodeId::ROOT);
    assert_eq!(
        store.resolve(&root(), "/a/b").unwrap(),
        store.getattr(&root(), b.inode).unwrap()
    );
    assert_eq!(store.lookup(&root(), a.inode, "b").unwrap().inode, b.inode);
    // The parent counts its subdirectory in nlink and its entry in size.
    let a_now = store.getattr(&root(), a.inode).unwrap();
    assert_eq!((a_now.nlink, a_now.size), (3, 1));
    assert!(a_now.mtime >= before);
    assert_eq!(store.getattr(&root(), InodeId::ROOT).unwrap().nlink, 3);
    assert_eq!(code(store.mkdir(&root(), a.inode, "b", 0o755)), ErrorCode::Exists);
    assert_eq!(code(store.lookup(&root(), a.inode, "nope")), ErrorCode::NotFound);
    assert_eq!(code(store.getattr(&root(), InodeId(999_999))), ErrorCode::Stale);
}

#[test]
fn resolve_rejects_malformed_paths_and_reports_the_component() {
    let (_dir, store) = store();
    let a = store.mkdir(&root(), InodeId::ROOT, "a", 0o755).unwrap();
    create(&store, &root(), a.inode, "f").unwrap();
    for bad in [
        "", "a", "a/f", "//a", "/a//f", "/a/", "/.", "/a/.", "/a/..", "/..", "/a\0",
    ] {
        assert_eq!(
            code(store.resolve(&root(), bad)),
            ErrorCode::InvalidArgument,
            "{bad:?}"
        );
    }
    let long_name = format!("/a/{}", "n".repeat(256));
    assert_eq!(code(store.resolve(&root(), &long_name)), ErrorCode::NameTooLong);
    let long_path = "/a".repeat(2049);
    assert_eq!(code(store.resolve(&root(), &long_path)), ErrorCode::NameTooLong);
    let missing = store.resolve(&root(), "/a/missing/x").unwrap_err();
    assert_eq!(missing.code, ErrorCode::NotFound);
    assert!(missing.message.contains("/a/missing"), "{}", missing.message);
    let through_file = store.resolve(&root(), "/a/f/x").unwrap_err();
    assert_eq!(through_file.code, ErrorCode::NotDirectory);
    assert!(through_file.message.contains("/a/f"), "{}", through_file.message);
}

#[test]
fn bad_names_are_refused_by_every_operation_and_change_nothing() {
    let (_dir, store) = store();
    let d = store.mkdir(&root(), InodeId::ROOT, "d", 0o755).unwrap().inode;
    create(&store, &root(), d, "f").unwrap();
    let before = store.statfs(&root()).unwrap();
    let long = "x".repeat(256);
    let cases: [(&str, ErrorCode); 6] = [
        ("..", ErrorCode::InvalidArgument),
        (".", ErrorCode::InvalidArgument),
        ("", ErrorCode::InvalidArgument),
        ("a/b", ErrorCode::InvalidArgument),
        ("nul\0", ErrorCode::InvalidArgument),
        (&long, ErrorCode::NameTooLong),
    ];
    for (name, expected) in cases {
        let r = root();
        let req = LayoutRequest::default();
        assert_eq!(code(store.mkdir(&r, d, name, 0o755)), expected, "mkdir {name:?}");
        assert_eq!(
            code(store.create_check(&r, d, name, 0o644, &req, false)),
            expected,
            "create {name:?}"
        );
        assert_eq!(
            code(store.symlink(&r, d, name, "/t")),
            expected,
            "symlink {name:?}"
        );
        assert_eq!(code(store.lookup(&r, d, name)), expected, "lookup {name:?}");
        assert_eq!(code(store.unlink(&r, d, name, None)), expected, "unlink {name:?}");
        assert_eq!(code(store.rmdir(&r, d, name)), expected, "rmdir {name:?}");
        assert_eq!(
            code(store.rename(&r, (d, "f"), (d, name), None)),
            expected,
            "rename to {name:?}"
        );
        assert_eq!(
            code(store.rename(&r, (d, name), (d, "g"), None)),
            expected,
            "rename from {name:?}"
        );
    }
    // 255 bytes is still a name.
    store.mkdir(&root(), d, "y".repeat(255), 0o755).unwrap();
    let after = store.statfs(&root()).unwrap();
    assert_eq!(after.files, before.files);
    assert_eq!(after.directories, before.directories + 1);
    assert_eq!(names(&store, d), vec!["f".to_owned(), "y".repeat(255)]);
}

#[test]
fn non_root_is_held_to_mode_bits_and_root_is_not() {
    let (_dir, store) = store();
    // /private: 0700 root:root; /private/inner; /pub: 0777 with a 0644 root file.
    let private = store
        .mkdir(&root(), InodeId::ROOT, "private", 0o700)
        .unwrap()
        .inode;
    store.mkdir(&root(), private, "inner", 0o755).unwrap();
    let public = store.mkdir(&root(), InodeId::ROOT, "pub", 0o777).unwrap().inode;
    let file = create_with(&store, &root(), public, "f", 0o644, &LayoutRequest::default())
        .unwrap()
        .inode;

    let a = alice();
    assert_eq!(
        code(store.resolve(&a, "/private/inner")),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        code(store.lookup(&a, private, "inner")),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        code(store.readdir(&a, private, "", 10)),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        code(store.mkdir(&a, private, "x", 0o755)),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        code(store.create_check(&a, private, "x", 0o644, &LayoutRequest::default(), false)),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        code(store.unlink(&a, private, "inner", None)),
        ErrorCode::PermissionDenied
    );
    // A 0644 file owned by root: alice can neither truncate nor chmod it.
    let truncate = SetAttr {
        size: Some(0),
        ..Default::default()
    };
    assert_eq!(
        code(store.setattr(&a, file, &truncate)),
        ErrorCode::PermissionDenied
    );
    let chmod_all = SetAttr {
        mode: Some(0o666),
        ..Default::default()
    };
    assert_eq!(code(store.setattr(&a, file, &chmod_all)), ErrorCode::NotPermitted);
    assert_eq!(store.getattr(&a, file).unwrap().mode, 0o644);
    // Root does all of it.
    assert_eq!(
        store.resolve(&root(), "/private/inner").unwrap().kind,
        FileKind::Directory
    );
    store.setattr(&root(), file, &truncate).unwrap();
    store.mkdir(&root(), private, "x", 0o755).unwrap();
    // Group bits: a 0770 directory of group 100 admits alice (gid 100) only.
    let shared = dir_owned_by(
        &store,
        "shared",
        &Cred {
            uid: 5,
            gid: 100,
            groups: vec![],
        },
        0o770,
    );
    store.mkdir(&a, shared, "by-alice", 0o755).unwrap();
    assert_eq!(
        code(store.mkdir(&bob(), shared, "by-bob", 0o755)),
        ErrorCode::PermissionDenied
    );
    // Supplementary groups count too: 0070 group 300 admits alice through groups.
    let team = dir_owned_by(
        &store,
        "team",
        &Cred {
            uid: 5,
            gid: 300,
            groups: vec![],
        },
        0o070,
    );
    assert!(store.readdir(&a, team, "", 10).is_ok());
    assert_eq!(
        code(store.readdir(&bob(), team, "", 10)),
        ErrorCode::PermissionDenied
    );
}

#[test]
fn setattr_follows_posix_ownership_rules() {
    let (_dir, store) = store();
    let public = store.mkdir(&root(), InodeId::ROOT, "pub", 0o777).unwrap().inode;
    let a = alice();
    let file = create_with(&store, &a, public, "f", 0o6755, &LayoutRequest::default()).unwrap();
    // Created by alice in a plain directory: her uid and primary group.
    assert_eq!((file.uid, file.gid, file.mode), (1000, 100, 0o6755));
    let f = file.inode;
    let set = |changes: SetAttr, cred: &Cred| store.setattr(cred, f, &changes);

    // chown to someone else: root only.
    assert_eq!(
        code(set(
            SetAttr {
                uid: Some(2000),
                ..Default::default()
            },
            &a
        )),
        ErrorCode::NotPermitted
    );
    // chgrp by a non-owner, even to his own group: refused.
    assert_eq!(
        code(set(
            SetAttr {
                gid: Some(200),
                ..Default::default()
            },
            &bob()
        )),
        ErrorCode::NotPermitted
    );
    // chgrp by the owner to a group she is not in: refused.
    assert_eq!(
        code(set(
            SetAttr {
                gid: Some(200),
                ..Default::default()
            },
            &a
        )),
        ErrorCode::NotPermitted
    );
    // chgrp by the owner to a supplementary group: allowed, clears setuid+setgid.
    let before = Timespec::now();
    let changed = set(
        SetAttr {
            gid: Some(300),
            ..Default::default()
        },
        &a,
    )
    .unwrap();
    assert_eq!((changed.gid, changed.mode), (300, 0o755));
    assert!(changed.ctime >= before);
    // Root's chown keeps the bits it finds (only non-root chown clears them).
    set(
        SetAttr {
            mode: Some(0o4755),
            ..Default::default()
        },
        &a,
    )
    .unwrap();
    let by_root = set(
        SetAttr {
            uid: Some(2000),
            gid: Some(200),
            ..Default::default()
        },
        &root(),
    )
    .unwrap();
    // Linux drops setuid on every chown of a non-directory, root's included.
    assert_eq!((by_root.uid, by_root.gid, by_root.mode), (2000, 200, 0o755));
    // Now bob owns it: alice may no longer chmod; bob may.
    assert_eq!(
        code(set(
            SetAttr {
                mode: Some(0o600),
                ..Default::default()
            },
            &a
        )),
        ErrorCode::NotPermitted
    );
    assert_eq!(
        set(
            SetAttr {
                mode: Some(0o100600),
                ..Default::default()
            },
            &bob()
        )
        .unwrap()
        .mode,
        0o600
    );
    // A non-root owner outside the file's group cannot set setgid: silently dropped.
    set(
        SetAttr {
            gid: Some(300),
            ..Default::default()
        },
        &root(),
    )
    .unwrap();
    assert_eq!(
        set(
            SetAttr {
                mode: Some(0o2640),
                ..Default::default()
            },
            &bob()
        )
        .unwrap()
        .mode,
        0o640
    );

    // Times: explicit times need ownership; Now needs ownership or write access.
    let at = Timespec {
        secs: 1_000_000,
        nanos: 5,
    };
    let explicit = SetAttr {
        atime: Some(TimeSet::At(at)),
        mtime: Some(TimeSet::At(at)),
        ..Default::default()
    };
    set(
        SetAttr {
            mode: Some(0o666),
            ..Default::default()
        },
        &bob(),
    )
    .unwrap();
    assert_eq!(code(set(explicit.clone(), &a)), ErrorCode::NotPermitted);
    let touched = set(explicit, &bob()).unwrap();
    assert_eq!((touched.atime, touched.mtime), (at, at));
    let before = Timespec::now();
    let now = SetAttr {
        atime: Some(TimeSet::Now),
        mtime: Some(TimeSet::Now),
        ..Default::default()
    };
    let touched = set(now.clone(), &a).unwrap();
    assert!(touched.mtime >= before && touched.atime >= before);
    set(
        SetAttr {
            mode: Some(0o644),
            ..Default::default()
        },
        &bob(),
    )
    .unwrap();
    assert_eq!(code(set(now, &a)), ErrorCode::PermissionDenied);

    // Truncate: write access, regular files only; moves mtime; size stays 0 here.
    let truncate = SetAttr {
        size: Some(4096),
        ..Default::default()
    };
    assert_eq!(code(set(truncate.clone(), &a)), ErrorCode::PermissionDenied);
    let before = Timespec::now();
    let truncated = set(truncate.clone(), &bob()).unwrap();
    assert!(truncated.mtime >= before && truncated.ctime >= before);
    assert_eq!(truncated.size, 0);
    assert_eq!(
        code(store.setattr(&root(), public, &truncate)),
        ErrorCode::IsDirectory
    );
    let link = store.symlink(&root(), public, "l", "f").unwrap().inode;
    assert_eq!(
        code(store.setattr(&root(), link, &truncate)),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        code(store.setattr(&root(), InodeId(424_242), &truncate)),
        ErrorCode::Stale
    );
}

#[test]
fn a_failed_setattr_changes_nothing() {
    let (_dir, store) = store();
    let public = store.mkdir(&root(), InodeId::ROOT, "pub", 0o777).unwrap().inode;
    let f = create(&store, &alice(), public, "f").unwrap();
    // The mode part is allowed for the owner, the uid part is not: neither applies.
    let both = SetAttr {
        mode: Some(0o600),
        uid: Some(0),
        ..Default::default()
    };
    assert_eq!(
        code(store.setattr(&alice(), f.inode, &both)),
        ErrorCode::NotPermitted
    );
    assert_eq!(store.getattr(&root(), f.inode).unwrap(), f);
}

#[test]
fn create_resolves_layouts_and_handles_existing_names() {
    let (_dir, store) = store();
    let d = store.mkdir(&root(), InodeId::ROOT, "d", 0o777).unwrap().inode;
    // Cluster default alone: 64 KiB over two servers, the first the next in turn.
    let plain = create(&store, &alice(), d, "plain").unwrap();
    assert_eq!((plain.kind, plain.nlink, plain.size), (FileKind::File, 1, 0));
    assert!(in_turn(&plain.layout, 65536, 2), "{:?}", plain.layout);
    let next = create(&store, &alice(), d, "next").unwrap();
    assert!(in_turn(&next.layout, 65536, 2), "{:?}", next.layout);
    assert_ne!(
        plain.layout.as_ref().unwrap().servers[0],
        next.layout.as_ref().unwrap().servers[0],
        "two files in a row start on the same server"
    );
    // Request fields win; a count of 3 from index 2 wraps around the cluster.
    let asked = LayoutRequest {
        cache: None,
        stripe_size_bytes: Some(1 << 20),
        stripe_count: Some(3),
        first_server: Some(2),
        redundancy: None,
    };
    let wide = create_with(&store, &alice(), d, "wide", 0o600, &asked).unwrap();
    assert_eq!(
        wide.layout,
        Some(Layout {
            stripe_size_bytes: 1 << 20,
            servers: vec![ServerId(12), ServerId(13), ServerId(10)],
            replication: Default::default(),
        })
    );
    assert_eq!(wide.mode, 0o600);
    let too_wide = LayoutRequest {
        stripe_count: Some(5),
        ..Default::default()
    };
    assert_eq!(
        code(store.create_check(&alice(), d, "x", 0o644, &too_wide, false)),
        ErrorCode::InvalidLayout
    );

    // Non-exclusive create of an existing file returns it; exclusive is Exists.
    match store
        .create_check(&bob(), d, "plain", 0o644, &LayoutRequest::default(), false)
        .unwrap()
    {
        CreateCheck::Existing(attr) => assert_eq!(attr.inode, plain.inode),
        other => panic!("expected the existing file, got {other:?}"),
    }
    assert_eq!(
        code(store.create_check(&bob(), d, "plain", 0o644, &LayoutRequest::default(), true)),
        ErrorCode::Exists
    );
    store.mkdir(&root(), d, "sub", 0o755).unwrap();
    assert_eq!(
        code(store.create_check(&bob(), d, "sub", 0o644, &LayoutRequest::default(), false)),
        ErrorCode::IsDirectory
    );
    assert_eq!(
        code(store.create_check(&root(), plain.inode, "x", 0o644, &LayoutRequest::default(), false)),
        ErrorCode::NotDirectory
    );
}

#[test]
fn create_commit_rechecks_in_its_transaction() {
    let (_dir, store) = store();
    let d = store.mkdir(&root(), InodeId::ROOT, "d", 0o777).unwrap().inode;
    let check = |name: &str| match store
        .create_check(&alice(), d, name, 0o644, &LayoutRequest::default(), false)
        .unwrap()
    {
        CreateCheck::New(pending) => pending,
        other => panic!("expected a new file, got {other:?}"),
    };
    // Two creators race for one name: the second commit loses.
    let first = check("race");
    let second = check("race");
    assert_ne!(first.inode(), second.inode());
    let first_inode = first.inode();
    let winner = store.create_commit(&alice(), first).unwrap();
    assert_eq!(winner.inode, first_inode);
    assert_eq!(code(store.create_commit(&alice(), second)), ErrorCode::Exists);
    assert_eq!(store.lookup(&root(), d, "race").unwrap().inode, first_inode);
    // Permission taken away between check and commit.
    let late = check("late");
    chmod(&store, d, 0o755);
    assert_eq!(
        code(store.create_commit(&alice(), late)),
        ErrorCode::PermissionDenied
    );
    // Parent removed between check and commit.
    chmod(&store, d, 0o777);
    let e = store.mkdir(&root(), d, "e", 0o777).unwrap().inode;
    let orphaned = match store
        .create_check(&alice(), e, "x", 0o644, &LayoutRequest::default(), true)
        .unwrap()
    {
        CreateCheck::New(pending) => pending,
        other => panic!("{other:?}"),
    };
    store.rmdir(&root(), d, "e").unwrap();
    assert_eq!(code(store.create_commit(&alice(), orphaned)), ErrorCode::Stale);
    // Failed commits leave no trace. (Committing one pending create twice, which
    // would reuse its inode after an unlink, is ruled out by the type: commit
    // consumes it.)
    assert_eq!(store.statfs(&root()).unwrap().files, 1);
    assert_eq!(names(&store, d), vec!["race"]);
}

#[test]
fn setgid_directories_pass_on_their_group() {
    let (_dir, store) = store();
    let team = dir_owned_by(
        &store,
        "team",
        &Cred {
            uid: 5,
            gid: 300,
            groups: vec![],
        },
        0o2777,
    );
    let f = create(&store, &bob(), team, "f").unwrap();
    assert_eq!(f.gid, 300);
    let sub = store.mkdir(&bob(), team, "sub", 0o755).unwrap();
    assert_eq!((sub.gid, sub.mode), (300, 0o2755));
    // Bob is not in group 300: a setgid bit he asks for on a file is dropped.
    let g = create_with(&store, &bob(), team, "g", 0o2755, &LayoutRequest::default()).unwrap();
    assert_eq!(g.mode, 0o755);
}

#[test]
fn directory_layouts_are_inherited_and_validated() {
    let (_dir, store) = store();
    let a = alice();
    let d = dir_owned_by(&store, "d", &a, 0o755);
    let wanted = LayoutRequest {
        cache: None,
        stripe_size_bytes: Some(4096),
        stripe_count: Some(3),
        first_server: None,
        redundancy: None,
    };
    let attr = store.set_dir_layout(&a, d, Some(wanted)).unwrap();
    assert_eq!(attr.dir_layout, Some(wanted));
    // Directory default fills what the request leaves out.
    let from_index_3 = LayoutRequest {
        first_server: Some(3),
        ..Default::default()
    };
    let f = create_with(&store, &a, d, "f", 0o644, &from_index_3).unwrap();
    assert_eq!(
        f.layout,
        Some(Layout {
            stripe_size_bytes: 4096,
            servers: vec![ServerId(13), ServerId(10), ServerId(11)],
            replication: Default::default(),
        })
    );
    // A partial directory default takes the rest from the cluster default.
    let sizes_only = LayoutRequest {
        stripe_size_bytes: Some(8192),
        ..Default::default()
    };
    // A new subdirectory copies the default (Lustre semantics)...
    let sub = store.mkdir(&a, d, "sub", 0o755).unwrap();
    assert_eq!(sub.dir_layout, Some(wanted));
    let g = create(&store, &a, sub.inode, "g").unwrap();
    assert_eq!(
        g.layout.as_ref().map(|l| (l.stripe_size_bytes, l.servers.len())),
        Some((4096, 3))
    );
    // ...and keeps it when the parent's default changes later.
    store.set_dir_layout(&a, d, Some(sizes_only)).unwrap();
    assert_eq!(store.getattr(&a, sub.inode).unwrap().dir_layout, Some(wanted));
    let h = create(&store, &a, d, "h").unwrap();
    assert!(in_turn(&h.layout, 8192, 2), "{:?}", h.layout);
    // Clearing returns to the cluster default.
    assert_eq!(store.set_dir_layout(&a, d, None).unwrap().dir_layout, None);
    let i = create(&store, &a, d, "i").unwrap();
    assert!(in_turn(&i.layout, 65536, 2), "{:?}", i.layout);

    let impossible = LayoutRequest {
        stripe_count: Some(9),
        ..Default::default()
    };
    assert_eq!(
        code(store.set_dir_layout(&a, d, Some(impossible))),
        ErrorCode::InvalidLayout
    );
    assert_eq!(
        code(store.set_dir_layout(&bob(), d, Some(wanted))),
        ErrorCode::NotPermitted
    );
    assert_eq!(
        code(store.set_dir_layout(&a, f.inode, Some(wanted))),
        ErrorCode::NotDirectory
    );
    assert_eq!(
        store.set_dir_layout(&root(), d, Some(wanted)).unwrap().dir_layout,
        Some(wanted)
    );
}

/// A file's caching mode comes from the create, else the directory default, else the
/// cluster default, and needs a cache tier.
#[test]
fn caching_modes_are_inherited_and_need_a_cache_tier() {
    let (_dir, store) = store();
    let a = alice();
    let d = dir_owned_by(&store, "d", &a, 0o755);
    let cached = LayoutRequest {
        cache: Some(CacheMode::Cached),
        ..Default::default()
    };
    // This cluster has no cache managers: asking for the tier is refused, clearly.
    let refused = create_with(&store, &a, d, "x", 0o644, &cached).unwrap_err();
    assert_eq!(refused.code, ErrorCode::InvalidLayout);
    assert!(refused.message.contains("cache"), "{}", refused.message);
    assert_eq!(
        code(store.set_dir_layout(&a, d, Some(cached))),
        ErrorCode::InvalidLayout
    );
    assert_eq!(create(&store, &a, d, "plain").unwrap().cache, CacheMode::None);

    let mut with_tier = cluster();
    with_tier.cache_managers = 2;
    with_tier.default_layout.cache = Some(CacheMode::Cached);
    store.set_cluster(with_tier).unwrap();
    // The cluster default applies where nothing else is said...
    assert_eq!(create(&store, &a, d, "f").unwrap().cache, CacheMode::Cached);
    // ...a directory default overrides it, and a create overrides both.
    let delegated = LayoutRequest {
        cache: Some(CacheMode::Delegated),
        ..Default::default()
    };
    assert_eq!(
        store.set_dir_layout(&a, d, Some(delegated)).unwrap().dir_layout,
        Some(delegated)
    );
    assert_eq!(create(&store, &a, d, "g").unwrap().cache, CacheMode::Delegated);
    let none = LayoutRequest {
        cache: Some(CacheMode::None),
        ..Default::default()
    };
    let h = create_with(&store, &a, d, "h", 0o644, &none).unwrap();
    assert_eq!(h.cache, CacheMode::None);
    // The mode is stored with the file and read back as such.
    let g = store.lookup(&a, d, "g").unwrap();
    assert_eq!(g.cache, CacheMode::Delegated);
    // Files made before the tier existed keep their mode.
    assert_eq!(store.lookup(&a, d, "plain").unwrap().cache, CacheMode::None);
}

#[test]
fn unlink_moves_files_to_orphans_and_forget_removes_them() {
    let (_dir, store) = store();
    let d = store.mkdir(&root(), InodeId::ROOT, "d", 0o777).unwrap().inode;
    let f = create(&store, &alice(), d, "f").unwrap();
    let g = create(&store, &alice(), d, "g").unwrap();
    let l = store.symlink(&alice(), d, "l", "f").unwrap();
    store.mkdir(&alice(), d, "sub", 0o755).unwrap();
    assert_eq!(
        store.statfs(&root()).unwrap(),
        MetaStatfs {
            files: 3,
            directories: 3,
            orphans: 0
        }
    );

    assert_eq!(
        code(store.unlink(&alice(), d, "sub", None)),
        ErrorCode::IsDirectory
    );
    assert_eq!(
        code(store.unlink(&alice(), d, "missing", None)),
        ErrorCode::NotFound
    );
    store.unlink(&alice(), d, "f", None).unwrap();
    store.unlink(&alice(), d, "l", None).unwrap();
    assert_eq!(code(store.lookup(&root(), d, "f")), ErrorCode::NotFound);
    assert_eq!(code(store.getattr(&root(), f.inode)), ErrorCode::Stale);
    assert_eq!(code(store.getattr(&root(), l.inode)), ErrorCode::Stale);
    // Only the file leaves an orphan (a symlink has no objects).
    assert_eq!(
        store.orphans(100).unwrap(),
        vec![(f.inode, f.layout.clone().unwrap())]
    );
    assert_eq!(
        store.statfs(&root()).unwrap(),
        MetaStatfs {
            files: 1,
            directories: 3,
            orphans: 1
        }
    );
    let parent = store.getattr(&root(), d).unwrap();
    assert_eq!((parent.size, parent.nlink), (2, 3));

    store.unlink(&alice(), d, "g", None).unwrap();
    let mut expected = vec![(f.inode, f.layout.unwrap()), (g.inode, g.layout.unwrap())];
    expected.sort_by_key(|(inode, _)| *inode);
    assert_eq!(store.orphans(100).unwrap(), expected);
    assert_eq!(store.orphans(1).unwrap(), expected[..1].to_vec());
    assert_eq!(
        store.forget_orphans(&[expected[0].0, InodeId(777_777)]).unwrap(),
        1
    );
    assert_eq!(store.orphans(100).unwrap(), expected[1..].to_vec());
    assert_eq!(store.forget_orphans(&[expected[0].0]).unwrap(), 0);
    assert_eq!(store.forget_orphans(&[expected[1].0]).unwrap(), 1);
    assert!(store.orphans(100).unwrap().is_empty());
    assert_eq!(
        store.statfs(&root()).unwrap(),
        MetaStatfs {
            files: 0,
            directories: 3,
            orphans: 0
        }
    );
}

#[test]
fn the_sticky_bit_protects_other_users_entries() {
    let (_dir, store) = store();
    let tmp = store.mkdir(&root(), InodeId::ROOT, "tmp", 0o1777).unwrap().inode;
    create(&store, &alice(), tmp, "alices").unwrap();
    store.mkdir(&alice(), tmp, "alices-dir", 0o777).unwrap();
    create(&store, &bob(), tmp, "bobs").unwrap();
    assert_eq!(
        code(store.unlink(&bob(), tmp, "alices", None)),
        ErrorCode::NotPermitted
    );
    assert_eq!(
        code(store.rmdir(&bob(), tmp, "alices-dir")),
        ErrorCode::NotPermitted
    );
    assert_eq!(
        code(store.rename(&bob(), (tmp, "alices"), (tmp, "mine"), None)),
        ErrorCode::NotPermitted
    );
    // Replacing someone else's entry by rename is removing it too.
    assert_eq!(
        code(store.rename(&bob(), (tmp, "bobs"), (tmp, "alices"), None)),
        ErrorCode::NotPermitted
    );
    store.unlink(&alice(), tmp, "alices", None).unwrap();
    store.unlink(&root(), tmp, "bobs", None).unwrap();
    store.rmdir(&alice(), tmp, "alices-dir").unwrap();
    assert!(names(&store, tmp).is_empty());
}

#[test]
fn rmdir_removes_only_empty_directories() {
    let (_dir, store) = store();
    let d = store.mkdir(&root(), InodeId::ROOT, "d", 0o755).unwrap().inode;
    let e = store.mkdir(&root(), d, "e", 0o755).unwrap().inode;
    create(&store, &root(), d, "f").unwrap();
    store.symlink(&root(), e, "l", "x").unwrap();
    assert_eq!(code(store.rmdir(&root(), d, "f")), ErrorCode::NotDirectory);
    assert_eq!(code(store.rmdir(&root(), d, "e")), ErrorCode::NotEmpty);
    assert_eq!(
        code(store.rmdir(&root(), InodeId::ROOT, "d")),
        ErrorCode::NotEmpty
    );
    assert_eq!(code(store.rmdir(&root(), d, "zz")), ErrorCode::NotFound);
    store.unlink(&root(), e, "l", None).unwrap();
    store.rmdir(&root(), d, "e").unwrap();
    assert_eq!(code(store.getattr(&root(), e)), ErrorCode::Stale);
    let after = store.getattr(&root(), d).unwrap();
    assert_eq!((after.nlink, after.size), (2, 1));
    assert_eq!(
        store.statfs(&root()).unwrap(),
        MetaStatfs {
            files: 1,
            directories: 2,
            orphans: 0
        }
    );
    assert_eq!(
        code(store.rmdir(&alice(), InodeId::ROOT, "d")),
        ErrorCode::PermissionDenied
    );
}

#[test]
fn rename_moves_and_replaces_atomically() {
    let (_dir, store) = store();
    let r = root();
    let a = store.mkdir(&r, InodeId::ROOT, "a", 0o755).unwrap().inode;
    let b = store.mkdir(&r, InodeId::ROOT, "b", 0o755).unwrap().inode;
    let f = create(&store, &r, a, "f").unwrap();
    let g = create(&store, &r, b, "g").unwrap();

    // Within a directory.
    store.rename(&r, (a, "f"), (a, "f2"), None).unwrap();
    assert_eq!(names(&store, a), vec!["f2"]);
    assert_eq!(store.lookup(&r, a, "f2").unwrap().inode, f.inode);
    // Across directories, replacing a file: the target's file becomes an orphan.
    let before = Timespec::now();
    store.rename(&r, (a, "f2"), (b, "g"), None).unwrap();
    assert!(names(&store, a).is_empty());
    assert_eq!(names(&store, b), vec!["g"]);
    let moved = store.lookup(&r, b, "g").unwrap();
    assert_eq!(moved.inode, f.inode);
    assert!(moved.ctime >= before);
    assert_eq!(store.orphans(10).unwrap(), vec![(g.inode, g.layout.unwrap())]);
    assert_eq!(
        store.statfs(&r).unwrap(),
        MetaStatfs {
            files: 1,
            directories: 3,
            orphans: 1
        }
    );
    assert_eq!(store.getattr(&r, a).unwrap().size, 0);
    assert_eq!(store.getattr(&r, b).unwrap().size, 1);
    assert_eq!(
        code(store.rename(&r, (a, "f2"), (b, "x"), None)),
        ErrorCode::NotFound
    );

    // Directory over an empty directory; nlink of both parents follows.
    let d = store.mkdir(&r, a, "d", 0o755).unwrap().inode;
    create(&store, &r, d, "inside").unwrap();
    let empty = store.mkdir(&r, b, "empty", 0o755).unwrap().inode;
    store.rename(&r, (a, "d"), (b, "empty"), None).unwrap();
    assert_eq!(code(store.getattr(&r, empty)), ErrorCode::Stale);
    assert_eq!(store.resolve(&r, "/b/empty/inside").unwrap().kind, FileKind::File);
    assert_eq!(store.getattr(&r, a).unwrap().nlink, 2);
    assert_eq!(store.getattr(&r, b).unwrap().nlink, 3);
    assert_eq!(store.statfs(&r).unwrap().directories, 4);

    // The refusals, each leaving both names in place.
    let nonempty = store.mkdir(&r, a, "nonempty", 0o755).unwrap().inode;
    store.symlink(&r, nonempty, "l", "t").unwrap();
    store.mkdir(&r, a, "dir", 0o755).unwrap();
    create(&store, &r, a, "file").unwrap();
    assert_eq!(
        code(store.rename(&r, (a, "file"), (a, "dir"), None)),
        ErrorCode::IsDirectory
    );
    assert_eq!(
        code(store.rename(&r, (a, "dir"), (a, "file"), None)),
        ErrorCode::NotDirectory
    );
    assert_eq!(
        code(store.rename(&r, (a, "dir"), (a, "nonempty"), None)),
        ErrorCode::NotEmpty
    );
    assert_eq!(names(&store, a), vec!["dir", "file", "nonempty"]);

    // Renaming to itself is a no-op.
    let file = store.lookup(&r, a, "file").unwrap();
    store.rename(&r, (a, "file"), (a, "file"), None).unwrap();
    assert_eq!(store.lookup(&r, a, "file").unwrap(), file);
    let dir = store.lookup(&r, a, "dir").unwrap();
    store.rename(&r, (a, "dir"), (a, "dir"), None).unwrap();
    assert_eq!(store.lookup(&r, a, "dir").unwrap(), dir);
}

#[test]
fn rename_refuses_to_move_a_directory_into_its_own_subtree() {
    let (_dir, store) = store();
    let r = root();
    // /a/b/c and /x
    let a = store.mkdir(&r, InodeId::ROOT, "a", 0o755).unwrap().inode;
    let b = store.mkdir(&r, a, "b", 0o755).unwrap().inode;
    let c = store.mkdir(&r, b, "c", 0o755).unwrap().inode;
    let x = store.mkdir(&r, InodeId::ROOT, "x", 0o755).unwrap().inode;
    assert_eq!(
        code(store.rename(&r, (InodeId::ROOT, "a"), (c, "a"), None)),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        code(store.rename(&r, (InodeId::ROOT, "a"), (a, "self"), None)),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        code(store.rename(&r, (a, "b"), (c, "b"), None)),
        ErrorCode::InvalidArgument
    );
    // Over its own non-empty ancestor: not empty.
    assert_eq!(
        code(store.rename(&r, (b, "c"), (InodeId::ROOT, "a"), None)),
        ErrorCode::NotEmpty
    );
    // Move b out to /x/b: its parent pointer follows, so /a may now go under c...
    store.rename(&r, (a, "b"), (x, "b"), None).unwrap();
    store.rename(&r, (InodeId::ROOT, "a"), (c, "a"), None).unwrap();
    assert_eq!(store.resolve(&r, "/x/b/c/a").unwrap().inode, a);
    // ...and /x may not, since c is below it now.
    assert_eq!(
        code(store.rename(&r, (InodeId::ROOT, "x"), (c, "x"), None)),
        ErrorCode::InvalidArgument
    );
    assert_eq!(names(&store, InodeId::ROOT), vec!["x"]);
}

#[test]
fn rename_needs_write_and_search_on_both_parents() {
    let (_dir, store) = store();
    let a = alice();
    let mine = dir_owned_by(&store, "mine", &a, 0o755);
    let locked = store
        .mkdir(&root(), InodeId::ROOT, "locked", 0o755)
        .unwrap()
        .inode;
    create(&store, &root(), locked, "theirs").unwrap();
    create(&store, &a, mine, "f").unwrap();
    assert_eq!(
        code(store.rename(&a, (mine, "f"), (locked, "f"), None)),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        code(store.rename(&a, (locked, "theirs"), (mine, "stolen"), None)),
        ErrorCode::PermissionDenied
    );
    assert_eq!(names(&store, mine), vec!["f"]);
    assert_eq!(names(&store, locked), vec!["theirs"]);
    // Moving a directory to a new parent needs write on the directory itself.
    let open = store.mkdir(&root(), InodeId::ROOT, "open", 0o777).unwrap().inode;
    store.mkdir(&root(), open, "roots", 0o755).unwrap();
    assert_eq!(
        code(store.rename(&a, (open, "roots"), (mine, "roots"), None)),
        ErrorCode::PermissionDenied
    );
    // Within the same parent it does not.
    store
        .rename(&a, (open, "roots"), (open, "renamed"), None)
        .unwrap();
}

#[test]
fn symlinks_store_their_target_and_are_not_followed() {
    let (_dir, store) = store();
    let d = store.mkdir(&root(), InodeId::ROOT, "d", 0o755).unwrap().inode;
    let link = store.symlink(&root(), d, "l", "../elsewhere/x").unwrap();
    assert_eq!(
        (link.kind, link.mode, link.size, link.nlink),
        (FileKind::Symlink, 0o777, 14, 1)
    );
    assert_eq!(store.readlink(&root(), link.inode).unwrap(), "../elsewhere/x");
    assert_eq!(store.resolve(&root(), "/d/l").unwrap().inode, link.inode);
    assert_eq!(code(store.resolve(&root(), "/d/l/x")), ErrorCode::NotDirectory);
    assert_eq!(code(store.readlink(&root(), d)), ErrorCode::InvalidArgument);
    assert_eq!(code(store.symlink(&root(), d, "l", "y")), ErrorCode::Exists);
    assert_eq!(
        code(store.symlink(&root(), d, "m", "")),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        code(store.symlink(&root(), d, "m", "t".repeat(4097))),
        ErrorCode::NameTooLong
    );
    assert_eq!(
        code(store.symlink(&alice(), d, "m", "t")),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        store.readdir(&root(), d, "", 0).unwrap().0[0].kind,
        FileKind::Symlink
    );
}

#[test]
fn readdir_checks_its_directory() {
    let (_dir, store) = store();
    let f = create(&store, &root(), InodeId::ROOT, "f").unwrap().inode;
    assert_eq!(code(store.readdir(&root(), f, "", 10)), ErrorCode::NotDirectory);
    assert_eq!(
        code(store.readdir(&root(), InodeId(55_555), "", 10)),
        ErrorCode::Stale
    );
    // Entries of a neighbouring directory never leak into a page.
    let a = store.mkdir(&root(), InodeId::ROOT, "a", 0o755).unwrap().inode;
    let b = store.mkdir(&root(), InodeId::ROOT, "b", 0o755).unwrap().inode;
    create(&store, &root(), a, "in-a").unwrap();
    create(&store, &root(), b, "in-b").unwrap();
    assert_eq!(names(&store, a), vec!["in-a"]);
    assert_eq!(names(&store, b), vec!["in-b"]);
}
