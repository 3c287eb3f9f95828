//! [`Scheduler`]: the per-replica driver. Builds and validates jobs, wakes on
//! tokio-cron-scheduler's heartbeat, fires each slot on time under `with_tick`, and shuts down
//! gracefully.

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use lock_core::tick::{self, TickOutcome};
use lock_core::{LockClient, LockError};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_cron_scheduler::{Job as TimerJob, JobScheduler};
use tracing::Instrument;

use crate::clock::{Clock, SystemClock};
use crate::job::{Job, JobFn, JobLock, RunContext};
use crate::report::{RunOutcome, RunReport, ShutdownReport};
use crate::schedule::{CatchUp, Schedule, ScheduleError, truncate};
use crate::signal::{ShutdownSignal, Signals};

/// How long [`SchedulerHandle::shutdown`] waits for running jobs by default: under
/// Kubernetes' default 30 s termination grace period, so that cancelling the rest and releasing
/// their locks still happens before the pod is killed.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(25);

/// How long shutdown waits for the releases of cancelled runs' locks.
const RELEASE_FLUSH: Duration = Duration::from_secs(3);

/// Stands in for a grace period too long to add to an `Instant`.
const FOREVER: Duration = Duration::from_secs(60 * 60 * 24 * 365 * 30);

/// A slot this close is awaited with a precise timer; farther ones wait for the heartbeat.
/// More than the heartbeat's worst gap (1 s period + 0.5 s polling).
const LOOKAHEAD: Duration = Duration::from_secs(2);

/// Longest wait between re-evaluations should the heartbeat ever stop.
const FALLBACK: Duration = Duration::from_secs(10);

/// The heartbeat: tokio-cron-scheduler fires this every second (in UTC, where no DST exists).
const HEARTBEAT_CRON: &str = "* * * * * *";

/// Reports buffered per subscriber before the slowest one starts missing some.
const REPORT_CAPACITY: usize = 1024;

/// A configuration or start-up error. Each names the job it is about.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchedulerError {
    /// The job's cron expression or time zone is invalid.
    #[error("job `{job}`: {source}")]
    Schedule {
        /// The job's name.
        job: String,
        /// What is wrong with the schedule.
        #[source]
        source: ScheduleError,
    },
    /// The job is misconfigured (name, lock key or lock options).
    #[error("job `{job}`: {reason}")]
    InvalidJob {
        /// The job's name.
        job: String,
        /// What is wrong.
        reason: String,
    },
    /// Two jobs have the same name.
    #[error("two jobs are named `{job}`: job names must be unique (they identify runs in logs and reports)")]
    DuplicateJob {
        /// The repeated name.
        job: String,
    },
    /// No lock client was given and none is installed as the default.
    #[error(
        "no lock client: pass one with `SchedulerBuilder::client`, or install a default with \
         `LockClient::install_default()` before building the scheduler"
    )]
    NoClient,
    /// tokio-cron-scheduler (the heartbeat) could not be created or started.
    #[error("the cron timer (tokio-cron-scheduler) failed while {action}: {message}")]
    Timer {
        /// What was being done.
        action: &'static str,
        /// Its error.
        message: String,
    },
    /// The SIGTERM / Ctrl-C listeners could not be installed.
    #[error("could not listen for shutdown signals: {0}")]
    Signal(#[source] std::io::Error),
}

/// Builds a [`Scheduler`]; start from [`Scheduler::builder`].
#[must_use]
pub struct SchedulerBuilder {
    client: Option<LockClient>,
    jobs: Vec<Job>,
    grace: Duration,
    clock: Arc<dyn Clock>,
}

impl SchedulerBuilder {
    /// The lock client: its instance id identifies this replica in lock tokens and logs, and it
    /// takes the locks configured with [`Job::lock`]. Default: the installed default client
    /// (`LockClient::install_default`).
    pub fn client(mut self, client: LockClient) -> Self {
        self.client = Some(client);
        self
    }

    /// Adds a job.
    pub fn job(mut self, job: Job) -> Self {
        self.jobs.push(job);
        self
    }

    /// How long a shutdown waits for running jobs before cancelling them (default 30 s).
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The wall clock slots are computed and awaited on (default [`SystemClock`]); tests use an
    /// [`OffsetClock`](crate::OffsetClock) to simulate a replica with a skewed clock.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Validates every job (cron expression, time zone, name, lock) and builds the scheduler.
    /// Errors name the offending job.
    pub fn build(self) -> Result<Scheduler, SchedulerError> {
        let client = match self.client {
            Some(client) => client,
            None => LockClient::default_client().map_err(|_| SchedulerError::NoClient)?,
        };
        let mut names = HashSet::new();
        let mut lock_keys = HashSet::new();
        let mut jobs = Vec::with_capacity(self.jobs.len());
        for job in self.jobs {
            let name = job.name.trim();
            if name.is_empty() || name.chars().any(char::is_control) {
                return Err(SchedulerError::InvalidJob {
                    job: job.name.clone(),
                    reason: "the job name is empty or contains control characters".into(),
                });
            }
            if !names.insert(job.name.clone()) {
                return Err(SchedulerError::DuplicateJob { job: job.name });
            }
            let schedule = Schedule::new(&job.cron, job.time_zone.as_deref())
                .map_err(|source| SchedulerError::Schedule { job: job.name.clone(), source })?;
            let lock = validate_lock(&job)?;
            // The claimed tick is stored per lock key: two jobs on one key would take each
            // other's ticks and skip their own slots.
            if let Some(lock) = &lock
                && !lock_keys.insert(lock.key.clone())
            {
                return Err(SchedulerError::InvalidJob {
                    job: job.name.clone(),
                    reason: format!(
                        "lock key {:?} is already used by another job: give every job its own key",
                        lock.key
                    ),
                });
            }
            jobs.push(Arc::new(JobEntry {
                name: job.name.into(),
                schedule,
                func: job.func,
                lock,
                catch_up: job.catch_up,
                warned_unlocked: AtomicBool::new(false),
            }));
        }
        let (reports, _) = broadcast::channel(REPORT_CAPACITY);
        Ok(Scheduler {
            shared: Arc::new(Shared {
                instance: client.instance_id().into(),
                client,
                clock: self.clock,
                grace: self.grace,
                reports,
            }),
            jobs,
        })
    }
}

fn validate_lock(job: &Job) -> Result<Option<JobLock>, SchedulerError> {
    let invalid = |reason: String| SchedulerError::InvalidJob { job: job.name.clone(), reason };
    let Some(key) = &job.lock_key else {
        if job.lock_options.is_some() {
            return Err(invalid("lock options are set but no lock key: call `.lock(key)` as well".into()));
        }
        return Ok(None);
    };
    lock_core::validate_key(key).map_err(|e| invalid(e.to_string()))?;
    let mut options = job.lock_options.clone().unwrap_or_default();
    if let Some(on_lost) = job.on_lost {
        options = options.on_lost(on_lost);
    }
    options.validate().map_err(|e| invalid(e.to_string()))?;
    Ok(Some(JobLock { key: key.clone(), options }))
}

/// Everything the runners and runs of one scheduler share.
struct Shared {
    instance: Arc<str>,
    client: LockClient,
    clock: Arc<dyn Clock>,
    grace: Duration,
    reports: broadcast::Sender<RunReport>,
}

impl Shared {
    fn report(
        &self,
        job: &JobEntry,
        slot: DateTime<Utc>,
        fired_at: DateTime<Utc>,
        outcome: RunOutcome,
        duration: Duration,
    ) {
        // No subscriber is fine.
        let _ = self.reports.send(RunReport {
            job: job.name.to_string(),
            slot,
            tick: slot.timestamp_millis(),
            instance: self.instance.to_string(),
            outcome,
            fired_at,
            lateness: (fired_at - slot).to_std().unwrap_or_default(),
            duration,
        });
    }
}

/// A validated job.
struct JobEntry {
    name: Arc<str>,
    schedule: Schedule,
    func: JobFn,
    lock: Option<JobLock>,
    catch_up: CatchUp,
    warned_unlocked: AtomicBool,
}

/// A cron scheduler whose jobs run once per tick across all replicas running the same jobs.
///
/// Each replica builds the same `Scheduler`; each slot of each job is claimed in Redis together
/// with the job's lock, so exactly one replica runs it (see the crate docs).
pub struct Scheduler {
    shared: Arc<Shared>,
    jobs: Vec<Arc<JobEntry>>,
}

impl Scheduler {
    /// A builder: no jobs, the default lock client, a 25 s shutdown grace, the system clock.
    pub fn builder() -> SchedulerBuilder {
        SchedulerBuilder {
            client: None,
            jobs: Vec::new(),
            grace: DEFAULT_SHUTDOWN_GRACE,
            clock: Arc::new(SystemClock),
        }
    }

    /// This replica's instance id (the lock client's).
    pub fn instance_id(&self) -> &str {
        &self.shared.instance
    }

    /// The names of the jobs, in the order they were added.
    pub fn job_names(&self) -> impl Iterator<Item = &str> {
        self.jobs.iter().map(|job| &*job.name)
    }

    /// The schedule of the job named `job`.
    pub fn schedule(&self, job: &str) -> Option<&Schedule> {
        self.jobs.iter().find(|j| &*j.name == job).map(|j| &j.schedule)
    }

    /// A receiver of every [`RunReport`] from now on (subscribe before [`start`](Self::start)
    /// to see them all).
    pub fn subscribe(&self) -> broadcast::Receiver<RunReport> {
        self.shared.reports.subscribe()
    }

    /// Starts firing: creates the tokio-cron-scheduler heartbeat and one driver task per job.
    /// Slots due before this call are not run. Must be called within a tokio runtime.
    pub async fn start(self) -> Result<SchedulerHandle, SchedulerError> {
        let (beat_tx, beat_rx) = watch::channel(0u64);
        let span = tracing::info_span!(parent: None, "scheduler", instance = %self.shared.instance);
        let timer = start_heartbeat(beat_tx).instrument(span).await?;
        let (state_tx, state_rx) = watch::channel(State::Running);
        // Slots up to now are not ours, whenever the drivers first get to run.
        let started = truncate(self.shared.clock.now());
        let runners = self
            .jobs
            .iter()
            .map(|job| {
                let span = tracing::info_span!(parent: None, "scheduler", instance = %self.shared.instance, job = %job.name);
                let driver = drive(self.shared.clone(), job.clone(), started, beat_rx.clone(), state_rx.clone());
                tokio::spawn(driver.instrument(span))
            })
            .collect();
        tracing::info!(instance = %self.shared.instance, jobs = self.jobs.len(), "scheduler started");
        Ok(SchedulerHandle { shared: self.shared, state: state_tx, runners, timer: Some(timer) })
    }

    /// Starts, runs until `stop` resolves, then shuts down gracefully.
    pub async fn run_until<F: Future>(self, stop: F) -> Result<ShutdownReport, SchedulerError> {
        let handle = self.start().await?;
        stop.await;
        Ok(handle.shutdown().await)
    }

    /// Starts, runs until SIGTERM or Ctrl-C, then shuts down gracefully: stops firing, waits
    /// for running jobs up to the grace period, cancels the rest, and releases their locks.
    pub async fn run_until_signal(self) -> Result<ShutdownReport, SchedulerError> {
        // Listen before starting, so a signal during start-up is not lost.
        let mut signals = Signals::install().map_err(SchedulerError::Signal)?;
        let instance = self.shared.instance.clone();
        self.run_until(async move {
            let signal = signals.recv().await;
            let name = match signal {
                ShutdownSignal::Terminate => "SIGTERM",
                ShutdownSignal::Interrupt => "Ctrl-C",
            };
            tracing::info!(instance = %instance, "{name} received, shutting down");
        })
        .await
    }
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("instance", &self.shared.instance)
            .field("jobs", &self.jobs.iter().map(|j| (&*j.name, &j.schedule)).collect::<Vec<_>>())
            .field("grace", &self.shared.grace)
            .finish_non_exhaustive()
    }
}

async fn start_heartbeat(beat: watch::Sender<u64>) -> Result<JobScheduler, SchedulerError> {
    let timer_error = |action| {
        move |e: tokio_cron_scheduler::JobSchedulerError| SchedulerError::Timer {
            action,
            message: format!("{e:?}"),
        }
    };
    let timer = JobScheduler::new().await.map_err(timer_error("creating the scheduler"))?;
    let job = TimerJob::new_async(HEARTBEAT_CRON, move |_id, _timer| {
        beat.send_modify(|n| *n = n.wrapping_add(1));
        tracing::trace!(beat = *beat.borrow(), "cron heartbeat");
        Box::pin(async {})
    })
    .map_err(timer_error("creating the heartbeat job"))?;
    timer.add(job).await.map_err(timer_error("adding the heartbeat job"))?;
    timer.start().await.map_err(timer_error("starting"))?;
    Ok(timer)
}

/// What the driver tasks are told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Running,
    /// Stop firing; wait for running jobs until the deadline, then cancel them.
    Stopping(Instant),
}

/// A running scheduler. [`shutdown`](Self::shutdown) stops it gracefully; dropping it stops
/// firing without waiting (running jobs finish on their own).
pub struct SchedulerHandle {
    shared: Arc<Shared>,
    state: watch::Sender<State>,
    runners: Vec<JoinHandle<RunnerExit>>,
    timer: Option<JobScheduler>,
}

impl SchedulerHandle {
    /// This replica's instance id.
    pub fn instance_id(&self) -> &str {
        &self.shared.instance
    }

    /// A receiver of every [`RunReport`] from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<RunReport> {
        self.shared.reports.subscribe()
    }

    /// Graceful shutdown: stop firing at once, wait for running jobs up to the grace period,
    /// cancel those still running then (their locks are released as the cancelled futures are
    /// dropped), and return what happened. Jobs that finish release their locks themselves.
    pub async fn shutdown(mut self) -> ShutdownReport {
        let now = Instant::now();
        // A grace too long to represent ("wait forever") waits for decades.
        let deadline = now.checked_add(self.shared.grace).unwrap_or_else(|| now + FOREVER);
        self.state.send_replace(State::Stopping(deadline));
        if let Some(mut timer) = self.timer.take()
            && let Err(e) = timer.shutdown().await
        {
            tracing::warn!(instance = %self.shared.instance, "stopping the cron timer failed: {e:?}");
        }
        let mut report = ShutdownReport::default();
        for runner in std::mem::take(&mut self.runners) {
            match runner.await {
                Ok(RunnerExit { job, waited: Some(true) }) => report.finished.push(job.to_string()),
                Ok(RunnerExit { job, waited: Some(false) }) => report.cancelled.push(job.to_string()),
                Ok(RunnerExit { waited: None, .. }) => {}
                Err(e) => tracing::error!(instance = %self.shared.instance, "a job driver task failed: {e}"),
            }
        }
        if !report.cancelled.is_empty() {
            // Cancelled runs release their locks in the background; let that finish before
            // the caller drops the runtime, or the locks stay taken until their leases end.
            let mut clients = vec![self.shared.client.clone()];
            clients.extend(LockClient::default_client().ok());
            for client in clients {
                if !client.flush_releases(RELEASE_FLUSH).await {
                    tracing::warn!(instance = %self.shared.instance, "some locks of cancelled jobs were not released in time; they expire at the end of their leases");
                }
            }
        }
        tracing::info!(
            instance = %self.shared.instance,
            finished = report.finished.len(),
            cancelled = report.cancelled.len(),
            "scheduler stopped"
        );
        report
    }
}

impl Drop for SchedulerHandle {
    fn drop(&mut self) {
        // After `shutdown` this changes nothing; otherwise drivers stop firing and leave
        // running jobs alone (the dropped sender tells them so).
        if let Some(mut timer) = self.timer.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                let _ = timer.shutdown().await;
            });
        }
    }
}

impl fmt::Debug for SchedulerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchedulerHandle")
            .field("instance", &self.shared.instance)
            .field("jobs", &self.runners.len())
            .finish_non_exhaustive()
    }
}

/// How a driver ended: `waited` is `Some(true)` if it waited for a run that finished,
/// `Some(false)` if it cancelled one, `None` if nothing was running.
struct RunnerExit {
    job: Arc<str>,
    waited: Option<bool>,
}

/// The run in flight for a job on this replica.
struct Running {
    handle: JoinHandle<()>,
    slot: DateTime<Utc>,
    fired_at: DateTime<Utc>,
    span: tracing::Span,
}

/// One job's driver: computes its slots on the scheduler's clock in the job's time zone,
/// wakes on the heartbeat (or a precise timer for the last stretch), fires each slot once.
async fn drive(
    shared: Arc<Shared>,
    job: Arc<JobEntry>,
    started: DateTime<Utc>,
    mut beat: watch::Receiver<u64>,
    mut state: watch::Receiver<State>,
) -> RunnerExit {
    let clock = shared.clock.clone();
    // Every slot up to `floor` has been dealt with; slots before the start are not ours.
    let mut floor = started;
    let mut current: Option<Running> = None;
    let mut beat_alive = true;
    let stop = loop {
        if let State::Stopping(deadline) = *state.borrow() {
            break Some(deadline);
        }
        let now = clock.now();
        if let Some(due) = job.schedule.due(floor, now, job.catch_up) {
            floor = due.floor;
            if let Some(last_missed) = due.last_missed
                && due.missed > 0
            {
                tracing::warn!(
                    missed = due.missed,
                    last_missed = %last_missed.with_timezone(&job.schedule.time_zone()).to_rfc3339(),
                    "{} slot(s) could not run on time and were not run (catch-up policy: {:?})",
                    due.missed,
                    job.catch_up
                );
                shared.report(&job, last_missed, now, RunOutcome::Missed(due.missed), Duration::ZERO);
            }
            if let Some(slot) = due.run {
                fire(&shared, &job, &mut current, slot, now);
            }
        }
        let Some(next) = job.schedule.next_after(floor.max(now)) else {
            tracing::warn!("the schedule has no further fire times; the job will not run again");
            break wait_for_stop(&mut state).await;
        };
        let wait = (next.with_timezone(&Utc) - clock.now()).to_std().unwrap_or_default();
        tracing::trace!(%floor, %now, %next, ?wait, "next slot");
        if wait <= LOOKAHEAD {
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                changed = state.changed() => if changed.is_err() { break None },
            }
        } else {
            // Wait for the heartbeat, or until the slot is close enough for the precise timer.
            let fallback = (wait - LOOKAHEAD).min(FALLBACK);
            tokio::select! {
                beat = beat.changed(), if beat_alive => if beat.is_err() {
                    tracing::warn!("the cron heartbeat stopped; falling back to timers");
                    beat_alive = false;
                },
                () = tokio::time::sleep(fallback) => {}
                changed = state.changed() => if changed.is_err() { break None },
            }
        }
    };
    let mut exit = RunnerExit { job: job.name.clone(), waited: None };
    let (Some(deadline), Some(mut run)) = (stop, current) else { return exit };
    if run.handle.is_finished() {
        return exit;
    }
    tracing::info!(
        tick = %run.slot.to_rfc3339(),
        "shutting down: waiting up to {:?} for the running job",
        deadline.saturating_duration_since(Instant::now())
    );
    if tokio::time::timeout_at(deadline, &mut run.handle).await.is_ok() {
        exit.waited = Some(true);
        return exit;
    }
    // Cancel: dropping the run's future drops its lock guard, which releases the lock.
    run.handle.abort();
    let _ = (&mut run.handle).await;
    exit.waited = Some(false);
    run.span.record("outcome", "cancelled");
    run.span.in_scope(|| {
        tracing::warn!(
            job = %job.name,
            tick = %run.slot.to_rfc3339(),
            outcome = "cancelled",
            "the job was still running at the end of the shutdown grace period; cancelled it and released its lock"
        );
    });
    shared.report(&job, run.slot, run.fired_at, RunOutcome::Cancelled, Duration::ZERO);
    exit
}

async fn wait_for_stop(state: &mut watch::Receiver<State>) -> Option<Instant> {
    loop {
        if let State::Stopping(deadline) = *state.borrow_and_update() {
            return Some(deadline);
        }
        if state.changed().await.is_err() {
            return None;
        }
    }
}

/// Starts the run of `slot`, unless this replica's previous run of the job is still going.
fn fire(
    shared: &Arc<Shared>,
    job: &Arc<JobEntry>,
    current: &mut Option<Running>,
    slot: DateTime<Utc>,
    fired_at: DateTime<Utc>,
) {
    let tz = job.schedule.time_zone();
    if let Some(running) = current.as_ref()
        && !running.handle.is_finished()
    {
        tracing::info!(
            tick = %slot.with_timezone(&tz).to_rfc3339(),
            running_tick = %running.slot.with_timezone(&tz).to_rfc3339(),
            outcome = "skipped: still running",
            "the previous run is still running on this instance, skipping this tick"
        );
        shared.report(job, slot, fired_at, RunOutcome::SkippedStillRunning, Duration::ZERO);
        return;
    }
    let local = slot.with_timezone(&tz);
    let span = tracing::info_span!(
        parent: None,
        "job_run",
        job = %job.name,
        tick = %local.to_rfc3339(),
        instance = %shared.instance,
        outcome = tracing::field::Empty,
        duration_ms = tracing::field::Empty,
    );
    let ctx = RunContext { job: job.name.clone(), slot: local, instance: shared.instance.clone() };
    let handle = tokio::spawn(run(shared.clone(), job.clone(), ctx, fired_at).instrument(span.clone()));
    *current = Some(Running { handle, slot, fired_at, span });
}

/// Why a run's body did not succeed.
enum Failure {
    Job(String),
    Lock(LockError),
}

impl From<LockError> for Failure {
    fn from(e: LockError) -> Self {
        Failure::Lock(e)
    }
}

/// One run: the job's future inside `with_tick(slot)` (so the outermost lock claims the tick),
/// wrapped in the job's configured lock if it has one; panics caught; outcome logged and
/// reported.
async fn run(shared: Arc<Shared>, job: Arc<JobEntry>, ctx: RunContext, fired_at: DateTime<Utc>) {
    let started = Instant::now();
    let slot = ctx.slot();
    let tick = ctx.tick();
    let func = job.func.clone();
    // The job's closure is called inside the lock, at the body's first poll.
    let body = async move { func(ctx).await.map_err(Failure::Job) };
    let lock = job.lock.clone();
    let client = shared.client.clone();
    // Boxed: the nested lock and job futures are otherwise deep enough to overflow rustc's
    // query depth limit in a clean (non-incremental) build. One allocation per run.
    let locked: std::pin::Pin<Box<dyn Future<Output = _> + Send>> = Box::pin(async move {
        match lock {
            // A held lock or a claimed tick is reported through the tick scope.
            Some(lock) => {
                client.with_lock(&lock.key, lock.options, body).await.unwrap_or_else(|e| Err(e.into()))
            }
            None => body.await,
        }
    });
    let (result, lock_outcome) = tick::scope(tick, AssertUnwindSafe(locked).catch_unwind()).await;
    let outcome = match (result, lock_outcome) {
        (Err(panic), _) => RunOutcome::Failed(format!("panicked: {}", panic_message(&*panic))),
        (Ok(_), Some(TickOutcome::Held)) => RunOutcome::SkippedHeld,
        (Ok(_), Some(TickOutcome::Claimed { .. })) => RunOutcome::SkippedTickDone,
        (Ok(_), Some(TickOutcome::LockFailed(e))) => {
            RunOutcome::Failed(format!("could not take the lock: {e}"))
        }
        (Ok(Err(Failure::Lock(e))), _) => RunOutcome::Failed(format!("lock error: {e}")),
        (Ok(_), Some(TickOutcome::Lost(_))) => {
            RunOutcome::Failed("the lock was lost while the job ran; it was cancelled".into())
        }
        (Ok(Err(Failure::Job(e))), _) => RunOutcome::Failed(e),
        (Ok(Ok(())), lock_outcome) => {
            if lock_outcome.is_none() && !job.warned_unlocked.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "the job took no distributed lock, so it runs on every replica: annotate its fn with \
                     #[distributed_lock(key = \"...\", skip_if_held)] or configure `Job::lock`"
                );
            }
            RunOutcome::Ran
        }
    };
    let duration = started.elapsed();
    let span = tracing::Span::current();
    span.record("outcome", outcome.label());
    span.record("duration_ms", duration.as_millis() as u64);
    let duration_ms = duration.as_millis() as u64;
    let tick_str = ctx_tick_string(&job, slot);
    match &outcome {
        RunOutcome::Ran => {
            tracing::info!(job = %job.name, tick = %tick_str, outcome = "ran", duration_ms, "job ran");
        }
        RunOutcome::SkippedHeld => tracing::info!(
            job = %job.name,
            tick = %tick_str,
            outcome = "skipped: held",
            duration_ms,
            "another instance holds the lock, skipping"
        ),
        RunOutcome::SkippedTickDone => tracing::info!(
            job = %job.name,
            tick = %tick_str,
            outcome = "skipped: tick done",
            duration_ms,
            "this tick already ran on another instance, skipping"
        ),
        other => tracing::error!(
            job = %job.name,
            tick = %tick_str,
            outcome = "failed",
            duration_ms,
            error = %other,
            "job failed; it stays scheduled"
        ),
    }
    shared.report(&job, slot, fired_at, outcome, duration);
}

fn ctx_tick_string(job: &JobEntry, slot: DateTime<Utc>) -> String {
    slot.with_timezone(&job.schedule.time_zone()).to_rfc3339()
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_owned()
    }
}
