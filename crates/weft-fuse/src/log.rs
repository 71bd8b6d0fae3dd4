//! The mount daemon's log: where it goes by default (`default_path`), a file bounded by
//! size with one rotation (`RotatingLog`), and the logger process that copies the
//! daemon's standard error into it line by line with a UTC time (`start_logger`).
//!
//! A separate process rather than a thread of the daemon: a daemon that aborts (a
//! panic, an assertion) writes its last words into the pipe and dies; the logger still
//! reads them and writes them out, then ends at the pipe's end.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Bytes one log file holds at most; at that size it becomes `NAME.1` (replacing the
/// previous one) and a new file starts, so a mount's messages take at most twice this.
pub const LOG_BYTES_MAX: u64 = 8 << 20;

/// Bytes of one line at most (a longer one is cut and ends with "..."), so that a line
/// without an end never grows the logger's buffer.
pub const LOG_LINE_BYTES_MAX: usize = 16 << 10;

/// Bytes of a mountpoint kept in the log's name (file names are at most 255 bytes).
const NAME_BYTES_MAX: usize = 200;

/// Where a mount's messages go unless told otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum MountLog {
    /// `default_path(mountpoint)`.
    #[default]
    Default,
    /// This file, bounded as the default one is.
    File(PathBuf),
    /// Discarded.
    Off,
}

/// The default log of a mount at `mountpoint` (absolute): `mount-NAME.log`, NAME the
/// mountpoint with its slashes as dashes (`/mnt/weft` gives `mount-mnt-weft.log`; see
/// `log_name` for the others), in
/// `$XDG_STATE_HOME/weft` when that is set (the XDG base directories' place for logs),
/// else `/var/log/weft` for root (where system daemons' logs are) and
/// `~/.local/state/weft` for other users (XDG's default). None when neither
/// XDG_STATE_HOME nor HOME is set for a user other than root.
pub fn default_path(mountpoint: &Path) -> Option<PathBuf> {
    let dir = match std::env::var_os("XDG_STATE_HOME").filter(|d| Path::new(d).is_absolute()) {
        Some(state) => PathBuf::from(state).join("weft"),
        // SAFETY: geteuid has no preconditions.
        None if unsafe { libc::geteuid() } == 0 => PathBuf::from("/var/log/weft"),
        None => {
            let home = std::env::var_os("HOME").filter(|h| Path::new(h).is_absolute())?;
            PathBuf::from(home).join(".local/state/weft")
        }
    };
    Some(dir.join(format!("mount-{}.log", log_name(mountpoint))))
}

/// The mountpoint as a file name: slashes as dashes, anything but letters, digits,
/// `.` and `_` as `_`, "root" for `/`. When that is not one to one (a name with a
/// dash or another replaced byte, or one cut to NAME_BYTES_MAX), a dash and 16 hex
/// digits of the whole path's FNV-1a hash follow, so that `/a-b` and `/a/b`, or two
/// long mountpoints with the same beginning, never share a log.
fn log_name(mountpoint: &Path) -> String {
    let bytes = mountpoint.as_os_str().as_bytes();
    let mut exact = true;
    let mut name: String = bytes
        .split(|&b| b == b'/')
        .filter(|part| !part.is_empty())
        .map(|part| {
            part.iter()
                .map(|&b| match b {
                    b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'_' => b as char,
                    _ => {
                        exact = false;
                        '_'
                    }
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("-");
    if name.is_empty() {
        name = "root".into();
    }
    if name.len() > NAME_BYTES_MAX {
        name.truncate(NAME_BYTES_MAX);
        exact = false;
    }
    if !exact {
        let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        name.push_str(&format!("-{hash:016x}"));
    }
    name
}

/// A log file bounded by size: a line that would take it past `limit_bytes` first
/// moves it to `PATH.1` (one rotation, the older `.1` replaced) and starts it afresh.
pub struct RotatingLog {
    path: PathBuf,
    limit_bytes: u64,
    file: std::fs::File,
    size_bytes: u64,
}

impl RotatingLog {
    /// Opens (appends to) `path`, making its directory (mode 0700) if missing; the file
    /// is made with mode 0600 (its lines name paths and users of the mount).
    pub fn open(path: &Path, limit_bytes: u64) -> std::io::Result<RotatingLog> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        let file = open_append(path)?;
        let size_bytes = file.metadata()?.len();
        Ok(RotatingLog {
            path: path.to_path_buf(),
            limit_bytes: limit_bytes.max(1),
            file,
            size_bytes,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `line` (its newline included), rotating first if it would not fit; a line
    /// longer than the limit is cut to it.
    pub fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        let line = &line[..line.len().min(self.limit_bytes as usize)];
        if self.size_bytes > 0 && self.size_bytes + line.len() as u64 > self.limit_bytes {
            self.rotate()?;
        }
        self.file.write_all(line)?;
        self.size_bytes += line.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        let mut old = self.path.clone().into_os_string();
        old.push(".1");
        match std::fs::rename(&self.path, &old) {
            Ok(()) => self.file = open_append(&self.path)?,
            // Not renamable (a directory without write permission): start over in place.
            Err(_) => self.file.set_len(0)?,
        }
        self.size_bytes = 0;
        Ok(())
    }
}

fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// Copies `input` into `log` line by line, each line prefixed with the UTC time it
/// was read, until the input ends. Lines are at most LOG_LINE_BYTES_MAX bytes.
pub fn copy_lines(input: &mut impl Read, log: &mut RotatingLog) -> std::io::Result<()> {
    let mut pending: Vec<u8> = Vec::with_capacity(LOG_LINE_BYTES_MAX);
    let mut chunk = [0u8; 4096];
    let emit = |line: &[u8], log: &mut RotatingLog| -> std::io::Result<()> {
        let mut out = format!("{} ", utc_now()).into_bytes();
        out.extend_from_slice(line);
        if out.last() != Some(&b'\n') {
            out.extend_from_slice(b"...\n");
        }
        log.write_line(&out)
    };
    loop {
        let n = match input.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        for &b in &chunk[..n] {
            pending.push(b);
            if b == b'\n' || pending.len() >= LOG_LINE_BYTES_MAX {
                emit(&pending, log)?;
                pending.clear();
            }
        }
    }
    if !pending.is_empty() {
        emit(&pending, log)?;
    }
    Ok(())
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ`.
fn utc_now() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc_text(seconds)
}

/// Seconds since 1970 as a UTC date and time (the civil-from-days algorithm).
fn utc_text(seconds: u64) -> String {
    let days = (seconds / 86_400) as i64;
    let of_day = seconds % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
}

/// Starts the logger process for `path` and returns the write end of its pipe, to
/// become the daemon's standard error. Must be called while the process has one
/// thread (it forks). The logger keeps no other descriptor of this process (a kept
/// pipe to `weft mount` would keep it waiting), ignores the signals that end a mount
/// (it ends when every writer is gone, after the daemon's last words), and runs in /.
pub fn start_logger(path: &Path) -> std::io::Result<OwnedFd> {
    // Opened here first, so that a log that cannot be written is reported at once.
    let log = RotatingLog::open(path, LOG_BYTES_MAX)?;
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 just opened both and nothing else owns them.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the caller guarantees one thread, so the child may do anything; it never
    // returns from this function.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()),
        0 => {
            drop(write);
            let code = logger(read, log);
            // SAFETY: ends the logger without unwinding into the caller.
            unsafe { libc::_exit(code) }
        }
        _ => Ok(write),
    }
}

fn logger(read: OwnedFd, log: RotatingLog) -> i32 {
    let path = log.path().to_path_buf();
    drop(log);
    // SAFETY: plain system calls on descriptors this process owns; after them only the
    // pipe (as 0) and 1, 2 (the daemon's, soon /dev/null) remain.
    unsafe {
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE] {
            libc::signal(signal, libc::SIG_IGN);
        }
        if libc::dup2(read.as_raw_fd(), 0) < 0 {
            return 1;
        }
        if libc::close_range(3, u32::MAX, 0) != 0 {
            for fd in 3..1024 {
                libc::close(fd);
            }
        }
        libc::chdir(c"/".as_ptr());
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, 1);
            libc::dup2(null, 2);
            libc::close(null);
        }
    }
    std::mem::forget(read); // its number was closed above (or is 0, now the pipe)
    let Ok(mut log) = RotatingLog::open(&path, LOG_BYTES_MAX) else {
        return 1;
    };
    // SAFETY: descriptor 0 is the pipe's read end (dup2 above), owned here.
    let mut input = unsafe { std::fs::File::from_raw_fd(0) };
    match copy_lines(&mut input, &mut log) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written past its limit many times over, the log keeps at most two files of at
    /// most the limit each, the newest lines in the current one, the ones before them
    /// in `.1`; a line longer than the limit is cut.
    #[test]
    fn the_log_rotates_once_and_never_grows_past_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/mount-x.log");
        let limit = 1000;
        let mut log = RotatingLog::open(&path, limit).unwrap();
        for k in 0..1000 {
            log.write_line(format!("line {k:05} of the test\n").as_bytes())
                .unwrap();
            let size = std::fs::metadata(&path).unwrap().len();
            assert!(size <= limit, "{size} bytes after line {k}");
        }
        let old = dir.path().join("sub/mount-x.log.1");
        assert!(std::fs::metadata(&old).unwrap().len() <= limit);
        let names: Vec<_> = std::fs::read_dir(dir.path().join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        let current = std::fs::read_to_string(&path).unwrap();
        assert!(current.ends_with("line 00999 of the test\n"), "{current}");
        let previous = std::fs::read_to_string(&old).unwrap();
        let first_current: &str = current.lines().next().unwrap();
        let last_previous = previous.lines().last().unwrap();
        let number = |l: &str| l[5..10].parse::<u32>().unwrap();
        assert_eq!(
            number(last_previous) + 1,
            number(first_current),
            "no line lost at the rotation"
        );
        // Reopened (a new daemon), it goes on within the same bound.
        let mut log = RotatingLog::open(&path, limit).unwrap();
        log.write_line(&[b'x'; 5000]).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            limit,
            "a long line is cut to the limit"
        );
        log.write_line(b"after\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "after\n");
    }

    /// Lines get a time; a line without an end is cut at LOG_LINE_BYTES_MAX.
    #[test]
    fn copied_lines_carry_the_time_and_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.log");
        let mut log = RotatingLog::open(&path, LOG_BYTES_MAX).unwrap();
        let mut input: Vec<u8> = b"first\nsecond\n".to_vec();
        input.extend(std::iter::repeat_n(b'y', LOG_LINE_BYTES_MAX * 2 + 10));
        copy_lines(&mut input.as_slice(), &mut log).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "two lines, a long one in three pieces");
        assert!(
            lines[0].ends_with("Z first") && lines[0].starts_with("20"),
            "{}",
            lines[0]
        );
        assert!(lines.iter().all(|l| l.len() <= LOG_LINE_BYTES_MAX + 30));
    }

    #[test]
    fn times_and_names() {
        assert_eq!(utc_text(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_text(951_782_400 + 3661), "2000-02-29T01:01:01Z");
        assert_eq!(utc_text(1_795_000_000), "2026-11-18T11:06:40Z");
        assert_eq!(log_name(Path::new("/mnt/weft")), "mnt-weft");
        assert_eq!(log_name(Path::new("/")), "root");
        assert_eq!(log_name(Path::new("/a_b/c.d")), "a_b-c.d");
        // Names that would collide get the path's hash.
        let odd = log_name(Path::new("/a b/c:d"));
        assert!(
            odd.starts_with("a_b-c_d-") && odd.len() == "a_b-c_d-".len() + 16,
            "{odd}"
        );
        let (dashed, nested) = (log_name(Path::new("/a-b")), log_name(Path::new("/a/b")));
        assert_eq!(nested, "a-b");
        assert_ne!(dashed, nested);
        assert_ne!(log_name(Path::new("/a b")), log_name(Path::new("/a_b")));
        let long = |tail: &str| log_name(Path::new(&format!("/{}{tail}", "z".repeat(400))));
        assert!(long("x").len() <= NAME_BYTES_MAX + 17);
        assert_ne!(long("x"), long("y"));
    }
}
