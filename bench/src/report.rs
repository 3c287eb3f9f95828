//! Percentiles, the Markdown tables and the JSON lines the run prints.

use std::fmt::Write as _;
use std::time::Duration;

/// The `p`-th percentile (0..=100, nearest rank) of sorted samples; 0 when there are none.
pub(crate) fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Per-round ratios of a variant to its baseline (rounds run back to back, so both saw the
/// same machine state): median and quartiles. Robust to the rounds in which the machine
/// stalled, which dominate totals on a shared 2-core box.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ratios {
    pub(crate) median: f64,
    pub(crate) p25: f64,
    pub(crate) p75: f64,
}

impl Ratios {
    pub(crate) fn of(values: &[f64], baseline: &[f64]) -> Self {
        let mut r: Vec<f64> =
            values.iter().zip(baseline).map(|(a, b)| ratio(*a, *b)).filter(|r| r.is_finite()).collect();
        r.sort_by(f64::total_cmp);
        let q = |p: f64| -> f64 {
            if r.is_empty() {
                return f64::NAN;
            }
            // Linear interpolation between closest ranks.
            let pos = p * (r.len() - 1) as f64;
            let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
            r[lo] + (r[hi] - r[lo]) * (pos - lo as f64)
        };
        Ratios { median: q(0.5), p25: q(0.25), p75: q(0.75) }
    }

    /// `p25..p75`.
    pub(crate) fn iqr(&self, digits: usize) -> String {
        format!("{}..{}", fmt(self.p25, digits), fmt(self.p75, digits))
    }
}

/// p50 / p99 / max of latency samples in nanoseconds.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Latency {
    pub(crate) p50: u64,
    pub(crate) p99: u64,
    pub(crate) max: u64,
}

impl Latency {
    pub(crate) fn of(samples: &mut [u64]) -> Self {
        samples.sort_unstable();
        Latency {
            p50: percentile(samples, 50.0),
            p99: percentile(samples, 99.0),
            max: samples.last().copied().unwrap_or(0),
        }
    }
}

/// Nanoseconds as microseconds.
pub(crate) fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `a / b`, or NaN (printed as `-` / `null`) when `b` is zero.
pub(crate) fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { f64::NAN } else { a / b }
}

/// A number for a table cell: `-` when not finite, else with `digits` decimals.
pub(crate) fn fmt(v: f64, digits: usize) -> String {
    if v.is_finite() { format!("{v:.digits$}") } else { "-".to_owned() }
}

/// One JSON object, built by hand (keys are ours; string values are escaped).
#[derive(Debug, Clone, Default)]
pub(crate) struct Json(Vec<(&'static str, String)>);

impl Json {
    pub(crate) fn new(scenario: &str) -> Self {
        Json::default().str("scenario", scenario)
    }

    pub(crate) fn str(mut self, key: &'static str, value: &str) -> Self {
        let mut s = String::with_capacity(value.len() + 2);
        s.push('"');
        for c in value.chars() {
            match c {
                '"' => s.push_str("\\\""),
                '\\' => s.push_str("\\\\"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(s, "\\u{:04x}", c as u32);
                }
                c => s.push(c),
            }
        }
        s.push('"');
        self.0.push((key, s));
        self
    }

    pub(crate) fn num(mut self, key: &'static str, value: f64) -> Self {
        let v =
            if value.is_finite() { format!("{}", (value * 1000.0).round() / 1000.0) } else { "null".into() };
        self.0.push((key, v));
        self
    }

    pub(crate) fn int(mut self, key: &'static str, value: u64) -> Self {
        self.0.push((key, value.to_string()));
        self
    }

    pub(crate) fn bool(mut self, key: &'static str, value: bool) -> Self {
        self.0.push((key, value.to_string()));
        self
    }

    /// p50/p99/max of `lat` as `<prefix>_p50_us`, ... .
    pub(crate) fn latency(self, prefix: &'static str, lat: Latency) -> Self {
        let (k50, k99, kmax) = match prefix {
            "acquire" => ("acquire_p50_us", "acquire_p99_us", "acquire_max_us"),
            "release" => ("release_p50_us", "release_p99_us", "release_max_us"),
            "cycle" => ("cycle_p50_us", "cycle_p99_us", "cycle_max_us"),
            "gap" => ("handoff_gap_p50_us", "handoff_gap_p99_us", "handoff_gap_max_us"),
            _ => ("lag_p50_ms", "lag_p99_ms", "lag_max_ms"),
        };
        let scale = if prefix == "lag" { 1e6 } else { 1e3 };
        self.num(k50, lat.p50 as f64 / scale)
            .num(k99, lat.p99 as f64 / scale)
            .num(kmax, lat.max as f64 / scale)
    }

    /// The `scenario` field, for ordering.
    pub(crate) fn scenario(&self) -> &str {
        self.0.first().map_or("", |(_, v)| v.as_str())
    }

    pub(crate) fn line(&self) -> String {
        let fields: Vec<String> = self.0.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        format!("{{{}}}", fields.join(","))
    }
}

/// A Markdown table.
#[derive(Debug, Clone)]
pub(crate) struct Table {
    title: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    notes: Vec<String>,
}

impl Table {
    pub(crate) fn new(title: impl Into<String>, header: &[&str]) -> Self {
        Table {
            title: title.into(),
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub(crate) fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    pub(crate) fn title(&self) -> &str {
        &self.title
    }

    pub(crate) fn render(&self) -> String {
        let cols = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(cols) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let mut s = String::from("|");
            for (i, w) in widths.iter().enumerate() {
                let cell = cells.get(i).map_or("", String::as_str);
                let pad = w - cell.chars().count();
                if i == 0 {
                    let _ = write!(s, " {cell}{} |", " ".repeat(pad));
                } else {
                    let _ = write!(s, " {}{cell} |", " ".repeat(pad));
                }
            }
            s.push('\n');
            s
        };
        let mut out = format!("### {}\n\n", self.title);
        out.push_str(&line(&self.header));
        let mut sep = String::from("|");
        for (i, w) in widths.iter().enumerate() {
            if i == 0 {
                let _ = write!(sep, "{}|", "-".repeat(w + 2));
            } else {
                let _ = write!(sep, "{}:|", "-".repeat(w + 1));
            }
        }
        out.push_str(&sep);
        out.push('\n');
        for row in &self.rows {
            out.push_str(&line(row));
        }
        if !self.notes.is_empty() {
            out.push('\n');
            for note in &self.notes {
                let _ = writeln!(out, "{note}");
            }
        }
        out
    }
}

/// A benchmark target and whether this run met it.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) name: String,
    pub(crate) measured: f64,
    pub(crate) limit: f64,
    /// True when `measured` must be at least `limit`, false when at most.
    pub(crate) at_least: bool,
    pub(crate) unit: &'static str,
}

impl Target {
    pub(crate) fn met(&self) -> bool {
        if !self.measured.is_finite() {
            return false;
        }
        if self.at_least { self.measured >= self.limit } else { self.measured <= self.limit }
    }
}

/// Everything a run reports.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) tables: Vec<Table>,
    pub(crate) json: Vec<Json>,
    pub(crate) targets: Vec<Target>,
}

impl Report {
    pub(crate) fn merge(&mut self, other: Report) {
        self.tables.extend(other.tables);
        self.json.extend(other.json);
        self.targets.extend(other.targets);
    }

    /// Puts tables, JSON lines and targets in scenario order (S3 runs first but reads third).
    pub(crate) fn sort(&mut self) {
        self.tables.sort_by(|a, b| a.title().get(..2).cmp(&b.title().get(..2)));
        self.json.sort_by(|a, b| a.scenario().get(..3).cmp(&b.scenario().get(..3)));
        self.targets.sort_by(|a, b| a.name.get(..2).cmp(&b.name.get(..2)));
    }

    pub(crate) fn target(
        &mut self,
        name: impl Into<String>,
        measured: f64,
        at_least: bool,
        limit: f64,
        unit: &'static str,
    ) {
        self.targets.push(Target { name: name.into(), measured, limit, at_least, unit });
    }

    pub(crate) fn targets_table(&self) -> Table {
        let mut t = Table::new("Targets", &["target", "measured", "limit", "status"]);
        for target in &self.targets {
            let digits = if target.unit == "%" || target.unit == "µs" { 1 } else { 2 };
            let op = if target.at_least { ">=" } else { "<=" };
            t.row(vec![
                target.name.clone(),
                format!("{}{}", fmt(target.measured, digits), target.unit),
                format!("{op} {}{}", fmt(target.limit, digits), target.unit),
                if target.met() { "met".to_owned() } else { "MISSED".to_owned() },
            ]);
        }
        t
    }

    pub(crate) fn target_json(&self) -> Vec<Json> {
        self.targets
            .iter()
            .map(|t| {
                Json::new("target")
                    .str("target", &t.name)
                    .num("measured", t.measured)
                    .num("limit", t.limit)
                    .str("op", if t.at_least { ">=" } else { "<=" })
                    .bool("met", t.met())
            })
            .collect()
    }
}
