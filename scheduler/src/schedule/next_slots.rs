//! [`NextSlots`]: the next slots found lately, shared by the jobs on the same schedule.

use std::collections::VecDeque;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use crate::schedule::Schedule;

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

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;
    use crate::schedule::utc;

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
}
