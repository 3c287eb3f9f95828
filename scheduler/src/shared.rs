//! What a scheduler's timer, runs and handle share: the validated jobs ([`JobEntry`]) and the
//! scheduler-wide state ([`Shared`]) with the reports and history records every run ends with.

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use lock_core::LockClient;
use tokio::sync::{broadcast, mpsc};

use crate::clock::Clock;
use crate::job::{JobFn, JobLock};
use crate::job_args::States;
use crate::job_metrics::JobMetrics;
use crate::members::Members;
use crate::overlap::Overlap;
use crate::overrides::{Overrides, ScheduleOrigin};
use crate::recorder::{self, Recorder};
use crate::report::{RunOutcome, RunReport};
use crate::retry::policy::RetryPolicy;
use crate::running::Running;
use crate::schedule::Schedule;
use crate::schedule::catch_up::CatchUp;

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
    /// Told when the registry changes, so the run-now taker rewrites the group's job registry
    /// in Redis at once rather than at its next look.
    pub(crate) registry_changed: tokio::sync::Notify,
    pub(crate) recorder: Recorder,
    /// Asks the timer to re-read a job's last claimed tick (set when the timer starts).
    pub(crate) resync: std::sync::OnceLock<mpsc::UnboundedSender<Arc<str>>>,
    /// The timer's commands (set when it starts): runs started outside it are adopted through
    /// it, so that shutdown waits for them.
    pub(crate) commands: std::sync::OnceLock<mpsc::UnboundedSender<Command>>,
    /// Set once the scheduler is told to stop: no run starts outside the timer from then on
    /// ([`start_outside_timer`](Self::start_outside_timer)).
    pub(crate) stopping: Mutex<bool>,
    pub(crate) reports: broadcast::Sender<RunReport>,
    /// The schedule overrides and state given to the builder, for jobs added at run time too.
    pub(crate) overrides: Overrides,
    pub(crate) states: Arc<States>,
    /// When the timer last turned and the last announcement reached Redis (the probes' view).
    pub(crate) beats: Arc<crate::health::Beats>,
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

    /// Starts a run outside the timer (a buffered slot, a taken retry, backfill slot or "run
    /// now" request) with `spawn` and hands it to the timer, which waits for it (or cancels
    /// it) at shutdown; without a timer it goes on detached. Once the scheduler is stopping,
    /// nothing starts and `false` is returned. Under the lock [`stop_starts`](Self::stop_starts)
    /// takes: a run started is in the timer's channel before the timer is told to stop, so the
    /// shutdown waits for it and counts it.
    pub(crate) fn start_outside_timer(&self, job: &Arc<JobEntry>, spawn: impl FnOnce() -> Running) -> bool {
        let stopping = self.stopping.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if *stopping {
            return false;
        }
        let run = spawn();
        if let Some(tx) = self.commands.get() {
            let _ = tx.send(Command::Adopt(job.clone(), run));
        }
        true
    }

    /// No run starts outside the timer from now on (the scheduler is stopping).
    pub(crate) fn stop_starts(&self) {
        *self.stopping.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = true;
    }

    /// Whether the scheduler was told to stop.
    pub(crate) fn is_stopping(&self) -> bool {
        *self.stopping.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Changes the registry under its lock.
    pub(crate) fn with_registry<T>(&self, f: impl FnOnce(&mut Vec<Arc<JobEntry>>) -> T) -> T {
        let changed = match self.registry.lock() {
            Ok(mut jobs) => f(&mut jobs),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        };
        self.registry_changed.notify_one();
        changed
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
        self.report_run(job, slot, fired_at, outcome, duration, Origin::Slot(&Attempt::nth(1)));
    }

    /// As [`report`](Self::report), for any attempt at a slot, or a manual run.
    pub(crate) fn report_run(
        &self,
        job: &JobEntry,
        slot: DateTime<Utc>,
        fired_at: DateTime<Utc>,
        outcome: RunOutcome,
        duration: Duration,
        origin: Origin<'_>,
    ) {
        let first = Attempt::nth(1);
        let (attempt, manual_by) = match origin {
            Origin::Slot(attempt) => (attempt, None),
            Origin::Manual(by) => (&first, Some(by)),
        };
        // To the body's start when it started: the claim grace and any wait for the lock count.
        let lateness = (attempt.began.unwrap_or(fired_at) - slot).to_std().unwrap_or_default();
        // A slot's own jitter delays it on purpose: not part of its start lag.
        let jitter = if manual_by.is_none() && attempt.number <= 1 {
            job.jitter(slot).to_std().unwrap_or_default()
        } else {
            Duration::ZERO
        };
        // A retry starts its backoff after its slot, not late: its start lag is not the slot's.
        let lag = (attempt.number <= 1).then_some(lateness.saturating_sub(jitter));
        job.metrics.record(&job.name, &outcome, duration, lag);
        if attempt.gave_up {
            job.metrics.gave_up(&job.name);
        } else if attempt.retry_at.is_some() {
            job.metrics.retry_scheduled(&job.name);
        }
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
            manual_by: manual_by.map(str::to_owned),
            attempt: attempt.number,
            jitter,
            retry_at: attempt.retry_at,
            gave_up: attempt.gave_up,
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
        self.record_attempt(job, slot, outcome, duration, &Attempt::nth(1)).await;
    }

    /// As [`record`](Self::record), for `attempt` at the slot.
    pub(crate) async fn record_attempt(
        &self,
        job: &JobEntry,
        slot: DateTime<Utc>,
        outcome: &RunOutcome,
        duration: Duration,
        attempt: &Attempt,
    ) {
        if recorder::recorded(outcome) {
            self.recorder
                .record(recorder::Record {
                    job: job.name.clone(),
                    tick: slot.timestamp_millis(),
                    instance: self.instance.clone(),
                    outcome: outcome.clone(),
                    duration,
                    manual: None,
                    attempt: job.retry.is_some().then_some(attempt.number),
                    retry_at: attempt.retry_at.map(|at| at.timestamp_millis()),
                    gave_up: attempt.gave_up,
                    backfill: attempt.backfill,
                    // A success breaks a run of failed slots (see `failures`).
                    success_kept: job
                        .pause_after_failures
                        .filter(|_| *outcome == RunOutcome::Ran)
                        .map(crate::failures::kept),
                })
                .await;
        }
    }

    /// Appends a manual run to the job's history, whatever its outcome (a skipped manual run
    /// is reported too: someone asked for it).
    pub(crate) async fn record_manual(
        &self,
        job: &JobEntry,
        manual: &Manual,
        outcome: &RunOutcome,
        duration: Duration,
    ) {
        self.recorder
            .record(recorder::Record {
                job: job.name.clone(),
                tick: manual.at_ms,
                instance: self.instance.clone(),
                outcome: outcome.clone(),
                duration,
                manual: Some((manual.id.clone(), manual.by.clone())),
                attempt: None,
                retry_at: None,
                gave_up: false,
                backfill: false,
                success_kept: None,
            })
            .await;
    }
}

/// What a reported run was.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Origin<'a> {
    /// An attempt at a slot.
    Slot(&'a Attempt),
    /// A manual ("run now") run, asked for by this.
    Manual(&'a str),
}

/// Which attempt at its slot a run was, and what its failure led to.
#[derive(Debug, Clone, Default)]
pub(crate) struct Attempt {
    /// 1 for the slot's first run.
    pub(crate) number: u32,
    /// When the next attempt is due, if one was scheduled.
    pub(crate) retry_at: Option<DateTime<Utc>>,
    /// It failed, and was the last attempt allowed.
    pub(crate) gave_up: bool,
    /// A backfill run of a past slot ([`control::backfill`](crate::control::backfill::backfill)).
    pub(crate) backfill: bool,
    /// When its body started (the scheduler's clock), if it did: its lateness is measured to
    /// this, so waits before it (the claim grace, a held lock) count.
    pub(crate) began: Option<DateTime<Utc>>,
}

impl Attempt {
    /// Attempt `number`, nothing decided yet.
    pub(crate) fn nth(number: u32) -> Attempt {
        Attempt { number, ..Attempt::default() }
    }
}

/// A "run now" request this replica took.
#[derive(Debug, Clone)]
pub(crate) struct Manual {
    pub(crate) id: Arc<str>,
    pub(crate) by: Arc<str>,
    /// When it was requested, epoch ms.
    pub(crate) at_ms: i64,
}

impl JobEntry {
    /// How long after `slot` it fires: a pure function of the job's name and the slot, in
    /// `[0, window)`, whole milliseconds, so every replica computes the same one and the claim
    /// still races fairly.
    pub(crate) fn jitter(&self, slot: DateTime<Utc>) -> chrono::TimeDelta {
        if self.jitter.is_zero() {
            return chrono::TimeDelta::zero();
        }
        let unit = crate::spread::unit(&self.name, &[slot.timestamp_millis()]);
        chrono::TimeDelta::milliseconds((self.jitter.as_millis() as f64 * unit) as i64)
    }
}

/// A validated job.
pub(crate) struct JobEntry {
    pub(crate) name: Arc<str>,
    /// The `#[scheduled]` function that declared it, if one did.
    pub(crate) function: Option<&'static str>,
    /// The schedule in force, and where it came from (code, an override).
    pub(crate) schedule: Schedule,
    pub(crate) origin: ScheduleOrigin,
    pub(crate) func: JobFn,
    pub(crate) lock: Option<JobLock>,
    pub(crate) catch_up: CatchUp,
    pub(crate) max_run_time: Option<Duration>,
    /// How its failed runs are retried (`None`: they are not).
    pub(crate) retry: Option<RetryPolicy>,
    /// What its slots do while its previous run goes on.
    pub(crate) overlap: Overlap,
    /// The window its slots' starts are spread over ([`Job::jitter`](crate::job::Job::jitter)).
    pub(crate) jitter: Duration,
    /// No slot before this runs ([`Job::start_at`](crate::job::Job::start_at)).
    pub(crate) start_at: Option<DateTime<Utc>>,
    /// No slot after this runs ([`Job::end_at`](crate::job::Job::end_at)).
    pub(crate) end_at: Option<DateTime<Utc>>,
    /// How many slots failed for good in a row pause it (`None`: never).
    pub(crate) pause_after_failures: Option<u32>,
    /// Whether the "this job takes no lock" warning was logged (so: it takes none).
    pub(crate) warned_unlocked: AtomicBool,
    /// How many runs of the job are in flight on this replica: more than one only under
    /// `Overlap::Allow`, whose runs overlap (and `Overlap::Replace`, while a slot waits for the
    /// run it replaces) (a flag would be cleared by the first to end while
    /// another still runs, and shutdown would then cancel that one as never started).
    pub(crate) running: AtomicUsize,
    /// Whether the job's lock may still be held at its next slot (deferred slots then check
    /// it): true until this replica runs it in less than the claim grace, true again when it
    /// sees the lock held or runs it longer. (A claimed tick proves nothing: the tick is
    /// checked before the lock.)
    pub(crate) may_be_held: AtomicBool,
    /// What its runs record through the `metrics` facade.
    pub(crate) metrics: JobMetrics,
    /// The latest slot (epoch ms) that asked its runs of earlier slots to stop
    /// ([`Overlap::Replace`]): its runs watch it.
    pub(crate) replace: tokio::sync::watch::Sender<i64>,
    /// Its maximum number of runs across the replicas ([`Job::max_runs`](crate::job::Job::max_runs)).
    pub(crate) max_runs: Option<u32>,
    /// Whether this replica learnt that the job reached `max_runs`: it fires it no more.
    pub(crate) max_runs_done: AtomicBool,
}

/// Changes to the set of jobs of a running scheduler.
pub(crate) enum Command {
    /// Schedule a (validated) job from now on.
    Add(Arc<JobEntry>),
    /// Stop scheduling a job; its run in flight, if any, goes on (and is waited for at
    /// shutdown).
    Remove(Arc<str>),
    /// Keep track of a run started outside the schedule (a "run now" request this replica
    /// took), so that shutdown waits for it, or cancels it, like a slot's run.
    Adopt(Arc<JobEntry>, Running),
}
