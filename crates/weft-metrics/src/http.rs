//! The metrics endpoint's HTTP: a small HTTP/1.1 server for GET (and HEAD) requests,
//! and the client that `weft top` scrapes with.
//!
//! The server is bounded like the rpc servers, against slow or hostile peers: at most
//! `HTTP_CONNECTIONS_MAX` requests served at once (others get 503 at once), a request
//! head of at most `REQUEST_HEAD_BYTES_MAX` bytes that must arrive within
//! `REQUEST_DEADLINE`, a reply that must be taken within `SEND_DEADLINE`, one request
//! per connection. A peer holding every slot delays scrapes by at most the deadline.
//! It runs on its own threads, so a scrape is answered while every worker is busy.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Requests served at once.
pub const HTTP_CONNECTIONS_MAX: usize = 8;
/// Most bytes of a request's line and headers.
pub const REQUEST_HEAD_BYTES_MAX: usize = 8192;
/// A request head must arrive within this time of the connection's accept.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// A reply must be taken by the peer within this time.
pub const SEND_DEADLINE: Duration = Duration::from_secs(5);
/// Most bytes `get` reads of a reply.
pub const REPLY_BYTES_MAX: usize = 16 << 20;

/// What a route answers.
pub struct Reply {
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

/// Answers a path ("/metrics"), or `None` for 404.
pub type Routes = Arc<dyn Fn(&str) -> Option<Reply> + Send + Sync>;

/// Serves `routes` on `listener` from background threads, for the life of the process.
pub fn serve(listener: TcpListener, routes: Routes) -> io::Result<SocketAddr> {
    let addr = listener.local_addr()?;
    let active = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("weft-http".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else {
                    // EMFILE and the like: wait rather than spin.
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                };
                if active.fetch_add(1, Ordering::SeqCst) >= HTTP_CONNECTIONS_MAX {
                    active.fetch_sub(1, Ordering::SeqCst);
                    busy(stream);
                    continue;
                }
                let slot = active.clone();
                let routes = routes.clone();
                let spawned = std::thread::Builder::new()
                    .name("weft-http-conn".into())
                    .stack_size(256 << 10)
                    .spawn(move || {
                        serve_one(stream, &routes);
                        slot.fetch_sub(1, Ordering::SeqCst);
                    });
                if spawned.is_err() {
                    // No thread: the connection was dropped with the closure.
                    active.fetch_sub(1, Ordering::SeqCst);
                }
            }
        })?;
    Ok(addr)
}

fn busy(mut stream: TcpStream) {
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = stream.write_all(
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n",
    );
    close_gently(stream, Duration::from_millis(50));
}

/// Closes after the reply without a reset: closing a socket with unread request bytes
/// makes the kernel send RST, which may destroy the reply before the peer reads it.
/// Reads (and drops) what the peer sent for at most `wait`.
fn close_gently(stream: TcpStream, wait: Duration) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(wait));
    let mut sink = [0u8; 4096];
    let deadline = Instant::now() + wait;
    let mut stream = stream;
    while Instant::now() < deadline {
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
}

fn serve_one(mut stream: TcpStream, routes: &Routes) {
    let _ = stream.set_nodelay(true);
    let accepted = Instant::now();
    let head = match read_head(&mut stream, accepted + REQUEST_DEADLINE) {
        Ok(head) => head,
        Err(status) => {
            if let Some(status) = status {
                let _ = respond(&mut stream, status, "text/plain", b"", false);
                close_gently(stream, Duration::from_millis(200));
            }
            return;
        }
    };
    let line = head.lines().next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next(), parts.next(), parts.next());
    let (Some(method), Some(target), Some(version)) = (method, target, version) else {
        let _ = respond(
            &mut stream,
            "400 Bad Request",
            "text/plain",
            b"bad request line\n",
            false,
        );
        return;
    };
    if !version.starts_with("HTTP/1.") {
        let _ = respond(
            &mut stream,
            "505 HTTP Version Not Supported",
            "text/plain",
            b"",
            false,
        );
        return;
    }
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        let _ = respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            b"GET only\n",
            false,
        );
        return;
    }
    let path = target.split('?').next().unwrap_or(target);
    let result = match routes(path) {
        Some(reply) => respond(&mut stream, "200 OK", reply.content_type, &reply.body, head_only),
        None => respond(
            &mut stream,
            "404 Not Found",
            "text/plain",
            b"not found\n",
            head_only,
        ),
    };
    let _ = result;
}

/// Reads up to the blank line ending the head; `Err(Some(status))` to answer, `Err(None)`
/// to just close.
fn read_head(stream: &mut TcpStream, deadline: Instant) -> Result<String, Option<&'static str>> {
    let mut buf = vec![0u8; REQUEST_HEAD_BYTES_MAX];
    let mut len = 0;
    loop {
        if let Some(end) = find_blank_line(&buf[..len]) {
            return String::from_utf8(buf[..end].to_vec()).map_err(|_| Some("400 Bad Request"));
        }
        if len == buf.len() {
            return Err(Some("431 Request Header Fields Too Large"));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Some("408 Request Timeout"));
        }
        stream.set_read_timeout(Some(left)).map_err(|_| None)?;
        match stream.read(&mut buf[len..]) {
            Ok(0) => return Err(None),
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(Some("408 Request Timeout"))
            }
            Err(_) => return Err(None),
        }
    }
}

fn find_blank_line(bytes: &[u8]) -> Option<usize> {
    bytes.windows(4).position(|w| w == b"\r\n\r\n")
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
    head_only: bool,
) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let deadline = Instant::now() + SEND_DEADLINE;
    write_by(stream, head.as_bytes(), deadline)?;
    if !head_only {
        write_by(stream, body, deadline)?;
    }
    Ok(())
}

/// Writes all of `bytes` unless `deadline` passes first.
fn write_by(stream: &mut TcpStream, mut bytes: &[u8], deadline: Instant) -> io::Result<()> {
    while !bytes.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        match stream.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Why a GET failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    #[error("{url}: not an http://host:port/path URL")]
    BadUrl { url: String },
    #[error("{url}: {source}")]
    Io { url: String, source: io::Error },
    #[error("{url}: answered {status}")]
    Status { url: String, status: String },
    #[error("{url}: reply larger than {max} bytes")]
    TooLarge { url: String, max: usize },
    #[error("{url}: malformed reply")]
    Malformed { url: String },
}

/// GETs `url` (`http://host:port/path`; no TLS, no chunked replies: what our endpoint
/// serves), within `timeout` in all; the body of a 200 reply.
pub fn get(url: &str, timeout: Duration) -> Result<Vec<u8>, HttpError> {
    let bad = || HttpError::BadUrl { url: url.to_owned() };
    let rest = url.strip_prefix("http://").ok_or_else(bad)?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let io_err = |source: io::Error| HttpError::Io {
        url: url.to_owned(),
        source,
    };
    let deadline = Instant::now() + timeout;
    let addr = authority
        .to_socket_addrs()
        .map_err(io_err)?
        .next()
        .ok_or_else(bad)?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(io_err)?;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nAccept: */*\r\n\r\n");
    write_by(&mut stream, request.as_bytes(), deadline).map_err(io_err)?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 64 << 10];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io_err(io::ErrorKind::TimedOut.into()));
        }
        stream.set_read_timeout(Some(left)).map_err(io_err)?;
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                if reply.len() + n > REPLY_BYTES_MAX {
                    return Err(HttpError::TooLarge {
                        url: url.to_owned(),
                        max: REPLY_BYTES_MAX,
                    });
                }
                reply.extend_from_slice(&chunk[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err(e)),
        }
    }
    let malformed = || HttpError::Malformed { url: url.to_owned() };
    let end = find_blank_line(&reply).ok_or_else(malformed)?;
    let mut body = reply.split_off(end + 4);
    let head = std::str::from_utf8(&reply[..end]).map_err(|_| malformed())?;
    let status = head.lines().next().unwrap_or_default();
    let code = status.split(' ').nth(1).ok_or_else(malformed)?;
    if code != "200" {
        return Err(HttpError::Status {
            url: url.to_owned(),
            status: status.split_once(' ').map_or(status, |s| s.1).to_owned(),
        });
    }
    let length = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())?
    });
    if let Some(length) = length {
        if body.len() < length {
            return Err(malformed());
        }
        body.truncate(length);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        serve(
            listener,
            Arc::new(|path: &str| {
                (path == "/metrics").then(|| Reply {
                    content_type: "text/plain",
                    body: b"x 1\n".to_vec(),
                })
            }),
        )
        .unwrap()
    }

    #[test]
    fn serves_routes_and_refuses_the_rest() {
        let addr = server();
        let t = Duration::from_secs(5);
        assert_eq!(get(&format!("http://{addr}/metrics"), t).unwrap(), b"x 1\n");
        assert_eq!(get(&format!("http://{addr}/metrics?x=1"), t).unwrap(), b"x 1\n");
        let e = get(&format!("http://{addr}/nope"), t).unwrap_err();
        assert!(matches!(e, HttpError::Status { .. }), "{e}");
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"POST /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("HTTP/1.1 405"), "{reply}");
        assert!(get("ftp://x/", t).is_err());
    }

    #[test]
    fn an_endless_head_is_refused_and_silent_peers_time_out() {
        let addr = server();
        let mut s = TcpStream::connect(addr).unwrap();
        let junk = vec![b'a'; REQUEST_HEAD_BYTES_MAX + 10];
        let _ = s.write_all(&junk);
        let mut reply = String::new();
        let _ = s.read_to_string(&mut reply);
        assert!(reply.starts_with("HTTP/1.1 431"), "{reply}");
        // Peers that connect and say nothing hold every slot; a scrape still gets an
        // answer (503 while they hold them, 200 once their deadline passed), never a hang.
        let silent: Vec<TcpStream> = (0..HTTP_CONNECTIONS_MAX)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        let start = Instant::now();
        let first = get(&format!("http://{addr}/metrics"), Duration::from_secs(5));
        assert!(matches!(first, Err(HttpError::Status { .. })), "{first:?}");
        assert!(start.elapsed() < Duration::from_secs(1));
        std::thread::sleep(REQUEST_DEADLINE + Duration::from_millis(200));
        assert_eq!(
            get(&format!("http://{addr}/metrics"), Duration::from_secs(5)).unwrap(),
            b"x 1\n"
        );
        drop(silent);
    }
}
