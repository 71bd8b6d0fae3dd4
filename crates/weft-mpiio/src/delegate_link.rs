//! The conversation between libweft_mpiio and the job-scoped delegates it spawns
//! (`weft-delegate`, each running one `weftd --role cache --delegate`) over the
//! intercommunicator `MPI_Comm_spawn` made: the message tags, what each message says,
//! and the MPI calls of `csrc/spawn.c` both sides need. Compiled into the library and,
//! by path, into `weft-delegate`, so both sides speak one protocol.
//!
//! 1. parent rank 0 → each delegate, `WATCH`: the job key ("jobkey HEX", a fresh
//!    random key per set of delegates: the weftd serves only clients proving it, and
//!    only the job's processes get it, by this message and the job's own broadcast;
//!    never on a command line or in an environment), then the parent processes
//!    ("HOSTHASH PID" lines); a delegate whose local parents die (MPI_Abort, a crash)
//!    leaves on its own.
//! 2. delegate → parent rank 0, `READY`: "ok HOST:PORT" once its weftd serves, or
//!    "error TEXT".
//! 3. parent rank 0 → each delegate, `STOP` (at close or MPI_Finalize, after the
//!    parents synced): the weftd writes its dirty blocks back and exits.
//! 4. delegate → parent rank 0, `STOPPED`: "ok" or "error TEXT"; then both sides
//!    disconnect the intercommunicator.

// weft-delegate uses part of this module, the library another part.
#![allow(dead_code)]

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::time::{Duration, Instant};

/// An MPI handle as the shim passes it (`wm_h`).
pub type Handle = usize;

/// Message tags (small: MPI guarantees tags up to 32767 only).
pub mod tag {
    pub const WATCH: i32 = 31_001;
    pub const READY: i32 = 31_002;
    pub const STOP: i32 = 31_003;
    pub const STOPPED: i32 = 31_004;
}

/// Most bytes of one message (a watch list of 65,536 processes fits).
pub const MESSAGE_BYTES_MAX: usize = 4 << 20;

/// How often a wait for a message looks again.
const POLL_PAUSE_MAX: Duration = Duration::from_millis(20);

mod ffi {
    use super::*;
    extern "C" {
        pub fn wm_init() -> c_int;
        pub fn wm_finalize() -> c_int;
        pub fn wm_comm_world() -> Handle;
        pub fn wm_comm_rank(comm: Handle, rank: *mut c_int) -> c_int;
        pub fn wm_comm_get_parent(parent: *mut Handle, is_null: *mut c_int) -> c_int;
        pub fn wm_comm_remote_size(comm: Handle, size: *mut c_int) -> c_int;
        pub fn wm_comm_spawn(
            comm: Handle,
            command: *const c_char,
            argv: *const *const c_char,
            maxprocs: c_int,
            hosts: *const c_char,
            root: c_int,
            intercomm: *mut Handle,
            errcodes: *mut c_int,
        ) -> c_int;
        pub fn wm_comm_disconnect(comm: Handle) -> c_int;
        pub fn wm_send_bytes(comm: Handle, buf: *const c_void, len: c_int, dest: c_int, tag: c_int) -> c_int;
        pub fn wm_iprobe_bytes(
            comm: Handle,
            source: c_int,
            tag: c_int,
            flag: *mut c_int,
            len: *mut c_int,
        ) -> c_int;
        pub fn wm_recv_bytes(comm: Handle, buf: *mut c_void, len: c_int, source: c_int, tag: c_int) -> c_int;
        pub fn wm_error_string(code: c_int, buf: *mut c_char, len: c_int);
        pub fn wm_processor_name(buf: *mut c_char, len: c_int) -> c_int;
    }
}

/// An MPI call's failure, with the MPI library's own text.
fn failed(what: &str, rc: c_int) -> String {
    let mut buf = [0 as c_char; 512];
    // SAFETY: the buffer holds 512 bytes; the shim NUL-terminates within them.
    let text = unsafe {
        ffi::wm_error_string(rc, buf.as_mut_ptr(), buf.len() as c_int);
        CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
    };
    format!("{what}: {text} (MPI error {rc})")
}

fn check(what: &str, rc: c_int) -> Result<(), String> {
    if rc == 0 {
        Ok(())
    } else {
        Err(failed(what, rc))
    }
}

/// MPI_Init, unless MPI is initialised already.
pub fn init() -> Result<(), String> {
    // SAFETY: no arguments.
    check("MPI_Init", unsafe { ffi::wm_init() })
}

pub fn finalize() -> Result<(), String> {
    // SAFETY: no arguments.
    check("MPI_Finalize", unsafe { ffi::wm_finalize() })
}

/// This process's rank in MPI_COMM_WORLD.
pub fn world_rank() -> Result<usize, String> {
    let mut rank = 0;
    // SAFETY: out-pointer to a local.
    check("MPI_Comm_rank", unsafe {
        ffi::wm_comm_rank(ffi::wm_comm_world(), &mut rank)
    })?;
    Ok(rank as usize)
}

/// The intercommunicator to the processes that spawned this one; `None`: not spawned.
pub fn parent() -> Result<Option<Handle>, String> {
    let (mut parent, mut is_null) = (0, 0);
    // SAFETY: out-pointers to locals.
    check("MPI_Comm_get_parent", unsafe {
        ffi::wm_comm_get_parent(&mut parent, &mut is_null)
    })?;
    Ok((is_null == 0).then_some(parent))
}

/// Starts `count` copies of `command argv...` (collective over `comm`, arguments
/// significant at `root` only); the intercommunicator to them.
pub fn spawn(
    comm: Handle,
    command: &str,
    argv: &[String],
    count: usize,
    hosts: Option<&str>,
    root: usize,
) -> Result<Handle, String> {
    let text = |s: &str| CString::new(s).map_err(|_| format!("{s:?} holds a NUL byte"));
    let command_c = text(command)?;
    let args: Vec<CString> = argv.iter().map(|a| text(a)).collect::<Result<_, _>>()?;
    let mut pointers: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
    pointers.push(std::ptr::null());
    let hosts_c = hosts.map(text).transpose()?;
    let mut intercomm = 0;
    let mut errcodes = vec![0 as c_int; count];
    // SAFETY: NUL-terminated strings and a NULL-terminated argv that outlive the call;
    // errcodes holds `count` entries.
    let rc = unsafe {
        ffi::wm_comm_spawn(
            comm,
            command_c.as_ptr(),
            pointers.as_ptr(),
            count as c_int,
            hosts_c.as_ref().map_or(std::ptr::null(), |h| h.as_ptr()),
            root as c_int,
            &mut intercomm,
            errcodes.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(failed("MPI_Comm_spawn", rc));
    }
    if let Some(bad) = errcodes.iter().find(|&&e| e != 0) {
        return Err(failed("MPI_Comm_spawn of one of the processes", *bad));
    }
    Ok(intercomm)
}

/// Processes in the remote group of `intercomm`.
pub fn remote_size(intercomm: Handle) -> Result<usize, String> {
    let mut size = 0;
    // SAFETY: out-pointer to a local.
    check("MPI_Comm_remote_size", unsafe {
        ffi::wm_comm_remote_size(intercomm, &mut size)
    })?;
    Ok(size as usize)
}

/// MPI_Comm_disconnect (collective over both groups).
pub fn disconnect(intercomm: Handle) -> Result<(), String> {
    // SAFETY: a communicator handle; the shim takes its own copy.
    check("MPI_Comm_disconnect", unsafe {
        ffi::wm_comm_disconnect(intercomm)
    })
}

pub fn send(comm: Handle, dest: usize, tag: i32, bytes: &[u8]) -> Result<(), String> {
    assert!(bytes.len() <= MESSAGE_BYTES_MAX);
    // SAFETY: the slice is valid for its length.
    check("MPI_Send", unsafe {
        ffi::wm_send_bytes(
            comm,
            bytes.as_ptr().cast(),
            bytes.len() as c_int,
            dest as c_int,
            tag,
        )
    })
}

/// The message from `source` with `tag` if one waits.
pub fn try_recv(comm: Handle, source: usize, tag: i32) -> Result<Option<Vec<u8>>, String> {
    let (mut flag, mut len) = (0, 0);
    // SAFETY: out-pointers to locals.
    check("MPI_Iprobe", unsafe {
        ffi::wm_iprobe_bytes(comm, source as c_int, tag, &mut flag, &mut len)
    })?;
    if flag == 0 {
        return Ok(None);
    }
    if len < 0 || len as usize > MESSAGE_BYTES_MAX {
        return Err(format!("a message of {len} bytes (most {MESSAGE_BYTES_MAX})"));
    }
    let mut buf = vec![0u8; len as usize];
    // SAFETY: the buffer holds `len` bytes.
    check("MPI_Recv", unsafe {
        ffi::wm_recv_bytes(comm, buf.as_mut_ptr().cast(), len, source as c_int, tag)
    })?;
    Ok(Some(buf))
}

/// Waits for the message from `source` with `tag` until `deadline`, asking `gone`
/// between looks whether to give up (its answer is the error).
pub fn recv_until(
    comm: Handle,
    source: usize,
    tag: i32,
    deadline: Instant,
    mut gone: impl FnMut() -> Option<String>,
) -> Result<Vec<u8>, String> {
    let mut pause = Duration::from_micros(100);
    loop {
        if let Some(message) = try_recv(comm, source, tag)? {
            return Ok(message);
        }
        if let Some(why) = gone() {
            return Err(why);
        }
        if Instant::now() >= deadline {
            return Err(format!("no answer from process {source} in time"));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(POLL_PAUSE_MAX);
    }
}

/// MPI_Get_processor_name.
pub fn processor_name() -> String {
    let mut buf = [0 as c_char; 256];
    // SAFETY: the buffer holds 256 bytes and is NUL-terminated by the shim.
    unsafe {
        ffi::wm_processor_name(buf.as_mut_ptr(), buf.len() as c_int);
        CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
    }
}

/// A host's name as a number (FNV-1a), as the watch list carries it.
pub fn host_hash(name: &str) -> i64 {
    name.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    }) as i64
}

/// The watch list's text: one "HOSTHASH PID" line per parent process.
pub fn watch_text(processes: &[(i64, i64)]) -> String {
    processes
        .iter()
        .map(|(host, pid)| format!("{host} {pid}\n"))
        .collect()
}

/// The pids of `text`'s processes on host `host` (lines that do not parse are skipped).
pub fn watched_here(text: &str, host: i64) -> Vec<i32> {
    text.lines()
        .filter_map(|line| {
            let (h, pid) = line.split_once(' ')?;
            (h.parse::<i64>().ok()? == host).then_some(())?;
            pid.trim().parse::<i32>().ok()
        })
        .collect()
}

/// A fresh job key as 64 hexadecimal digits (a key file's text).
pub fn new_job_key() -> Result<String, String> {
    let bytes = weft_rpc::auth::nonce().map_err(|e| format!("making the job key: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The job key of `hex` (as `new_job_key` makes it).
pub fn job_key(hex: &str) -> Result<weft_rpc::ClusterKey, String> {
    let bad = || "the job key is not 64 hexadecimal digits".to_owned();
    if hex.len() != 2 * weft_rpc::auth::KEY_BYTES || !hex.is_ascii() {
        return Err(bad());
    }
    let mut bytes = [0u8; weft_rpc::auth::KEY_BYTES];
    for (k, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * k..2 * k + 2], 16).map_err(|_| bad())?;
    }
    Ok(weft_rpc::ClusterKey::from_bytes(bytes))
}

/// The `WATCH` message: the job key's line, then the watch list.
pub fn watch_message(job_key_hex: &str, watch: &str) -> String {
    format!("jobkey {job_key_hex}\n{watch}")
}

/// A `WATCH` message's job key (hexadecimal) and watch list.
pub fn parse_watch(text: &str) -> Result<(&str, &str), String> {
    let (first, watch) = text.split_once('\n').unwrap_or((text, ""));
    match first.split_once(' ') {
        Some(("jobkey", hex)) => {
            job_key(hex)?;
            Ok((hex, watch))
        }
        _ => Err("the job's first message carries no job key (libweft_mpiio and weft-delegate of different versions?)".into()),
    }
}

/// An "ok REST" / "error TEXT" answer as a result.
pub fn answer(message: &[u8]) -> Result<String, String> {
    let text = String::from_utf8_lossy(message);
    match text.split_once(' ').unwrap_or((&text, "")) {
        ("ok", rest) => Ok(rest.to_owned()),
        ("error", why) => Err(why.to_owned()),
        _ => Err(format!("an answer neither ok nor error: {text:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_lists_keep_only_this_hosts_processes() {
        let here = host_hash("node1");
        let other = host_hash("node2");
        assert_ne!(here, other);
        let text = watch_text(&[(here, 10), (other, 11), (here, 12)]);
        assert_eq!(watched_here(&text, here), vec![10, 12]);
        assert_eq!(watched_here(&text, other), vec![11]);
        assert!(watched_here("garbage\n1 x\n", here).is_empty());
    }

    #[test]
    fn watch_messages_carry_the_job_key_first() {
        let hex = new_job_key().unwrap();
        assert_ne!(hex, new_job_key().unwrap(), "a fresh key each time");
        let here = host_hash("node1");
        let message = watch_message(&hex, &watch_text(&[(here, 10)]));
        let (key, watch) = parse_watch(&message).unwrap();
        assert_eq!(key, hex);
        assert_eq!(watched_here(watch, here), vec![10]);
        assert!(parse_watch(&watch_text(&[(here, 10)])).is_err(), "no key");
        assert!(parse_watch("jobkey 12\n").is_err(), "a short key");
    }

    #[test]
    fn answers_are_ok_or_error() {
        assert_eq!(answer(b"ok 127.0.0.1:5"), Ok("127.0.0.1:5".into()));
        assert_eq!(answer(b"ok"), Ok(String::new()));
        assert_eq!(answer(b"error no weftd"), Err("no weftd".into()));
        assert!(answer(b"maybe").is_err());
    }
}
