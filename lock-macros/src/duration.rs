//! Compile-time parsing of duration strings: `"250ms"`, `"10s"`, `"5m"`, `"1h"`.

use std::time::Duration;

/// Parses `"<integer><unit>"` with unit `ms`, `s`, `m` or `h`.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let expected = "expected an integer followed by `ms`, `s`, `m` or `h`, e.g. \"500ms\", \"10s\", \"5m\"";
    let text_trimmed = text.trim();
    let split = text_trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(text_trimmed.len());
    let (number, unit) = text_trimmed.split_at(split);
    if number.is_empty() {
        return Err(format!("invalid duration {text:?}: {expected}"));
    }
    let n: u64 = number.parse().map_err(|_| format!("duration {text:?} is too large"))?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("invalid duration {text:?}: {expected}")),
    };
    let ms = n.checked_mul(unit_ms).ok_or_else(|| format!("duration {text:?} is too large"))?;
    Ok(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "s", "5", "5 parsecs", "1.5s", "-1s", "5sec", "99999999999999999999s"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_or_is_an_error_never_a_panic(text in "[0-9]{0,22}[a-z .-]{0,4}|\\PC{0,12}") {
            proptest::prop_assert_eq!(parse(&text), parse(&text));
        }

        #[test]
        fn a_printed_duration_parses_back(n in 0u64..=u64::MAX / 3_600_000, unit in 0usize..4) {
            let (suffix, ms) = [("ms", 1), ("s", 1_000), ("m", 60_000), ("h", 3_600_000)][unit];
            proptest::prop_assert_eq!(parse(&format!("{n}{suffix}")), Ok(Duration::from_millis(n * ms)));
            proptest::prop_assert_eq!(parse(&format!(" {n}{suffix} ")), Ok(Duration::from_millis(n * ms)));
        }
    }
}
