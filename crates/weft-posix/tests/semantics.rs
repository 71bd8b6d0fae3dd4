//! POSIX semantics with libweft_posix.so on a real mount, each against a local file
//! or the mount alone: Python reading, writing and seeking; fork, exec and dup sharing
//! offsets; appends from the library and the mount at once; fsx with the library
//! alternating with fsx through the mount on the same file.

#[path = "../../weft-fuse/tests/common/mod.rs"]
mod common;
mod preload;

use common::{sh, Mount};
use preload::{compile, sh_lib, totals};
use std::path::{Path, PathBuf};
use std::process::Command;
use weft_testkit::TestCluster;

/// Python's own I/O (os.read/os.write/os.lseek and buffered files, which call read and
/// write, not stdio): writes with holes, seeks from every end, rewrites, reads back and
/// prints what it saw.
const PYTHON_IO: &str = r#"
import os, sys, hashlib
name = sys.argv[1]
with open(name, "wb") as f:
    for i in range(200):
        f.write(bytes([i % 251]) * (i * 37 % 5000 + 1))
    f.seek(1 << 20)
    f.write(b"after a hole")
    f.seek(-5, os.SEEK_END)
    f.write(b"END!!tail")
with open(name, "r+b") as f:
    f.seek(4096)
    f.write(b"x" * 10000)
    f.seek(0, os.SEEK_END)
    end = f.tell()
    f.seek(100)
    head = f.read(50)
fd = os.open(name, os.O_RDONLY)
os.lseek(fd, 12345, os.SEEK_SET)
mid = os.read(fd, 777)
st = os.fstat(fd)
os.close(fd)
with open(name, "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()
# A process reads its own writes through another descriptor (the library's read-ahead
# window of `a` must not hide the write through `b`).
a = os.open(name, os.O_RDONLY)
b = os.open(name, os.O_WRONLY)
first = os.read(a, 100)
os.pwrite(b, b"Q" * 10, 50)
os.lseek(a, 0, os.SEEK_SET)
again = os.read(a, 100)
os.close(a); os.close(b)
print(end, head.hex(), hashlib.sha256(mid).hexdigest(), st.st_size, digest, first != again, again[45:65])
"#;

#[test]
fn python_reads_writes_and_seeks_as_on_a_local_file() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let scratch = mount.scratch().to_path_buf();
    let script = scratch.join("io.py");
    std::fs::write(&script, PYTHON_IO).unwrap();
    let local = sh(
        &scratch,
        &format!("python3 {} {}/local.dat", script.display(), scratch.display()),
    );
    let stats = scratch.join("stats");
    let with_lib = sh_lib(
        &scratch,
        &format!("python3 {} {}", script.display(), mount.join("py.dat").display()),
        &stats,
    );
    assert_eq!(local, with_lib, "Python saw other bytes through the library");
    assert_eq!(
        std::fs::read(scratch.join("local.dat")).unwrap(),
        std::fs::read(mount.join("py.dat")).unwrap(),
        "the mount shows other bytes than the library wrote"
    );
    let t = totals(&stats);
    assert!(t["writes"] >= 3 && t["reads"] >= 3 && t["opens"] >= 4, "{t:?}");
}

/// fork, exec and dup on one descriptor, offsets shared as POSIX says: the parent, a
/// dup of it, a forked child (which the library leaves to the kernel), a program exec'd
/// without the library, and dup2/F_DUPFD copies all write at the one shared offset.
const SHARING: &str = r#"
import os, sys
name = sys.argv[1]
fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"parent-1;")
d = os.dup(fd)
os.write(d, b"dup-1;")
pid = os.fork()
if pid == 0:
    os.write(fd, b"child-1;")
    os.lseek(fd, 0, os.SEEK_END)
    os.write(fd, b"child-2;")
    os._exit(0)
os.waitpid(pid, 0)
os.write(fd, b"parent-2;")
# A program exec'd without the library writes on the inherited descriptor.
env = dict(os.environ)
env.pop("LD_PRELOAD", None)
os.set_inheritable(fd, True)
pid = os.fork()
if pid == 0:
    os.dup2(fd, 7)
    os.execve("/bin/sh", ["sh", "-c", "printf 'exec-1;' >&7"], env)
os.waitpid(pid, 0)
os.write(d, b"dup-2;")
e = os.dup2(fd, 9)
os.write(9, b"dup2-1;")
import fcntl
f = fcntl.fcntl(fd, fcntl.F_DUPFD, 20)
os.write(f, b"dupfd-1;")
pos = os.lseek(fd, 0, os.SEEK_CUR)
os.lseek(f, 3, os.SEEK_SET)
r = os.read(d, 8)
os.close(fd); os.close(d); os.close(9); os.close(f)
with open(name, "rb") as h:
    data = h.read()
print(pos, r, data)
"#;

#[test]
fn fork_exec_and_dup_share_offsets_as_on_a_local_file() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let scratch = mount.scratch().to_path_buf();
    let script = scratch.join("share.py");
    std::fs::write(&script, SHARING).unwrap();
    let local = sh(
        &scratch,
        &format!("python3 {} {}/local.dat", script.display(), scratch.display()),
    );
    let stats = scratch.join("stats");
    let with_lib = sh_lib(
        &scratch,
        &format!(
            "python3 {} {}",
            script.display(),
            mount.join("share.dat").display()
        ),
        &stats,
    );
    assert_eq!(local, with_lib, "offsets shared differently through the library");
    assert_eq!(
        std::fs::read(scratch.join("local.dat")).unwrap(),
        std::fs::read(mount.join("share.dat")).unwrap()
    );
    let t = totals(&stats);
    assert!(
        t["writes"] >= 5,
        "the parent's writes were served natively: {t:?}"
    );
}

/// Appends from a process with the library and from one through the mount alone, at
/// once: every record arrives whole, none lost or doubled; then close-to-open both
/// ways (the mount's small writes, kept by its daemon until close, are seen by the
/// library after that close).
#[test]
fn appends_from_the_library_and_the_mount_at_once_lose_nothing() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let scratch = mount.scratch().to_path_buf();
    let dir = mount.join("ap");
    std::fs::create_dir(&dir).unwrap();
    let stats = scratch.join("stats");
    const N: usize = 300;
    let lib_side = format!(
        "python3 -c \"
import os
fd = os.open('log', os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
for i in range({N}):
    os.write(fd, b'lib %05d ................................\\n' % i)
os.close(fd)
\""
    );
    let mount_side = format!("i=0; while [ $i -lt {N} ]; do printf 'mnt %05d ................................\\n' $i >> log; i=$((i+1)); done");
    let dir2 = dir.clone();
    let plain = std::thread::spawn(move || sh(&dir2, &mount_side));
    sh_lib(&dir, &lib_side, &stats);
    plain.join().unwrap();
    let text = std::fs::read_to_string(dir.join("log")).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 * N, "records lost or torn");
    lines.sort_unstable();
    lines.dedup();
    assert_eq!(lines.len(), 2 * N, "records doubled");
    for l in &lines {
        assert_eq!(l.len(), 42, "a torn record: {l:?}");
    }
    let t = totals(&stats);
    assert!(
        t["writes"] >= N as u64,
        "the library's appends were served natively: {t:?}"
    );

    // Close-to-open from the mount to the library: a small write kept by the mount's
    // daemon until close, then read with the library.
    sh(&dir, "printf 'small' > c2o && printf 'er' >> c2o");
    let seen = sh_lib(&dir, "cat c2o", &stats);
    assert_eq!(seen, "smaller");
    // And back: the library overwrites, the mount reads after the close (its cached
    // pages of the file, read just above, must not show).
    sh(&dir, "cat c2o > /dev/null");
    sh_lib(&dir, "printf 'LARGER!' > c2o", &stats);
    assert_eq!(sh(&dir, "cat c2o; stat -c %s c2o"), "LARGER!7\n");
}

/// The `fsx` program (weft-fuse's cached_fsx test says how it is installed).
fn fsx() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")));
    dirs.extend(cargo_home.map(|c| c.join("bin")));
    dirs.into_iter()
        .map(|d| d.join("fsx"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("fsx not found on PATH or in cargo's bin directory: run scripts/install-deps.sh")
        })
}

/// fsx's reads, writes, mapped reads and writes (handed back to the mount), truncates,
/// holes, fallocate, fsync and reopening.
const FSX_CONFIG: &str = "\
flen = 262144
[weights]
read = 10
write = 10
mapread = 5
mapwrite = 5
truncate = 10
punch_hole = 2
posix_fallocate = 1
fsync = 1
fdatasync = 1
close_open = 3
invalidate = 1
";

/// fsx with the library, then fsx through the mount, alternating on the same file,
/// each checking every byte it reads against its own model.
#[test]
fn fsx_with_the_library_alternating_with_fsx_through_the_mount() {
    let fsx = fsx();
    let ops: u64 = std::env::var("WEFT_FSX_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("fsx.toml");
    std::fs::write(&config, FSX_CONFIG).unwrap();
    let stats = work.path().join("stats");
    let file = mount.join("fsx.dat");
    for (round, seed) in [3u64, 14, 15, 92].into_iter().enumerate() {
        let with_library = round % 2 == 0;
        let mut command = Command::new(&fsx);
        command.args(["-N", &ops.to_string(), "-S", &seed.to_string()]);
        command
            .arg("-f")
            .arg(&config)
            .arg("-P")
            .arg(work.path())
            .arg(&file);
        if with_library {
            command
                .env("LD_PRELOAD", preload::library())
                .env("WEFT_POSIX_STATS", &stats);
        }
        let out = command.output().expect("run fsx");
        assert!(
            out.status.success(),
            "fsx round {round} (seed {seed}, library: {with_library}) failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let t = totals(&stats);
    assert!(
        t["reads"] > 50 && t["writes"] > 50,
        "fsx's I/O was served natively: {t:?}"
    );
}

/// The cluster goes away under a served descriptor: reads and writes fail with the
/// errno the mount gives for the same file (no crash, no hang).
#[test]
fn a_cluster_gone_gives_the_mounts_errno_not_a_crash() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let scratch = mount.scratch().to_path_buf();
    std::fs::write(mount.join("big.dat"), common::pattern(5, 4 << 20)).unwrap();
    let script = scratch.join("gone.py");
    std::fs::write(
        &script,
        r#"
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
os.pread(fd, 4096, 2 << 20)
print("ready", flush=True)
sys.stdin.readline()
def errno_of(call):
    try:
        call()
        return 0
    except OSError as e:
        return e.errno
print(errno_of(lambda: os.pread(fd, 4096, 1 << 20)), errno_of(lambda: os.pwrite(fd, b"x" * 4096, 0)))
print("close", errno_of(lambda: os.close(fd)))
"#,
    )
    .unwrap();
    let run = |library: bool| {
        let mut command = Command::new("python3");
        command.arg(&script).arg(mount.join("big.dat"));
        if library {
            command.env("LD_PRELOAD", preload::library());
        }
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut with_lib = run(true);
    let mut plain = run(false);
    for child in [&mut with_lib, &mut plain] {
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "ready\n");
    }
    for id in 1..=4 {
        cluster.kill9(id);
    }
    let finish = |mut child: std::process::Child| {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let (lib_out, plain_out) = (finish(with_lib), finish(plain));
    eprintln!("library: {lib_out:?} mount: {plain_out:?}");
    // "READ WRITE\nclose CLOSE" errnos. The mount and the library both keep a small
    // write and report its failure at the write or at close (as NFS): never lost.
    let parse = |s: &str| -> Vec<i32> { s.split_whitespace().filter_map(|w| w.parse().ok()).collect() };
    let (lib, plain) = (parse(&lib_out), parse(&plain_out));
    assert_eq!(lib.len(), 3, "{lib_out}");
    assert_eq!(plain.len(), 3, "{plain_out}");
    assert!(
        lib[0] != 0 && lib[0] == plain[0],
        "reads: library {lib_out:?}, mount {plain_out:?}"
    );
    let mount_write = if plain[1] != 0 { plain[1] } else { plain[2] };
    let lib_write = if lib[1] != 0 { lib[1] } else { lib[2] };
    assert_ne!(
        mount_write, 0,
        "the mount reported the failed write: {plain_out:?}"
    );
    assert_eq!(
        lib_write, mount_write,
        "writes: library {lib_out:?}, mount {plain_out:?}"
    );
}

/// Reads and writes interrupted by a signal handler that writes and reads served files
/// itself (SIGALRM every 3 ms, no SA_RESTART): the data file and the program's checks
/// match a local run, and the handler's log holds one whole record per call. A served
/// call runs several steps (offset, data, offset) under the library's locks: a handler
/// entering the library between them must neither deadlock nor land between the steps.
#[test]
fn signal_handlers_interrupting_reads_and_writes_see_a_local_files_answers() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let scratch = mount.scratch().to_path_buf();
    let program = compile("cc", &scratch, "eintr", include_str!("c/eintr.c"), &[]);
    let expected = sh(&scratch, &format!("{} local.dat local.log", program.display()));
    let stats = scratch.join("stats");
    let got = sh_lib(
        &scratch,
        &format!(
            "timeout 120 {} {} {}",
            program.display(),
            mount.join("eintr.dat").display(),
            mount.join("eintr.log").display()
        ),
        &stats,
    );
    assert_eq!(expected, got, "interrupted I/O differs through the library");
    assert!(got.contains("log whole handler-ran yes"), "{got}");
    let t = totals(&stats);
    assert!(t["writes"] >= 1500, "the writes were served natively: {t:?}");
}

/// syscall(2) on descriptors the library serves (a program mixing libc calls and raw
/// system calls): each sees the other's data, offsets and sizes as on a local file, and
/// a descriptor closed by a raw close whose number an open reuses reads the new file.
#[test]
fn raw_system_calls_mixed_with_libc_calls_see_a_local_files_answers() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let scratch = mount.scratch().to_path_buf();
    let program = compile("cc", &scratch, "raw", include_str!("c/raw.c"), &[]);
    let local = scratch.join("local");
    std::fs::create_dir_all(&local).unwrap();
    let expected = sh(&scratch, &format!("{} {}", program.display(), local.display()));
    let stats = scratch.join("stats");
    let dir = mount.join("raw");
    std::fs::create_dir_all(&dir).unwrap();
    let got = sh_lib(
        &scratch,
        &format!("{} {}", program.display(), dir.display()),
        &stats,
    );
    assert_eq!(
        expected, got,
        "raw system calls saw other answers through the library"
    );
    for name in ["mixed", "big", "small", "rawopen"] {
        assert_eq!(
            std::fs::read(local.join(name)).unwrap(),
            std::fs::read(dir.join(name)).unwrap(),
            "{name} differs"
        );
    }
    let t = totals(&stats);
    assert!(t["writes"] >= 3, "the libc writes were served natively: {t:?}");
}

/// Writes the library keeps in its buffer are seen by other programs through the mount
/// after fsync (also an fsync through another descriptor of the file) and after close,
/// by a forked child (which reads through the kernel)
/// right after the fork, and by a program the process starts; the file matches a
/// local run's.
const BUFFERED: &str = r#"
import os, sys, subprocess
name = sys.argv[1]
plain = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
def cat():
    return subprocess.run(["cat", name], env=plain, capture_output=True, check=True).stdout
fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
# A reader forked before any write (the library is off in it): it opens the file afresh
# for each question, through the mount, with nothing sent on its behalf by a fork or
# spawn of the writer.
ask_r, ask_w = os.pipe()
say_r, say_w = os.pipe()
if os.fork() == 0:
    os.close(ask_w)
    os.close(say_r)
    while True:
        q = os.read(ask_r, 64)
        if not q:
            os._exit(0)
        at, n = map(int, q.split())
        h = os.open(name, os.O_RDONLY)
        os.write(say_w, os.pread(h, n, at) or b"-")
        os.close(h)
os.close(ask_r)
os.close(say_w)
def peek(at, n):
    os.write(ask_w, b"%d %d" % (at, n))
    return os.read(say_r, 65536)
for i in range(200):
    os.pwrite(fd, b"%04d" % i, (i * 37 % 200) * 4)
os.fsync(fd)
after_fsync = cat()
for i in range(100):
    os.write(fd, b"w%03d" % i)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    os.write(w, os.pread(fd, 1200, 0))
    os._exit(0)
os.close(w)
child = b""
while True:
    got = os.read(r, 65536)
    if not got:
        break
    child += got
os.waitpid(pid, 0)
os.pwrite(fd, b"spawned", 1300)
spawned = cat()
g = os.open(name, os.O_WRONLY)
os.pwrite(g, b"other", 1500)
os.fsync(fd)
via_other = peek(1500, 5)
os.close(g)
os.pwrite(fd, b"closed", 1400)
os.close(fd)
after_close = cat()
print(after_fsync.decode(), child.decode(), spawned[1300:].decode(), via_other.decode(), after_close[1400:].decode())
"#;

#[test]
fn buffered_writes_are_seen_after_fsync_close_fork_and_exec() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let scratch = mount.scratch().to_path_buf();
    let script = scratch.join("buffered.py");
    std::fs::write(&script, BUFFERED).unwrap();
    let local = sh(
        &scratch,
        &format!("python3 {} {}/local.dat", script.display(), scratch.display()),
    );
    let stats = scratch.join("stats");
    let with_lib = sh_lib(
        &scratch,
        &format!(
            "timeout 120 python3 {} {}",
            script.display(),
            mount.join("b.dat").display()
        ),
        &stats,
    );
    assert_eq!(
        local, with_lib,
        "buffered writes were not seen where a local file's are"
    );
    assert_eq!(
        std::fs::read(scratch.join("local.dat")).unwrap(),
        std::fs::read(mount.join("b.dat")).unwrap()
    );
    let t = totals(&stats);
    assert!(t["writes"] >= 300, "the writes were served natively: {t:?}");
}

/// Descriptors the library opens with O_PATH behave as real ones (tests/c/opath.c):
/// F_GETFL reports the program's flags, fstat and /proc/self/fd name the file, mmap
/// sees a write the library buffered, dup'd descriptors share their offset through an
/// upgrade, poll, select, flock, record locks and fchmod work, and a program exec'd
/// without the library reads and writes the inherited descriptors at their offsets.
/// A naive O_PATH library fails each (F_GETFL shows O_PATH, mmap/flock/select/fchmod/
/// fcntl locks give EBADF, poll POLLNVAL, the exec'd program's read and write EBADF).
#[test]
fn path_opened_descriptors_behave_as_real_ones_and_upgrade() {
    let cluster = TestCluster::start();
    let mount = Mount::new(&cluster);
    let scratch = mount.scratch().to_path_buf();
    let program = compile("cc", &scratch, "opath", include_str!("c/opath.c"), &[]);
    let local = scratch.join("local");
    std::fs::create_dir_all(&local).unwrap();
    let run = |dir: &Path| {
        let p = program.display();
        let d = dir.display();
        // The exec replaces the process: its half runs apart, so the first half's
        // counters are written at its exit.
        format!("WEFT_POSIX_PATH_OPEN=1 {p} {d} && WEFT_POSIX_PATH_OPEN=1 {p} exec {d}")
    };
    let expected = sh(&scratch, &run(&local));
    let stats = scratch.join("stats");
    let dir = mount.join("opath");
    std::fs::create_dir_all(&dir).unwrap();
    let got = sh_lib(&scratch, &run(&dir), &stats);
    assert_eq!(
        expected, got,
        "O_PATH descriptors answered otherwise than local ones"
    );
    assert!(got.contains("child wrote 5"), "{got}");
    for name in ["opath-a", "opath-b"] {
        assert_eq!(
            std::fs::read(local.join(name)).unwrap(),
            std::fs::read(dir.join(name)).unwrap(),
            "{name} differs"
        );
    }
    let t = totals(&stats);
    assert!(
        t["path_opens"] >= 6 && t["upgrades"] >= 5,
        "the descriptors were opened with O_PATH and upgraded: {t:?}"
    );
}
