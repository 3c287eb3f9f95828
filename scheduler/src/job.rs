//! [`Job`]: what runs, when, and under which lock.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use lock_core::{LockOptions, OnLost};

use crate::job_args::{StateNeed, States};
use crate::overlap::Overlap;
use crate::retry::policy::RetryPolicy;
use crate::run_context::RunContext;
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

pub(crate) type JobFn = Arc<dyn Fn(RunContext) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// A job body that takes application state: it is given the scheduler's [`States`] at each run.
pub(crate) type StatefulFn =
    Arc<dyn Fn(RunContext, &States) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// What a job runs.
#[derive(Clone)]
pub(crate) enum JobBody {
    /// Ready to run.
    Ready(JobFn),
    /// Runs once given the state it needs (see [`State`](crate::job_args::State)), which
    /// [`SchedulerBuilder::build`](crate::scheduler::SchedulerBuilder::build) checks is there.
    NeedsState { body: StatefulFn, needs: Vec<StateNeed> },
}

/// When a job fires, as declared: validated when the scheduler is built (or the job added).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Timing {
    /// A 6-field cron expression, or the text form `every 30s [offset 5s]`, in a time zone,
    /// with an offset set by [`Job::offset`] (for an interval only).
    Text { schedule: String, zone: Option<String>, offset: Option<Duration> },
    /// An interval ([`Job::every`]).
    Every { period: Duration, offset: Duration },
}

/// The lock the scheduler takes around a job whose fn is not annotated.
#[derive(Debug, Clone)]
pub(crate) struct JobLock {
    pub(crate) key: String,
    /// `on_lost` included.
    pub(crate) options: LockOptions,
}

/// One scheduled job: a name, a schedule (a cron expression with 6 fields, with seconds, in an
/// optional IANA time zone; or an interval aligned to the Unix epoch), the job itself, and the
/// lock for jobs whose fn is not `#[distributed_lock]`-annotated.
///
/// Jobs are usually declared on their function with `#[scheduled]`; build one here for jobs
/// made at run time (from a configuration, say). Validated by
/// [`SchedulerBuilder::build`](crate::scheduler::SchedulerBuilder::build) (or
/// [`SchedulerHandle::add_job`](crate::handle::SchedulerHandle::add_job)), which names the
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
    pub(crate) timing: Timing,
    /// The function that declared it (`#[scheduled]`), for messages naming it.
    pub(crate) function: Option<&'static str>,
    pub(crate) body: JobBody,
    pub(crate) lock_key: Option<String>,
    pub(crate) lock_options: Option<LockOptions>,
    /// Overrides `lock_options.on_lost` when set.
    pub(crate) on_lost: Option<OnLost>,
    pub(crate) catch_up: CatchUp,
    pub(crate) max_run_time: Option<Duration>,
    pub(crate) retry: Option<RetryPolicy>,
    pub(crate) pause_after_failures: Option<u32>,
    pub(crate) overlap: Overlap,
    pub(crate) jitter: Duration,
    pub(crate) start_at: Option<DateTime<Utc>>,
    pub(crate) end_at: Option<DateTime<Utc>>,
    pub(crate) max_runs: Option<u32>,
}

impl Job {
    /// A job running `job()` at each slot of `schedule`: a 6-field cron expression (UTC unless
    /// [`time_zone`](Self::time_zone) is set), or an interval, `every 30s` (optionally
    /// `every 30s offset 5s`), whose slots are aligned to the Unix epoch. `job` is typically an
    /// annotated `async fn` or a closure returning a future.
    pub fn new<F, Fut>(name: impl Into<String>, schedule: impl Into<String>, job: F) -> Job
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: JobOutput,
    {
        let timing = Timing::Text { schedule: schedule.into(), zone: None, offset: None };
        Job::from_body(
            name.into(),
            timing,
            JobBody::Ready(Arc::new(move |_ctx| job().map(JobOutput::into_job_result).boxed())),
        )
    }

    /// A job running `job()` every `period` (whole seconds, at least one), at slots aligned to
    /// the Unix epoch: `Job::every("heartbeat", Duration::from_secs(30), f)` fires at :00 and
    /// :30 of each minute on every replica alike; [`offset`](Self::offset) shifts them.
    pub fn every<F, Fut>(name: impl Into<String>, period: Duration, job: F) -> Job
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: JobOutput,
    {
        let timing = Timing::Every { period, offset: Duration::ZERO };
        Job::from_body(
            name.into(),
            timing,
            JobBody::Ready(Arc::new(move |_ctx| job().map(JobOutput::into_job_result).boxed())),
        )
    }

    /// Like [`new`](Self::new), for a job that wants to know its [`RunContext`] (slot, tick,
    /// instance).
    pub fn with_context<F, Fut>(name: impl Into<String>, schedule: impl Into<String>, job: F) -> Job
    where
        F: Fn(RunContext) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: JobOutput,
    {
        let timing = Timing::Text { schedule: schedule.into(), zone: None, offset: None };
        Job::from_body(
            name.into(),
            timing,
            JobBody::Ready(Arc::new(move |ctx| job(ctx).map(JobOutput::into_job_result).boxed())),
        )
    }

    pub(crate) fn from_body(name: String, timing: Timing, body: JobBody) -> Job {
        Job {
            name,
            timing,
            function: None,
            body,
            lock_key: None,
            lock_options: None,
            on_lost: None,
            catch_up: CatchUp::default(),
            max_run_time: None,
            retry: None,
            pause_after_failures: None,
            overlap: Overlap::Skip,
            jitter: Duration::ZERO,
            start_at: None,
            end_at: None,
            max_runs: None,
        }
    }

    /// Evaluate the cron expression in this IANA time zone (e.g. `"Europe/Berlin"`), following
    /// its DST changes (see [`Schedule`](crate::schedule::Schedule) for the skipped and repeated hours).
    /// An interval is aligned to the Unix epoch: a time zone set on one is an error at build.
    pub fn time_zone(mut self, tz: impl Into<String>) -> Job {
        match &mut self.timing {
            Timing::Text { zone, .. } => *zone = Some(tz.into()),
            Timing::Every { period, offset } => {
                // Kept, and refused at build: an interval is aligned to the epoch, not a zone.
                let schedule = format!("every {}", lock_schedule::format_duration(*period));
                self.timing = Timing::Text { schedule, zone: Some(tz.into()), offset: Some(*offset) };
            }
        }
        self
    }

    /// Shift an interval's slots ([`every`](Self::every), or `every ...` given to
    /// [`new`](Self::new)) by `offset` (whole seconds, less than the period) from each multiple
    /// of the period: `every 1h` with an offset of 5 minutes fires at five past each hour.
    /// On a cron schedule it is an error at build.
    pub fn offset(mut self, by: Duration) -> Job {
        match &mut self.timing {
            Timing::Every { offset, .. } => *offset = by,
            // Checked (and refused for a cron expression) at build.
            Timing::Text { offset, .. } => *offset = Some(by),
        }
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

    /// Retry a failed run (an error, a panic, a lost lock, a timeout) as `policy` says: each
    /// attempt runs at most once across the replicas of the job's group, on whichever live
    /// replica takes it when it is due (the pending retry is kept in Redis). Every attempt is an
    /// entry in the run history; the body sees its number in [`RunContext::attempt`]. Default:
    /// no retries. Manual ("run now") runs are not retried.
    ///
    /// Cost in Redis: nothing while runs succeed; per failed attempt with attempts left, one
    /// round trip to add the retry; per due retry, one round trip to take it (shared by every
    /// retry due at the same time), then the run's own claim and release. The retry is announced
    /// on the group's channel ([`group_channel`](crate::schema::group_channel)) as it is added,
    /// so every replica knows when it is due and looks then: it starts on time even if the
    /// replica that scheduled it died (or within [`RUN_POLL`](crate::schema::RUN_POLL) if that
    /// message was lost).
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_scheduler::{Job, RetryPolicy};
    ///
    /// # async fn import() -> Result<(), std::io::Error> { Ok(()) }
    /// let job = Job::new("import", "0 */15 * * * *", import)
    ///     .lock("lock:import")
    ///     .retry(RetryPolicy::attempts(3).base_delay(Duration::from_secs(30)));
    /// ```
    pub fn retry(mut self, policy: RetryPolicy) -> Job {
        self.retry = Some(policy);
        self
    }

    /// Pause the job on every replica after `failures` slots in a row failed for good (their
    /// last attempt, after [`retry`](Self::retry), failed or timed out). *In a row* is in slot
    /// order: a later slot's success that ended before an earlier slot's retries did breaks the
    /// streak only after that earlier slot, so consecutive failed slots always count together.
    /// A slot whose body did not start (its claim or its `max_runs` count failed) does not
    /// count. The pause record says why (`lockctl jobs --json`, `lockctl history`, the console
    /// show it); resuming the job ([`control::resume`](crate::control::pause::resume),
    /// `lockctl resume`) clears the outcomes. Default: never. Must be at least 1.
    ///
    /// Cost in Redis: per successful run, three commands in the pipeline that writes its
    /// history entry (the slot's success added to the job's outcomes by slot, their expiry, a
    /// trim; no round trip of their own); per slot failed for good, one round trip (a script
    /// that records it, counts the failed slots around it and pauses the job at the limit).
    pub fn pause_after_failures(mut self, failures: u32) -> Job {
        self.pause_after_failures = Some(failures);
        self
    }

    /// What a slot does when it comes while the job's previous run is still going on (here or
    /// on another replica): skipped (the default), run alongside it, or buffered until it ends.
    /// See [`Overlap`] for each policy's cost in Redis round trips. A policy other than
    /// [`Overlap::Skip`] needs the job's lock set with [`lock`](Self::lock).
    ///
    /// ```
    /// use lock_scheduler::{Job, Overlap};
    ///
    /// # async fn export() {}
    /// let job = Job::new("export", "0 * * * * *", export).lock("lock:export").overlap(Overlap::BufferOne);
    /// ```
    pub fn overlap(mut self, overlap: Overlap) -> Job {
        self.overlap = overlap;
        self
    }

    /// Delay each slot's start by up to `window`: the delay is a pure function of the job's
    /// name and the slot, so every replica computes the same one and fires the slot at the same
    /// moment (the preferred replica still claims first). Jobs on the same schedule then do not
    /// all hit their dependencies in the same second. The slot (`RunContext::slot`, the
    /// history's tick) stays the scheduled time; [`RunReport::jitter`](crate::report::RunReport::jitter)
    /// says how long it was delayed, and the start lag metric leaves it out. Default: none. At
    /// most a day; a window longer than the period makes slots overlap (see [`overlap`](Self::overlap)).
    ///
    /// No Redis cost: nothing is exchanged to agree on the delay.
    pub fn jitter(mut self, window: Duration) -> Job {
        self.jitter = window;
        self
    }

    /// Run no slot before `start` (slots at `start` run): until then the job is scheduled but
    /// idle, and no slot before it is reported missed. Default: from the scheduler's start.
    /// No Redis cost.
    pub fn start_at(mut self, start: DateTime<Utc>) -> Job {
        self.start_at = Some(start);
        self
    }

    /// Run no slot after `end` (a slot at `end` runs): the job then stops firing, on every
    /// replica alike (each computes it from the schedule). Must be after
    /// [`start_at`](Self::start_at) if both are set. Default: never. No Redis cost.
    pub fn end_at(mut self, end: DateTime<Utc>) -> Job {
        self.end_at = Some(end);
        self
    }

    /// Stop firing the job after `runs` runs, counted across its replicas: the run that claims
    /// each slot counts it in Redis, inside its lock, before its body starts, so each slot
    /// counts once and no more than `runs` bodies ever start. Retries of a counted slot, manual
    /// ("run now") runs and backfilled slots are not counted; a slot whose count failed (Redis
    /// answered an error) does not run and is not retried, since its retry would run uncounted.
    /// A replica that counts past the
    /// limit does not run the slot (reported and recorded as `skipped: max runs`, once per
    /// replica) and, like the one that ran the last run, logs it once and fires the job no more;
    /// `lockctl show` shows the count. The count expires
    /// [`RUN_COUNT_TTL`](crate::schema::RUN_COUNT_TTL) after the last run it counted: a job
    /// started again after that runs again. Must be at least 1; default: no limit.
    ///
    /// Cost in Redis: one round trip per run (`INCR` and `PEXPIRE`, pipelined).
    pub fn max_runs(mut self, runs: u32) -> Job {
        self.max_runs = Some(runs);
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
            .field("timing", &self.timing)
            .field("function", &self.function)
            .field("lock_key", &self.lock_key)
            .field("lock_options", &self.lock_options)
            .field("on_lost", &self.on_lost)
            .field("catch_up", &self.catch_up)
            .field("max_run_time", &self.max_run_time)
            .field("retry", &self.retry)
            .field("pause_after_failures", &self.pause_after_failures)
            .field("overlap", &self.overlap)
            .field("jitter", &self.jitter)
            .field("start_at", &self.start_at)
            .field("end_at", &self.end_at)
            .field("max_runs", &self.max_runs)
            .finish_non_exhaustive()
    }
}
