//! Requests that change overlapping bytes of one object run in the order they arrived
//! (`Handler::changes`), whichever connection they came on, while requests on other
//! bytes or objects go on meanwhile; a conflicting quick request is never waited for
//! on the event loop. Quick requests the loop would have to wait for
//! (`Handler::try_inline`) are served by a worker.

mod common;

use common::{auth, timeouts};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weft_layout::InodeId;
use weft_proto::msg::{Request, Response};
use weft_proto::{ErrorCode, WireError};
use weft_proto::{Range, Striping};
use weft_rpc::{Changes, Connection, ConnectionId, Handler, Inline, ServerLimits};

/// `Write { inode, ranges: [range] }` changes `range` of object `inode`: logs its start
/// and end (by its first data byte) and sleeps a millisecond per byte of data between.
/// Writes of at most 16 bytes are run by the event loop.
#[derive(Default)]
struct Recorder {
    log: Mutex<Vec<(&'static str, u8, bool)>>,
}

impl Recorder {
    fn events(&self) -> Vec<(&'static str, u8, bool)> {
        self.log.lock().unwrap().clone()
    }

    fn position(&self, what: &'static str, id: u8) -> usize {
        self.events()
            .iter()
            .position(|e| e.0 == what && e.1 == id)
            .unwrap_or_else(|| panic!("no {what} of {id} in {:?}", self.events()))
    }
}

impl Handler for Recorder {
    fn handle(
        &self,
        _connection: ConnectionId,
        request: Request,
        data: Vec<u8>,
    ) -> Result<(Response, Vec<u8>), WireError> {
        let Request::Write { .. } = request else {
            return Err(WireError::new(ErrorCode::Unsupported, "not here"));
        };
        let on_loop = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("weft-loop"));
        self.log.lock().unwrap().push(("start", data[0], on_loop));
        std::thread::sleep(Duration::from_millis(data.len() as u64));
        self.log.lock().unwrap().push(("end", data[0], on_loop));
        Ok((Response::Bytes(data.len() as u64), Vec::new()))
    }

    fn runs_inline(&self, request: &Request) -> bool {
        matches!(request, Request::Write { ranges, .. } if ranges[0].len <= 16)
    }

    fn changes(&self, _connection: ConnectionId, request: &Request) -> Option<Changes> {
        match request {
            Request::Write { inode, ranges, .. } => {
                let r = ranges[0];
                Some(Changes::new(inode.0, vec![(r.offset, r.offset + r.len)]))
            }
            _ => None,
        }
    }
}

fn write(inode: u64, offset: u64, len: u64) -> Request {
    Request::Write {
        inode: InodeId(inode),
        striping: Striping {
            stripe_size_bytes: 65536,
            stripe_count: 1,
            server_index: 0,
        },
        ranges: vec![Range { offset, len }],
    }
}

#[test]
fn overlapping_writes_run_in_arrival_order_and_others_go_on_meanwhile() {
    let handler = Arc::new(Recorder::default());
    let server = common::start(handler.clone(), 5, ServerLimits::default());
    let addr = server.local_addr.to_string();
    let connect = || Connection::connect(&addr, "test", &auth(), timeouts(10_000)).unwrap();
    let (a, b, c, d) = (connect(), connect(), connect(), connect());
    std::thread::scope(|s| {
        // 1: bytes [0, 100) of object 1, for 600 ms, on a worker.
        let first = s.spawn(|| a.call(&write(1, 0, 100), &[1u8; 600]).unwrap());
        while handler.events().is_empty() {
            std::thread::sleep(Duration::from_millis(5));
        }
        // 2: bytes of 1 again, on another connection: after 1, and (quick, but behind
        // a running request) not on the loop.
        let second = s.spawn(|| b.call(&write(1, 50, 10), &[2u8; 10]).unwrap());
        std::thread::sleep(Duration::from_millis(50));
        // 3: other bytes of the same object (loop), 4: another object (worker).
        assert_eq!(
            c.call(&write(1, 100, 10), &[3u8; 10]).unwrap().0,
            Response::Bytes(10)
        );
        assert_eq!(
            d.call(&write(2, 0, 100), &[4u8; 20]).unwrap().0,
            Response::Bytes(20)
        );
        first.join().unwrap();
        second.join().unwrap();
    });
    let events = handler.events();
    eprintln!("{events:?}");
    let at = |what, id| handler.position(what, id);
    assert!(
        at("end", 1) < at("start", 2),
        "2 overlapped 1 and ran before it ended"
    );
    assert!(
        at("end", 3) < at("end", 1),
        "3 touched other bytes, yet waited for 1"
    );
    assert!(
        at("end", 4) < at("end", 1),
        "4 touched another object, yet waited for 1"
    );
    let on_loop = |id| events.iter().find(|e| e.1 == id).unwrap().2;
    assert!(
        !on_loop(2),
        "a quick request behind another waited on the event loop"
    );
    assert!(
        on_loop(3),
        "a quick request with nothing to wait for left the loop"
    );
}

/// `Truncate { size }`: the loop serves even sizes itself and would have to wait for
/// odd ones (`try_inline`), which `handle` then serves on a worker.
#[derive(Default)]
struct Picky {
    on_loop: AtomicU64,
    on_worker: AtomicU64,
}

fn reply(size: u64) -> (Response, Vec<u8>) {
    (Response::Bytes(size), vec![(size % 251) as u8; size as usize])
}

impl Handler for Picky {
    fn handle(
        &self,
        _connection: ConnectionId,
        request: Request,
        _data: Vec<u8>,
    ) -> Result<(Response, Vec<u8>), WireError> {
        let Request::Truncate { size, .. } = request else {
            return Err(WireError::new(ErrorCode::Unsupported, "not here"));
        };
        let name = std::thread::current().name().unwrap_or("").to_owned();
        assert!(name.starts_with("weft-worker"), "handled on {name}");
        self.on_worker.fetch_add(1, Ordering::Relaxed);
        Ok(reply(size))
    }

    fn runs_inline(&self, request: &Request) -> bool {
        matches!(request, Request::Truncate { .. })
    }

    fn try_inline(&self, _connection: ConnectionId, request: &Request, _data: &[u8]) -> Inline {
        match request {
            Request::Truncate { size, .. } if size % 2 == 0 => {
                self.on_loop.fetch_add(1, Ordering::Relaxed);
                Inline::Done(Ok(reply(*size)))
            }
            Request::Truncate { .. } => Inline::WouldBlock,
            _ => Inline::NotTried,
        }
    }
}

#[test]
fn quick_requests_that_would_wait_are_served_by_a_worker() {
    let handler = Arc::new(Picky::default());
    let server = common::start(handler.clone(), 6, ServerLimits::default());
    let c = Connection::connect(&server.local_addr.to_string(), "test", &auth(), timeouts(10_000)).unwrap();
    for size in 1..=200u64 {
        let request = Request::Truncate {
            inode: InodeId(size),
            striping: Striping {
                stripe_size_bytes: 65536,
                stripe_count: 1,
                server_index: 0,
            },
            size,
        };
        assert_eq!(c.call(&request, &[]).unwrap(), reply(size));
    }
    assert_eq!(handler.on_loop.load(Ordering::Relaxed), 100);
    assert_eq!(handler.on_worker.load(Ordering::Relaxed), 100);
}
