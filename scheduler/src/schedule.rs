//! [`Schedule`]: a parsed cron expression in a real time zone, and the pure computation of its
//! fire times (slots).

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, DurationRound, LocalResult, Offset, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use croner::errors::CronError;
use croner::parser::{CronParser, Seconds, Year};
use croner::{Cron, JobType};

/// How late a slot may be found and still count as on time (not missed), whatever the
/// [`CatchUp`] policy: the scheduler's timers fire within milliseconds of a slot, this only
/// absorbs a busy runtime.
pub const ON_TIME: Duration = Duration::from_secs(1);

/// How many due slots the scheduler walks through one by one after a stall before jumping to
/// the most recent one (missed-slot counts are exact up to this number).
const MAX_SCAN: u64 = 10_000;

/// The latest a slot may still be run: a day less than the time a claimed tick is
/// remembered in Redis ([`lock_core::tick::TICK_TTL`]), so a slot that late cannot have
/// been forgotten by Redis and run twice.
pub(crate) const MAX_CATCH_UP: Duration =
    Duration::from_secs(lock_core::tick::TICK_TTL.as_secs() - 24 * 60 * 60);

/// More than any DST shift (at most two hours anywhere).
const MAX_DST_SHIFT: TimeDelta = TimeDelta::hours(3);

/// What a job does with slots it could not run on time (a slot is *missed* when no replica ran
/// it: every replica was down, Redis was unreachable, the process stalled, the wall clock
/// stepped forward).
///
/// Decided once for the whole cluster: every late slot is claimed in Redis like an on-time one
/// (so it runs once, whichever replicas come back), and for jobs with a [`Job::lock`](crate::Job::lock)
/// key a replica that starts, or finds Redis reachable again, reads the last claimed tick and
/// treats the slots since as missed. Jobs whose fn brings its own lock
/// (`#[distributed_lock]`) only see the slots missed while their replica was running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CatchUp {
    /// Skip missed slots: run a slot only if it is found within [`ON_TIME`] of its time; every
    /// later slot is logged (and recorded once in the run history) as missed, not run.
    Never,
    /// Run the most recent missed slot, late, if it is at most this old (at least [`ON_TIME`],
    /// at most 6 days: a claimed tick is remembered for
    /// [`TICK_TTL`](lock_core::tick::TICK_TTL)); older missed slots are logged as missed and
    /// not run. At most one late run per stall, never a burst.
    Latest(Duration),
    /// Run every missed slot, oldest first and one at a time, but at most this many (the most
    /// recent ones, at most 6 days old); older ones are logged as missed and not run. Each
    /// slot is claimed like an on-time one, so across replicas each runs once.
    Each(u32),
}

impl Default for CatchUp {
    /// [`CatchUp::Latest`] within one minute.
    fn default() -> Self {
        CatchUp::Latest(Duration::from_secs(60))
    }
}

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

/// What the expected shape is, for messages about the number of fields.
const SHAPE_HINT: &str =
    "expected 6 fields with seconds: `sec min hour day-of-month month day-of-week`, e.g. `0 0 2 * * *`";

/// A cron expression (6 fields, with seconds) in a time zone (UTC unless given).
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
/// use scheduler::Schedule;
/// use scheduler::chrono::{TimeZone, Utc};
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
/// # Ok::<(), scheduler::ScheduleError>(())
/// ```
#[derive(Clone)]
pub struct Schedule {
    expr: String,
    cron: Cron,
    tz: Tz,
    /// croner's "interval/wildcard" job type (vs "fixed-time"), which decides DST behaviour.
    interval: bool,
}

impl Schedule {
    /// Parses a 6-field cron expression (`sec min hour day-of-month month day-of-week`) in the
    /// IANA time zone `tz` (`None`: UTC).
    pub fn new(expr: &str, tz: Option<&str>) -> Result<Schedule, ScheduleError> {
        let tz = match tz {
            None => Tz::UTC,
            Some(name) => name
                .trim()
                .parse::<Tz>()
                .map_err(|_| ScheduleError::InvalidTimeZone { tz: name.to_owned() })?,
        };
        let cron = parser().parse(expr).map_err(|e| {
            let (field, reason) = diagnose(expr, &e);
            ScheduleError::InvalidCron { expr: expr.to_owned(), field, reason }
        })?;
        let interval = cron.determine_job_type() == JobType::IntervalWildcard;
        let schedule = Schedule { expr: expr.to_owned(), cron, tz, interval };
        // A pattern that matches no real date (Feb 30) is a configuration error, not a job
        // that silently never runs. Probe from a fixed instant so the check is deterministic.
        let probe = DateTime::<Utc>::UNIX_EPOCH + TimeDelta::days(365 * 56);
        if schedule.next_after(probe).is_none() {
            return Err(ScheduleError::NeverFires { expr: expr.to_owned() });
        }
        Ok(schedule)
    }

    /// The cron expression as given.
    pub fn expression(&self) -> &str {
        &self.expr
    }

    /// The time zone the expression is evaluated in.
    pub fn time_zone(&self) -> Tz {
        self.tz
    }

    /// The first fire time strictly after `after`, in the schedule's time zone; `None` if there
    /// is none within croner's search limit (about a year of seconds).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Tz>> {
        // croner searches forward in *local* time, in whole seconds from the start it is given
        // (keeping its sub-second part): start from the truncated instant so slots are whole
        // seconds.
        let forward = self.min_after(truncate(after), after)?;
        // A fall-back change between `after` and that slot repeats a stretch of local time:
        // slots in the repeated stretch come after `after` in real time but before it in local
        // time, so the forward search missed them. Search again from the change.
        let horizon = forward.with_timezone(&Utc).min(after + MAX_DST_SHIFT);
        if self.offset(horizon) >= self.offset(after) {
            return Some(forward);
        }
        let change = self.offset_change(after, horizon);
        match self.min_after(change, after) {
            Some(repeated) if repeated < forward => Some(repeated),
            _ => Some(forward),
        }
    }

    /// The earliest occurrence strictly after `after`, searching croner's matches in local
    /// time from `start` (inclusive). croner's `find_next_occurrence` returns one instant per
    /// matching local time (the earlier of a repeated one); for interval/wildcard jobs the
    /// later one of a repeated local time is an occurrence too (croner's iterator yields both,
    /// but it skips the second after such a pair, so it is not used here).
    fn min_after(&self, start: DateTime<Utc>, after: DateTime<Utc>) -> Option<DateTime<Tz>> {
        let mut cursor = start.with_timezone(&self.tz);
        let mut inclusive = true;
        let mut best: Option<DateTime<Tz>> = None;
        for _ in 0..64 {
            let Ok(found) = self.cron.find_next_occurrence(&cursor, inclusive) else { break };
            inclusive = false;
            let local = found.naive_local();
            if let Some(best) = &best {
                // Later local times map to instants of at least `local - largest offset`: once
                // that is past the best so far, nothing better follows.
                let largest = self.offset(after).max(self.offset(best.with_timezone(&Utc)));
                if local - TimeDelta::seconds(i64::from(largest)) > best.naive_utc() {
                    break;
                }
            }
            let pair = match self.tz.from_local_datetime(&local) {
                LocalResult::Ambiguous(first, second) if self.interval => [Some(first), Some(second)],
                _ => [Some(found), None],
            };
            for t in pair.into_iter().flatten() {
                if t.with_timezone(&Utc) > after && best.as_ref().is_none_or(|b| t < *b) {
                    best = Some(t);
                }
            }
            cursor = found;
        }
        best
    }

    /// The zone's UTC offset at `t`, in seconds.
    fn offset(&self, t: DateTime<Utc>) -> i32 {
        self.tz.offset_from_utc_datetime(&t.naive_utc()).fix().local_minus_utc()
    }

    /// The first whole second in `(from, to]` with a smaller UTC offset than at `from` (there is
    /// one: the offset at `to` is smaller).
    fn offset_change(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> DateTime<Utc> {
        let before = self.offset(from);
        let (mut lo, mut hi) = (from, to);
        while hi - lo > TimeDelta::seconds(1) {
            let mid = lo + (hi - lo) / 2;
            if self.offset(mid) < before { hi = mid } else { lo = mid }
        }
        // Offsets change on whole seconds, so truncating stays at or after the change.
        truncate(hi)
    }

    /// The next `n` fire times strictly after `from`, in the schedule's time zone, strictly
    /// increasing.
    pub fn upcoming(&self, from: DateTime<Utc>, n: usize) -> Vec<DateTime<Tz>> {
        let mut out = Vec::with_capacity(n);
        let mut cursor = from;
        while out.len() < n {
            let Some(next) = self.next_after(cursor) else { break };
            cursor = next.with_timezone(&Utc);
            out.push(next);
        }
        out
    }

    /// The slots in `(floor, now]` and what to do with them under `catch_up`. `None` when no
    /// slot is due.
    pub(crate) fn due(&self, floor: DateTime<Utc>, now: DateTime<Utc>, catch_up: CatchUp) -> Option<Due> {
        let mut cursor = floor;
        let mut latest: Option<DateTime<Utc>> = None;
        let mut previous: Option<DateTime<Utc>> = None;
        let mut count = 0u64;
        // CatchUp::Each: the most recent slots (up to its bound), and the latest one dropped.
        let keep = match catch_up {
            CatchUp::Each(max) => max.max(1) as usize,
            _ => 0,
        };
        let mut recent: VecDeque<DateTime<Utc>> = VecDeque::with_capacity(keep.min(1024));
        let mut dropped: Option<DateTime<Utc>> = None;
        while let Some(slot) = self.next_after(cursor).map(|t| t.with_timezone(&Utc))
            && slot <= now
        {
            previous = latest;
            latest = Some(slot);
            count += 1;
            cursor = slot;
            if keep > 0 {
                if recent.len() == keep {
                    dropped = recent.pop_front();
                }
                recent.push_back(slot);
            }
            if count >= MAX_SCAN {
                // A long stall of a frequent job: jump straight to the most recent slot.
                if let Ok(last) =
                    self.cron.find_previous_occurrence(&truncate(now).with_timezone(&self.tz), true)
                    && let last = last.with_timezone(&Utc)
                    && last > cursor
                    && last <= now
                {
                    previous = latest;
                    latest = Some(last);
                    count += 1;
                }
                break;
            }
        }
        let latest = latest?;
        if keep > 0 {
            // Slots too old to be run (a claimed tick may have been forgotten) are missed.
            while let Some(first) = recent.front()
                && (now - *first).to_std().unwrap_or_default() > MAX_CATCH_UP
            {
                dropped = recent.pop_front();
            }
            let Some(run) = recent.pop_back() else {
                return Some(Due {
                    run: None,
                    earlier: Vec::new(),
                    missed: count,
                    last_missed: Some(latest),
                    floor: latest,
                });
            };
            let ran = recent.len() as u64 + 1;
            return Some(Due {
                run: Some(run),
                earlier: recent.into_iter().collect(),
                missed: count.saturating_sub(ran),
                last_missed: dropped,
                floor: latest,
            });
        }
        let lateness = (now - latest).to_std().unwrap_or_default();
        let limit = match catch_up {
            CatchUp::Never => ON_TIME,
            // Capped: a claimed tick is remembered for TICK_TTL, and an older slot must
            // never be claimed again.
            CatchUp::Latest(window) => window.max(ON_TIME).min(MAX_CATCH_UP),
            CatchUp::Each(_) => MAX_CATCH_UP,
        };
        Some(if lateness <= limit {
            Due {
                run: Some(latest),
                earlier: Vec::new(),
                missed: count - 1,
                last_missed: previous,
                floor: latest,
            }
        } else {
            Due { run: None, earlier: Vec::new(), missed: count, last_missed: Some(latest), floor: latest }
        })
    }
}

/// The result of [`Schedule::due`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Due {
    /// The slot to run now, if any.
    pub(crate) run: Option<DateTime<Utc>>,
    /// Missed slots to run, one at a time and oldest first, before `run`
    /// ([`CatchUp::Each`] only).
    pub(crate) earlier: Vec<DateTime<Utc>>,
    /// How many due slots are not run.
    pub(crate) missed: u64,
    /// The most recent of those.
    pub(crate) last_missed: Option<DateTime<Utc>>,
    /// Every slot up to and including this one has been dealt with.
    pub(crate) floor: DateTime<Utc>,
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schedule").field("expr", &self.expr).field("tz", &self.tz).finish()
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` ({})", self.expr, self.tz)
    }
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

/// The next slots found lately, by schedule and floor. Jobs on the same schedule fire
/// together and all need the slot after the same floor; croner's search is the costliest part
/// of firing a job (about 10,000 instructions), so it runs once per schedule and slot. A pure
/// memo: a schedule is determined by its expression and time zone.
#[derive(Default)]
pub(crate) struct NextSlots(VecDeque<Remembered>);

/// A schedule's expression and time zone, a floor, and the schedule's next slot after it.
type Remembered = (String, Tz, DateTime<Utc>, Option<DateTime<Tz>>);

impl NextSlots {
    /// Distinct (schedule, floor) pairs remembered; the oldest goes first.
    const LEN: usize = 16;

    /// [`Schedule::next_after`]`(after)`, remembered.
    pub(crate) fn next_after(&mut self, schedule: &Schedule, after: DateTime<Utc>) -> Option<DateTime<Tz>> {
        let same =
            |(expr, tz, at, _): &&Remembered| *at == after && *tz == schedule.tz && *expr == schedule.expr;
        if let Some((.., next)) = self.0.iter().find(same) {
            return *next;
        }
        let next = schedule.next_after(after);
        if self.0.len() == Self::LEN {
            self.0.pop_front();
        }
        self.0.push_back((schedule.expr.clone(), schedule.tz, after, next));
        next
    }
}

/// `t` without its sub-second part.
pub(crate) fn truncate(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(TimeDelta::seconds(1)).unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 6, 1, h, m, s).unwrap()
    }

    #[test]
    fn remembered_next_slots_match_the_schedules_own() {
        let mut memo = NextSlots::default();
        let every = Schedule::new("* * * * * *", None).unwrap();
        let five = Schedule::new("*/5 * * * * *", None).unwrap();
        let paris = Schedule::new("0 30 2 * * *", Some("Europe/Paris")).unwrap();
        let utc_0230 = Schedule::new("0 30 2 * * *", None).unwrap();
        // More distinct (schedule, floor) pairs than it remembers, each asked twice.
        for round in 0..2 {
            for s in 0..12 {
                let after = utc(1, 0, s) + TimeDelta::milliseconds(i64::from(round) * 10);
                for schedule in [&every, &five, &paris, &utc_0230] {
                    assert_eq!(
                        memo.next_after(schedule, after),
                        schedule.next_after(after),
                        "{schedule:?} {after}"
                    );
                }
            }
        }
        // Same expression, different time zones: different slots.
        assert_ne!(memo.next_after(&paris, utc(1, 0, 0)), memo.next_after(&utc_0230, utc(1, 0, 0)));
    }

    #[test]
    fn next_after_is_strict_and_whole_seconds() {
        let every = Schedule::new("* * * * * *", None).unwrap();
        let t = utc(12, 0, 0) + TimeDelta::milliseconds(300);
        assert_eq!(every.next_after(t).unwrap(), utc(12, 0, 1));
        assert_eq!(every.next_after(utc(12, 0, 0)).unwrap(), utc(12, 0, 1));
    }

    #[test]
    fn due_runs_on_time_slots_and_catches_up_only_the_latest() {
        let minutely = Schedule::new("0 * * * * *", None).unwrap();
        let floor = utc(12, 0, 10);
        assert_eq!(minutely.due(floor, utc(12, 0, 59), CatchUp::Never), None, "nothing due yet");

        let on_time =
            minutely.due(floor, utc(12, 1, 0) + TimeDelta::milliseconds(3), CatchUp::Never).unwrap();
        assert_eq!(
            on_time,
            Due {
                run: Some(utc(12, 1, 0)),
                earlier: Vec::new(),
                missed: 0,
                last_missed: None,
                floor: utc(12, 1, 0)
            }
        );

        // Stalled until 12:03:20: slots 12:01, 12:02, 12:03 are due.
        let late = minutely.due(floor, utc(12, 3, 20), CatchUp::default()).unwrap();
        assert_eq!(
            late,
            Due {
                run: Some(utc(12, 3, 0)),
                earlier: Vec::new(),
                missed: 2,
                last_missed: Some(utc(12, 2, 0)),
                floor: utc(12, 3, 0)
            }
        );
        let never = minutely.due(floor, utc(12, 3, 20), CatchUp::Never).unwrap();
        assert_eq!(
            never,
            Due {
                run: None,
                earlier: Vec::new(),
                missed: 3,
                last_missed: Some(utc(12, 3, 0)),
                floor: utc(12, 3, 0)
            }
        );
        let too_old = minutely.due(floor, utc(12, 3, 20), CatchUp::Latest(Duration::from_secs(10))).unwrap();
        assert_eq!(too_old.run, None, "20 s late is beyond a 10 s window");
    }

    #[test]
    fn due_with_each_runs_every_missed_slot_up_to_the_bound() {
        let minutely = Schedule::new("0 * * * * *", None).unwrap();
        let floor = utc(12, 0, 0);
        let all = minutely.due(floor, utc(12, 3, 20), CatchUp::Each(5)).unwrap();
        assert_eq!(all.earlier, [utc(12, 1, 0), utc(12, 2, 0)]);
        assert_eq!((all.run, all.missed, all.last_missed), (Some(utc(12, 3, 0)), 0, None));
        let bounded = minutely.due(floor, utc(12, 3, 20), CatchUp::Each(2)).unwrap();
        assert_eq!(bounded.earlier, [utc(12, 2, 0)]);
        assert_eq!(
            (bounded.run, bounded.missed, bounded.last_missed),
            (Some(utc(12, 3, 0)), 1, Some(utc(12, 1, 0)))
        );
    }

    #[test]
    fn due_after_a_very_long_stall_jumps_to_the_latest_slot() {
        let every = Schedule::new("* * * * * *", None).unwrap();
        let floor = utc(0, 0, 0);
        let due = every.due(floor, utc(6, 0, 0), CatchUp::default()).unwrap();
        assert_eq!(due.run, Some(utc(6, 0, 0)));
        assert!(due.missed >= MAX_SCAN, "{due:?}");
    }

    /// Every instant in `[from, from + hours)` (second by second) whose local time matches an
    /// interval/wildcard pattern: the reference the searches must agree with.
    fn brute_force(schedule: &Schedule, from: DateTime<Utc>, hours: i64) -> Vec<DateTime<Utc>> {
        (0..hours * 3600)
            .map(|s| from + TimeDelta::seconds(s))
            .filter(|t| schedule.cron.is_time_matching(&t.with_timezone(&schedule.tz)).unwrap())
            .collect()
    }

    #[test]
    fn interval_slots_around_dst_changes_match_a_brute_force_scan() {
        let cases = [
            // (zone, an instant ~2 h before a change)
            ("Europe/Berlin", Utc.with_ymd_and_hms(2025, 3, 30, 0, 0, 0).unwrap()),
            ("Europe/Berlin", Utc.with_ymd_and_hms(2025, 10, 25, 23, 0, 0).unwrap()),
            ("America/New_York", Utc.with_ymd_and_hms(2025, 11, 2, 4, 0, 0).unwrap()),
            ("America/New_York", Utc.with_ymd_and_hms(2025, 3, 9, 5, 0, 0).unwrap()),
            // A 30-minute shift.
            ("Australia/Lord_Howe", Utc.with_ymd_and_hms(2025, 4, 5, 13, 0, 0).unwrap()),
            ("Australia/Lord_Howe", Utc.with_ymd_and_hms(2025, 10, 4, 14, 0, 0).unwrap()),
        ];
        let patterns =
            ["0 */30 * * * *", "*/20 * * * * *", "0 0 * * * *", "0 15,45 0-3 * * *", "30 */7 * * * *"];
        for (zone, from) in cases {
            for pattern in patterns {
                let schedule = Schedule::new(pattern, Some(zone)).unwrap();
                let expected = brute_force(&schedule, from, 4);
                let got: Vec<DateTime<Utc>> = schedule
                    .upcoming(from - TimeDelta::seconds(1), expected.len())
                    .iter()
                    .map(|t| t.with_timezone(&Utc))
                    .collect();
                assert_eq!(got, expected, "{pattern} in {zone} from {from}");
            }
        }
    }

    #[test]
    fn rejects_bad_input() {
        assert!(matches!(Schedule::new("0 0 2 * *", None), Err(ScheduleError::InvalidCron { .. })));
        assert!(matches!(Schedule::new("0 0 2 * * * 2030", None), Err(ScheduleError::InvalidCron { .. })));
        assert!(matches!(Schedule::new("0 61 2 * * *", None), Err(ScheduleError::InvalidCron { .. })));
        assert!(matches!(
            Schedule::new("0 0 2 * * *", Some("Mars/Olympus")),
            Err(ScheduleError::InvalidTimeZone { .. })
        ));
        assert!(Schedule::new("0 0 2 * * *", Some("Europe/Berlin")).is_ok());
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
            let err = Schedule::new(expr, None).unwrap_err();
            assert!(
                matches!(&err, ScheduleError::InvalidCron { field: Some(f), .. } if *f == field),
                "{expr}: {err:?}"
            );
            let message = err.to_string();
            assert!(message.starts_with(&format!("invalid cron expression `{expr}`: {reason}")), "{message}");
            assert!(!message.contains("Component error"), "croner's wording is replaced: {message}");
        }

        let err = Schedule::new("0 0 2 * *", None).unwrap_err();
        assert!(matches!(&err, ScheduleError::InvalidCron { field: None, .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "invalid cron expression `0 0 2 * *`: it has 5 fields; expected 6 fields with seconds: \
             `sec min hour day-of-month month day-of-week`, e.g. `0 0 2 * * *`"
        );
        assert!(Schedule::new("", None).unwrap_err().to_string().contains("it is empty"));
        // Names and nicknames still parse.
        assert!(Schedule::new("0 0 9 * JAN-MAR MON-FRI", None).is_ok());
        assert!(Schedule::new("@daily", None).is_ok());
    }
}
