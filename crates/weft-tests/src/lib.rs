//! Holds no code: Weft's end-to-end tests live in `tests/`, each against real servers.
//!
//! # Code map
//!
//! End-to-end tests of the core against real server processes: round trips against a
//! local reference, concurrent writers, sparse files over 4 GiB, 10,000-entry
//! directories, rename/unlink semantics, kill -9 of io servers and the manager, servers
//! down or hung, bad input on the wire and in the API, the MPI launch, the CLI, the local
//! socket transport. `tests/hostile.rs` is a key-holding attacker in `munge` mode (bob,
//! with a MUNGE credential of his own, against alice's files) speaking the raw protocol
//! over `weft_rpc::Connection`: a fixed list of named attacks (`ATTACKS`, each a function
//! and the error codes its refusal may carry) that fails on any success, after controls
//! (`CONTROLS`) that the same requests on bob's own files are served. Other security
//! fixes add their attacks there. `weft_testkit::munge` holds the test's own munged and
//! the users it runs as (`setpriv`), shared with `tests/munge.rs`.
//! Issue 30's metadata crash tests: `tests/crash_storm.rs` (8 storm client processes,
//! kill -9 of the manager at a random moment, with two clients in odd rounds, restart,
//! survivors carry on; `WEFT_CRASH_ROUNDS` rounds, default 20), `tests/power_loss.rs` (the
//! same storm with every server's data directory under weft-faultfs, then a power cut:
//! every process killed, what was not durable undone, restart on the backing directory;
//! `WEFT_POWER_ROUNDS`, default 3) and `tests/replay.rs` (a create, a rename and an
//! append whose answers a proxy swallows, across a manager restart: applied exactly
//! once; its `REPLAY` constant requires success once clients replay).
