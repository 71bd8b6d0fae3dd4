//! Shared reporting: bandwidth arithmetic, repeats run alternated and summarised as
//! median, min and max, text tables, targets, the facts every result file records, and
//! JSON files.

use crate::plot::Figure;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

pub const MIB: u64 = 1 << 20;

/// MiB/s for `bytes` moved in `ns` nanoseconds.
pub fn mib_per_s(bytes: u64, ns: u64) -> f64 {
    bytes as f64 / MIB as f64 / (ns.max(1) as f64 / 1e9)
}

/// The middle value of `v` (the mean of the two middle ones for an even count: with two
/// runs the upper one was the maximum), 0 for none.
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// What a benchmark program that ran to a successful end printed.
pub struct Ran {
    pub stdout: String,
    pub stderr: String,
    /// The command line as reports show it.
    pub shown: String,
}

/// Runs a benchmark program (mpirun ...) to its end, or fails with both of its outputs
/// if it did not succeed.
pub fn run_program(mut command: std::process::Command) -> Result<Ran> {
    let shown = format!("{command:?}").replace('"', "");
    let out = command
        .output()
        .with_context(|| format!("running {}", command.get_program().to_string_lossy()))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "{shown} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    Ok(Ran {
        stdout,
        stderr,
        shown,
    })
}

/// A text table with a header row; columns are padded to their widest cell, text
/// aligned left and numbers right.
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            rows: vec![header.iter().map(|s| s.to_string()).collect()],
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.rows[0].len(), "row width");
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let columns = self.rows[0].len();
        let widths: Vec<usize> = (0..columns)
            .map(|c| self.rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        let numeric = |s: &str| s.starts_with(|c: char| c.is_ascii_digit() || c == '-');
        // A column of numbers is right-aligned, its header too.
        let right: Vec<bool> = (0..columns)
            .map(|c| self.rows.len() > 1 && self.rows[1..].iter().all(|r| numeric(&r[c])))
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let cells: Vec<String> = row
                .iter()
                .zip(widths.iter().zip(&right))
                .map(|(cell, (&w, &right))| {
                    if right {
                        format!("{cell:>w$}")
                    } else {
                        format!("{cell:<w$}")
                    }
                })
                .collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
        out
    }
}

/// One method in one phase, summarised over the runs.
#[derive(Debug, PartialEq)]
pub struct Summarised<M, P> {
    pub method: M,
    pub phase: P,
    /// The median of the runs.
    pub mib_per_s: f64,
    /// The runs' min, median and max.
    pub spread: Spread,
    /// `mib_per_s` over the baseline method's in the same phase (a ratio of medians).
    pub ratio: f64,
    pub per_run_mib_per_s: Vec<f64>,
}

/// Every method in every phase (methods outer, in the order given), each compared
/// with `baseline` (one of `methods`) in the same phase; `per_run` gives a method's
/// MiB/s in a phase, one figure per run.
pub fn summarise<M: Copy + PartialEq, P: Copy + PartialEq>(
    methods: &[M],
    phases: &[P],
    baseline: M,
    per_run: impl Fn(M, P) -> Vec<f64>,
) -> Vec<Summarised<M, P>> {
    let mut summary = Vec::new();
    for &method in methods {
        for &phase in phases {
            let per_run = per_run(method, phase);
            let spread = Spread::of(&per_run);
            summary.push(Summarised {
                method,
                phase,
                mib_per_s: spread.median,
                spread,
                ratio: 0.0,
                per_run_mib_per_s: per_run,
            });
        }
    }
    for k in 0..summary.len() {
        let base = summary
            .iter()
            .find(|s| s.method == baseline && s.phase == summary[k].phase)
            .expect("every phase has a baseline row")
            .mib_per_s;
        summary[k].ratio = summary[k].mib_per_s / base;
    }
    summary
}

/// Fails unless `value` of option `option` (its flag, `--procs`) is within `range`.
pub fn check_range<T: PartialOrd + std::fmt::Display>(
    option: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<()> {
    anyhow::ensure!(
        range.contains(&value),
        "{option} must be {} to {}",
        range.start(),
        range.end()
    );
    Ok(())
}

/// Per-run figures as one table cell: whole numbers separated by spaces.
pub fn runs_cell(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| format!("{v:.0}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A target: Weft's figure over its baseline's must be at least `ratio_min`. Only where
/// a target applies (one the project set for this comparison): a comparison without one
/// is shown as its ratio, never as met or missed.
#[derive(Debug, Serialize)]
pub struct Goal {
    pub what: String,
    /// What `ratio` is measured against, named in the target line.
    pub baseline: String,
    pub ratio_min: f64,
    pub ratio: f64,
    pub met: bool,
}

impl Goal {
    pub fn new(what: impl Into<String>, baseline: impl Into<String>, ratio_min: f64, ratio: f64) -> Goal {
        Goal {
            what: what.into(),
            baseline: baseline.into(),
            ratio_min,
            ratio,
            met: ratio >= ratio_min,
        }
    }
}

/// One `target: ...` line per goal, ratios shown as multiples of the named baseline.
pub fn target_lines(goals: &[Goal]) -> String {
    goals
        .iter()
        .map(|g| {
            format!(
                "target: {} >= {:.2}x {}: {} ({:.2}x)\n",
                g.what,
                g.ratio_min,
                g.baseline,
                if g.met { "met" } else { "MISSED" },
                g.ratio
            )
        })
        .collect()
}

/// The lowest, middle and highest of several runs of one measurement.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Spread {
    /// The spread of `values` (all 0 for none).
    pub fn of(values: &[f64]) -> Spread {
        let lowest = values.iter().copied().fold(f64::INFINITY, f64::min);
        let highest = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        match values.is_empty() {
            true => Spread {
                min: 0.0,
                median: 0.0,
                max: 0.0,
            },
            false => Spread {
                min: lowest,
                median: median(values),
                max: highest,
            },
        }
    }

    /// "median (min-max)" with `decimals` places.
    pub fn cell(&self, decimals: usize) -> String {
        format!(
            "{:.d$} ({:.d$}-{:.d$})",
            self.median,
            self.min,
            self.max,
            d = decimals
        )
    }
}

/// Runs every one of `configs` `repeat` times, alternated: round after round, each round
/// running every configuration once, starting one further along each round (so that no
/// configuration always runs first, after the same one, or while the machine warms up).
/// `run(round, config)` measures one run (`round` from 0); returns each configuration's
/// runs in `configs`' order.
pub fn alternated<C, T>(
    configs: &[C],
    repeat: u32,
    mut run: impl FnMut(u32, &C) -> Result<T>,
) -> Result<Vec<Vec<T>>> {
    let mut runs: Vec<Vec<T>> = configs.iter().map(|_| Vec::new()).collect();
    for round in 0..repeat.max(1) {
        for k in 0..configs.len() {
            let i = (round as usize + k) % configs.len();
            runs[i].push(run(round, &configs[i])?);
        }
    }
    Ok(runs)
}

/// How the runs of a configuration are summarised (a results file's `repeat_summary`).
pub const REPEAT_SUMMARY: &str =
    "median of the runs, min and max kept; the configurations alternated run by run, the order rotating";

/// The body of a report against a baseline: the summary table (per method and phase:
/// MiB/s as median (min-max), the ratio of medians to `baseline`, every run's MiB/s),
/// then the target lines, then the notes. `rows` are (method, phase, MiB/s, ratio,
/// per-run MiB/s).
pub fn summary_text<'a>(
    baseline: &str,
    rows: impl IntoIterator<Item = (&'a str, &'a str, Spread, f64, &'a [f64])>,
    goals: &[Goal],
    notes: &[&str],
) -> String {
    let vs = format!("vs {baseline}");
    let mut table = Table::new(&["method", "phase", "MiB/s median (min-max)", &vs, "runs (MiB/s)"]);
    for (method, phase, spread, ratio, per_run) in rows {
        table.row(vec![
            method.into(),
            phase.into(),
            spread.cell(1),
            format!("{ratio:.2}"),
            runs_cell(per_run),
        ]);
    }
    let mut out = table.render();
    out.push('\n');
    out.push_str(&target_lines(goals));
    for n in notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
}

/// The command line of this process, as the result files record it.
pub fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub fn unix_now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The CPUs this process may use (1 if unknown).
pub fn host_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Writes `value` as pretty JSON to `path`, creating its directory.
pub fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// The one way a benchmark saves its results: `results` (a JSON object) as pretty JSON
/// at `json` with `figure` added under `"plot"` (so that `weft bench plot` can redraw
/// it), then `figure` drawn as SVG at `svg` (unless it has no point: a run that
/// measured nothing); prints where both went.
pub fn write_results(json: &Path, svg: &Path, results: &impl Serialize, figure: &Figure) -> Result<()> {
    let mut value = serde_json::to_value(results)?;
    let serde_json::Value::Object(map) = &mut value else {
        bail!("results for {} are not a JSON object", json.display());
    };
    map.insert("plot".into(), serde_json::to_value(figure)?);
    map.insert("regime".into(), crate::regime::json());
    write_json(json, &value)?;
    if !figure.has_points() {
        println!("JSON: {}  (no plot: nothing was measured)", json.display());
        return Ok(());
    }
    crate::plot::draw(svg, figure)?;
    println!("JSON: {}  plot: {}", json.display(), svg.display());
    Ok(())
}

/// The figure of a benchmark against a baseline: MiB/s as grouped bars, one group per
/// phase and one bar per method (the baseline among them); `rows` are (method, phase,
/// MiB/s).
pub fn phase_bars<'a>(title: &str, rows: impl IntoIterator<Item = (&'a str, &'a str, f64)>) -> Figure {
    let mut panel = crate::plot::Panel::bars("throughput per method and phase", "phase", "MiB/s", Vec::new());
    for (method, phase, mib_per_s) in rows {
        panel.bar(method, phase, mib_per_s);
    }
    Figure {
        title: title.to_owned(),
        panels: vec![panel],
    }
}

/// The SVG path of a benchmark that has no `--svg`: next to its JSON, `.svg` for `.json`.
pub fn svg_next_to(json: &Path) -> PathBuf {
    json.with_extension("svg")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With an even count the median is the mean of the middle two: it was the upper
    /// one, so two runs reported their maximum as the median.
    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[3.0, 1.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn bandwidth_and_tables() {
        assert_eq!(mib_per_s(1 << 30, 1_000_000_000), 1024.0);
        let mut t = Table::new(&["method", "MiB/s"]);
        t.row(vec!["weft".into(), "12.5".into()]);
        t.row(vec!["local".into(), "1000.0".into()]);
        assert_eq!(t.render(), "method   MiB/s\nweft      12.5\nlocal   1000.0\n");
        assert_eq!(runs_cell(&[12.4, 1000.6]), "12 1001");
    }

    /// Each row is the median of its runs with their min and max, compared with the
    /// baseline's median in its own phase. Before, rows were trimmed means (40 and 20 gave
    /// 30; 5, 100, 16 and 15 gave 15.5) and the spread of the runs was not kept.
    #[test]
    fn every_row_is_a_median_with_its_spread_compared_with_the_baseline_in_its_own_phase() {
        let figures = |method: char, phase: u8| match (method, phase) {
            ('b', 0) => vec![10.0],
            ('b', _) => vec![40.0, 20.0],
            ('w', 0) => vec![5.0, 100.0, 16.0, 15.0],
            (_, _) => vec![10.0],
        };
        let s = summarise(&['b', 'w'], &[0u8, 1], 'b', figures);
        let rows: Vec<_> = s
            .iter()
            .map(|r| (r.method, r.phase, r.mib_per_s, r.ratio))
            .collect();
        assert_eq!(
            rows,
            [
                ('b', 0, 10.0, 1.0),
                ('b', 1, 30.0, 1.0),
                ('w', 0, 15.5, 1.55),
                ('w', 1, 10.0, 1.0 / 3.0)
            ]
        );
        assert_eq!(s[2].per_run_mib_per_s, [5.0, 100.0, 16.0, 15.0]);
        assert_eq!(
            s[2].spread,
            Spread {
                min: 5.0,
                median: 15.5,
                max: 100.0
            }
        );
    }

    #[test]
    fn the_summary_text_is_table_targets_then_notes() {
        let runs = [7.0, 9.0];
        let text = summary_text(
            "local",
            [("weft", "read", Spread::of(&runs), 0.5, &runs[..])],
            &[Goal::new("weft read", "the local file", 0.5, 0.5)],
            &["a note"],
        );
        assert_eq!(
            text,
            "method  phase  MiB/s median (min-max)  vs local  runs (MiB/s)\n\
             weft    read            8.0 (7.0-9.0)      0.50           7 9\n\
             \n\
             target: weft read >= 0.50x the local file: met (0.50x)\n\
             note: a note\n"
        );
    }

    #[test]
    fn results_are_saved_with_their_figure_and_its_svg() {
        let dir = tempfile::tempdir().unwrap();
        let (json, svg) = (dir.path().join("r/x.json"), dir.path().join("r/x.svg"));
        let figure = phase_bars("t", [("local", "read", 2.0), ("weft", "read", 1.0)]);
        write_results(&json, &svg, &serde_json::json!({"benchmark": "x"}), &figure).unwrap();
        let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(saved["benchmark"], "x");
        let back: Figure = serde_json::from_value(saved["plot"].clone()).unwrap();
        assert_eq!(back, figure);
        assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));

        // Nothing measured: the JSON without a drawing; a result that is not an object:
        // an error.
        std::fs::remove_file(&svg).unwrap();
        write_results(&json, &svg, &serde_json::json!({}), &Figure::new("empty")).unwrap();
        assert!(json.exists() && !svg.exists());
        let e = write_results(&json, &svg, &[1, 2], &figure).unwrap_err();
        assert!(e.to_string().contains("not a JSON object"), "{e}");
    }

    #[test]
    fn a_target_is_met_from_its_minimum_on() {
        let goals = [
            Goal::new("weft read", "the local file", 0.5, 0.5),
            Goal::new("x", "y", 0.7, 0.25),
        ];
        assert!(goals[0].met && !goals[1].met);
        assert_eq!(
            target_lines(&goals),
            "target: weft read >= 0.50x the local file: met (0.50x)\ntarget: x >= 0.70x y: MISSED (0.25x)\n"
        );
    }

    #[test]
    fn alternated_runs_rotate_the_order_every_round() {
        let mut order = Vec::new();
        let runs = alternated(&['a', 'b', 'c'], 3, |round, c| {
            order.push((round, *c));
            Ok(order.len())
        })
        .unwrap();
        // A fixed order (a b c a b c ...) would always run `a` first: each starts a round.
        let configs: Vec<char> = order.iter().map(|o| o.1).collect();
        assert_eq!(configs, ['a', 'b', 'c', 'b', 'c', 'a', 'c', 'a', 'b']);
        let rounds: Vec<u32> = order.iter().map(|o| o.0).collect();
        assert_eq!(rounds, [0, 0, 0, 1, 1, 1, 2, 2, 2]);
        assert_eq!(runs, [vec![1, 6, 8], vec![2, 4, 9], vec![3, 5, 7]]);
        let s = Spread::of(&[3.0, 1.0, 2.0, 10.0]);
        assert_eq!((s.min, s.median, s.max), (1.0, 2.5, 10.0));
        assert_eq!(s.cell(1), "2.5 (1.0-10.0)");
        assert_eq!(Spread::of(&[]).max, 0.0);
    }
}
