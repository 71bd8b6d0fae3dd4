//! SVG line charts of benchmark results (plotters, SVG backend only): panels side by
//! side, each with a base-2 logarithmic x axis and one line per series, and one legend
//! for all of them.

use anyhow::{anyhow, Result};
use plotters::prelude::*;
use std::path::Path;

/// One line: (x, y) points in x order.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// One chart of the figure.
pub struct Panel {
    pub title: String,
    pub x_label: String,
    pub series: Vec<Series>,
}

const PANEL_WIDTH_PX: u32 = 480;
const LEGEND_WIDTH_PX: u32 = 340;
const HEIGHT_PX: u32 = 460;

/// Draws `panels` left to right under `title` into the SVG file `path` (its directory
/// created), panels without points left out, with one legend at the right (series of the same name share a colour in
/// every panel); x axes are logarithmic in base 2, y axes start at 0.
pub fn log2_x_panels(path: &Path, title: &str, panels: &[Panel]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    // Panels with no point (a phase not measured) take no room.
    let panels: Vec<&Panel> = panels
        .iter()
        .filter(|p| p.series.iter().any(|s| !s.points.is_empty()))
        .collect();
    let width = PANEL_WIDTH_PX * panels.len().max(1) as u32 + LEGEND_WIDTH_PX;
    let root = SVGBackend::new(path, (width, HEIGHT_PX)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(|e| err(&e))?;
    let (charts, legend) = root.split_horizontally(width - LEGEND_WIDTH_PX);
    let mut names: Vec<&str> = Vec::new();
    for series in panels.iter().flat_map(|p| &p.series) {
        if !names.contains(&series.name.as_str()) {
            names.push(&series.name);
        }
    }
    let color_of = |name: &str| {
        let i = names.iter().position(|n| *n == name).unwrap_or(0);
        Palette99::pick(i).to_rgba()
    };
    for (i, name) in names.iter().enumerate() {
        let y = 50 + 20 * i as i32;
        let color = color_of(name);
        legend
            .draw(&PathElement::new(vec![(10, y), (34, y)], color.stroke_width(2)))
            .map_err(|e| err(&e))?;
        legend
            .draw(&Text::new(name.to_string(), (40, y - 7), ("sans-serif", 12)))
            .map_err(|e| err(&e))?;
    }
    let areas = charts.split_evenly((1, panels.len().max(1)));
    for (area, panel) in areas.iter().zip(&panels) {
        let points = panel.series.iter().flat_map(|s| s.points.iter());
        let (mut x_min, mut x_max, mut y_max) = (f64::MAX, f64::MIN, 0f64);
        for &(x, y) in points {
            x_min = x_min.min(x);
            x_max = x_max.max(x);
            y_max = y_max.max(y);
        }
        if x_min > x_max {
            continue;
        }
        let (x_min, x_max) = (x_min.max(1e-9) / 1.2, x_max * 1.2);
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((x_min..x_max).log_scale().base(2.0), 0f64..y_max * 1.1 + 1.0)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .x_desc(panel.x_label.as_str())
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()
            .map_err(|e| err(&e))?;
        for series in &panel.series {
            if series.points.is_empty() {
                continue;
            }
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
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
