//! The status page of the metadata manager (`weft status --web`): the page itself, and
//! `/api/top.json`, the cluster view of `weft top`, made from every server's metrics
//! read over the cluster's authenticated connections. At most one round of scrapes
//! runs at a time and a view is reused for `VIEW_REUSE`, so page viewers cost the
//! servers at most one scrape each per interval.

use std::sync::Mutex;
use std::time::{Duration, Instant};
use weft_config::{ClusterConfig, Role};
use weft_metrics::collect::{Target, Watch};
use weft_metrics::http::Reply;
use weft_metrics::top::View;
use weft_rpc::{ClientAuth, ClusterKey, ConnectionPool, Timeouts};

/// A view younger than this is served again rather than scraping anew.
const VIEW_REUSE: Duration = Duration::from_millis(900);
/// Longest wait for one server's metrics.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

pub struct StatusPage {
    pool: ConnectionPool,
    cluster: String,
    state: Mutex<State>,
}

struct State {
    watch: Watch,
    last: Option<(Instant, String)>,
}

impl StatusPage {
    /// The page for `config`'s servers; the manager itself is at `own_addr`.
    pub fn new(config: &ClusterConfig, own_addr: &str, key: ClusterKey) -> StatusPage {
        let pool = ConnectionPool::new(
            "weftd status page",
            ClientAuth::cluster(key),
            Timeouts {
                connect: SCRAPE_TIMEOUT,
                request: SCRAPE_TIMEOUT,
            },
        );
        let targets = config
            .servers
            .iter()
            .map(|s| Target {
                id: s.id.to_string(),
                roles: s.roles.iter().map(|r| r.name()).collect::<Vec<_>>().join(","),
                // The description may hold the manager's address as it was asked for
                // (port 0) rather than as bound.
                addr: if s.has(Role::Meta) {
                    own_addr.to_owned()
                } else {
                    s.addr.clone()
                },
            })
            .collect();
        let watch = Watch::new(&pool, targets, false);
        StatusPage {
            pool,
            cluster: config.name.clone(),
            state: Mutex::new(State { watch, last: None }),
        }
    }

    pub fn route(&self, path: &str) -> Option<Reply> {
        match path {
            "/" | "/index.html" => Some(Reply {
                content_type: "text/html; charset=utf-8",
                body: weft_metrics::page::HTML.as_bytes().to_vec(),
            }),
            weft_metrics::page::VIEW_PATH => Some(Reply {
                content_type: "application/json",
                body: self.view().into_bytes(),
            }),
            _ => None,
        }
    }

    /// The view as JSON: rates since the previous round (the first round's rates are
    /// since each server started, over one second).
    fn view(&self) -> String {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, json)) = &state.last {
            if at.elapsed() < VIEW_REUSE {
                return json.clone();
            }
        }
        let seconds = state
            .last
            .as_ref()
            .map_or(1.0, |(at, _)| at.elapsed().as_secs_f64());
        let observed = state.watch.round(&self.pool, SCRAPE_TIMEOUT);
        let json = View::between(&self.cluster, &observed, seconds).to_json();
        state.last = Some((Instant::now(), json.clone()));
        json
    }
}
