//! The first slot of a [`Schedule`] strictly after an instant, and the next few; for a cron
//! expression, croner's forward search in local time, searched again after a fall-back change,
//! whose repeated stretch of local time it would miss.

use chrono::{DateTime, LocalResult, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;

use crate::schedule::zone::MAX_DST_SHIFT;
use crate::schedule::{CronSchedule, Kind, Schedule, truncate};

impl Schedule {
    /// The first fire time strictly after `after`, in the schedule's time zone; `None` if there
    /// is none within croner's search limit (about a year of seconds).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Tz>> {
        match &self.kind {
            Kind::Cron(cron) => cron.next_after(after),
            Kind::Every(every) => {
                let slot = every.next_after_ms(after.timestamp_millis());
                DateTime::<Utc>::from_timestamp_millis(slot).map(|t| t.with_timezone(&self.tz))
            }
        }
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

    /// The last fire time at or before `at` (whole seconds), if one is found: where a long
    /// stall's scan of missed slots jumps to.
    pub(crate) fn latest_at_or_before(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.kind {
            Kind::Cron(cron) => cron
                .cron
                .find_previous_occurrence(&truncate(at).with_timezone(&cron.tz), true)
                .ok()
                .map(|t| t.with_timezone(&Utc)),
            Kind::Every(every) => DateTime::<Utc>::from_timestamp_millis(
                every.latest_at_or_before_ms(truncate(at).timestamp_millis()),
            ),
        }
    }
}

impl CronSchedule {
    /// [`Schedule::next_after`] of a cron expression.
    fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Tz>> {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::utc;

    #[test]
    fn next_after_is_strict_and_whole_seconds() {
        let every = Schedule::new("* * * * * *", None).unwrap();
        let t = utc(12, 0, 0) + TimeDelta::milliseconds(300);
        assert_eq!(every.next_after(t).unwrap(), utc(12, 0, 1));
        assert_eq!(every.next_after(utc(12, 0, 0)).unwrap(), utc(12, 0, 1));
    }
}
