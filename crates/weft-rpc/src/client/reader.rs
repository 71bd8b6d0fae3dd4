//! Reading replies off a connection: one frame at a time to its waiter (straight into
//! a reply sink or the read pool's buffers), and the watcher thread that reads while no
//! caller does (large replies, idle connections).

use super::waiters::{fail_all, step_down, Delivery, Notice, PendingTable, ReplySink, Waiter};
use crate::error::RpcError;
use crate::frame_io::{read_exact_vec, read_header, ReadFrameError};
use crate::shm::Lease;
use crate::stream::Stream;
use std::net::Shutdown;
use std::sync::Mutex;
use std::time::Duration;
use weft_proto::frame::PROTOCOL_VERSION;
use weft_proto::msg::{decode_result, Response};

/// Reads one frame off the connection and hands it to the call it answers (the
/// late answer of a call given up on is read and dropped, its region freed).
/// Returns the id it answered; Err: the connection must end, for this reason.
pub(super) fn read_frame(
    stream: &mut Stream,
    addr: &str,
    pending: &Mutex<PendingTable>,
) -> Result<u64, String> {
    let header = match read_header(stream) {
        Ok(h) => h,
        Err(ReadFrameError::Closed) => return Err("server closed the connection".to_owned()),
        Err(ReadFrameError::Io(e)) => return Err(e.to_string()),
        Err(ReadFrameError::Header(e)) => return Err(format!("bad frame from server: {e}")),
    };
    let message = read_exact_vec(stream, header.message_len as u64).map_err(|e| e.to_string())?;
    // A server of another version refuses our handshake in its own version; its
    // message may be encoded differently, so only the header's version is trusted.
    let reply = match decode_result(&message) {
        _ if header.version != PROTOCOL_VERSION => Err(RpcError::ProtocolVersion {
            addr: addr.to_owned(),
            server_version: header.version,
        }),
        Ok(Ok(response)) => Ok(response),
        Ok(Err(error)) => Err(RpcError::Remote {
            addr: addr.to_owned(),
            error,
        }),
        Err(e) => Err(RpcError::Protocol {
            addr: addr.to_owned(),
            detail: format!("undecodable response: {e}"),
        }),
    };
    // Request id 0 is no request: the server tells why it drops the connection.
    if header.request_id == 0 {
        return Err(match reply {
            Err(RpcError::Remote { error, .. }) => format!("the server dropped the connection: {error}"),
            Err(e) => e.to_string(),
            Ok(other) => format!("unexpected frame from server: {other:?}"),
        });
    }
    let waiter = {
        let mut table = pending.lock().unwrap();
        table.quiet_since = std::time::Instant::now();
        table.late.remove(&header.request_id);
        table.late_pool.remove(&header.request_id);
        table.take(header.request_id)
    };
    let (waiter, reply) = match reply {
        Ok(Response::ShmPlaced { data_len, response }) => {
            if header.data_len != 0 {
                return Err("bad frame from server: a shared-memory reply with data in the frame".to_owned());
            }
            if let Some(waiter) = waiter {
                let answer = match waiter.pool_hold {
                    // Placed in the pool buffers the sink names: nothing to copy.
                    Some(_) if waiter.sink.as_ref().is_some_and(|s| s.total == data_len) => Ok(Delivery {
                        response: *response,
                        data: None,
                    }),
                    Some(_) => Err(RpcError::Protocol {
                        addr: addr.to_owned(),
                        detail: format!(
                            "a read placed into the pool with {data_len} bytes, not the pieces' length"
                        ),
                    }),
                    None => placed(addr, *response, data_len, waiter.lease, waiter.sink),
                };
                let _ = waiter.sender.try_send(Notice::Reply(answer));
            }
            return Ok(header.request_id);
        }
        other => (waiter, other),
    };
    let (delivery, failed) = match (waiter, reply) {
        (
            Some(Waiter {
                sender,
                sink: Some(mut sink),
                ..
            }),
            Ok(response),
        ) if sink.total == header.data_len => match sink.fill(stream) {
            Ok(()) => (Some((sender, Ok(Delivery { response, data: None }))), None),
            Err(e) => {
                let reason = e.to_string();
                let error = RpcError::Disconnected {
                    addr: addr.to_owned(),
                    reason: reason.clone(),
                };
                (Some((sender, Err(error))), Some(reason))
            }
        },
        (waiter, reply) => match read_exact_vec(stream, header.data_len) {
            Ok(data) => {
                let reply = reply.map(|response| Delivery {
                    response,
                    data: Some(data),
                });
                (waiter.map(|w| (w.sender, reply)), None)
            }
            Err(e) => {
                let reason = e.to_string();
                let error = RpcError::Disconnected {
                    addr: addr.to_owned(),
                    reason: reason.clone(),
                };
                (waiter.map(|w| (w.sender, Err(error))), Some(reason))
            }
        },
    };
    if let Some((sender, reply)) = delivery {
        let _ = sender.try_send(Notice::Reply(reply));
    }
    match failed {
        Some(reason) => Err(reason),
        None => Ok(header.request_id),
    }
}

/// Whether the socket `fd` has something to read now (or `events`), without waiting.
/// Whether the socket has something to read (or ended) within `wait`.
fn wait_readable(fd: std::os::fd::RawFd, wait: Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one pollfd of a descriptor the caller keeps open.
    let n = unsafe { libc::poll(&mut p, 1, wait.as_millis() as libc::c_int) };
    n != 0
}

pub(super) fn ready(fd: std::os::fd::RawFd, events: libc::c_short) -> bool {
    let mut fd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one pollfd of a descriptor the caller keeps open, no waiting.
    let n = unsafe { libc::poll(&mut fd, 1, 0) };
    n > 0 && fd.revents & (events | libc::POLLHUP | libc::POLLERR) != 0
}

/// Unless a thread reads the connection already, reads the frames that are there now
/// (up to the end, when the server closed it), handing each to its call.
pub(super) fn read_ready(
    reader: &Mutex<Stream>,
    pending: &Mutex<PendingTable>,
    addr: &str,
    timeout: Duration,
) {
    {
        let mut table = pending.lock().unwrap();
        if table.leader || table.broken.is_some() {
            return;
        }
        table.leader = true;
    }
    let mut stream = reader.lock().unwrap();
    // A frame begun is read whole, each wait bounded by the request timeout.
    stream.set_read_timeout(Some(timeout)).ok();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&*stream);
    while ready(fd, libc::POLLIN | libc::POLLRDHUP) {
        if let Err(reason) = read_frame(&mut stream, addr, pending) {
            fail_all(pending, addr, &reason);
            stream.shutdown(Shutdown::Both).ok();
            break;
        }
    }
    drop(stream);
    step_down(pending);
}

/// How often the watcher looks at a connection with calls outstanding: a reply that
/// nobody waits for yet (its caller waits on another connection first) is read within
/// this, so the server never finds its replies unread for long.
pub(super) const WATCH_BUSY: Duration = Duration::from_millis(50);

/// How often it looks at a connection with nothing outstanding, for a server that
/// closed it (`is_broken` also looks, at once).
pub(super) const WATCH_IDLE: Duration = Duration::from_millis(500);

/// Replies expected to be at least this large are read by the watcher rather than by
/// their callers' threads (`Connection`).
pub const BIG_REPLY_BYTES: u64 = 256 * 1024;

/// A connection silent this long with calls waiting has its server probed (a fresh
/// connection's first handshake step); one that answers neither that probe nor a
/// second one, each within `probe_wait`, fails its calls at once, not at the request
/// timeout. So a stopped
/// or hung server costs a few seconds, not a minute (a killed one closes the
/// connection, which fails the calls at once anyway).
pub const PROBE_AFTER: Duration = Duration::from_secs(2);

/// How long a probe waits for its answer: `WEFT_PROBE_WAIT_MS`, else 5 s.
fn probe_wait() -> Duration {
    static WAIT: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *WAIT.get_or_init(|| {
        std::env::var("WEFT_PROBE_WAIT_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(|ms| Duration::from_millis(ms.clamp(100, 600_000)))
            .unwrap_or(Duration::from_secs(5))
    })
}

/// Probes the server of a connection silent for `PROBE_AFTER` with calls waiting
/// (shorter than the request timeout); a server that answers neither probe ends the
/// connection, failing every call on it with why, unless it is a process on this
/// machine that runs (`stream::peer_runs`: busy, not stopped or gone).
fn liveness(
    pending: &Mutex<PendingTable>,
    control: &Stream,
    (addr, target): (&str, &str),
    timeout: Duration,
) {
    let silent = {
        let table = pending.lock().unwrap();
        !table.waiters.is_empty() && table.quiet_since.elapsed() >= PROBE_AFTER
    };
    if !silent || timeout <= PROBE_AFTER {
        return;
    }
    let asked = std::time::Instant::now();
    let mut verdict = crate::auth::probe_alive(target, addr, probe_wait());
    if matches!(verdict, Err(RpcError::TimedOut { .. })) && pending.lock().unwrap().quiet_since < asked {
        // A second probe before giving up: a machine so loaded that neither the
        // server's loops nor this process ran for a whole wait (seen on 2-core CI
        // machines, several tests at once) is no stopped server, and the calls are
        // worth a few more seconds; a stopped one fails them after two waits.
        verdict = crate::auth::probe_alive(target, addr, probe_wait());
    }
    let mut table = pending.lock().unwrap();
    // A reply on this connection while the probe waited: the server is alive, only
    // slow to take new connections (a machine so loaded that its accepting thread did
    // not run for the probe's wait); its calls go on waiting.
    let answered_meanwhile = table.quiet_since >= asked;
    match verdict {
        // Not again before another quiet spell.
        Ok(()) => table.quiet_since = std::time::Instant::now(),
        Err(_) if answered_meanwhile => {}
        // A server on this machine whose process runs (not stopped, not gone) is busy,
        // not hung: its loops waited for the disk or the CPU for both waits (seen on
        // 2-core CI machines: an fsync behind other tests' gigabytes). Its calls wait
        // on, bounded by the request timeout; probed again after another quiet spell.
        Err(_) if crate::stream::peer_runs(control) => table.quiet_since = std::time::Instant::now(),
        Err(why) if !table.waiters.is_empty() && table.broken.is_none() => {
            drop(table);
            super::suspects::suspect(addr);
            let why = match why {
                RpcError::TimedOut { after_ms, .. } => format!(
                    "it accepted a new connection but did not answer its first handshake step \
                     within {after_ms} ms (stopped or hung?)"
                ),
                other => other.to_string(),
            };
            fail_all(pending, addr, &format!("the server does not answer: {why}"));
            // Ends a thread blocked reading it.
            control.shutdown(Shutdown::Both).ok();
        }
        Err(_) => {}
    }
}

/// The watcher thread of a connection: reads what nobody else does, and the connection
/// whenever a large reply is due, probes a silent server (`liveness`), until the
/// connection ends.
pub(super) fn watch(
    reader: &Mutex<Stream>,
    pending: &Mutex<PendingTable>,
    control: &Stream,
    names: (&str, &str),
    timeout: Duration,
) {
    let addr = names.0;
    // The socket's, through this thread's own descriptor of it: taking `reader`'s lock
    // here waited for a call leading the reading (a whole request timeout when the
    // server hung), and with it every probe.
    let fd = std::os::fd::AsRawFd::as_raw_fd(control);
    loop {
        liveness(pending, control, names, timeout);
        let table = pending.lock().unwrap();
        let period = if table.waiters.is_empty() {
            WATCH_IDLE
        } else {
            WATCH_BUSY
        };
        let wake = table.watch.clone();
        let (mut table, _) = wake
            .wait_timeout_while(table, period, |t| {
                !(t.stopped || t.broken.is_some() || (t.big > 0 && !t.leader))
            })
            .unwrap();
        if table.stopped || table.broken.is_some() {
            return;
        }
        if table.leader {
            continue;
        }
        if table.big > 0 {
            // Read until no large reply is due. The callers' own deadlines end a
            // stalled wait (they break the connection); the margin lets them, so that
            // they fail with their timeout rather than with this read's.
            table.leader = true;
            drop(table);
            let mut stream = reader.lock().unwrap();
            stream
                .set_read_timeout(Some(timeout + Duration::from_secs(1)))
                .ok();
            loop {
                // Between frames, wait for the next one's first bytes probing a silent
                // server (a large reply from a stopped one was waited for a whole
                // request timeout: this thread was reading it, not probing).
                let waited = std::time::Instant::now();
                while !wait_readable(fd, WATCH_BUSY) {
                    liveness(pending, control, names, timeout);
                    let t = pending.lock().unwrap();
                    if t.broken.is_some() || t.stopped || waited.elapsed() > timeout {
                        break;
                    }
                }
                if let Err(reason) = read_frame(&mut stream, addr, pending) {
                    fail_all(pending, addr, &reason);
                    stream.shutdown(Shutdown::Both).ok();
                    break;
                }
                if pending.lock().unwrap().big == 0 {
                    break;
                }
            }
            drop(stream);
            step_down(pending);
            continue;
        }
        drop(table);
        if ready(fd, libc::POLLIN | libc::POLLRDHUP) {
            read_ready(reader, pending, addr, timeout);
        }
    }
}

/// The answer to a `ShmCall` whose reply data the server put at the start of the
/// call's region: copied into the sink when it has that length, else into a vector.
pub(super) fn placed(
    addr: &str,
    response: Response,
    data_len: u64,
    lease: Option<Lease>,
    sink: Option<ReplySink>,
) -> Result<Delivery, RpcError> {
    let Some(lease) = lease.filter(|l| data_len <= l.region().len()) else {
        return Err(RpcError::Protocol {
            addr: addr.to_owned(),
            detail: format!(
                "a shared-memory reply of {data_len} bytes to a call without a region that large"
            ),
        });
    };
    let region = lease.region();
    match sink {
        Some(sink) if sink.total == data_len => {
            // SAFETY: the sink's parts are ours to write until the call is answered
            // (contract of `ReplySink::new`); their total fits the region (checked).
            unsafe { region.read_into_parts(&sink.parts) };
            Ok(Delivery { response, data: None })
        }
        _ => {
            let mut data = vec![0u8; data_len as usize];
            region.read_at(0, &mut data);
            Ok(Delivery {
                response,
                data: Some(data),
            })
        }
    }
}
