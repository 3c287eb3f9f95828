//! Succeeded and failed runs of a job over time: its history counted per hour (or per day
//! when it reaches back more than two days), by when each run was recorded.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use lock_scheduler::control::HistoryEntry;
use serde_json::{Value, json};

use crate::view;

/// Longest span counted per hour; past it, per day.
const HOURLY_SPAN: TimeDelta = TimeDelta::hours(48);

/// The width of a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Width {
    Hour,
    Day,
}

impl Width {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Width::Hour => "hour",
            Width::Day => "day",
        }
    }

    fn delta(self) -> TimeDelta {
        match self {
            Width::Hour => TimeDelta::hours(1),
            Width::Day => TimeDelta::days(1),
        }
    }
}

/// The runs recorded in one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bucket {
    pub(crate) start: DateTime<Utc>,
    /// `ran`.
    pub(crate) succeeded: usize,
    /// `failed`, `timed out`.
    pub(crate) failed: usize,
    /// Skipped, missed, cancelled, replaced.
    pub(crate) other: usize,
}

/// A job's runs counted per bucket, oldest bucket first, from the oldest run's bucket to now's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) width: Width,
    pub(crate) buckets: Vec<Bucket>,
    /// Runs counted.
    pub(crate) runs: usize,
    /// When the oldest was recorded.
    pub(crate) since: Option<DateTime<Utc>>,
}

/// When `run` was recorded: its entry id's milliseconds.
pub(crate) fn recorded_at(run: &HistoryEntry) -> Option<DateTime<Utc>> {
    run.id.split_once('-').and_then(|(ms, _)| ms.parse().ok()).and_then(DateTime::from_timestamp_millis)
}

/// Counts `runs` (any order) up to `now`.
pub(crate) fn count(runs: &[HistoryEntry], now: DateTime<Utc>) -> Counts {
    let times: Vec<(DateTime<Utc>, &str)> =
        runs.iter().filter_map(|r| recorded_at(r).map(|t| (t.min(now), r.outcome.as_str()))).collect();
    count_times(&times, now)
}

/// Counts runs recorded at the given times with the given outcomes, up to `now`.
fn count_times(times: &[(DateTime<Utc>, &str)], now: DateTime<Utc>) -> Counts {
    let Some(since) = times.iter().map(|(t, _)| *t).min() else {
        return Counts { width: Width::Hour, buckets: Vec::new(), runs: 0, since: None };
    };
    let width = if now - since <= HOURLY_SPAN { Width::Hour } else { Width::Day };
    let floor = |t: DateTime<Utc>| t.duration_trunc(width.delta()).unwrap_or(t);
    let first = floor(since);
    let mut buckets = Vec::new();
    let mut start = first;
    while start <= now {
        buckets.push(Bucket { start, succeeded: 0, failed: 0, other: 0 });
        start += width.delta();
    }
    for (at, outcome) in times {
        let index = ((floor(*at) - first).num_seconds() / width.delta().num_seconds()) as usize;
        if let Some(bucket) = buckets.get_mut(index) {
            match *outcome {
                "ran" => bucket.succeeded += 1,
                o if view::is_failure(o) => bucket.failed += 1,
                _ => bucket.other += 1,
            }
        }
    }
    Counts { width, buckets, runs: times.len(), since: Some(since) }
}

impl Counts {
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "bucket": self.width.name(),
            "runs": self.runs,
            "since": self.since.map(|t| t.to_rfc3339()),
            "buckets": self.buckets.iter().map(|b| json!({
                "start": b.start.to_rfc3339(),
                "succeeded": b.succeeded,
                "failed": b.failed,
                "other": b.other,
            })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).map(|t| t.with_timezone(&Utc)).unwrap_or_default()
    }

    #[test]
    fn runs_are_counted_per_hour_then_per_day() {
        let now = at("2026-12-03T14:30:00Z");
        let runs = [
            (at("2026-12-03T12:05:00Z"), "ran"),
            (at("2026-12-03T12:55:00Z"), "failed"),
            (at("2026-12-03T14:10:00Z"), "timed out"),
            (at("2026-12-03T14:11:00Z"), "skipped: paused"),
        ];
        let counts = count_times(&runs, now);
        assert_eq!(
            (counts.width, counts.runs, counts.buckets.len()),
            (Width::Hour, 4, 3),
            "12h, 13h (empty), 14h"
        );
        let tally: Vec<(usize, usize, usize)> =
            counts.buckets.iter().map(|b| (b.succeeded, b.failed, b.other)).collect();
        assert_eq!(tally, [(1, 1, 0), (0, 0, 0), (0, 1, 1)]);
        let week = count_times(&[(at("2026-11-26T00:00:00Z"), "ran"), (now, "failed")], now);
        assert_eq!((week.width, week.buckets.len()), (Width::Day, 8), "past two days: per day");
        assert_eq!(count_times(&[], now).buckets.len(), 0);
    }
}
