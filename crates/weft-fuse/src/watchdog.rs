//! Calls through the mount stay interruptible: a process waiting in a call that takes
//! long (an io server that stopped answering holds it until the client's timeout) is
//! answered `EINTR` as soon as it has a signal to take or was killed, as a local file
//! system's waiter would be.
//!
//! The kernel cannot tell the daemon: fuser answers `FUSE_INTERRUPT` with `ENOSYS`,
//! after which the kernel keeps the caller, signals and all (even a fatal one: the
//! process cannot die), until the daemon answers. So each call's reply is registered
//! here with the caller's thread id; a watchdog thread looks at calls older than
//! `LOOK_AFTER`, every `LOOK_EVERY`, in `/proc/TID/status` (`locks::waiter_interrupted`:
//! SIGKILL pending, or a caught, unblocked signal pending), and answers those `EINTR`.
//! The call goes on in its worker until the server answers or the client's timeout
//! ends it; what it then answers goes nowhere. Like NFS's `intr`, an interrupted
//! change may still happen after `EINTR` (a create, a write), as a local call's signal
//! can come after the change.
//!
//! `Watched<R>` has the answering methods of the fuser reply `R` it holds, so a call's
//! code is unchanged but for wrapping its reply; release, forget and the lock calls
//! (which watch for signals themselves, `locks`) are not watched.

use crate::locks;
use fuser::{
    Errno, FileAttr, FileType, FopenFlags, Generation, INodeNo, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Calls younger than this are not looked at (most end well within it).
pub const LOOK_AFTER: Duration = Duration::from_millis(100);
/// How often the watchdog looks.
pub const LOOK_EVERY: Duration = Duration::from_millis(50);

/// A fuser reply that can be answered with an error.
pub trait Abandon: Send + 'static {
    fn fail(self, errno: Errno);
}

macro_rules! abandon {
    ($($reply:ty),*) => {
        $(impl Abandon for $reply {
            fn fail(self, errno: Errno) {
                self.error(errno)
            }
        })*
    };
}
abandon!(
    ReplyAttr,
    ReplyCreate,
    ReplyData,
    ReplyDirectory,
    ReplyDirectoryPlus,
    ReplyEmpty,
    ReplyEntry,
    ReplyOpen,
    ReplyStatfs,
    ReplyWrite,
    ReplyXattr
);

struct Call {
    tid: u32,
    since: Instant,
    interrupt: Box<dyn FnOnce() + Send>,
}

/// The calls in flight (see the module's text).
#[derive(Default)]
pub struct Watchdog {
    calls: Mutex<HashMap<u64, Call>>,
    next: AtomicU64,
}

impl Watchdog {
    /// A watchdog with its thread, which ends once the watchdog is dropped.
    pub fn start() -> Arc<Watchdog> {
        let dog = Arc::new(Watchdog::default());
        let weak: Weak<Watchdog> = Arc::downgrade(&dog);
        let _ = std::thread::Builder::new()
            .name("weft-fuse-watchdog".into())
            .spawn(move || loop {
                std::thread::sleep(LOOK_EVERY);
                match weak.upgrade() {
                    Some(dog) => dog.look(),
                    None => return,
                }
            });
        dog
    }

    fn calls(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Call>> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `reply` of a call made by thread `tid`, watched until answered.
    pub fn watch<R: Abandon>(self: &Arc<Self>, tid: u32, reply: R) -> Watched<R> {
        let slot = Arc::new(Mutex::new(Some(reply)));
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let theirs = Arc::clone(&slot);
        self.calls().insert(
            id,
            Call {
                tid,
                since: Instant::now(),
                interrupt: Box::new(move || {
                    if let Some(reply) = theirs.lock().unwrap_or_else(|p| p.into_inner()).take() {
                        reply.fail(Errno::EINTR);
                    }
                }),
            },
        );
        Watched {
            slot,
            id,
            dog: Arc::clone(self),
        }
    }

    /// One look: answers `EINTR` to the calls older than `LOOK_AFTER` whose caller
    /// has a signal to take.
    fn look(&self) {
        let old: Vec<(u64, u32, Duration)> = self
            .calls()
            .iter()
            .map(|(id, c)| (*id, c.tid, c.since.elapsed()))
            .filter(|(_, _, age)| *age >= LOOK_AFTER)
            .collect();
        for (id, tid, age) in old {
            // Reading /proc without the lock: calls come and go meanwhile.
            if tid == 0 || !locks::waiter_interrupted(tid, tid) {
                continue;
            }
            let call = self.calls().remove(&id);
            if let Some(call) = call {
                (call.interrupt)();
                eprintln!(
                    "weft-fuse: answered EINTR to thread {tid}, signalled while its call waited ({} ms)",
                    age.as_millis()
                );
            }
        }
    }
}

/// A reply being watched: answer it as the reply itself (see the module's text).
pub struct Watched<R: Abandon> {
    slot: Arc<Mutex<Option<R>>>,
    id: u64,
    dog: Arc<Watchdog>,
}

impl<R: Abandon> Watched<R> {
    /// The reply, unless the call was answered `EINTR` already.
    fn take(&self) -> Option<R> {
        self.dog.calls().remove(&self.id);
        self.slot.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    pub fn error(self, errno: Errno) {
        if let Some(reply) = self.take() {
            reply.fail(errno)
        }
    }

    fn with(&self, answer: impl FnOnce(&mut R) -> bool) -> bool {
        match self.slot.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            Some(reply) => answer(reply),
            // Answered EINTR: the rest goes nowhere ("full").
            None => true,
        }
    }
}

impl<R: Abandon> Drop for Watched<R> {
    fn drop(&mut self) {
        // Unanswered: fuser's own reply drop answers (EIO) once the slot goes.
        self.dog.calls().remove(&self.id);
    }
}

macro_rules! answers {
    ($reply:ty { $( fn $name:ident ( $($arg:ident : $ty:ty),* ); )* }) => {
        impl Watched<$reply> {
            $(pub fn $name(self, $($arg: $ty),*) {
                if let Some(reply) = self.take() {
                    reply.$name($($arg),*)
                }
            })*
        }
    };
}

answers!(ReplyAttr { fn attr(ttl: &Duration, attr: &FileAttr); });
answers!(ReplyEntry { fn entry(ttl: &Duration, attr: &FileAttr, generation: Generation); });
answers!(ReplyData { fn data(data: &[u8]); });
answers!(ReplyEmpty { fn ok(); });
answers!(ReplyOpen { fn opened(fh: fuser::FileHandle, flags: FopenFlags); });

impl Watched<ReplyOpen> {
    /// `opened`, saying whether the kernel got it (not answered `EINTR` before): a
    /// handle it did not get is never released by it.
    pub fn handed(self, fh: fuser::FileHandle, flags: FopenFlags) -> bool {
        self.take().map(|reply| reply.opened(fh, flags)).is_some()
    }
}

impl Watched<ReplyCreate> {
    /// `created`, saying whether the kernel got it (see `Watched<ReplyOpen>::handed`).
    pub fn handed(
        self,
        ttl: &Duration,
        attr: &FileAttr,
        generation: Generation,
        fh: fuser::FileHandle,
        flags: FopenFlags,
    ) -> bool {
        self.take()
            .map(|reply| reply.created(ttl, attr, generation, fh, flags))
            .is_some()
    }
}
answers!(ReplyWrite { fn written(size: u32); });
answers!(ReplyXattr { fn size(size: u32); fn data(data: &[u8]); });
answers!(ReplyDirectory { fn ok(); });
answers!(ReplyDirectoryPlus { fn ok(); });

impl Watched<ReplyStatfs> {
    #[allow(clippy::too_many_arguments)]
    pub fn statfs(
        self,
        blocks: u64,
        bfree: u64,
        bavail: u64,
        files: u64,
        ffree: u64,
        bsize: u32,
        namelen: u32,
        frsize: u32,
    ) {
        if let Some(reply) = self.take() {
            reply.statfs(blocks, bfree, bavail, files, ffree, bsize, namelen, frsize)
        }
    }
}

impl Watched<ReplyDirectory> {
    /// As `ReplyDirectory::add`: whether the buffer is full.
    pub fn add<T: AsRef<OsStr>>(&mut self, ino: INodeNo, offset: u64, kind: FileType, name: T) -> bool {
        self.with(|r| r.add(ino, offset, kind, name))
    }
}

impl Watched<ReplyDirectoryPlus> {
    /// As `ReplyDirectoryPlus::add`: whether the buffer is full.
    #[allow(clippy::too_many_arguments)]
    pub fn add<T: AsRef<OsStr>>(
        &mut self,
        ino: INodeNo,
        offset: u64,
        name: T,
        ttl: &Duration,
        attr: &FileAttr,
        generation: Generation,
    ) -> bool {
        self.with(|r| r.add(ino, offset, name, ttl, attr, generation))
    }
}
