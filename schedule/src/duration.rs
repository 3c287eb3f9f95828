//! Durations as text: `"500ms"`, `"10s"`, `"5m"`, `"1h"`, `"2d"`.

use std::time::Duration;

use crate::error::ScheduleError;

const EXPECTED: &str =
    "expected an integer followed by `ms`, `s`, `m`, `h` or `d`, e.g. \"500ms\", \"30s\", \"5m\"";

/// Parses `"<integer><unit>"` with unit `ms`, `s`, `m`, `h` or `d`, surrounding spaces ignored.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(lock_schedule::parse_duration("30s").unwrap(), Duration::from_secs(30));
/// assert!(lock_schedule::parse_duration("1.5s").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, ScheduleError> {
    let invalid =
        |reason: &str| ScheduleError::InvalidDuration { text: text.to_owned(), reason: reason.to_owned() };
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    if number.is_empty() {
        return Err(invalid(EXPECTED));
    }
    let n: u64 = number.parse().map_err(|_| invalid("it is too large"))?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(invalid(EXPECTED)),
    };
    let ms = n.checked_mul(unit_ms).ok_or_else(|| invalid("it is too large"))?;
    Ok(Duration::from_millis(ms))
}

/// `d` the way [`parse_duration`] reads it back: in the largest unit that divides it.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms > 0 && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_rejects_garbage() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration(" 5m ").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("2d").unwrap(), Duration::from_secs(172_800));
        for bad in ["", "s", "5", "5 parsecs", "1.5s", "-1s", "5sec", "99999999999999999999s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn a_formatted_duration_parses_back(ms in 0u64..=10u64.pow(12)) {
            let d = Duration::from_millis(ms);
            proptest::prop_assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }
    }
}
