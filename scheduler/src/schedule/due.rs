//! Which slots came due since a job's floor, and which of them run under its [`CatchUp`]
//! policy ([`Schedule::due`]).

use std::collections::VecDeque;

use chrono::{DateTime, Utc};

use crate::schedule::Schedule;
use crate::schedule::catch_up::{CatchUp, MAX_CATCH_UP, ON_TIME};

/// How many due slots the scheduler walks through one by one after a stall before jumping to
/// the most recent one (missed-slot counts are exact up to this number).
const MAX_SCAN: u64 = 10_000;

impl Schedule {
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
                if let Some(last) = self.latest_at_or_before(now)
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::TimeDelta;

    use super::*;
    use crate::schedule::utc;

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
}
