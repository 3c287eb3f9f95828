//! [`Job`]: what runs, when, and under which lock.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use lock_core::{LockOptions, OnLost};

use crate::schedule::catch_up::CatchUp;

/// What a job's future may return: `()`, `Option<T>` (both always success) or `Result<T, E>`
/// with a displayable error (an `Err` is logged with the job name and tick and reported as
/// [`RunOutcome::Failed`](crate::report::RunOutcome::Failed); the scheduler keeps going).
#[diagnostic::on_unimplemented(
    message = "a scheduled job must return `()`, `Option<T>` or `Result<T, E>` with `E: Display`, not `{Self}`",
    label = "this job's output cannot be reported"
)]
pub trait JobOutput: Send + 'static {
    /// `Err` with the error's message when the run failed.
    fn into_job_result(self) -> Result<(), String>;
}

impl JobOutput for () {
    fn into_job_result(self) -> Result<(), String> {
        Ok(())
    }
}

impl<T: Send + 'static> JobOutput for Option<T> {
    fn into_job_result(self) -> Result<(), String> {
        Ok(())
    }
}

impl<T: Send + 'static, E: fmt::Display + Send + 'static> JobOutput for Result<T, E> {
    fn into_job_result(self) -> Result<(), String> {
        // `{:#}` shows anyhow's whole context chain; plain errors print as usual.
        self.map(drop).map_err(|e| format!("{e:#}"))
    }
}

/// What a run knows about itself: the job, its slot (the scheduled fire time, not "now") and
/// the instance running it. Given to jobs built with [`Job::with_context`].
#[derive(Debug, Clone)]
pub struct RunContext {
    pub(crate) job: Arc<str>,
    pub(crate) slot: DateTime<Tz>,
    pub(crate) instance: Arc<str>,
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

    /// The tick: the slot in epoch milliseconds, as claimed in Redis (`{<key>}:tick`).
    pub fn tick(&self) -> i64 {
        self.slot.timestamp_millis()
    }

    /// The instance id of the replica running it.
    pub fn instance(&self) -> &str {
        &self.instance
    }
}

pub(crate) type JobFn = Arc<dyn Fn(RunContext) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// The lock the scheduler takes around a job whose fn is not annotated.
#[derive(Debug, Clone)]
pub(crate) struct JobLock {
    pub(crate) key: String,
    /// `on_lost` included.
    pub(crate) options: LockOptions,
}

/// One scheduled job: a name, a cron expression (6 fields, with seconds), an optional IANA time
/// zone, the job itself, and the lock for jobs whose fn is not `#[distributed_lock]`-annotated.
///
/// Validated by [`SchedulerBuilder::build`](crate::scheduler::SchedulerBuilder::build), which names the
/// job in any error.
///
/// ```no_run
/// use lock_scheduler::Job;
///
/// # async fn generate_daily_report() -> anyhow::Result<()> { Ok(()) }
/// // An annotated fn (`#[distributed_lock(key = "lock:daily-report", skip_if_held)]`) brings
/// // its own lock:
/// let report = Job::new("daily-report", "0 0 2 * * *", generate_daily_report).time_zone("Europe/Berlin");
///
/// // A closure gets its lock from the job:
/// let cleanup = Job::new("cleanup", "0 */10 * * * *", || async {
///     // ... delete expired sessions ...
///     Ok::<_, std::io::Error>(())
/// })
/// .lock("lock:cleanup");
/// ```
#[must_use]
pub struct Job {
    pub(crate) name: String,
    pub(crate) cron: String,
    pub(crate) time_zone: Option<String>,
    pub(crate) func: JobFn,
    pub(crate) lock_key: Option<String>,
    pub(crate) lock_options: Option<LockOptions>,
    /// Overrides `lock_options.on_lost` when set.
    pub(crate) on_lost: Option<OnLost>,
    pub(crate) catch_up: CatchUp,
    pub(crate) max_run_time: Option<Duration>,
}

impl Job {
    /// A job running `job()` at each slot of `cron` (UTC unless [`time_zone`](Self::time_zone)
    /// is set). `job` is typically an annotated `async fn` or a closure returning a future.
    pub fn new<F, Fut>(name: impl Into<String>, cron: impl Into<String>, job: F) -> Job
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: JobOutput,
    {
        Job::from_fn(
            name.into(),
            cron.into(),
            Arc::new(move |_ctx| job().map(JobOutput::into_job_result).boxed()),
        )
    }

    /// Like [`new`](Self::new), for a job that wants to know its [`RunContext`] (slot, tick,
    /// instance).
    pub fn with_context<F, Fut>(name: impl Into<String>, cron: impl Into<String>, job: F) -> Job
    where
        F: Fn(RunContext) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: JobOutput,
    {
        Job::from_fn(
            name.into(),
            cron.into(),
            Arc::new(move |ctx| job(ctx).map(JobOutput::into_job_result).boxed()),
        )
    }

    fn from_fn(name: String, cron: String, func: JobFn) -> Job {
        Job {
            name,
            cron,
            time_zone: None,
            func,
            lock_key: None,
            lock_options: None,
            on_lost: None,
            catch_up: CatchUp::default(),
            max_run_time: None,
        }
    }

    /// Evaluate the cron expression in this IANA time zone (e.g. `"Europe/Berlin"`), following
    /// its DST changes (see [`Schedule`](crate::schedule::Schedule) for the skipped and repeated hours).
    pub fn time_zone(mut self, tz: impl Into<String>) -> Job {
        self.time_zone = Some(tz.into());
        self
    }

    /// Run the job under the distributed lock `key`, taken by the scheduler with
    /// skip-if-held semantics and claiming the tick (for fns that are not annotated with
    /// `#[distributed_lock]`; annotated fns take their own lock and claim the tick themselves).
    /// Watchdog lease unless [`lock_options`](Self::lock_options) says otherwise.
    pub fn lock(mut self, key: impl Into<String>) -> Job {
        self.lock_key = Some(key.into());
        self
    }

    /// Lease, minimum hold, wait and fencing for the lock set by [`lock`](Self::lock). A wait
    /// makes a replica wait for a held lock before skipping.
    pub fn lock_options(mut self, options: LockOptions) -> Job {
        self.lock_options = Some(options);
        self
    }

    /// What happens to a run whose lock (set by [`lock`](Self::lock)) is lost while it runs:
    /// cancelled (the default) or left to finish. Same as `LockOptions::on_lost` in
    /// [`lock_options`](Self::lock_options), which it overrides.
    pub fn on_lost(mut self, on_lost: OnLost) -> Job {
        self.on_lost = Some(on_lost);
        self
    }

    /// What to do with slots that could not run on time (default: run the latest one if it is
    /// at most a minute late).
    pub fn catch_up(mut self, catch_up: CatchUp) -> Job {
        self.catch_up = catch_up;
        self
    }

    /// Cancel a run that takes longer than `limit`: its future is dropped (which releases its
    /// lock), it is reported and recorded in the run history as
    /// [`RunOutcome::TimedOut`](crate::report::RunOutcome::TimedOut), and the next slot runs as usual.
    /// For a job with a [`lock`](Self::lock), the time counts from when its slot's batched
    /// claim took the lock; for a job whose fn takes its own lock, from the pause check, so it
    /// includes taking that lock. Default: no limit.
    /// Must not be zero.
    ///
    /// Cancellation happens at the job's next `.await`: a job that blocks its thread without
    /// awaiting cannot be cancelled.
    pub fn max_run_time(mut self, limit: Duration) -> Job {
        self.max_run_time = Some(limit);
        self
    }

    /// The job's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("name", &self.name)
            .field("cron", &self.cron)
            .field("time_zone", &self.time_zone)
            .field("lock_key", &self.lock_key)
            .field("lock_options", &self.lock_options)
            .field("on_lost", &self.on_lost)
            .field("catch_up", &self.catch_up)
            .field("max_run_time", &self.max_run_time)
            .finish_non_exhaustive()
    }
}
