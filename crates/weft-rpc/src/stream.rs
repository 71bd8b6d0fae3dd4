//! A byte stream to a peer: TCP, or a Unix-domain socket when client and server share
//! a machine. Addresses name the transport: `host:port` is TCP, `unix:/path` a Unix
//! socket. On one machine a Unix socket moves bulk data at memory speed where loopback
//! TCP costs a protocol stack on each side.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Prefix of Unix-socket addresses.
pub const UNIX_PREFIX: &str = "unix:";
/// Longest socket path the kernel accepts (sun_path holds 108 bytes with the NUL).
pub const UNIX_PATH_BYTES_MAX: usize = 107;

/// The process, user and group of a Unix-socket peer (the process that made its end),
/// from the kernel.
pub(crate) fn peer_cred(fd: std::os::fd::RawFd) -> Option<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for the kernel to fill for this option.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(cred)
}

/// Whether the process at the other end of a stream runs: a server on this machine
/// (a Unix socket, or TCP to a loopback address) that exists and is neither stopped by
/// a signal nor a zombie (as /proc says of it). A process that runs but answers
/// nothing is busy: a machine too loaded to schedule it, or its threads waiting for
/// their disk. Unknown (another machine, another network namespace) is `false`.
pub(crate) fn peer_runs(stream: &Stream) -> bool {
    let pid = match stream {
        Stream::Unix(socket) => peer_cred(std::os::fd::AsRawFd::as_raw_fd(socket)).map(|c| c.pid),
        Stream::Tcp(socket) => socket
            .peer_addr()
            .ok()
            .filter(|a| a.ip().is_loopback())
            .and_then(|a| loopback_listener_pid(a.port())),
    };
    pid.is_some_and(process_runs)
}

/// The process listening on TCP port `port` of this machine (its network namespace),
/// from /proc: the listening socket's inode in /proc/net/tcp{,6}, then the process
/// holding a descriptor of it. A walk of every process's descriptors, for the rare
/// server that answered no probe.
fn loopback_listener_pid(port: u16) -> Option<i32> {
    const LISTEN: &str = "0A";
    let inode = ["/proc/net/tcp", "/proc/net/tcp6"].iter().find_map(|table| {
        let text = std::fs::read_to_string(table).ok()?;
        text.lines().skip(1).find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields.get(1)?.rsplit(':').next()?;
            let listening = u16::from_str_radix(local_port, 16).ok()? == port && *fields.get(3)? == LISTEN;
            listening.then(|| fields.get(9).map(|i| i.to_string())).flatten()
        })
    })?;
    let wanted = format!("socket:[{inode}]");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
        let fds = std::fs::read_dir(entry.path().join("fd")).ok()?;
        fds.flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == wanted.as_str()))
            .then_some(pid)
    })
}

/// Whether process `pid` exists and is neither stopped nor a zombie.
pub(crate) fn process_runs(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": the state follows the last ')' (comm may hold any byte).
    stat.rsplit(')')
        .next()
        .and_then(|rest| rest.trim_start().chars().next())
        .is_some_and(|state| !matches!(state, 'T' | 't' | 'Z' | 'X' | 'x'))
}

#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    /// Connects to `host:port` or `unix:/path`, waiting at most `timeout`.
    pub fn connect(addr: &str, timeout: Duration) -> io::Result<Stream> {
        if let Some(path) = addr.strip_prefix(UNIX_PREFIX) {
            // A Unix connect never waits on the network: it succeeds or fails at once.
            return Ok(Stream::Unix(UnixStream::connect(path)?));
        }
        let sockaddr = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "address resolves to nothing"))?;
        let stream = TcpStream::connect_timeout(&sockaddr, timeout)?;
        stream.set_nodelay(true)?;
        Ok(Stream::Tcp(stream))
    }

    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.shutdown(how),
            Stream::Unix(s) => s.shutdown(how),
        }
    }

    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(timeout),
            Stream::Unix(s) => s.set_read_timeout(timeout),
        }
    }

    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(timeout),
            Stream::Unix(s) => s.set_write_timeout(timeout),
        }
    }

    /// The peer's TCP address (none for a Unix socket).
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        match self {
            Stream::Tcp(s) => s.peer_addr().ok(),
            Stream::Unix(_) => None,
        }
    }
}

impl std::os::fd::AsRawFd for Stream {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read_vectored(bufs),
            Stream::Unix(s) => s.read_vectored(bufs),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write_vectored(bufs),
            Stream::Unix(s) => s.write_vectored(bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

/// A listening socket of either kind.
#[derive(Debug)]
pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

impl Listener {
    /// Binds a Unix socket at `path`, replacing a stale socket file left by a crash.
    pub fn bind_unix(path: &Path) -> io::Result<Listener> {
        if path.as_os_str().len() > UNIX_PATH_BYTES_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "socket path {} is longer than {UNIX_PATH_BYTES_MAX} bytes",
                    path.display()
                ),
            ));
        }
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let listener = UnixListener::bind(path)?;
        // Every local user may connect: the handshake (the cluster key) is the gate,
        // as on TCP, and the kernel names each peer's user for the server's limits.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
        Ok(Listener::Unix(listener, path.to_owned()))
    }

    /// The address clients use: `host:port` or `unix:/path`.
    pub fn address(&self) -> io::Result<String> {
        Ok(match self {
            Listener::Tcp(l) => l.local_addr()?.to_string(),
            Listener::Unix(_, path) => format!("{UNIX_PREFIX}{}", path.display()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state of a child process as `process_runs` sees it, waiting for /proc to
    /// show `want` (a signal takes effect asynchronously).
    fn runs_becomes(pid: i32, want: bool) -> bool {
        for _ in 0..500 {
            if process_runs(pid) == want {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    #[test]
    fn a_stopped_zombie_or_gone_process_does_not_run_a_sleeping_one_does() {
        assert!(process_runs(std::process::id() as i32));
        assert!(!process_runs(0));
        assert!(!process_runs(-1));
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        assert!(runs_becomes(pid, true), "a sleeping child runs");
        // SAFETY: signals to a child this test started and still holds.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        assert!(runs_becomes(pid, false), "a stopped child does not run");
        unsafe { libc::kill(pid, libc::SIGCONT) };
        assert!(runs_becomes(pid, true), "a continued child runs again");
        unsafe { libc::kill(pid, libc::SIGKILL) };
        // Killed and not reaped yet: a zombie.
        assert!(runs_becomes(pid, false), "a killed child (a zombie) does not run");
        child.wait().unwrap();
        assert!(!process_runs(pid), "a reaped child is gone");
    }

    #[test]
    fn the_peer_of_a_unix_socket_is_known() {
        let (a, _b) = UnixStream::pair().unwrap();
        let cred = peer_cred(std::os::fd::AsRawFd::as_raw_fd(&a)).unwrap();
        assert_eq!(cred.pid, std::process::id() as i32);
        assert!(peer_runs(&Stream::Unix(a)));
    }

    #[test]
    fn the_process_listening_on_a_loopback_port_is_found() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(loopback_listener_pid(port), Some(std::process::id() as i32));
        let tcp = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        assert!(peer_runs(&Stream::Tcp(tcp)));
        drop(listener);
        assert_eq!(loopback_listener_pid(port), None);
    }
}
