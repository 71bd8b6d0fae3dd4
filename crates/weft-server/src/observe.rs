//! What a weftd shows of itself: every request of its roles counted and timed
//! (`Metered`, around the roles' handler), the roles' own counters read at each scrape,
//! and the metrics endpoint (`--metrics-addr`), with the status page on the metadata
//! manager's.

use crate::roles::Roles;
use anyhow::{Context, Result};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use weft_metrics::http::{Reply, Routes};
use weft_metrics::{External, RoleKind, ServerMetrics};
use weft_proto::msg::{Request, Response};
use weft_proto::WireError;
use weft_rpc::{ConnectionId, FileReply, Handler, Peer};

/// The roles' handler with every request counted.
pub struct Metered {
    pub roles: Arc<Roles>,
    pub metrics: Arc<ServerMetrics>,
}

impl Handler for Metered {
    fn handle(
        &self,
        connection: ConnectionId,
        request: Request,
        data: Vec<u8>,
    ) -> Result<(Response, Vec<u8>), WireError> {
        if let Request::Metrics { text } = request {
            let body = if text {
                self.metrics.render().into_bytes()
            } else {
                Vec::new()
            };
            return Ok((
                Response::Metrics {
                    url: self.metrics.url(),
                },
                body,
            ));
        }
        let role = self.roles.role_of(&request);
        let call = self.metrics.begin(role, connection, &request, data.len() as u64);
        let result = self.roles.handle(connection, request, data);
        call.finish(
            result.as_ref().map(|(_, d)| d.len() as u64).map_err(|e| e.code),
            false,
        );
        result
    }

    fn handle_borrowed(
        &self,
        connection: ConnectionId,
        request: Request,
        data: &[u8],
    ) -> Result<(Response, Vec<u8>), WireError> {
        if matches!(request, Request::Metrics { .. }) {
            return self.handle(connection, request, data.to_vec());
        }
        let role = self.roles.role_of(&request);
        let call = self.metrics.begin(role, connection, &request, data.len() as u64);
        let result = self.roles.handle_borrowed(connection, request, data);
        call.finish(
            result.as_ref().map(|(_, d)| d.len() as u64).map_err(|e| e.code),
            false,
        );
        result
    }

    fn connection_opened(&self, connection: ConnectionId, peer: &Peer) {
        self.metrics.connection_opened(connection, peer);
        self.roles.connection_opened(connection, peer);
    }

    fn connection_closed(&self, connection: ConnectionId) {
        self.roles.connection_closed(connection);
        self.metrics.connection_closed(connection);
    }

    fn reply_bytes_hint(&self, request: &Request) -> u64 {
        self.roles.reply_bytes_hint(request)
    }

    fn runs_inline(&self, request: &Request) -> bool {
        self.roles.runs_inline(request)
    }

    fn changes(&self, connection: ConnectionId, request: &Request) -> Option<weft_rpc::Changes> {
        self.roles.changes(connection, request)
    }

    /// Counted when served; one handed to a worker is counted by `handle` there. The
    /// meta role only says where a request runs (never `Done`): `handle` counts it.
    fn try_inline(&self, connection: ConnectionId, request: &Request, data: &[u8]) -> weft_rpc::Inline {
        let role = self.roles.role_of(request);
        if role == weft_metrics::RoleKind::Meta {
            return self.roles.try_inline(connection, request, data);
        }
        let call = self.metrics.begin(role, connection, request, data.len() as u64);
        let attempt = self.roles.try_inline(connection, request, data);
        if let weft_rpc::Inline::Done(result) = &attempt {
            call.finish(
                result.as_ref().map(|(_, d)| d.len() as u64).map_err(|e| e.code),
                false,
            );
        }
        attempt
    }

    fn reply_into(
        &self,
        connection: ConnectionId,
        request: &Request,
        region: &weft_rpc::shm::Region,
    ) -> Option<Result<(Response, weft_rpc::ReplyInto), WireError>> {
        let role = self.roles.role_of(request);
        let call = self.metrics.begin(role, connection, request, 0);
        // None: `handle_borrowed` serves it, and counts it.
        let result = self.roles.reply_into(connection, request, region)?;
        call.finish(
            result.as_ref().map_err(|e| e.code).map(|(_, reply)| match reply {
                weft_rpc::ReplyInto::Placed(n) => *n,
                weft_rpc::ReplyInto::Data(data) => data.len() as u64,
            }),
            false,
        );
        Some(result)
    }

    fn reply_from_file(
        &self,
        connection: ConnectionId,
        request: &Request,
    ) -> Option<Result<(Response, FileReply), WireError>> {
        let call = self.metrics.begin(RoleKind::Io, connection, request, 0);
        // None: `handle` serves it, and counts it.
        let result = self.roles.reply_from_file(connection, request)?;
        call.finish(
            result.as_ref().map(|(_, f)| f.len_bytes()).map_err(|e| e.code),
            true,
        );
        Some(result)
    }
}

/// Adds the values the roles and the transport keep themselves, read at each scrape.
pub fn add_sources(
    metrics: &ServerMetrics,
    roles: &Arc<Roles>,
    server: weft_rpc::ServerHandle,
    inflight_max_bytes: u64,
) {
    let cache_roles = roles.clone();
    metrics.add_source(move || {
        let Some(st) = cache_roles.cache_stats() else {
            return Vec::new();
        };
        let policy = st.policy.clone();
        let counter =
            |name, help, value| External::counter(name, help, value).label("policy", policy.clone());
        let gauge = |name, help, value| External::gauge(name, help, value).label("policy", policy.clone());
        vec![
            counter("weft_cache_hits", "Block lookups that found the block", st.hits),
            counter("weft_cache_misses", "Block lookups that did not", st.misses),
            counter("weft_cache_evictions", "Blocks evicted", st.evictions),
            counter(
                "weft_cache_write_backs",
                "Blocks written back to io servers",
                st.write_backs,
            ),
            counter(
                "weft_cache_written_back",
                "Dirty data written back to io servers",
                st.write_back_bytes,
            )
            .bytes(),
            counter(
                "weft_cache_write_back_errors",
                "Write-backs that failed",
                st.write_back_errors,
            ),
            counter(
                "weft_cache_fetched",
                "Data fetched from io servers",
                st.fetched_bytes,
            )
            .bytes(),
            gauge("weft_cache_dirty", "Dirty data held now", st.dirty_bytes).bytes(),
            gauge("weft_cache_cached", "File data held now", st.cached_bytes).bytes(),
            gauge(
                "weft_cache_capacity",
                "The memory bound of the cache",
                st.capacity_bytes,
            )
            .bytes(),
            gauge("weft_cache_blocks", "Blocks held now", st.blocks),
        ]
    });
    let lock_roles = roles.clone();
    metrics.add_source(move || {
        let Some(s) = lock_roles.lock_stats() else {
            return Vec::new();
        };
        vec![
            External::counter(
                "weft_io_lock_requests",
                "Extent lock requests (atomic mode), granted or not",
                s.requests,
            ),
            External::counter("weft_io_lock_grants", "Extent locks granted", s.grants),
            External::counter(
                "weft_io_lock_conflicts",
                "Extent lock requests refused because an overlapping lock was held (the client tries again)",
                s.conflicts,
            ),
            External::counter(
                "weft_io_lock_waits",
                "Extent locks granted after the client had waited (at least one conflict)",
                s.waits,
            ),
            External::counter(
                "weft_io_lock_lapsed",
                "Extent locks taken over after their holder kept them past the hold limit",
                s.lapsed,
            ),
            External::gauge("weft_io_locks_held", "Extent locks held now", s.held),
        ]
    });
    let meta_roles = roles.clone();
    metrics.add_source(move || {
        let (Some((commits, operations)), Some(state)) =
            (meta_roles.group_commits(), meta_roles.commit_state())
        else {
            return Vec::new();
        };
        vec![
            External::counter(
                "weft_meta_commits",
                "Commits of the metadata store (group commit; durable ones flush the disk)",
                commits,
            ),
            External::counter(
                "weft_meta_durable_commits",
                "Durable commits of the metadata store (one disk flush each)",
                state.durable_commits,
            ),
            External::gauge(
                "weft_meta_commit_lag",
                "Metadata operations acknowledged and not yet durable (commit interval above 0)",
                state.lag(),
            ),
            External::gauge(
                "weft_meta_commit_age_ms",
                "Milliseconds since the last durable commit of the metadata store",
                state.since_durable.map_or(0, |d| d.as_millis() as u64),
            ),
            External::counter(
                "weft_meta_committed_operations",
                "Metadata operations in those commits (operations per commit: the group size)",
                operations,
            ),
        ]
    });
    if roles.role_bits() & weft_proto::msg::roles::IO != 0 {
        metrics.add_source(|| {
            let c = weft_iod::io_counts();
            vec![
                External::counter(
                    "weft_io_sieve_spans",
                    "Reads and writes of several runs of a request with one system call (data sieving)",
                    c.sieve_spans,
                ),
                External::counter(
                    "weft_io_read_modify_writes",
                    "Sieved writes: read, patched, written back under the object's lock",
                    c.read_modify_writes,
                ),
                External::counter("weft_io_fsyncs", "Objects made durable (fsync)", c.fsyncs),
                External::counter(
                    "weft_io_inline_to_worker",
                    "Small reads and writes the event loop handed to a worker because they would have waited (not in the page cache, throttled, locked)",
                    c.inline_to_worker,
                ),
                External::counter(
                    "weft_io_pool_placed",
                    "Bytes of read replies placed straight into clients' read pools (ShmScatter: the mount's buffers)",
                    weft_rpc::shm::pool_placed_bytes(),
                )
                .bytes(),
            ]
        });
    }
    metrics.add_source(move || {
        let (_, held) = server.load();
        vec![
            External::gauge(
                "weft_server_held",
                "Bytes of requests and replies held in memory now (bulk data admitted)",
                held,
            )
            .bytes(),
            External::gauge(
                "weft_server_held_limit",
                "Most bytes of requests and replies held in memory (--inflight-memory)",
                inflight_max_bytes,
            )
            .bytes(),
        ]
    });
}

/// Binds the metrics endpoint at `addr` (a recorded port still taken: any free port,
/// with a warning) and serves `/metrics`, and on the metadata manager the status page.
/// Returns the endpoint's URL.
pub fn serve_endpoint(
    addr: &str,
    rpc_addr: SocketAddr,
    metrics: Arc<ServerMetrics>,
    page: Option<Arc<crate::status_page::StatusPage>>,
) -> Result<String> {
    let listener = match TcpListener::bind(addr) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
            eprintln!("weftd: warning: metrics address {addr} is in use; taking any free port on {host}");
            TcpListener::bind((host.trim_start_matches('[').trim_end_matches(']'), 0))
                .with_context(|| format!("cannot listen for metrics on {host}"))?
        }
        Err(e) => return Err(e).with_context(|| format!("cannot listen for metrics on {addr}")),
    };
    let routes: Routes = Arc::new(move |path: &str| match path {
        "/metrics" => Some(Reply {
            content_type: weft_metrics::CONTENT_TYPE,
            body: metrics.render().into_bytes(),
        }),
        other => page.as_ref().and_then(|p| p.route(other)),
    });
    let bound = weft_metrics::http::serve(listener, routes)?;
    // A wildcard address is no URL: name the host clients reach the server by.
    let host = if bound.ip().is_unspecified() {
        rpc_addr.ip()
    } else {
        bound.ip()
    };
    Ok(format!("http://{}/metrics", SocketAddr::new(host, bound.port())))
}
