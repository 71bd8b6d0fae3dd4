//! The cluster at a glance, as `weft top` and the status page show it: each server's
//! throughput, operations, latency, cache hit rate and dirty bytes, and the busiest
//! files and jobs, as rates between two scrapes of every server.
//!
//! 1. Each server's scrape is reduced to its `Totals` (counters summed over labels).
//! 2. Two `Totals` of the same server, `seconds` apart, give its `ServerRow` (rates);
//!    a counter that went down (the server restarted) counts from zero.
//! 3. Files and jobs are summed over servers, then ranked by bytes per second.

use crate::parse::Sample;
use serde::Serialize;
use std::collections::HashMap;

/// Most files and jobs a view lists.
pub const TOP_ROWS_MAX: usize = 10;

/// What one scrape of one server says, summed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    pub server_id: Option<String>,
    pub roles: Option<String>,
    pub build: Option<String>,
    pub requests: f64,
    pub errors: f64,
    pub read_bytes: f64,
    pub written_bytes: f64,
    pub duration_sum_seconds: f64,
    pub duration_count: f64,
    pub in_flight: f64,
    pub connections: f64,
    pub cache_hits: Option<f64>,
    pub cache_misses: Option<f64>,
    pub dirty_bytes: Option<f64>,
    /// inode → bytes read and written (io and cache roles together).
    pub files: HashMap<String, f64>,
    /// job → (bytes, requests).
    pub jobs: HashMap<String, (f64, f64)>,
}

const ROLES: [&str; 3] = ["meta", "io", "cache"];

impl Totals {
    pub fn of(samples: &[Sample]) -> Totals {
        let mut t = Totals::default();
        for s in samples {
            if s.value.is_nan() {
                continue;
            }
            let name = s.name.as_str();
            if name == "weft_server_info" {
                t.server_id = s.label("server_id").map(str::to_owned);
                t.roles = s.label("roles").map(str::to_owned);
                t.build = s.label("build").map(str::to_owned);
                continue;
            }
            if name == "weft_server_connections" {
                t.connections = s.value;
                continue;
            }
            let Some(role) = ROLES.iter().find(|r| {
                name.strip_prefix("weft_")
                    .and_then(|n| n.strip_prefix(**r))
                    .is_some_and(|n| n.starts_with('_'))
            }) else {
                continue;
            };
            let what = &name["weft_".len() + role.len() + 1..];
            match what {
                "requests_total" => t.requests += s.value,
                "request_errors_total" => t.errors += s.value,
                "read_bytes_total" => t.read_bytes += s.value,
                "written_bytes_total" => t.written_bytes += s.value,
                "request_duration_seconds_sum" => t.duration_sum_seconds += s.value,
                "request_duration_seconds_count" => t.duration_count += s.value,
                "requests_in_flight" => t.in_flight += s.value,
                "hits_total" => *t.cache_hits.get_or_insert(0.0) += s.value,
                "misses_total" => *t.cache_misses.get_or_insert(0.0) += s.value,
                "dirty_bytes" => *t.dirty_bytes.get_or_insert(0.0) += s.value,
                "file_read_bytes_total" | "file_written_bytes_total" => {
                    if let Some(inode) = s.label("inode") {
                        *t.files.entry(inode.to_owned()).or_default() += s.value;
                    }
                }
                "job_read_bytes_total" | "job_written_bytes_total" => {
                    if let Some(job) = s.label(crate::server::JOB_LABEL) {
                        t.jobs.entry(job.to_owned()).or_default().0 += s.value;
                    }
                }
                "job_requests_total" => {
                    if let Some(job) = s.label(crate::server::JOB_LABEL) {
                        t.jobs.entry(job.to_owned()).or_default().1 += s.value;
                    }
                }
                _ => {}
            }
        }
        t
    }
}

/// One server in the view.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ServerRow {
    pub id: String,
    pub roles: String,
    pub address: String,
    /// "up", or why it could not be scraped.
    pub state: String,
    pub read_bytes_per_second: f64,
    pub written_bytes_per_second: f64,
    pub requests_per_second: f64,
    pub errors_per_second: f64,
    /// Mean time to handle a request in the interval, milliseconds.
    pub latency_ms: Option<f64>,
    pub in_flight: f64,
    pub connections: f64,
    /// Cache hits over lookups in the interval (percent).
    pub hit_rate_percent: Option<f64>,
    pub dirty_bytes: Option<f64>,
    /// Totals since the server started.
    pub read_bytes: f64,
    pub written_bytes: f64,
    pub requests: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FileRow {
    pub inode: String,
    pub bytes_per_second: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct JobRow {
    pub job: String,
    pub bytes_per_second: f64,
    pub requests_per_second: f64,
}

/// The whole view.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct View {
    pub cluster: String,
    pub interval_seconds: f64,
    pub servers: Vec<ServerRow>,
    pub files: Vec<FileRow>,
    pub jobs: Vec<JobRow>,
}

/// A server to show: where it is, and its last two scrapes (or why there is none).
#[derive(Debug, Clone)]
pub struct Observed {
    pub id: String,
    pub roles: String,
    pub address: String,
    pub before: Option<Totals>,
    pub now: Result<Totals, String>,
}

/// A server's row with no rates.
fn idle_row(s: &Observed, now: &Totals) -> ServerRow {
    ServerRow {
        id: now.server_id.clone().unwrap_or_else(|| s.id.clone()),
        roles: now.roles.clone().unwrap_or_else(|| s.roles.clone()),
        address: s.address.clone(),
        state: "up".into(),
        read_bytes_per_second: 0.0,
        written_bytes_per_second: 0.0,
        requests_per_second: 0.0,
        errors_per_second: 0.0,
        latency_ms: None,
        in_flight: 0.0,
        connections: 0.0,
        hit_rate_percent: None,
        dirty_bytes: None,
        read_bytes: 0.0,
        written_bytes: 0.0,
        requests: 0.0,
    }
}

fn delta(now: f64, before: f64) -> f64 {
    // A counter that went down was reset (the server restarted).
    if now >= before {
        now - before
    } else {
        now
    }
}

impl View {
    /// The view of `servers` over `seconds` between their two scrapes.
    pub fn between(cluster: &str, servers: &[Observed], seconds: f64) -> View {
        let seconds = if seconds > 0.0 { seconds } else { 1.0 };
        let rate = |now: f64, before: f64| delta(now, before) / seconds;
        let mut rows = Vec::new();
        let mut files: HashMap<String, f64> = HashMap::new();
        let mut jobs: HashMap<String, (f64, f64)> = HashMap::new();
        for s in servers {
            let now = match &s.now {
                Ok(t) => t,
                Err(why) => {
                    rows.push(ServerRow {
                        state: why.clone(),
                        ..idle_row(s, &Totals::default())
                    });
                    continue;
                }
            };
            // A server seen for the first time has no rates yet (its totals are since
            // it started, not over the interval).
            let Some(before) = s.before.as_ref() else {
                rows.push(ServerRow {
                    latency_ms: (now.duration_count > 0.0)
                        .then(|| 1000.0 * now.duration_sum_seconds / now.duration_count),
                    in_flight: now.in_flight,
                    connections: now.connections,
                    dirty_bytes: now.dirty_bytes,
                    read_bytes: now.read_bytes,
                    written_bytes: now.written_bytes,
                    requests: now.requests,
                    ..idle_row(s, now)
                });
                continue;
            };
            let count = delta(now.duration_count, before.duration_count);
            let latency_ms = (count > 0.0)
                .then(|| 1000.0 * delta(now.duration_sum_seconds, before.duration_sum_seconds) / count);
            let hit_rate_percent = match (now.cache_hits, now.cache_misses) {
                (Some(h), Some(m)) => {
                    let hits = delta(h, before.cache_hits.unwrap_or(0.0));
                    let lookups = hits + delta(m, before.cache_misses.unwrap_or(0.0));
                    (lookups > 0.0).then(|| 100.0 * hits / lookups)
                }
                _ => None,
            };
            rows.push(ServerRow {
                read_bytes_per_second: rate(now.read_bytes, before.read_bytes),
                written_bytes_per_second: rate(now.written_bytes, before.written_bytes),
                requests_per_second: rate(now.requests, before.requests),
                errors_per_second: rate(now.errors, before.errors),
                latency_ms,
                in_flight: now.in_flight,
                connections: now.connections,
                hit_rate_percent,
                dirty_bytes: now.dirty_bytes,
                read_bytes: now.read_bytes,
                written_bytes: now.written_bytes,
                requests: now.requests,
                ..idle_row(s, now)
            });
            for (inode, bytes) in &now.files {
                let was = before.files.get(inode).copied().unwrap_or(0.0);
                *files.entry(inode.clone()).or_default() += rate(*bytes, was);
            }
            for (job, (bytes, requests)) in &now.jobs {
                let (was_bytes, was_requests) = before.jobs.get(job).copied().unwrap_or((0.0, 0.0));
                let entry = jobs.entry(job.clone()).or_default();
                entry.0 += rate(*bytes, was_bytes);
                entry.1 += rate(*requests, was_requests);
            }
        }
        let mut files: Vec<FileRow> = files
            .into_iter()
            .filter(|(_, r)| *r > 0.0)
            .map(|(inode, bytes_per_second)| FileRow {
                inode,
                bytes_per_second,
            })
            .collect();
        files.sort_by(|a, b| {
            b.bytes_per_second
                .total_cmp(&a.bytes_per_second)
                .then(a.inode.cmp(&b.inode))
        });
        files.truncate(TOP_ROWS_MAX);
        let mut jobs: Vec<JobRow> = jobs
            .into_iter()
            .filter(|(_, (b, r))| *b > 0.0 || *r > 0.0)
            .map(|(job, (bytes_per_second, requests_per_second))| JobRow {
                job,
                bytes_per_second,
                requests_per_second,
            })
            .collect();
        jobs.sort_by(|a, b| {
            b.bytes_per_second
                .total_cmp(&a.bytes_per_second)
                .then(b.requests_per_second.total_cmp(&a.requests_per_second))
                .then(a.job.cmp(&b.job))
        });
        jobs.truncate(TOP_ROWS_MAX);
        View {
            cluster: cluster.to_owned(),
            interval_seconds: seconds,
            servers: rows,
            files,
            jobs,
        }
    }

    /// The view as `weft top` prints it.
    pub fn render_text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "weft top: cluster \"{}\", {} servers, rates over {:.1} s",
            self.cluster,
            self.servers.len(),
            self.interval_seconds
        );
        let _ = writeln!(
            out,
            "{:<6} {:<10} {:>11} {:>11} {:>9} {:>8} {:>5} {:>5} {:>6} {:>10} {:>8}  state",
            "server",
            "roles",
            "read/s",
            "write/s",
            "ops/s",
            "lat ms",
            "infl",
            "conns",
            "hit%",
            "dirty",
            "errors/s"
        );
        let (mut read, mut written, mut ops) = (0.0, 0.0, 0.0);
        for s in &self.servers {
            read += s.read_bytes_per_second;
            written += s.written_bytes_per_second;
            ops += s.requests_per_second;
            let up = s.state == "up";
            let dash = |v: String| if up { v } else { "-".into() };
            let _ = writeln!(
                out,
                "{:<6} {:<10} {:>11} {:>11} {:>9} {:>8} {:>5} {:>5} {:>6} {:>10} {:>8}  {}",
                s.id,
                s.roles,
                dash(human_rate(s.read_bytes_per_second)),
                dash(human_rate(s.written_bytes_per_second)),
                dash(format!("{:.0}", s.requests_per_second)),
                s.latency_ms.map_or("-".into(), |l| format!("{l:.2}")),
                dash(format!("{:.0}", s.in_flight)),
                dash(format!("{:.0}", s.connections)),
                s.hit_rate_percent.map_or("-".into(), |h| format!("{h:.1}")),
                s.dirty_bytes.map_or("-".into(), human_bytes),
                dash(format!("{:.0}", s.errors_per_second)),
                s.state
            );
        }
        let _ = writeln!(
            out,
            "{:<6} {:<10} {:>11} {:>11} {:>9}",
            "all",
            "",
            human_rate(read),
            human_rate(written),
            format!("{ops:.0}")
        );
        if !self.files.is_empty() {
            let _ = writeln!(out, "busiest files (inode: read+written per second)");
            for f in &self.files {
                let _ = writeln!(out, "  {:<20} {:>11}", f.inode, human_rate(f.bytes_per_second));
            }
        }
        if !self.jobs.is_empty() {
            let _ = writeln!(
                out,
                "busiest jobs (job: read+written per second, requests per second)"
            );
            for j in &self.jobs {
                let _ = writeln!(
                    out,
                    "  {:<20} {:>11} {:>9.0}",
                    j.job,
                    human_rate(j.bytes_per_second),
                    j.requests_per_second
                );
            }
        }
        out
    }

    pub fn to_json(&self) -> String {
        // Serializing plain structs of strings and numbers cannot fail (NaN and
        // infinities become null).
        serde_json::to_string_pretty(self).expect("serializing the top view")
    }
}

pub fn human_bytes(n: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = n;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value:.0} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn human_rate(bytes_per_second: f64) -> String {
    format!("{}/s", human_bytes(bytes_per_second))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse;

    fn scrape(requests: u64, written: u64, hits: u64, misses: u64, sum: f64, file: u64) -> Totals {
        let text = format!(
            "weft_server_info{{server_id=\"1\",roles=\"io,cache\",build=\"b\"}} 1\n\
             weft_io_requests_total{{op=\"write\"}} {requests}\n\
             weft_io_requests_total{{op=\"read\"}} 0\n\
             weft_io_written_bytes_total {written}\n\
             weft_io_request_duration_seconds_sum{{op=\"write\"}} {sum}\n\
             weft_io_request_duration_seconds_count{{op=\"write\"}} {requests}\n\
             weft_cache_hits_total{{policy=\"arc\"}} {hits}\n\
             weft_cache_misses_total{{policy=\"arc\"}} {misses}\n\
             weft_cache_dirty_bytes{{policy=\"arc\"}} 4096\n\
             weft_io_file_written_bytes_total{{inode=\"7\"}} {file}\n\
             weft_io_job_written_bytes_total{{jobid=\"j1\"}} {file}\n\
             weft_io_job_requests_total{{jobid=\"j1\"}} {requests}\n\
             weft_server_connections 3\n"
        );
        Totals::of(&parse(&text).unwrap())
    }

    #[test]
    fn rates_come_from_the_difference_of_two_scrapes() {
        let observed = Observed {
            id: "1".into(),
            roles: "?".into(),
            address: "a".into(),
            before: Some(scrape(10, 1000, 1, 1, 0.010, 100)),
            now: Ok(scrape(30, 5000, 4, 2, 0.050, 2100)),
        };
        let down = Observed {
            id: "2".into(),
            roles: "io".into(),
            address: "b".into(),
            before: None,
            now: Err("down: refused".into()),
        };
        let view = View::between("c", &[observed, down], 2.0);
        let s = &view.servers[0];
        assert_eq!(s.roles, "io,cache");
        assert_eq!(s.requests_per_second, 10.0);
        assert_eq!(s.written_bytes_per_second, 2000.0);
        assert!((s.latency_ms.unwrap() - 2.0).abs() < 1e-9, "{:?}", s.latency_ms);
        assert_eq!(s.hit_rate_percent, Some(75.0));
        assert_eq!(s.dirty_bytes, Some(4096.0));
        assert_eq!(s.connections, 3.0);
        assert_eq!(
            view.files,
            vec![FileRow {
                inode: "7".into(),
                bytes_per_second: 1000.0
            }]
        );
        assert_eq!(view.jobs[0].requests_per_second, 10.0);
        assert_eq!(view.servers[1].state, "down: refused");
        let text = view.render_text();
        assert!(text.contains("2.0 KiB/s"), "{text}");
        assert!(text.contains("down: refused"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&view.to_json()).unwrap();
        assert_eq!(json["servers"][0]["hit_rate_percent"], 75.0);
    }

    #[test]
    fn a_restarted_server_counts_from_zero() {
        let observed = Observed {
            id: "1".into(),
            roles: "io".into(),
            address: "a".into(),
            before: Some(scrape(100, 1 << 20, 0, 0, 1.0, 0)),
            now: Ok(scrape(5, 500, 0, 0, 0.005, 0)),
        };
        let view = View::between("c", &[observed], 1.0);
        assert_eq!(view.servers[0].written_bytes_per_second, 500.0);
        assert_eq!(view.servers[0].hit_rate_percent, None);
    }
}
