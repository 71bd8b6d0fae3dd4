//! A server that is down, killed or hung, makes client calls fail within a bounded time
//! with an error that names the server; nothing hangs, and a resumed server serves the
//! same client again.
//!
//! This file is its own test binary because it shortens the client timeouts through
//! the environment (`WEFT_TIMEOUT_MS`), which must not leak into other tests. The
//! servers inherit it too, which only bounds their calls to each other as well.

mod common;

use common::expect_code;
use std::sync::Once;
use std::time::{Duration, Instant};
use weft_client::{Client, ClientError, ErrorCode, File, OpenOptions};
use weft_testkit::TestCluster;

const TIMEOUT_MS: u64 = 1500;
/// What a failing call may take beyond the request timeout: scheduling on a busy
/// 2-core machine, not another timeout.
const SLACK: Duration = Duration::from_millis(2500);

fn init() -> TestCluster {
    static ENV: Once = Once::new();
    // Every test calls this first, before any thread of its own or any child exists.
    ENV.call_once(|| {
        std::env::set_var("WEFT_TIMEOUT_MS", TIMEOUT_MS.to_string());
        std::env::set_var("WEFT_CONNECT_TIMEOUT_MS", TIMEOUT_MS.to_string());
    });
    TestCluster::start()
}

/// Runs `call`, which must fail within `limit`; returns its error.
#[track_caller]
fn fails_within<T>(
    what: &str,
    limit: Duration,
    call: impl FnOnce() -> Result<T, ClientError>,
) -> ClientError {
    let started = Instant::now();
    let result = call();
    let took = started.elapsed();
    let error = match result {
        Ok(_) => panic!("{what}: succeeded although a server is down"),
        Err(e) => e,
    };
    eprintln!("{what}: failed after {} ms: {error}", took.as_millis());
    assert!(took <= limit, "{what}: took {took:?}, more than {limit:?}");
    error
}

fn file_over_all_servers(client: &Client, path: &str) -> File {
    let file = client.create(path, &Default::default()).unwrap();
    assert_eq!(file.layout().servers.len(), 4);
    file.write_at(0, &common::pattern(1, 0, 1 << 20)).unwrap();
    file.sync().unwrap();
    file
}

#[test]
fn a_killed_io_server_fails_calls_at_once_naming_it() {
    let cluster = init();
    let client = cluster.client();
    let file = file_over_all_servers(&client, "/f");
    let dead = cluster.addr(3);
    cluster.kill9(3);
    let fast = Duration::from_secs(3);
    let mut buf = vec![0u8; 1 << 20];
    for error in [
        fails_within("read through an open file", fast, || file.read_at(0, &mut buf)),
        fails_within("write through an open file", fast, || {
            file.write_at(0, &[7u8; 300_000])
        }),
        fails_within("sync", fast, || file.sync()),
        fails_within("stat from a new client", fast, || {
            Client::connect_with(&cluster.meta_addr(), cluster.auth())?.stat("/f")
        }),
    ] {
        assert!(error.to_string().contains(&dead), "{error} does not name {dead}");
        assert_eq!(error.code(), ErrorCode::Unavailable, "{error}");
    }
    // A read that needs no byte of the dead server still works (beyond the bytes the
    // failed write may have changed on the live servers).
    let stripe = file.layout().stripe_size_bytes;
    let dead_index = file.layout().servers.iter().position(|s| s.0 == 3).unwrap() as u64;
    let elsewhere = 2 * 4 * stripe + ((dead_index + 1) % 4) * stripe;
    assert!(elsewhere > 300_000);
    let mut some = vec![0u8; 100];
    assert_eq!(file.read_at(elsewhere, &mut some).unwrap(), 100);
    assert_eq!(some, common::pattern(1, elsewhere, 100));
    // statfs reports the unreachable server without failing as a whole.
    let stats = client.statfs().unwrap();
    for (server, result) in stats.servers {
        match result {
            Ok(_) => assert_ne!(server.addr, dead),
            Err(e) => {
                assert_eq!(server.addr, dead);
                assert!(e.to_string().contains(&dead), "{e}");
            }
        }
    }
}

#[test]
fn a_hung_io_server_times_out_naming_it_and_serves_again_when_resumed() {
    let cluster = init();
    let client = cluster.client();
    let file = file_over_all_servers(&client, "/f");
    let hung = cluster.addr(2);
    common::hang(&cluster, 2);
    let bound = Duration::from_millis(TIMEOUT_MS) + SLACK;
    let mut buf = vec![0u8; 1 << 20];
    let read = fails_within("read from a hung server", bound, || file.read_at(0, &mut buf));
    assert_eq!(read.code(), ErrorCode::TimedOut, "{read}");
    // Enough data to fill the socket buffers: the send itself must not block forever.
    let write = fails_within("large write to a hung server", bound, || {
        file.write_at(0, &common::pattern(2, 0, 8 << 20))
    });
    let sync = fails_within("sync on a hung server", bound, || file.sync());
    let stat = fails_within("stat from a new client", bound + bound, || {
        Client::connect_with(&cluster.meta_addr(), cluster.auth())?.stat("/f")
    });
    for error in [&read, &write, &sync, &stat] {
        assert!(error.to_string().contains(&hung), "{error} does not name {hung}");
        assert!(
            matches!(error.code(), ErrorCode::TimedOut | ErrorCode::Unavailable),
            "{error}"
        );
    }

    cluster.signal(2, libc::SIGCONT);
    // The same handle works again; the write that timed out may or may not have
    // landed, so write again and check.
    let data = common::pattern(3, 0, 2 << 20);
    common::wait_for("the resumed server to answer", Duration::from_secs(10), || {
        file.write_at(0, &data).ok()
    });
    file.sync().unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(file.read_at(0, &mut back).unwrap(), data.len());
    assert!(back == data, "data after resuming differs");
}

#[test]
fn a_killed_manager_fails_calls_at_once_naming_it() {
    let cluster = init();
    let client = cluster.client();
    let file = file_over_all_servers(&client, "/f");
    // Read and written once, so that the handle holds its capabilities (granted by the
    // manager, valid for their lifetime without it).
    file.write_at(0, b"before").unwrap();
    file.read_at(0, &mut [0u8; 6]).unwrap();
    let meta = cluster.meta_addr();
    let auth = cluster.auth();
    cluster.kill9(0);
    let fast = Duration::from_secs(3);
    for error in [
        fails_within("stat", fast, || client.stat("/f")),
        fails_within("mkdir", fast, || client.mkdir("/d", 0o755)),
        fails_within("truncate", fast, || file.truncate(0)),
        fails_within("connect", fast, || Client::connect_with(&meta, auth.clone())),
    ] {
        assert!(error.to_string().contains(&meta), "{error} does not name {meta}");
        assert_eq!(error.code(), ErrorCode::Unavailable, "{error}");
    }
    // The manager is not on the data path: an open file that holds its capabilities
    // still reads and writes (until they expire).
    file.write_at(5, b"data path").unwrap();
    let mut buf = [0u8; 9];
    file.read_at(5, &mut buf).unwrap();
    assert_eq!(&buf, b"data path");
}

#[test]
fn a_hung_manager_times_out_naming_it() {
    let cluster = init();
    let client = cluster.client();
    client.mkdir("/d", 0o755).unwrap();
    let meta = cluster.meta_addr();
    let auth = cluster.auth();
    common::hang(&cluster, 0);
    let bound = Duration::from_millis(TIMEOUT_MS) + SLACK;
    for error in [
        fails_within("stat", bound, || client.stat("/d")),
        fails_within("readdir", bound, || client.readdir("/")),
        fails_within("connect", bound, || Client::connect_with(&meta, auth.clone())),
    ] {
        assert!(error.to_string().contains(&meta), "{error} does not name {meta}");
        assert_eq!(error.code(), ErrorCode::TimedOut, "{error}");
    }
    cluster.signal(0, libc::SIGCONT);
    common::wait_for("the resumed manager to answer", Duration::from_secs(10), || {
        client.stat("/d").ok()
    });
    expect_code(client.stat("/missing"), ErrorCode::NotFound);
    let again = Client::connect_with(&meta, auth.clone()).unwrap();
    expect_code(again.open("/d", &OpenOptions::default()), ErrorCode::IsDirectory);
}
