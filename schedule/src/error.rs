//! [`ScheduleError`]: why a schedule (a cron expression, a time zone, an interval, a duration,
//! a job name, the text form of a schedule) was rejected.

use crate::field::CronField;

/// Why a schedule was rejected. Each message says what was given and what is expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The cron expression does not parse. The message echoes the expression and, when one
    /// field is at fault, names it and its allowed values.
    #[error("invalid cron expression `{expr}`: {reason}")]
    InvalidCron {
        /// The rejected expression.
        expr: String,
        /// The field at fault, when the expression has the right number of fields and one of
        /// them is wrong.
        field: Option<CronField>,
        /// What is wrong, in words.
        reason: String,
    },
    /// The time zone is not an IANA name known to `chrono-tz`.
    #[error(
        "unknown time zone `{tz}`: use an IANA name such as `Europe/Berlin`, `America/New_York` or `UTC`"
    )]
    InvalidTimeZone {
        /// The rejected name.
        tz: String,
    },
    /// The expression parses but has no fire time (e.g. `0 0 0 30 2 *`, February 30th).
    #[error("cron expression `{expr}` never fires: no date matches it")]
    NeverFires {
        /// The expression.
        expr: String,
    },
    /// A duration (an interval's period or offset, a limit) does not parse.
    #[error("invalid duration {text:?}: {reason}")]
    InvalidDuration {
        /// The rejected text.
        text: String,
        /// What is wrong.
        reason: String,
    },
    /// An interval schedule (`every`) cannot be used as given.
    #[error("invalid interval: {reason}")]
    InvalidInterval {
        /// What is wrong, with the values given.
        reason: String,
    },
    /// A job name cannot be used.
    #[error("invalid job name {name:?}: {reason}")]
    InvalidName {
        /// The rejected name.
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
}
