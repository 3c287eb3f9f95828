//! One run of one slot of a job on this replica: the pause check, the job inside its tick's scope (and its lock), the time
//! limit, and how it went (logged, recorded in the run history, reported).

pub(crate) mod buffer;
pub(crate) mod replace;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use lock_core::tick::{self, Claim, ClaimedTick, TickOutcome};
use lock_core::{LockError, LossReason};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::Instrument;

use crate::batch::{ClaimBatch, Share};
use crate::failures;
use crate::job::JobLock;
use crate::max_runs;
use crate::overlap::Overlap;
use crate::pause_check::PauseCheck;
use crate::report::RunOutcome;
use crate::retry::pending;
use crate::run_context::RunContext;
use crate::running::Running;
use crate::schema::BACKFILL_ATTEMPT;
use crate::shared::{Attempt, JobEntry, Manual, Origin, Shared};

/// How long a backfill slot that found the job's lock held waits before it is tried again.
const HELD_BACKFILL_WAIT_MS: i64 = 500;

/// How a run learns whether it may run.
pub(crate) enum Start {
    /// `pause` answers whether the job is paused; then the run's first locked section claims
    /// the tick (the job's configured lock, or the lock its fn takes).
    Single(PauseCheck),
    /// The wake's [`ClaimBatch`] checked the pause flag and claimed
    /// the tick with the job's lock (or, for an [`Overlap::Allow`] job, without it).
    Batched(oneshot::Receiver<Share>),
    /// `pause` answers whether the job is paused; then the job runs without its lock or a tick
    /// claim: a retry of an [`Overlap::Allow`] job, which runs once because one replica took it.
    Unclaimed(PauseCheck),
    /// `pause` answers whether the job is paused; then the job runs under its lock without a
    /// tick claim: a retry (attempt 2 and up), which runs once because one replica took its
    /// `(slot, attempt)` entry from the group's pending retries (`take_retries.lua`). It claims
    /// nothing on the job's tick line, where a later slot's claim would make it look done.
    Retry(PauseCheck),
    /// `pause` answers whether the job is paused; then the job runs under its lock: a backfill
    /// run, which runs once because one replica took it (its tick claimed only when after the
    /// last claimed one).
    Backfill(PauseCheck),
}

impl Start {
    /// How the run of `slot` of `job` starts: a job whose lock the scheduler knows is claimed
    /// in `batch` (with the wake's other claims), any other claims in its run's first locked
    /// section.
    pub(crate) fn for_slot(
        job: &Arc<JobEntry>,
        slot: DateTime<Utc>,
        pause: &PauseCheck,
        batch: &mut ClaimBatch,
    ) -> Start {
        if job.lock.is_some() {
            Start::Batched(batch.add(job, slot.timestamp_millis()))
        } else {
            Start::Single(pause.clone())
        }
    }
}

/// Spawns the run of `slot` of `job`, fired at `fired_at`, started as `start` says.
pub(crate) fn spawn(
    shared: &Arc<Shared>,
    job: &Arc<JobEntry>,
    slot: DateTime<Utc>,
    fired_at: DateTime<Utc>,
    start: Start,
) -> Running {
    spawn_attempt(shared, job, slot, fired_at, start, 1)
}

/// Spawns attempt `attempt` (2 and up) of `slot` of `job`, a retry this replica took from the
/// group's pending retries: checked against the pause flag, then run like a slot's run under
/// the job's lock, claiming no tick (taking the retry's entry was its claim: [`Start::Retry`]).
pub(crate) fn spawn_retry(
    shared: &Arc<Shared>,
    job: &Arc<JobEntry>,
    slot: DateTime<Utc>,
    attempt: u32,
) -> Running {
    let (answer, pause) = PauseCheck::pending();
    PauseCheck::answer(answer, shared.client.clone(), vec![job.name.clone()]);
    let start = if job.overlap == Overlap::Allow { Start::Unclaimed(pause) } else { Start::Retry(pause) };
    spawn_attempt(shared, job, slot, shared.clock.now(), start, attempt)
}

/// Spawns a backfill run of past `slot` of `job` this replica took: checked against the pause
/// flag, then run under the job's lock (taking it from the group's queue is what makes it run
/// once; it claims its tick only when it is after the last claimed one, so that the slot's own
/// claim, still to come, finds it done), recorded as a backfill.
pub(crate) fn spawn_backfill(shared: &Arc<Shared>, job: &Arc<JobEntry>, slot: DateTime<Utc>) -> Running {
    let (answer, pause) = PauseCheck::pending();
    PauseCheck::answer(answer, shared.client.clone(), vec![job.name.clone()]);
    spawn_attempt(shared, job, slot, shared.clock.now(), Start::Backfill(pause), 1)
}

fn spawn_attempt(
    shared: &Arc<Shared>,
    job: &Arc<JobEntry>,
    slot: DateTime<Utc>,
    fired_at: DateTime<Utc>,
    start: Start,
    attempt: u32,
) -> Running {
    let local = slot.with_timezone(&job.schedule.time_zone());
    let span = tracing::info_span!(
        parent: None,
        "job_run",
        job = %job.name,
        tick = %local.to_rfc3339(),
        attempt,
        instance = %shared.instance,
        outcome = tracing::field::Empty,
        duration_ms = tracing::field::Empty,
    );
    let ctx = RunContext {
        job: job.name.clone(),
        slot: local,
        instance: shared.instance.clone(),
        attempt,
        began: Arc::default(),
    };
    let (shared_, job_) = (shared.clone(), job.clone());
    let handle = tokio::spawn(
        async move {
            // Lowered when the run ends or is cancelled (its future dropped).
            let _running = RunningFlag::raise(&job_);
            run(shared_, job_, ctx, fired_at, start).await
        }
        .instrument(span.clone()),
    );
    Running { handle, slot, fired_at, span }
}

/// A slot this replica was not preferred for, found already claimed once the claim grace was
/// over: logged and reported as the run's own claim attempt would have been, without one.
pub(crate) fn skip_done(shared: &Shared, job: &JobEntry, slot: DateTime<Utc>, fired_at: DateTime<Utc>) {
    let outcome = RunOutcome::SkippedTickDone;
    log_outcome(job, slot, &outcome, Duration::ZERO);
    shared.report(job, slot, fired_at, outcome, Duration::ZERO);
}

/// Cancels the run: dropping its future drops its lock guard, which releases the lock.
/// Returns whether the run had started (one still waiting for its pause check is dropped
/// without a trace).
pub(crate) async fn cancel(shared: &Shared, job: &JobEntry, mut run: Running, why: &str) -> bool {
    let started = job.running.load(Ordering::SeqCst) > 0;
    run.handle.abort();
    let _ = (&mut run.handle).await;
    if !started {
        return false;
    }
    run.span.record("outcome", "cancelled");
    let tick = run.slot.with_timezone(&job.schedule.time_zone()).to_rfc3339();
    run.span.in_scope(|| {
        tracing::warn!(
            job = %job.name,
            tick = %tick,
            outcome = "cancelled",
            "{why}: cancelled the running job and released its lock"
        );
    });
    shared.record(job, run.slot, &RunOutcome::Cancelled, Duration::ZERO).await;
    shared.report(job, run.slot, run.fired_at, RunOutcome::Cancelled, Duration::ZERO);
    true
}

/// Marks a job as running on this replica while alive.
struct RunningFlag(Arc<JobEntry>);

impl RunningFlag {
    fn raise(job: &Arc<JobEntry>) -> Self {
        job.running.fetch_add(1, Ordering::SeqCst);
        RunningFlag(job.clone())
    }
}

impl Drop for RunningFlag {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why a run reported failed although its body did not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NotStarted {
    /// Its lock (and, for a slot's first attempt, the tick claim with it) could not be taken:
    /// Redis failed. A slot's first attempt is left to the resync, which runs the slot if its
    /// tick was not claimed (a retry as well would run it twice); a retry is put back.
    LockFailed,
    /// It could not be counted against the job's `max_runs`: not retried, since a retry is not
    /// counted (two bodies could then start for one allowed run).
    Uncounted,
    /// A backfill run could not read whether its slot ran meanwhile: dropped.
    Unchecked,
}

/// Why a run's body did not succeed.
enum Failure {
    Job(String),
    Lock(LockError),
    /// The job had run its maximum number of times: the body did not start.
    MaxRuns,
    /// Its run could not be counted against its maximum: the body did not start.
    Uncounted(String),
    /// A later slot asked it to stop ([`Overlap::Replace`]); it returned once told.
    Replaced,
    /// A backfill run found its slot's own run ended after the request: the body did not start.
    AlreadyRan,
    /// A backfill run could not read whether its slot's own run ended after the request: the
    /// body did not start.
    Unchecked(String),
}

impl From<LockError> for Failure {
    fn from(e: LockError) -> Self {
        Failure::Lock(e)
    }
}

/// What the run's future gave back: its result, or the panic it raised.
type Caught = Result<Result<(), Failure>, Box<dyn std::any::Any + Send>>;

/// One run: the job under its lock (claimed in its tick's scope, or by the batch), logged and
/// reported.
async fn run(
    shared: Arc<Shared>,
    job: Arc<JobEntry>,
    ctx: RunContext,
    fired_at: DateTime<Utc>,
    start: Start,
) -> RunOutcome {
    let started = Instant::now();
    let slot = ctx.slot();
    let ctx_attempt = ctx.attempt;
    let began = ctx.began.clone();
    let mut attempt = Attempt::nth(ctx_attempt);
    // A slot's first run of a Replace job that finds the lock held stops the running run, and
    // then runs with this context.
    let replacing =
        (job.overlap == Overlap::Replace && ctx_attempt == 1 && matches!(start, Start::Batched(_)))
            .then(|| ctx.clone());
    let ran = match start {
        Start::Single(mut pause) => {
            if pause.is_paused(&job.name).await {
                None
            } else {
                Some(run_locked(&shared, &job, ctx, Locking::Scope { claim: true }).await)
            }
        }
        Start::Retry(mut pause) => {
            if pause.is_paused(&job.name).await {
                None
            } else {
                Some(run_locked(&shared, &job, ctx, Locking::Scope { claim: false }).await)
            }
        }
        Start::Backfill(mut pause) => {
            attempt.backfill = true;
            if pause.is_paused(&job.name).await {
                None
            } else {
                Some(run_locked(&shared, &job, ctx, Locking::Backfill).await)
            }
        }
        Start::Unclaimed(mut pause) => {
            if pause.is_paused(&job.name).await {
                None
            } else {
                Some(run_locked(&shared, &job, ctx, Locking::Free).await)
            }
        }
        Start::Batched(share) => match share.await {
            Ok(Share::Paused) => None,
            Ok(Share::Slot(Ok(0))) => Some(run_locked(&shared, &job, ctx, Locking::Free).await),
            Ok(Share::Slot(Ok(last_tick))) => {
                Some((Some(Ok(Ok(()))), Some(TickOutcome::Claimed { last_tick })))
            }
            Ok(Share::Slot(Err(e))) => Some((
                Some(Ok(Ok(()))),
                Some(TickOutcome::LockFailed(LockError::Redis {
                    action: "claiming the slot's tick".into(),
                    source: lock_core::redis::RedisError::from(std::io::Error::other(
                        lock_core::ErrorChain(&e).to_string(),
                    )),
                })),
            )),
            Ok(Share::Claim(Ok(Claim::Claimed(claimed)))) => {
                Some(run_locked(&shared, &job, ctx, Locking::Claimed(claimed)).await)
            }
            Ok(Share::Claim(claim)) => Some((Some(Ok(Ok(()))), Some(not_claimed(claim)))),
            // The batch's task is gone (the runtime is shutting down, or it panicked): whether
            // the tick was claimed is unknown, as after a lost reply.
            Err(_) => Some((
                Some(Ok(Ok(()))),
                Some(TickOutcome::LockFailed(LockError::Redis {
                    action: "claiming the slot's tick".into(),
                    source: lock_core::redis::RedisError::from(std::io::Error::other(
                        "the claim batch was dropped",
                    )),
                })),
            )),
        },
    };
    // Set when the body did not start although the run "failed": what follows differs.
    let mut not_started = None;
    let outcome = match ran {
        None => RunOutcome::SkippedPaused,
        Some((Some(caught), lock_outcome)) => {
            // Held and claimed ticks are contention, reported as such; this is Redis (or the
            // pool) failing to answer.
            let redis_failed = matches!(lock_outcome, Some(TickOutcome::LockFailed(_)));
            if redis_failed {
                // Nobody may have run this slot: once Redis answers, the last claimed tick
                // says which slots were missed.
                shared.request_resync(&job.name);
                not_started = Some(NotStarted::LockFailed);
            } else if matches!(caught, Ok(Err(Failure::Uncounted(_)))) {
                not_started = Some(NotStarted::Uncounted);
            } else if matches!(caught, Ok(Err(Failure::Unchecked(_)))) {
                not_started = Some(NotStarted::Unchecked);
            }
            classify(&job, caught, lock_outcome)
        }
        Some((None, _)) => RunOutcome::TimedOut(job.max_run_time.unwrap_or_default()),
    };
    let outcome = match (outcome, replacing) {
        (RunOutcome::SkippedHeld, Some(ctx)) => replace(&shared, &job, ctx).await,
        (outcome, _) => outcome,
    };
    // A slot of a BufferOne job that found the previous run holding the lock waits for it.
    let mut first_buffered = false;
    let outcome = match outcome {
        RunOutcome::SkippedHeld
            if job.overlap == Overlap::BufferOne && ctx_attempt == 1 && !attempt.backfill =>
        {
            match buffer::buffer_slot(&shared, &job, slot).await {
                Some(first) => {
                    first_buffered = first;
                    RunOutcome::Buffered
                }
                None => RunOutcome::SkippedHeld,
            }
        }
        other => other,
    };
    let duration = started.elapsed();
    attempt.began = began.get().copied();
    match &outcome {
        RunOutcome::SkippedHeld => job.may_be_held.store(true, Ordering::Relaxed),
        o if o.ran_here() => job.may_be_held.store(duration >= shared.claim_grace, Ordering::Relaxed),
        _ => {}
    }
    log_outcome(&job, slot, &outcome, duration);
    after_attempt(&shared, &job, slot, &outcome, &mut attempt, not_started).await;
    // A slot fails for good when its body ran, failed, and no retry follows. A body that did
    // not start is not the job failing: its slot is run by the resync (or its retry put back),
    // or it may not run at all (max_runs).
    let failed_for_good = matches!(outcome, RunOutcome::Failed(_) | RunOutcome::TimedOut(_))
        && attempt.retry_at.is_none()
        && not_started.is_none();
    if let Some(limit) = job.pause_after_failures
        && failed_for_good
    {
        failures::count(&shared, &job, limit, slot.timestamp_millis(), &outcome).await;
    }
    // Each replica that found the slot held buffers it; one records it.
    if outcome != RunOutcome::Buffered || first_buffered {
        shared.record_attempt(&job, slot, &outcome, duration, &attempt).await;
    }
    shared.report_run(&job, slot, fired_at, outcome.clone(), duration, Origin::Slot(&attempt));
    if job.overlap == Overlap::BufferOne && outcome.ran_here() {
        // The lock is released: a slot buffered from now on finds it free and starts itself.
        buffer::run_buffered(&shared, &job, slot.timestamp_millis()).await;
    }
    outcome
}

/// Slot `ctx` of a `Replace` job found its lock held: asks the running run to stop, then takes
/// the lock as it is given back (waiting a bounded time) and runs, claiming the slot's tick.
async fn replace(shared: &Arc<Shared>, job: &Arc<JobEntry>, ctx: RunContext) -> RunOutcome {
    let Some(lock) = &job.lock else { return RunOutcome::SkippedHeld };
    let asked_at = Instant::now();
    replace::request(shared, job, ctx.tick()).await;
    let (_, wait) = replace::wait_options(&lock.options);
    tracing::info!(?wait, "the previous run still holds the lock: asked it to stop, waiting for the lock");
    let outcome = match run_locked(shared, job, ctx, Locking::Replacing).await {
        (Some(caught), lock_outcome) => classify(job, caught, lock_outcome),
        (None, _) => RunOutcome::TimedOut(job.max_run_time.unwrap_or_default()),
    };
    if outcome == RunOutcome::SkippedHeld {
        tracing::warn!(
            waited = ?asked_at.elapsed(),
            "the previous run did not give the lock back in time (a body that does not .await, or \
             a replica that does not see requests): the slot is skipped"
        );
    }
    outcome
}

/// What a job with a retry policy does after `attempt` at `slot` ended with `outcome`: a failed
/// attempt with attempts left adds the next one to the group's pending retries (and
/// `attempt.retry_at` says when it is due), the last one gives up; a retry that found the lock
/// held (a later slot's run, say) is put back for the same attempt after the same wait.
async fn after_attempt(
    shared: &Shared,
    job: &JobEntry,
    slot: DateTime<Utc>,
    outcome: &RunOutcome,
    attempt: &mut Attempt,
    not_started: Option<NotStarted>,
) {
    let tick = slot.timestamp_millis();
    if attempt.backfill {
        if *outcome == RunOutcome::SkippedHeld {
            // Another run holds the lock (another backfilled slot, say): the slot waits a while
            // (the replicas wake when it comes due).
            let (now, retries) = (shared.clock.now(), shared.members.retries_key());
            let due = now + chrono::TimeDelta::milliseconds(HELD_BACKFILL_WAIT_MS);
            if let Err(e) =
                pending::add(&shared.client, retries, &job.name, tick, BACKFILL_ATTEMPT, due, now).await
            {
                tracing::warn!(error = %lock_core::ErrorChain(&e), "could not put a backfill slot back: it is dropped");
            }
        }
        return;
    }
    let Some(policy) = &job.retry else { return };
    let next = match (not_started, outcome) {
        (Some(NotStarted::LockFailed), _) if attempt.number == 1 => {
            tracing::info!(
                "the slot's claim failed: not retried, the resync runs it if its tick was not claimed"
            );
            return;
        }
        (Some(NotStarted::LockFailed), _) => attempt.number,
        (Some(NotStarted::Unchecked), _) => return,
        (Some(NotStarted::Uncounted), _) => {
            tracing::warn!("the run could not be counted against max_runs: not retried");
            return;
        }
        (None, outcome) => match outcome {
            RunOutcome::Failed(_) | RunOutcome::TimedOut(_) if attempt.number < policy.attempts => {
                attempt.number + 1
            }
            RunOutcome::Failed(_) | RunOutcome::TimedOut(_) => {
                attempt.gave_up = true;
                tracing::error!(
                    attempts = attempt.number,
                    "the slot failed for good: its last attempt ({} of {}) failed",
                    attempt.number,
                    policy.attempts
                );
                return;
            }
            RunOutcome::SkippedHeld if attempt.number > 1 => attempt.number,
            _ => return,
        },
    };
    let now = shared.clock.now();
    let delay = policy.jittered_delay(&job.name, tick, next);
    let due = now + chrono::TimeDelta::from_std(delay).unwrap_or(chrono::TimeDelta::MAX);
    match pending::add(&shared.client, shared.members.retries_key(), &job.name, tick, next, due, now).await {
        Ok(()) if next == attempt.number => {
            tracing::info!(retry_at = %due.to_rfc3339(), "the job's lock is held or could not be taken: the retry waits again");
        }
        Ok(()) => {
            attempt.retry_at = Some(due);
            tracing::info!(
                next_attempt = next,
                retry_at = %due.to_rfc3339(),
                "attempt {} of {} failed: retrying in {delay:?} on whichever replica takes it",
                attempt.number,
                policy.attempts
            );
        }
        Err(e) => {
            attempt.gave_up = true;
            tracing::error!(
                error = %lock_core::ErrorChain(&e),
                "attempt {} failed and its retry could not be scheduled: the slot is not retried",
                attempt.number
            );
        }
    }
}

/// Spawns a manual ("run now") run of `job` that this replica took: the job under its lock,
/// as a slot's run, but claiming no tick (the slots' own runs are unaffected) and whether or
/// not the job is paused (someone asked for this run). Skipped, and recorded as such, when a
/// run of the job is in flight here or its lock is held elsewhere.
pub(crate) fn spawn_manual(shared: &Arc<Shared>, job: &Arc<JobEntry>, manual: Manual) -> Running {
    let requested = DateTime::from_timestamp_millis(manual.at_ms).unwrap_or_else(|| shared.clock.now());
    let local = requested.with_timezone(&job.schedule.time_zone());
    let span = tracing::info_span!(
        parent: None,
        "job_run",
        job = %job.name,
        manual_by = %manual.by,
        request = %manual.id,
        instance = %shared.instance,
        outcome = tracing::field::Empty,
        duration_ms = tracing::field::Empty,
    );
    let ctx = RunContext {
        job: job.name.clone(),
        slot: local,
        instance: shared.instance.clone(),
        attempt: 1,
        began: Arc::default(),
    };
    let fired_at = shared.clock.now();
    let (shared, job) = (shared.clone(), job.clone());
    let handle = tokio::spawn(
        async move {
            let started = Instant::now();
            let outcome = if job.running.load(Ordering::SeqCst) > 0 {
                RunOutcome::SkippedStillRunning
            } else {
                let _running = RunningFlag::raise(&job);
                match run_locked(&shared, &job, ctx, Locking::Scope { claim: false }).await {
                    (Some(caught), lock_outcome) => classify(&job, caught, lock_outcome),
                    (None, _) => RunOutcome::TimedOut(job.max_run_time.unwrap_or_default()),
                }
            };
            let duration = started.elapsed();
            let span = tracing::Span::current();
            span.record("outcome", outcome.label());
            span.record("duration_ms", duration.as_millis() as u64);
            match &outcome {
                RunOutcome::Ran => tracing::info!(outcome = "ran", "manual run of the job ran"),
                RunOutcome::Failed(error) => {
                    tracing::error!(outcome = "failed", error = %error, "manual run of the job failed")
                }
                other => tracing::info!(outcome = other.label(), "manual run of the job: {other}"),
            }
            shared.record_manual(&job, &manual, &outcome, duration).await;
            shared.report_run(
                &job,
                requested,
                fired_at,
                outcome.clone(),
                duration,
                Origin::Manual(&manual.by),
            );
            if job.overlap == Overlap::BufferOne && outcome.ran_here() {
                // Slots that came during this run were buffered behind it: the next one starts
                // now, as after a slot's run (any buffered slot: a manual run has no slot).
                buffer::run_buffered(&shared, &job, i64::MIN).await;
            }
            outcome
        }
        .instrument(span.clone()),
    );
    Running { handle, slot: requested, fired_at, span }
}

/// How a run holds the job's lock.
enum Locking {
    /// Inside `tick::scope(tick)` (so the outermost lock claims the tick; with `claim` false, a
    /// manual run's `tick::unslotted`, which claims none), wrapped in the job's configured lock
    /// if it has one.
    Scope { claim: bool },
    /// As `Scope { claim: false }`, for a backfill run: once the lock is held, a slot after the
    /// last claimed tick is claimed
    /// ([`claim_if_unclaimed`](crate::control::backfill::claim_if_unclaimed)); an older one whose
    /// own run ended after the backfill was requested does not start its body
    /// ([`ran_since_request`](crate::control::backfill::ran_since_request)).
    Backfill,
    /// Under the lock the slot's batch took, its tick claimed.
    Claimed(ClaimedTick),
    /// Without the job's lock (an [`Overlap::Allow`] job), its tick claimed by the batch (or
    /// none, for a retry).
    Free,
    /// Inside `tick::scope(tick)`, under the job's lock taken waiting for the run it replaces
    /// to give it back ([`Overlap::Replace`]).
    Replacing,
}

/// What a batched claim that did not take the lock means for the run, as its first locked
/// section would have reported it.
fn not_claimed(claim: Result<Claim, LockError>) -> TickOutcome {
    match claim {
        Ok(Claim::ClaimedElsewhere { last_tick }) => TickOutcome::Claimed { last_tick },
        Ok(Claim::Held { .. }) => TickOutcome::Held,
        Ok(_) => TickOutcome::Ran,
        Err(e) if e.is_contention() => TickOutcome::Held,
        Err(e) => TickOutcome::LockFailed(e),
    }
}

/// Runs the job's future holding its lock as `locking` says; panics caught. `None`: the run
/// took longer than the job's maximum run time and was cancelled (its future dropped, which
/// releases its lock).
async fn run_locked(
    shared: &Shared,
    job: &Arc<JobEntry>,
    ctx: RunContext,
    locking: Locking,
) -> (Option<Caught>, Option<TickOutcome>) {
    let tick = ctx.tick();
    let func = job.func.clone();
    // A Replace job's run stops when a later slot asks (its lock revoked, inside the section).
    let replaced = (job.overlap == Overlap::Replace).then(|| {
        let fresh =
            ctx.attempt == 1 && !matches!(locking, Locking::Scope { claim: false } | Locking::Backfill);
        (job.replace.subscribe(), ctx.tick(), fresh)
    });
    // A slot's run of a job with a maximum number of runs counts itself, inside its lock.
    let counted = job
        .max_runs
        .filter(|_| {
            ctx.attempt == 1 && !matches!(locking, Locking::Scope { claim: false } | Locking::Backfill)
        })
        .map(|limit| (shared.client.clone(), job.clone(), limit));
    let backfill = matches!(locking, Locking::Backfill).then(|| {
        let lock_key = job.lock.as_ref().map(|lock| lock.key.clone());
        (shared.client.clone(), shared.members.group().to_owned(), job.name.clone(), lock_key, ctx.tick())
    });
    // The job's closure is called inside the lock, at the body's first poll.
    let clock = shared.clock.clone();
    let body = async move {
        if let Some((client, group, job, lock_key, tick)) = backfill {
            // A slot after the last claimed tick is claimed here first: its own claim, still to
            // come, then finds it done (F3). An older slot: the run-side check below.
            let claimed = match lock_key.as_deref() {
                Some(key) => crate::control::backfill::claim_if_unclaimed(&client, key, tick).await,
                None => Ok(false),
            };
            let ran = match claimed {
                Ok(true) => Ok(false),
                Ok(false) => {
                    crate::control::backfill::ran_since_request(
                        &client,
                        &group,
                        &job,
                        lock_key.as_deref(),
                        tick,
                    )
                    .await
                }
                Err(e) => Err(e),
            };
            match ran {
                Ok(false) => {}
                Ok(true) => return Err(Failure::AlreadyRan),
                Err(e) => return Err(Failure::Unchecked(lock_core::ErrorChain(&e).to_string())),
            }
        }
        if let Some((client, job, limit)) = counted {
            match max_runs::count(&client, &job, limit).await {
                Ok(None) => {}
                Ok(Some(_)) => return Err(Failure::MaxRuns),
                Err(e) => return Err(Failure::Uncounted(lock_core::ErrorChain(&e).to_string())),
            }
        }
        // The body starts now: the run's lateness is measured to here.
        let _ = ctx.began.set(clock.now());
        match replaced {
            Some((requests, slot, fresh)) => {
                match replace::stop_when_replaced(requests, slot, fresh, func(ctx)).await {
                    (_, true) => Err(Failure::Replaced),
                    (output, false) => output.map_err(Failure::Job),
                }
            }
            None => func(ctx).await.map_err(Failure::Job),
        }
    };
    let lock = job.lock.clone();
    let client = shared.client.clone();
    let (claim, claimed, lock) = match locking {
        Locking::Scope { claim } => (Some(claim), None, lock),
        Locking::Backfill => (Some(false), None, lock),
        Locking::Claimed(claimed) => (None, Some(claimed), lock),
        Locking::Free => (None, None, None),
        Locking::Replacing => {
            let lock =
                lock.map(|lock| JobLock { options: replace::wait_options(&lock.options).0, key: lock.key });
            (Some(true), None, lock)
        }
    };
    // Boxed: the nested lock and job futures are otherwise deep enough to overflow rustc's
    // query depth limit in a clean (non-incremental) build. One allocation per run.
    let locked: std::pin::Pin<Box<dyn Future<Output = _> + Send>> = Box::pin(async move {
        match (claimed, lock) {
            (Some(claimed), _) => claimed.run(body).await.unwrap_or_else(|e| Err(e.into())),
            // A held lock or a claimed tick is reported through the tick scope.
            (None, Some(lock)) => {
                client.with_lock(&lock.key, lock.options, body).await.unwrap_or_else(|e| Err(e.into()))
            }
            (None, None) => body.await,
        }
    });
    let caught = AssertUnwindSafe(locked).catch_unwind();
    let limit = job.max_run_time;
    let limited = async move {
        match limit {
            Some(limit) => tokio::time::timeout(limit, caught).await.ok(),
            None => Some(caught.await),
        }
    };
    match claim {
        Some(true) => tick::scope(tick, limited).await,
        Some(false) => tick::unslotted(limited).await,
        None => {
            let caught = limited.await;
            let outcome = match &caught {
                Some(Ok(Err(Failure::Lock(LockError::Lost { reason, .. })))) => TickOutcome::Lost(*reason),
                _ => TickOutcome::Ran,
            };
            (caught, Some(outcome))
        }
    }
}

/// The run's outcome, from what its future returned and what its first lock saw.
fn classify(job: &JobEntry, caught: Caught, lock_outcome: Option<TickOutcome>) -> RunOutcome {
    match (caught, lock_outcome) {
        (Err(panic), _) => RunOutcome::Failed(format!("panicked: {}", panic_message(&*panic))),
        (Ok(_), Some(TickOutcome::Held)) => RunOutcome::SkippedHeld,
        (Ok(_), Some(TickOutcome::Lost(LossReason::Revoked))) => RunOutcome::Replaced,
        (Ok(_), Some(TickOutcome::Claimed { .. })) => RunOutcome::SkippedTickDone,
        (Ok(_), Some(TickOutcome::LockFailed(e))) => {
            RunOutcome::Failed(format!("could not take the lock: {}", lock_core::ErrorChain(&e)))
        }
        (Ok(Err(Failure::Lock(LockError::Lost { reason: LossReason::Revoked, .. }))), _) => {
            RunOutcome::Replaced
        }
        (Ok(Err(Failure::Lock(e))), _) => {
            RunOutcome::Failed(format!("lock error: {}", lock_core::ErrorChain(&e)))
        }
        (Ok(_), Some(TickOutcome::Lost(_))) => {
            RunOutcome::Failed("the lock was lost while the job ran; it was cancelled".into())
        }
        (Ok(Err(Failure::Job(e))), _) => RunOutcome::Failed(e),
        (Ok(Err(Failure::MaxRuns)), _) => RunOutcome::SkippedMaxRuns,
        (Ok(Err(Failure::Replaced)), _) => RunOutcome::Replaced,
        (Ok(Err(Failure::AlreadyRan)), _) => RunOutcome::SkippedTickDone,
        (Ok(Err(Failure::Unchecked(e))), _) => {
            RunOutcome::Failed(format!("could not check that the slot's own run had not run meanwhile: {e}"))
        }
        (Ok(Err(Failure::Uncounted(e))), _) => {
            RunOutcome::Failed(format!("could not count the run against the job's max_runs: {e}"))
        }
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
    // Formatted only if a log line is written.
    let tick = Rfc3339(slot.with_timezone(&job.schedule.time_zone()));
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
        RunOutcome::Buffered => tracing::info!(
            job = %job,
            tick = %tick,
            outcome = "buffered",
            "the previous run still holds the lock: the slot is buffered and runs when it ends"
        ),
        RunOutcome::SkippedPaused => tracing::info!(
            job = %job,
            tick = %tick,
            outcome = "skipped: paused",
            "the job is paused (lockctl resume or lock_scheduler::control::resume to resume it), skipping"
        ),
        // Asked for by the job's own policy: not a failure.
        RunOutcome::Replaced => tracing::info!(
            job = %job,
            tick = %tick,
            outcome = "replaced",
            duration_ms,
            "a later slot replaced this run: it was cancelled and its lock handed over"
        ),
        RunOutcome::SkippedMaxRuns => tracing::info!(
            job = %job,
            tick = %tick,
            outcome = "skipped: max runs",
            "the job has run its maximum number of times (max_runs), skipping"
        ),
        RunOutcome::TimedOut(limit) => tracing::warn!(
            job = %job,
            tick = %tick,
            outcome = "timed out",
            duration_ms,
            "the job ran longer than its maximum run time ({limit:?}): cancelled, its lock released"
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

/// A time shown as RFC 3339 when formatted.
struct Rfc3339(DateTime<chrono_tz::Tz>);

impl std::fmt::Display for Rfc3339 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.to_rfc3339())
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
