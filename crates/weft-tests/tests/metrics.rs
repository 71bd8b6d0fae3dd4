//! Live metrics against real clusters: the counters of every role equal a known
//! workload, the endpoint's text passes the reference OpenMetrics parser (Prometheus's
//! own Python client, from Debian), a scrape during heavy load is answered, the series
//! stay bounded with 10,000 files and many jobs, `weft top --once` and `weft status`
//! show the cluster a client uses.

mod common;

use common::Rng;
use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weft_metrics::parse::{parse, Sample};
use weft_testkit::{ClusterOptions, TestCluster};

/// The metrics text of server `id`, from the endpoint `weft up` recorded for it.
fn scrape(cluster: &TestCluster, id: u32) -> String {
    let config = cluster.config();
    let addr = config
        .server(id)
        .and_then(|s| s.metrics_addr.clone())
        .unwrap_or_else(|| panic!("weft up recorded no metrics address for server {id}"));
    let body = weft_metrics::http::get(&format!("http://{addr}/metrics"), Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("scraping server {id}: {e}"));
    String::from_utf8(body).expect("metrics are UTF-8")
}

/// Sum of the samples named `name` whose labels include `labels`.
fn sum(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
        .map(|s| s.value)
        .sum()
}

/// Sum over every server of the cluster.
fn cluster_sum(cluster: &TestCluster, name: &str, labels: &[(&str, &str)]) -> f64 {
    cluster
        .config()
        .servers
        .iter()
        .map(|s| sum(&parse(&scrape(cluster, s.id)).unwrap(), name, labels))
        .sum()
}

/// Runs the reference OpenMetrics parser over `text`; returns how many samples it read.
fn reference_parse(text: &str) -> usize {
    // Debian's python3, which python3-prometheus-client installs into (not another
    // python3 that may come first on PATH).
    let mut child = Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import sys\n\
             from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse\n\
             print(sum(len(f.samples) for f in parse(sys.stdin.read())))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("/usr/bin/python3 (scripts/install-deps.sh installs it with python3-prometheus-client)");
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the reference parser refused the metrics: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn weft_with(cluster: &TestCluster, env: &[(&str, &str)], args: &[&str]) -> String {
    let mut command = cluster.command("weft");
    command.args(args);
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().expect("running weft");
    assert!(
        out.status.success(),
        "weft {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn counters_equal_a_known_workload_and_parse_with_the_reference_parser() {
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 2,
        ..Default::default()
    });
    let scratch = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(15);
    let sizes = [1u64, 65_536, 100_000, 1_000_000, 3 << 20];
    let mut total = 0;
    for (i, size) in sizes.iter().enumerate() {
        let local = scratch.path().join(format!("f{i}"));
        std::fs::write(&local, rng.bytes(*size as usize)).unwrap();
        weft_with(
            &cluster,
            &[("WEFT_JOB", "job-a")],
            &["put", local.to_str().unwrap(), &format!("/f{i}")],
        );
        total += size;
    }
    weft_with(&cluster, &[("WEFT_JOB", "job-b")], &["mkdir", "/d1", "/d2"]);
    let total = total as f64;
    let files = sizes.len() as f64;

    assert_eq!(cluster_sum(&cluster, "weft_io_written_bytes_total", &[]), total);
    assert_eq!(
        cluster_sum(&cluster, "weft_io_job_written_bytes_total", &[("jobid", "job-a")]),
        total,
        "every byte written is the job's"
    );
    assert_eq!(cluster_sum(&cluster, "weft_meta_created_files_total", &[]), files);
    assert_eq!(
        cluster_sum(&cluster, "weft_meta_created_directories_total", &[]),
        2.0
    );
    // Group commit: the 5 creates and 2 mkdirs (one client, one at a time) are among
    // the committed operations, each commit holds at least one.
    let commits = cluster_sum(&cluster, "weft_meta_commits_total", &[]);
    let committed = cluster_sum(&cluster, "weft_meta_committed_operations_total", &[]);
    assert!(committed >= files + 2.0, "{committed} operations committed");
    assert!(
        commits >= 1.0 && commits <= committed,
        "{commits} commits of {committed}"
    );
    assert!(cluster_sum(&cluster, "weft_meta_job_requests_total", &[("jobid", "job-b")]) >= 2.0);
    assert_eq!(cluster_sum(&cluster, "weft_io_read_bytes_total", &[]), 0.0);

    for i in 0..sizes.len() {
        let back = scratch.path().join(format!("back{i}"));
        weft_with(&cluster, &[], &["get", &format!("/f{i}"), back.to_str().unwrap()]);
    }
    assert_eq!(cluster_sum(&cluster, "weft_io_read_bytes_total", &[]), total);
    // Plain reads of range lists go out by sendfile.
    assert_eq!(cluster_sum(&cluster, "weft_io_sendfile_bytes_total", &[]), total);

    for server in cluster.config().servers {
        let text = scrape(&cluster, server.id);
        let samples = parse(&text).unwrap();
        assert_eq!(reference_parse(&text), samples.len(), "server {}", server.id);
        assert_eq!(
            sum(
                &samples,
                "weft_server_info",
                &[("server_id", &server.id.to_string())]
            ),
            1.0
        );
        let role = if server.id == 0 { "meta" } else { "io" };
        let op = if server.id == 0 { "create" } else { "write" };
        // The latency histogram counts every request of the operation, its +Inf bucket
        // equals its count, and its buckets never decrease.
        let histogram = format!("weft_{role}_request_duration_seconds");
        let count = sum(&samples, &format!("{histogram}_count"), &[("op", op)]);
        let requests = sum(&samples, &format!("weft_{role}_requests_total"), &[("op", op)]);
        assert!(
            count > 0.0 && count == requests,
            "server {}: {count} vs {requests}",
            server.id
        );
        let buckets: Vec<f64> = samples
            .iter()
            .filter(|s| s.name == format!("{histogram}_bucket") && s.label("op") == Some(op))
            .map(|s| s.value)
            .collect();
        assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
        assert_eq!(buckets.last(), Some(&count));
        assert!(sum(&samples, &format!("{histogram}_sum"), &[("op", op)]) > 0.0);
    }
}

#[test]
fn the_cache_role_counts_hits_misses_and_dirty_bytes() {
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 2,
        ..ClusterOptions::cached("colocated", "64M")
    });
    let client = cluster.client();
    let data = Rng::new(3).bytes(1 << 20);
    let file = client.create("/cached", &Default::default()).unwrap();
    file.write_at(0, &data).unwrap();
    let dirty = cluster_sum(&cluster, "weft_cache_dirty_bytes", &[]);
    let written_back = cluster_sum(&cluster, "weft_cache_written_back_bytes_total", &[]);
    // Written, not yet synced: every byte is dirty or already written back.
    assert_eq!(dirty + written_back, data.len() as f64);
    assert_eq!(
        cluster_sum(&cluster, "weft_cache_written_bytes_total", &[]),
        data.len() as f64
    );
    file.sync().unwrap();
    assert_eq!(cluster_sum(&cluster, "weft_cache_dirty_bytes", &[]), 0.0);
    let mut back = vec![0u8; data.len()];
    file.read_at(0, &mut back).unwrap();
    assert!(back == data);
    assert!(cluster_sum(&cluster, "weft_cache_hits_total", &[]) > 0.0);
    assert_eq!(
        cluster_sum(&cluster, "weft_cache_read_bytes_total", &[]),
        data.len() as f64
    );
    for server in cluster.config().servers {
        let text = scrape(&cluster, server.id);
        assert_eq!(reference_parse(&text), parse(&text).unwrap().len());
    }
}

#[test]
fn a_scrape_during_heavy_load_answers_within_a_bound() {
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 2,
        ..Default::default()
    });
    let stop = std::sync::atomic::AtomicBool::new(false);
    let client = cluster.client();
    let written = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|scope| {
        for t in 0..4 {
            let (client, stop, written) = (&client, &stop, &written);
            scope.spawn(move || {
                let data = vec![t as u8; 4 << 20];
                let file = client.create(&format!("/load{t}"), &Default::default()).unwrap();
                let mut at = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    file.write_at(at % (64 << 20), &data).unwrap();
                    at += data.len() as u64;
                    written.fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
        // Scrapes are served on the endpoint's own threads, never queued behind the
        // workers: each must answer well within this bound however busy they are.
        let bound = Duration::from_secs(3);
        let mut slowest = Duration::ZERO;
        let until = Instant::now() + Duration::from_secs(4);
        let mut scrapes = 0;
        while Instant::now() < until {
            let start = Instant::now();
            let text = scrape(&cluster, 1);
            slowest = slowest.max(start.elapsed());
            assert!(text.ends_with("# EOF\n"));
            scrapes += 1;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(slowest < bound, "slowest scrape {slowest:?} of {scrapes}");
        assert!(
            written.load(std::sync::atomic::Ordering::Relaxed) >= 4 << 20,
            "the load ran"
        );
    });
}

#[test]
fn the_cardinality_bound_holds_with_10000_files_and_many_jobs() {
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 2,
        ..Default::default()
    });
    let client = cluster.client();
    client.mkdir("/many", 0o755).unwrap();
    std::thread::scope(|scope| {
        for t in 0..4 {
            let client = &client;
            scope.spawn(move || {
                for i in (t..10_000).step_by(4) {
                    let file = client.create(&format!("/many/{i}"), &Default::default()).unwrap();
                    file.write_at(0, b"x").unwrap();
                }
            });
        }
    });
    for j in 0..weft_metrics::server::JOBS_TRACKED_MAX + 6 {
        weft_with(&cluster, &[("WEFT_JOB", &format!("job{j}"))], &["ls", "/"]);
    }
    let mut most_files = 0;
    for server in cluster.config().servers {
        let samples = parse(&scrape(&cluster, server.id)).unwrap();
        let count = |prefix: &str| samples.iter().filter(|s| s.name.starts_with(prefix)).count();
        let role = if server.id == 0 { "meta" } else { "io" };
        assert!(
            count(&format!("weft_{role}_file_")) <= 3 * weft_metrics::server::FILES_TRACKED_MAX,
            "server {}",
            server.id
        );
        assert!(count(&format!("weft_{role}_job_")) <= 3 * weft_metrics::server::JOBS_TRACKED_MAX);
        // A few hundred series per role, whatever the number of files and jobs.
        assert!(
            samples.len() < 2_000,
            "server {}: {} series",
            server.id,
            samples.len()
        );
        most_files = most_files.max(count("weft_io_file_written_bytes_total"));
    }
    // One-byte files are all on the io server of their first stripe: its table is
    // full, not more.
    assert_eq!(most_files, weft_metrics::server::FILES_TRACKED_MAX);
    // The most recent job is kept, the oldest went.
    let meta = parse(&scrape(&cluster, 0)).unwrap();
    let last = format!("job{}", weft_metrics::server::JOBS_TRACKED_MAX + 5);
    assert!(sum(&meta, "weft_meta_job_requests_total", &[("jobid", &last)]) > 0.0);
    assert_eq!(
        sum(&meta, "weft_meta_job_requests_total", &[("jobid", "job0")]),
        0.0
    );
}

#[test]
fn weft_top_once_shows_every_server_and_the_load() {
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 2,
        ..ClusterOptions::cached("colocated", "64M")
    });
    let client = cluster.client();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (text, json) = std::thread::scope(|scope| {
        scope.spawn(|| {
            let data = vec![7u8; 1 << 20];
            let file = client.create("/top", &Default::default()).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                file.write_at(0, &data).unwrap();
                let mut back = vec![0u8; data.len()];
                file.read_at(0, &mut back).unwrap();
            }
        });
        let text = weft_with(&cluster, &[("WEFT_JOB", "top-job")], &["top", "--once"]);
        let json = weft_with(&cluster, &[], &["top", "--once", "--json"]);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (text, json)
    });
    // Server rows start at the margin (busiest files and jobs are indented).
    let rows: HashMap<String, Vec<String>> = text
        .lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| {
            let cols: Vec<String> = l.split_whitespace().map(str::to_owned).collect();
            cols.first()?.parse::<u32>().ok()?;
            Some((cols[0].clone(), cols))
        })
        .collect();
    assert_eq!(rows.len(), 3, "{text}");
    for (id, cols) in &rows {
        assert_eq!(cols.last().map(String::as_str), Some("up"), "server {id}: {text}");
    }
    assert!(rows["1"][1] == "io,cache" && rows["0"][1] == "meta", "{text}");
    let view: serde_json::Value = serde_json::from_str(&json).unwrap();
    let servers = view["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 3);
    let written: f64 = servers
        .iter()
        .map(|s| s["written_bytes_per_second"].as_f64().unwrap())
        .sum();
    assert!(written > 0.0, "the load shows: {json}");
    let hit_rates: Vec<f64> = servers
        .iter()
        .filter_map(|s| s["hit_rate_percent"].as_f64())
        .collect();
    assert!(
        !hit_rates.is_empty(),
        "a cache manager shows its hit rate: {json}"
    );
    assert!(view["files"].as_array().is_some_and(|f| !f.is_empty()), "{json}");
}

#[test]
fn status_describes_the_cluster_of_weft_meta_with_metrics_urls() {
    let a = TestCluster::start_with(&ClusterOptions {
        io_servers: 1,
        ..Default::default()
    });
    let b = TestCluster::start_with(&ClusterOptions {
        io_servers: 3,
        ..Default::default()
    });
    // A client whose home is A's but whose WEFT_META is B's uses B: so does status.
    let b_meta = b.meta_addr();
    let key = b.key_path();
    let env = [
        ("WEFT_META", b_meta.as_str()),
        ("WEFT_KEY", key.to_str().unwrap()),
    ];
    let text = weft_with(&a, &env, &["status"]);
    assert!(text.contains(&format!("WEFT_META={b_meta}")), "{text}");
    // How B protects itself, as its own home's status says it (the manager tells).
    let home = weft_with(&b, &[], &["status"]);
    let line = |text: &str, start: &str| -> String {
        text.lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no {start:?} line:\n{text}"))
            .to_owned()
    };
    assert_eq!(line(&text, "identity:"), line(&home, "identity:"));
    let before_key = |l: String| l.split(", signed with").next().unwrap().to_owned();
    assert_eq!(
        before_key(line(&text, "capabilities:")),
        before_key(line(&home, "capabilities:"))
    );
    assert!(
        line(&text, "capabilities:").contains("servers-only key"),
        "{text}"
    );
    let rows = common::server_rows(&text);
    assert_eq!(rows.len(), 4, "B's manager and 3 io servers:\n{text}");
    for s in b.config().servers {
        let row = rows
            .iter()
            .find(|r| r.split_whitespace().next() == Some(&s.id.to_string()))
            .unwrap_or_else(|| panic!("server {}:\n{text}", s.id));
        assert!(row.contains(&s.addr) && row.contains(" up "), "{row}");
        let url = format!("metrics http://{}/metrics", s.metrics_addr.unwrap());
        assert!(text.contains(&url), "{url}:\n{text}");
    }
    // --web prints the page's URL: the manager's endpoint.
    let web = weft_with(&a, &env, &["status", "--web"]);
    let meta_metrics = b.config().meta().metrics_addr.clone().unwrap();
    assert_eq!(web.trim(), format!("http://{meta_metrics}/"));
    let page = weft_metrics::http::get(web.trim(), Duration::from_secs(10)).unwrap();
    assert!(String::from_utf8_lossy(&page).contains("<title>Weft status</title>"));
}

/// Loads `url` in headless Chromium (Debian's) and returns the DOM after its scripts
/// ran for a few seconds of virtual time. Chromium runs as root in CI: --no-sandbox.
fn browser_dom(url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            &format!("--user-data-dir={}", profile.path().display()),
            "--virtual-time-budget=3000",
            "--dump-dom",
            url,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium (scripts/install-deps.sh installs it)");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut dom = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut dom).unwrap();
        dom
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "chromium failed: {status}");
            break;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("chromium did not finish loading {url} within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap()
}

#[test]
fn the_status_page_shows_every_server_in_a_headless_browser() {
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 2,
        ..ClusterOptions::cached("1", "64M")
    });
    let url = weft_with(&cluster, &[], &["status", "--web"]);
    let dom = browser_dom(url.trim());
    // The page's script read the view and drew one row per server, each up.
    let config = cluster.config();
    assert_eq!(config.servers.len(), 4, "manager, 2 io servers, 1 cache manager");
    for server in &config.servers {
        let row_start = dom
            .find(&format!("<tr id=\"server-{}\"", server.id))
            .unwrap_or_else(|| panic!("no row for server {}:\n{dom}", server.id));
        let row = &dom[row_start..row_start + dom[row_start..].find("</tr>").unwrap()];
        assert!(row.contains("<td class=\"state\">up</td>"), "{row}");
        let roles: Vec<&str> = server.roles.iter().map(|r| r.name()).collect();
        assert!(
            row.contains(&format!("<td class=\"roles\">{}</td>", roles.join(","))),
            "{row}"
        );
    }
    assert!(dom.contains("4 of 4 servers up"), "{dom}");
    assert!(
        dom.contains("<div id=\"error\"></div>"),
        "the page reports no error: {dom}"
    );
}

#[test]
fn the_grafana_dashboard_asks_only_for_series_the_servers_serve() {
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../dashboards/weft-grafana.json"
        ))
        .unwrap(),
    )
    .expect("the dashboard is JSON");
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .map(|t| t["expr"].as_str().unwrap().to_owned())
        .collect();
    assert!(exprs.len() >= 10, "{exprs:?}");

    // A workload that makes every kind of series appear: data through io servers and
    // cache managers, a job, and errors (a removed file's objects are gone).
    let cluster = TestCluster::start_with(&ClusterOptions {
        io_servers: 2,
        ..ClusterOptions::cached("1", "64M")
    });
    let scratch = tempfile::tempdir().unwrap();
    let local = scratch.path().join("f");
    std::fs::write(&local, Rng::new(1).bytes(300_000)).unwrap();
    weft_with(
        &cluster,
        &[("WEFT_JOB", "dash")],
        &["put", local.to_str().unwrap(), "/cached"],
    );
    weft_with(
        &cluster,
        &[("WEFT_JOB", "dash")],
        &["put", "--cache", "none", local.to_str().unwrap(), "/plain"],
    );
    weft_with(
        &cluster,
        &[],
        &["get", "/plain", scratch.path().join("b").to_str().unwrap()],
    );
    let client = cluster.client();
    let file = client.open("/plain", &Default::default()).unwrap();
    client.unlink("/plain").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf = vec![0u8; 1000];
    while file.read_at(0, &mut buf).is_ok() {
        assert!(
            Instant::now() < deadline,
            "the removed file's objects were never purged"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut families = std::collections::HashSet::new();
    for server in cluster.config().servers {
        for line in scrape(&cluster, server.id).lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                families.insert(rest.split_whitespace().next().unwrap().to_owned());
            }
        }
    }
    let mut asked = 0;
    for expr in &exprs {
        for name in expr
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("weft_"))
        {
            let family = ["_total", "_bucket"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(name);
            assert!(
                families.contains(family),
                "{name} in {expr} is served by no server: {families:?}"
            );
            asked += 1;
        }
    }
    assert!(asked >= 20);
}
