//! [`CatchUp`]: what a job does with the slots it could not run on time, and the bounds on how
//! late a slot may run.

use std::time::Duration;

/// How late a slot may be found and still count as on time (not missed), whatever the
/// [`CatchUp`] policy: the scheduler's timers fire within milliseconds of a slot, this only
/// absorbs a busy runtime.
pub const ON_TIME: Duration = Duration::from_secs(1);

/// The latest a slot may still be run: a day less than the time a claimed tick is
/// remembered in Redis ([`lock_core::tick::TICK_TTL`]), so a slot that late cannot have
/// been forgotten by Redis and run twice.
pub(crate) const MAX_CATCH_UP: Duration =
    Duration::from_secs(lock_core::tick::TICK_TTL.as_secs() - 24 * 60 * 60);

/// What a job does with slots it could not run on time (a slot is *missed* when no replica ran
/// it: every replica was down, Redis was unreachable, the process stalled, the wall clock
/// stepped forward).
///
/// Decided once for the whole cluster: every late slot is claimed in Redis like an on-time one
/// (so it runs once, whichever replicas come back), and for jobs with a [`Job::lock`](crate::job::Job::lock)
/// key a replica that starts, or finds Redis reachable again, reads the last claimed tick and
/// treats the slots since as missed. Jobs whose fn brings its own lock
/// (`#[distributed_lock]`) only see the slots missed while their replica was running.
///
/// ```
/// use std::time::Duration;
///
/// use lock_scheduler::{CatchUp, Job, scheduled};
///
/// // Every missed hour runs, oldest first, up to a day's worth.
/// #[scheduled(cron = "0 0 * * * *", catch_up = "each 24")]
/// async fn send_invoices() {}
///
/// # async fn refresh() {}
/// # fn main() {
/// // Only the next slot matters: missed ones are recorded, not run.
/// let cache = Job::new("cache", "0 */5 * * * *", refresh).lock("lock:cache").catch_up(CatchUp::Never);
/// // The default: the latest missed slot runs if it is at most a minute old.
/// assert_eq!(CatchUp::default(), CatchUp::Latest(Duration::from_secs(60)));
/// # let _ = cache;
/// # }
/// ```
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
