//! SVG line charts of benchmark results (plotters, SVG backend only): panels side by
//! side, each with a logarithmic x axis and one line per series, and its legend.

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

const PANEL_WIDTH_PX: u32 = 560;
const HEIGHT_PX: u32 = 520;

/// Draws `panels` left to right under `title` into the SVG file `path` (its directory
/// created); x axes are logarithmic (base 2 ticks are the data's), y axes start at 0.
pub fn log2_x_panels(path: &Path, title: &str, panels: &[Panel]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    let width = PANEL_WIDTH_PX * panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (width, HEIGHT_PX)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(|e| err(&e))?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (area, panel) in areas.iter().zip(panels) {
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
            .build_cartesian_2d((x_min..x_max).log_scale(), 0f64..y_max * 1.1 + 1.0)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc(panel.x_label.as_str())
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()
            .map_err(|e| err(&e))?;
        for (i, series) in panel.series.iter().enumerate() {
            if series.points.is_empty() {
                continue;
            }
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    series.points.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(|e| err(&e))?
                .label(series.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
            chart
                .draw_series(
                    series
                        .points
                        .iter()
                        .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
                )
                .map_err(|e| err(&e))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 11))
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
