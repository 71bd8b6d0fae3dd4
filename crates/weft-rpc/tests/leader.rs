//! Replies read by the calling threads themselves (leader/follower on a connection)
//! and small requests run by the server's event loop (`Handler::runs_inline`): many
//! threads' calls interleaved on one connection come back exact, to their own callers,
//! whichever thread read them; a caller that times out breaks the connection and every
//! other waiter hears of it at once; replies nobody waits for yet are read anyway.

mod common;

use common::{auth, timeouts};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_layout::InodeId;
use weft_proto::msg::{Request, Response};
use weft_proto::{ErrorCode, WireError};
use weft_rpc::{Connection, ConnectionId, Handler, ReplySink, RpcError, ServerLimits, SinkReply};

/// `Sync { inode }`: answers with the payload reversed, after `inode % 1000`
/// microseconds (run by a worker); `Truncate { inode, size }` answers `size` bytes of
/// a pattern of `inode` (run by the event loop itself when `size` is at most 64 KiB).
struct Mixed {
    inline_runs: AtomicU64,
}

fn pattern(seed: u64, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i * 7) % 251) as u8)
        .collect()
}

impl Handler for Mixed {
    fn handle(
        &self,
        _connection: ConnectionId,
        request: Request,
        mut data: Vec<u8>,
    ) -> Result<(Response, Vec<u8>), WireError> {
        match request {
            Request::Sync { inode } => {
                std::thread::sleep(Duration::from_micros(inode.0 % 1000));
                data.reverse();
                Ok((Response::Bytes(inode.0), data))
            }
            Request::Truncate { inode, size, .. } => {
                let name = std::thread::current().name().unwrap_or("").to_owned();
                if name.starts_with("weft-loop") {
                    self.inline_runs.fetch_add(1, Ordering::Relaxed);
                }
                Ok((Response::Bytes(size), pattern(inode.0, size)))
            }
            _ => Err(WireError::new(ErrorCode::Unsupported, "not here")),
        }
    }

    fn runs_inline(&self, request: &Request) -> bool {
        matches!(request, Request::Truncate { size, .. } if *size <= 64 * 1024)
    }
}

fn truncate(seed: u64, size: u64) -> Request {
    Request::Truncate {
        inode: InodeId(seed),
        striping: weft_proto::types::Striping {
            stripe_size_bytes: 65536,
            stripe_count: 1,
            server_index: 0,
        },
        size,
    }
}

fn start() -> (String, Arc<Mixed>) {
    let handler = Arc::new(Mixed {
        inline_runs: AtomicU64::new(0),
    });
    let limits = ServerLimits {
        requests_inflight_max: 64,
        ..ServerLimits::default()
    };
    let server = common::start(handler.clone(), 9, limits);
    (server.local_addr.to_string(), handler)
}

#[test]
fn many_threads_small_calls_on_one_connection_come_back_exact_to_their_callers() {
    let (addr, handler) = start();
    let c = Connection::connect(&addr, "test", &auth(), timeouts(20_000)).unwrap();
    let threads = 8u64;
    let calls = 300u64;
    std::thread::scope(|s| {
        for t in 0..threads {
            let c = &c;
            s.spawn(move || {
                for k in 0..calls {
                    let seed = t * 1_000_000 + k * 1000 + (k * 37 + t * 11) % 900;
                    match k % 4 {
                        // A worker's answer, payload checked.
                        0 | 1 => {
                            let payload = pattern(seed, 1 + (seed % 5000));
                            let (resp, data) =
                                c.call(&Request::Sync { inode: InodeId(seed) }, &payload).unwrap();
                            assert_eq!(resp, Response::Bytes(seed));
                            let mut want = payload;
                            want.reverse();
                            assert_eq!(data, want, "thread {t} call {k}");
                        }
                        // The loop's answer, into a vector.
                        2 => {
                            let size = 1 + seed % 65536;
                            let (resp, data) = c.call(&truncate(seed, size), &[]).unwrap();
                            assert_eq!(resp, Response::Bytes(size));
                            assert_eq!(data, pattern(seed, size), "thread {t} call {k}");
                        }
                        // The loop's answer, straight into a sink; two calls in flight.
                        _ => {
                            let size = 4096;
                            let mut a = vec![0u8; size];
                            let mut b = vec![0u8; size + 1];
                            // SAFETY: the buffers outlive the calls, waited for below.
                            let sa = unsafe { ReplySink::new(vec![(a.as_mut_ptr(), size)]) };
                            let sb = unsafe { ReplySink::new(vec![(b.as_mut_ptr(), size + 1)]) };
                            let pa = c.send_into(&truncate(seed, size as u64), &[], sa).unwrap();
                            let pb = c
                                .send_into(&truncate(seed + 1, size as u64 + 1), &[], sb)
                                .unwrap();
                            assert!(matches!(pb.wait_sink().unwrap(), SinkReply::Filled(_)));
                            assert!(matches!(pa.wait_sink().unwrap(), SinkReply::Filled(_)));
                            assert_eq!(a, pattern(seed, size as u64), "thread {t} call {k}");
                            assert_eq!(b, pattern(seed + 1, size as u64 + 1), "thread {t} call {k}");
                        }
                    }
                }
            });
        }
    });
    assert!(!c.is_broken());
    // The quick requests ran on the event loop, not on workers.
    assert!(handler.inline_runs.load(Ordering::Relaxed) >= threads * calls / 2);
}

/// `Sync { inode }` sleeps `inode` milliseconds.
struct Sleepy;

impl Handler for Sleepy {
    fn handle(
        &self,
        _connection: ConnectionId,
        request: Request,
        data: Vec<u8>,
    ) -> Result<(Response, Vec<u8>), WireError> {
        match request {
            Request::Sync { inode } => {
                std::thread::sleep(Duration::from_millis(inode.0));
                Ok((Response::Bytes(inode.0), data))
            }
            _ => Err(WireError::new(ErrorCode::Unsupported, "not here")),
        }
    }
}

#[test]
fn a_reply_after_its_caller_timed_out_fails_every_waiter_at_once_and_nothing_later() {
    let server = common::start(Arc::new(Sleepy), 3, ServerLimits::default());
    let addr = server.local_addr.to_string();
    let c = Connection::connect(&addr, "test", &auth(), timeouts(300)).unwrap();
    std::thread::scope(|s| {
        // The first thread reads the connection (its call is alone at first) and
        // times out; the second waits for an answer due after that.
        let first = s.spawn(|| {
            let started = Instant::now();
            (
                c.call(&Request::Sync { inode: InodeId(1000) }, b"a"),
                started.elapsed(),
            )
        });
        std::thread::sleep(Duration::from_millis(100));
        let second = s.spawn(|| {
            let started = Instant::now();
            (
                c.call(&Request::Sync { inode: InodeId(600) }, b"b"),
                started.elapsed(),
            )
        });
        let (r1, t1) = first.join().unwrap();
        let (r2, t2) = second.join().unwrap();
        assert!(matches!(r1, Err(RpcError::TimedOut { .. })), "{r1:?}");
        assert!(t1 < Duration::from_millis(1000), "the leader waited {t1:?}");
        // The second call fails with the connection when the first timed out (about
        // 200 ms after it began), not at its own timeout or its late answer.
        match r2 {
            Err(RpcError::Disconnected { reason, .. }) => {
                assert!(
                    reason.contains("no answer within the request timeout"),
                    "{reason}"
                )
            }
            other => panic!("expected the connection's failure, got {other:?}"),
        }
        assert!(t2 < Duration::from_millis(300), "the follower waited {t2:?}");
    });
    assert!(c.is_broken());
    // The late answers come to a closed connection; a new one is served.
    let fresh = Connection::connect(&addr, "test", &auth(), timeouts(2000)).unwrap();
    assert_eq!(
        fresh.call(&Request::Sync { inode: InodeId(1) }, b"xyz").unwrap(),
        (Response::Bytes(1), b"xyz".to_vec())
    );
}

#[test]
fn replies_nobody_waits_for_are_read_and_a_closed_idle_connection_is_noticed() {
    // A server that drops a connection whose replies cannot be written for 1.5 s (the
    // watcher of a connection idle so far looks within 0.5 s, then every 50 ms).
    let limits = ServerLimits {
        send_timeout: Duration::from_millis(1500),
        ..ServerLimits::default()
    };
    let server = common::start(Arc::new(Sleepy), 4, limits);
    let addr = server.local_addr.to_string();
    let a = Connection::connect(&addr, "test", &auth(), timeouts(5000)).unwrap();
    let b = Connection::connect(&addr, "test", &auth(), timeouts(5000)).unwrap();
    // A large answer on `a` (more than the socket buffers hold) that nobody waits for
    // while this thread waits on `b` for longer than the server's send timeout: the
    // watcher reads it meanwhile, else the server would drop `a`.
    let big = vec![0x5au8; 8 << 20];
    let on_a = a.send(&Request::Sync { inode: InodeId(0) }, &big).unwrap();
    assert_eq!(
        b.call(&Request::Sync { inode: InodeId(2500) }, &[]).unwrap().0,
        Response::Bytes(2500)
    );
    let (resp, data) = on_a.wait().unwrap();
    assert_eq!(resp, Response::Bytes(0));
    assert!(data == big);
    // A call dropped unanswered: its late answer is skipped by the next reader.
    drop(a.send(&Request::Sync { inode: InodeId(50) }, b"late").unwrap());
    assert_eq!(
        a.call(&Request::Sync { inode: InodeId(0) }, b"now").unwrap(),
        (Response::Bytes(0), b"now".to_vec())
    );
    assert!(!a.is_broken());
    // The server ends an idle connection (its idle timeout): noticed with nobody
    // waiting on it, so a pool would connect afresh rather than send into it.
    let idle = common::start(
        Arc::new(Sleepy),
        5,
        ServerLimits {
            idle_timeout: Duration::from_millis(200),
            ..ServerLimits::default()
        },
    );
    let c = Connection::connect(&idle.local_addr.to_string(), "test", &auth(), timeouts(5000)).unwrap();
    let started = Instant::now();
    while !c.is_broken() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "an idle close was never noticed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn large_replies_read_by_the_watcher_mix_with_small_calls_read_by_their_callers() {
    let (addr, _) = start();
    let conns: Vec<_> = (0..3)
        .map(|_| Connection::connect(&addr, "test", &auth(), timeouts(20_000)).unwrap())
        .collect();
    std::thread::scope(|s| {
        // One thread sends a large read on every connection, then waits for each in
        // turn (as the client's data path does), into sinks and into vectors.
        let conns_big = &conns;
        s.spawn(move || {
            for round in 0..20u64 {
                let size = weft_rpc::BIG_REPLY_BYTES + round * 4099;
                let mut bufs: Vec<Vec<u8>> = conns_big.iter().map(|_| vec![0u8; size as usize]).collect();
                let mut calls = Vec::new();
                for (k, (c, buf)) in conns_big.iter().zip(bufs.iter_mut()).enumerate() {
                    let seed = round * 100 + k as u64;
                    // SAFETY: each buffer outlives its call, waited for below.
                    let sink = unsafe { ReplySink::new(vec![(buf.as_mut_ptr(), buf.len())]) };
                    calls.push((seed, c.send_into(&truncate(seed, size), &[], sink).unwrap()));
                }
                let plain: Vec<_> = conns_big
                    .iter()
                    .enumerate()
                    .map(|(k, c)| {
                        let seed = round * 100 + 50 + k as u64;
                        (seed, c.send_expecting(&truncate(seed, size), size).unwrap())
                    })
                    .collect();
                for (seed, call) in calls {
                    assert!(
                        matches!(call.wait_sink().unwrap(), SinkReply::Filled(_)),
                        "round {round}"
                    );
                    let _ = seed;
                }
                for (k, buf) in bufs.iter().enumerate() {
                    assert!(
                        *buf == pattern(round * 100 + k as u64, size),
                        "round {round} sink {k}"
                    );
                }
                for (seed, call) in plain {
                    let (_, data) = call.wait().unwrap();
                    assert!(data == pattern(seed, size), "round {round} seed {seed}");
                }
            }
        });
        // Small calls on the same connections meanwhile.
        for t in 0..3u64 {
            let conns = &conns;
            s.spawn(move || {
                for k in 0..200u64 {
                    let c = &conns[((t + k) % 3) as usize];
                    let seed = 7_000_000 + t * 10_000 + k;
                    let payload = pattern(seed, 100 + k);
                    let (_, data) = c
                        .call(
                            &Request::Sync {
                                inode: InodeId(seed % 200),
                            },
                            &payload,
                        )
                        .unwrap();
                    let mut want = payload;
                    want.reverse();
                    assert_eq!(data, want, "thread {t} call {k}");
                }
            });
        }
    });
    assert!(conns.iter().all(|c| !c.is_broken()));
}
