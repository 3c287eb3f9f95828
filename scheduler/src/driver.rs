//! One job's driver task: computes its slots on the scheduler's clock in the job's time zone,
//! re-reads the clock every second (and times the last stretch precisely), fires each slot once as a
//! run under [`tick::scope`], and at shutdown waits for or cancels the run in flight.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use futures_util::FutureExt;
use lock_core::LockError;
use lock_core::tick::{self, TickOutcome};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::control;
use crate::job::RunContext;
use crate::report::RunOutcome;
use crate::schedule::Due;
use crate::scheduler::{JobEntry, Shared, State};

/// A slot this close is awaited with a precise timer; farther ones re-read the clock every
/// [`RECHECK`]. More than `RECHECK`.
const LOOKAHEAD: Duration = Duration::from_secs(2);

/// Longest wait between readings of the wall clock while a slot is far: a clock step (a
/// suspended VM, an NTP correction) is noticed within this.
const RECHECK: Duration = Duration::from_secs(1);

/// How a driver ended.
pub(crate) struct DriverExit {
    pub(crate) job: Arc<str>,
    pub(crate) end: RunEnd,
}

/// What became of the run in flight when the driver stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunEnd {
    /// No run was in flight (or the scheduler handle was dropped, which leaves runs alone).
    NothingRunning,
    /// The run finished within the grace period.
    Finished,
    /// The run was cancelled at the deadline; its lock was released.
    Cancelled,
}

/// Spawns the driver of `job`, in a span naming the instance and the job.
pub(crate) fn spawn(
    shared: &Arc<Shared>,
    job: &Arc<JobEntry>,
    started: DateTime<Utc>,
    state: &watch::Receiver<State>,
) -> JoinHandle<DriverExit> {
    let span = tracing::info_span!(parent: None, "scheduler", instance = %shared.instance, job = %job.name);
    let driver = Driver {
        shared: shared.clone(),
        job: job.clone(),
        floor: started,
        current: None,
        state: state.clone(),
    };
    tokio::spawn(driver.drive().instrument(span))
}

/// The run in flight for a job on this replica.
struct Running {
    handle: JoinHandle<()>,
    slot: DateTime<Utc>,
    fired_at: DateTime<Utc>,
    span: tracing::Span,
}

/// Why a wait for the next slot ended.
enum Wake {
    /// Time to look at the clock again (a timer or a state change).
    Recheck,
    /// The scheduler handle was dropped: stop firing, leave the running job alone.
    HandleDropped,
}

/// One job's driver state.
struct Driver {
    shared: Arc<Shared>,
    job: Arc<JobEntry>,
    /// Every slot up to `floor` has been dealt with; slots before the start are not ours.
    floor: DateTime<Utc>,
    current: Option<Running>,
    state: watch::Receiver<State>,
}

impl Driver {
    async fn drive(mut self) -> DriverExit {
        let deadline = self.fire_slots_until_stopped().await;
        let end = match deadline {
            Some(deadline) => self.finish_running_job(deadline).await,
            None => RunEnd::NothingRunning,
        };
        DriverExit { job: self.job.name.clone(), end }
    }

    /// Fires each due slot until shutdown. Returns the shutdown deadline, or `None` if the
    /// handle was dropped instead.
    async fn fire_slots_until_stopped(&mut self) -> Option<Instant> {
        loop {
            if let Some(deadline) = self.state.borrow().deadline() {
                return Some(deadline);
            }
            let now = self.shared.clock.now();
            self.fire_due_slots(now);
            let Some(next) = self.job.schedule.next_after(self.floor.max(now)) else {
                tracing::warn!("the schedule has no further fire times; the job will not run again");
                return wait_for_stop(&mut self.state).await;
            };
            tracing::trace!(floor = %self.floor, %now, %next, "next slot");
            if let Wake::HandleDropped = self.wait_for_slot(next).await {
                return None;
            }
        }
    }

    /// Deals with the slots in `(floor, now]`: reports those missed, fires the one to run.
    fn fire_due_slots(&mut self, now: DateTime<Utc>) {
        let Some(due) = self.job.schedule.due(self.floor, now, self.job.catch_up) else { return };
        self.floor = due.floor;
        self.report_missed(&due, now);
        if let Some(slot) = due.run {
            self.fire(slot, now);
        }
    }

    fn report_missed(&self, due: &Due, now: DateTime<Utc>) {
        let Some(last_missed) = due.last_missed.filter(|_| due.missed > 0) else { return };
        tracing::warn!(
            missed = due.missed,
            last_missed = %self.local(last_missed).to_rfc3339(),
            "{} slot(s) could not run on time and were not run (catch-up policy: {:?})",
            due.missed,
            self.job.catch_up
        );
        let missed = RunOutcome::Missed(due.missed);
        let (shared, job) = (self.shared.clone(), self.job.clone());
        let recorded = missed.clone();
        tokio::spawn(
            async move { shared.record(&job, last_missed, &recorded, Duration::ZERO).await }
                .in_current_span(),
        );
        self.shared.report(&self.job, last_missed, now, missed, Duration::ZERO);
    }

    /// Starts the run of `slot`, unless this replica's previous run of the job is still going.
    fn fire(&mut self, slot: DateTime<Utc>, fired_at: DateTime<Utc>) {
        if let Some(running) = self.current.as_ref()
            && !running.handle.is_finished()
        {
            tracing::info!(
                tick = %self.local(slot).to_rfc3339(),
                running_tick = %self.local(running.slot).to_rfc3339(),
                outcome = "skipped: still running",
                "the previous run is still running on this instance, skipping this tick"
            );
            self.shared.report(&self.job, slot, fired_at, RunOutcome::SkippedStillRunning, Duration::ZERO);
            return;
        }
        let local = self.local(slot);
        let span = tracing::info_span!(
            parent: None,
            "job_run",
            job = %self.job.name,
            tick = %local.to_rfc3339(),
            instance = %self.shared.instance,
            outcome = tracing::field::Empty,
            duration_ms = tracing::field::Empty,
        );
        let ctx =
            RunContext { job: self.job.name.clone(), slot: local, instance: self.shared.instance.clone() };
        let running = RunningFlag::raise(&self.job);
        let run = run(self.shared.clone(), self.job.clone(), ctx, fired_at);
        let handle = tokio::spawn(
            async move {
                // Lowered when the run ends or is cancelled (its future dropped).
                let _running = running;
                run.await;
            }
            .instrument(span.clone()),
        );
        self.current = Some(Running { handle, slot, fired_at, span });
    }

    /// Sleeps until `next` is due, or something changes: a precise timer when it is close,
    /// else [`RECHECK`], to read the wall clock again.
    async fn wait_for_slot(&mut self, next: DateTime<Tz>) -> Wake {
        let wait = (next.with_timezone(&Utc) - self.shared.clock.now()).to_std().unwrap_or_default();
        let wait = if wait <= LOOKAHEAD { wait } else { RECHECK };
        tokio::select! {
            () = tokio::time::sleep(wait) => Wake::Recheck,
            changed = self.state.changed() => state_wake(changed),
        }
    }

    /// At shutdown: waits for the run in flight until the deadline (which a forced shutdown
    /// moves to now), then cancels it.
    async fn finish_running_job(&mut self, mut deadline: Instant) -> RunEnd {
        let Some(mut run) = self.current.take() else { return RunEnd::NothingRunning };
        if run.handle.is_finished() {
            return RunEnd::NothingRunning;
        }
        tracing::debug!(
            tick = %self.local(run.slot).to_rfc3339(),
            "shutting down: waiting up to {:?} for the running job",
            deadline.saturating_duration_since(Instant::now())
        );
        let grace_deadline = deadline;
        let mut watching = true;
        loop {
            tokio::select! {
                _ = &mut run.handle => return RunEnd::Finished,
                () = tokio::time::sleep_until(deadline) => break,
                changed = self.state.changed(), if watching => match changed {
                    Ok(()) => deadline = self.state.borrow_and_update().deadline().unwrap_or(deadline),
                    // The handle is gone (its shutdown future was dropped): keep the deadline.
                    Err(_) => watching = false,
                },
            }
        }
        let why = if deadline < grace_deadline {
            "the shutdown was forced"
        } else {
            "the job was still running at the end of the shutdown grace period"
        };
        self.cancel(run, why).await;
        RunEnd::Cancelled
    }

    /// Cancels the run: dropping its future drops its lock guard, which releases the lock.
    async fn cancel(&self, mut run: Running, why: &str) {
        run.handle.abort();
        let _ = (&mut run.handle).await;
        run.span.record("outcome", "cancelled");
        run.span.in_scope(|| {
            tracing::warn!(
                job = %self.job.name,
                tick = %self.local(run.slot).to_rfc3339(),
                outcome = "cancelled",
                "{why}: cancelled the running job and released its lock"
            );
        });
        self.shared.record(&self.job, run.slot, &RunOutcome::Cancelled, Duration::ZERO).await;
        self.shared.report(&self.job, run.slot, run.fired_at, RunOutcome::Cancelled, Duration::ZERO);
    }

    /// `t` in the job's time zone.
    fn local(&self, t: DateTime<Utc>) -> DateTime<Tz> {
        t.with_timezone(&self.job.schedule.time_zone())
    }
}

fn state_wake(changed: Result<(), watch::error::RecvError>) -> Wake {
    if changed.is_err() { Wake::HandleDropped } else { Wake::Recheck }
}

/// After the last slot: waits for the shutdown's deadline (`None`: the handle was dropped).
async fn wait_for_stop(state: &mut watch::Receiver<State>) -> Option<Instant> {
    loop {
        if let Some(deadline) = state.borrow_and_update().deadline() {
            return Some(deadline);
        }
        if state.changed().await.is_err() {
            return None;
        }
    }
}

/// Marks a job as running on this replica while alive.
struct RunningFlag(Arc<JobEntry>);

impl RunningFlag {
    fn raise(job: &Arc<JobEntry>) -> Self {
        job.running.store(true, Ordering::SeqCst);
        RunningFlag(job.clone())
    }
}

impl Drop for RunningFlag {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::SeqCst);
    }
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

/// What the run's future gave back: its result, or the panic it raised.
type Caught = Result<Result<(), Failure>, Box<dyn std::any::Any + Send>>;

/// One run: the job inside its tick's scope, logged and reported.
async fn run(shared: Arc<Shared>, job: Arc<JobEntry>, ctx: RunContext, fired_at: DateTime<Utc>) {
    let started = Instant::now();
    let slot = ctx.slot();
    let outcome = if control::is_paused(&shared.client, &job.name).await {
        RunOutcome::SkippedPaused
    } else {
        let (caught, lock_outcome) = run_in_tick_scope(&shared, &job, ctx).await;
        classify(&job, caught, lock_outcome)
    };
    let duration = started.elapsed();
    log_outcome(&job, slot, &outcome, duration);
    shared.record(&job, slot, &outcome, duration).await;
    shared.report(&job, slot, fired_at, outcome, duration);
}

/// Runs the job's future inside `tick::scope(tick)` (so the outermost lock claims the tick),
/// wrapped in the job's configured lock if it has one; panics caught.
async fn run_in_tick_scope(
    shared: &Shared,
    job: &JobEntry,
    ctx: RunContext,
) -> (Caught, Option<TickOutcome>) {
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
    tick::scope(tick, AssertUnwindSafe(locked).catch_unwind()).await
}

/// The run's outcome, from what its future returned and what its first lock saw.
fn classify(job: &JobEntry, caught: Caught, lock_outcome: Option<TickOutcome>) -> RunOutcome {
    match (caught, lock_outcome) {
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
    }
}

/// Records the outcome on the run's span and logs it with the job and tick.
fn log_outcome(job: &JobEntry, slot: DateTime<Utc>, outcome: &RunOutcome, duration: Duration) {
    let span = tracing::Span::current();
    let duration_ms = duration.as_millis() as u64;
    span.record("outcome", outcome.label());
    span.record("duration_ms", duration_ms);
    let tick = slot.with_timezone(&job.schedule.time_zone()).to_rfc3339();
    let job = &*job.name;
    match outcome {
        RunOutcome::Ran => tracing::info!(job = %job, tick = %tick, outcome = "ran", duration_ms, "job ran"),
        RunOutcome::SkippedHeld => tracing::info!(
            job = %job,
            tick = %tick,
            outcome = "skipped: held",
            duration_ms,
            "another instance holds the lock, skipping"
        ),
        RunOutcome::SkippedTickDone => tracing::info!(
            job = %job,
            tick = %tick,
            outcome = "skipped: tick done",
            duration_ms,
            "this tick already ran on another instance, skipping"
        ),
        RunOutcome::SkippedPaused => tracing::info!(
            job = %job,
            tick = %tick,
            outcome = "skipped: paused",
            "the job is paused (lockctl resume or scheduler::resume to resume it), skipping"
        ),
        RunOutcome::Failed(error) => tracing::error!(
            job = %job,
            tick = %tick,
            outcome = "failed",
            duration_ms,
            error = %error,
            "job failed; it stays scheduled"
        ),
        other => {
            tracing::error!(job = %job, tick = %tick, outcome = other.label(), duration_ms, "job ended: {other}")
        }
    }
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
