//! IANA time zone names.

use chrono_tz::Tz;

use crate::error::ScheduleError;

/// The time zone named `name` (an IANA name such as `Europe/Berlin`, or `UTC`), surrounding
/// spaces ignored.
///
/// ```
/// assert_eq!(lock_schedule::parse_zone("Europe/Berlin").unwrap().name(), "Europe/Berlin");
/// assert!(lock_schedule::parse_zone("Europe/Berln").is_err());
/// ```
pub fn parse_zone(name: &str) -> Result<Tz, ScheduleError> {
    name.trim().parse::<Tz>().map_err(|_| ScheduleError::InvalidTimeZone { tz: name.to_owned() })
}
