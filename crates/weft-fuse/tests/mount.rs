//! `weft mount` and `weft umount` themselves, layouts as extended attributes, errno
//! mapping, large directories and statfs.

mod common;

use common::{sh, sh_output, Mount};
use std::io::ErrorKind;
use std::path::Path;
use std::time::{Duration, Instant};
use weft_testkit::TestCluster;

#[test]
fn background_mount_is_usable_when_weft_mount_returns() {
    let cluster = TestCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let mountpoint = dir.path().join("mnt");
    std::fs::create_dir(&mountpoint).unwrap();
    let log = dir.path().join("daemon.log");
    let mp = mountpoint.to_str().unwrap();

    let out = cluster.weft(&["mount", mp, "--log", log.to_str().unwrap()]);
    assert!(out.status.success(), "weft mount: {out:?}");
    // No waiting: the mount is there and serves requests as soon as the command returns.
    assert!(weft_fuse::is_weft_mount(&mountpoint).unwrap());
    std::fs::write(mountpoint.join("hello"), b"hi").unwrap();
    assert_eq!(cluster.client().stat("/hello").unwrap().size, 2);

    // Mounting twice on one place is refused before anything happens.
    let again = cluster.weft(&["mount", mp]);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already mounted"),
        "{again:?}"
    );

    let out = cluster.weft(&["umount", mp]);
    assert!(out.status.success(), "weft umount: {out:?}");
    assert!(!weft_fuse::is_weft_mount(&mountpoint).unwrap());
    // The daemon ends with its mount.
    let deadline = Instant::now() + Duration::from_secs(10);
    while daemon_running(mp) {
        assert!(Instant::now() < deadline, "the mount daemon outlived its mount");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Unmounting what is not a Weft mount is refused.
    let out = cluster.weft(&["umount", mp]);
    assert!(!out.status.success());
    let out = cluster.weft(&["umount", "/"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a Weft mount"),
        "{out:?}"
    );

    // A directory with files is mounted over, with a note that its files are hidden;
    // they are there again after the unmount.
    std::fs::write(mountpoint.join("local"), b"mine").unwrap();
    let out = cluster.weft(&["mount", mp]);
    assert!(out.status.success(), "weft mount: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not empty") && err.contains("hidden"), "{err}");
    assert!(mountpoint.join("hello").exists() && !mountpoint.join("local").exists());
    let out = cluster.weft(&["umount", mp]);
    assert!(out.status.success(), "weft umount: {out:?}");
    assert_eq!(std::fs::read(mountpoint.join("local")).unwrap(), b"mine");
}

/// Whether a `weft mount` process for `mountpoint` is alive.
fn daemon_running(mountpoint: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|p| {
        std::fs::read(p.path().join("cmdline")).is_ok_and(|c| {
            let args: Vec<&[u8]> = c.split(|b| *b == 0).collect();
            args.len() > 2 && args[1] == b"mount" && args[2] == mountpoint.as_bytes()
        })
    })
}

#[test]
fn mount_failures_are_reported_before_weft_mount_returns() {
    let dir = tempfile::tempdir().unwrap();
    let mountpoint = dir.path().join("mnt");
    std::fs::create_dir(&mountpoint).unwrap();
    let weft = weft_testkit::bin("weft");
    // No cluster at that address (a port nothing listens on).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let started = Instant::now();
    let state = dir.path().join("state");
    let out = std::process::Command::new(&weft)
        .args(["mount", mountpoint.to_str().unwrap()])
        .env("WEFT_META", &addr)
        .env("XDG_STATE_HOME", &state)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot reach the cluster"), "{out:?}");
    assert_eq!(
        err.matches("cannot reach the cluster").count(),
        1,
        "said once, by weft mount (the daemon's stderr was still its own): {err}"
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    assert!(!weft_fuse::is_weft_mount(&mountpoint).unwrap());

    let out = std::process::Command::new(&weft)
        .args(["mount", dir.path().join("missing").to_str().unwrap()])
        .env("WEFT_META", &addr)
        .env("XDG_STATE_HOME", &state)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("missing") && err.contains("does not exist") && err.contains("mkdir -p"),
        "{out:?}"
    );
}

fn getfattr(dir: &Path, file: &str) -> String {
    sh(dir, &format!("getfattr --only-values -n user.weft.layout {file}"))
}

#[test]
fn layouts_are_extended_attributes() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let m = mount.path();
    sh(m, "echo x > plain && mkdir wide");
    assert_eq!(
        getfattr(m, "plain"),
        "stripe_size=65536 stripe_count=4 servers=1,2,3,4 cache=none"
    );
    // listxattr names it; a directory without its own default has none.
    assert!(sh(m, "getfattr -d -m - plain").contains("user.weft.layout="));
    assert!(!sh(m, "getfattr -d -m - wide").contains("user.weft.layout"));
    assert!(!sh_output(m, "getfattr -n user.weft.layout wide").status.success());

    sh(
        m,
        "setfattr -n user.weft.layout -v 'stripe_size=1048576 stripe_count=2' wide",
    );
    assert_eq!(getfattr(m, "wide"), "stripe_size=1048576 stripe_count=2");
    sh(m, "dd if=/dev/zero of=wide/new bs=1M count=3 status=none");
    let layout = getfattr(m, "wide/new");
    assert!(
        layout.starts_with("stripe_size=1048576 stripe_count=2 servers="),
        "{layout}"
    );
    // The native client sees the same layout.
    let native = cluster.client().stat("/wide/new").unwrap().layout.unwrap();
    assert_eq!((native.stripe_size_bytes, native.servers.len()), (1 << 20, 2));
    assert_eq!(
        native
            .servers
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(","),
        layout
            .split_whitespace()
            .find_map(|f| f.strip_prefix("servers="))
            .unwrap()
    );

    // Bad values and files are refused with the right errors; removal restores the
    // cluster default for new files.
    let out = sh_output(m, "setfattr -n user.weft.layout -v 'stripe_size=banana' wide");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Invalid argument"),
        "{out:?}"
    );
    let out = sh_output(m, "setfattr -n user.weft.layout -v 'stripe_count=1' plain");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Operation not supported"),
        "{out:?}"
    );
    // Other user attributes are stored as they are.
    sh(m, "setfattr -n user.other -v 1 plain");
    assert_eq!(sh(m, "getfattr --only-values -n user.other plain"), "1");
    sh(m, "setfattr -x user.weft.layout wide && echo y > wide/after");
    // Over all four io servers, in their order from the first server the manager chose
    // (each new file the next in turn).
    let after = getfattr(m, "wide/after");
    let rotations = ["1,2,3,4", "2,3,4,1", "3,4,1,2", "4,1,2,3"];
    assert!(
        rotations
            .iter()
            .any(|r| after == format!("stripe_size=65536 stripe_count=4 servers={r} cache=none")),
        "{after}"
    );
}

fn errno_of<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.expect_err("expected an error")
        .raw_os_error()
        .expect("an OS error")
}

#[test]
fn errors_map_to_the_right_errno() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let p = |rel: &str| mount.join(rel);
    std::fs::create_dir(p("dir")).unwrap();
    std::fs::write(p("dir/file"), b"x").unwrap();
    std::fs::create_dir(p("empty")).unwrap();

    assert_eq!(errno_of(std::fs::read(p("nope"))), libc::ENOENT);
    assert_eq!(errno_of(std::fs::create_dir(p("dir"))), libc::EEXIST);
    assert_eq!(errno_of(std::fs::remove_dir(p("dir"))), libc::ENOTEMPTY);
    assert_eq!(errno_of(std::fs::remove_dir(p("dir/file"))), libc::ENOTDIR);
    assert_eq!(errno_of(std::fs::remove_file(p("dir"))), libc::EISDIR);
    assert_eq!(errno_of(std::fs::read_dir(p("dir/file"))), libc::ENOTDIR);
    assert_eq!(errno_of(std::fs::rename(p("empty"), p("dir"))), libc::ENOTEMPTY);
    assert_eq!(
        errno_of(std::fs::rename(p("dir"), p("dir/file/x"))),
        libc::ENOTDIR
    );
    assert_eq!(
        errno_of(std::fs::write(p(&"n".repeat(256)), b"")),
        libc::ENAMETOOLONG
    );
    let exclusive = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(p("dir/file"));
    assert_eq!(errno_of(exclusive), libc::EEXIST);
    // Moving a directory into itself.
    assert_eq!(errno_of(std::fs::rename(p("dir"), p("dir/inside"))), libc::EINVAL);

    // Symbolic links resolve and read back.
    std::os::unix::fs::symlink("dir/file", p("link")).unwrap();
    assert_eq!(std::fs::read_link(p("link")).unwrap(), Path::new("dir/file"));
    assert_eq!(std::fs::read(p("link")).unwrap(), b"x");
    assert_eq!(errno_of(std::os::unix::fs::symlink("x", p("link"))), libc::EEXIST);

    // An io server that is gone is an error, not a hang or wrong data.
    std::fs::write(p("striped"), common::pattern(1, 1 << 20)).unwrap();
    cluster.kill9(2);
    let err = std::fs::read(p("striped")).expect_err("read with a server down");
    assert_ne!(err.kind(), ErrorKind::NotFound);
    assert!(err.raw_os_error().is_some(), "{err:?}");
}

#[test]
fn files_removed_while_open_stay_usable_through_their_descriptors() {
    use std::io::{Read, Seek, SeekFrom, Write};
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    std::fs::write(mount.join("doomed"), b"still here").unwrap();
    std::fs::write(mount.join("replaced"), b"old content").unwrap();
    let mut doomed = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(mount.join("doomed"))
        .unwrap();
    let mut replaced = std::fs::File::open(mount.join("replaced")).unwrap();
    std::fs::remove_file(mount.join("doomed")).unwrap();
    std::fs::write(mount.join("new"), b"new content").unwrap();
    std::fs::rename(mount.join("new"), mount.join("replaced")).unwrap();

    // The names behave as removed and replaced...
    assert!(!mount.join("doomed").exists());
    assert_eq!(std::fs::read(mount.join("replaced")).unwrap(), b"new content");
    // ... and the open descriptors still have the old files, for reading and writing.
    let mut text = String::new();
    doomed.read_to_string(&mut text).unwrap();
    assert_eq!(text, "still here");
    doomed.write_all(b", and more").unwrap();
    doomed.seek(SeekFrom::Start(0)).unwrap();
    text.clear();
    doomed.read_to_string(&mut text).unwrap();
    assert_eq!(text, "still here, and more");
    text.clear();
    replaced.read_to_string(&mut text).unwrap();
    assert_eq!(text, "old content");

    // Closing the last descriptors removes the files for good.
    drop(doomed);
    drop(replaced);
    assert_eq!(sh(mount.path(), "ls -A"), "replaced\n");
    assert_eq!(cluster.client().statfs().unwrap().meta.files, 1);
}

#[test]
fn large_directories_list_completely() {
    // More names than one page of the manager (1024) and than many kernel readdir
    // buffers; made with the native client, four threads at once.
    const FILES: usize = 2600;
    let cluster = TestCluster::start();
    let client = cluster.client();
    client.mkdir("/big", 0o755).unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let client = client.clone();
            s.spawn(move || {
                for k in (t..FILES).step_by(4) {
                    client
                        .create(&format!("/big/entry-{k:05}"), &Default::default())
                        .unwrap();
                }
            });
        }
    });
    let mount = Mount::new(&cluster);
    let names = sh(&mount.join("big"), "ls");
    let expected: Vec<String> = (0..FILES).map(|k| format!("entry-{k:05}")).collect();
    assert_eq!(names.lines().collect::<Vec<_>>(), expected);
    // ls -l takes names and attributes together (readdirplus) and finds them all.
    let long = sh(&mount.join("big"), "ls -ln | grep -c '^-rw-r--r-- 1 0 0 0 '");
    assert_eq!(long.trim(), FILES.to_string());
    assert_eq!(
        sh(mount.path(), "find big -type f | wc -l").trim(),
        FILES.to_string()
    );
}

/// `ls -l` sizes come from the io servers once per page of the listing (1,024 entries),
/// not once per kernel call: every file of a directory of several pages shows its true
/// size, and a listing after files changed and went on another client shows the new
/// sizes and no removed file.
#[test]
fn ls_long_shows_true_sizes_across_listing_pages_and_after_changes_elsewhere() {
    const FILES: usize = 2100;
    let cluster = TestCluster::start();
    let client = cluster.client();
    client.mkdir("/sized", 0o755).unwrap();
    let size_of = |k: usize, round: usize| (k * 37 + round * 1000) % 5000;
    let write_all = |round: usize| {
        std::thread::scope(|s| {
            for t in 0..4 {
                let client = client.clone();
                s.spawn(move || {
                    for k in (t..FILES).step_by(4) {
                        let path = format!("/sized/f{k:05}");
                        let options = weft_client::CreateOptions {
                            truncate: true,
                            ..Default::default()
                        };
                        let file = client.create(&path, &options).unwrap();
                        file.write_at(0, &vec![b'x'; size_of(k, round)]).unwrap();
                    }
                });
            }
        });
    };
    let listed = |mount: &Mount| -> Vec<(String, usize)> {
        sh(&mount.join("sized"), "ls -ln")
            .lines()
            .filter(|l| l.starts_with('-'))
            .map(|l| {
                let fields: Vec<&str> = l.split_whitespace().collect();
                (fields[8].to_owned(), fields[4].parse().unwrap())
            })
            .collect()
    };
    write_all(0);
    let mount = Mount::new(&cluster);
    let expected: Vec<(String, usize)> = (0..FILES).map(|k| (format!("f{k:05}"), size_of(k, 0))).collect();
    assert_eq!(listed(&mount), expected);
    // Other sizes, and every tenth file removed, by the native client.
    write_all(1);
    for k in (0..FILES).step_by(10) {
        client.unlink(&format!("/sized/f{k:05}")).unwrap();
    }
    let expected: Vec<(String, usize)> = (0..FILES)
        .filter(|k| k % 10 != 0)
        .map(|k| (format!("f{k:05}"), size_of(k, 1)))
        .collect();
    assert_eq!(listed(&mount), expected);
}

#[test]
fn statfs_shows_the_cluster() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let df = sh(mount.path(), "df -k --output=fstype,size,avail . | tail -1");
    let fields: Vec<&str> = df.split_whitespace().collect();
    assert!(fields[0].starts_with("fuse"), "{df}");
    assert!(fields[1].parse::<u64>().unwrap() > 0, "{df}");
    let stat = sh(mount.path(), "stat -f -c '%l' .");
    assert_eq!(stat.trim(), "255");
}

/// statfs(2) callers that size the file system as f_blocks x f_bsize (mdtest and IOR,
/// which printed "FS: 1007.9 TiB" for a cluster on one 252 GB disk; Go's Statfs users
/// such as node_exporter do the same) get the io servers' space, not 1,024 times it:
/// the block size is the fundamental one, as on ext4, NFS and CephFS.
#[test]
fn statfs_blocks_times_block_size_is_the_space() {
    // The test cluster's io servers all keep their objects on the file system of its
    // home: df of the mount must show that file system once (before, each io server's
    // view of it was added up: N times the disk, and "used" = size - avail).
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let statfs_of = |p: &std::path::Path| {
        let path = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a zeroed statfs is valid; statfs fills it from a NUL-terminated path.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        assert_eq!(
            unsafe { libc::statfs(path.as_ptr(), &mut st) },
            0,
            "statfs {}",
            p.display()
        );
        st
    };
    let st = statfs_of(mount.path());
    let local = statfs_of(cluster.home());
    let servers = cluster.client().statfs().unwrap().servers.len();
    assert!(
        servers >= 2,
        "the test needs several io servers on one file system"
    );
    assert_eq!(
        st.f_bsize as u64, st.f_frsize as u64,
        "f_bsize and f_frsize differ"
    );
    let bytes = |blocks: u64, unit: i64| blocks * unit as u64;
    let shown = bytes(st.f_blocks, st.f_bsize);
    let disk = bytes(local.f_blocks, local.f_bsize);
    assert!(
        shown <= disk && disk - shown < st.f_bsize as u64,
        "f_blocks x f_bsize is {shown} bytes; the {servers} io servers share one file system of {disk}"
    );
    // Free and available (what df's Used and Avail come from), within what other
    // writers on this machine change between the two calls.
    let near = |a: u64, b: u64| a.abs_diff(b) < 64 << 20;
    let (free, avail) = (bytes(st.f_bfree, st.f_bsize), bytes(st.f_bavail, st.f_bsize));
    assert!(avail <= free, "f_bavail {avail} > f_bfree {free}");
    assert!(
        near(free, bytes(local.f_bfree, local.f_bsize)) && near(avail, bytes(local.f_bavail, local.f_bsize)),
        "free {free} / avail {avail} on the mount, {} / {} on the disk",
        bytes(local.f_bfree, local.f_bsize),
        bytes(local.f_bavail, local.f_bsize)
    );
}

#[test]
fn locks_work_between_processes_on_one_mount() {
    // Locks between processes of one mount (the manager keeps them; across mounts:
    // locks.rs): what ROMIO needs from ranks on one node.
    use std::os::fd::AsRawFd;
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let path = mount.join("locked");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .unwrap();
    let lock = |fd: i32, kind: i32| {
        // SAFETY: a zeroed flock is valid; fcntl reads it.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = kind as i16;
        fl.l_whence = libc::SEEK_SET as i16;
        fl.l_start = 0;
        fl.l_len = 100;
        // SAFETY: fd is open and fl valid.
        unsafe { libc::fcntl(fd, libc::F_SETLK, &fl) }
    };
    assert_eq!(lock(file.as_raw_fd(), libc::F_WRLCK), 0);
    // Another process must be refused the same range.
    // SAFETY: the child only calls async-signal-safe functions (open, fcntl, _exit).
    let child = unsafe { libc::fork() };
    if child == 0 {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid C string.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR) };
        let refused = fd >= 0 && lock(fd, libc::F_WRLCK) != 0;
        // SAFETY: ends the child without running the test harness's code.
        unsafe { libc::_exit(if refused { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    unsafe { libc::waitpid(child, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "a second process got the lock"
    );
    // As on NFS, flock(2) is a whole-file lock in the same space as fcntl's (the mount
    // cannot tell them apart): while this process holds its fcntl lock, another's flock
    // is refused (on a local file system the two kinds do not meet). Then, with the fcntl
    // lock dropped, flock(2) between processes, through the flock tool.
    let out = sh_output(mount.path(), "flock -n locked true");
    assert!(
        !out.status.success(),
        "flock -n got a file this process holds an fcntl lock on"
    );
    drop(file);
    let out = sh_output(mount.path(), "flock locked sh -c 'flock -n locked true'");
    assert!(!out.status.success(), "flock -n got a lock another process holds");
    sh(mount.path(), "flock locked true");
}

/// Unmounts (lazily) on drop, so that a failed assertion leaves no mount behind.
struct Unmount<'a>(&'a Path);

impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        if weft_fuse::is_weft_mount(self.0).unwrap_or(false) && weft_fuse::unmount(self.0, false).is_err() {
            let _ = weft_fuse::unmount(self.0, true);
        }
    }
}

/// A background mount given no --log logs to its default place ($XDG_STATE_HOME/weft/
/// mount-NAME.log here), says where when it mounts, and the log holds the error a read
/// met with an io server stopped, of which the reader only sees an errno. Before, a mount
/// without --log sent its messages to /dev/null.
#[test]
fn a_background_mount_logs_what_went_wrong_to_its_default_log() {
    let cluster = TestCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let mountpoint = dir.path().join("mnt");
    std::fs::create_dir(&mountpoint).unwrap();
    let state = dir.path().join("state");
    // Written by the native client: the mount has none of it cached.
    let data = vec![7u8; 1 << 20];
    let file = cluster
        .client()
        .create("/striped", &weft_client::CreateOptions::default())
        .unwrap();
    file.write_at(0, &data).unwrap();
    file.sync().unwrap();

    let out = cluster
        .command("weft")
        .arg("mount")
        .arg(&mountpoint)
        .env("XDG_STATE_HOME", &state)
        .output()
        .unwrap();
    let _unmount = Unmount(&mountpoint);
    assert!(out.status.success(), "weft mount: {out:?}");
    let name = mountpoint
        .to_str()
        .unwrap()
        .trim_start_matches('/')
        .replace('/', "-");
    let log = state.join("weft").join(format!("mount-{name}.log"));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!("messages go to {}", log.display())),
        "weft mount did not say where its log is: {said}"
    );
    // It serves (the file is not read here: nothing of it is cached in the mount).
    assert_eq!(
        std::fs::metadata(mountpoint.join("striped")).unwrap().len(),
        data.len() as u64
    );

    let stopped = cluster.addr(cluster.config().io_servers().last().unwrap().id);
    cluster.kill9(cluster.config().io_servers().last().unwrap().id);
    // The file is striped over every io server: its read needs the stopped one.
    let error =
        std::fs::read(mountpoint.join("striped")).expect_err("a read with an io server stopped succeeded");
    // The reader learns only an errno (EHOSTDOWN for a server not reached), not which.
    assert!(
        matches!(error.raw_os_error(), Some(libc::EHOSTDOWN | libc::EIO)),
        "{error}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains(&stopped) || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        text.contains("weft mount: mounting") && text.contains(&stopped),
        "the log {} does not name the stopped server {stopped}:\n{text}",
        log.display()
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&log).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "the log is its owner's only");
}

/// A log that cannot be written: `--log FILE` is refused before anything is mounted,
/// naming the file; the default one only gets a note, and the mount goes on without.
#[test]
fn a_log_that_cannot_be_written_is_refused_when_asked_for_and_noted_by_default() {
    let cluster = TestCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let mountpoint = dir.path().join("mnt");
    std::fs::create_dir(&mountpoint).unwrap();
    // A regular file where a directory would have to be.
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, b"").unwrap();
    let asked = blocker.join("mount.log");
    let out = cluster
        .command("weft")
        .arg("mount")
        .arg(&mountpoint)
        .arg("--log")
        .arg(&asked)
        .output()
        .unwrap();
    let _unmount = Unmount(&mountpoint);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "mounted with an unwritable --log: {said}");
    assert!(said.contains(&asked.display().to_string()), "{said}");
    assert!(!weft_fuse::is_weft_mount(&mountpoint).unwrap());

    let out = cluster
        .command("weft")
        .arg("mount")
        .arg(&mountpoint)
        .env("XDG_STATE_HOME", &blocker)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("cannot write the log") && said.contains("discarded"),
        "{said}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("its messages are discarded"));
    assert!(weft_fuse::is_weft_mount(&mountpoint).unwrap());
}
