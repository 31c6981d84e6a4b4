//! A strict reader of the Prometheus text exposition format (version 0.0.4), written from
//! the format's grammar, for tests of `GET /metrics`: every line is a `# HELP`, a `# TYPE`, a
//! comment, an empty line or a sample; names, labels, escapes and values are checked; a
//! family's `TYPE` comes before its samples, its samples are contiguous, no series repeats,
//! and a histogram's buckets are cumulative up to `+Inf`, which equals its `_count`.

use std::collections::{BTreeMap, HashSet};

/// A sample's labels, in the order written.
type Labels = Vec<(String, String)>;

/// One histogram series: its buckets `(le, count)` in order, its sum and its count.
type Buckets = (Vec<(f64, f64)>, Option<f64>, Option<f64>);

/// One sample: its name, labels and value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The sample's name (`x_bucket` for a histogram `x`).
    pub name: String,
    /// Its labels, in the order written.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: f64,
}

/// One metric family.
#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    /// The family's name.
    pub name: String,
    /// `counter`, `gauge`, `histogram`, `summary` or `untyped`.
    pub kind: String,
    /// Its help text, unescaped.
    pub help: Option<String>,
    /// Its samples, in order.
    pub samples: Vec<Sample>,
}

impl Family {
    /// The value of the sample named `name` whose labels include every pair of `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.iter().any(|(n, w)| n == k && w == v))
            })
            .map(|s| s.value)
    }
}

fn is_name(name: &str, colons: bool) -> bool {
    let mut chars = name.chars();
    let first_ok = |c: char| c.is_ascii_alphabetic() || c == '_' || (colons && c == ':');
    chars.next().is_some_and(first_ok) && chars.all(|c| first_ok(c) || c.is_ascii_digit())
}

fn value(text: &str) -> Result<f64, String> {
    match text {
        "NaN" => return Ok(f64::NAN),
        "+Inf" => return Ok(f64::INFINITY),
        "-Inf" => return Ok(f64::NEG_INFINITY),
        _ => {}
    }
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    let plain = !digits.is_empty()
        && digits
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
        && digits.starts_with(|c: char| c.is_ascii_digit() || c == '.');
    if !plain {
        return Err(format!("{text:?} is not a sample value"));
    }
    text.parse()
        .map_err(|_| format!("{text:?} is not a sample value"))
}

/// Reads `{name="value",…}` at the start of `text`; returns the labels and the rest.
fn labels(text: &str) -> Result<(Labels, &str), String> {
    let mut rest = text.strip_prefix('{').ok_or("labels start with {")?;
    let mut labels: Vec<(String, String)> = Vec::new();
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = rest.find('=').ok_or("a label needs =")?;
        let name = &rest[..eq];
        if !is_name(name, false) {
            return Err(format!("{name:?} is not a label name"));
        }
        if labels.iter().any(|(n, _)| n == name) {
            return Err(format!("label {name} twice"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("a label value is quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("an unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("bad escape {other:?} in a label value")),
                },
                Some((_, '\n')) => return Err("a raw newline in a label value".into()),
                Some((_, c)) => value.push(c),
            }
        };
        labels.push((name.to_owned(), value));
        rest = &rest[end + 1..];
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if !rest.starts_with('}') {
            return Err("labels are separated by ,".into());
        }
    }
}

fn help_text(text: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\\') => out.push('\\'),
                Some('n') => out.push('\n'),
                other => return Err(format!("bad escape {other:?} in HELP")),
            },
            c => out.push(c),
        }
    }
    Ok(out)
}

/// The family a sample name belongs to, given the family's kind.
fn belongs(sample: &str, family: &str, kind: &str) -> bool {
    match kind {
        "histogram" => [
            format!("{family}_bucket"),
            format!("{family}_sum"),
            format!("{family}_count"),
        ]
        .contains(&sample.to_owned()),
        "summary" => {
            sample == family
                || sample == format!("{family}_sum")
                || sample == format!("{family}_count")
        }
        _ => sample == family,
    }
}

fn check_histogram(family: &Family) -> Result<(), String> {
    // Per label set without `le`: the buckets in order, the sum and the count.
    let mut series: BTreeMap<Labels, Buckets> = BTreeMap::new();
    for sample in &family.samples {
        let rest: Vec<(String, String)> = sample
            .labels
            .iter()
            .filter(|(n, _)| n != "le")
            .cloned()
            .collect();
        let entry = series.entry(rest).or_default();
        if sample.name.ends_with("_bucket") {
            let le = sample
                .labels
                .iter()
                .find(|(n, _)| n == "le")
                .ok_or_else(|| format!("{}: a bucket without le", family.name))?;
            entry.0.push((value(&le.1)?, sample.value));
        } else if sample.name.ends_with("_sum") {
            entry.1 = Some(sample.value);
        } else {
            entry.2 = Some(sample.value);
        }
    }
    for (labels, (buckets, sum, count)) in series {
        let what = format!("{} {labels:?}", family.name);
        let count = count.ok_or_else(|| format!("{what}: no _count"))?;
        sum.ok_or_else(|| format!("{what}: no _sum"))?;
        if !buckets
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1)
        {
            return Err(format!(
                "{what}: buckets not increasing and cumulative: {buckets:?}"
            ));
        }
        match buckets.last() {
            Some((le, n)) if le.is_infinite() && *n == count => {}
            _ => return Err(format!("{what}: no +Inf bucket equal to _count {count}")),
        }
    }
    Ok(())
}

/// Reads a whole exposition; every family, in order, or the first thing wrong.
pub fn parse(text: &str) -> Result<Vec<Family>, String> {
    if !text.ends_with('\n') {
        return Err("the text ends with a newline".into());
    }
    let mut families: Vec<Family> = Vec::new();
    let mut typed: HashSet<String> = HashSet::new();
    let mut helped: HashSet<String> = HashSet::new();
    let mut closed: HashSet<String> = HashSet::new();
    let mut series: HashSet<(String, Vec<(String, String)>)> = HashSet::new();
    let mut pending_help: Option<(String, String)> = None;
    for (n, line) in text[..text.len() - 1].split('\n').enumerate() {
        let at = |e: String| format!("line {}: {e}: {line:?}", n + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut parts = comment.trim_start_matches(' ').splitn(3, ' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("HELP"), Some(name), rest) => {
                    if !is_name(name, true) || !helped.insert(name.to_owned()) {
                        return Err(at("a bad or repeated HELP".into()));
                    }
                    pending_help = Some((name.to_owned(), help_text(rest.unwrap_or(""))?));
                }
                (Some("TYPE"), Some(name), Some(kind)) => {
                    if !is_name(name, true) || !typed.insert(name.to_owned()) {
                        return Err(at("a bad or repeated TYPE".into()));
                    }
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                        return Err(at(format!("unknown type {kind}")));
                    }
                    if let Some(last) = families.last() {
                        closed.insert(last.name.clone());
                    }
                    let help = match pending_help.take() {
                        Some((h, text)) if h == name => Some(text),
                        Some((h, _)) => {
                            return Err(at(format!("HELP of {h} before TYPE of {name}")));
                        }
                        None => None,
                    };
                    families.push(Family {
                        name: name.to_owned(),
                        kind: kind.to_owned(),
                        help,
                        samples: Vec::new(),
                    });
                }
                (Some("TYPE"), ..) => return Err(at("TYPE needs a name and a type".into())),
                _ => {} // a comment
            }
            continue;
        }
        let name_end = line
            .find(['{', ' '])
            .ok_or_else(|| at("a sample needs a value".into()))?;
        let name = &line[..name_end];
        if !is_name(name, true) {
            return Err(at(format!("{name:?} is not a metric name")));
        }
        let (labels, rest) = if line[name_end..].starts_with('{') {
            labels(&line[name_end..]).map_err(at)?
        } else {
            (Vec::new(), &line[name_end..])
        };
        let mut fields = rest
            .strip_prefix(' ')
            .ok_or_else(|| at("a space before the value".into()))?
            .split(' ');
        let value = value(fields.next().unwrap_or("")).map_err(at)?;
        if let Some(timestamp) = fields.next() {
            timestamp
                .parse::<i64>()
                .map_err(|_| at("a timestamp is an integer".into()))?;
        }
        if fields.next().is_some() {
            return Err(at("text after the timestamp".into()));
        }
        let family = match families.last_mut() {
            Some(f) if belongs(name, &f.name, &f.kind) => f,
            _ => {
                // A sample with no TYPE: an untyped family of its own.
                if closed.contains(name) || typed.contains(name) {
                    return Err(at(format!("{name}'s samples are not together")));
                }
                if let Some(last) = families.last() {
                    closed.insert(last.name.clone());
                }
                typed.insert(name.to_owned());
                families.push(Family {
                    name: name.to_owned(),
                    kind: "untyped".into(),
                    help: None,
                    samples: Vec::new(),
                });
                families.last_mut().ok_or("unreachable")?
            }
        };
        if !series.insert((name.to_owned(), labels.clone())) {
            return Err(at("a series twice".into()));
        }
        if family.kind == "histogram"
            && name.ends_with("_bucket") != labels.iter().any(|(n, _)| n == "le")
        {
            return Err(at("le goes on buckets, and only on them".into()));
        }
        if family.kind == "counter" && (value.is_nan() || value < 0.0) {
            return Err(at("a counter is not negative".into()));
        }
        family.samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    for family in families.iter().filter(|f| f.kind == "histogram") {
        check_histogram(family)?;
    }
    Ok(families)
}

#[test]
fn the_reader_refuses_what_the_format_does_not_allow() {
    let good = "# HELP a_total Things.\n# TYPE a_total counter\na_total{x=\"1\\\"\"} 3\n\
                # TYPE h histogram\nh_bucket{le=\"0.5\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 0.7\nh_count 2\n";
    let families = parse(good).unwrap();
    assert_eq!(families[0].value("a_total", &[("x", "1\"")]), Some(3.0));
    for bad in [
        "a 1",                                       // no final newline
        "a{x=1} 1\n",                                // unquoted label value
        "a{x=\"1\"} one\n",                          // not a number
        "# TYPE a counter\n# TYPE a counter\na 1\n", // TYPE twice
        "# TYPE a counter\na -1\n",                  // a negative counter
        "a 1\nb 1\na 2\n",                           // not together
        "a{x=\"1\",x=\"2\"} 1\n",                    // a label twice
        "a 1\na 1\n",                                // a series twice
        "# TYPE a summary_ish\na 1\n",               // unknown type
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
        "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", // no +Inf
        "9a 1\n",                                                         // bad name
        "a{x=\"\\t\"} 1\n",                                               // bad escape
    ] {
        assert!(parse(bad).is_err(), "{bad:?} was read");
    }
}
