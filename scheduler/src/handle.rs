//! [`SchedulerHandle`]: a running scheduler, and its graceful (or forced) shutdown.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lock_core::LockClient;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::driver::{DriverExit, RunEnd};
use crate::report::{RunReport, ShutdownReport};
use crate::scheduler::{JobEntry, Shared, State};
use crate::signal::ShutdownSignal;

/// How long shutdown waits for the releases of cancelled runs' locks.
const RELEASE_FLUSH: Duration = Duration::from_secs(3);

/// Stands in for a grace period too long to add to an `Instant`.
const FOREVER: Duration = Duration::from_secs(60 * 60 * 24 * 365 * 30);

/// A running scheduler. [`shutdown`](Self::shutdown) stops it gracefully; dropping it stops
/// firing without waiting (running jobs finish on their own).
pub struct SchedulerHandle {
    shared: Arc<Shared>,
    jobs: Vec<Arc<JobEntry>>,
    /// Dropping it (with the handle) tells the drivers to stop firing and leave running jobs
    /// alone.
    state: watch::Sender<State>,
    drivers: Vec<JoinHandle<DriverExit>>,
}

impl SchedulerHandle {
    pub(crate) fn new(
        shared: Arc<Shared>,
        jobs: Vec<Arc<JobEntry>>,
        state: watch::Sender<State>,
        drivers: Vec<JoinHandle<DriverExit>>,
    ) -> Self {
        SchedulerHandle { shared, jobs, state, drivers }
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// This replica's instance id.
    pub fn instance_id(&self) -> &str {
        &self.shared.instance
    }

    /// Pauses `job` on every replica (a flag in Redis, checked when a slot is about to be
    /// claimed): its slots are skipped and recorded as
    /// [`RunOutcome::SkippedPaused`](crate::RunOutcome::SkippedPaused) until
    /// [`resume`](Self::resume). Any job name is accepted, including another scheduler's.
    pub async fn pause(&self, job: &str) -> Result<(), crate::ControlError> {
        crate::control::pause(&self.shared.client, job).await
    }

    /// Resumes a paused `job` on every replica; returns whether it was paused.
    pub async fn resume(&self, job: &str) -> Result<bool, crate::ControlError> {
        crate::control::resume(&self.shared.client, job).await
    }

    /// The last `n` runs of `job` across replicas, newest first (see [`crate::history`]).
    pub async fn history(
        &self,
        job: &str,
        n: usize,
    ) -> Result<Vec<crate::HistoryEntry>, crate::ControlError> {
        crate::control::history(&self.shared.client, job, n).await
    }

    /// A receiver of every [`RunReport`] from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<RunReport> {
        self.shared.reports.subscribe()
    }

    /// The names of the jobs with a run in flight on this replica right now.
    pub fn running_jobs(&self) -> Vec<String> {
        self.jobs
            .iter()
            .filter(|job| job.running.load(Ordering::SeqCst))
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
    /// ([`ShutdownSignals::recv`](crate::ShutdownSignals::recv)).
    pub async fn shutdown_forced_by<F: Future>(self, force: F) -> ShutdownReport {
        self.announce_shutdown("shutting down", "");
        self.stop(force).await
    }

    /// The shutdown of [`Scheduler::run_until_signal`](crate::Scheduler::run_until_signal):
    /// says which signal started it, and that another one forces it.
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

    /// Stops firing, waits for the drivers (which wait for or cancel their running jobs),
    /// moving their deadline to now if `force` resolves first; then flushes the releases of
    /// cancelled runs' locks.
    async fn stop<F: Future>(mut self, force: F) -> ShutdownReport {
        let now = Instant::now();
        // A grace too long to represent ("wait forever") waits for decades.
        let deadline = now.checked_add(self.shared.grace).unwrap_or_else(|| now + FOREVER);
        self.state.send_replace(State::Stopping(deadline));
        let (exits, forced) = self.wait_for_drivers(force).await;
        let mut report = ShutdownReport::default();
        for exit in exits {
            match exit.end {
                RunEnd::Finished => report.finished.push(exit.job.to_string()),
                RunEnd::Cancelled => report.cancelled.push(exit.job.to_string()),
                RunEnd::NothingRunning => {}
            }
        }
        report.forced = forced;
        if !report.cancelled.is_empty() {
            self.flush_releases().await;
        }
        tracing::info!(
            instance = %self.shared.instance,
            finished = report.finished.len(),
            cancelled = report.cancelled.len(),
            "scheduler stopped"
        );
        report
    }

    /// Collects every driver's exit; if `force` resolves first, tells
    /// the drivers to cancel their running jobs now. Also returns whether it did.
    async fn wait_for_drivers<F: Future>(&mut self, force: F) -> (Vec<DriverExit>, bool) {
        let drivers = std::mem::take(&mut self.drivers);
        let instance = self.shared.instance.clone();
        let collect = async move {
            let mut exits = Vec::with_capacity(drivers.len());
            for driver in drivers {
                match driver.await {
                    Ok(exit) => exits.push(exit),
                    Err(e) => tracing::error!(instance = %instance, "a job driver task failed: {e}"),
                }
            }
            exits
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

    /// Moves the drivers' deadline to now: they cancel their running jobs at once.
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

    /// Waits (bounded) for the background releases of cancelled runs' locks, so they are
    /// freed now rather than at the end of their leases once the caller drops the runtime.
    async fn flush_releases(&self) {
        // Annotated fns take their locks through the installed default client.
        let mut clients = vec![self.shared.client.clone()];
        clients.extend(LockClient::default_client().ok());
        for client in clients {
            if !client.flush_releases(RELEASE_FLUSH).await {
                tracing::warn!(
                    instance = %self.shared.instance,
                    "some locks of cancelled jobs were not released in time; they expire at the end of their leases"
                );
            }
        }
    }
}

impl fmt::Debug for SchedulerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchedulerHandle")
            .field("instance", &self.shared.instance)
            .field("jobs", &self.drivers.len())
            .finish_non_exhaustive()
    }
}
