//! The namespace's POSIX operations at the store: hard links, special files, extended
//! attributes, privilege dropping, names as bytes, and opening a format-1 database.

mod common;

use common::*;
use weft_layout::InodeId;
use weft_meta::{MetaStore, XATTRS_PER_INODE_MAX};
use weft_proto::{ErrorCode, FileKind, MetaStatfs, SetAttr, XattrSet};

fn store() -> (tempfile::TempDir, MetaStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    (dir, store)
}

#[test]
fn links_are_counted_and_the_last_name_takes_the_file() {
    let (_dir, store) = store();
    let d = store.mkdir(&root(), InodeId::ROOT, "d", 0o777).unwrap().inode;
    let f = create(&store, &alice(), d, "f").unwrap();
    let g = store.link(&alice(), f.inode, d, "g").unwrap();
    assert_eq!((g.inode, g.nlink), (f.inode, 2));
    assert!(g.ctime >= f.ctime);
    store.link(&alice(), f.inode, InodeId::ROOT, "top").unwrap_err();
    store.link(&root(), f.inode, InodeId::ROOT, "top").unwrap();
    assert_eq!(store.getattr(&root(), f.inode).unwrap().nlink, 3);
    assert_eq!(store.statfs(&root()).unwrap().files, 1, "one inode, three names");
    // Errors: a directory, a taken name, a missing inode.
    assert_eq!(
        code(store.link(&root(), d, InodeId::ROOT, "dl")),
        ErrorCode::NotPermitted
    );
    assert_eq!(code(store.link(&root(), f.inode, d, "g")), ErrorCode::Exists);
    assert_eq!(
        code(store.link(&root(), InodeId(999_999), d, "x")),
        ErrorCode::Stale
    );
    // protected_hardlinks: bob neither owns alice's 0644 file nor may write it.
    assert_eq!(
        code(store.link(&bob(), f.inode, d, "bobs")),
        ErrorCode::NotPermitted
    );
    // Removing names one by one; the file stays until the last.
    store.unlink(&alice(), d, "f", None).unwrap();
    store.unlink(&root(), InodeId::ROOT, "top", None).unwrap();
    assert_eq!(store.getattr(&root(), f.inode).unwrap().nlink, 1);
    assert!(store.orphans(10).unwrap().is_empty());
    // Rename over another name of the same inode does nothing.
    store.link(&alice(), f.inode, d, "h").unwrap();
    store.rename(&alice(), (d, "g"), (d, "h"), None).unwrap();
    assert_eq!(store.getattr(&root(), f.inode).unwrap().nlink, 2);
    assert!(store.lookup(&root(), d, "g").is_ok());
    // Rename over a name drops only that name.
    let other = create(&store, &alice(), d, "other").unwrap();
    store.rename(&alice(), (d, "other"), (d, "h"), None).unwrap();
    assert_eq!(store.getattr(&root(), f.inode).unwrap().nlink, 1);
    store.unlink(&alice(), d, "g", None).unwrap();
    assert_eq!(code(store.getattr(&root(), f.inode)), ErrorCode::Stale);
    assert_eq!(store.orphans(10).unwrap().len(), 1);
    assert_eq!(store.lookup(&root(), d, "h").unwrap().inode, other.inode);
    assert_eq!(
        store.statfs(&root()).unwrap(),
        MetaStatfs {
            files: 1,
            directories: 2,
            orphans: 1
        }
    );
}

#[test]
fn special_files_are_namespace_objects_and_devices_need_root() {
    let (_dir, store) = store();
    let d = store.mkdir(&root(), InodeId::ROOT, "d", 0o777).unwrap().inode;
    let fifo = store
        .mknod(&alice(), d, "fifo", FileKind::Fifo, 0o640, 77)
        .unwrap();
    assert_eq!(
        (fifo.kind, fifo.mode, fifo.rdev, fifo.layout),
        (FileKind::Fifo, 0o640, 0, None)
    );
    let sock = store
        .mknod(&alice(), d, "sock", FileKind::Socket, 0o755, 0)
        .unwrap();
    assert_eq!(sock.kind, FileKind::Socket);
    assert_eq!(
        code(store.mknod(&alice(), d, "null", FileKind::CharDevice, 0o666, 0x103)),
        ErrorCode::NotPermitted
    );
    let null = store
        .mknod(&root(), d, "null", FileKind::CharDevice, 0o666, 0x103)
        .unwrap();
    assert_eq!((null.kind, null.rdev), (FileKind::CharDevice, 0x103));
    let blk = store
        .mknod(&root(), d, "loop", FileKind::BlockDevice, 0o660, 0x700)
        .unwrap();
    assert_eq!(store.lookup(&root(), d, "loop").unwrap().rdev, blk.rdev);
    for kind in [FileKind::File, FileKind::Directory, FileKind::Symlink] {
        assert_eq!(
            code(store.mknod(&root(), d, "x", kind, 0o644, 0)),
            ErrorCode::InvalidArgument
        );
    }
    assert_eq!(
        code(store.mknod(&root(), d, "fifo", FileKind::Fifo, 0o644, 0)),
        ErrorCode::Exists
    );
    let kinds: Vec<(String, FileKind)> = store
        .readdir(&root(), d, "", 0)
        .unwrap()
        .0
        .into_iter()
        .map(|e| (e.name.to_string(), e.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            ("fifo".into(), FileKind::Fifo),
            ("loop".into(), FileKind::BlockDevice),
            ("null".into(), FileKind::CharDevice),
            ("sock".into(), FileKind::Socket)
        ]
    );
    // They go without leaving orphans: they have no objects.
    for name in ["fifo", "loop", "null", "sock"] {
        store.unlink(&root(), d, name, None).unwrap();
    }
    assert!(store.orphans(10).unwrap().is_empty());
    assert_eq!(store.statfs(&root()).unwrap().files, 0);
    // A truncate of a FIFO is refused.
    let fifo = store.mknod(&root(), d, "f2", FileKind::Fifo, 0o666, 0).unwrap();
    let truncate = SetAttr {
        size: Some(0),
        ..Default::default()
    };
    assert_eq!(
        code(store.setattr(&root(), fifo.inode, &truncate)),
        ErrorCode::InvalidArgument
    );
}

#[test]
fn extended_attributes_follow_linux_rules_and_limits() {
    let (_dir, store) = store();
    let d = store.mkdir(&root(), InodeId::ROOT, "d", 0o777).unwrap().inode;
    let f = create(&store, &alice(), d, "f").unwrap().inode;
    store
        .setxattr(&alice(), f, "user.a", b"1", XattrSet::Either)
        .unwrap();
    store
        .setxattr(&alice(), f, b"user.\xff", b"\x00\x01", XattrSet::Create)
        .unwrap();
    assert_eq!(store.getxattr(&alice(), f, "user.a").unwrap(), b"1");
    assert_eq!(store.getxattr(&alice(), f, b"user.\xff").unwrap(), b"\x00\x01");
    assert_eq!(
        code(store.setxattr(&alice(), f, "user.a", b"2", XattrSet::Create)),
        ErrorCode::Exists
    );
    assert_eq!(
        code(store.setxattr(&alice(), f, "user.b", b"2", XattrSet::Replace)),
        ErrorCode::NoData
    );
    assert_eq!(code(store.getxattr(&alice(), f, "user.b")), ErrorCode::NoData);
    // trusted.*: root only, and hidden from others' listings. security.*: root only to
    // set or remove, read and listed by anyone (as ext4 has them without a security
    // module); they were refused as unsupported, so `cp -a` and `tar --xattrs` lost
    // SELinux labels and the like.
    for name in ["trusted.t", "security.label"] {
        assert_eq!(
            code(store.setxattr(&alice(), f, name, b"x", XattrSet::Either)),
            ErrorCode::NotPermitted,
            "{name}"
        );
        store.setxattr(&root(), f, name, b"x", XattrSet::Either).unwrap();
    }
    assert_eq!(code(store.getxattr(&alice(), f, "trusted.t")), ErrorCode::NoData);
    assert_eq!(store.getxattr(&bob(), f, "security.label").unwrap(), b"x");
    assert_eq!(
        code(store.removexattr(&alice(), f, "security.label")),
        ErrorCode::NotPermitted
    );
    let names = |cred: weft_proto::Cred| -> Vec<String> {
        store
            .listxattr(&cred, f)
            .unwrap()
            .into_iter()
            .map(|n| n.to_string())
            .collect()
    };
    assert_eq!(names(alice()), ["security.label", "user.a", "user.\u{fffd}"]);
    assert_eq!(
        names(root()),
        ["security.label", "trusted.t", "user.a", "user.\u{fffd}"]
    );
    store.removexattr(&root(), f, "security.label").unwrap();
    assert_eq!(
        code(store.getxattr(&alice(), f, "security.label")),
        ErrorCode::NoData
    );
    // Other namespaces, and file capabilities (which a write by another user would
    // have to drop), are not supported; names and values have limits.
    for name in ["security.capability", "system.posix_acl_access", "plain"] {
        assert_eq!(
            code(store.setxattr(&root(), f, name, b"x", XattrSet::Either)),
            ErrorCode::Unsupported,
            "{name}"
        );
    }
    assert_eq!(
        code(store.setxattr(&root(), f, "user.", b"x", XattrSet::Either)),
        ErrorCode::InvalidArgument
    );
    let long = format!("user.{}", "n".repeat(251));
    assert_eq!(
        code(store.setxattr(&root(), f, &long, b"x", XattrSet::Either)),
        ErrorCode::OutOfRange
    );
    assert_eq!(
        code(store.setxattr(&root(), f, "user.big", &vec![0; 65_537], XattrSet::Either)),
        ErrorCode::ArgumentTooLarge
    );
    // Permissions: bob may read alice's 0644 file's attributes, not change them.
    assert_eq!(store.getxattr(&bob(), f, "user.a").unwrap(), b"1");
    assert_eq!(
        code(store.setxattr(&bob(), f, "user.a", b"bob", XattrSet::Either)),
        ErrorCode::PermissionDenied
    );
    // user.* only on files and directories.
    let link = store.symlink(&alice(), d, "l", "f").unwrap().inode;
    assert_eq!(
        code(store.setxattr(&alice(), link, "user.a", b"1", XattrSet::Either)),
        ErrorCode::NotPermitted
    );
    // security.* on a symbolic link too (its label).
    store
        .setxattr(&root(), link, "security.label", b"l", XattrSet::Either)
        .unwrap();
    store
        .setxattr(&alice(), d, "user.dir", b"yes", XattrSet::Either)
        .unwrap();
    // Count limit per inode.
    let g = create(&store, &alice(), d, "g").unwrap().inode;
    for k in 0..XATTRS_PER_INODE_MAX {
        store
            .setxattr(&alice(), g, format!("user.{k}"), b"v", XattrSet::Either)
            .unwrap();
    }
    assert_eq!(
        code(store.setxattr(&alice(), g, "user.one-more", b"v", XattrSet::Either)),
        ErrorCode::NoSpace
    );
    // Replacing one at the limit is fine.
    store
        .setxattr(&alice(), g, "user.0", b"w", XattrSet::Replace)
        .unwrap();
    // Removal, and removal with the inode.
    store.removexattr(&alice(), f, "user.a").unwrap();
    assert_eq!(code(store.removexattr(&alice(), f, "user.a")), ErrorCode::NoData);
    store.unlink(&alice(), d, "g", None).unwrap();
    assert_eq!(code(store.listxattr(&alice(), g)), ErrorCode::Stale);
    let h = create(&store, &alice(), d, "h").unwrap().inode;
    assert!(store.listxattr(&alice(), h).unwrap().is_empty());
}

#[test]
fn writes_truncates_and_chown_drop_privileges_as_linux_does() {
    let (_dir, store) = store();
    let d = store.mkdir(&root(), InodeId::ROOT, "d", 0o777).unwrap().inode;
    let f = create(&store, &root(), d, "f").unwrap().inode;
    let mode = |m: u32| SetAttr {
        mode: Some(m),
        ..Default::default()
    };
    let kill = SetAttr {
        kill_privileges: true,
        ..Default::default()
    };
    let current = || store.getattr(&root(), f).unwrap().mode;
    // A write by bob (not in root's group 0) to a 06777 file: both bits go.
    store.setattr(&root(), f, &mode(0o6777)).unwrap();
    store.setattr(&bob(), f, &kill).unwrap();
    assert_eq!(current(), 0o777);
    // setgid without group execute stays for someone in the group, goes otherwise.
    store.setattr(&root(), f, &mode(0o2767)).unwrap();
    let in_group = weft_proto::Cred {
        uid: 3000,
        gid: 0,
        groups: vec![],
    };
    store.setattr(&in_group, f, &kill).unwrap();
    assert_eq!(current(), 0o2767);
    store.setattr(&bob(), f, &kill).unwrap();
    assert_eq!(current(), 0o767);
    // Killing needs write permission (or a handle open for writing).
    store.setattr(&root(), f, &mode(0o4744)).unwrap();
    assert_eq!(code(store.setattr(&bob(), f, &kill)), ErrorCode::PermissionDenied);
    let by_handle = SetAttr {
        by_handle: true,
        ..kill.clone()
    };
    store.setattr(&bob(), f, &by_handle).unwrap();
    assert_eq!(current(), 0o744);
    // Truncate through a handle needs no write permission now; by someone else it
    // drops setuid.
    store.setattr(&root(), f, &mode(0o4444)).unwrap();
    let truncate = SetAttr {
        size: Some(0),
        ..Default::default()
    };
    assert_eq!(
        code(store.setattr(&bob(), f, &truncate)),
        ErrorCode::PermissionDenied
    );
    store
        .setattr(
            &bob(),
            f,
            &SetAttr {
                by_handle: true,
                ..truncate.clone()
            },
        )
        .unwrap();
    assert_eq!(current(), 0o444);
    // chown by root drops setuid and group-executable setgid too.
    store.setattr(&root(), f, &mode(0o6755)).unwrap();
    store
        .setattr(
            &root(),
            f,
            &SetAttr {
                uid: Some(1000),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(current(), 0o755);
    // A chmod by a non-owner is refused, even one that only clears the bits.
    store.setattr(&root(), f, &mode(0o4777)).unwrap();
    assert_eq!(
        code(store.setattr(&bob(), f, &mode(0o777))),
        ErrorCode::NotPermitted
    );
    // Directories keep setgid when written to or chowned.
    let sub = store.mkdir(&root(), d, "sub", 0o2775).unwrap().inode;
    store
        .setattr(
            &root(),
            sub,
            &SetAttr {
                gid: Some(100),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(store.getattr(&root(), sub).unwrap().mode & 0o2000, 0o2000);
}

#[test]
fn names_are_bytes() {
    let (_dir, store) = store();
    let latin1: &[u8] = b"caf\xe9";
    let f = create(&store, &root(), InodeId::ROOT, latin1).unwrap();
    assert_eq!(
        store.lookup(&root(), InodeId::ROOT, latin1).unwrap().inode,
        f.inode
    );
    assert_eq!(
        code(store.lookup(&root(), InodeId::ROOT, "café")),
        ErrorCode::NotFound
    );
    let (entries, _) = store.readdir(&root(), InodeId::ROOT, "", 0).unwrap();
    assert_eq!(entries[0].name.as_bytes(), latin1);
    store
        .symlink(&root(), InodeId::ROOT, b"l\xff", b"\xfe/target")
        .unwrap();
    let l = store.lookup(&root(), InodeId::ROOT, b"l\xff").unwrap();
    assert_eq!(
        store.readlink(&root(), l.inode).unwrap().as_bytes(),
        b"\xfe/target"
    );
    assert_eq!(
        code(store.mkdir(&root(), InodeId::ROOT, b"a\0b", 0o755)),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        code(store.mkdir(&root(), InodeId::ROOT, b"a/b", 0o755)),
        ErrorCode::InvalidArgument
    );
    // Cursors are bytes too: paging resumes after a name that is not UTF-8.
    create(&store, &root(), InodeId::ROOT, b"caf\xe9z").unwrap();
    let (after, _) = store.readdir(&root(), InodeId::ROOT, latin1, 0).unwrap();
    assert_eq!(after[0].name.as_bytes(), b"caf\xe9z");
}

/// A database written before names were bytes (store format 1: entries in table
/// `dirents` keyed by UTF-8 strings) opens, and its names are all there.
#[test]
fn a_format_1_database_is_migrated_when_opened() {
    use redb::{ReadableDatabase, ReadableTable, TableDefinition};
    let dir = tempfile::tempdir().unwrap();
    let d;
    {
        let store = open(dir.path());
        d = store.mkdir(&root(), InodeId::ROOT, "dir", 0o755).unwrap().inode;
        create(&store, &root(), d, "file").unwrap();
        store.symlink(&root(), InodeId::ROOT, "link", "dir/file").unwrap();
    }
    // Turn it into format 1, as that version wrote it.
    {
        let names: TableDefinition<(u64, &[u8]), (u64, u8)> = TableDefinition::new("names");
        let dirents: TableDefinition<(u64, &str), (u64, u8)> = TableDefinition::new("dirents");
        let counters: TableDefinition<&str, u64> = TableDefinition::new("counters");
        let db = redb::Database::create(dir.path().join("meta.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let old: Vec<((u64, String), (u64, u8))> = txn
                .open_table(names)
                .unwrap()
                .iter()
                .unwrap()
                .map(|item| {
                    let (k, v) = item.unwrap();
                    let (parent, name) = k.value();
                    ((parent, String::from_utf8(name.to_vec()).unwrap()), v.value())
                })
                .collect();
            let mut table = txn.open_table(dirents).unwrap();
            for ((parent, name), value) in &old {
                table.insert((*parent, name.as_str()), *value).unwrap();
            }
            txn.open_table(counters).unwrap().insert("format", 1).unwrap();
        }
        txn.delete_table(names).unwrap();
        txn.commit().unwrap();
        let read = db.begin_read().unwrap();
        assert!(read.open_table(names).is_err(), "the new table is gone");
    }
    let store = open(dir.path());
    assert_eq!(store.resolve(&root(), "/dir/file").unwrap().kind, FileKind::File);
    assert_eq!(
        store.lookup(&root(), InodeId::ROOT, "link").unwrap().kind,
        FileKind::Symlink
    );
    assert_eq!(store.readdir(&root(), d, "", 0).unwrap().0.len(), 1);
    // Migrated once: it opens again as the current format.
    drop(store);
    let store = open(dir.path());
    create(&store, &root(), d, b"\xffnew").unwrap();
    assert_eq!(store.readdir(&root(), d, "", 0).unwrap().0.len(), 2);
}

#[test]
fn an_exchange_swaps_two_names_of_any_kinds_and_keeps_the_counts() {
    let (_dir, store) = store();
    let d = store.mkdir(&root(), InodeId::ROOT, "d", 0o777).unwrap().inode;
    let e = store.mkdir(&root(), InodeId::ROOT, "e", 0o777).unwrap().inode;
    let f = create(&store, &alice(), d, "f").unwrap().inode;
    let sub = store.mkdir(&alice(), e, "sub", 0o755).unwrap().inode;
    let inner = create(&store, &alice(), sub, "inner").unwrap().inode;
    let before = store.statfs(&root()).unwrap();
    let nlinks = |store: &MetaStore| {
        (
            store.getattr(&root(), d).unwrap().nlink,
            store.getattr(&root(), e).unwrap().nlink,
        )
    };
    assert_eq!(nlinks(&store), (2, 3));

    // A file and a directory in different directories change places.
    let moved = store.exchange(&alice(), (d, "f"), (e, "sub")).unwrap();
    assert_eq!(moved.inode, f);
    assert_eq!(store.lookup(&alice(), d, "f").unwrap().inode, sub);
    assert_eq!(store.lookup(&alice(), e, "sub").unwrap().inode, f);
    assert_eq!(store.lookup(&alice(), sub, "inner").unwrap().inode, inner);
    assert_eq!(nlinks(&store), (3, 2), "the directory's \"..\" moved along");
    let after = store.statfs(&root()).unwrap();
    assert_eq!(
        (after.files, after.directories),
        (before.files, before.directories)
    );

    // Within one directory, and with itself.
    create(&store, &alice(), d, "g").unwrap();
    let g = store.lookup(&alice(), d, "g").unwrap().inode;
    store.exchange(&alice(), (d, "g"), (d, "f")).unwrap();
    assert_eq!(store.lookup(&alice(), d, "f").unwrap().inode, g);
    assert_eq!(store.lookup(&alice(), d, "g").unwrap().inode, sub);
    store.exchange(&alice(), (d, "f"), (d, "f")).unwrap();
    assert_eq!(store.lookup(&alice(), d, "f").unwrap().inode, g);

    // Errors: a missing name, a directory into its own subtree, the sticky rule.
    assert_eq!(
        code(store.exchange(&alice(), (d, "f"), (d, "none"))),
        ErrorCode::NotFound
    );
    assert_eq!(
        code(store.exchange(&alice(), (d, "g"), (sub, "inner"))),
        ErrorCode::InvalidArgument
    );
    let t = store.mkdir(&root(), InodeId::ROOT, "t", 0o1777).unwrap().inode;
    create(&store, &alice(), t, "hers").unwrap();
    create(&store, &bob(), t, "his").unwrap();
    assert_eq!(
        code(store.exchange(&bob(), (t, "his"), (t, "hers"))),
        ErrorCode::NotPermitted
    );
    assert_eq!(store.lookup(&alice(), d, "g").unwrap().inode, sub, "unchanged");
}

#[test]
fn a_rename_without_replacing_refuses_any_existing_target() {
    let (_dir, store) = store();
    let d = store.mkdir(&root(), InodeId::ROOT, "d", 0o777).unwrap().inode;
    let f = create(&store, &alice(), d, "f").unwrap().inode;
    create(&store, &alice(), d, "g").unwrap();
    store.link(&alice(), f, d, "f2").unwrap();
    // An existing target, another name of the same file, the name itself: as Linux.
    for target in ["g", "f2", "f"] {
        assert_eq!(
            code(store.rename_no_replace(&alice(), (d, "f"), (d, target))),
            ErrorCode::Exists,
            "{target}"
        );
    }
    assert_eq!(store.lookup(&alice(), d, "g").unwrap().nlink, 1, "g untouched");
    let e = store.mkdir(&root(), InodeId::ROOT, "e", 0o777).unwrap().inode;
    let moved = store.rename_no_replace(&alice(), (d, "f"), (e, "h")).unwrap();
    assert_eq!(moved.inode, f);
    assert_eq!(code(store.lookup(&alice(), d, "f")), ErrorCode::NotFound);
    assert_eq!(store.lookup(&alice(), e, "h").unwrap().inode, f);
}

/// Issue 29, finding 4: an inode named by number is reached only through directories
/// the caller may search, walked up from its recorded parent to the root.
#[test]
fn an_inode_is_reached_only_through_directories_the_caller_may_search() {
    let (_dir, store) = store();
    let top = store.mkdir(&root(), InodeId::ROOT, "top", 0o777).unwrap().inode;
    let private = store.mkdir(&alice(), top, "private", 0o700).unwrap().inode;
    let open = store.mkdir(&alice(), private, "open", 0o755).unwrap().inode;
    let f = create(&store, &alice(), open, "f").unwrap().inode;
    for inode in [private, open, f] {
        store.may_reach(&alice(), inode).unwrap();
        store.may_reach(&root(), inode).unwrap();
    }
    // The private directory itself is reached (its own search bit is its operations'
    // business); what lies inside it is not.
    store.may_reach(&bob(), private).unwrap();
    assert_eq!(code(store.may_reach(&bob(), open)), ErrorCode::PermissionDenied);
    assert_eq!(code(store.may_reach(&bob(), f)), ErrorCode::PermissionDenied);
    // Moved out, it is reached again; a missing inode passes (its operation says Stale).
    store.rename(&alice(), (open, "f"), (top, "f"), None).unwrap();
    store.may_reach(&bob(), f).unwrap();
    store.may_reach(&bob(), InodeId(999_999)).unwrap();
    // Hard links: any directory holding one of its names that bob may reach will do,
    // whichever name came first, and only while that name is there.
    store.rename(&alice(), (top, "f"), (open, "f"), None).unwrap();
    assert_eq!(code(store.may_reach(&bob(), f)), ErrorCode::PermissionDenied);
    store.link(&alice(), f, top, "again").unwrap();
    store.may_reach(&bob(), f).unwrap();
    store
        .rename(&alice(), (top, "again"), (open, "again"), None)
        .unwrap();
    assert_eq!(code(store.may_reach(&bob(), f)), ErrorCode::PermissionDenied);
    store.link(&alice(), f, top, "third").unwrap();
    store.may_reach(&bob(), f).unwrap();
    store.unlink(&alice(), top, "third", None).unwrap();
    assert_eq!(code(store.may_reach(&bob(), f)), ErrorCode::PermissionDenied);
    // Replaced by another file's name, the name no longer leads to it.
    store.link(&alice(), f, top, "fourth").unwrap();
    let other = create(&store, &alice(), top, "other").unwrap();
    store
        .rename(&alice(), (top, "other"), (top, "fourth"), None)
        .unwrap();
    assert_eq!(code(store.may_reach(&bob(), f)), ErrorCode::PermissionDenied);
    store.may_reach(&bob(), other.inode).unwrap();
    // The first name gone, the file is still reached through the one left.
    store.link(&alice(), f, top, "fifth").unwrap();
    store.unlink(&alice(), open, "f", None).unwrap();
    store.unlink(&alice(), open, "again", None).unwrap();
    store.may_reach(&bob(), f).unwrap();
}

/// A store made before `file_parents` existed has it built at its first open: a file's
/// second name, in a directory others may search, reaches it again.
#[test]
fn a_store_without_file_parents_has_them_built_when_opened() {
    use redb::TableDefinition;
    let dir = tempfile::tempdir().unwrap();
    let f;
    {
        let store = open(dir.path());
        let top = store.mkdir(&root(), InodeId::ROOT, "top", 0o777).unwrap().inode;
        let private = store.mkdir(&alice(), top, "private", 0o700).unwrap().inode;
        f = create(&store, &alice(), private, "f").unwrap().inode;
        store.link(&alice(), f, top, "public").unwrap();
        store.may_reach(&bob(), f).unwrap();
    }
    {
        let parents: TableDefinition<(u64, u64), u64> = TableDefinition::new("file_parents");
        let counters: TableDefinition<&str, u64> = TableDefinition::new("counters");
        let db = redb::Database::create(dir.path().join("meta.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        txn.delete_table(parents).unwrap();
        txn.open_table(counters).unwrap().remove("file_parents").unwrap();
        txn.commit().unwrap();
    }
    let store = open(dir.path());
    store.may_reach(&bob(), f).unwrap();
}
