//! Reading the text format back (what `weft top` and the status page scrape): samples
//! with their labels and values. Comments (`# TYPE`, `# HELP`, `# UNIT`, `# EOF`),
//! timestamps and exemplars are skipped. Bounded: at most `SAMPLES_MAX` samples.

/// Most samples read from one scrape (a weftd's cardinality is far below this).
pub const SAMPLES_MAX: usize = 200_000;

#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    #[error("line {line}: {what}")]
    Line { line: usize, what: &'static str },
    #[error("more than {SAMPLES_MAX} samples")]
    TooMany,
}

/// The samples of `text`, in order.
pub fn parse(text: &str) -> Result<Vec<Sample>, ParseError> {
    let mut samples = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if samples.len() == SAMPLES_MAX {
            return Err(ParseError::TooMany);
        }
        samples.push(parse_line(line).map_err(|what| ParseError::Line { line: i + 1, what })?);
    }
    Ok(samples)
}

fn parse_line(line: &str) -> Result<Sample, &'static str> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_ascii_whitespace())
        .ok_or("a sample without a value")?;
    let name = &line[..name_end];
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    {
        return Err("a bad metric name");
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = parse_labels(after, &mut labels)?;
    }
    let value = rest.split_whitespace().next().ok_or("a sample without a value")?;
    let value = match value {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().map_err(|_| "a value that is not a number")?,
    };
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Parses `k="v",...}` and returns what follows the closing brace.
fn parse_labels<'a>(mut s: &'a str, labels: &mut Vec<(String, String)>) -> Result<&'a str, &'static str> {
    loop {
        s = s.trim_start();
        if let Some(rest) = s.strip_prefix('}') {
            return Ok(rest);
        }
        let eq = s.find('=').ok_or("a label without a value")?;
        let key = s[..eq].trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err("a bad label name");
        }
        s = s[eq + 1..]
            .trim_start()
            .strip_prefix('"')
            .ok_or("a label value without quotes")?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("an unterminated label value"),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return Err("an unterminated label value"),
                },
                Some((_, c)) => value.push(c),
            }
        };
        labels.push((key.to_owned(), value));
        s = s[end + 1..].trim_start();
        s = s.strip_prefix(',').unwrap_or(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_samples_labels_and_special_values() {
        let text = "# TYPE a counter\n\
                    a_total 3\n\
                    b{x=\"1\",y=\"q\\\"uote\\\\ \\n\"} 2.5 123\n\
                    c_bucket{le=\"+Inf\"} +Inf\n\
                    d{} NaN\n\
                    # EOF\n";
        let s = parse(text).unwrap();
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].name, "a_total");
        assert_eq!(s[0].value, 3.0);
        assert_eq!(s[1].label("y"), Some("q\"uote\\ \n"));
        assert_eq!(s[1].value, 2.5);
        assert!(s[2].value.is_infinite());
        assert!(s[3].value.is_nan());
    }

    #[test]
    fn refuses_garbage_with_its_line() {
        assert_eq!(
            parse("a 1\nb{x=\"1} 2\n"),
            Err(ParseError::Line {
                line: 2,
                what: "an unterminated label value"
            })
        );
        assert!(parse("a{=\"1\"} 1").is_err());
        assert!(parse("a one").is_err());
        assert!(parse("a").is_err());
        assert!(parse("a-b 1").is_err());
    }
}
