//! [`RunContext`]: what a run knows about itself, given to the job's body.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

/// What a run knows about itself: the job, its slot (the scheduled fire time, not "now") and
/// the instance running it. Given to jobs built with [`Job::with_context`](crate::job::Job::with_context).
#[derive(Debug, Clone)]
pub struct RunContext {
    pub(crate) job: Arc<str>,
    pub(crate) slot: DateTime<Tz>,
    pub(crate) instance: Arc<str>,
    /// 1 for the slot's first run, then 2, 3, ... for its retries ([`Job::retry`](crate::job::Job::retry)).
    pub(crate) attempt: u32,
    /// Set when the body is called (the scheduler's clock), for the run's lateness.
    pub(crate) began: Arc<std::sync::OnceLock<DateTime<Utc>>>,
}

impl RunContext {
    /// The job's name.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The scheduled fire time of this run.
    pub fn slot(&self) -> DateTime<Utc> {
        self.slot.with_timezone(&Utc)
    }

    /// The scheduled fire time in the job's time zone.
    pub fn local_slot(&self) -> DateTime<Tz> {
        self.slot
    }

    /// The tick: the slot in epoch milliseconds, as claimed in Redis (`{<key>}:tick`) by the
    /// slot's first attempt (a retry claims no tick: taking its entry from the group's pending
    /// retries is what makes it run once).
    pub fn tick(&self) -> i64 {
        self.slot.timestamp_millis()
    }

    /// Which attempt at the slot this is: 1 for its first run, 2 for the first retry, and so
    /// on (see [`Job::retry`](crate::job::Job::retry)). Always 1 for a job without a retry policy.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The instance id of the replica running it.
    pub fn instance(&self) -> &str {
        &self.instance
    }
}
