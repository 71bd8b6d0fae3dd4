//! Attribute changes of a file the mount created and holds open are kept and sent as
//! one request at its close (weft-fuse `deferred`): what every observer sees is what a
//! local file system shows for the same calls, in this mount at once, elsewhere from
//! the close; and `tar x` pays one manager setattr per file rather than three.

mod common;

use common::{sh, Mount};
use std::fs::{File, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{fchown, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime};
use weft_testkit::TestCluster;

/// (mode, uid, gid, mtime seconds, size) of a path.
fn attrs_of(path: &Path) -> (u32, u32, u32, i64, u64) {
    let m = std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display()));
    (m.mode() & 0o7777, m.uid(), m.gid(), m.mtime(), m.size())
}

fn fattrs(file: &File) -> (u32, u32, u32, i64, u64) {
    let m = file.metadata().unwrap();
    (m.mode() & 0o7777, m.uid(), m.gid(), m.mtime(), m.size())
}

/// A sequence of changes through one descriptor of a file it creates, as tar and cp -p
/// make them (and a few orders they do not), checked while open; returns the descriptor.
fn make(dir: &Path, name: &str, steps: &[&str]) -> (File, (u32, u32, u32, i64, u64)) {
    let path = dir.join(name);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    file.write_all(b"some bytes").unwrap();
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    for step in steps {
        match *step {
            "times" => file
                .set_times(std::fs::FileTimes::new().set_modified(old))
                .unwrap(),
            "now" => file.set_modified(SystemTime::now()).unwrap(),
            "chown" => fchown(&file, Some(1234), Some(4321)).unwrap(),
            "chgrp" => fchown(&file, None, Some(99)).unwrap(),
            "chmod" => file.set_permissions(Permissions::from_mode(0o6755)).unwrap(),
            "chmod2" => file.set_permissions(Permissions::from_mode(0o640)).unwrap(),
            other => panic!("unknown step {other}"),
        }
    }
    let seen = fattrs(&file);
    // The path shows what the descriptor shows.
    assert_eq!(
        attrs_of(&path),
        seen,
        "{name}: path and descriptor differ while open"
    );
    (file, seen)
}

#[test]
fn kept_changes_show_at_once_here_and_everywhere_after_close_as_on_a_local_file_system() {
    let _alone = common::one_at_a_time();
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let other = Mount::new(&cluster);
    let local = mount.scratch().join("local");
    std::fs::create_dir(&local).unwrap();
    let cases: &[&[&str]] = &[
        &["times", "chown", "chmod"],
        &["chmod", "chown"],
        &["chmod", "times", "chgrp", "chmod2"],
        &["chown", "chmod", "now"],
        &["now", "times"],
        &["chmod2"],
    ];
    let client = cluster.client();
    for (k, steps) in cases.iter().enumerate() {
        let name = format!("f{k}");
        let (local_file, want) = make(&local, &name, steps);
        let (file, seen) = make(mount.path(), &name, steps);
        let now_ish = |a: (u32, u32, u32, i64, u64)| (a.0, a.1, a.2, a.4);
        // Without an explicit time last, the times are those of the calls (the local
        // file's made a moment earlier, perhaps in the second before).
        let explicit = steps.iter().rev().find(|s| **s == "times" || **s == "now") == Some(&"times");
        let same = |got: (u32, u32, u32, i64, u64), when: &str| {
            if explicit {
                assert_eq!(got, want, "{steps:?}: {when}");
            } else {
                assert_eq!(now_ish(got), now_ish(want), "{steps:?}: {when}");
                assert!(
                    (0..=2).contains(&(got.3 - want.3)),
                    "{steps:?}: mtime {} {when}, {} locally just before",
                    got.3,
                    want.3
                );
            }
        };
        same(seen, "open, through the mount");
        drop(local_file);
        drop(file);
        // After close: the same for the other mount and the native client.
        let there = attrs_of(&other.join(&name));
        assert_eq!(
            there,
            attrs_of(&mount.join(&name)),
            "{steps:?}: the other mount after close"
        );
        let native = client.stat(&format!("/{name}")).unwrap();
        assert_eq!(
            (native.mode, native.uid, native.gid, native.mtime.secs),
            (there.0, there.1, there.2, there.3),
            "{steps:?}: the native client after close"
        );
        same(there, "after close");
    }
}

#[test]
fn tar_extracts_with_one_setattr_per_file_and_the_same_attributes_as_locally() {
    let _alone = common::one_at_a_time();
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let scratch = mount.scratch();
    let tree = scratch.join("tree");
    for d in 0..4 {
        std::fs::create_dir_all(tree.join(format!("d{d}"))).unwrap();
        for f in 0..25 {
            let path = tree.join(format!("d{d}/f{f}"));
            // Some large enough to be sent in several requests at close.
            let len = if f % 5 == 4 { 300_000 * (f + 1) } else { 100 * f };
            std::fs::write(&path, common::pattern(f as u64, len)).unwrap();
            std::fs::set_permissions(&path, Permissions::from_mode(0o600 + (f as u32 % 8) * 0o10)).unwrap();
            std::os::unix::fs::chown(&path, Some(1000 + f as u32), Some(2000 + d)).unwrap();
        }
    }
    sh(
        scratch,
        "tar cf tree.tar -C tree . && mkdir local && tar xf tree.tar -C local",
    );
    let before = cluster.manager_requests("set_attr");
    let xattrs_before = cluster.manager_requests("get_xattr");
    sh(
        scratch,
        &format!("mkdir {0}/x && tar xf tree.tar -C {0}/x", mount.path().display()),
    );
    sh(scratch, &format!("diff -r local {}/x", mount.path().display()));
    let set_attrs = cluster.manager_requests("set_attr") - before;
    assert!(
        set_attrs <= 100.0 + 3.0 * 5.0 + 3.0,
        "{set_attrs} manager setattrs to extract 100 files and 5 directories"
    );
    // The kernel's security.capability questions (first write, chown) of files made
    // here and open here are answered by the mount (200 requests without that).
    let get_xattrs = cluster.manager_requests("get_xattr") - xattrs_before;
    assert!(
        get_xattrs <= 10.0,
        "{get_xattrs} manager getxattrs to extract 100 files and 5 directories"
    );
    // The other mount (and so the manager) shows what a local extraction shows.
    let other = Mount::new(&cluster);
    for d in 0..4 {
        for f in 0..25 {
            let rel = format!("d{d}/f{f}");
            assert_eq!(
                attrs_of(&other.join(&format!("x/{rel}"))),
                attrs_of(&scratch.join(format!("local/{rel}"))),
                "{rel}"
            );
        }
    }
}

fn fgetxattr(file: &File, name: &str) -> Result<Vec<u8>, i32> {
    use std::os::fd::AsRawFd;
    let name = std::ffi::CString::new(name).unwrap();
    // SAFETY: a valid descriptor, a NUL-terminated name and the buffer xattr_value
    // passes with its length.
    common::xattr_value(|buf, len| unsafe { libc::fgetxattr(file.as_raw_fd(), name.as_ptr(), buf, len) })
}

fn fsetxattr(file: &File, name: &str, value: &[u8]) {
    use std::os::fd::AsRawFd;
    let name = std::ffi::CString::new(name).unwrap();
    // SAFETY: a valid descriptor, a NUL-terminated name and a value of the given length.
    let rc = unsafe {
        libc::fsetxattr(
            file.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(rc, 0, "fsetxattr {name:?}: {}", std::io::Error::last_os_error());
}

fn fremovexattr(file: &File, name: &str) {
    use std::os::fd::AsRawFd;
    let name = std::ffi::CString::new(name).unwrap();
    // SAFETY: a valid descriptor and a NUL-terminated name.
    let rc = unsafe { libc::fremovexattr(file.as_raw_fd(), name.as_ptr()) };
    assert_eq!(
        rc,
        0,
        "fremovexattr {name:?}: {}",
        std::io::Error::last_os_error()
    );
}

/// A file this mount created and holds open has no extended attributes until this
/// mount gives it some: the mount says so without asking the manager; once it sets or
/// removes one, and after the file is closed, the manager is asked again (and so what
/// another client set shows).
#[test]
fn extended_attributes_of_a_new_open_file_are_answered_here_until_it_changes_them() {
    let _alone = common::one_at_a_time();
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let path = mount.join("new");
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    let before = cluster.manager_requests("get_xattr");
    for _ in 0..5 {
        assert_eq!(fgetxattr(&file, "user.a"), Err(libc::ENODATA));
        assert_eq!(fgetxattr(&file, "security.capability"), Err(libc::ENODATA));
    }
    file.write_all(b"bytes").unwrap();
    fchown(&file, Some(0), Some(0)).unwrap();
    assert_eq!(
        cluster.manager_requests("get_xattr") - before,
        0.0,
        "the manager was asked about a new file's extended attributes"
    );

    // Set here: from now on the manager answers (and has it).
    fsetxattr(&file, "user.a", b"one");
    assert_eq!(fgetxattr(&file, "user.a"), Ok(b"one".to_vec()));
    fremovexattr(&file, "user.a");
    assert_eq!(fgetxattr(&file, "user.a"), Err(libc::ENODATA));
    assert!(cluster.manager_requests("get_xattr") - before >= 2.0);

    // A second new file, closed: what another client set since shows here.
    let second = mount.join("second");
    let file2 = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&second)
        .unwrap();
    assert_eq!(fgetxattr(&file2, "user.b"), Err(libc::ENODATA));
    drop(file2);
    let client = cluster.client();
    let inode = client.stat("/second").unwrap().inode;
    client
        .setxattr(inode, "user.b", b"two", weft_client::XattrSet::Either)
        .unwrap();
    let file2 = File::open(&second).unwrap();
    assert_eq!(fgetxattr(&file2, "user.b"), Ok(b"two".to_vec()));
    drop(file);
}

/// A new file made without O_EXCL (`open(O_CREAT|O_TRUNC)`: Python's `open(.., "w")`,
/// the shell's `>`) is as new as one made with it when the create made the name (the
/// mount always tries an exclusive create first): the kernel's `security.capability`
/// question at its first write and the owner, mode and time changes before its close
/// are answered and kept here (a question per file went to the manager before). A name
/// that existed is opened, not made, and the manager is asked as usual.
#[test]
fn a_file_made_by_a_create_without_o_excl_is_new_here_too() {
    let _alone = common::one_at_a_time();
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let xattrs = cluster.manager_requests("get_xattr");
    let set_attrs = cluster.manager_requests("set_attr");
    for i in 0..20 {
        let path = mount.join(&format!("plain{i}"));
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.write_all(b"first write").unwrap();
        fchown(&file, Some(0), Some(0)).unwrap();
        file.set_permissions(Permissions::from_mode(0o640)).unwrap();
        drop(file);
    }
    assert_eq!(
        cluster.manager_requests("get_xattr") - xattrs,
        0.0,
        "the manager was asked about new files' extended attributes"
    );
    // One merged change per file at its close, not one per call.
    let sent = cluster.manager_requests("set_attr") - set_attrs;
    assert!(sent <= 20.0, "{sent} setattrs for 20 new files");
    let other = Mount::new(&cluster);
    let meta = std::fs::metadata(other.join("plain7")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o640);
    assert_eq!(common::read_all(&other.join("plain7")), b"first write".to_vec());

    // An existing name: opened, so the manager answers for its extended attributes.
    let before = cluster.manager_requests("get_xattr");
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(mount.join("plain3"))
        .unwrap();
    file.write_all(b"again").unwrap();
    drop(file);
    assert!(
        cluster.manager_requests("get_xattr") - before >= 1.0,
        "an existing file's security.capability was answered without the manager"
    );
}

/// A file this mount created has its write capability from the create itself
/// (`CreateGranted`): neither its first small write (kept until close) nor the close
/// asks the manager for one, and the data arrives whole. (Before the create carried
/// it, the first write made the mount ask in the background, once.)
#[test]
fn a_new_files_write_capability_comes_with_its_create() {
    let _alone = common::one_at_a_time();
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let path = mount.join("new");
    let before = cluster.manager_requests("grant_capability");
    let creates = cluster.manager_requests("create");
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    file.write_all(b"kept until close").unwrap();
    // Whatever a background request would do, it would have done it by now.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        cluster.manager_requests("create") - creates >= 1.0,
        "the create was not counted"
    );
    file.write_all(b", and more").unwrap();
    fchown(&file, Some(0), Some(0)).unwrap();
    file.set_permissions(Permissions::from_mode(0o644)).unwrap();
    drop(file);
    assert_eq!(
        cluster.manager_requests("grant_capability") - before,
        0.0,
        "write capabilities asked for a new file whose create carried one"
    );
    let client = cluster.client();
    assert_eq!(
        common::read_all(&path),
        b"kept until close, and more".to_vec(),
        "through the mount"
    );
    assert_eq!(client.stat("/new").unwrap().size, 26);
}

/// A file's read capability comes with the check of its open (`VouchedReadable`): a
/// mount that opens and reads files another client wrote asks the manager once per
/// file (the check), not twice (the check, then a grant at the first read), and reads
/// every byte.
#[test]
fn a_files_read_capability_comes_with_its_open_check() {
    let _alone = common::one_at_a_time();
    let cluster = TestCluster::start();
    let client = cluster.client();
    client.mkdir("/r", 0o755).unwrap();
    const FILES: usize = 20;
    for k in 0..FILES {
        let data = format!("file {k} written by the native client").into_bytes();
        let f = client
            .create(&format!("/r/f{k}"), &weft_client::CreateOptions::default())
            .unwrap();
        f.write_at(0, &data).unwrap();
        f.close().unwrap();
    }
    let mount = Mount::new(&cluster);
    let grants = cluster.manager_requests("grant_capability");
    let checks = cluster.manager_requests("revalidate");
    for k in 0..FILES {
        assert_eq!(
            common::read_all(&mount.join(&format!("r/f{k}"))),
            format!("file {k} written by the native client").into_bytes()
        );
    }
    assert!(
        cluster.manager_requests("revalidate") - checks >= FILES as f64,
        "the opens were not checked with the manager"
    );
    assert_eq!(
        cluster.manager_requests("grant_capability") - grants,
        0.0,
        "read capabilities asked for apart from the opens' checks"
    );
}

/// A read-only descriptor takes the size its open checked as the file's end (its reads
/// ask the io servers for no size), but not once this mount wrote to a file: bytes
/// another descriptor here appended are read through it at once, as on a local file
/// system (O_DIRECT, so the kernel asks the mount rather than answer from its pages).
#[test]
fn a_read_only_descriptor_sees_what_another_one_here_appended() {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;
    let _alone = common::one_at_a_time();
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let path = mount.join("grown");
    std::fs::write(&path, b"first").unwrap();
    // Past the attribute timeout: the open checks the file anew.
    std::thread::sleep(Duration::from_millis(1100));
    let mut reader = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .unwrap();
    let mut seen = Vec::new();
    reader.read_to_end(&mut seen).unwrap();
    assert_eq!(seen, b"first");
    let mut writer = OpenOptions::new().append(true).open(&path).unwrap();
    writer.write_all(b", then more").unwrap();
    reader.seek(SeekFrom::Start(5)).unwrap();
    let mut more = Vec::new();
    reader.read_to_end(&mut more).unwrap();
    assert_eq!(more, b", then more", "what another descriptor appended");
    drop(writer);
}
