//! Finding a cluster's servers and reading their metrics, for `weft top` and the
//! status page: the servers from the metadata manager (`GetCluster`), each server's
//! endpoint from the server itself (`Metrics`), the text from the endpoint over HTTP,
//! or, for a server that serves no endpoint, over its authenticated connection.

use crate::parse::parse;
use crate::top::{Observed, Totals};
use std::time::Duration;
use weft_proto::msg::{Request, Response};
use weft_rpc::ConnectionPool;

/// A server to scrape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub id: String,
    pub roles: String,
    /// Its rpc address.
    pub addr: String,
}

/// Every server of the cluster managed at `meta_addr`: the manager first, then each io
/// server and cache manager once. The manager's id comes from its handshake.
pub fn targets(pool: &ConnectionPool, meta_addr: &str) -> Result<(String, Vec<Target>), weft_rpc::RpcError> {
    let cluster = match pool.call(meta_addr, &Request::GetCluster, &[])?.0 {
        Response::Cluster(c) => c,
        _ => {
            return Err(weft_rpc::RpcError::Remote {
                addr: meta_addr.to_owned(),
                error: weft_proto::WireError::new(
                    weft_proto::ErrorCode::Malformed,
                    "the metadata manager answered GetCluster with something else",
                ),
            })
        }
    };
    let meta_id = pool
        .get(meta_addr)
        .map(|c| c.server().0 .0.to_string())
        .unwrap_or_else(|_| "0".into());
    let mut out = vec![Target {
        id: meta_id,
        roles: "meta".into(),
        addr: meta_addr.to_owned(),
    }];
    let cached: std::collections::HashSet<_> = cluster.cache.managers.iter().map(|m| m.id).collect();
    for s in &cluster.io_servers {
        out.push(Target {
            id: s.id.0.to_string(),
            roles: if cached.contains(&s.id) { "io,cache" } else { "io" }.into(),
            addr: s.addr.clone(),
        });
    }
    for m in &cluster.cache.managers {
        if !cluster.io_servers.iter().any(|s| s.id == m.id) {
            out.push(Target {
                id: m.id.0.to_string(),
                roles: "cache".into(),
                addr: m.addr.clone(),
            });
        }
    }
    Ok((cluster.name, out))
}

/// The server's metrics endpoint URL ("" when it serves none), asked over rpc.
pub fn endpoint(pool: &ConnectionPool, addr: &str) -> Result<String, String> {
    match pool.call(addr, &Request::Metrics { text: false }, &[]) {
        Ok((Response::Metrics { url }, _)) => Ok(url),
        Ok(_) => Err("unexpected reply to Metrics".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// The server's metrics text: from `url` over HTTP when given, else over rpc.
pub fn fetch(pool: &ConnectionPool, addr: &str, url: &str, timeout: Duration) -> Result<String, String> {
    if !url.is_empty() {
        let body = crate::http::get(url, timeout).map_err(|e| e.to_string())?;
        return String::from_utf8(body).map_err(|_| format!("{url}: not UTF-8"));
    }
    match pool.call(addr, &Request::Metrics { text: true }, &[]) {
        Ok((Response::Metrics { .. }, text)) => {
            String::from_utf8(text).map_err(|_| "metrics not UTF-8".into())
        }
        Ok(_) => Err("unexpected reply to Metrics".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// A target's totals from its metrics text.
pub fn totals(text: &str) -> Result<Totals, String> {
    parse(text).map(|s| Totals::of(&s)).map_err(|e| e.to_string())
}

/// Scrapes of a set of servers over time: keeps each one's last totals, so that every
/// round gives rates since the one before.
pub struct Watch {
    pub targets: Vec<(Target, String)>,
    last: Vec<Option<Totals>>,
}

impl Watch {
    /// Watches `targets`; with `endpoints`, through their metrics endpoints (asked for
    /// once; a server without one, or that cannot say, is read over rpc), else all
    /// over rpc.
    pub fn new(pool: &ConnectionPool, targets: Vec<Target>, endpoints: bool) -> Watch {
        let targets: Vec<(Target, String)> = targets
            .into_iter()
            .map(|t| {
                let url = if endpoints {
                    endpoint(pool, &t.addr).unwrap_or_default()
                } else {
                    String::new()
                };
                (t, url)
            })
            .collect();
        let last = vec![None; targets.len()];
        Watch { targets, last }
    }

    /// Scrapes every server once (each on its own thread, so a slow one costs its own
    /// `timeout` only) and returns what each said next to what it said last round.
    pub fn round(&mut self, pool: &ConnectionPool, timeout: Duration) -> Vec<Observed> {
        let results: Vec<Result<Totals, String>> = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .targets
                .iter()
                .map(|(t, url)| {
                    scope.spawn(move || fetch(pool, &t.addr, url, timeout).and_then(|text| totals(&text)))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("scrape panicked".into())))
                .collect()
        });
        let mut out = Vec::new();
        for (i, now) in results.into_iter().enumerate() {
            let (t, url) = &self.targets[i];
            let now = now.map_err(|e| format!("down: {e}"));
            out.push(Observed {
                id: t.id.clone(),
                roles: t.roles.clone(),
                address: if url.is_empty() {
                    t.addr.clone()
                } else {
                    url.clone()
                },
                before: self.last[i].clone(),
                now: now.clone(),
            });
            self.last[i] = now.ok();
        }
        out
    }
}
