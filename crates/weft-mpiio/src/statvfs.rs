//! `statvfs`, `statfs` (and their `64` names) of a `weft:` name, for programs that ask
//! the size of the file system they write to: IOR does before every run (of the
//! directory part of its `-o weft:/file`, i.e. `weft:`), and without this printed
//! "Backend returned error during statfs" for every Weft run. The library is loaded
//! before the C library (LD_PRELOAD, or linked), so these definitions are the ones a
//! program calls; names without the prefix go to the C library's functions
//! (`dlsym(RTLD_NEXT)`), untouched.
//!
//! A `weft:` name reports the whole cluster, as a mount's `df` does
//! (`weft_client::FsStats::blocks`): the io servers' space in 4 KiB blocks and the
//! namespace's counts. The name itself need not exist (IOR asks before it creates).

use std::ffi::{c_char, c_int, CStr};
use std::sync::OnceLock;

use weft_client::StatfsBlocks;

/// The cluster's figures, or the errno to fail with.
fn cluster_blocks() -> Result<StatfsBlocks, c_int> {
    let client = crate::file::client().map_err(|e| {
        eprintln!("weft-mpiio: statvfs of a weft: name: {e}");
        libc::EIO
    })?;
    client.statfs().map(|s| s.blocks()).map_err(|e| {
        eprintln!("weft-mpiio: statvfs of a weft: name: {e}");
        e.errno()
    })
}

/// Whether `path` (non-null) names something in Weft.
///
/// # Safety
/// `path` points to a NUL-terminated string.
unsafe fn is_weft(path: *const c_char) -> bool {
    // SAFETY: the caller's promise.
    unsafe { CStr::from_ptr(path) }.to_bytes().starts_with(b"weft:")
}

fn fail(errno: c_int) -> c_int {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = errno };
    -1
}

/// The C library's function `name` (a NUL-terminated symbol), looked up once.
fn next<F: Copy>(cell: &'static OnceLock<usize>, name: &'static [u8]) -> Option<F> {
    let address = *cell.get_or_init(|| {
        // SAFETY: a NUL-terminated name; RTLD_NEXT finds the definition after ours.
        unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) as usize }
    });
    // SAFETY: F is the function pointer type of `name`'s C declaration.
    (address != 0).then(|| unsafe { std::mem::transmute_copy::<usize, F>(&address) })
}

macro_rules! statvfs_like {
    ($name:ident, $symbol:literal, $buf:ty, |$b:ident, $out:ident| $fill:block) => {
        /// See the module's comment.
        ///
        /// # Safety
        /// As the C library's function of this name: `path` a NUL-terminated string,
        /// `buf` writable.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, buf: *mut $buf) -> c_int {
            if path.is_null() || buf.is_null() {
                return fail(libc::EFAULT);
            }
            // SAFETY: checked non-null; NUL-terminated by the caller's promise.
            if unsafe { is_weft(path) } {
                return match cluster_blocks() {
                    Ok($b) => {
                        // SAFETY: zero is a valid value of every field of the C struct.
                        let mut $out: $buf = unsafe { std::mem::zeroed() };
                        $fill
                        // SAFETY: the caller's buffer, writable.
                        unsafe { buf.write($out) };
                        0
                    }
                    Err(errno) => fail(errno),
                };
            }
            static NEXT: OnceLock<usize> = OnceLock::new();
            type Next = unsafe extern "C" fn(*const c_char, *mut $buf) -> c_int;
            match next::<Next>(&NEXT, concat!($symbol, "\0").as_bytes()) {
                // SAFETY: the C library's own function, with the caller's arguments.
                Some(real) => unsafe { real(path, buf) },
                None => fail(libc::ENOSYS),
            }
        }
    };
}

/// The fields statvfs(3) and statfs(2) share, from the cluster's figures.
macro_rules! fill_common {
    ($b:ident, $out:ident) => {{
        $out.f_bsize = $b.block_bytes as _;
        $out.f_frsize = $b.block_bytes as _;
        $out.f_blocks = $b.blocks as _;
        $out.f_bfree = $b.blocks_free as _;
        $out.f_bavail = $b.blocks_avail as _;
        $out.f_files = $b.files as _;
        $out.f_ffree = $b.files_free as _;
    }};
}

macro_rules! fill_statvfs {
    ($b:ident, $out:ident) => {{
        fill_common!($b, $out);
        $out.f_favail = $b.files_free as _;
        $out.f_namemax = $b.name_bytes_max as _;
    }};
}

macro_rules! fill_statfs {
    ($b:ident, $out:ident) => {{
        fill_common!($b, $out);
        $out.f_type = WEFT_MAGIC as _;
        $out.f_namelen = $b.name_bytes_max as _;
    }};
}

statvfs_like!(statvfs, "statvfs", libc::statvfs, |b, out| {
    fill_statvfs!(b, out)
});
statvfs_like!(statvfs64, "statvfs64", libc::statvfs64, |b, out| {
    fill_statvfs!(b, out)
});
statvfs_like!(statfs, "statfs", libc::statfs, |b, out| { fill_statfs!(b, out) });
statvfs_like!(statfs64, "statfs64", libc::statfs64, |b, out| {
    fill_statfs!(b, out)
});

/// statfs's `f_type` for a `weft:` name: FUSE's (what a mount reports), so that
/// programs that recognise file systems by it take Weft for a network file system.
const WEFT_MAGIC: u32 = 0x6573_5546;
