//! [`Schedule`]: a parsed cron expression in a real time zone, and the pure computation of its
//! fire times (slots).
//!
//! The dialect (cron expressions, time zones, intervals) is parsed and checked by
//! `lock-schedule`, which the `#[scheduled]` attribute uses at compile time too.
//!
//! - [`zone`]: the time zone's UTC offsets, and where they change.
//! - [`next`]: the first slot after an instant, whatever the local-time ambiguities.
//! - [`next_slots`]: those slots remembered, for the jobs that share a schedule.
//! - [`catch_up`] and [`due`]: the slots that came due, and which of them run under a job's
//!   catch-up policy.

pub(crate) mod catch_up;
pub(crate) mod due;
pub(crate) mod next;
pub(crate) mod next_slots;
mod zone;

use std::fmt;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use chrono_tz::Tz;
use croner::{Cron, JobType};
use lock_schedule::{Every, ScheduleError, When, parse_cron, parse_zone};

/// When a job fires: a cron expression (6 fields, with seconds) in a time zone (UTC unless
/// given), or an interval aligned to the Unix epoch ([`Schedule::every`]).
///
/// Pure: it computes fire times from any instant you give it, which is how the DST behaviour
/// below is tested.
///
/// # Daylight saving time
///
/// Fire times are computed by [croner](https://docs.rs/croner) in the schedule's IANA time
/// zone (through `chrono-tz`), one occurrence at a time, so the UTC offset in effect *at each
/// slot* is used: a job at `0 0 2 * * *` in `Europe/Berlin` fires at 02:00 local on both sides
/// of a change (01:00 UTC in winter, 00:00 UTC in summer). On the change days themselves,
/// croner's rules apply:
///
/// - **Skipped hour (spring forward, e.g. 02:00–02:59 do not exist in Berlin on the last Sunday
///   of March).** A *fixed-time* job (seconds, minutes and hours each one fixed value, like
///   `0 30 2 * * *`) whose time falls in the gap fires once, at the first valid time after it
///   (03:00 local). An *interval/wildcard* job (any of those fields is `*`, a step or a list,
///   like `0 */15 * * * *` or `0 0 * * * *`) simply has no slots in the gap: its next slot
///   is the first matching time after it (03:00).
/// - **Repeated hour (fall back, e.g. 02:00–02:59 happen twice in Berlin on the last Sunday of
///   October).** A fixed-time job fires once, at the *first* occurrence (summer time). An
///   interval/wildcard job fires in both passes: every matching time of the repeated hour
///   occurs twice, an hour apart in real time, and each is its own slot.
///
/// Slots are always strictly increasing instants: [`Schedule::next_after`] returns the first
/// slot strictly after a given instant, whatever the local-time ambiguities.
///
/// # Example
///
/// ```
/// use lock_scheduler::Schedule;
/// use lock_scheduler::chrono::{TimeZone, Utc};
///
/// let schedule = Schedule::new("0 0 2 * * *", Some("Europe/Berlin"))?;
/// let from = Utc.with_ymd_and_hms(2025, 3, 29, 12, 0, 0).unwrap();
/// let next: Vec<String> = schedule.upcoming(from, 3).iter().map(|t| t.to_rfc3339()).collect();
/// // 02:00 does not exist on 30 March in Berlin: the fixed-time job fires at 03:00 that day.
/// assert_eq!(next, [
///     "2025-03-30T03:00:00+02:00",
///     "2025-03-31T02:00:00+02:00",
///     "2025-04-01T02:00:00+02:00",
/// ]);
/// # Ok::<(), lock_scheduler::ScheduleError>(())
/// ```
#[derive(Clone)]
pub struct Schedule {
    /// The cron expression as given, or the interval's text form (`every 30s`).
    expr: String,
    tz: Tz,
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    // Boxed: croner's parsed expression is ten times an interval's size.
    Cron(Box<CronSchedule>),
    Every(Every),
}

/// A cron expression evaluated in a time zone.
#[derive(Clone)]
struct CronSchedule {
    cron: Cron,
    tz: Tz,
    /// croner's "interval/wildcard" job type (vs "fixed-time"), which decides DST behaviour.
    interval: bool,
}

impl Schedule {
    /// Parses a 6-field cron expression (`sec min hour day-of-month month day-of-week`) in the
    /// IANA time zone `tz` (`None`: UTC). One that matches no real date (30 February) is an
    /// error, not a job that silently never runs.
    pub fn new(expr: &str, tz: Option<&str>) -> Result<Schedule, ScheduleError> {
        let tz = tz.map_or(Ok(Tz::UTC), parse_zone)?;
        let cron = parse_cron(expr)?;
        let interval = cron.determine_job_type() == JobType::IntervalWildcard;
        Ok(Schedule {
            expr: expr.to_owned(),
            tz,
            kind: Kind::Cron(Box::new(CronSchedule { cron, tz, interval })),
        })
    }

    /// Slots every `every.period()`, aligned to the Unix epoch (plus its offset): every
    /// replica computes the same ones, whatever its time zone.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_scheduler::Schedule;
    /// use lock_scheduler::chrono::{TimeZone, Utc};
    /// use lock_schedule::Every;
    ///
    /// let every = Schedule::every(Every::new(Duration::from_secs(30), Duration::from_secs(5))?);
    /// let from = Utc.with_ymd_and_hms(2025, 6, 1, 12, 0, 7).unwrap();
    /// let next: Vec<String> = every.upcoming(from, 2).iter().map(|t| t.to_rfc3339()).collect();
    /// assert_eq!(next, ["2025-06-01T12:00:35+00:00", "2025-06-01T12:01:05+00:00"]);
    /// # Ok::<(), lock_scheduler::ScheduleError>(())
    /// ```
    pub fn every(every: Every) -> Schedule {
        Schedule { expr: every.to_string(), tz: Tz::UTC, kind: Kind::Every(every) }
    }

    /// The schedule of `when`.
    pub fn from_when(when: &When) -> Result<Schedule, ScheduleError> {
        match when {
            When::Cron { expr, zone } => Schedule::new(expr, zone.as_deref()),
            When::Every(every) => Ok(Schedule::every(*every)),
            // A `When` added later: rejected rather than guessed at.
            #[allow(unreachable_patterns)]
            other => {
                Err(ScheduleError::InvalidInterval { reason: format!("unsupported schedule `{other}`") })
            }
        }
    }

    /// The cron expression as given, or an interval's text form (`every 30s offset 5s`).
    pub fn expression(&self) -> &str {
        &self.expr
    }

    /// The time zone the expression is evaluated in (UTC for an interval).
    pub fn time_zone(&self) -> Tz {
        self.tz
    }

    /// Whether this is an interval (`every`) rather than a cron expression.
    pub fn is_interval(&self) -> bool {
        matches!(self.kind, Kind::Every(_))
    }
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schedule").field("expr", &self.expr).field("tz", &self.tz).finish()
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            // Aligned to the Unix epoch: no zone to speak of.
            Kind::Every(_) => write!(f, "`{}`", self.expr),
            Kind::Cron(_) => write!(f, "`{}` ({})", self.expr, self.tz),
        }
    }
}

/// `t` without its sub-second part.
pub(crate) fn truncate(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(TimeDelta::seconds(1)).unwrap_or(t)
}

/// 2025-06-01 at `h:m:s` UTC, for the unit tests of the children.
#[cfg(test)]
fn utc(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    use chrono::TimeZone;
    Utc.with_ymd_and_hms(2025, 6, 1, h, m, s).unwrap()
}
