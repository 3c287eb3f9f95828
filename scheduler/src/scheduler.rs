//! [`Scheduler`]: builds and validates jobs, starts the scheduler's one [timer](crate::timer)
//! and its [group membership](crate::members), and hands back a [`SchedulerHandle`].

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{ErrorChain, LockClient};
use tokio::sync::{broadcast, mpsc, watch};

use crate::clock::{Clock, SystemClock};
use crate::declared::declared_jobs;
use crate::error::SchedulerError;
use crate::handle::SchedulerHandle;
use crate::health::HealthProbe;
use crate::job::Job;
use crate::job_args::States;
use crate::members::{self, Members};
use crate::overrides::Overrides;
use crate::presence::{Presence, RunningJobs};
use crate::recorder::Recorder;
use crate::report::{RunReport, ShutdownReport};
use crate::run_taker;
use crate::schedule::{Schedule, truncate};
use crate::schema;
use crate::shared::{JobEntry, Shared};
use crate::signal::ShutdownSignals;
use crate::singleton::declared::declared_singletons;
use crate::singleton::{self, Singleton};
use crate::state::State;
use crate::timer::resync::first_floors;
use crate::timer::shutdown::RunExit;
use crate::timer::{self, Inputs};
use crate::validate::{Context, validate};

/// How long a replica that is not the preferred one for a job-tick waits before claiming it
/// itself, by default (see [`SchedulerBuilder::claim_grace`]).
pub const DEFAULT_CLAIM_GRACE: Duration = Duration::from_millis(500);

/// The scheduler group replicas join unless told otherwise (see [`SchedulerBuilder::group`]).
pub const DEFAULT_GROUP: &str = "default";

/// How long [`SchedulerHandle::shutdown`] waits for running jobs by default: under
/// Kubernetes' default 30 s termination grace period, so that cancelling the rest and releasing
/// their locks still happens before the pod is killed.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(25);

/// Bounds of [`SchedulerBuilder::start_deadline`]: under a second is no wait at all for a
/// Redis that is merely slow; past a day, a deployment should rather alert.
const MIN_START_DEADLINE: Duration = Duration::from_secs(1);
const MAX_START_DEADLINE: Duration = Duration::from_secs(24 * 60 * 60);

/// Reports buffered per subscriber before the slowest one starts missing some.
const REPORT_CAPACITY: usize = 1024;

/// Builds a [`Scheduler`]; start from [`Scheduler::builder`].
#[must_use]
pub struct SchedulerBuilder {
    client: Option<LockClient>,
    jobs: Vec<Job>,
    /// Whether the jobs declared with `#[scheduled]` (of this builder's group) are added.
    declared: bool,
    states: States,
    overrides: Overrides,
    grace: Duration,
    clock: Arc<dyn Clock>,
    group: String,
    claim_grace: Duration,
    version: Option<String>,
    singletons: Vec<Singleton>,
    /// Whether the singletons declared with `#[singleton]` (of this builder's group) are added.
    declared_singletons: bool,
    start_deadline: Option<Duration>,
}

impl SchedulerBuilder {
    /// The lock client: its instance id identifies this replica in lock tokens and logs, and it
    /// takes the locks configured with [`Job::lock`]. Default: the installed default client
    /// (`LockClient::install_default`).
    pub fn client(mut self, client: LockClient) -> Self {
        self.client = Some(client);
        self
    }

    /// Adds a job: one built in code, or one declared with `#[scheduled]` on a function
    /// (`.job(send_digest::job())`), for a binary or test that wants some of them only.
    pub fn job(mut self, job: Job) -> Self {
        self.jobs.push(job);
        self
    }

    /// Adds every job declared with `#[scheduled]` in the binary (in any crate it links) for
    /// this builder's [`group`](Self::group), and those declared without a group. Found at
    /// start-up: no list to keep in `main`. Two jobs with one name are an error from
    /// [`build`](Self::build) that names both functions.
    pub fn scheduled_jobs(mut self) -> Self {
        self.declared = true;
        self
    }

    /// Adds a [`Singleton`]: a task that runs on exactly one replica at a time (the leader of
    /// its election), started when this replica is elected and stopped with the scheduler.
    pub fn singleton(mut self, singleton: Singleton) -> Self {
        self.singletons.push(singleton);
        self
    }

    /// Adds every singleton declared with `#[singleton]` in this binary for this builder's group
    /// (and those declared for any group), as [`scheduled_jobs`](Self::scheduled_jobs) does for
    /// jobs.
    pub fn singletons(mut self) -> Self {
        self.declared_singletons = true;
        self
    }

    /// Gives the jobs a value of application state (a database pool, a mailer, a service):
    /// a job's function takes it as a [`State<T>`](crate::job_args::State) argument, each run
    /// getting a clone. One value per type; a job taking a type no value was given for is an
    /// error from [`build`](Self::build) naming the job and the type. Singletons take it too.
    pub fn state<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.states.insert(value);
        self
    }

    /// Replaces the schedule of the job named `job` (from a configuration file, say): a 6-field
    /// cron expression (in the job's time zone), `every <duration>` (optionally
    /// `offset <duration>`), or `-` to turn the job off. The environment variable
    /// `SCHEDULE_<JOB>` (the name in upper case, other characters as `_`; `SCHEDULE_<JOB>_ZONE`
    /// for the time zone) wins over it. Checked by [`build`](Self::build).
    pub fn schedule_override(mut self, job: impl Into<String>, schedule: impl Into<String>) -> Self {
        self.overrides.config.insert(job.into(), schedule.into());
        self
    }

    /// Replaces the time zone of the job named `job`'s cron expression (an IANA name such as
    /// `Europe/Berlin`). `SCHEDULE_<JOB>_ZONE` in the environment wins over it. Checked by
    /// [`build`](Self::build).
    pub fn time_zone_override(mut self, job: impl Into<String>, zone: impl Into<String>) -> Self {
        self.overrides.zones.insert(job.into(), zone.into());
        self
    }

    /// How long a shutdown waits for running jobs before cancelling them (default
    /// [`DEFAULT_SHUTDOWN_GRACE`], 25 s).
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The wall clock slots are computed and awaited on (default [`SystemClock`]); tests use an
    /// [`OffsetClock`](crate::clock::OffsetClock) to simulate a replica with a skewed clock.
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
    /// replica that is dead (until its membership lapses: at most
    /// [`MEMBER_TTL`](crate::schema::MEMBER_TTL), 6 s), stalled or slow
    /// delays the run by the grace, never loses it. Exactly-once never depends on it: the
    /// claim is atomic in Redis. Zero makes every replica claim at once (the fastest clock
    /// then wins most runs).
    pub fn claim_grace(mut self, grace: Duration) -> Self {
        self.claim_grace = grace;
        self
    }

    /// The version this replica reports to its group (with its host, start time and running
    /// jobs; `lockctl replicas` and the console show them), typically
    /// `env!("CARGO_PKG_VERSION")` of the application, so that a rolling deploy shows which
    /// replicas run which build. Default: none (shown empty). Control characters become
    /// spaces; at most 200 characters are kept.
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = Some(version.into());
        self
    }

    /// How long [`Scheduler::start`] waits for Redis before failing with
    /// [`SchedulerError::RedisUnavailable`]. Default: none, and then `start` never waits: a
    /// scheduler started while Redis is unreachable returns at once, keeps announcing itself
    /// every 2 s, reports not ready ([`Health`](crate::Health)), and starts firing slots when
    /// Redis first answers (slots before that are not its own, as slots before a start never
    /// are). With a deadline, `start` itself waits (the probe reports live meanwhile), so that
    /// a process that cannot reach Redis for that long exits. Between 1 s and 24 h, checked
    /// by [`build`](Self::build).
    pub fn start_deadline(mut self, deadline: Duration) -> Self {
        self.start_deadline = Some(deadline);
        self
    }

    /// Validates every job (cron expression, time zone, name, lock) and builds the scheduler.
    /// Errors name the offending job.
    pub fn build(self) -> Result<Scheduler, SchedulerError> {
        let client = match self.client {
            Some(client) => client,
            None => LockClient::default_client().map_err(|_| SchedulerError::NoClient)?,
        };
        if let Some(deadline) = self.start_deadline
            && !(MIN_START_DEADLINE..=MAX_START_DEADLINE).contains(&deadline)
        {
            return Err(SchedulerError::InvalidConfig {
                reason: format!(
                    "start deadline {deadline:?}: must be between {MIN_START_DEADLINE:?} and {MAX_START_DEADLINE:?}"
                ),
            });
        }
        if let Some(problem) = schema::group_name_problem(&self.group) {
            return Err(SchedulerError::InvalidConfig {
                reason: format!("group name {:?}: {problem}", self.group),
            });
        }
        let mut all = self.jobs;
        if self.declared {
            for registration in declared_jobs(&self.group) {
                let mut job = (registration.job)();
                job.function = Some(registration.function);
                all.push(job);
            }
        }
        let states = Arc::new(self.states);
        let mut jobs: Vec<Arc<JobEntry>> = Vec::with_capacity(all.len());
        let mut names = HashMap::new();
        let mut lock_keys = HashSet::new();
        for job in all {
            let cx =
                Context { names: &names, lock_keys: &lock_keys, overrides: &self.overrides, states: &states };
            let Some(entry) = validate(job, &cx)? else { continue };
            names.insert(entry.name.clone(), entry.function);
            if let Some(lock) = &entry.lock {
                lock_keys.insert(lock.key.clone());
            }
            jobs.push(Arc::new(entry));
        }
        let mut singletons = self.singletons;
        if self.declared_singletons {
            for registration in declared_singletons(&self.group) {
                let mut singleton = (registration.singleton)();
                singleton.function = Some(registration.function);
                singletons.push(singleton);
            }
        }
        let singletons = singleton::validate(singletons, &names, &lock_keys, &states)?;
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
                registry_changed: tokio::sync::Notify::new(),
                recorder: Recorder::new(),
                resync: std::sync::OnceLock::new(),
                commands: std::sync::OnceLock::new(),
                stopping: Mutex::new(false),
                reports,
                overrides: self.overrides,
                states,
                beats: Arc::default(),
            }),
            jobs,
            singletons,
            version: self.version,
            start_deadline: self.start_deadline,
        })
    }
}

/// A cron scheduler whose jobs run once per tick across all replicas running the same jobs.
///
/// Each replica builds the same `Scheduler`; each slot of each job is claimed in Redis together
/// with the job's lock, so one replica runs it: at most one always, exactly one while Redis is
/// reachable (see the crate docs).
///
/// ```no_run
/// use lock_scheduler::lock_core::LockClient;
/// use lock_scheduler::{Job, Scheduler};
///
/// # async fn purge_sessions() -> anyhow::Result<()> { Ok(()) }
/// #[tokio::main]
/// async fn main() -> anyhow::Result<()> {
///     let scheduler = Scheduler::builder()
///         .client(LockClient::from_env()?)
///         .scheduled_jobs() // the #[scheduled] fns of this binary
///         .job(Job::new("purge-sessions", "0 */10 * * * *", purge_sessions).lock("lock:purge-sessions"))
///         .build()?;
///     // Runs until SIGTERM or Ctrl-C, then lets running jobs finish (up to the grace).
///     let report = scheduler.run_until_signal().await?;
///     println!("{report:?}");
///     Ok(())
/// }
/// ```
pub struct Scheduler {
    shared: Arc<Shared>,
    jobs: Vec<Arc<JobEntry>>,
    singletons: Vec<Singleton>,
    /// The version it reports to its group ([`SchedulerBuilder::version`]).
    version: Option<String>,
    /// How long `start` waits for Redis ([`SchedulerBuilder::start_deadline`]).
    start_deadline: Option<Duration>,
}

impl Scheduler {
    /// A builder: no jobs, the default lock client, a 25 s shutdown grace, the system clock.
    pub fn builder() -> SchedulerBuilder {
        SchedulerBuilder {
            client: None,
            jobs: Vec::new(),
            declared: false,
            states: States::default(),
            overrides: Overrides::default(),
            grace: DEFAULT_SHUTDOWN_GRACE,
            clock: Arc::new(SystemClock),
            group: DEFAULT_GROUP.to_owned(),
            claim_grace: DEFAULT_CLAIM_GRACE,
            version: None,
            singletons: Vec::new(),
            declared_singletons: false,
            start_deadline: None,
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

    /// A view of this scheduler's [`Health`](crate::Health) for a pod's probes, usable before
    /// [`start`](Self::start) (not live until then) and after it.
    pub fn health_probe(&self) -> HealthProbe {
        HealthProbe::new(self.shared.beats.clone())
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
    /// jobs whose [`CatchUp`](crate::schedule::catch_up::CatchUp) policy allows it. Must be
    /// called within a tokio runtime.
    ///
    /// When Redis does not answer the first announcement, the scheduler waits for it: without
    /// a [start deadline](SchedulerBuilder::start_deadline) in the background (this returns at
    /// once; the timer starts when Redis first answers, slots before that are not its own),
    /// with one here, failing with [`SchedulerError::RedisUnavailable`] once it passes.
    /// Meanwhile its [`Health`](crate::Health) is live and not ready.
    pub async fn start(self) -> Result<SchedulerHandle, SchedulerError> {
        let began = tokio::time::Instant::now();
        let (state_tx, state_rx) = watch::channel(State::Running);
        let (commands_tx, commands_rx) = mpsc::unbounded_channel();
        self.shared.recorder.start(self.shared.client.clone());
        // Weak: the announcer must not keep the scheduler's state alive.
        let shared = Arc::downgrade(&self.shared);
        let running: RunningJobs = Arc::new(move || {
            let Some(shared) = shared.upgrade() else { return Vec::new() };
            let jobs = shared.jobs();
            jobs.iter()
                .filter(|job| job.running.load(Ordering::Relaxed) > 0)
                .map(|job| job.name.clone())
                .collect()
        });
        self.shared.members.present(Presence::new(self.shared.clock.now(), self.version.as_deref(), running));
        let beats = self.shared.beats.clone();
        beats.turned();
        let announced = self.shared.members.announce(&self.shared.client).await;
        beats.announced(announced.is_ok());
        if let Err(e) = &announced {
            tracing::warn!(
                instance = %self.shared.instance,
                error = %ErrorChain(e),
                "Redis does not answer: this replica is not ready and fires no slot until it does; \
                 announcing it again every {:?}",
                members::RENEW
            );
        }
        members::spawn_announcer(
            self.shared.members.clone(),
            self.shared.client.clone(),
            state_rx.clone(),
            beats.clone(),
        );
        if let (Err(e), Some(deadline)) = (announced, self.start_deadline) {
            let left = deadline.saturating_sub(began.elapsed());
            if tokio::time::timeout(left, beats.wait_for_redis()).await.is_err() {
                // Dropping the state's sender stops the announcer and the run taker.
                drop(state_tx);
                return Err(SchedulerError::RedisUnavailable { waited: deadline, source: e });
            }
        }
        self.shared.with_registry(|registry| registry.clone_from(&self.jobs));
        let _ = self.shared.commands.set(commands_tx.clone());
        run_taker::spawn_taker(self.shared.clone(), state_rx.clone());
        let (resync_tx, resync_rx) = mpsc::unbounded_channel();
        let _ = self.shared.resync.set(resync_tx);
        let singletons = self
            .singletons
            .into_iter()
            .map(|s| {
                let client = self.shared.client.clone();
                singleton::supervisor::spawn(client, self.shared.states.clone(), s, state_rx.clone())
            })
            .collect();
        let inputs = Inputs { commands: commands_rx, resync: resync_rx };
        let timer = if beats.first_seen() {
            // Slots up to now are not ours, whenever the timer first gets to run.
            let started = truncate(self.shared.clock.now());
            let floors = first_floors(&self.shared, &self.jobs, started).await;
            timer::spawn(self.shared.clone(), self.jobs.clone(), started, floors, state_rx, inputs)
        } else {
            tokio::spawn(start_when_redis_answers(self.shared.clone(), self.jobs.clone(), state_rx, inputs))
        };
        tracing::info!(
            instance = %self.shared.instance,
            jobs = self.jobs.len(),
            live_replicas = self.shared.members.live().len(),
            "scheduler started"
        );
        Ok(SchedulerHandle::new(self.shared, state_tx, commands_tx, timer, singletons))
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

/// Waits for Redis's first answer to an announcement (turning the health beat meanwhile), then
/// runs the timer from then on; returns early, firing nothing, if the scheduler is stopped or
/// its handle dropped before.
async fn start_when_redis_answers(
    shared: Arc<Shared>,
    jobs: Vec<Arc<JobEntry>>,
    state: watch::Receiver<State>,
    inputs: Inputs,
) -> Vec<RunExit> {
    let mut watching = state.clone();
    let stopped = async {
        loop {
            if watching.changed().await.is_err() || watching.borrow().deadline().is_some() {
                return;
            }
        }
    };
    tokio::select! {
        () = shared.beats.wait_for_redis() => {}
        () = stopped => {
            shared.beats.stopped();
            return Vec::new();
        }
    }
    tracing::info!(instance = %shared.instance, "Redis answers: the scheduler starts firing");
    // Slots up to now are not ours: before Redis answered, no replica of this start ran them.
    let started = truncate(shared.clock.now());
    let floors = first_floors(&shared, &jobs, started).await;
    match timer::spawn(shared.clone(), jobs, started, floors, state, inputs).await {
        Ok(exits) => exits,
        Err(e) => {
            tracing::error!(instance = %shared.instance, "the scheduler's timer task failed: {e}");
            Vec::new()
        }
    }
}
