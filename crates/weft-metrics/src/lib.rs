//! Weft's live metrics: what each weftd counts (`server`), the bounded per-job and
//! per-file tables (`attribution`), the HTTP endpoint that serves them (`http`), and
//! the reading side: the text parsed back (`parse`), the servers scraped (`collect`)
//! and the cluster view of `weft top` and the status page (`top`, `page`).
//!
//! Invariant: every label takes values from a bounded set (protocol enums, or the
//! bounded tables), so a server's series stay bounded whatever its clients do.
//!
//! # Code map
//!
//! Live metrics, both sides. `server.rs`: a weftd's `ServerMetrics`, a prometheus-client
//! registry (OpenMetrics text): per role (`weft_meta_`, `weft_io_`, `weft_cache_`)
//! requests, errors by code, bulk bytes in and out by operation, latency histograms (50 µs
//! to 6.5 s), requests in flight, file data read and written; connections; a `Call` per
//! request (`begin` before the handler, `finish` with the outcome); values the roles keep
//! themselves (`External`, read at each scrape through sources); per-job and per-file
//! usage. `attribution.rs`: the bounded tables behind those (at most 64 jobs and 128 files
//! per role, the one idle longest replaced; the job id cut to safe characters from the
//! client's handshake name). `http.rs`: our own small HTTP/1.1 server (GET/HEAD only, 8
//! requests at once, 8 KiB heads in 2 s, replies taken in 5 s, one request per
//! connection) and the client `get`; chosen over an HTTP crate because the endpoint needs
//! four routes and the bounds above, not a framework and an async runtime. `parse.rs`:
//! the text read back (samples and labels). `collect.rs`: a cluster's servers from its
//! manager, each one's endpoint (`Metrics`), its text over HTTP or over rpc, and `Watch`,
//! rounds of scrapes. `top.rs`: the view of `weft top` and the status page (per server
//! rates between two scrapes, busiest files and jobs), as text or JSON. `page.rs`: the
//! status page, one self-contained HTML file whose script reads `/api/top.json`.

pub mod attribution;
pub mod collect;
pub mod http;
pub mod page;
pub mod parse;
pub mod server;
pub mod top;

pub use server::{External, RoleKind, ServerDescription, ServerMetrics, CONTENT_TYPE};
