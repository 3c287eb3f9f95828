//! [`Scheduler`]: builds and validates jobs, starts the scheduler's one [timer](crate::timer)
//! and its [group membership](crate::members), and hands back a [`SchedulerHandle`].

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use lock_core::LockClient;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;

use crate::clock::{Clock, SystemClock};
use crate::control;
use crate::handle::SchedulerHandle;
use crate::job::{Job, JobFn, JobLock};
use crate::job_metrics::JobMetrics;
use crate::members::{self, Members};
use crate::report::{RunOutcome, RunReport, ShutdownReport};
use crate::schedule::{CatchUp, Schedule, ScheduleError, truncate};
use crate::signal::ShutdownSignals;
use crate::timer;

/// How long a replica that is not the preferred one for a job-tick waits before claiming it
/// itself, by default (see [`SchedulerBuilder::claim_grace`]).
pub const DEFAULT_CLAIM_GRACE: Duration = Duration::from_millis(500);

/// The scheduler group replicas join unless told otherwise (see [`SchedulerBuilder::group`]).
pub const DEFAULT_GROUP: &str = "default";

/// How long [`SchedulerHandle::shutdown`] waits for running jobs by default: under
/// Kubernetes' default 30 s termination grace period, so that cancelling the rest and releasing
/// their locks still happens before the pod is killed.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(25);

/// Reports buffered per subscriber before the slowest one starts missing some.
const REPORT_CAPACITY: usize = 1024;

/// A configuration or start-up error. Each names the job it is about.
///
/// Like every error of this crate, its message says what failed at its own level and leaves
/// the cause to [`source`](std::error::Error::source): print the whole chain, e.g. with
/// anyhow's `{:#}` (`job `report`: invalid schedule: invalid cron expression `0 61 2 * * *`:
/// ...`), and each cause appears once.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchedulerError {
    /// The job's cron expression or time zone is invalid.
    #[error("job `{job}`: invalid schedule")]
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
    /// The SIGTERM / Ctrl-C listeners could not be installed.
    #[error("could not listen for shutdown signals (SIGTERM, Ctrl-C)")]
    Signal(#[source] std::io::Error),
    /// A scheduler setting is invalid.
    #[error("invalid scheduler configuration: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// The scheduler is shutting down or stopped: jobs can no longer be added.
    #[error("the scheduler is stopped: job `{job}` was not added")]
    Stopped {
        /// The job that was not added.
        job: String,
    },
}

/// Builds a [`Scheduler`]; start from [`Scheduler::builder`].
#[must_use]
pub struct SchedulerBuilder {
    client: Option<LockClient>,
    jobs: Vec<Job>,
    grace: Duration,
    clock: Arc<dyn Clock>,
    group: String,
    claim_grace: Duration,
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

    /// How long a shutdown waits for running jobs before cancelling them (default
    /// [`DEFAULT_SHUTDOWN_GRACE`], 25 s).
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

    /// The group of replicas this scheduler belongs to (default [`DEFAULT_GROUP`]): runs are
    /// spread over the live replicas of the group. Replicas running the same jobs must use
    /// the same group; different applications sharing a Redis should use different ones.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = group.into();
        self
    }

    /// How long a replica that is not the preferred one for a job-tick waits before trying to
    /// claim the tick itself (default [`DEFAULT_CLAIM_GRACE`], 500 ms).
    ///
    /// Each job-tick has one preferred replica among the live ones of the group (rendezvous
    /// hashing of the job, the tick and the instance ids), which claims it at once; so runs
    /// spread evenly over the replicas. The others claim it after this grace, so a preferred
    /// replica that is dead (until its membership lapses, at most 10 s), stalled or slow
    /// delays the run by the grace, never loses it. Exactly-once never depends on it: the
    /// claim is atomic in Redis. Zero makes every replica claim at once (the fastest clock
    /// then wins most runs).
    pub fn claim_grace(mut self, grace: Duration) -> Self {
        self.claim_grace = grace;
        self
    }

    /// Validates every job (cron expression, time zone, name, lock) and builds the scheduler.
    /// Errors name the offending job.
    pub fn build(self) -> Result<Scheduler, SchedulerError> {
        let client = match self.client {
            Some(client) => client,
            None => LockClient::default_client().map_err(|_| SchedulerError::NoClient)?,
        };
        let group = self.group.trim();
        if group.is_empty() || group.chars().any(char::is_control) || group.len() > 256 {
            return Err(SchedulerError::InvalidConfig {
                reason: format!(
                    "group name {:?}: it must be 1 to 256 bytes without control characters",
                    self.group
                ),
            });
        }
        let mut jobs: Vec<Arc<JobEntry>> = Vec::with_capacity(self.jobs.len());
        let mut names = HashSet::new();
        let mut lock_keys = HashSet::new();
        for job in self.jobs {
            let entry = validate(job, &names, &lock_keys)?;
            names.insert(entry.name.clone());
            if let Some(lock) = &entry.lock {
                lock_keys.insert(lock.key.clone());
            }
            jobs.push(Arc::new(entry));
        }
        let (reports, _) = broadcast::channel(REPORT_CAPACITY);
        let instance: Arc<str> = client.instance_id().into();
        Ok(Scheduler {
            shared: Arc::new(Shared {
                members: Arc::new(Members::new(&self.group, instance.clone())),
                instance,
                client,
                clock: self.clock,
                grace: self.grace,
                claim_grace: self.claim_grace,
                registry: Mutex::new(Vec::new()),
                recorder: control::Recorder::new(),
                resync: std::sync::OnceLock::new(),
                reports,
            }),
            jobs,
        })
    }
}

/// Validates `job` against the names and lock keys already taken.
pub(crate) fn validate(
    job: Job,
    names: &HashSet<Arc<str>>,
    lock_keys: &HashSet<String>,
) -> Result<JobEntry, SchedulerError> {
    let name = job.name.trim();
    if name.is_empty() || name.chars().any(char::is_control) {
        return Err(SchedulerError::InvalidJob {
            job: job.name.clone(),
            reason: "the job name is empty or contains control characters".into(),
        });
    }
    if names.contains(job.name.as_str()) {
        return Err(SchedulerError::DuplicateJob { job: job.name });
    }
    let schedule = Schedule::new(&job.cron, job.time_zone.as_deref())
        .map_err(|source| SchedulerError::Schedule { job: job.name.clone(), source })?;
    let lock = validate_lock(&job)?;
    // The claimed tick is stored per lock key: two jobs on one key would take each
    // other's ticks and skip their own slots.
    if let Some(lock) = &lock
        && lock_keys.contains(&lock.key)
    {
        return Err(SchedulerError::InvalidJob {
            job: job.name.clone(),
            reason: format!(
                "lock key {:?} is already used by another job: give every job its own key",
                lock.key
            ),
        });
    }
    if job.max_run_time.is_some_and(|limit| limit.is_zero()) {
        return Err(SchedulerError::InvalidJob {
            job: job.name.clone(),
            reason: "the maximum run time is zero: give a positive duration".into(),
        });
    }
    Ok(JobEntry {
        name: job.name.into(),
        schedule,
        func: job.func,
        lock,
        catch_up: job.catch_up,
        max_run_time: job.max_run_time,
        warned_unlocked: AtomicBool::new(false),
        running: AtomicBool::new(false),
        may_be_held: AtomicBool::new(true),
        metrics: JobMetrics::default(),
    })
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

/// Everything the timer and runs of one scheduler share.
pub(crate) struct Shared {
    pub(crate) instance: Arc<str>,
    pub(crate) client: LockClient,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) grace: Duration,
    pub(crate) claim_grace: Duration,
    pub(crate) members: Arc<Members>,
    /// The jobs scheduled now (those added at runtime included, removed ones not).
    pub(crate) registry: Mutex<Vec<Arc<JobEntry>>>,
    pub(crate) recorder: control::Recorder,
    /// Asks the timer to re-read a job's last claimed tick (set when the timer starts).
    pub(crate) resync: std::sync::OnceLock<mpsc::UnboundedSender<Arc<str>>>,
    pub(crate) reports: broadcast::Sender<RunReport>,
}

impl Shared {
    /// The jobs scheduled now.
    pub(crate) fn jobs(&self) -> Vec<Arc<JobEntry>> {
        match self.registry.lock() {
            Ok(jobs) => jobs.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Asks the timer to re-read `job`'s last claimed tick once Redis answers.
    pub(crate) fn request_resync(&self, job: &Arc<str>) {
        if let Some(tx) = self.resync.get() {
            let _ = tx.send(job.clone());
        }
    }

    /// Changes the registry under its lock.
    pub(crate) fn with_registry<T>(&self, f: impl FnOnce(&mut Vec<Arc<JobEntry>>) -> T) -> T {
        match self.registry.lock() {
            Ok(mut jobs) => f(&mut jobs),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }
}

impl Shared {
    /// Broadcasts how `slot` of `job` went on this replica.
    pub(crate) fn report(
        &self,
        job: &JobEntry,
        slot: DateTime<Utc>,
        fired_at: DateTime<Utc>,
        outcome: RunOutcome,
        duration: Duration,
    ) {
        let lateness = (fired_at - slot).to_std().unwrap_or_default();
        job.metrics.record(&job.name, &outcome, duration, lateness);
        // Built only for subscribers: most schedulers have none.
        if self.reports.receiver_count() == 0 {
            return;
        }
        let _ = self.reports.send(RunReport {
            job: job.name.to_string(),
            slot,
            tick: slot.timestamp_millis(),
            instance: self.instance.to_string(),
            outcome,
            fired_at,
            lateness,
            duration,
        });
    }
}

impl Shared {
    /// Appends the run to the job's history in Redis, if its outcome is one that is kept.
    pub(crate) async fn record(
        &self,
        job: &JobEntry,
        slot: DateTime<Utc>,
        outcome: &RunOutcome,
        duration: Duration,
    ) {
        if control::recorded(outcome) {
            self.recorder
                .record(control::Record {
                    job: job.name.clone(),
                    tick: slot.timestamp_millis(),
                    instance: self.instance.clone(),
                    outcome: outcome.clone(),
                    duration,
                })
                .await;
        }
    }
}

/// A validated job.
pub(crate) struct JobEntry {
    pub(crate) name: Arc<str>,
    pub(crate) schedule: Schedule,
    pub(crate) func: JobFn,
    pub(crate) lock: Option<JobLock>,
    pub(crate) catch_up: CatchUp,
    pub(crate) max_run_time: Option<Duration>,
    /// Whether the "this job takes no lock" warning was logged (so: it takes none).
    pub(crate) warned_unlocked: AtomicBool,
    /// Whether a run of the job is in flight on this replica.
    pub(crate) running: AtomicBool,
    /// Whether the job's lock may still be held at its next slot (deferred slots then check
    /// it): true until this replica runs it in less than the claim grace, true again when it
    /// sees the lock held or runs it longer. (A claimed tick proves nothing: the tick is
    /// checked before the lock.)
    pub(crate) may_be_held: AtomicBool,
    /// What its runs record through the `metrics` facade.
    pub(crate) metrics: JobMetrics,
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
            group: DEFAULT_GROUP.to_owned(),
            claim_grace: DEFAULT_CLAIM_GRACE,
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

    /// Starts firing: announces this replica to its group and reads the last claimed tick of
    /// each job with a [`Job::lock`] key (two Redis round trips; when Redis does not answer,
    /// at most about 7 s, then both are retried in the background), then one timer task fires
    /// every job's slots. Slots due before this call are run only as missed slots of `Job::lock`
    /// jobs whose [`CatchUp`] policy allows it (see [`CatchUp`]). Must be called within a tokio
    /// runtime.
    pub async fn start(self) -> Result<SchedulerHandle, SchedulerError> {
        let (state_tx, state_rx) = watch::channel(State::Running);
        let (commands_tx, commands_rx) = mpsc::unbounded_channel();
        self.shared.recorder.start(self.shared.client.clone());
        if let Err(e) = self.shared.members.announce(&self.shared.client).await {
            tracing::warn!(
                instance = %self.shared.instance,
                error = %e,
                "could not announce this replica to its group yet; retrying every {:?}",
                members::RENEW
            );
        }
        members::spawn_announcer(self.shared.members.clone(), self.shared.client.clone(), state_rx.clone());
        // Slots up to now are not ours, whenever the timer first gets to run.
        let started = truncate(self.shared.clock.now());
        self.shared.with_registry(|registry| registry.clone_from(&self.jobs));
        let (resync_tx, resync_rx) = mpsc::unbounded_channel();
        let _ = self.shared.resync.set(resync_tx);
        let floors = timer::first_floors(&self.shared, &self.jobs, started).await;
        let timer = timer::spawn(
            self.shared.clone(),
            self.jobs.clone(),
            started,
            floors,
            state_rx,
            timer::Inputs { commands: commands_rx, resync: resync_rx },
        );
        tracing::info!(
            instance = %self.shared.instance,
            jobs = self.jobs.len(),
            live_replicas = self.shared.members.live().len(),
            "scheduler started"
        );
        Ok(SchedulerHandle::new(self.shared, state_tx, commands_tx, timer))
    }

    /// Starts, runs until `stop` resolves, then shuts down gracefully.
    pub async fn run_until<F: Future>(self, stop: F) -> Result<ShutdownReport, SchedulerError> {
        let handle = self.start().await?;
        stop.await;
        Ok(handle.shutdown().await)
    }

    /// Starts, runs until SIGTERM or Ctrl-C, then shuts down gracefully: stops firing, logs at
    /// once how many jobs are running and how long it waits for them, waits up to the grace
    /// period, cancels the rest, and releases their locks. A second signal cancels the running
    /// jobs at once (their locks are still released).
    pub async fn run_until_signal(self) -> Result<ShutdownReport, SchedulerError> {
        // Listen before starting, so a signal during start-up is not lost.
        let mut signals = ShutdownSignals::install().map_err(SchedulerError::Signal)?;
        let handle = self.start().await?;
        let signal = signals.recv().await;
        let instance = handle.shared().instance.clone();
        let second_signal = async move {
            let again = signals.recv().await;
            tracing::warn!(instance = %instance, "{again} received again: stopping now");
        };
        Ok(handle.shutdown_after_signal(signal, second_signal).await)
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

/// What the timer is told, through a `watch` channel whose sender the
/// [`SchedulerHandle`] owns (dropping it tells it to stop firing and leave running jobs alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Running,
    /// Stop firing; wait for running jobs until the deadline, then cancel them. A later
    /// `Stopping` with an earlier deadline (a forced shutdown) moves the deadline.
    Stopping(Instant),
}

impl State {
    /// The shutdown deadline, once stopping.
    pub(crate) fn deadline(self) -> Option<Instant> {
        match self {
            State::Running => None,
            State::Stopping(deadline) => Some(deadline),
        }
    }
}
