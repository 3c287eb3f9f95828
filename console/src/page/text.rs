//! How values are written into a page: escaped (every value from Redis goes through [`esc`]),
//! percent-encoded into a link, durations and times as people read them, an outcome's colour.

use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, Utc};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

use crate::view;

/// Escapes text for HTML content and attribute values. Control characters and the invisible
/// format characters of bidirectional and zero-width text are shown as `\u{..}`: from Redis,
/// they could reorder a key on the page or hide part of it.
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if invisible(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// Characters a page must not pass through as they are: controls, and bidirectional and
/// zero-width format characters.
fn invisible(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// Percent-encodes one path segment (a job name or key may hold `/`, `?`, `#`).
pub(crate) fn seg(text: &str) -> String {
    utf8_percent_encode(text, NON_ALPHANUMERIC).to_string()
}

pub(crate) fn ms(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 10_000 { format!("{ms} ms") } else { format!("{:.1} s", d.as_secs_f64()) }
}

/// How long ago `since` was, coarsely: `45 s`, `12 min`, `3 h 5 min`, `2 d 4 h`.
pub(crate) fn uptime(since: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let s = (now - since).num_seconds().max(0);
    let (d, h, m) = (s / 86_400, s / 3_600 % 24, s / 60 % 60);
    match s {
        0..60 => format!("{s} s"),
        60..3_600 => format!("{m} min"),
        3_600..86_400 => format!("{h} h {m} min"),
        _ => format!("{d} d {h} h"),
    }
}

pub(crate) fn time(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(|| "–".into(), |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
}

pub(crate) fn outcome_class(outcome: &str) -> &'static str {
    match outcome {
        "ran" => "ok",
        o if view::is_failure(o) => "bad",
        "cancelled" | "missed" => "warn",
        _ => "skip",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(esc("<script>alert(1)</script>"), "&lt;script&gt;alert(1)&lt;/script&gt;");
        assert_eq!(esc("a\"b'c&d"), "a&quot;b&#39;c&amp;d");
        assert_eq!(seg("a/b c?#"), "a%2Fb%20c%3F%23");
        assert_eq!(esc("key\u{202e}gpj.exe"), "key\\u{202e}gpj.exe", "bidi controls are made visible");
        assert_eq!(esc("a\u{200b}b\u{1b}[2J"), "a\\u{200b}b\\u{1b}[2J");
        assert_eq!(esc("é ✓"), "é ✓");
    }
}
