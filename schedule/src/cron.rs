//! Parsing a cron expression, and saying what is wrong with a rejected one (croner's own
//! messages name neither the field nor its allowed values).

use chrono::{DateTime, TimeDelta, Utc};
use croner::Cron;
use croner::errors::CronError;
use croner::parser::{CronParser, Seconds, Year};

use crate::error::ScheduleError;
use crate::field::CronField;

/// What the expected shape is, for messages about the number of fields.
const SHAPE_HINT: &str =
    "expected 6 fields with seconds: `sec min hour day-of-month month day-of-week`, e.g. `0 0 2 * * *`";

/// Parses a 6-field cron expression (`sec min hour day-of-month month day-of-week`; names like
/// `JAN-MAR` and `MON-FRI`, and nicknames like `@daily`, are accepted). An expression that
/// matches no real date (30 February) is rejected as [`ScheduleError::NeverFires`]: a
/// configuration error, not a job that silently never runs.
///
/// ```
/// use lock_schedule::{CronField, ScheduleError, parse_cron};
///
/// assert!(parse_cron("0 0 2 * * *").is_ok());
/// let err = parse_cron("0 0 2 31 2 *").unwrap_err();
/// assert!(matches!(err, ScheduleError::NeverFires { .. }));
/// let err = parse_cron("0 61 2 * * *").unwrap_err();
/// assert!(matches!(err, ScheduleError::InvalidCron { field: Some(CronField::Minutes), .. }));
/// assert_eq!(
///     err.to_string(),
///     "invalid cron expression `0 61 2 * * *`: the minutes field `61` is out of range (minutes: 0-59)"
/// );
/// ```
pub fn parse_cron(expr: &str) -> Result<Cron, ScheduleError> {
    let cron = parser().parse(expr).map_err(|e| {
        let (field, reason) = diagnose(expr, &e);
        ScheduleError::InvalidCron { expr: expr.to_owned(), field, reason }
    })?;
    // Probed in UTC from a fixed instant, so the check is deterministic: a date that does not
    // exist (30 February) does not exist in any zone.
    let probe = DateTime::<Utc>::UNIX_EPOCH + TimeDelta::days(365 * 56);
    if cron.find_next_occurrence(&probe, false).is_err() {
        return Err(ScheduleError::NeverFires { expr: expr.to_owned() });
    }
    Ok(cron)
}

/// The parser of the accepted dialect: 6 fields, seconds required, no year.
fn parser() -> CronParser {
    CronParser::builder().seconds(Seconds::Required).year(Year::Disallowed).build()
}

/// Explains croner's rejection of `expr`: the wrong number of fields, or which field is wrong
/// (croner's own messages, e.g. "Number out of bounds.", name neither the field nor its range).
fn diagnose(expr: &str, error: &CronError) -> (Option<CronField>, String) {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    // `@daily` and friends expand to a full expression; anything else has its fields spelled out.
    if !expr.contains('@') && fields.len() != CronField::ALL.len() {
        let found = match fields.len() {
            0 => "it is empty".to_owned(),
            1 => "it has 1 field".to_owned(),
            n => format!("it has {n} fields"),
        };
        return (None, format!("{found}; {SHAPE_HINT}"));
    }
    if matches!(error, CronError::ComponentError(_) | CronError::IllegalCharacters(_)) && !expr.contains('@')
    {
        // Parse each field alone (every other one `*`): the first that fails is the culprit.
        for (i, field) in CronField::ALL.into_iter().enumerate() {
            let mut probe = ["*"; 6];
            probe[i] = fields[i];
            if let Err(e) = parser().parse(&probe.join(" ")) {
                let value = fields[i];
                let problem = field_problem(&e);
                let allowed = field.allowed();
                return (Some(field), format!("the {field} field `{value}` {problem} ({field}: {allowed})"));
            }
        }
    }
    (None, format!("{error}; {SHAPE_HINT}"))
}

/// croner's complaint about one field, in words that fit "the minutes field `61` ...".
fn field_problem(error: &CronError) -> String {
    match error {
        CronError::IllegalCharacters(_) => "contains a character that is not allowed".to_owned(),
        CronError::ComponentError(message) if message.contains("out of bounds") => {
            "is out of range".to_owned()
        }
        CronError::ComponentError(message) => {
            let message = message.trim_end_matches('.');
            let mut chars = message.chars();
            let lowered: String = match chars.next() {
                Some(first) => first.to_lowercase().chain(chars).collect(),
                None => String::new(),
            };
            format!("is invalid: {lowered}")
        }
        other => format!("is invalid: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_input() {
        assert!(matches!(parse_cron("0 0 2 * *"), Err(ScheduleError::InvalidCron { .. })));
        assert!(matches!(parse_cron("0 0 2 * * * 2030"), Err(ScheduleError::InvalidCron { .. })));
        assert!(matches!(parse_cron("0 61 2 * * *"), Err(ScheduleError::InvalidCron { .. })));
        assert!(matches!(parse_cron("0 0 0 30 2 *"), Err(ScheduleError::NeverFires { .. })));
        assert!(parse_cron("0 0 0 29 2 *").is_ok(), "29 February exists in leap years");
    }

    #[test]
    fn an_invalid_field_is_named_with_its_range_and_the_expression_echoed() {
        let cases = [
            ("61 0 2 * * *", CronField::Seconds, "the seconds field `61` is out of range (seconds: 0-59)"),
            ("0 61 2 * * *", CronField::Minutes, "the minutes field `61` is out of range (minutes: 0-59)"),
            ("0 0 24 * * *", CronField::Hours, "the hours field `24` is out of range (hours: 0-23)"),
            (
                "0 0 2 0 * *",
                CronField::DayOfMonth,
                "the day of month field `0` is out of range (day of month: 1-31)",
            ),
            (
                "0 0 2 * 13 *",
                CronField::Month,
                "the month field `13` is out of range (month: 1-12 or JAN-DEC)",
            ),
            ("0 0 2 * * 8", CronField::DayOfWeek, "the day of week field `8` is out of range"),
            ("0 0 2-30 * * *", CronField::Hours, "the hours field `2-30` is out of range (hours: 0-23)"),
            ("*/0 * * * * *", CronField::Seconds, "the seconds field `*/0` is invalid: step cannot be zero"),
            (
                "0 x 2 * * *",
                CronField::Minutes,
                "the minutes field `x` contains a character that is not allowed",
            ),
        ];
        for (expr, field, reason) in cases {
            let err = parse_cron(expr).unwrap_err();
            assert!(
                matches!(&err, ScheduleError::InvalidCron { field: Some(f), .. } if *f == field),
                "{expr}: {err:?}"
            );
            let message = err.to_string();
            assert!(message.starts_with(&format!("invalid cron expression `{expr}`: {reason}")), "{message}");
            assert!(!message.contains("Component error"), "croner's wording is replaced: {message}");
        }

        let err = parse_cron("0 0 2 * *").unwrap_err();
        assert!(matches!(&err, ScheduleError::InvalidCron { field: None, .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "invalid cron expression `0 0 2 * *`: it has 5 fields; expected 6 fields with seconds: \
             `sec min hour day-of-month month day-of-week`, e.g. `0 0 2 * * *`"
        );
        assert!(parse_cron("").unwrap_err().to_string().contains("it is empty"));
        // Names and nicknames still parse.
        assert!(parse_cron("0 0 9 * JAN-MAR MON-FRI").is_ok());
        assert!(parse_cron("@daily").is_ok());
    }
}
