//! Text output: durations, slot times and aligned tables.

use std::time::Duration;

/// `28.5s`, `1.2s`, `350ms`, `2m 5s`.
pub(crate) fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{}m {}s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

/// An epoch-ms slot as RFC 3339 in UTC (seconds), or the number if out of range.
pub(crate) fn slot_time(tick: i64) -> String {
    chrono::DateTime::from_timestamp_millis(tick)
        .map_or_else(|| tick.to_string(), |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

/// Columns padded to their widest cell; "(none)" when there are no rows.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    if rows.is_empty() {
        return "(none)\n".into();
    }
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut first = true;
        let mut text = String::new();
        for (cell, w) in cells.zip(&widths) {
            if !first {
                text.push_str("  ");
            }
            first = false;
            text.push_str(&format!("{cell:<w$}"));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(duration(Duration::from_millis(350)), "350ms");
        assert_eq!(duration(Duration::from_millis(28_500)), "28.5s");
        assert_eq!(duration(Duration::from_secs(125)), "2m 5s");
        assert_eq!(slot_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(table(&["A", "BB"], &[vec!["xyz".into(), "1".into()]]), "A    BB\nxyz  1\n");
    }
}
