//! [`SchedulerHandle`]: a running scheduler, and its graceful (or forced) shutdown.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lock_core::LockClient;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::control::history::{self, HistoryEntry};
use crate::control::pause;
use crate::error::{ControlError, SchedulerError};
use crate::health::{Health, HealthProbe};
use crate::job::Job;
use crate::report::{RunReport, ShutdownReport};
use crate::shared::Command;
use crate::shared::Shared;
use crate::signal::ShutdownSignal;
use crate::singleton::supervisor::SingletonExit;
use crate::state::State;
use crate::timer::shutdown::{RunEnd, RunExit};
use crate::validate::{Context, validate};

/// How long shutdown waits for the releases of cancelled runs' locks.
const RELEASE_FLUSH: Duration = Duration::from_secs(3);

/// Stands in for a grace period too long to add to an `Instant`.
const FOREVER: Duration = Duration::from_secs(60 * 60 * 24 * 365 * 30);

/// A running scheduler. [`shutdown`](Self::shutdown) stops it gracefully; dropping it stops
/// firing without waiting (running jobs finish on their own).
pub struct SchedulerHandle {
    shared: Arc<Shared>,
    /// Dropping it (with the handle) tells the timer to stop firing and leave running jobs
    /// alone.
    state: watch::Sender<State>,
    commands: mpsc::UnboundedSender<Command>,
    timer: Option<JoinHandle<Vec<RunExit>>>,
    /// The supervisors of the singletons; each ends after the shutdown, with the singleton's
    /// exit if its body was running.
    singletons: Vec<JoinHandle<Option<SingletonExit>>>,
}

impl SchedulerHandle {
    pub(crate) fn new(
        shared: Arc<Shared>,
        state: watch::Sender<State>,
        commands: mpsc::UnboundedSender<Command>,
        timer: JoinHandle<Vec<RunExit>>,
        singletons: Vec<JoinHandle<Option<SingletonExit>>>,
    ) -> Self {
        SchedulerHandle { shared, state, commands, timer: Some(timer), singletons }
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// The scheduler's health now: live while its timer turns, ready while Redis answers its
    /// announcements (see [`Health`]).
    pub fn health(&self) -> Health {
        self.health_probe().health()
    }

    /// A cloneable view of the scheduler's [`Health`], for a `/livez` and `/readyz` handler.
    pub fn health_probe(&self) -> HealthProbe {
        HealthProbe::new(self.shared.beats.clone())
    }

    /// Adds a job to the running scheduler: validated like the jobs given to the builder, its
    /// first slot is the first one after now. Every replica that should run it must add it
    /// too (each replica runs the jobs it knows; the one that claims a slot runs it).
    ///
    /// Errors: [`SchedulerError::DuplicateJob`] if a job of that name is scheduled,
    /// [`SchedulerError::Schedule`] for an invalid cron expression or time zone,
    /// [`SchedulerError::InvalidJob`] for a bad name, lock or limit, and
    /// [`SchedulerError::Stopped`] once a shutdown started.
    pub fn add_job(&self, job: Job) -> Result<(), SchedulerError> {
        if self.state.borrow().deadline().is_some() {
            return Err(SchedulerError::Stopped { job: job.name });
        }
        let name = job.name.clone();
        let entry = self.shared.with_registry(|registry| {
            let names: HashMap<Arc<str>, Option<&'static str>> =
                registry.iter().map(|j| (j.name.clone(), j.function)).collect();
            let lock_keys: HashSet<String> =
                registry.iter().filter_map(|j| j.lock.as_ref().map(|l| l.key.clone())).collect();
            let cx = Context {
                names: &names,
                lock_keys: &lock_keys,
                overrides: &self.shared.overrides,
                states: &self.shared.states,
            };
            let Some(entry) = validate(job, &cx)? else { return Ok(None) };
            let entry = Arc::new(entry);
            registry.push(entry.clone());
            Ok::<_, SchedulerError>(Some(entry))
        })?;
        let Some(entry) = entry else {
            tracing::info!(job = %name, "job not added: its schedule is turned off");
            return Ok(());
        };
        if self.commands.send(Command::Add(entry.clone())).is_err() {
            self.shared.with_registry(|registry| registry.retain(|j| !Arc::ptr_eq(j, &entry)));
            return Err(SchedulerError::Stopped { job: entry.name.to_string() });
        }
        Ok(())
    }

    /// Removes the job named `name` from the running scheduler; returns whether it was
    /// scheduled. No slot of it fires after this returns; a run in flight goes on to its end
    /// (and a shutdown still waits for it). Its Redis keys expire on their own (the claimed
    /// tick after [`TICK_TTL`](lock_core::tick::TICK_TTL), the history after
    /// [`HISTORY_TTL`](crate::schema::HISTORY_TTL)).
    pub fn remove_job(&self, name: &str) -> bool {
        let removed = self.shared.with_registry(|registry| {
            let before = registry.len();
            registry.retain(|j| &*j.name != name);
            registry.len() != before
        });
        if removed {
            // The timer is gone only after a shutdown, which stops every job anyway.
            let _ = self.commands.send(Command::Remove(name.into()));
        }
        removed
    }

    /// The names of the jobs scheduled now, in the order they were added.
    pub fn job_names(&self) -> Vec<String> {
        self.shared.jobs().iter().map(|j| j.name.to_string()).collect()
    }

    /// The instance ids of the live replicas of this scheduler's group, as last read from
    /// Redis (renewed every few seconds), this one included; sorted.
    pub fn live_replicas(&self) -> Vec<String> {
        self.shared.members.live().iter().map(|m| m.to_string()).collect()
    }

    /// This replica's instance id.
    pub fn instance_id(&self) -> &str {
        &self.shared.instance
    }

    /// Pauses `job` on every replica (a flag in Redis, checked when a slot is about to be
    /// claimed): its slots are skipped and recorded as
    /// [`RunOutcome::SkippedPaused`](crate::report::RunOutcome::SkippedPaused) until
    /// [`resume`](Self::resume). Any job name is accepted, including another scheduler's.
    /// Returns whether it was paused already.
    pub async fn pause(&self, job: &str) -> Result<bool, ControlError> {
        pause::pause(&self.shared.client, job).await
    }

    /// Resumes a paused `job` on every replica; returns whether it was paused.
    pub async fn resume(&self, job: &str) -> Result<bool, ControlError> {
        pause::resume(&self.shared.client, job).await
    }

    /// The last `n` runs of `job` across replicas, newest first (see
    /// [`control::history`](crate::control::history::history)).
    pub async fn history(&self, job: &str, n: usize) -> Result<Vec<HistoryEntry>, ControlError> {
        history::history(&self.shared.client, job, n).await
    }

    /// A receiver of every [`RunReport`] from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<RunReport> {
        self.shared.reports.subscribe()
    }

    /// The names of the jobs with a run in flight on this replica right now.
    pub fn running_jobs(&self) -> Vec<String> {
        self.shared
            .jobs()
            .iter()
            .filter(|job| job.running.load(Ordering::SeqCst) > 0)
            .map(|job| job.name.to_string())
            .collect()
    }

    /// How long [`shutdown`](Self::shutdown) waits for running jobs before cancelling them.
    pub fn shutdown_grace(&self) -> Duration {
        self.shared.grace
    }

    /// Graceful shutdown: stop firing at once, wait for running jobs up to the grace period,
    /// cancel those still running then (their locks are released as the cancelled futures are
    /// dropped, and those releases are awaited), and return what happened. Jobs that finish
    /// release their locks themselves.
    pub async fn shutdown(self) -> ShutdownReport {
        self.shutdown_forced_by(std::future::pending::<()>()).await
    }

    /// [`shutdown`](Self::shutdown), cut short when `force` resolves: the jobs still running
    /// then are cancelled at once, as at the end of the grace period, and their locks
    /// released. `force` is typically a second SIGTERM / Ctrl-C
    /// ([`ShutdownSignals::recv`](crate::signal::ShutdownSignals::recv)).
    pub async fn shutdown_forced_by<F: Future>(self, force: F) -> ShutdownReport {
        self.announce_shutdown("shutting down", "");
        self.stop(force).await
    }

    /// The shutdown of
    /// [`Scheduler::run_until_signal`](crate::scheduler::Scheduler::run_until_signal): says
    /// which signal started it, and that another one forces it.
    pub(crate) async fn shutdown_after_signal<F: Future>(
        self,
        signal: ShutdownSignal,
        force: F,
    ) -> ShutdownReport {
        let hint = "; send SIGTERM or press Ctrl-C again to cancel them now";
        self.announce_shutdown(&format!("{signal} received, shutting down"), hint);
        self.stop(force).await
    }

    /// Logs, before waiting for anything, what the shutdown waits for and how long.
    fn announce_shutdown(&self, cause: &str, force_hint: &str) {
        let running = self.running_jobs();
        let instance = &*self.shared.instance;
        if running.is_empty() {
            tracing::info!(instance = %instance, "{cause}: no job is running");
        } else {
            tracing::info!(
                instance = %instance,
                running = ?running,
                grace = ?self.shared.grace,
                "{cause}: waiting up to {:?} for {} running job(s) ({}) to finish{force_hint}",
                self.shared.grace,
                running.len(),
                running.join(", "),
            );
        }
    }

    /// Stops firing, waits for the timer (which waits for or cancels the running jobs),
    /// moving its deadline to now if `force` resolves first; then flushes the background
    /// releases (of cancelled runs' locks, and of guards dropped by panicking runs).
    async fn stop<F: Future>(mut self, force: F) -> ShutdownReport {
        let now = Instant::now();
        // A grace too long to represent ("wait forever") waits for decades.
        let deadline = now.checked_add(self.shared.grace).unwrap_or_else(|| now + FOREVER);
        // Before the timer hears it: every run started outside it until now is in its channel.
        self.shared.stop_starts();
        self.state.send_replace(State::Stopping(deadline));
        // The singletons follow the same state (deadline, forced or not) as the timer.
        let singletons = futures_util::future::join_all(std::mem::take(&mut self.singletons));
        let ((exits, forced), singletons) = tokio::join!(self.wait_for_timer(force), singletons);
        let mut report = ShutdownReport::default();
        for (name, finished) in singletons.into_iter().filter_map(|s| s.ok().flatten()) {
            if finished { report.finished.push(name) } else { report.cancelled.push(name) }
        }
        for exit in exits {
            match exit.end {
                RunEnd::Finished => report.finished.push(exit.job.to_string()),
                RunEnd::Cancelled => report.cancelled.push(exit.job.to_string()),
            }
        }
        report.forced = forced;
        // Always: a run that finished by panicking (or a job that dropped a guard) left its
        // release in the background too, and the caller may drop the runtime next.
        self.flush_releases().await;
        tracing::info!(
            instance = %self.shared.instance,
            finished = report.finished.len(),
            cancelled = report.cancelled.len(),
            "scheduler stopped"
        );
        report
    }

    /// Collects the timer's exit; if `force` resolves first, tells it to cancel the running
    /// jobs now. Also returns whether it did.
    async fn wait_for_timer<F: Future>(&mut self, force: F) -> (Vec<RunExit>, bool) {
        let timer = self.timer.take();
        let instance = self.shared.instance.clone();
        let collect = async move {
            let Some(timer) = timer else { return Vec::new() };
            match timer.await {
                Ok(exits) => exits,
                Err(e) => {
                    tracing::error!(instance = %instance, "the scheduler's timer task failed: {e}");
                    Vec::new()
                }
            }
        };
        tokio::pin!(collect);
        tokio::pin!(force);
        let mut forced = false;
        loop {
            tokio::select! {
                exits = &mut collect => return (exits, forced),
                _ = &mut force, if !forced => {
                    forced = true;
                    self.force_cancel();
                }
            }
        }
    }

    /// Moves the timer's deadline to now: it cancels the running jobs at once.
    fn force_cancel(&self) {
        let running = self.running_jobs();
        if !running.is_empty() {
            tracing::warn!(
                instance = %self.shared.instance,
                running = ?running,
                "forced shutdown: cancelling {} running job(s) now and releasing their locks",
                running.len()
            );
        }
        self.state.send_replace(State::Stopping(Instant::now()));
    }

    /// Waits (bounded) for the background releases (cancelled runs' locks, guards dropped by
    /// panics), so they are freed now rather than at the end of their leases once the caller
    /// drops the runtime.
    async fn flush_releases(&self) {
        // Annotated fns take their locks through the installed default client.
        let mut clients = vec![self.shared.client.clone()];
        clients.extend(LockClient::default_client().ok());
        for client in clients {
            if !client.flush_releases(RELEASE_FLUSH).await {
                tracing::warn!(
                    instance = %self.shared.instance,
                    "some locks were not released in time; they expire at the end of their leases"
                );
            }
        }
    }
}

impl fmt::Debug for SchedulerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchedulerHandle")
            .field("instance", &self.shared.instance)
            .field("jobs", &self.shared.jobs().len())
            .finish_non_exhaustive()
    }
}
