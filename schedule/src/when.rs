//! [`When`]: a job's schedule as given (a cron expression in a time zone, or an interval),
//! checked, and its text form: what an operator writes in the environment to change a job's
//! schedule, or `-` to turn the job off.

use std::fmt;

use crate::cron::parse_cron;
use crate::duration::parse_duration;
use crate::error::ScheduleError;
use crate::every::Every;
use crate::zone::parse_zone;

/// When a job runs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum When {
    /// At each fire time of a 6-field cron expression, in a time zone (UTC when `None`).
    Cron {
        /// The expression, as given.
        expr: String,
        /// The IANA time zone, as given.
        zone: Option<String>,
    },
    /// Every period, aligned to the Unix epoch.
    Every(Every),
}

impl When {
    /// A cron schedule, checked: the expression parses and fires, the zone is known.
    pub fn cron(expr: impl Into<String>, zone: Option<&str>) -> Result<When, ScheduleError> {
        let expr = expr.into();
        parse_cron(&expr)?;
        if let Some(zone) = zone {
            parse_zone(zone)?;
        }
        Ok(When::Cron { expr, zone: zone.map(str::to_owned) })
    }

    /// Parses the text form: a 6-field cron expression (in `zone`, if given), or
    /// `every <duration>` optionally followed by `offset <duration>`; `-` (nothing scheduled)
    /// gives `None`. A time zone does not apply to an interval.
    ///
    /// ```
    /// use lock_schedule::When;
    ///
    /// assert_eq!(When::parse("-", None).unwrap(), None);
    /// let every = When::parse("every 30s offset 5s", None).unwrap().unwrap();
    /// assert_eq!(every.to_string(), "every 30s offset 5s");
    /// let cron = When::parse("0 0 3 * * *", Some("Europe/Berlin")).unwrap().unwrap();
    /// assert_eq!(cron.to_string(), "0 0 3 * * * (Europe/Berlin)");
    /// assert!(When::parse("every 30s", Some("Europe/Berlin")).is_err());
    /// assert!(When::parse("0 0 25 * * *", None).is_err());
    /// ```
    pub fn parse(text: &str, zone: Option<&str>) -> Result<Option<When>, ScheduleError> {
        let text = text.trim();
        if text == "-" {
            return Ok(None);
        }
        let Some(interval) = text.strip_prefix("every ") else {
            return When::cron(text, zone).map(Some);
        };
        if let Some(zone) = zone {
            return Err(ScheduleError::InvalidInterval {
                reason: format!(
                    "`{text}` is aligned to the Unix epoch: a time zone ({zone:?}) does not apply to it"
                ),
            });
        }
        let mut words = interval.split_whitespace();
        let period = words.next().map(parse_duration).transpose()?;
        let offset = match (words.next(), words.next(), words.next()) {
            (None, ..) => None,
            (Some("offset"), Some(offset), None) => Some(parse_duration(offset)?),
            _ => None.ok_or_else(|| ScheduleError::InvalidInterval {
                reason: format!(
                    "`{text}`: expected `every <duration>` or `every <duration> offset <duration>`"
                ),
            })?,
        };
        let period = period.ok_or_else(|| ScheduleError::InvalidInterval {
            reason: format!("`{text}`: expected `every <duration>`, e.g. `every 30s`"),
        })?;
        Every::new(period, offset.unwrap_or_default()).map(|every| Some(When::Every(every)))
    }
}

impl fmt::Display for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            When::Cron { expr, zone: Some(zone) } => write!(f, "{expr} ({zone})"),
            When::Cron { expr, zone: None } => write!(f, "{expr}"),
            When::Every(every) => write!(f, "{every}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_form_rejects_what_does_not_parse() {
        for bad in [
            "every",
            "every 30",
            "every 30s offset",
            "every 30s after 5s",
            "every 30s offset 30s",
            "every 0s",
        ] {
            assert!(When::parse(bad, None).is_err(), "{bad:?}");
        }
        assert!(matches!(
            When::parse("0 0 2 * * *", Some("Mars/Base")),
            Err(ScheduleError::InvalidTimeZone { .. })
        ));
        assert_eq!(
            When::parse(" every 1h offset 5m ", None).unwrap().unwrap().to_string(),
            "every 1h offset 5m"
        );
    }
}
