//! POSIX semantics through the mount, each case run on a local directory and on the mount
//! in the same test and compared: hard links, FIFOs, device nodes and sockets, extended
//! attributes, setuid/setgid clearing, ftruncate on a handle, EFBIG, names that are not
//! UTF-8, st_blocks of sparse files, fallocate, open unlinked files, the mount's type.
//! The test runs as root (as in CI) and acts as `nobody` with setpriv.

mod common;

use common::{sh, Mount};
use std::ffi::{CString, OsStr};
use std::fmt::Debug;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use weft_testkit::{ClusterOptions, TestCluster};

/// A local directory and a directory in the mount, for running one case on both.
struct Both {
    local: tempfile::TempDir,
    mount: Mount,
    _cluster: TestCluster,
}

impl Both {
    fn new() -> Both {
        // SAFETY: no preconditions.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "these tests run as root (as in CI)"
        );
        // nobody acts through root's mount as itself: the cluster trusts the mount's
        // claims.
        let cluster = TestCluster::start_with(&ClusterOptions::claimed_identity());
        let mount = Mount::new(&cluster);
        let local = tempfile::Builder::new()
            .prefix("weft-posix-local-")
            .tempdir()
            .unwrap();
        // nobody must reach both.
        std::fs::set_permissions(local.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::set_permissions(mount.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        Both {
            local,
            mount,
            _cluster: cluster,
        }
    }

    /// Runs `case` in each directory; the outcomes must be equal.
    #[track_caller]
    fn same<T: PartialEq + Debug>(&self, what: &str, case: impl Fn(&Path) -> T) {
        let local = case(self.local.path());
        let weft = case(self.mount.path());
        assert_eq!(
            weft, local,
            "{what}: the mount (left) differs from a local directory (right)"
        );
    }
}

/// An outcome that compares errno rather than message.
fn errno<T>(r: std::io::Result<T>) -> Result<T, i32> {
    r.map_err(|e| e.raw_os_error().unwrap_or(-1))
}

fn c(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

/// Runs `script` with sh in `dir` as user and group nobody (no supplementary groups).
fn as_nobody(dir: &Path, script: &str) -> Output {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn nlink(path: &Path) -> u64 {
    std::fs::symlink_metadata(path).unwrap().nlink()
}

#[test]
fn hard_links_count_names_and_behave_as_on_a_local_file_system() {
    let both = Both::new();
    both.same("links", |d| {
        std::fs::write(d.join("f"), b"shared bytes").unwrap();
        let mut out = Vec::new();
        out.push(format!(
            "{:?}",
            errno(std::fs::hard_link(d.join("f"), d.join("g")))
        ));
        let (f, g) = (
            std::fs::metadata(d.join("f")).unwrap(),
            std::fs::metadata(d.join("g")).unwrap(),
        );
        out.push(format!(
            "same inode {} nlink {} {}",
            f.ino() == g.ino(),
            f.nlink(),
            g.nlink()
        ));
        // Writing through one name is reading through the other.
        std::fs::OpenOptions::new()
            .write(true)
            .open(d.join("g"))
            .unwrap()
            .write_all_at(b"SHARED", 0)
            .unwrap();
        out.push(String::from_utf8(std::fs::read(d.join("f")).unwrap()).unwrap());
        std::fs::create_dir(d.join("sub")).unwrap();
        out.push(format!(
            "{:?}",
            errno(std::fs::hard_link(d.join("f"), d.join("sub/h")))
        ));
        out.push(format!("nlink after 3 names {}", nlink(&d.join("f"))));
        // Errors: onto an existing name, of a missing file, of a directory.
        out.push(format!(
            "{:?}",
            errno(std::fs::hard_link(d.join("f"), d.join("g")))
        ));
        out.push(format!(
            "{:?}",
            errno(std::fs::hard_link(d.join("nope"), d.join("x")))
        ));
        out.push(format!(
            "{:?}",
            errno(std::fs::hard_link(d.join("sub"), d.join("subdir-link")))
        ));
        // Renaming one name over another of the same inode does nothing.
        out.push(format!("{:?}", errno(std::fs::rename(d.join("f"), d.join("g")))));
        out.push(format!(
            "f exists {} nlink {}",
            d.join("f").exists(),
            nlink(&d.join("g"))
        ));
        // Unlinking names one by one; the data lives until the last.
        std::fs::remove_file(d.join("f")).unwrap();
        out.push(format!("nlink {}", nlink(&d.join("g"))));
        // Replacing a name by rename drops that name only.
        std::fs::write(d.join("other"), b"other").unwrap();
        std::fs::rename(d.join("other"), d.join("g")).unwrap();
        out.push(format!(
            "sub/h nlink {} {:?}",
            nlink(&d.join("sub/h")),
            std::fs::read(d.join("sub/h")).unwrap()
        ));
        std::fs::remove_file(d.join("sub/h")).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        out.push(names.join(","));
        // A directory's link count: 2 plus its subdirectories.
        std::fs::create_dir_all(d.join("sub/a")).unwrap();
        std::fs::create_dir_all(d.join("sub/b")).unwrap();
        out.push(format!("dir nlink {}", nlink(&d.join("sub"))));
        out
    });
}

#[test]
fn fifos_devices_and_sockets_are_namespace_objects() {
    let both = Both::new();
    both.same("special files", |d| {
        let mut out = Vec::new();
        let mk = |name: &str, mode: u32, dev: libc::dev_t| {
            // SAFETY: a valid path.
            let rc = unsafe { libc::mknod(c(&d.join(name)).as_ptr(), mode, dev) };
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error().raw_os_error().unwrap())
            }
        };
        out.push(format!("{:?}", mk("fifo", libc::S_IFIFO | 0o640, 0)));
        out.push(format!(
            "{:?}",
            mk("chr", libc::S_IFCHR | 0o600, libc::makedev(1, 3))
        ));
        out.push(format!(
            "{:?}",
            mk("blk", libc::S_IFBLK | 0o600, libc::makedev(7, 0))
        ));
        out.push(format!("{:?}", mk("reg", libc::S_IFREG | 0o644, 0)));
        out.push(format!("{:?}", mk("fifo", libc::S_IFIFO | 0o640, 0)));
        let socket = std::os::unix::net::UnixListener::bind(d.join("sock")).unwrap();
        for name in ["fifo", "chr", "blk", "reg", "sock"] {
            let m = std::fs::symlink_metadata(d.join(name)).unwrap();
            let t = m.file_type();
            out.push(format!(
                "{name}: fifo {} chr {} blk {} file {} socket {} mode {:o} rdev {:x} size {} nlink {}",
                t.is_fifo(),
                t.is_char_device(),
                t.is_block_device(),
                t.is_file(),
                t.is_socket(),
                m.mode() & 0o7777,
                m.rdev(),
                m.len(),
                m.nlink()
            ));
        }
        // The FIFO works between two processes, through the kernel (not Weft).
        let fifo = d.join("fifo");
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            std::fs::File::open(fifo).unwrap().read_to_string(&mut s).unwrap();
            s
        });
        std::fs::OpenOptions::new()
            .write(true)
            .open(d.join("fifo"))
            .unwrap()
            .write_all(b"through the pipe")
            .unwrap();
        out.push(reader.join().unwrap());
        // The socket accepts a connection.
        let client = std::os::unix::net::UnixStream::connect(d.join("sock"));
        out.push(format!("connect {}", client.is_ok() && socket.accept().is_ok()));
        // Special files link, rename and go like any name.
        std::fs::hard_link(d.join("fifo"), d.join("fifo2")).unwrap();
        out.push(format!("fifo nlink {}", nlink(&d.join("fifo"))));
        std::fs::rename(d.join("chr"), d.join("chr2")).unwrap();
        for name in ["fifo", "fifo2", "chr2", "blk", "sock"] {
            std::fs::remove_file(d.join(name)).unwrap();
        }
        out.push(format!("left {}", std::fs::read_dir(d).unwrap().count()));
        // nobody may make FIFOs but not devices.
        let fifo = as_nobody(d, "mkfifo nobodys && stat -c %U nobodys");
        out.push(format!(
            "{} {}",
            fifo.status.success(),
            String::from_utf8_lossy(&fifo.stdout).trim()
        ));
        let dev = as_nobody(d, "mknod nobodys-null c 1 3");
        out.push(format!("{}", dev.status.success()));
        out
    });
}

fn setxattr(path: &Path, name: &str, value: &[u8], flags: i32) -> Result<(), i32> {
    let name = CString::new(name).unwrap();
    // SAFETY: valid strings and buffer.
    let rc = unsafe {
        libc::lsetxattr(
            c(path).as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    }
}

/// A new file `name` in `d`, mode 0666 (for nobody to write too).
fn writable_by_all(d: &Path, name: &str) -> std::path::PathBuf {
    let f = d.join(name);
    std::fs::write(&f, b"x").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
    f
}

/// The steps every namespace answers alike, as outcomes: set `PREFIXcolour`, read it
/// and a missing one, create it again (EEXIST), replace a missing one (ENODATA) and
/// replace it.
fn set_get_create_replace(f: &Path, prefix: &str) -> Vec<String> {
    let name = |n: &str| format!("{prefix}{n}");
    vec![
        format!("{:?}", setxattr(f, &name("colour"), b"blue", 0)),
        format!("{:?}", getxattr(f, &name("colour"))),
        format!("{:?}", getxattr(f, &name("missing"))),
        format!("{:?}", setxattr(f, &name("colour"), b"red", libc::XATTR_CREATE)),
        format!("{:?}", setxattr(f, &name("new"), b"v", libc::XATTR_REPLACE)),
        format!(
            "{:?}",
            setxattr(f, &name("colour"), b"green", libc::XATTR_REPLACE)
        ),
        format!("{:?}", getxattr(f, &name("colour"))),
    ]
}

fn removexattr(path: &Path, name: &str) -> Result<(), i32> {
    let name = CString::new(name).unwrap();
    // SAFETY: valid strings.
    if unsafe { libc::lremovexattr(c(path).as_ptr(), name.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    }
}

fn getxattr(path: &Path, name: &str) -> Result<Vec<u8>, i32> {
    let name = CString::new(name).unwrap();
    let path = c(path);
    // SAFETY: NUL-terminated strings and the buffer xattr_value passes with its length.
    common::xattr_value(|buf, len| unsafe { libc::lgetxattr(path.as_ptr(), name.as_ptr(), buf, len) })
}

fn listxattr(path: &Path) -> Result<Vec<String>, i32> {
    let mut buf = vec![0u8; 1 << 16];
    // SAFETY: valid string and buffer.
    let n = unsafe { libc::llistxattr(c(path).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    let mut names: Vec<String> = buf[..n as usize]
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        // The local file system may carry its own (security.selinux and the like), and
        // the mount shows each file's layout as user.weft.layout.
        // (security.* names only the tests' own, security.test-*).
        .filter(|n| {
            (n.starts_with(b"user.") || n.starts_with(b"trusted.") || n.starts_with(b"security.test-"))
                && !n.starts_with(b"user.weft.")
        })
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    names.sort();
    Ok(names)
}

#[test]
fn user_and_trusted_extended_attributes_with_their_rules_and_limits() {
    let both = Both::new();
    both.same("xattrs", |d| {
        let f = writable_by_all(d, "f");
        let mut out: Vec<String> = Vec::new();
        out.extend(set_get_create_replace(&f, "user."));
        out.push(format!("{:?}", setxattr(&f, "user.binary", &[0, 255, 10, 0], 0)));
        out.push(format!("{:?}", getxattr(&f, "user.binary")));
        out.push(format!("{:?}", setxattr(&f, "trusted.secret", b"root only", 0)));
        out.push(format!("{:?}", listxattr(&f)));
        // Limits: a value past 64 KiB, a name past 255 bytes, an empty value.
        out.push(format!("{:?}", setxattr(&f, "user.big", &vec![7u8; 65_537], 0)));
        out.push(format!(
            "{:?}",
            setxattr(&f, &format!("user.{}", "n".repeat(251)), b"v", 0)
        ));
        out.push(format!("{:?}", setxattr(&f, "user.empty", b"", 0)));
        out.push(format!("{:?}", getxattr(&f, "user.empty")));
        // Not in user.* on a symlink (Linux's rule for user attributes).
        std::os::unix::fs::symlink("f", d.join("l")).unwrap();
        out.push(format!("{:?}", setxattr(&d.join("l"), "user.x", b"v", 0)));
        // Directories have them too.
        std::fs::create_dir(d.join("dir")).unwrap();
        out.push(format!("{:?}", setxattr(&d.join("dir"), "user.d", b"dv", 0)));
        out.push(format!("{:?}", getxattr(&d.join("dir"), "user.d")));
        // Removal.
        let rm = |name: &str| removexattr(&f, name);
        out.push(format!("{:?}", rm("user.binary")));
        out.push(format!("{:?}", rm("user.binary")));
        out.push(format!("{:?}", listxattr(&f)));
        // nobody: may read and change user.* of a file it may write, and neither sees nor
        // touches trusted.*.
        let seen = as_nobody(
            d,
            "getfattr --absolute-names -n user.colour --only-values f; echo; \
             setfattr -n user.by-nobody -v yes f && echo set; \
             getfattr --absolute-names -n trusted.secret f 2>&1 | grep -c 'No such attribute'; \
             setfattr -n trusted.mine -v v f 2>&1 | grep -c 'not permitted'",
        );
        out.push(String::from_utf8_lossy(&seen.stdout).into_owned());
        out.push(format!("{:?}", listxattr(&f)));
        out
    });
    // Linux takes values up to 64 KiB (XATTR_SIZE_MAX); ext4 only what fits its block,
    // so this is checked on the mount alone.
    let f = both.mount.join("f");
    setxattr(&f, "user.largest", &vec![7u8; 65_536], 0).unwrap();
    assert_eq!(getxattr(&f, "user.largest").unwrap(), vec![7u8; 65_536]);
    // The layout attribute is listed (and not stored as a user attribute).
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid string and buffer.
    let n = unsafe { libc::llistxattr(c(&f).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(buf[..n as usize]
        .split(|b| *b == 0)
        .any(|n| n == b"user.weft.layout"));
}

/// `security.*` attributes were refused with EOPNOTSUPP, so `cp -a` and `tar --xattrs`
/// of files carrying them (SELinux labels, on a system without SELinux too) failed or
/// lost them. As ext4 without a security module: root sets and removes them, anyone
/// reads and lists them, symbolic links have them, the limits are the others'.
#[test]
fn security_extended_attributes_as_ext4_has_them() {
    let both = Both::new();
    both.same("security xattrs", |d| {
        let f = writable_by_all(d, "f");
        let mut out: Vec<String> = Vec::new();
        out.extend(set_get_create_replace(&f, "security.test-"));
        out.push(format!(
            "{:?}",
            setxattr(&f, "security.test-big", &vec![7u8; 65_537], 0)
        ));
        out.push(format!("{:?}", setxattr(&f, "security.test-other", b"", 0)));
        out.push(format!("{:?}", listxattr(&f)));
        // A symbolic link's own, and a directory's.
        std::os::unix::fs::symlink("f", d.join("l")).unwrap();
        out.push(format!(
            "{:?}",
            setxattr(&d.join("l"), "security.test-link", b"lv", 0)
        ));
        out.push(format!("{:?}", getxattr(&d.join("l"), "security.test-link")));
        std::fs::create_dir(d.join("dir")).unwrap();
        out.push(format!(
            "{:?}",
            setxattr(&d.join("dir"), "security.test-dir", b"dv", 0)
        ));
        out.push(format!("{:?}", getxattr(&d.join("dir"), "security.test-dir")));
        // cp -a carries them along.
        let copied = Command::new("cp")
            .args(["-a", "f", "copy"])
            .current_dir(d)
            .output()
            .unwrap();
        out.push(format!(
            "{} {}",
            copied.status,
            String::from_utf8_lossy(&copied.stderr)
        ));
        out.push(format!("{:?}", listxattr(&d.join("copy"))));
        out.push(format!("{:?}", getxattr(&d.join("copy"), "security.test-colour")));
        // nobody reads and lists them but may neither set nor remove one.
        let seen = as_nobody(
            d,
            "getfattr --absolute-names -n security.test-colour --only-values f; echo; \
             getfattr --absolute-names -d -m '^security[.]test-' f | grep -c test-; \
             setfattr -n security.test-nobody -v v f 2>&1 | grep -c 'not permitted'; \
             setfattr -x security.test-colour f 2>&1 | grep -c 'not permitted'",
        );
        out.push(String::from_utf8_lossy(&seen.stdout).into_owned());
        // Removal, as root.
        let rm = |name: &str| removexattr(&f, name);
        out.push(format!("{:?}", rm("security.test-colour")));
        out.push(format!("{:?}", rm("security.test-colour")));
        out.push(format!("{:?}", listxattr(&f)));
        out
    });
    // File capabilities are not stored (a write by another user would have to drop
    // them): refused on the mount alone, where ext4 takes them. A well-formed value
    // (version 2, CAP_NET_RAW permitted), for the kernel checks it before the mount
    // hears of it.
    let caps: [u8; 20] = [0, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let f = both.mount.join("f");
    assert_eq!(
        setxattr(&f, "security.capability", &caps, 0),
        Err(libc::EOPNOTSUPP)
    );
    setxattr(&both.local.path().join("f"), "security.capability", &caps, 0).unwrap();
}

#[test]
fn writes_and_chown_drop_setuid_and_setgid_as_linux_does() {
    let both = Both::new();
    both.same("privileges", |d| {
        let mut out = Vec::new();
        for (name, mode) in [
            ("suid", 0o4777),
            ("sgid-x", 0o2777),
            ("sgid-nox", 0o2767),
            ("both", 0o6777),
        ] {
            let p = d.join(name);
            std::fs::write(&p, b"data").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            // A write by someone else (nobody writes: the mode lets everyone).
            let w = as_nobody(d, &format!("printf more >> {name}"));
            let m = std::fs::metadata(&p).unwrap().mode() & 0o7777;
            out.push(format!(
                "{name}: write by nobody {} -> {:o}",
                w.status.success(),
                m
            ));
        }
        // Root's write keeps them (CAP_FSETID).
        let p = d.join("roots");
        std::fs::write(&p, b"data").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o6755)).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(b"x")
            .unwrap();
        out.push(format!(
            "root write -> {:o}",
            std::fs::metadata(&p).unwrap().mode() & 0o7777
        ));
        // chown drops setuid (and group-executable setgid), even by root.
        sh(d, "chown 65534:65534 roots");
        out.push(format!(
            "chown -> {:o}",
            std::fs::metadata(&p).unwrap().mode() & 0o7777
        ));
        // Truncate by nobody (an owner: chown made it nobody's) drops them too.
        sh(d, "chmod 06777 roots");
        let t = as_nobody(d, "truncate -s 1 roots");
        out.push(format!(
            "truncate by nobody {} -> {:o}",
            t.status.success(),
            std::fs::metadata(&p).unwrap().mode() & 0o7777
        ));
        // A non-owner may not chmod, even to clear the bits.
        sh(d, "chown 0:0 roots && chmod 04777 roots");
        let c = as_nobody(d, "chmod 0777 roots");
        out.push(format!("chmod by nobody {}", c.status.success()));
        out
    });
}

#[test]
fn ftruncate_and_fchmod_go_by_the_open_descriptor() {
    let both = Both::new();
    both.same("handles", |d| {
        // nobody opens its file for writing, makes it read-only, then truncates and
        // writes through the descriptor it holds: allowed, as the descriptor was
        // opened for writing. A new open for writing is refused.
        let script = r#"
            open(my $f, "+>", "mine") or die "open: $!";
            print $f "0123456789"; $f->flush;
            chmod(0444, "mine") or die "chmod: $!";
            truncate($f, 4) or die "ftruncate: $!";
            print "size ", (stat($f))[7], "\n";
            print "reopen ", (open(my $g, ">>", "mine") ? "ok" : "refused: $!"), "\n";
            chmod(0600, $f) or die "fchmod: $!";
            printf "mode %o\n", (stat($f))[2] & 07777;
        "#;
        let out = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "perl",
                "-e",
                script,
            ])
            .current_dir(d)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            std::fs::read(d.join("mine")).unwrap(),
        )
    });
}

#[test]
fn sizes_past_the_largest_file_are_efbig() {
    let both = Both::new();
    both.same("EFBIG", |d| {
        let f = std::fs::File::create(d.join("f")).unwrap();
        let huge = (1u64 << 62) + 1;
        let truncated = errno(f.set_len(huge));
        let written = errno(f.write_at(b"x", huge));
        (truncated, written, std::fs::metadata(d.join("f")).unwrap().len())
    });
}

#[test]
fn names_are_bytes_not_necessarily_utf8() {
    let both = Both::new();
    both.same("byte names", |d| {
        let latin1 = OsStr::from_bytes(b"caf\xe9");
        let odd = OsStr::from_bytes(b"\x01tab\tnewline\n\xff\xfe");
        std::fs::write(d.join(latin1), b"latin-1").unwrap();
        std::fs::create_dir(d.join(odd)).unwrap();
        std::fs::write(d.join(odd).join(latin1), b"inside").unwrap();
        std::fs::rename(d.join(latin1), d.join(OsStr::from_bytes(b"\xe9t\xe9"))).unwrap();
        let mut names: Vec<Vec<u8>> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().as_bytes().to_vec())
            .collect();
        names.sort();
        let inside = std::fs::read(d.join(odd).join(latin1)).unwrap();
        std::os::unix::fs::symlink(OsStr::from_bytes(b"\xe9t\xe9"), d.join("to-bytes")).unwrap();
        let target = std::fs::read_link(d.join("to-bytes")).unwrap();
        let through = std::fs::read(d.join("to-bytes")).unwrap();
        (names, inside, target.as_os_str().as_bytes().to_vec(), through)
    });
}

#[test]
fn blocks_are_the_real_allocation_and_fallocate_allocates() {
    let both = Both::new();
    both.same("st_blocks and fallocate", |d| {
        let mut out = Vec::new();
        // Sparse: one byte 10 MiB in.
        let f = std::fs::File::create(d.join("sparse")).unwrap();
        f.write_at(b"x", 10 << 20).unwrap();
        drop(f);
        let m = std::fs::metadata(d.join("sparse")).unwrap();
        out.push(format!(
            "sparse size {} blocks small {}",
            m.len(),
            m.blocks() <= 16
        ));
        // Dense: 1 MiB.
        std::fs::write(d.join("dense"), vec![1u8; 1 << 20]).unwrap();
        let m = std::fs::metadata(d.join("dense")).unwrap();
        out.push(format!("dense blocks at least the data {}", m.blocks() >= 2048));
        // fallocate, mode 0: the file grows and is allocated.
        let a = sh(d, "fallocate -l 2M alloc && stat -c '%s' alloc");
        let blocks = std::fs::metadata(d.join("alloc")).unwrap().blocks();
        out.push(format!(
            "fallocate size {} allocated {}",
            a.trim(),
            blocks >= 4096
        ));
        // Keep size: allocated, not grown.
        sh(d, "fallocate -n -o 2M -l 1M alloc");
        let m = std::fs::metadata(d.join("alloc")).unwrap();
        out.push(format!(
            "keep size {} more blocks {}",
            m.len(),
            m.blocks() >= 6144
        ));
        // Punch a hole: zeros, fewer blocks.
        std::fs::write(d.join("punch"), vec![9u8; 1 << 20]).unwrap();
        sh(d, "fallocate -p -o 0 -l 512K punch");
        let data = std::fs::read(d.join("punch")).unwrap();
        let m = std::fs::metadata(d.join("punch")).unwrap();
        out.push(format!(
            "punched zeros {} rest kept {} size {} blocks freed {}",
            data[..512 << 10].iter().all(|b| *b == 0),
            data[512 << 10..].iter().all(|b| *b == 9),
            m.len(),
            m.blocks() < 2048
        ));
        out
    });
}

/// fallocate's FALLOC_FL_ZERO_RANGE (`fallocate -z`), with and without KEEP_SIZE, as
/// on the local file system: the range reads as zeros and the rest is kept; without
/// KEEP_SIZE a range past the end grows the file, with it the size stays. The mount
/// answered EOPNOTSUPP (fsstress's zero operation), where ext4 and xfs zero.
#[test]
fn fallocate_zero_range_zeroes_and_grows_as_locally() {
    let both = Both::new();
    both.same("zero range", |d| {
        std::fs::write(d.join("z"), vec![9u8; 1 << 20]).unwrap();
        sh(
            d,
            "fallocate -z -o 100000 -l 300000 z && fallocate -z -o 900000 -l 500000 z \
             && fallocate -z -n -o 1500000 -l 100000 z",
        );
        let data = std::fs::read(d.join("z")).unwrap();
        // Runs of equal bytes: (byte, length).
        let mut runs: Vec<(u8, usize)> = Vec::new();
        for b in &data {
            match runs.last_mut() {
                Some((last, n)) if last == b => *n += 1,
                _ => runs.push((*b, 1)),
            }
        }
        vec![format!("size {} runs {runs:?}", data.len())]
    });
}

/// rename(2) with RENAME_EXCHANGE, as on the local file system: two files, a file and
/// a directory in different directories (whose link counts follow the directory), a
/// missing name (ENOENT), a directory into its own subtree (EINVAL). The mount
/// answered every exchange EINVAL (fsstress's rexchange operation).
#[test]
fn rename_exchange_swaps_two_names_as_locally() {
    let both = Both::new();
    both.same("rename exchange", |d| {
        let exchange = |a: &str, b: &str| {
            let (a, b) = (
                CString::new(d.join(a).as_os_str().as_bytes()).unwrap(),
                CString::new(d.join(b).as_os_str().as_bytes()).unwrap(),
            );
            // SAFETY: valid NUL-terminated paths.
            let rc = unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    a.as_ptr(),
                    libc::AT_FDCWD,
                    b.as_ptr(),
                    libc::RENAME_EXCHANGE,
                )
            };
            if rc == 0 {
                "ok".to_string()
            } else {
                std::io::Error::last_os_error().to_string()
            }
        };
        sh(
            d,
            "mkdir -p x/sub y && echo one > x/f1 && echo two > y/f2 && echo in > x/sub/inner",
        );
        let mut out = vec![exchange("x/f1", "y/f2")];
        out.push(exchange("y/f2", "x/sub"));
        out.push(exchange("x/none", "y/f2"));
        out.push(exchange("y", "y/f2/inner"));
        let nlink = |p: &str| std::fs::metadata(d.join(p)).unwrap().nlink();
        out.push(format!(
            "x/f1 {:?} y/f2 is dir {} x/sub {:?} inner {:?} nlink x {} y {}",
            std::fs::read_to_string(d.join("x/f1")).unwrap(),
            d.join("y/f2").is_dir(),
            std::fs::read_to_string(d.join("x/sub")).unwrap(),
            std::fs::read_to_string(d.join("y/f2/inner")).unwrap(),
            nlink("x"),
            nlink("y")
        ));
        out
    });
}

#[test]
fn an_open_unlinked_file_has_no_name_and_no_links_until_closed() {
    let both = Both::new();
    both.same("open unlinked", |d| {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(d.join("tmp"))
            .unwrap();
        f.write_all(b"before").unwrap();
        std::fs::remove_file(d.join("tmp")).unwrap();
        let names = std::fs::read_dir(d).unwrap().count();
        let m = f.metadata().unwrap();
        f.write_all(b" after").unwrap();
        let mut back = vec![0u8; 12];
        f.read_exact_at(&mut back, 0).unwrap();
        // A replaced target stays open too.
        std::fs::write(d.join("target"), b"old").unwrap();
        let old = std::fs::File::open(d.join("target")).unwrap();
        std::fs::write(d.join("new"), b"new").unwrap();
        std::fs::rename(d.join("new"), d.join("target")).unwrap();
        let mut s = String::new();
        (&old).read_to_string(&mut s).unwrap();
        let old_links = old.metadata().unwrap().nlink();
        drop(f);
        drop(old);
        (
            names,
            m.nlink(),
            m.len(),
            back,
            s,
            old_links,
            std::fs::read_dir(d).unwrap().count(),
        )
    });
}

#[test]
fn the_mount_is_of_type_fuse_weft() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let entry = weft_fuse::mount_entry(mount.path()).unwrap().unwrap();
    assert_eq!(entry.fs_type, "fuse.weft");
    let df = sh(mount.path(), "df --output=fstype . | tail -n 1");
    assert_eq!(df.trim(), "fuse.weft");
}
