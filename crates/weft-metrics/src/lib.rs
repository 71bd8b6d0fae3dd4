//! Weft's live metrics: what each weftd counts (`server`), the bounded per-job and
//! per-file tables (`attribution`), the HTTP endpoint that serves them (`http`), and
//! the reading side: the text parsed back (`parse`), the servers scraped (`collect`)
//! and the cluster view of `weft top` and the status page (`top`, `page`).
//!
//! Invariant: every label takes values from a bounded set (protocol enums, or the
//! bounded tables), so a server's series stay bounded whatever its clients do.

pub mod attribution;
pub mod collect;
pub mod http;
pub mod page;
pub mod parse;
pub mod server;
pub mod top;

pub use server::{External, RoleKind, ServerDescription, ServerMetrics, CONTENT_TYPE};
