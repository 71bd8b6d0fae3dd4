//! Checks an SVG drawn by `weft bench` against the figure stored in its JSON (the
//! `"plot"` object): the SVG must be well-formed XML, show every title, series name
//! and category as text, and draw every point as a marker (a circle on a line panel, a
//! bar on a category panel) in the figure's order, placed in proportion to its value:
//! on a line panel the markers' heights are one linear function of the values, on a
//! bar panel the bars' heights are proportional to them; the markers of one series
//! have one colour, different from the other series' of the panel.
//!
//! Shared by the crate's unit tests and its integration tests (`mod common;`).

use serde_json::Value;

/// Pixels a marker may be off: the SVG backend rounds coordinates to whole pixels.
const TOLERANCE_PX: f64 = 1.5;

struct Marker {
    /// Circle: (cx, cy); bar: (x, height).
    a: f64,
    b: f64,
    fill: String,
}

fn number(v: &Value, what: &str) -> Result<f64, String> {
    v.as_f64().ok_or_else(|| format!("{what}: not a number: {v}"))
}

/// Ok if `svg` draws `plot`; else what is wrong.
pub fn check(svg: &str, plot: &Value) -> Result<(), String> {
    let doc = roxmltree::Document::parse(svg).map_err(|e| format!("not well-formed XML: {e}"))?;
    let root = doc.root_element();
    if root.tag_name().name() != "svg" {
        return Err(format!("root element is <{}>, not <svg>", root.tag_name().name()));
    }
    let texts: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.text().unwrap_or("").trim().to_owned())
        .collect();
    let has_text = |t: &str| texts.iter().any(|x| x == t);
    let attr = |n: &roxmltree::Node, name: &str| -> Result<f64, String> {
        n.attribute(name)
            .ok_or_else(|| format!("<{}> without {name}", n.tag_name().name()))?
            .parse::<f64>()
            .map_err(|e| format!("<{}> {name}: {e}", n.tag_name().name()))
    };
    let mut circles = Vec::new();
    let mut bars = Vec::new();
    for n in doc.descendants() {
        let fill = n.attribute("fill").unwrap_or("").to_owned();
        if n.has_tag_name("circle") {
            circles.push(Marker {
                a: attr(&n, "cx")?,
                b: attr(&n, "cy")?,
                fill,
            });
        } else if n.has_tag_name("rect") && fill != "#FFFFFF" {
            bars.push(Marker {
                a: attr(&n, "x")?,
                b: attr(&n, "height")?,
                fill,
            });
        }
    }

    let title = plot["title"].as_str().ok_or("the figure has no title")?;
    if !has_text(title) {
        return Err(format!("the title {title:?} is not in the SVG"));
    }
    let panels = plot["panels"].as_array().ok_or("the figure has no panels")?;
    let (mut next_circle, mut next_bar) = (0usize, 0usize);
    let mut drawn_panels = 0;
    for panel in panels {
        let ptitle = panel["title"].as_str().unwrap_or("");
        let series: Vec<&Value> = panel["series"]
            .as_array()
            .ok_or_else(|| format!("panel {ptitle:?}: no series"))?
            .iter()
            .filter(|s| s["points"].as_array().is_some_and(|p| !p.is_empty()))
            .collect();
        if series.is_empty() {
            continue;
        }
        drawn_panels += 1;
        if !has_text(ptitle) {
            return Err(format!("panel title {ptitle:?} is not in the SVG"));
        }
        let categories = panel["x_axis"].get("categories").and_then(Value::as_array);
        for c in categories.into_iter().flatten() {
            let c = c.as_str().unwrap_or("");
            if !has_text(c) {
                return Err(format!("panel {ptitle:?}: category {c:?} is not labelled"));
            }
        }
        // (x, y, marker) of every point, in drawing order.
        let mut points: Vec<(f64, f64, &Marker)> = Vec::new();
        let mut fills: Vec<&str> = Vec::new();
        for s in &series {
            let name = s["name"].as_str().unwrap_or("");
            if !has_text(name) {
                return Err(format!("series {name:?} is not in the legend"));
            }
            let mut fill: Option<&str> = None;
            for p in s["points"].as_array().unwrap() {
                let (x, y) = (number(&p[0], name)?, number(&p[1], name)?);
                let marker = if categories.is_some() {
                    next_bar += 1;
                    bars.get(next_bar - 1)
                } else {
                    next_circle += 1;
                    circles.get(next_circle - 1)
                }
                .ok_or_else(|| format!("panel {ptitle:?}, series {name:?}: fewer markers than points"))?;
                if *fill.get_or_insert(&marker.fill) != marker.fill {
                    return Err(format!("series {name:?}: markers of different colours"));
                }
                points.push((x, y, marker));
            }
            let fill = fill.unwrap();
            if fills.contains(&fill) {
                return Err(format!(
                    "panel {ptitle:?}: series {name:?} has another series' colour"
                ));
            }
            fills.push(fill);
        }
        let (lo, hi) = points.iter().fold((points[0], points[0]), |(lo, hi), &p| {
            (if p.1 < lo.1 { p } else { lo }, if p.1 > hi.1 { p } else { hi })
        });
        // Pixel = offset + scale * value; bars start at 0, so their offset is 0.
        let (offset, scale) = if categories.is_some() {
            (0.0, if hi.1 > 0.0 { hi.2.b / hi.1 } else { 0.0 })
        } else if hi.1 > lo.1 {
            let scale = (hi.2.b - lo.2.b) / (hi.1 - lo.1);
            (lo.2.b - scale * lo.1, scale)
        } else {
            (lo.2.b, 0.0)
        };
        for &(x, y, m) in &points {
            let expected = offset + scale * y;
            if (m.b - expected).abs() > TOLERANCE_PX {
                return Err(format!(
                    "panel {ptitle:?}: the value {y} at x={x} is drawn at {} px, not the {expected:.1} px the other values place it at",
                    m.b
                ));
            }
        }
        if categories.is_none() {
            for &(x1, _, m1) in &points {
                for &(x2, _, m2) in &points {
                    if x1 < x2 && m1.a > m2.a + TOLERANCE_PX {
                        return Err(format!("panel {ptitle:?}: x={x1} is drawn right of x={x2}"));
                    }
                }
            }
        }
    }
    if drawn_panels == 0 {
        return Err("the figure has no point".into());
    }
    if next_circle != circles.len() || next_bar != bars.len() {
        return Err(format!(
            "{} circles and {} bars in the SVG for {next_circle} line points and {next_bar} bars in the figure",
            circles.len(),
            bars.len()
        ));
    }
    Ok(())
}

/// Checks the SVG file `svg` against the figure in the JSON file `json`; panics with
/// what is wrong. Returns the figure.
#[allow(dead_code)]
pub fn assert_draws(json: &std::path::Path, svg: &std::path::Path) -> Value {
    let results: Value = serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap();
    let text = std::fs::read_to_string(svg).unwrap_or_else(|e| panic!("{}: {e}", svg.display()));
    if let Err(e) = check(&text, &results["plot"]) {
        panic!(
            "{} does not draw the figure of {}: {e}",
            svg.display(),
            json.display()
        );
    }
    results["plot"].clone()
}
