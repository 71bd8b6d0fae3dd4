//! `libweft_posix.so`: unmodified POSIX programs at native-client speed on files in a
//! Weft mount. Preloaded (`LD_PRELOAD=libweft_posix.so PROGRAM`, or `weft run PROGRAM`),
//! it serves the data calls of a dynamically linked program on regular files of a Weft
//! mount (type `fuse.weft`) with the native client, straight to the io servers, and
//! leaves everything else to libc and the kernel.
//!
//! The design, each choice with its reason:
//! - Every open goes through the kernel, into the mount, and the program gets a real
//!   kernel descriptor: fork, exec, dup, `/proc/self/fd`, close-on-exec, select and
//!   descriptor passing keep working. A regular file whose `st_dev` is a Weft mount's is
//!   then opened natively too (by its inode number, which the mount shares with Weft),
//!   and the descriptor enters the library's table ([`table`]).
//! - O_PATH opens ([`upgrade`]): a file opened without O_CREAT, O_TRUNC or O_EXCL is
//!   opened by the kernel with O_PATH (a LOOKUP the kernel has usually cached, where a
//!   real FUSE open costs the daemon OPEN, FLUSH and RELEASE, about a millisecond a file
//!   here), the access the program asked for checked with faccessat2 (the mount uses
//!   default_permissions), and the library serves reads, writes, lseek, fstat, fsync,
//!   F_GETFL and F_SETFL on it, keeping the offset and the status flags itself. The
//!   moment the program does anything else with the descriptor (another fcntl command,
//!   locks, ioctl, fchmod, xattrs, poll/select/epoll, aio, passing it in a message,
//!   mmap and the other handovers, dup onto 0-2, fork, exec, spawn) the library sends
//!   what it buffered, opens the file for real through the mount (`/proc/self/fd/N`,
//!   the program's flags less O_CREAT/O_TRUNC/O_EXCL), sets the offset and dup3()s it
//!   over every descriptor of the description, each keeping its close-on-exec flag.
//!   Fork upgrades every O_PATH description (the child serves nothing), exec those an
//!   exec keeps (no close-on-exec), spawn all. Only with `WEFT_POSIX_PATH_OPEN=1` (off by default: io_uring, libaio and raw system calls would get EBADF).
//! - An O_PATH open is opened natively from the mount's `user.weft.handoff` (read
//!   through `/proc/self/fd/N`: the kernel checks read permission, the daemon checks the
//!   file as its open would and hands the attributes and a read capability): no request
//!   of the library's own to the manager or the io servers. Without it, files opened
//!   read-only below 1 MiB stay with the mount ([`served::READ_ADOPT_MIN`]): the mount
//!   reads them in one request, fewer round trips than a native open and read.
//! - On a real descriptor the file offset stays in the kernel: a served `read` takes it
//!   with `lseek`, reads from the io servers and moves it with `lseek` (system calls the
//!   FUSE mount answers without its daemon). So offsets are shared exactly as POSIX says
//!   between dup'd descriptors, a forked child and an exec'd program, with no copy to
//!   keep in step; on an O_PATH one the entry (one per open file description, shared by
//!   its dups) holds it until the upgrade hands it to the kernel.
//! - Small writes are buffered per open file description ([`behind`]: at most 4 MiB
//!   each, 64 MiB per process) and sent as list requests; the buffer is sent before
//!   anything that can observe the file (close, fsync, reads of the file, stat sizes,
//!   ftruncate, lseek SEEK_END, dup, fork, exec, spawn, fopen, handover, exit).
//!   Deferred errors show at the next fsync or close. So handing a descriptor back to
//!   the kernel ([`handover`]: mmap, sendfile, splice, copy_file_range, fdopen,
//!   preadv2/pwritev2) sends the buffer first and then loses and repeats nothing; the
//!   handover refreshes the mount's size of the file and drops its cached pages when
//!   the library wrote.
//! - Consistency with the mount is the mount's close-to-open: its next open of the file
//!   sees the io servers' change stamps moved by the library's writes and drops its
//!   cached pages; a `close` after writes asks the mount for the file's attributes
//!   afresh, so `stat` through the mount shows the new size at once.
//! - Sequential reads are read ahead ([`ahead`]): a window of up to 8 MiB per file
//!   description, dropped at any write, truncate or allocation by this process (so the
//!   process always reads its own writes); other clients' writes show from the next open,
//!   as the mount's page cache shows them (close-to-open).
//! - A forked child (without exec) leaves everything to the kernel: the native client's
//!   connections and threads belong to the parent. Its descriptors keep working, through
//!   the mount, with the offsets shared (the parent upgraded its O_PATH ones before).
//! - stdio (`fopen`, `fread`...) reaches the kernel through glibc's internal calls, which
//!   no preloaded library sees: stdio streams work through the mount.
//! - Names: paths are the mount's own; `weft:/path` names the same path in the first
//!   Weft mount of the process's cluster ([`names`]).
//! - Counters ([`stats`]): `WEFT_POSIX_STATS=FILE` appends one line per process at exit
//!   saying what the library served, so tests fail if interception silently stops.
//!
//! # Code map
//!
//! `libweft_posix.so` (`weft run PROGRAM`, or `LD_PRELOAD`): unmodified, dynamically
//! linked programs read and write regular files of a Weft mount with the native client
//! instead of through FUSE. `calls/` interposes the libc calls: `mod.rs` the open family
//! (with glibc's fortified names), read/write/pread/pwrite and the v variants, lseek,
//! fstat, fsync, ftruncate, fallocate, mmap, fdopen, sendfile, splice and
//! copy_file_range; `descriptors.rs` close and close_range, the dup family and fcntl;
//! `paths.rs` the stat family and the name calls for `weft:` names (`names.rs`:
//! rewritten to the path in the first served mount); `programs.rs` exec, spawn, system,
//! popen and vfork. Every open goes to the
//! kernel, into the mount: with O_PATH when it neither creates nor truncates
//! (`served::open_path`), else for real; `served.rs` then adopts the descriptor when it
//! is a regular file whose `st_dev` is a Weft mount's, opening the same inode natively
//! (mount inode numbers are Weft's), into `table.rs` (descriptor -> entry per open file
//! description, one atomic load for a descriptor not served). On a real descriptor the
//! offset stays in the kernel: a served read or write takes it with `lseek`, moves the
//! data natively and sets it with `lseek`, under the entry's lock, so dup, fork and exec
//! share it as POSIX says; on an O_PATH one the entry holds it. `upgrade.rs` turns an
//! O_PATH description into a real one (reopened through `/proc/self/fd/N`, dup3'd over
//! its descriptors) before anything the library does not serve: `unserved.rs`
//! interposes those calls (flock, lockf, ioctl, fchmod, fchown, xattrs, futimens,
//! fadvise, posix_fallocate, poll, select, epoll_ctl, aio, sendmsg with SCM_RIGHTS),
//! fcntl, handover, dup onto 0-2, fork, exec and spawn call it too. `ahead.rs` reads
//! sequential reads ahead in windows; `behind.rs` buffers small writes per open file
//! description (bounded) and `flush.rs` sends them as list requests before anything that
//! can observe the file. `handover.rs` gives a descriptor (with its dups) back to the
//! kernel when the program maps, splices or fdopens it, after sending its buffer.
//! `kernel.rs`: lseek and stat past the interposition, and the mount made to read a
//! file's attributes again. `raw.rs` routes
//! `syscall(2)` descriptor calls to the library's own functions. `guard.rs`: a
//! thread-local flag passes the library's own calls straight to libc, a forked child
//! (without exec) and a second copy of the library serve nothing (vfork is made a fork),
//! and `Quiet` blocks signals for the length of a served call. `stats.rs`: counters
//! appended to `$WEFT_POSIX_STATS` at exit. `lifecycle.rs` does the fork and exit work
//! (buffers sent, O_PATH descriptors upgraded, counters written), so that the low
//! modules (`guard`, `stats`, `ahead`, `behind`, `table`) call up to none of the others.
//! Tests (`tests/`) run coreutils, Python and
//! fsx with the library on a real mount against a local directory or the mount alone.

pub mod ahead;
pub mod behind;
pub mod calls;
pub mod flush;
pub mod guard;
pub mod handover;
pub mod kernel;
pub mod lifecycle;
pub mod names;
pub mod raw;
pub mod served;
pub mod stats;
pub mod table;
pub mod unserved;
pub mod upgrade;
