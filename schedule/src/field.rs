//! [`CronField`]: the six fields of a cron expression, as messages name them.

use std::fmt;

/// One of the six fields of a cron expression, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CronField {
    /// Seconds, 0-59.
    Seconds,
    /// Minutes, 0-59.
    Minutes,
    /// Hours, 0-23.
    Hours,
    /// Day of month, 1-31.
    DayOfMonth,
    /// Month, 1-12 or JAN-DEC.
    Month,
    /// Day of week, 0-7 (0 and 7 are Sunday) or SUN-SAT.
    DayOfWeek,
}

impl CronField {
    /// The fields in the order they appear in an expression.
    pub const ALL: [CronField; 6] = [
        CronField::Seconds,
        CronField::Minutes,
        CronField::Hours,
        CronField::DayOfMonth,
        CronField::Month,
        CronField::DayOfWeek,
    ];

    /// Its name in messages: `seconds`, `minutes`, `hours`, `day of month`, `month`,
    /// `day of week`.
    pub fn name(self) -> &'static str {
        match self {
            CronField::Seconds => "seconds",
            CronField::Minutes => "minutes",
            CronField::Hours => "hours",
            CronField::DayOfMonth => "day of month",
            CronField::Month => "month",
            CronField::DayOfWeek => "day of week",
        }
    }

    /// The values it accepts, e.g. `0-59`.
    pub fn allowed(self) -> &'static str {
        match self {
            CronField::Seconds | CronField::Minutes => "0-59",
            CronField::Hours => "0-23",
            CronField::DayOfMonth => "1-31",
            CronField::Month => "1-12 or JAN-DEC",
            CronField::DayOfWeek => "0-7 or SUN-SAT, 0 and 7 being Sunday",
        }
    }
}

impl fmt::Display for CronField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
