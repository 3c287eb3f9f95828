//! Once per tick across replicas for jobs of an existing
//! [tokio-cron-scheduler](tokio_cron_scheduler) `JobScheduler`.
//!
//! Every replica adds the same job to its own `JobScheduler`; when tokio-cron-scheduler fires
//! it, the adapter works out which slot of the job's cron expression (in the job's real time
//! zone) the fire is for, and claims that slot with the job's lock through lock-core's tick API
//! ([`LockClient::run_tick`]): one replica runs each slot (at most one always, exactly one while
//! Redis is reachable).
//!
//! ```no_run
//! use lock_scheduler::tokio_cron::once_per_tick;
//! use tokio_cron_scheduler::JobScheduler;
//!
//! # async fn demo(client: lock_scheduler::lock_core::LockClient) -> anyhow::Result<()> {
//! let sched = JobScheduler::new().await?;
//! sched.add(once_per_tick(&client, "lock:report", "0 0 2 * * *", || async { println!("report") })?).await?;
//! sched.start().await?;
//! # Ok(()) }
//! ```
//!
//! What tokio-cron-scheduler 0.15 does not do, and what the adapter makes of it:
//! - **Its callback knows only "now", not the slot.** The adapter takes the latest slot at or
//!   before now and hands it to the job ([`RunContext::slot`]); that slot, not "now", is the
//!   tick claimed in Redis, so replicas agree on it.
//! - **It polls every 500 ms**, so runs start up to ~0.5 s (more on a busy runtime) after
//!   their slot. A fire up to [`OncePerTick::max_lateness`] after a slot runs that slot; later
//!   fires are skipped with a warning.
//! - **A job's UTC offset is frozen when the job is created**, so after a DST change it fires
//!   an hour off. Slots are computed in the real zone, so replicas created on either side of
//!   the change still agree on each slot; but a fire an hour off is more than `max_lateness`
//!   after any slot and is skipped: such a job does not run until the `JobScheduler` (or the
//!   job) is recreated. Not covered: use [`Scheduler`](crate::scheduler::Scheduler) for jobs in zones
//!   with DST.
//! - **`shutdown()` does not wait for running jobs.** Covered on request: count the fires with
//!   an [`InFlight`] ([`OncePerTick::in_flight`]) and wait for it after `shutdown()`
//!   ([`InFlight::wait_idle`]). Runs still going when the runtime ends are dropped: their locks
//!   then expire with their lease (or the client's liveness lease).
//! - **No catch-up of missed slots**: a slot nobody's `JobScheduler` fired (every replica down,
//!   or every fire too late) is not run. Not covered; [`CatchUp`] is the
//!   scheduler's.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use lock_core::tick::TickRun;
use lock_core::{LockClient, LockError, LockOptions};
use tokio::sync::watch;
use tracing::Instrument;

use crate::job::JobOutput;
use crate::run_context::RunContext;
use crate::schedule::Schedule;
use crate::schedule::catch_up::{CatchUp, ON_TIME};
use lock_schedule::ScheduleError;

/// The tokio-cron-scheduler crate the adapter builds jobs for.
pub use tokio_cron_scheduler;

/// How late after its slot a fire still runs that slot, by default: tokio-cron-scheduler's
/// 500 ms polling plus room for a busy runtime.
pub const DEFAULT_MAX_LATENESS: Duration = Duration::from_secs(5);

/// The largest lateness bound honoured: a week.
const MAX_WINDOW: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Why a once-per-tick job could not be built.
///
/// Its message says what failed; the cause, if any, is its
/// [`source`](std::error::Error::source).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokioCronError {
    /// The lock key is invalid (empty, too long, ...).
    #[error("invalid lock key")]
    InvalidKey(#[source] LockError),
    /// The lock options are invalid.
    #[error("job on `{key}`: invalid lock options")]
    InvalidOptions {
        /// The lock key.
        key: String,
        /// What is wrong.
        #[source]
        source: LockError,
    },
    /// The cron expression is invalid.
    #[error("job on `{key}`: invalid schedule")]
    Schedule {
        /// The lock key.
        key: String,
        /// What is wrong with the schedule.
        #[source]
        source: ScheduleError,
    },
    /// Both day fields are restricted: tokio-cron-scheduler requires both to match (AND),
    /// this crate's schedules either one (OR, as cron does), so the slots would disagree.
    #[error(
        "job on `{key}`: cron expression `{expr}` restricts both day-of-month and day-of-week, \
         which tokio-cron-scheduler combines with AND and cron with OR: use `*` or `?` in one of them"
    )]
    AmbiguousDays {
        /// The lock key.
        key: String,
        /// The cron expression.
        expr: String,
    },
    /// tokio-cron-scheduler refused the job.
    #[error("job on `{key}`: tokio-cron-scheduler refused the job: {message}")]
    Job {
        /// The lock key.
        key: String,
        /// tokio-cron-scheduler's error.
        message: String,
    },
}

/// A tokio-cron-scheduler job on `cron` (6 fields, with seconds, in UTC) whose every slot runs
/// `f` on at most one replica (exactly one while Redis is reachable): the one that claims the
/// slot with the lock `key`.
///
/// The one-line form of [`OncePerTick`]; use the builder for a time zone, lock options, the
/// slot in the job ([`OncePerTick::job_with_context`]) or another lateness bound.
pub fn once_per_tick<F, Fut>(
    client: &LockClient,
    key: &str,
    cron: &str,
    f: F,
) -> Result<tokio_cron_scheduler::Job, TokioCronError>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: JobOutput,
{
    OncePerTick::new(client, key, cron).job(f)
}

/// Builds a tokio-cron-scheduler job that runs once per tick across replicas; start from
/// [`OncePerTick::new`], finish with [`job`](Self::job) or
/// [`job_with_context`](Self::job_with_context).
///
/// ```no_run
/// use lock_scheduler::Tz;
/// use lock_scheduler::tokio_cron::OncePerTick;
/// use tokio_cron_scheduler::JobScheduler;
///
/// # async fn demo(client: lock_scheduler::lock_core::LockClient) -> anyhow::Result<()> {
/// let sched = JobScheduler::new().await?;
/// let job = OncePerTick::new(&client, "lock:report", "0 0 2 * * *")
///     .time_zone(Tz::Europe__Berlin)
///     .job_with_context(|run| async move {
///         println!("report for {} on {}", run.local_slot(), run.instance());
///         Ok::<_, std::io::Error>(())
///     })?;
/// sched.add(job).await?;
/// # Ok(()) }
/// ```
#[must_use]
#[derive(Debug, Clone)]
pub struct OncePerTick {
    client: LockClient,
    key: String,
    cron: String,
    tz: Tz,
    options: LockOptions,
    max_lateness: Duration,
    in_flight: Option<InFlight>,
}

impl OncePerTick {
    /// A job on `cron` (6 fields, with seconds), locked by `key` taken with `client` (whose
    /// instance id names this replica in lock tokens and logs). Defaults: UTC, fail-fast
    /// watchdog lock ([`LockOptions::new`]), [`DEFAULT_MAX_LATENESS`].
    pub fn new(client: &LockClient, key: impl Into<String>, cron: impl Into<String>) -> Self {
        OncePerTick {
            client: client.clone(),
            key: key.into(),
            cron: cron.into(),
            tz: Tz::UTC,
            options: LockOptions::new(),
            max_lateness: DEFAULT_MAX_LATENESS,
            in_flight: None,
        }
    }

    /// The time zone the cron expression is evaluated in (default UTC). tokio-cron-scheduler
    /// is given it too, but freezes its UTC offset when the job is built (see the module docs).
    pub fn time_zone(mut self, tz: Tz) -> Self {
        self.tz = tz;
        self
    }

    /// How the lock is taken (lease, `on_lost`, ...). A wait is allowed but rarely useful: the
    /// replica that waits finds the slot claimed once it gets the lock.
    pub fn lock_options(mut self, options: LockOptions) -> Self {
        self.options = options;
        self
    }

    /// How late after a slot a fire still runs that slot (default [`DEFAULT_MAX_LATENESS`], at
    /// least 1 s, at most a week). A fire later than this after every slot is skipped with a
    /// warning.
    pub fn max_lateness(mut self, max_lateness: Duration) -> Self {
        self.max_lateness = max_lateness;
        self
    }

    /// Counts this job's fires in progress in `in_flight` (shared by any number of jobs), so
    /// that a shutdown can wait for them: tokio-cron-scheduler's `shutdown()` does not.
    pub fn in_flight(mut self, in_flight: &InFlight) -> Self {
        self.in_flight = Some(in_flight.clone());
        self
    }

    /// The job: `f`'s future runs once per slot across replicas. Its output may be `()`,
    /// `Option<T>` or `Result<T, E>` (an `Err` is logged with the key and slot).
    pub fn job<F, Fut>(self, f: F) -> Result<tokio_cron_scheduler::Job, TokioCronError>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: JobOutput,
    {
        self.job_with_context(move |_| f())
    }

    /// Like [`job`](Self::job), with the run's [`RunContext`]: its slot (the scheduled fire
    /// time, not "now"), its tick and the instance. [`RunContext::job`] is the lock key.
    pub fn job_with_context<F, Fut>(self, f: F) -> Result<tokio_cron_scheduler::Job, TokioCronError>
    where
        F: Fn(RunContext) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: JobOutput,
    {
        let adapter =
            Arc::new(self.validate(Arc::new(move |ctx| f(ctx).map(JobOutput::into_job_result).boxed()))?);
        let (key, cron, tz) = (adapter.key.to_string(), adapter.schedule.expression().to_owned(), adapter.tz);
        tokio_cron_scheduler::Job::new_async_tz(cron, tz, move |_id, _scheduler| {
            // Read at once: the slot is worked out from when tokio-cron-scheduler fired.
            let now = Utc::now();
            let adapter = adapter.clone();
            // Counted from the fire on, until the run (or the skip) is over.
            let counted = adapter.in_flight.as_ref().map(InFlight::enter);
            Box::pin(async move {
                let _counted = counted;
                adapter.fire(now).await;
            })
        })
        .map_err(|e| TokioCronError::Job { key, message: e.to_string() })
    }

    fn validate(self, func: Func) -> Result<Adapter, TokioCronError> {
        lock_core::validate_key(&self.key).map_err(TokioCronError::InvalidKey)?;
        let key = self.key;
        self.options
            .validate()
            .map_err(|source| TokioCronError::InvalidOptions { key: key.clone(), source })?;
        let schedule = Schedule::new(&self.cron, Some(self.tz.name()))
            .map_err(|source| TokioCronError::Schedule { key: key.clone(), source })?;
        let fields: Vec<&str> = self.cron.split_whitespace().collect();
        let restricted = |i: usize| fields.get(i).is_some_and(|f| *f != "*" && *f != "?");
        if restricted(3) && restricted(5) {
            return Err(TokioCronError::AmbiguousDays { key, expr: self.cron });
        }
        Ok(Adapter {
            instance: self.client.instance_id().into(),
            client: self.client,
            key: key.into(),
            schedule,
            tz: self.tz,
            options: self.options,
            max_lateness: self.max_lateness,
            in_flight: self.in_flight,
            last_fired: AtomicI64::new(i64::MIN),
            func,
        })
    }
}

type Func = Arc<dyn Fn(RunContext) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// A validated once-per-tick job, shared by its fires.
struct Adapter {
    client: LockClient,
    instance: Arc<str>,
    key: Arc<str>,
    schedule: Schedule,
    tz: Tz,
    options: LockOptions,
    max_lateness: Duration,
    in_flight: Option<InFlight>,
    /// The last tick this replica fired (tokio-cron-scheduler may fire a slot twice).
    last_fired: AtomicI64,
    func: Func,
}

impl Adapter {
    async fn fire(&self, now: DateTime<Utc>) {
        let Some(slot) = slot_for(&self.schedule, now, self.max_lateness) else {
            tracing::warn!(
                key = %self.key,
                instance = %self.instance,
                now = %now.with_timezone(&self.tz).to_rfc3339(),
                cron = self.schedule.expression(),
                "tokio-cron-scheduler fired more than {:?} after any slot of the schedule in {} \
                 (a stalled runtime, or its UTC offset frozen before a DST change): skipping",
                self.max_lateness.clamp(ON_TIME, MAX_WINDOW),
                self.tz
            );
            return;
        };
        let local = slot.with_timezone(&self.tz);
        let tick = slot.timestamp_millis();
        if self.last_fired.fetch_max(tick, Ordering::SeqCst) >= tick {
            tracing::debug!(key = %self.key, tick = %local.to_rfc3339(), "this slot was already fired here");
            return;
        }
        let span = tracing::info_span!(
            parent: None,
            "tokio_cron_run",
            key = %self.key,
            tick = %local.to_rfc3339(),
            instance = %self.instance,
            lateness_ms = (now - slot).num_milliseconds(),
        );
        let ctx = RunContext {
            job: self.key.clone(),
            slot: local,
            instance: self.instance.clone(),
            attempt: 1,
            began: Arc::default(),
        };
        let body = AssertUnwindSafe((self.func)(ctx)).catch_unwind();
        let outcome =
            self.client.run_tick(&self.key, tick, self.options.clone(), body).instrument(span.clone()).await;
        let _entered = span.enter();
        match outcome {
            Ok(TickRun::Ran(Ok(Ok(())))) => tracing::info!(outcome = "ran", "job ran"),
            Ok(TickRun::Ran(Ok(Err(error)))) => {
                tracing::error!(outcome = "failed", error = %error, "job failed; it stays scheduled");
            }
            Ok(TickRun::Ran(Err(_))) => {
                tracing::error!(outcome = "failed", "job panicked; it stays scheduled")
            }
            Ok(TickRun::ClaimedElsewhere { last_tick }) => tracing::info!(
                outcome = "skipped: tick done",
                last_tick,
                "this tick already ran on another instance, skipping"
            ),
            Ok(TickRun::Held { remaining }) => tracing::info!(
                outcome = "skipped: held",
                remaining_ms = remaining.map(|r| r.as_millis() as u64),
                "another instance holds the lock, skipping"
            ),
            Ok(_) => tracing::info!(outcome = "skipped", "the tick was not run here"),
            Err(error) => tracing::error!(outcome = "failed", error = %error, "could not claim the tick"),
        }
    }
}

/// Counts the fires in progress of the jobs built with [`OncePerTick::in_flight`], so that a
/// shutdown can wait for their runs to finish (tokio-cron-scheduler's `shutdown()` does not).
/// Cheap to clone; clones share the count.
///
/// ```no_run
/// use std::time::Duration;
///
/// use lock_scheduler::tokio_cron::{InFlight, OncePerTick};
/// use tokio_cron_scheduler::JobScheduler;
///
/// # async fn demo(client: lock_scheduler::lock_core::LockClient) -> anyhow::Result<()> {
/// let in_flight = InFlight::new();
/// let mut sched = JobScheduler::new().await?;
/// sched.add(OncePerTick::new(&client, "lock:report", "0 0 2 * * *").in_flight(&in_flight).job(|| async {})?).await?;
/// sched.start().await?;
/// // ... at shutdown:
/// sched.shutdown().await?;
/// if !in_flight.wait_idle(Duration::from_secs(25)).await {
///     eprintln!("{} run(s) still going", in_flight.running());
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct InFlight(Arc<watch::Sender<usize>>);

impl Default for InFlight {
    fn default() -> Self {
        InFlight(Arc::new(watch::Sender::new(0)))
    }
}

impl InFlight {
    /// A count at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many fires are in progress (claiming their tick, or running).
    pub fn running(&self) -> usize {
        *self.0.borrow()
    }

    /// Waits until no fire is in progress, at most `timeout`; `true` if none is.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let mut count = self.0.subscribe();
        tokio::time::timeout(timeout, count.wait_for(|n| *n == 0)).await.is_ok_and(|r| r.is_ok())
    }

    fn enter(&self) -> Counted {
        self.0.send_modify(|n| *n += 1);
        Counted(self.clone())
    }
}

/// One fire in progress; counted down when dropped.
struct Counted(InFlight);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// The slot a fire at `now` is for: the latest slot of `schedule` at or before `now`, if it is
/// at most `max_lateness` (at least [`ON_TIME`](crate::schedule::catch_up::ON_TIME)) old.
fn slot_for(schedule: &Schedule, now: DateTime<Utc>, max_lateness: Duration) -> Option<DateTime<Utc>> {
    let window = max_lateness.clamp(ON_TIME, MAX_WINDOW);
    let floor = now - TimeDelta::from_std(window).unwrap_or(TimeDelta::days(7)) - TimeDelta::seconds(1);
    schedule.due(floor, now, CatchUp::Latest(window))?.run
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn utc(h: u32, m: u32, s: u32, ms: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 3, 30, h, m, s).single().expect("valid")
            + TimeDelta::milliseconds(ms.into())
    }

    #[test]
    fn a_fire_runs_the_latest_slot_at_or_before_now() {
        let every_second = Schedule::new("* * * * * *", None).expect("valid");
        // The callback only knows "now"; polling makes it up to ~500 ms late.
        assert_eq!(slot_for(&every_second, utc(1, 0, 7, 480), DEFAULT_MAX_LATENESS), Some(utc(1, 0, 7, 0)));
        assert_eq!(slot_for(&every_second, utc(1, 0, 7, 0), DEFAULT_MAX_LATENESS), Some(utc(1, 0, 7, 0)));
        let minutely = Schedule::new("0 * * * * *", None).expect("valid");
        assert_eq!(slot_for(&minutely, utc(1, 5, 0, 900), DEFAULT_MAX_LATENESS), Some(utc(1, 5, 0, 0)));
        assert_eq!(slot_for(&minutely, utc(1, 5, 4, 900), DEFAULT_MAX_LATENESS), Some(utc(1, 5, 0, 0)));
        // Too late for any slot.
        assert_eq!(slot_for(&minutely, utc(1, 5, 6, 0), DEFAULT_MAX_LATENESS), None);
        assert_eq!(slot_for(&minutely, utc(1, 5, 6, 0), Duration::from_secs(10)), Some(utc(1, 5, 0, 0)));
    }

    #[test]
    fn a_fire_an_hour_off_after_a_dst_change_is_skipped_not_run_as_a_wrong_slot() {
        // 30 March 2025, Berlin springs forward at 01:00 UTC. A 03:00-local job created in
        // winter (+01:00 frozen) fires at 02:00 UTC = 04:00 CEST; its real slot was 01:00 UTC.
        let daily = Schedule::new("0 0 3 * * *", Some("Europe/Berlin")).expect("valid");
        assert_eq!(slot_for(&daily, utc(1, 0, 0, 300), DEFAULT_MAX_LATENESS), Some(utc(1, 0, 0, 0)));
        assert_eq!(slot_for(&daily, utc(2, 0, 0, 300), DEFAULT_MAX_LATENESS), None);
    }

    fn refused(built: Result<tokio_cron_scheduler::Job, TokioCronError>) -> TokioCronError {
        match built {
            Ok(_) => panic!("the job was accepted"),
            Err(e) => e,
        }
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        let client = LockClient::from_url("redis://127.0.0.1:1/").expect("lazy client");
        let err = refused(once_per_tick(&client, "lock:report", "0 0 2 * *", || async {}));
        assert!(matches!(&err, TokioCronError::Schedule { key, .. } if key == "lock:report"), "{err:?}");
        let err = refused(once_per_tick(&client, "", "0 0 2 * * *", || async {}));
        assert!(matches!(err, TokioCronError::InvalidKey(_)), "{err:?}");
        let err = refused(once_per_tick(&client, "lock:r", "0 0 2 13 * MON", || async {}));
        assert!(matches!(err, TokioCronError::AmbiguousDays { .. }), "{err:?}");
        assert!(err.to_string().contains("`0 0 2 13 * MON`"), "{err}");
        once_per_tick(&client, "lock:report", "0 0 2 * * MON-FRI", || async {}).expect("valid");
        let built = OncePerTick::new(&client, "lock:report", "0 0 2 * * *")
            .time_zone(Tz::Europe__Berlin)
            .job_with_context(|run| async move { Some(run.tick()) });
        assert!(built.is_ok());
    }
}
