//! Plots of `weft bench`: a benchmark writes its SVG next to its JSON and the SVG draws
//! the figure the JSON holds (well-formed, every series and value); `weft bench plot`
//! redraws one saved result and overlays several, and refuses bad files clearly.

mod common;

use common::svg_check::{assert_draws, check};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output};

fn weft(args: &[&str], dir: &Path) -> Output {
    Command::new(weft_testkit::bin("weft"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("running weft")
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "weft failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn series<'a>(plot: &'a Value, panel: usize, name: &str) -> &'a Vec<Value> {
    plot["panels"][panel]["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no series {name} in panel {panel}: {plot}"))["points"]
        .as_array()
        .unwrap()
}

#[test]
fn pack_writes_an_svg_next_to_its_json_drawing_its_figures() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = ok(&weft(
        &["bench", "pack", "--repetitions", "1", "--json", "out/pack.json"],
        dir.path(),
    ));
    assert!(stdout.contains("plot: out/pack.svg"), "{stdout}");
    let json = dir.path().join("out/pack.json");
    let plot = assert_draws(&json, &dir.path().join("out/pack.svg"));
    // The figure's points are the JSON's figures: GiB/s against the piece size.
    let results: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = results["pack"].as_array().unwrap();
    for (name, key) in [
        ("pack", "pack_gib_s"),
        ("unpack", "unpack_gib_s"),
        ("memcpy like pack (baseline)", "pack_memcpy_gib_s"),
        ("memcpy like unpack (baseline)", "unpack_memcpy_gib_s"),
    ] {
        let points = series(&plot, 0, name);
        assert_eq!(points.len(), rows.len(), "{name}");
        for (p, r) in points.iter().zip(rows) {
            assert_eq!(p[0].as_f64(), r["piece_bytes"].as_f64(), "{name}");
            assert_eq!(p[1], r[key], "{name}");
        }
    }
    assert_eq!(
        series(&plot, 1, "pieces_on").len(),
        results["server"].as_array().unwrap().len()
    );

    // Redrawn from the JSON alone, the same figure.
    let stdout = ok(&weft(
        &["bench", "plot", "out/pack.json", "--out", "again.svg"],
        dir.path(),
    ));
    assert!(stdout.contains("plot: again.svg"), "{stdout}");
    assert_draws(&json, &dir.path().join("again.svg"));
}

fn saved(dir: &Path, name: &str, plot: Value) {
    let results = json!({"benchmark": "test", "plot": plot});
    std::fs::write(dir.join(name), results.to_string()).unwrap();
}

#[test]
fn plot_overlays_saved_results_series_by_file() {
    let dir = tempfile::tempdir().unwrap();
    let figure = |weft_read: f64, k4: f64| {
        json!({
            "title": "run",
            "panels": [
                {"title": "by phase", "x_label": "phase", "y_label": "MiB/s",
                 "x_axis": {"categories": ["write", "read"]},
                 "series": [{"name": "local", "points": [[0.0, 100.0], [1.0, 200.0]]},
                            {"name": "weft", "points": [[0.0, 80.0], [1.0, weft_read]]}]},
                {"title": "vs k", "x_label": "k", "y_label": "MiB/s", "x_axis": "log2",
                 "series": [{"name": "cyclic", "points": [[1.0, 10.0], [4.0, k4], [16.0, 30.0]]}]}
            ]
        })
    };
    saved(dir.path(), "before.json", figure(150.0, 40.0));
    saved(dir.path(), "after.json", figure(190.0, 25.0));
    ok(&weft(
        &["bench", "plot", "before.json", "after.json", "--out", "cmp.svg"],
        dir.path(),
    ));
    let expected = json!({
        "title": "before vs after",
        "panels": [
            {"title": "by phase", "x_axis": {"categories": ["write", "read"]},
             "series": [{"name": "local [before]", "points": [[0.0, 100.0], [1.0, 200.0]]},
                        {"name": "weft [before]", "points": [[0.0, 80.0], [1.0, 150.0]]},
                        {"name": "local [after]", "points": [[0.0, 100.0], [1.0, 200.0]]},
                        {"name": "weft [after]", "points": [[0.0, 80.0], [1.0, 190.0]]}]},
            {"title": "vs k", "x_axis": "log2",
             "series": [{"name": "cyclic [before]", "points": [[1.0, 10.0], [4.0, 40.0], [16.0, 30.0]]},
                        {"name": "cyclic [after]", "points": [[1.0, 10.0], [4.0, 25.0], [16.0, 30.0]]}]}
        ]
    });
    let svg = std::fs::read_to_string(dir.path().join("cmp.svg")).unwrap();
    check(&svg, &expected).unwrap();

    // Labels given; one file redrawn next to itself.
    ok(&weft(
        &[
            "bench",
            "plot",
            "before.json",
            "after.json",
            "--label",
            "old,new",
            "--out",
            "l.svg",
        ],
        dir.path(),
    ));
    let svg = std::fs::read_to_string(dir.path().join("l.svg")).unwrap();
    assert!(
        svg.contains("weft [new]") && svg.contains("old vs new"),
        "labels not used"
    );
    ok(&weft(&["bench", "plot", "after.json"], dir.path()));
    let svg = std::fs::read_to_string(dir.path().join("after.svg")).unwrap();
    check(&svg, &figure(190.0, 25.0)).unwrap();
}

#[test]
fn plot_refuses_bad_files_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("old.json"), r#"{"benchmark": "x", "rows": []}"#).unwrap();
    std::fs::write(dir.path().join("text.json"), "not json").unwrap();
    saved(
        dir.path(),
        "nan.json",
        json!({"title": "t", "panels": [{"title": "p", "x_label": "", "y_label": "", "x_axis": "log2",
               "series": [{"name": "s", "points": [[0.0, 1.0]]}]}]}),
    );
    for (args, says) in [
        (vec!["old.json"], "old.json: no \"plot\""),
        (vec!["text.json"], "text.json: not JSON"),
        (vec!["missing.json"], "missing.json"),
        (vec!["nan.json"], "does not fit its axis"),
        (
            vec!["old.json", "text.json", "--label", "a"],
            "1 labels for 2 files",
        ),
    ] {
        let out = weft(&[&["bench", "plot"][..], &args].concat(), dir.path());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    assert!(!dir.path().join("old.svg").exists());
}

/// The value `key` of the first of `rows` that `pick` accepts.
fn row_value(rows: &[Value], pick: impl Fn(&Value) -> bool, key: &str) -> f64 {
    rows.iter()
        .find(|r| pick(r))
        .unwrap_or_else(|| panic!("no row for {key}"))[key]
        .as_f64()
        .unwrap()
}

#[test]
fn noncontig_plots_bandwidth_against_k_with_the_contiguous_baseline() {
    let cluster = weft_testkit::TestCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("noncontig.json");
    let out = cluster
        .command("weft")
        .args([
            "bench",
            "noncontig",
            "--procs",
            "4",
            "--matrix-mib",
            "1",
            "--k",
            "8,64",
        ])
        .args(["--repeat", "1", "--stripe-size", "64K", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    ok(&out);
    let plot = assert_draws(&json, &json.with_extension("svg"));
    let results: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let summary = results["summary"].as_array().unwrap();
    for (panel, key) in [(0, "write_mib_per_s"), (1, "read_mib_per_s")] {
        let cyclic = series(&plot, panel, "CYCLIC(k) view");
        let ks: Vec<f64> = cyclic.iter().map(|p| p[0].as_f64().unwrap()).collect();
        assert_eq!(ks, [8.0, 64.0]);
        for p in cyclic {
            let k = p[0].as_f64().unwrap();
            let expected = row_value(summary, |r| r["access"]["cyclic"].as_f64() == Some(k), key);
            assert_eq!(p[1].as_f64().unwrap(), expected, "{key} at k={k}");
        }
        let baseline = series(&plot, panel, "contiguous (baseline)");
        let contiguous = row_value(summary, |r| r["access"] == "contiguous", key);
        assert!(baseline.iter().all(|p| p[1].as_f64() == Some(contiguous)));
        assert_eq!(baseline.len(), 2, "a flat line over the k measured");
    }
}

#[test]
fn collective_plots_every_method_and_baseline_per_pattern() {
    let cluster = weft_testkit::TestCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("collective.json");
    let out = cluster
        .command("weft")
        .args([
            "bench",
            "collective",
            "--procs",
            "2",
            "--n",
            "16",
            "--cyclic-n",
            "64",
            "--k",
            "4,16",
        ])
        .args([
            "--s3d-n",
            "8",
            "--methods",
            "two_phase,independent",
            "--baselines",
            "romio321",
        ])
        .args(["--path", "/bc", "--json"])
        .arg(&json)
        .arg("--svg")
        .arg(dir.path().join("c.svg"))
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .unwrap();
    ok(&out);
    let plot = assert_draws(&json, &dir.path().join("c.svg"));
    let results: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = results["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4 * 3, "4 patterns x (2 methods + 1 baseline)");
    let categories = plot["panels"][0]["x_axis"]["categories"].as_array().unwrap();
    assert_eq!(categories.len(), 4);
    for (panel, key) in [(0, "write_mib_s"), (1, "read_mib_s")] {
        for method in ["romio321", "two_phase", "independent"] {
            let points = series(&plot, panel, method);
            assert_eq!(points.len(), 4, "{method}");
            for p in points {
                let pattern = &categories[p[0].as_f64().unwrap() as usize];
                let expected = row_value(rows, |r| r["method"] == method && r["pattern"] == *pattern, key);
                assert_eq!(p[1].as_f64().unwrap(), expected, "{method} {pattern} {key}");
            }
        }
    }
}
