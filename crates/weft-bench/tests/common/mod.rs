//! Helpers shared by the integration tests.

pub mod svg_check;

use std::path::Path;

/// What every benchmark run must leave (issue 36): nothing in the cluster's namespace
/// (the cluster was fresh: its root is empty again), its JSON with the SVG next to it
/// drawing the JSON's figure, readable (`svg_check::assert_draws`), and `weft bench plot`
/// able to redraw the figure from the JSON. Returns the figure.
#[allow(dead_code)]
pub fn assert_clean_and_plotted(cluster: &weft_testkit::TestCluster, json: &Path) -> serde_json::Value {
    let left: Vec<String> = cluster
        .client()
        .readdir("/")
        .unwrap()
        .iter()
        .map(|e| e.name.to_string())
        .collect();
    assert!(left.is_empty(), "left in the cluster's namespace: {left:?}");
    let plot = svg_check::assert_draws(json, &json.with_extension("svg"));
    let again = json.with_extension("again.svg");
    let out = std::process::Command::new(weft_testkit::bin("weft"))
        .args(["bench", "plot"])
        .arg(json)
        .arg("--out")
        .arg(&again)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "weft bench plot cannot read {}: {}",
        json.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    svg_check::assert_draws(json, &again);
    plot
}
