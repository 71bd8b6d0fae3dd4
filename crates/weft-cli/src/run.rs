//! `weft run PROGRAM [ARGS...]`: runs an unmodified, dynamically linked program with
//! libweft_posix.so preloaded (crates/weft-posix), so that its reads and writes of
//! files in a Weft mount go to the io servers natively instead of through FUSE.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;

pub const LONG_ABOUT: &str = "\
Run PROGRAM with libweft_posix.so preloaded (LD_PRELOAD): its reads and writes of regular \
files inside a Weft mount (type fuse.weft) go straight to the io servers with the native \
client instead of through FUSE, while every descriptor stays a real one of the mount, so \
fork, exec, dup, select and programs started without the library keep working. Names, \
permissions, creation and locks are the mount's; `weft:/path` names the same path in the \
mount. Everything else goes to libc unchanged.

Use it for programs that move a lot of data through a mount with read/write/pread/pwrite \
(cp, dd, tar, sort, Python, your own programs). Not served natively: stdio streams \
(fopen/fread: they go through the mount), mmap and splice (the file is handed back to the \
mount), statically linked programs and system calls made without libc (nothing \
intercepted: they use the mount as usual); syscall(2) for read, write, close and the other \
descriptor calls is served like the libc calls.

Small writes are buffered (at most 4 MiB per open file, 64 MiB per process) and sent \
before anything that can see the file: close, fsync, a read of the file, stat, ftruncate, \
fork, exec, exit. Other programs see them after the writer's close or fsync (as through \
the mount); a failed buffered write is reported by the next fsync or close (as NFS); a \
process killed with SIGKILL loses what it buffered and had not closed or synced.

  weft mount /mnt/weft
  weft run cp big.dat /mnt/weft/
  weft run --stats /tmp/st python3 train.py /mnt/weft/data

The cluster is the mount's (its user.weft.cluster attribute), or WEFT_HOME's when set. \
The library is $WEFT_POSIX_LIB, else libweft_posix.so beside this executable, else in ../lib.";

/// Replaces this process with `program` under the library; returns only on failure.
pub fn run(program: &str, args: &[String], stats: Option<PathBuf>) -> anyhow::Result<()> {
    let lib = weft_interpose::find_library("WEFT_POSIX_LIB", "libweft_posix.so");
    if !lib.exists() {
        anyhow::bail!(
            "{} is missing: build it with `cargo build --release -p weft-posix` (or `make build`), \
             install Weft (`make install`), or name it with WEFT_POSIX_LIB",
            lib.display()
        );
    }
    // Programs already preloading something keep it, after the library.
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(old) if !old.trim().is_empty() => format!("{} {old}", lib.display()),
        _ => lib.display().to_string(),
    };
    let mut command = std::process::Command::new(program);
    command.args(args).env("LD_PRELOAD", preload);
    if let Some(stats) = stats {
        command.env("WEFT_POSIX_STATS", stats);
    }
    let err = command.exec();
    anyhow::bail!("cannot run {program}: {err}")
}
