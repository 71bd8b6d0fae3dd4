//! `weft trace synth` then `weft sim` from the command line: the JSON scripts read (one
//! row per policy, stream, admission and cache size, hit rates within 0..1), the
//! default nine cache sizes, the SVG plot, and clear errors for bad input. No cluster.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn weft(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(weft_testkit::bin_dir().join("weft"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("running weft (build the workspace first)")
}

#[test]
fn sim_json_has_a_row_per_policy_stream_and_size() {
    let dir = tempfile::tempdir().unwrap();
    let out = weft(
        &[
            "trace", "synth", "tile", "--procs", "4", "--passes", "2", "--out", "traces",
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = weft(&["sim", "traces", "--json", "--svg", "plot.svg"], dir.path());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = report["results"].as_array().unwrap();
    // 5 policies x (aggregated + original cold + original none) x 9 sizes.
    assert_eq!(rows.len(), 5 * 3 * 9);
    let mut sizes: Vec<u64> = rows.iter().map(|r| r["cache_bytes"].as_u64().unwrap()).collect();
    sizes.sort_unstable();
    sizes.dedup();
    assert_eq!(sizes.len(), 9);
    let touched = report["touched_bytes"].as_u64().unwrap();
    assert!(
        sizes[0] <= touched / 16 && sizes[8] >= touched * 2 - 65536,
        "{sizes:?} {touched}"
    );
    for r in rows {
        let h = r["hit_rate"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&h), "{r}");
        assert!(
            ["aggregated", "original"].contains(&r["stream"].as_str().unwrap()),
            "{r}"
        );
        assert!(r["policy"].is_string());
        assert!(r["hits"].as_u64().unwrap() <= r["references"].as_u64().unwrap());
    }
    // Two passes over the tiles: with twice the data, everything after the first
    // reference of each block hits, in both streams.
    let big = |stream: &str| {
        rows.iter()
            .find(|r| {
                r["policy"] == "lru" && r["stream"] == stream && r["cache_bytes"].as_u64() == Some(sizes[8])
            })
            .unwrap()
            .clone()
    };
    for stream in ["aggregated", "original"] {
        let r = big(stream);
        let misses = r["references"].as_u64().unwrap() - r["hits"].as_u64().unwrap();
        assert!(misses as f64 <= touched as f64 / 65536.0 * 1.1, "{r}");
    }
    let svg = std::fs::read_to_string(dir.path().join("plot.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("arc original (cold)"),
        "{}",
        &svg[..200.min(svg.len())]
    );
    // The table form, and the text of one trace.
    let out = weft(
        &[
            "sim", "traces", "--policy", "arc", "--stream", "original", "--no-svg",
        ],
        dir.path(),
    );
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("arc original (cold)"), "{text}");
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("arc") && l.contains(" aggregated ")),
        "{text}"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    let out = weft(&["sim", "empty", "--no-svg"], dir.path());
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no *.wtrace files"));
    std::fs::create_dir(dir.path().join("junk")).unwrap();
    std::fs::write(dir.path().join("junk/a.wtrace"), b"this is not a trace").unwrap();
    let out = weft(&["sim", "junk", "--no-svg"], dir.path());
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a Weft trace"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = weft(&["trace", "show", "junk/a.wtrace"], dir.path());
    assert!(!out.status.success());
    let out = weft(
        &["trace", "synth", "tile", "--procs", "2", "--out", "t"],
        dir.path(),
    );
    assert!(out.status.success());
    let out = weft(&["sim", "t", "--policy", "mru", "--no-svg"], dir.path());
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown cache policy"));
    let out = weft(&["sim", "t", "--cache-sizes", "1K", "--no-svg"], dir.path());
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("less than one block"));
}
