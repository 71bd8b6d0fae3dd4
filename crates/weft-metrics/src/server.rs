//! What one weftd counts, per role it carries: requests and bulk bytes by operation,
//! latency histograms, requests in flight, errors by code, connections, per-job and
//! per-file usage (bounded), and values read from the roles at each scrape (sources).
//!
//! Names follow Prometheus conventions: `weft_<role>_<what>_<unit>`, counters ending in
//! `_total` (`weft_io_written_bytes_total`). Every label takes a bounded set of values:
//! operations and error codes are enums of the protocol, jobs and files go through the
//! bounded tables of `attribution`.

use crate::attribution::{job_of_client_name, Table, Usage};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;
use weft_layout::InodeId;
use weft_proto::msg::Request;
use weft_proto::{ErrorCode, Opcode};
use weft_rpc::{ConnectionId, Peer};

/// The label naming a job: not `job`, which Prometheus gives every series of a scrape
/// target (a series' own `job` would be renamed `exported_job`); `jobid` as Lustre's
/// jobstats exporters call it.
pub const JOB_LABEL: &str = "jobid";

/// Most jobs a role keeps usage of at once (see `attribution`).
pub const JOBS_TRACKED_MAX: usize = 64;
/// Most files a data role keeps usage of at once.
pub const FILES_TRACKED_MAX: usize = 128;

/// The HTTP content type of `ServerMetrics::render`'s text: OpenMetrics, the text
/// format Prometheus scrapes by preference.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A server role, as metric names spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoleKind {
    Meta,
    Io,
    Cache,
}

impl RoleKind {
    pub const ALL: [RoleKind; 3] = [RoleKind::Meta, RoleKind::Io, RoleKind::Cache];

    pub fn name(self) -> &'static str {
        match self {
            RoleKind::Meta => "meta",
            RoleKind::Io => "io",
            RoleKind::Cache => "cache",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    op: &'static str,
    code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabels {
    server_id: String,
    roles: String,
    build: String,
}

type HistogramFamily = Family<OpLabels, Histogram, fn() -> Histogram>;

/// Request latency buckets: 50 µs to 6.5 s, doubling.
fn new_histogram() -> Histogram {
    Histogram::new(exponential_buckets(50e-6, 2.0, 18))
}

/// One role's request metrics.
struct RoleMetrics {
    requests: Family<OpLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    duration: HistogramFamily,
    in_flight: Gauge,
    received: Family<OpLabels, Counter>,
    sent: Family<OpLabels, Counter>,
    /// Data roles: bytes clients wrote and read (bulk data of data requests).
    written: Counter,
    read: Counter,
    /// io: reply bytes sent by sendfile(2), page cache to socket.
    sendfile: Counter,
    /// meta: files and directories created.
    created_files: Counter,
    created_directories: Counter,
}

impl RoleMetrics {
    fn register(role: RoleKind, registry: &mut Registry) -> RoleMetrics {
        let r = RoleMetrics {
            requests: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(new_histogram as fn() -> Histogram),
            in_flight: Gauge::default(),
            received: Family::default(),
            sent: Family::default(),
            written: Counter::default(),
            read: Counter::default(),
            sendfile: Counter::default(),
            created_files: Counter::default(),
            created_directories: Counter::default(),
        };
        let p = format!("weft_{}", role.name());
        registry.register(
            format!("{p}_requests"),
            "Requests handled, by operation",
            r.requests.clone(),
        );
        registry.register(
            format!("{p}_request_errors"),
            "Requests answered with an error, by operation and error code",
            r.errors.clone(),
        );
        registry.register_with_unit(
            format!("{p}_request_duration"),
            "Time to handle a request, from a worker taking it to its reply being ready, by operation",
            Unit::Seconds,
            r.duration.clone(),
        );
        registry.register(
            format!("{p}_requests_in_flight"),
            "Requests being handled now",
            r.in_flight.clone(),
        );
        registry.register_with_unit(
            format!("{p}_received"),
            "Bulk data received with requests, by operation",
            Unit::Bytes,
            r.received.clone(),
        );
        registry.register_with_unit(
            format!("{p}_sent"),
            "Bulk data sent with replies, by operation",
            Unit::Bytes,
            r.sent.clone(),
        );
        match role {
            RoleKind::Io | RoleKind::Cache => {
                registry.register_with_unit(
                    format!("{p}_written"),
                    "File data written by clients through this server",
                    Unit::Bytes,
                    r.written.clone(),
                );
                registry.register_with_unit(
                    format!("{p}_read"),
                    "File data read by clients through this server",
                    Unit::Bytes,
                    r.read.clone(),
                );
                if role == RoleKind::Io {
                    registry.register_with_unit(
                        format!("{p}_sendfile"),
                        "File data sent by sendfile(2), page cache to socket",
                        Unit::Bytes,
                        r.sendfile.clone(),
                    );
                }
            }
            RoleKind::Meta => {
                registry.register(
                    format!("{p}_created_files"),
                    "Files created (successful creates)",
                    r.created_files.clone(),
                );
                registry.register(
                    format!("{p}_created_directories"),
                    "Directories created",
                    r.created_directories.clone(),
                );
            }
        }
        r
    }
}

/// Whether a request's bulk data is file data in or out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Data {
    Written,
    Read,
    None,
}

/// One metric value read from a role at scrape time (a source).
#[derive(Debug, Clone)]
pub struct External {
    /// Full name without unit or `_total`: `weft_cache_hits`.
    pub name: &'static str,
    pub help: &'static str,
    pub unit: Option<ExternalUnit>,
    pub counter: bool,
    pub labels: Vec<(&'static str, String)>,
    pub value: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExternalUnit {
    Bytes,
}

impl External {
    pub fn counter(name: &'static str, help: &'static str, value: u64) -> External {
        External {
            name,
            help,
            unit: None,
            counter: true,
            labels: Vec::new(),
            value,
        }
    }

    pub fn gauge(name: &'static str, help: &'static str, value: u64) -> External {
        External {
            counter: false,
            ..External::counter(name, help, value)
        }
    }

    pub fn bytes(mut self) -> External {
        self.unit = Some(ExternalUnit::Bytes);
        self
    }

    pub fn label(mut self, name: &'static str, value: impl Into<String>) -> External {
        self.labels.push((name, value.into()));
        self
    }
}

type Source = Box<dyn Fn() -> Vec<External> + Send + Sync>;

/// Per-job and per-file usage, per role.
struct Tables {
    jobs: [Table<Arc<str>>; 3],
    files: [Table<u64>; 3],
}

/// What the registry reads at each scrape besides its own metrics.
struct Live {
    roles: Vec<RoleKind>,
    tables: Mutex<Tables>,
    sources: Mutex<Vec<Source>>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Live")
    }
}

fn encode_group(encoder: &mut DescriptorEncoder, items: &[External]) -> Result<(), std::fmt::Error> {
    let first = &items[0];
    let unit = first.unit.map(|_| Unit::Bytes);
    let kind = if first.counter {
        MetricType::Counter
    } else {
        MetricType::Gauge
    };
    // As the registry writes its own metrics' help.
    let help = format!("{}.", first.help.trim_end_matches('.'));
    let mut metric = encoder.encode_descriptor(first.name, &help, unit.as_ref(), kind)?;
    if let [only] = items {
        if only.labels.is_empty() {
            return if only.counter {
                ConstCounter::new(only.value).encode(metric)
            } else {
                ConstGauge::new(only.value as i64).encode(metric)
            };
        }
    }
    for item in items {
        let labels: Vec<(&str, &str)> = item.labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let family = metric.encode_family(&labels)?;
        if item.counter {
            ConstCounter::new(item.value).encode(family)?;
        } else {
            ConstGauge::new(item.value as i64).encode(family)?;
        }
    }
    Ok(())
}

impl Collector for Live {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut items: Vec<External> = Vec::new();
        {
            let tables = self.tables.lock().unwrap_or_else(|p| p.into_inner());
            for role in &self.roles {
                let i = role.index();
                let jobs = tables.jobs[i].entries();
                let files = tables.files[i].entries();
                let names = usage_names(*role);
                for (job, usage) in jobs {
                    push_usage(&mut items, &names.0, JOB_LABEL, job.to_string(), usage);
                }
                for (inode, usage) in files {
                    push_usage(&mut items, &names.1, "inode", inode.to_string(), usage);
                }
            }
        }
        for source in self.sources.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            items.extend(source());
        }
        // One descriptor per name, its series together.
        items.sort_by_key(|e| e.name);
        for group in items.chunk_by(|a, b| a.name == b.name) {
            encode_group(&mut encoder, group)?;
        }
        Ok(())
    }
}

/// Metric names of per-job and per-file usage of a role: (requests, read, written).
type UsageNames = (&'static str, &'static str, &'static str);

fn usage_names(role: RoleKind) -> (UsageNames, UsageNames) {
    match role {
        RoleKind::Meta => (
            (
                "weft_meta_job_requests",
                "weft_meta_job_read",
                "weft_meta_job_written",
            ),
            (
                "weft_meta_file_requests",
                "weft_meta_file_read",
                "weft_meta_file_written",
            ),
        ),
        RoleKind::Io => (
            ("weft_io_job_requests", "weft_io_job_read", "weft_io_job_written"),
            (
                "weft_io_file_requests",
                "weft_io_file_read",
                "weft_io_file_written",
            ),
        ),
        RoleKind::Cache => (
            (
                "weft_cache_job_requests",
                "weft_cache_job_read",
                "weft_cache_job_written",
            ),
            (
                "weft_cache_file_requests",
                "weft_cache_file_read",
                "weft_cache_file_written",
            ),
        ),
    }
}

fn push_usage(
    items: &mut Vec<External>,
    names: &UsageNames,
    label: &'static str,
    value: String,
    usage: Usage,
) {
    items.push(
        External::counter(
            names.0,
            "Requests per job or file (bounded: the most recently active only)",
            usage.requests,
        )
        .label(label, value.clone()),
    );
    items.push(
        External::counter(
            names.1,
            "File data read per job or file (bounded: the most recently active only)",
            usage.read_bytes,
        )
        .bytes()
        .label(label, value.clone()),
    );
    items.push(
        External::counter(
            names.2,
            "File data written per job or file (bounded: the most recently active only)",
            usage.written_bytes,
        )
        .bytes()
        .label(label, value),
    );
}

/// Who the server is, for its `weft_server_info` series.
#[derive(Debug, Clone)]
pub struct ServerDescription {
    pub server_id: u32,
    pub roles: Vec<RoleKind>,
    pub build: String,
}

/// A weftd's metrics.
pub struct ServerMetrics {
    registry: Registry,
    roles: [Option<RoleMetrics>; 3],
    connections: Gauge,
    connections_opened: Counter,
    /// The job of each open connection that named one.
    jobs: Mutex<HashMap<ConnectionId, Arc<str>>>,
    live: Arc<Live>,
    url: OnceLock<String>,
}

impl ServerMetrics {
    pub fn new(server: &ServerDescription) -> ServerMetrics {
        let mut registry = Registry::default();
        let mut roles: [Option<RoleMetrics>; 3] = [None, None, None];
        for role in &server.roles {
            roles[role.index()] = Some(RoleMetrics::register(*role, &mut registry));
        }
        let connections = Gauge::default();
        let connections_opened = Counter::default();
        registry.register(
            "weft_server_connections",
            "Authenticated connections open now",
            connections.clone(),
        );
        registry.register(
            "weft_server_connections_opened",
            "Authenticated connections opened since the server started",
            connections_opened.clone(),
        );
        let names: Vec<&str> = server.roles.iter().map(|r| r.name()).collect();
        registry.register(
            "weft_server",
            "The server: its id, roles and build",
            Info::new(ServerLabels {
                server_id: server.server_id.to_string(),
                roles: names.join(","),
                build: server.build.clone(),
            }),
        );
        let live = Arc::new(Live {
            roles: server.roles.clone(),
            tables: Mutex::new(Tables {
                jobs: std::array::from_fn(|_| Table::new(JOBS_TRACKED_MAX)),
                files: std::array::from_fn(|_| Table::new(FILES_TRACKED_MAX)),
            }),
            sources: Mutex::new(Vec::new()),
        });
        registry.register_collector(Box::new(live.clone()));
        ServerMetrics {
            registry,
            roles,
            connections,
            connections_opened,
            jobs: Mutex::new(HashMap::new()),
            live,
            url: OnceLock::new(),
        }
    }

    /// Adds values read at each scrape (a role's own counters, the server's load).
    pub fn add_source(&self, source: impl Fn() -> Vec<External> + Send + Sync + 'static) {
        self.live
            .sources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Box::new(source));
    }

    /// The metrics in the OpenMetrics text format (`CONTENT_TYPE`).
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail, and our collectors do not fail.
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("encoding metrics into a String");
        text
    }

    /// Records where the endpoint serves (once).
    pub fn set_url(&self, url: String) {
        let _ = self.url.set(url);
    }

    /// `http://host:port/metrics`, or "" when no endpoint serves.
    pub fn url(&self) -> String {
        self.url.get().cloned().unwrap_or_default()
    }

    pub fn connection_opened(&self, connection: ConnectionId, peer: &Peer) {
        self.connections.inc();
        self.connections_opened.inc();
        if let Some(job) = job_of_client_name(&peer.client) {
            self.jobs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(connection, job.into());
        }
    }

    pub fn connection_closed(&self, connection: ConnectionId) {
        self.connections.dec();
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&connection);
    }

    /// Starts timing `request` of `connection`, handled by `role`, which brought
    /// `request_bytes` of bulk data. Finish it with `Call::finish`; dropped unfinished
    /// (a request another path serves) it only leaves the in-flight count.
    pub fn begin(
        &self,
        role: RoleKind,
        connection: ConnectionId,
        request: &Request,
        request_bytes: u64,
    ) -> Call<'_> {
        let metrics = self.roles[role.index()].as_ref();
        if let Some(m) = metrics {
            m.in_flight.inc();
        }
        // Counted as what it carries out: a `WithParent` create is a "create" (so the
        // created-files count and the per-operation figures keep their meaning).
        let inner = request.data_request().meta_request();
        let data = match inner.opcode() {
            Opcode::Write | Opcode::WriteView => Data::Written,
            Opcode::Read | Opcode::ReadView => Data::Read,
            _ => Data::None,
        };
        let inode = match inner {
            Request::Write { inode, .. }
            | Request::Read { inode, .. }
            | Request::WriteView { inode, .. }
            | Request::ReadView { inode, .. } => Some(*inode),
            _ => None,
        };
        let job = self
            .jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&connection)
            .cloned();
        Call {
            server: self,
            metrics,
            role,
            op: op_name(inner.opcode()),
            data,
            inode,
            job,
            request_bytes,
            start: Instant::now(),
        }
    }
}

/// One request being handled.
pub struct Call<'a> {
    server: &'a ServerMetrics,
    metrics: Option<&'a RoleMetrics>,
    role: RoleKind,
    op: &'static str,
    data: Data,
    inode: Option<InodeId>,
    job: Option<Arc<str>>,
    request_bytes: u64,
    start: Instant,
}

impl Call<'_> {
    /// The request was answered: with `reply_bytes` of bulk data (`sendfile`: sent
    /// from a file by the kernel), or with an error.
    pub fn finish(self, outcome: Result<u64, ErrorCode>, sendfile: bool) {
        let Some(m) = self.metrics else {
            return;
        };
        let op = OpLabels { op: self.op };
        m.requests.get_or_create(&op).inc();
        m.duration
            .get_or_create(&op)
            .observe(self.start.elapsed().as_secs_f64());
        if self.request_bytes > 0 {
            m.received.get_or_create(&op).inc_by(self.request_bytes);
        }
        let reply_bytes = match outcome {
            Ok(n) => n,
            Err(code) => {
                m.errors
                    .get_or_create(&ErrorLabels {
                        op: self.op,
                        code: code_name(code),
                    })
                    .inc();
                0
            }
        };
        if reply_bytes > 0 {
            m.sent.get_or_create(&op).inc_by(reply_bytes);
        }
        let ok = outcome.is_ok();
        let (read, written) = match self.data {
            Data::Written if ok => (0, self.request_bytes),
            Data::Read if ok => (reply_bytes, 0),
            _ => (0, 0),
        };
        m.written.inc_by(written);
        m.read.inc_by(read);
        if sendfile {
            m.sendfile.inc_by(reply_bytes);
        }
        if ok && self.role == RoleKind::Meta {
            match self.op {
                "create" => {
                    m.created_files.inc();
                }
                "mkdir" => {
                    m.created_directories.inc();
                }
                _ => {}
            }
        }
        if self.job.is_some() || self.inode.is_some() {
            let mut tables = self.server.live.tables.lock().unwrap_or_else(|p| p.into_inner());
            let i = self.role.index();
            if let Some(job) = &self.job {
                tables.jobs[i].record(job, read, written);
            }
            if let Some(inode) = self.inode {
                tables.files[i].record(&inode.0, read, written);
            }
        }
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        if let Some(m) = self.metrics {
            m.in_flight.dec();
        }
    }
}

/// Names made once per value of a `u16` protocol enum, read without a lock (every
/// request looks its operation up). Values up to `NAMED_VALUES_MAX`; above, "other" (the
/// test `every_opcode_has_its_own_name` keeps every opcode below it).
struct Names([OnceLock<&'static str>; NAMED_VALUES_MAX]);

/// Values `Names` names (opcodes run past 255: the backup, migration and scan ones).
const NAMED_VALUES_MAX: usize = 1024;

impl Names {
    const fn new() -> Names {
        Names([const { OnceLock::new() }; NAMED_VALUES_MAX])
    }

    fn get(&self, value: u16, debug: impl FnOnce() -> String) -> &'static str {
        match self.0.get(value as usize) {
            // Leaked once per value: a fixed, small set.
            Some(slot) => slot.get_or_init(|| Box::leak(snake_case(&debug()).into_boxed_str())),
            None => "other",
        }
    }
}

/// "write_view" for `Opcode::WriteView`: a bounded set of label values.
pub fn op_name(op: Opcode) -> &'static str {
    static NAMES: Names = Names::new();
    NAMES.get(op as u16, || format!("{op:?}"))
}

fn code_name(code: ErrorCode) -> &'static str {
    static NAMES: Names = Names::new();
    NAMES.get(code as u16, || format!("{code:?}"))
}

fn snake_case(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A create sent with its directory (`WithParent`) counts as a create: in the
    /// requests by operation and in the created-files count.
    #[test]
    fn a_request_with_its_directory_counts_as_what_it_carries() {
        let metrics = ServerMetrics::new(&ServerDescription {
            server_id: 0,
            roles: vec![RoleKind::Meta],
            build: "test".into(),
        });
        let create = Request::Create {
            cred: weft_proto::Cred::root(),
            parent: InodeId(1),
            name: "f".into(),
            mode: 0o644,
            layout: Default::default(),
            exclusive: true,
        };
        for request in [
            create.clone(),
            Request::WithParent {
                request: Box::new(create),
            },
        ] {
            metrics
                .begin(RoleKind::Meta, ConnectionId(1), &request, 0)
                .finish(Ok(0), false);
        }
        let text = metrics.render();
        let value = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_else(|| panic!("{name} in {text}"))
                .rsplit(' ')
                .next()
                .unwrap()
                .to_string()
        };
        assert_eq!(value("weft_meta_requests_total{op=\"create\"}"), "2");
        assert_eq!(value("weft_meta_created_files_total"), "2");
        assert!(!text.contains("with_parent"), "{text}");
    }

    #[test]
    fn names_are_snake_case() {
        assert_eq!(op_name(Opcode::WriteView), "write_view");
        assert_eq!(op_name(Opcode::Read), "read");
        assert_eq!(code_name(ErrorCode::NotFound), "not_found");
    }

    /// Opcodes past 255 were all counted as "other" (the table of names had 256 slots).
    #[test]
    fn opcodes_past_255_have_their_own_names() {
        assert_eq!(op_name(Opcode::ServerStates), "server_states");
        assert_eq!(op_name(Opcode::LayoutScan), "layout_scan");
        assert_eq!(op_name(Opcode::CreateMany), "create_many");
    }
}
