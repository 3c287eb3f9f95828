//! The schedule's time zone: its UTC offset at an instant, and where it changes (the
//! daylight saving time changes [`Schedule::next_after`] searches around).

use chrono::{DateTime, Offset, TimeDelta, TimeZone, Utc};

use crate::schedule::{CronSchedule, truncate};

/// More than any DST shift (at most two hours anywhere).
pub(super) const MAX_DST_SHIFT: TimeDelta = TimeDelta::hours(3);

impl CronSchedule {
    /// The zone's UTC offset at `t`, in seconds.
    pub(super) fn offset(&self, t: DateTime<Utc>) -> i32 {
        self.tz.offset_from_utc_datetime(&t.naive_utc()).fix().local_minus_utc()
    }

    /// The first whole second in `(from, to]` with a smaller UTC offset than at `from` (there is
    /// one: the offset at `to` is smaller).
    pub(super) fn offset_change(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> DateTime<Utc> {
        let before = self.offset(from);
        let (mut lo, mut hi) = (from, to);
        while hi - lo > TimeDelta::seconds(1) {
            let mid = lo + (hi - lo) / 2;
            if self.offset(mid) < before { hi = mid } else { lo = mid }
        }
        // Offsets change on whole seconds, so truncating stays at or after the change.
        truncate(hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::schedule::{Kind, Schedule};

    /// Every instant in `[from, from + hours)` (second by second) whose local time matches an
    /// interval/wildcard pattern: the reference the searches must agree with.
    fn brute_force(schedule: &Schedule, from: DateTime<Utc>, hours: i64) -> Vec<DateTime<Utc>> {
        let Kind::Cron(cron) = &schedule.kind else { panic!("a cron schedule") };
        (0..hours * 3600)
            .map(|s| from + TimeDelta::seconds(s))
            .filter(|t| cron.cron.is_time_matching(&t.with_timezone(&cron.tz)).unwrap())
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
}
