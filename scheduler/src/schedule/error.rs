//! [`ScheduleError`]: why a cron expression or time zone was rejected.

use crate::schedule::field::CronField;

/// Why a cron expression or time zone was rejected.
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
    #[error("cron expression `{expr}` never fires")]
    NeverFires {
        /// The expression.
        expr: String,
    },
}
