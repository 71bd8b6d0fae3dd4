//! Checks an SVG drawn by `weft bench` against the figure stored in its JSON (the
//! `"plot"` object): the SVG must be well-formed XML, show every title, series name
//! and category as text, and draw every point as a marker (a circle on a line panel, a
//! bar on a category panel) in the figure's order, placed in proportion to its value:
//! on a line panel the markers' heights are one linear function of the values, on a
//! bar panel the bars' heights are proportional to them; the markers of one series
//! have one colour, different from the other series' of the panel.
//!
//! `readable` checks what a reader sees: the SVG renders (rsvg-convert, from Debian's
//! librsvg2-bin) to a picture that fits a screen, and no tick label repeats on an axis.
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
        // Pixel = offset + scale * value; bars start at 0, so their offset is 0 and their
        // height is in proportion to the value's size (they reach down for one below 0).
        let hi = match categories {
            Some(_) => *points
                .iter()
                .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
                .unwrap(),
            None => hi,
        };
        let (offset, scale) = if categories.is_some() {
            (0.0, if hi.1 != 0.0 { hi.2.b / hi.1.abs() } else { 0.0 })
        } else if hi.1 > lo.1 {
            let scale = (hi.2.b - lo.2.b) / (hi.1 - lo.1);
            (lo.2.b - scale * lo.1, scale)
        } else {
            (lo.2.b, 0.0)
        };
        for &(x, y, m) in &points {
            let expected = offset + scale * if categories.is_some() { y.abs() } else { y };
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

/// The largest picture a figure may render to: a 1920 x 1200 screen.
pub const SCREEN_PX: (u32, u32) = (1920, 1200);

/// Ok if the SVG file `svg_path` (drawing `plot`) renders with rsvg-convert to a picture
/// that fits `SCREEN_PX`, and no tick label repeats on an axis: within one panel (the
/// texts below its title, nearest to it), no two texts on one line (an x axis) or right-
/// aligned in one column (a y axis) are the same. A missing rsvg-convert is an error.
pub fn readable(svg_path: &std::path::Path, plot: &Value) -> Result<(), String> {
    let png = svg_path.with_extension("check.png");
    let out = std::process::Command::new("rsvg-convert")
        .arg("-o")
        .arg(&png)
        .arg(svg_path)
        .output()
        .map_err(|e| {
            format!("rsvg-convert (apt-get install librsvg2-bin; scripts/install-deps.sh has it): {e}")
        })?;
    if !out.status.success() {
        return Err(format!(
            "rsvg-convert cannot render {}: {}",
            svg_path.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let bytes = std::fs::read(&png).map_err(|e| format!("{}: {e}", png.display()))?;
    let _ = std::fs::remove_file(&png);
    // A PNG's IHDR: width and height, big-endian, at bytes 16 and 20.
    if bytes.len() < 24 || &bytes[1..4] != b"PNG" {
        return Err(format!("rsvg-convert wrote no PNG for {}", svg_path.display()));
    }
    let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    if width == 0 || height == 0 || width > SCREEN_PX.0 || height > SCREEN_PX.1 {
        return Err(format!(
            "{} renders at {width} x {height} px: not within a {} x {} screen",
            svg_path.display(),
            SCREEN_PX.0,
            SCREEN_PX.1
        ));
    }
    let svg = std::fs::read_to_string(svg_path).map_err(|e| e.to_string())?;
    no_repeated_ticks(&svg, plot)
}

/// The tick-label half of `readable`.
pub fn no_repeated_ticks(svg: &str, plot: &Value) -> Result<(), String> {
    let doc = roxmltree::Document::parse(svg).map_err(|e| format!("not well-formed XML: {e}"))?;
    // Every text: (x, y, right-aligned, text); rotated ones (axis descriptions) left out.
    let texts: Vec<(f64, f64, bool, String)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text") && n.attribute("transform").is_none())
        .filter_map(|n| {
            let x = n.attribute("x")?.parse::<f64>().ok()?;
            let y = n.attribute("y")?.parse::<f64>().ok()?;
            let end = n.attribute("text-anchor") == Some("end");
            Some((x, y, end, n.text().unwrap_or("").trim().to_owned()))
        })
        .collect();
    let titles: Vec<&str> = plot["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            p["series"].as_array().is_some_and(|s| {
                s.iter()
                    .any(|s| s["points"].as_array().is_some_and(|p| !p.is_empty()))
            })
        })
        .filter_map(|p| p["title"].as_str())
        .collect();
    // The panels' captions, where they are drawn.
    let captions: Vec<(f64, f64)> = titles
        .iter()
        .filter_map(|t| texts.iter().find(|x| x.3 == *t).map(|x| (x.0, x.1)))
        .collect();
    if captions.len() != titles.len() {
        return Err(format!("not every panel title of {titles:?} is drawn"));
    }
    // A text's panel: of the captions above it, the nearest row, then the nearest in x.
    let panel_of = |x: f64, y: f64| -> Option<usize> {
        let row = captions
            .iter()
            .filter(|c| c.1 < y)
            .map(|c| c.1)
            .fold(f64::MIN, f64::max);
        captions
            .iter()
            .enumerate()
            .filter(|(_, c)| c.1 == row)
            .min_by(|a, b| (a.1 .0 - x).abs().total_cmp(&(b.1 .0 - x).abs()))
            .map(|(i, _)| i)
    };
    let legend = plot["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["series"].as_array().into_iter().flatten())
        .filter_map(|s| s["name"].as_str())
        .collect::<Vec<_>>();
    let mut seen: std::collections::HashMap<(usize, bool, i64), Vec<&str>> = Default::default();
    for (x, y, end, text) in &texts {
        if text.is_empty() || titles.contains(&text.as_str()) || legend.contains(&text.as_str()) {
            continue;
        }
        let Some(panel) = panel_of(*x, *y) else { continue };
        // An x axis's labels share a line; a y axis's share their right edge.
        let key = match end {
            true => (panel, true, x.round() as i64),
            false => (panel, false, y.round() as i64),
        };
        let on_axis = seen.entry(key).or_default();
        if on_axis.contains(&text.as_str()) {
            return Err(format!(
                "panel {:?}: the tick label {text:?} repeats on an axis",
                titles[panel]
            ));
        }
        on_axis.push(text);
    }
    Ok(())
}

/// Checks the SVG file `svg` against the figure in the JSON file `json`, and that it is
/// readable (see `readable`); panics with what is wrong. Returns the figure.
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
    if let Err(e) = readable(svg, &results["plot"]) {
        panic!("{} is not readable: {e}", svg.display());
    }
    results["plot"].clone()
}
