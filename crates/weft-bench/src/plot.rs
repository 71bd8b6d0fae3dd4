//! Figures of benchmark results and their SVG drawing (plotters, SVG backend only).
//!
//! A [`Figure`] is data: panels (drawn in a grid that fits a screen), each with an x axis (logarithmic in base
//! 2, linear, or named categories) and one series per method or configuration. Every
//! benchmark builds its figure from its results and hands both to
//! `crate::report::write_results`, which stores the figure in the JSON under `"plot"`
//! and draws it next to it; `weft bench plot` reads the figures back from saved JSON
//! files and redraws one or overlays several ([`overlay`]).
//!
//! Drawing: the panels go in a grid of equal cells ([`Grid`]: up to three columns, as
//! many as fit 1,560 pixels, rows below), the legend at the right. Numeric axes get a
//! line per series with a marker (circle) per point, whole-number ticks only where every
//! x is a whole number (process counts, k), and labels with the decimals their range
//! needs, so that no label repeats on an axis;
//! category axes get grouped bars, one bar per series and category. One legend at the
//! right for all panels, a series of the same name having the same colour in each.

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use plotters::coord::combinators::BindKeyPoints;
use plotters::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const LONG_ABOUT: &str = "Redraws the plot of a saved benchmark result, or overlays several \
for comparison. Every `weft bench` run stores its figure in its JSON file (under \"plot\"); with one \
FILE the figure is drawn again (to --out, default FILE with .svg), with several their panels of the \
same title are merged and every series is named after the file it came from (its name without \
.json, or --label).\n\nExamples:\n  weft bench plot bench-results/concurrent.json\n  weft bench \
plot --out compare.svg before/noncontig.json after/noncontig.json --label before,after";

/// Most files one `weft bench plot` reads, and the largest.
pub const FILES_MAX: usize = 64;
pub const FILE_BYTES_MAX: u64 = 64 << 20;

/// `weft bench plot FILE.json...`
#[derive(Args, Debug, Clone)]
pub struct PlotArgs {
    /// JSON results written by `weft bench ...`.
    #[arg(required = true, value_name = "FILE.json")]
    pub files: Vec<PathBuf>,
    /// The SVG to write. Default: next to the one FILE, or bench-results/compare.svg.
    #[arg(long, value_name = "FILE.svg")]
    pub out: Option<PathBuf>,
    /// Names of the files' series in an overlay, comma separated, one per file.
    #[arg(long, value_delimiter = ',')]
    pub label: Vec<String>,
    /// The figure's title. Default: the file's, or the files' labels.
    #[arg(long)]
    pub title: Option<String>,
}

/// The figure saved in a result file.
pub fn read_figure(path: &Path) -> Result<Figure> {
    let size = std::fs::metadata(path)
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    if size > FILE_BYTES_MAX {
        bail!(
            "{}: {size} bytes, more than a result file holds ({FILE_BYTES_MAX})",
            path.display()
        );
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    let plot = value
        .get_mut("plot")
        .map(serde_json::Value::take)
        .ok_or_else(|| {
            anyhow!(
                "{}: no \"plot\" in it (not written by `weft bench`, or by one older than plots)",
                path.display()
            )
        })?;
    let figure: Figure = serde_json::from_value(plot)
        .with_context(|| format!("{}: its \"plot\" is not a figure", path.display()))?;
    figure.check().with_context(|| format!("{}", path.display()))?;
    Ok(figure)
}

/// `weft bench plot`.
pub fn run(args: &PlotArgs) -> Result<()> {
    if args.files.len() > FILES_MAX {
        bail!("{} files; at most {FILES_MAX} at once", args.files.len());
    }
    if !args.label.is_empty() && args.label.len() != args.files.len() {
        bail!(
            "{} labels for {} files: give one per file",
            args.label.len(),
            args.files.len()
        );
    }
    let figures = args
        .files
        .iter()
        .map(|f| read_figure(f))
        .collect::<Result<Vec<Figure>>>()?;
    let (figure, out) = if let [one] = &figures[..] {
        let mut figure = one.clone();
        if let Some(t) = &args.title {
            figure.title = t.clone();
        }
        (
            figure,
            args.out
                .clone()
                .unwrap_or_else(|| args.files[0].with_extension("svg")),
        )
    } else {
        let labels = if args.label.is_empty() {
            labels(&args.files)
        } else {
            args.label.clone()
        };
        let title = args.title.clone().unwrap_or_else(|| labels.join(" vs "));
        let named: Vec<(String, Figure)> = labels.into_iter().zip(figures).collect();
        let out = args
            .out
            .clone()
            .unwrap_or_else(|| PathBuf::from("bench-results/compare.svg"));
        (overlay(&title, &named)?, out)
    };
    draw(&out, &figure)?;
    println!("plot: {}", out.display());
    Ok(())
}

/// Each file's name without `.json`, or its whole path where two names are the same.
fn labels(files: &[PathBuf]) -> Vec<String> {
    let stems: Vec<String> = files
        .iter()
        .map(|f| {
            f.file_stem()
                .unwrap_or(f.as_os_str())
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let unique = stems.iter().enumerate().all(|(i, s)| !stems[..i].contains(s));
    if unique {
        stems
    } else {
        files.iter().map(|f| f.display().to_string()).collect()
    }
}

/// A whole figure: what one SVG file shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    pub title: String,
    pub panels: Vec<Panel>,
}

/// One chart of the figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Panel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_axis: XAxis,
    pub series: Vec<Series>,
}

/// How a panel's x values are read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum XAxis {
    /// Numbers on a base-2 logarithmic axis (k, processes, delegates, bytes).
    Log2,
    /// Numbers on a linear axis.
    Linear,
    /// Named groups: a point's x is the index of its category.
    Categories(Vec<String>),
}

/// One line (or one bar per category): (x, y) points.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// Most panels a figure may have, and series per panel, and points per series: a
/// figure read from a file is checked against them before it is drawn.
pub const PANELS_MAX: usize = 64;
pub const SERIES_MAX: usize = 256;
pub const POINTS_MAX: usize = 4096;

const PANEL_WIDTH_PX: u32 = 480;
/// The widest a panel gets (categories with long labels); the grid then has one column.
const PANEL_WIDTH_MAX_PX: u32 = 1500;
const LEGEND_TOP_PX: u32 = 50;
const LEGEND_LINE_PX: u32 = 20;
pub const LEGEND_WIDTH_PX: u32 = 340;
/// A panel's height, and the figure's title above the grid.
pub const PANEL_HEIGHT_PX: u32 = 420;
const TITLE_PX: u32 = 30;
/// The width the panels' grid fits in (with the legend, a 1920-pixel screen).
const GRID_WIDTH_MAX_PX: u32 = 1560;
/// Most columns of the grid.
const COLUMNS_MAX: u32 = 3;

impl Panel {
    /// A panel of grouped bars: one bar per series for each of `categories`.
    pub fn bars(
        title: impl Into<String>,
        x_label: impl Into<String>,
        y_label: impl Into<String>,
        categories: Vec<String>,
    ) -> Panel {
        Panel {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            x_axis: XAxis::Categories(categories),
            series: Vec::new(),
        }
    }

    /// A panel of lines over a numeric axis.
    pub fn lines(
        title: impl Into<String>,
        x_label: impl Into<String>,
        y_label: impl Into<String>,
        x_axis: XAxis,
    ) -> Panel {
        Panel {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            x_axis,
            series: Vec::new(),
        }
    }

    /// Adds `value` as series `name`'s bar in `category` (added to the categories if
    /// new); categories panels only.
    pub fn bar(&mut self, name: &str, category: &str, value: f64) {
        let XAxis::Categories(categories) = &mut self.x_axis else {
            panic!("bar on a numeric panel");
        };
        let x = match categories.iter().position(|c| c == category) {
            Some(i) => i,
            None => {
                categories.push(category.to_owned());
                categories.len() - 1
            }
        };
        self.point(name, x as f64, value);
    }

    /// Adds the point (x, y) to series `name`, created at the end if new.
    pub fn point(&mut self, name: &str, x: f64, y: f64) {
        match self.series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push((x, y)),
            None => self.series.push(Series {
                name: name.to_owned(),
                points: vec![(x, y)],
            }),
        }
    }

    fn has_points(&self) -> bool {
        self.series.iter().any(|s| !s.points.is_empty())
    }
}

/// Where a figure's panels go: a grid of equal cells, row by row, as many columns as
/// fit `GRID_WIDTH_MAX_PX` (at most `COLUMNS_MAX`), and the legend at the right.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Grid {
    pub columns: u32,
    pub rows: u32,
    pub cell_width: u32,
    /// The whole figure's size in pixels.
    pub width: u32,
    pub height: u32,
}

impl Grid {
    fn of(panels: &[&Panel], legend_lines: usize) -> Grid {
        let n = panels.len().max(1) as u32;
        let cell_width = panels
            .iter()
            .map(|p| panel_width(p))
            .max()
            .unwrap_or(PANEL_WIDTH_PX);
        let columns = (GRID_WIDTH_MAX_PX / cell_width).clamp(1, COLUMNS_MAX).min(n);
        let rows = n.div_ceil(columns);
        let legend = LEGEND_TOP_PX + LEGEND_LINE_PX * legend_lines as u32 + 20;
        Grid {
            columns,
            rows,
            cell_width,
            width: columns * cell_width + LEGEND_WIDTH_PX,
            height: (TITLE_PX + rows * PANEL_HEIGHT_PX).max(legend),
        }
    }

    /// The grid `draw` gives `figure` (its panels with points).
    pub fn for_figure(figure: &Figure) -> Grid {
        let panels: Vec<&Panel> = figure.panels.iter().filter(|p| p.has_points()).collect();
        let mut names: Vec<&str> = Vec::new();
        for s in panels.iter().flat_map(|p| &p.series) {
            if !s.points.is_empty() && !names.contains(&s.name.as_str()) {
                names.push(&s.name);
            }
        }
        Grid::of(&panels, names.len())
    }
}

/// The powers of two from `lo` to `hi`, every second or fourth one where there would be
/// more than ten.
fn powers_of_two(lo: f64, hi: f64) -> Vec<f64> {
    let (first, last) = (lo.log2().ceil() as i32, hi.log2().floor() as i32);
    let step = match last - first {
        ..=10 => 1,
        11..=20 => 2,
        _ => ((last - first) / 10).max(1),
    };
    (first..=last)
        .step_by(step as usize)
        .map(|k| 2f64.powi(k))
        .collect()
}

/// The x values of a panel's points, each once, in order (at most 16).
fn distinct_x(panel: &Panel) -> Vec<f64> {
    let mut xs: Vec<f64> = panel.series.iter().flat_map(|s| &s.points).map(|p| p.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    xs.truncate(16);
    xs
}

/// A tick's label on an axis reaching `largest`: as many decimals as ticks about a tenth
/// of it apart need to differ (none from 100 on), trailing zeros dropped.
fn tick_label(value: f64, largest: f64) -> String {
    let magnitude = largest.abs().max(f64::MIN_POSITIVE).log10().floor() as i32;
    let decimals = (2 - magnitude).clamp(0, 12) as usize;
    let text = format!("{value:.decimals$}");
    let text = match text.contains('.') {
        true => text.trim_end_matches('0').trim_end_matches('.').to_owned(),
        false => text,
    };
    if text == "-0" {
        "0".into()
    } else {
        text
    }
}

/// A panel's width: the usual one, wider for categories whose labels would not fit.
fn panel_width(panel: &Panel) -> u32 {
    match &panel.x_axis {
        XAxis::Categories(c) => {
            let label = c.iter().map(|l| l.chars().count()).max().unwrap_or(0) as u32;
            (100 + c.len() as u32 * (7 * label + 16)).clamp(PANEL_WIDTH_PX, PANEL_WIDTH_MAX_PX)
        }
        _ => PANEL_WIDTH_PX,
    }
}

impl Figure {
    pub fn new(title: impl Into<String>) -> Figure {
        Figure {
            title: title.into(),
            panels: Vec::new(),
        }
    }

    /// Whether any panel has a point to draw.
    pub fn has_points(&self) -> bool {
        self.panels.iter().any(Panel::has_points)
    }

    /// Checks what a figure read from a file may hold: bounded sizes, finite values,
    /// positive x on a logarithmic axis, category indices in range.
    pub fn check(&self) -> Result<()> {
        if self.panels.len() > PANELS_MAX {
            bail!("{} panels (at most {PANELS_MAX})", self.panels.len());
        }
        for p in &self.panels {
            if p.series.len() > SERIES_MAX {
                bail!(
                    "panel {:?}: {} series (at most {SERIES_MAX})",
                    p.title,
                    p.series.len()
                );
            }
            for s in &p.series {
                if s.points.len() > POINTS_MAX {
                    bail!(
                        "series {:?}: {} points (at most {POINTS_MAX})",
                        s.name,
                        s.points.len()
                    );
                }
                for &(x, y) in &s.points {
                    let bad = !x.is_finite()
                        || !y.is_finite()
                        || match &p.x_axis {
                            XAxis::Log2 => x <= 0.0,
                            XAxis::Linear => false,
                            XAxis::Categories(c) => x < 0.0 || x.fract() != 0.0 || x as usize >= c.len(),
                        };
                    if bad {
                        bail!(
                            "panel {:?}, series {:?}: point ({x}, {y}) does not fit its axis",
                            p.title,
                            s.name
                        );
                    }
                }
            }
        }
        Ok(())
    }
}

/// One figure from several: panels of the same title are merged (their axes must be of
/// the same kind; categories are united), each series named `"<series> [<label>]"` after
/// the figure it came from; panels found in only some figures are kept.
pub fn overlay(title: &str, figures: &[(String, Figure)]) -> Result<Figure> {
    let mut out = Figure::new(title);
    for (label, figure) in figures {
        for panel in &figure.panels {
            let at = match out.panels.iter().position(|p| p.title == panel.title) {
                Some(i) => i,
                None => {
                    let mut empty = panel.clone();
                    empty.series.clear();
                    if let XAxis::Categories(c) = &mut empty.x_axis {
                        c.clear();
                    }
                    out.panels.push(empty);
                    out.panels.len() - 1
                }
            };
            let target = &mut out.panels[at];
            match (&panel.x_axis, &target.x_axis) {
                (XAxis::Categories(theirs), XAxis::Categories(_)) => {
                    for s in &panel.series {
                        for &(x, y) in &s.points {
                            let category = theirs.get(x as usize).ok_or_else(|| {
                                anyhow!("{label}: panel {:?}: category {x} out of range", panel.title)
                            })?;
                            target.bar(&format!("{} [{label}]", s.name), category, y);
                        }
                    }
                }
                (a, b) if std::mem::discriminant(a) == std::mem::discriminant(b) => {
                    for s in &panel.series {
                        target.series.push(Series {
                            name: format!("{} [{label}]", s.name),
                            points: s.points.clone(),
                        });
                    }
                }
                _ => bail!(
                    "{label}: panel {:?} has a different kind of x axis than in the files before it",
                    panel.title
                ),
            }
        }
    }
    out.check()?;
    Ok(out)
}

/// Draws `figure` into the SVG file `path` (its directory created): its panels with
/// points in a grid (row by row), one legend at the right; y axes start at 0.
pub fn draw(path: &Path, figure: &Figure) -> Result<()> {
    figure.check()?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| anyhow!("creating {}: {e}", dir.display()))?;
    }
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    // Panels with no point (a phase not measured) take no room.
    let panels: Vec<&Panel> = figure.panels.iter().filter(|p| p.has_points()).collect();
    if panels.is_empty() {
        bail!("{}: nothing to plot (no panel has a point)", path.display());
    }
    let mut names: Vec<&str> = Vec::new();
    for series in panels.iter().flat_map(|p| &p.series) {
        if !series.points.is_empty() && !names.contains(&series.name.as_str()) {
            names.push(&series.name);
        }
    }
    // The panels in a grid of equal cells that fits a screen, one legend at the right.
    let grid = Grid::of(&panels, names.len());
    let root = SVGBackend::new(path, (grid.width, grid.height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(&figure.title, ("sans-serif", 20))
        .map_err(|e| err(&e))?;
    let (charts, legend) = root.split_horizontally(grid.columns * grid.cell_width);
    let charts = charts.shrink(
        (0, 0),
        (grid.columns * grid.cell_width, grid.rows * PANEL_HEIGHT_PX),
    );
    let color_of = |name: &str| {
        let i = names.iter().position(|n| *n == name).unwrap_or(0);
        Palette99::pick(i).to_rgba()
    };
    for (i, name) in names.iter().enumerate() {
        let y = (LEGEND_TOP_PX + LEGEND_LINE_PX * i as u32) as i32;
        let color = color_of(name);
        legend
            .draw(&PathElement::new(vec![(10, y), (34, y)], color.stroke_width(3)))
            .map_err(|e| err(&e))?;
        legend
            .draw(&Text::new(name.to_string(), (40, y - 7), ("sans-serif", 12)))
            .map_err(|e| err(&e))?;
    }
    let areas = charts.split_evenly((grid.rows as usize, grid.columns as usize));
    for (area, panel) in areas.iter().zip(&panels) {
        let y_max = panel
            .series
            .iter()
            .flat_map(|s| &s.points)
            .fold(0f64, |m, p| m.max(p.1));
        // Below 0 where a value is (a fraction of time hidden can be negative: the
        // overlap made it slower); bars then reach down from 0.
        let y_min = panel
            .series
            .iter()
            .flat_map(|s| &s.points)
            .fold(0f64, |m, p| m.min(p.1));
        let y_range = y_min * 1.1..(y_max * 1.1).max(f64::MIN_POSITIVE);
        let y_fmt = |y: &f64| tick_label(*y, y_max.max(-y_min));
        let mut builder = ChartBuilder::on(area);
        builder
            .caption(&panel.title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60);
        match &panel.x_axis {
            XAxis::Categories(categories) => {
                let n = categories.len().max(1);
                // At most n labels over a range n wide: the ticks fall on the whole
                // numbers, the categories' positions.
                let mut chart = builder
                    .build_cartesian_2d(-0.5f64..n as f64 - 0.5, y_range)
                    .map_err(|e| err(&e))?;
                let label = |x: &f64| match categories.get(x.round().max(0.0) as usize) {
                    Some(c) if (x - x.round()).abs() < 1e-6 => c.clone(),
                    _ => String::new(),
                };
                chart
                    .configure_mesh()
                    .light_line_style(WHITE)
                    .x_desc(panel.x_label.as_str())
                    .y_desc(panel.y_label.as_str())
                    .x_labels(n)
                    .x_label_formatter(&label)
                    .y_label_formatter(&y_fmt)
                    .draw()
                    .map_err(|e| err(&e))?;
                let drawn: Vec<&Series> = panel.series.iter().filter(|s| !s.points.is_empty()).collect();
                let slot = 0.8 / drawn.len().max(1) as f64;
                for (j, series) in drawn.iter().enumerate() {
                    let color = color_of(&series.name);
                    chart
                        .draw_series(series.points.iter().map(|&(x, y)| {
                            let x0 = x - 0.4 + slot * j as f64;
                            Rectangle::new([(x0, 0.0), (x0 + slot * 0.9, y)], color.filled())
                        }))
                        .map_err(|e| err(&e))?;
                }
            }
            axis => {
                let (mut x_min, mut x_max) = (f64::MAX, f64::MIN);
                for &(x, _) in panel.series.iter().flat_map(|s| &s.points) {
                    x_min = x_min.min(x);
                    x_max = x_max.max(x);
                }
                // Whole-number x values (processes, k, bytes) get whole-number ticks
                // only: a tick between two of them is left unlabelled, never rounded
                // to a neighbour's label.
                let integers = panel
                    .series
                    .iter()
                    .flat_map(|s| &s.points)
                    .all(|&(x, _)| x.fract() == 0.0);
                let x_fmt = |x: &f64| match integers {
                    true if (x - x.round()).abs() < 1e-9 => format!("{}", x.round()),
                    true => String::new(),
                    false => tick_label(*x, x_max.abs().max(x_min.abs())),
                };
                macro_rules! lines {
                    ($x_range:expr) => {{
                        let mut chart = builder
                            .build_cartesian_2d($x_range, y_range)
                            .map_err(|e| err(&e))?;
                        chart
                            .configure_mesh()
                            .light_line_style(WHITE)
                            .x_desc(panel.x_label.as_str())
                            .y_desc(panel.y_label.as_str())
                            .x_label_formatter(&x_fmt)
                            .y_label_formatter(&y_fmt)
                            .draw()
                            .map_err(|e| err(&e))?;
                        for series in panel.series.iter().filter(|s| !s.points.is_empty()) {
                            let color = color_of(&series.name);
                            chart
                                .draw_series(LineSeries::new(
                                    series.points.iter().copied(),
                                    color.stroke_width(2),
                                ))
                                .map_err(|e| err(&e))?;
                            chart
                                .draw_series(
                                    series
                                        .points
                                        .iter()
                                        .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
                                )
                                .map_err(|e| err(&e))?;
                        }
                    }};
                }
                // Ticks of our own where plotters' would mislead: its base-2 axes give
                // fractional ticks and one of them twice.
                let pad = ((x_max - x_min) * 0.05).max(0.5);
                if *axis == XAxis::Log2 {
                    let mut ticks = powers_of_two(x_min, x_max);
                    if ticks.len() < 2 {
                        ticks = distinct_x(panel);
                    }
                    lines!((x_min / 1.2..x_max * 1.2)
                        .log_scale()
                        .base(2.0)
                        .with_key_points(ticks));
                } else {
                    lines!(x_min - pad..x_max + pad);
                }
            }
        }
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
#[path = "../tests/common/svg_check.rs"]
mod svg_check;

/// Draws `figure` into a temporary file and checks the SVG against it; the benchmarks'
/// unit tests call it on the figures they build.
#[cfg(test)]
pub(crate) fn assert_draws(figure: &Figure) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("figure.svg");
    draw(&path, figure).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    let plot = serde_json::to_value(figure).unwrap();
    if let Err(e) = svg_check::check(&svg, &plot) {
        panic!("the SVG of {:?} is wrong: {e}", figure.title);
    }
    if let Err(e) = svg_check::readable(&path, &plot) {
        panic!("the SVG of {:?} is not readable: {e}", figure.title);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drawn(figure: &Figure) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("f.svg");
        draw(&path, figure).unwrap();
        std::fs::read_to_string(&path).unwrap()
    }

    #[test]
    fn the_svg_is_well_formed_and_shows_every_series_and_value() {
        let f = figure();
        let svg = drawn(&f);
        let plot = serde_json::to_value(&f).unwrap();
        super::svg_check::check(&svg, &plot).unwrap();
        // The check sees a wrong value, a missing series and a broken file.
        let mut wrong = f.clone();
        wrong.panels[0].series[1].points[1].1 = 100.0;
        let e = super::svg_check::check(&svg, &serde_json::to_value(&wrong).unwrap()).unwrap_err();
        assert!(e.contains("the value 100"), "{e}");
        let mut wrong = f.clone();
        wrong.panels[1].series[0].points.swap(0, 2);
        assert!(super::svg_check::check(&svg, &serde_json::to_value(&wrong).unwrap()).is_err());
        let mut more = f.clone();
        more.panels[1].series.push(Series {
            name: "absent".into(),
            points: vec![(2.0, 1.0)],
        });
        let e = super::svg_check::check(&svg, &serde_json::to_value(&more).unwrap()).unwrap_err();
        assert!(e.contains("absent"), "{e}");
        let e = super::svg_check::check(&svg[..svg.len() / 2], &plot).unwrap_err();
        assert!(e.contains("well-formed"), "{e}");
    }

    #[test]
    fn linear_axes_and_panels_without_points_are_drawn_too() {
        let mut f = figure();
        f.panels[1].x_axis = XAxis::Linear;
        f.panels
            .push(Panel::lines("never measured", "x", "y", XAxis::Log2));
        let svg = drawn(&f);
        super::svg_check::check(&svg, &serde_json::to_value(&f).unwrap()).unwrap();
        assert!(!svg.contains("never measured"));
    }

    fn figure() -> Figure {
        let mut bars = Panel::bars("by phase", "phase", "MiB/s", vec![]);
        bars.bar("local", "write", 100.0);
        bars.bar("weft", "write", 50.0);
        bars.bar("local", "read", 200.0);
        bars.bar("weft", "read", 150.0);
        let mut lines = Panel::lines("vs k", "k", "MiB/s", XAxis::Log2);
        for (k, v) in [(1.0, 10.0), (4.0, 40.0), (16.0, 30.0)] {
            lines.point("weft", k, v);
        }
        lines.point("local", 1.0, 5.0);
        Figure {
            title: "test".into(),
            panels: vec![bars, lines],
        }
    }

    #[test]
    fn bars_gather_categories_and_series_in_first_seen_order() {
        let f = figure();
        assert_eq!(
            f.panels[0].x_axis,
            XAxis::Categories(vec!["write".into(), "read".into()])
        );
        assert_eq!(f.panels[0].series[0].points, [(0.0, 100.0), (1.0, 200.0)]);
        assert_eq!(f.panels[0].series[1].name, "weft");
        f.check().unwrap();
    }

    #[test]
    fn bad_figures_are_refused_with_the_panel_named() {
        let mut f = figure();
        f.panels[1].series[0].points.push((0.0, 1.0));
        let e = f.check().unwrap_err().to_string();
        assert!(e.contains("vs k") && e.contains("does not fit"), "{e}");
        let mut f = figure();
        f.panels[0].series[0].points.push((2.0, 1.0));
        assert!(f.check().is_err());
        let mut f = figure();
        f.panels[0].series[0].points[0].1 = f64::NAN;
        assert!(f.check().is_err());
    }

    #[test]
    fn overlays_merge_panels_by_title_and_unite_categories() {
        let a = figure();
        let mut b = figure();
        b.panels[0] = Panel::bars("by phase", "phase", "MiB/s", vec![]);
        b.panels[0].bar("weft", "read", 7.0);
        b.panels[0].bar("weft", "write+sync", 9.0);
        let o = overlay("both", &[("a".into(), a), ("b".into(), b)]).unwrap();
        assert_eq!(o.panels.len(), 2);
        assert_eq!(
            o.panels[0].x_axis,
            XAxis::Categories(vec!["write".into(), "read".into(), "write+sync".into()])
        );
        let names: Vec<&str> = o.panels[0].series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["local [a]", "weft [a]", "weft [b]"]);
        assert_eq!(o.panels[0].series[2].points, [(1.0, 7.0), (2.0, 9.0)]);
        assert_eq!(o.panels[1].series.len(), 4);
        let mut c = figure();
        c.panels[1].x_axis = XAxis::Linear;
        let e = overlay("x", &[("a".into(), figure()), ("c".into(), c)]).unwrap_err();
        assert!(e.to_string().contains("c: panel \"vs k\""), "{e}");
    }

    /// Six panels over process counts 1 to 8 (linear and log2) and tiny y values: they
    /// were drawn as a 3,220-pixel strip with x ticks "1 1 1 2 2 2 2 2" (fractional
    /// ticks rounded) and y ticks all "0"; now a grid that fits a screen, each label once.
    #[test]
    fn many_panels_go_in_a_grid_and_no_tick_label_repeats() {
        let mut f = Figure::new("six panels");
        for i in 0..6 {
            let axis = if i % 2 == 0 { XAxis::Linear } else { XAxis::Log2 };
            let mut p = Panel::lines(format!("panel {i}"), "processes", "s", axis);
            for procs in [1.0, 2.0, 4.0, 8.0] {
                p.point("weft", procs, procs * 1e-5 * (i + 1) as f64);
                p.point("local", procs, procs * 2e-5);
            }
            f.panels.push(p);
        }
        let grid = Grid::for_figure(&f);
        assert_eq!((grid.columns, grid.rows), (3, 2), "{grid:?}");
        assert_draws(&f);
        // Two processes only: the axis from 1 to 2 used to say "1 1 1 2 2 2".
        let mut few = Panel::lines("two counts", "processes", "MiB/s", XAxis::Log2);
        few.point("weft", 1.0, 10.0);
        few.point("weft", 2.0, 20.0);
        assert_draws(&Figure {
            title: "two".into(),
            panels: vec![few],
        });
    }

    #[test]
    fn log2_ticks_are_powers_of_two() {
        assert_eq!(powers_of_two(1.0, 8.0), [1.0, 2.0, 4.0, 8.0]);
        assert_eq!(powers_of_two(3.0, 3.0), Vec::<f64>::new());
        assert_eq!(powers_of_two(0.25, 1.0), [0.25, 0.5, 1.0]);
        assert_eq!(powers_of_two(1.0, 1048576.0).len(), 11);
    }

    /// mpiio-api's fraction of I/O time hidden is negative where overlapping made the
    /// run slower: the y axis started at 0 and drew such a bar as nothing.
    #[test]
    fn bars_below_zero_reach_down_from_it() {
        let mut hidden = Panel::bars("I/O time hidden", "where", "fraction", vec![]);
        hidden.bar("hidden", "weft", -0.4);
        hidden.bar("hidden", "local", 0.8);
        assert_draws(&Figure {
            title: "negative".into(),
            panels: vec![hidden],
        });
    }

    #[test]
    fn tick_labels_have_the_decimals_their_axis_needs() {
        assert_eq!(tick_label(250.0, 1000.0), "250");
        assert_eq!(tick_label(0.5, 3.0), "0.5");
        assert_eq!(tick_label(0.00002, 0.0001), "0.00002");
        assert_eq!(tick_label(0.0, 0.0001), "0");
        assert_eq!(tick_label(12.5, 50.0), "12.5");
    }

    #[test]
    fn a_figure_without_points_is_an_error_not_an_empty_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = figure();
        for p in &mut f.panels {
            p.series.clear();
        }
        let e = draw(&dir.path().join("x.svg"), &f).unwrap_err();
        assert!(e.to_string().contains("nothing to plot"), "{e}");
    }
}
