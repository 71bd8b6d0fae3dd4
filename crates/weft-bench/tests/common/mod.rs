//! Helpers shared by the integration tests.

pub mod svg_check;

use std::path::Path;

/// What every benchmark run must leave (issue 36): nothing in the cluster's namespace
/// (the cluster was fresh: its root is empty again), its JSON with the SVG next to it
/// drawing the JSON's figure, readable (`svg_check::assert_draws`), and `weft bench plot`
/// able to redraw the figure from the JSON. Returns the figure.
#[allow(dead_code)]
pub fn assert_clean_and_plotted(cluster: &weft_testkit::TestCluster, json: &Path) -> serde_json::Value {
    assert_namespace_empty(cluster, "");
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

/// The cluster was fresh: nothing of a benchmark's is left in its namespace (`context`
/// is shown on failure).
#[allow(dead_code)]
pub fn assert_namespace_empty(cluster: &weft_testkit::TestCluster, context: &str) {
    let left: Vec<String> = cluster
        .client()
        .readdir("/")
        .unwrap()
        .iter()
        .map(|e| e.name.to_string())
        .collect();
    assert!(
        left.is_empty(),
        "left in the cluster's namespace: {left:?}\n{context}"
    );
}

/// Runs the benchmark `command` in a process group of its own, waits until `started()`
/// says it is under way, then interrupts it like Ctrl-C in a terminal (SIGINT to the
/// process group); returns its exit code and standard error.
#[allow(dead_code)]
pub fn interrupt(
    command: &mut std::process::Command,
    what: &str,
    started: impl Fn() -> bool,
) -> (Option<i32>, String) {
    use std::os::unix::process::CommandExt;
    let mut child = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let begun = std::time::Instant::now();
    while !started() {
        assert!(begun.elapsed().as_secs() < 120, "{what} never happened");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the benchmark ended before it was interrupted"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: signals the benchmark's own process group, made above.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `weft bench ARGS... --json JSON` of a benchmark that starts its own clusters, with no
/// cluster named by the environment; panics unless it succeeds. Returns its stdout.
#[allow(dead_code)]
pub fn bench_on_own_clusters(args: &[&str], json: &Path) -> String {
    let out = std::process::Command::new(weft_testkit::bin("weft"))
        .arg("bench")
        .args(args)
        .arg("--json")
        .arg(json)
        .env_remove("WEFT_HOME")
        .env_remove("WEFT_META")
        .env_remove("WEFT_KEY")
        .output()
        .expect("running weft bench");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "weft bench failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
