//! Text output: durations, slot times, aligned tables, and the escaping of what a terminal
//! would act on.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::Duration;

/// `text` with every character a terminal would act on or that reorders text escaped as
/// `\u{..}`: control characters but the line break (ESC starts the escape sequences that
/// retitle a terminal or clear the screen; C1 controls too), and the invisible format
/// characters of bidirectional text (U+061C, U+200E-U+200F, U+202A-U+202E, U+2066-U+2069) and
/// zero-width ones (U+200B-U+200D, U+2060, U+FEFF). Values in Redis are anyone's text.
pub(crate) fn terminal_safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if needs_escape(c) {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(c, '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

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
    // Escaped before measuring, so that the columns line up with what is printed (a line
    // break inside a cell would break the table too).
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| terminal_safe(cell).replace('\n', "\\n")).collect())
        .collect();
    let rows = rows.as_slice();
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

    #[test]
    fn terminal_controls_and_bidi_are_escaped() {
        assert_eq!(terminal_safe("plain text\nline two"), "plain text\nline two");
        assert_eq!(terminal_safe("\u{1b}]0;pwned\u{7}"), "\\u{1b}]0;pwned\\u{7}");
        assert_eq!(terminal_safe("a\u{1b}[2Jb\r\t"), "a\\u{1b}[2Jb\\u{d}\\u{9}");
        assert_eq!(terminal_safe("key\u{202e}gpj.exe"), "key\\u{202e}gpj.exe");
        assert_eq!(terminal_safe("\u{9b}31m"), "\\u{9b}31m", "a C1 control sequence introducer");
        assert_eq!(terminal_safe("zero\u{200b}width\u{2066}"), "zero\\u{200b}width\\u{2066}");
        assert_eq!(terminal_safe("émoji ✓"), "émoji ✓", "ordinary text is left alone");
        let cell = table(&["K"], &[vec!["a\nb\u{1b}".into()]]);
        assert_eq!(cell, "K\na\\nb\\u{1b}\n");
    }
}
