//! `weft bench concurrent --compare-capabilities` end to end, tiny: not timed, only that
//! it starts two clusters that really differ (one refuses a read without a capability,
//! the other serves it; `weft status` says so), alternates the verified workload
//! between them pair after pair, reports per phase the median of the pairs' ratios,
//! draws it, and stops both clusters.

mod common;

use serde_json::Value;

const MIB: u64 = 1 << 20;

#[test]
fn comparing_capabilities_runs_two_clusters_that_differ_and_reports_ratios_per_pair() {
    let scratch = tempfile::tempdir().unwrap();
    let json = scratch.path().join("cap.json");
    let out = std::process::Command::new(weft_testkit::bin("weft"))
        .args(["bench", "concurrent", "--compare-capabilities"])
        .args([
            "--procs",
            "2",
            "--block-mib",
            "2",
            "--pairs",
            "2",
            "--io-servers",
            "2",
        ])
        .args(["--stripe-size", "64K", "--no-sync"])
        .arg("--json")
        .arg(&json)
        .env_remove("WEFT_HOME")
        .env_remove("WEFT_META")
        .env_remove("WEFT_KEY")
        .output()
        .expect("running weft bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "weft bench failed:\n{stdout}{stderr}");

    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(r["regime"]["kind"], "local", "{}", r["regime"]);
    let total = 2 * 2 * MIB;
    assert_eq!(r["total_bytes"], total);
    assert_eq!(r["pairs"], 2);

    // The two clusters differ in mode, shown by their servers and by `weft status`.
    let clusters = r["clusters"].as_array().unwrap();
    assert_eq!(clusters.len(), 2);
    let (on, off) = (&clusters[0], &clusters[1]);
    assert_eq!(on["mode"], "on");
    assert_eq!(off["mode"], "off");
    assert_eq!(on["capability_less_read_refused"], true, "{on}");
    assert!(
        on["capability_less_read"]
            .as_str()
            .unwrap()
            .contains("no valid read capability"),
        "{on}"
    );
    assert_eq!(off["capability_less_read_refused"], false, "{off}");
    let status_line = |c: &Value| {
        c["status"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap().to_owned())
            .find(|l| l.starts_with("capabilities:"))
            .unwrap_or_else(|| panic!("no capabilities line: {c}"))
    };
    assert!(status_line(on).contains("only with a capability"), "{on}");
    assert!(status_line(off).starts_with("capabilities: OFF"), "{off}");
    for c in clusters {
        assert!(
            c["status"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l.as_str().unwrap().starts_with("security:")),
            "authentication not reported: {c}"
        );
        let transports = c["transports"].as_array().unwrap();
        assert_eq!(transports.len(), 2, "one transport per io server: {c}");
        // The clusters were stopped and their homes removed.
        let home = std::path::Path::new(c["home"].as_str().unwrap());
        assert!(!home.exists(), "{} left behind", home.display());
    }

    // Every pair ran both sides, in alternating order, and verified every byte read.
    let rounds = r["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2);
    assert_eq!(rounds[0]["order"], serde_json::json!(["on", "off"]));
    assert_eq!(rounds[1]["order"], serde_json::json!(["off", "on"]));
    for pair in rounds {
        for side in ["on", "off"] {
            let cycle = &pair[side];
            assert_eq!(cycle["mode"], side);
            assert_eq!(cycle["bytes_verified"], 2 * total, "{cycle}");
            let ns = cycle["ns"].as_array().unwrap();
            assert_eq!(ns.len(), 4, "four phases: {cycle}");
            assert!(ns.iter().all(|p| p.as_array().unwrap().len() == 2), "{cycle}");
        }
        let ratios = pair["ratios"].as_array().unwrap();
        for (i, ratio) in ratios.iter().enumerate() {
            let expected =
                pair["on"]["mib_per_s"][i].as_f64().unwrap() / pair["off"]["mib_per_s"][i].as_f64().unwrap();
            assert!((ratio.as_f64().unwrap() - expected).abs() < 1e-9, "{pair}");
        }
    }

    // Per phase: the median of the pairs' ratios (two pairs: their mean), and goals.
    let summary = r["summary"].as_array().unwrap();
    let phases: Vec<&str> = summary.iter().map(|s| s["phase"].as_str().unwrap()).collect();
    assert_eq!(phases, ["write", "read", "rewrite", "reread"]);
    for (i, s) in summary.iter().enumerate() {
        let a = rounds[0]["ratios"][i].as_f64().unwrap();
        let b = rounds[1]["ratios"][i].as_f64().unwrap();
        assert!(
            (s["ratio_median"].as_f64().unwrap() - (a + b) / 2.0).abs() < 1e-9,
            "{s}"
        );
        assert!(s["ratio_min"].as_f64().unwrap() <= s["ratio_max"].as_f64().unwrap());
    }
    assert_eq!(r["goals"].as_array().unwrap().len(), 4);
    assert!(
        stdout.contains("target: write: capabilities on (median of pairs) >= 0.97x capabilities off: "),
        "{stdout}"
    );

    // The plot: median bars per side and phase, and the per-pair ratios.
    let plot = common::svg_check::assert_draws(&json, &json.with_extension("svg"));
    assert_eq!(plot["panels"].as_array().unwrap().len(), 2, "{plot}");
}

#[test]
fn comparing_capabilities_refuses_options_that_do_not_apply() {
    let out = std::process::Command::new(weft_testkit::bin("weft"))
        .args([
            "bench",
            "concurrent",
            "--compare-capabilities",
            "--procs",
            "1",
            "--block-mib",
            "1",
        ])
        .args(["--pairs", "0"])
        .output()
        .expect("running weft bench");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--pairs must be 1 to"), "{stderr}");
}

#[test]
fn comparing_capabilities_with_fresh_workers_runs_new_processes_every_cycle() {
    let scratch = tempfile::tempdir().unwrap();
    let json = scratch.path().join("fresh.json");
    let out = std::process::Command::new(weft_testkit::bin("weft"))
        .args(["bench", "concurrent", "--compare-capabilities", "--fresh-workers"])
        .args([
            "--procs",
            "1",
            "--block-mib",
            "1",
            "--pairs",
            "1",
            "--io-servers",
            "1",
        ])
        .arg("--json")
        .arg(&json)
        .env_remove("WEFT_HOME")
        .env_remove("WEFT_META")
        .env_remove("WEFT_KEY")
        .output()
        .expect("running weft bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "weft bench failed:\n{stdout}{stderr}");
    assert!(
        stdout.contains("worker processes: new for every cycle"),
        "{stdout}"
    );
    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(r["fresh_workers"], true);
    let pair = &r["rounds"][0];
    for side in ["on", "off"] {
        assert_eq!(pair[side]["bytes_verified"], 2 * MIB, "{pair}");
    }
}

#[test]
fn the_control_runs_both_clusters_without_capabilities_and_says_so() {
    let scratch = tempfile::tempdir().unwrap();
    let json = scratch.path().join("control.json");
    let out = std::process::Command::new(weft_testkit::bin("weft"))
        .args([
            "bench",
            "concurrent",
            "--compare-capabilities",
            "--control-both-off",
        ])
        .args([
            "--procs",
            "1",
            "--block-mib",
            "1",
            "--pairs",
            "1",
            "--io-servers",
            "1",
        ])
        .arg("--json")
        .arg(&json)
        .env_remove("WEFT_HOME")
        .env_remove("WEFT_META")
        .env_remove("WEFT_KEY")
        .output()
        .expect("running weft bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "weft bench failed:\n{stdout}{stderr}");
    assert!(
        stdout.contains("CONTROL: both clusters run without capabilities"),
        "{stdout}"
    );
    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(r["control_both_off"], true);
    for c in r["clusters"].as_array().unwrap() {
        assert_eq!(c["capability_less_read_refused"], false, "{c}");
    }
}

/// The weftd processes whose command line names a path under `dir`.
fn servers_under(dir: &std::path::Path) -> Vec<u32> {
    let dir = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            cmdline
                .split('\0')
                .next()
                .is_some_and(|exe| exe.ends_with("weftd"))
                && cmdline.contains(&dir)
        })
        .collect()
}

/// Starts a long comparison (two clusters, 50 pairs) whose homes go to `scratch` and
/// returns it once both clusters run.
fn long_comparison(scratch: &std::path::Path) -> std::process::Child {
    let mut bench = std::process::Command::new(weft_testkit::bin("weft"))
        .args(["bench", "concurrent", "--compare-capabilities"])
        .args([
            "--procs",
            "2",
            "--block-mib",
            "8",
            "--pairs",
            "50",
            "--io-servers",
            "2",
        ])
        .arg("--json")
        .arg(scratch.join("cap.json"))
        .env("TMPDIR", scratch)
        .env_remove("WEFT_HOME")
        .env_remove("WEFT_META")
        .env_remove("WEFT_KEY")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running weft bench");
    // Both clusters run (2 io servers and a manager each) before it is interrupted.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while servers_under(scratch).len() < 6 {
        if std::time::Instant::now() >= deadline || bench.try_wait().unwrap().is_some() {
            let _ = bench.kill();
            let out = bench.wait_with_output().unwrap();
            for pid in servers_under(scratch) {
                // SAFETY: killing a server process this test's benchmark started.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
            panic!(
                "the benchmark never had both clusters up ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    bench
}

/// The benchmark's temporary directories (cluster homes, its scratch) left in `scratch`.
fn bench_dirs_under(scratch: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(scratch)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("weft-bench-"))
        .collect()
}

/// Ctrl-C (SIGINT) and SIGTERM: the benchmark says so, stops both clusters, removes
/// their homes and its scratch directory, and exits with 128 + the signal.
#[test]
fn an_interrupted_comparison_stops_the_clusters_it_started() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // The benchmark's cluster homes go to its temporary directory: this test's own.
        let scratch = tempfile::tempdir().unwrap();
        let bench = long_comparison(scratch.path());
        // SAFETY: signalling the child this test started.
        unsafe { libc::kill(bench.id() as i32, signal) };
        let out = bench.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let left = servers_under(scratch.path());
        // Never leave servers behind, whatever the outcome.
        for &pid in &left {
            // SAFETY: killing a server process this test's benchmark started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        assert!(
            left.is_empty(),
            "servers left running after signal {signal}: {left:?}\n{stderr}"
        );
        assert_eq!(out.status.code(), Some(128 + signal), "{stderr}");
        assert!(
            stderr.contains(&format!("interrupted (signal {signal})")),
            "{stderr}"
        );
        // Its scratch directory goes too, with the tie's sweeper (exit skips its drop),
        // which waits up to 10 s for servers first.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(25);
        while !bench_dirs_under(scratch.path()).is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_eq!(
            bench_dirs_under(scratch.path()),
            Vec::<String>::new(),
            "left after signal {signal}"
        );
    }
}

/// kill -9 of the benchmark, where no handler and no drop runs: its servers read a
/// pipe only the benchmark wrote (`weft up --tie-to-stdin`) and end, and the tie's
/// sweepers remove the homes. Before the tie, all 6 servers ran on, their homes kept.
#[test]
fn a_killed_comparison_leaves_no_servers_and_no_homes() {
    let scratch = tempfile::tempdir().unwrap();
    let mut bench = long_comparison(scratch.path());
    let homes = bench_dirs_under(scratch.path());
    assert!(
        homes
            .iter()
            .filter(|h| h.starts_with("weft-bench-capcmp-home-"))
            .count()
            == 2,
        "two cluster homes expected: {homes:?}"
    );
    bench.kill().unwrap(); // SIGKILL
    bench.wait().unwrap();
    // The sweeper waits up to 10 s for the servers before it removes the homes: 25 s
    // in all leaves room for a loaded machine (10 s failed once under an outside suite).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(25);
    while (!servers_under(scratch.path()).is_empty() || !bench_dirs_under(scratch.path()).is_empty())
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let left = servers_under(scratch.path());
    for &pid in &left {
        // SAFETY: killing a server process this test's benchmark started.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    assert!(
        left.is_empty(),
        "servers left running 25 s after kill -9: {left:?}"
    );
    assert_eq!(
        bench_dirs_under(scratch.path()),
        Vec::<String>::new(),
        "left 25 s after kill -9"
    );
}
