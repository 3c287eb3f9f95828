//! What happened to each slot, as logged and as broadcast to
//! [`subscribe`](crate::scheduler::Scheduler::subscribe)rs.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// How one slot of one job went on this replica.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunOutcome {
    /// The job ran here (and succeeded).
    Ran,
    /// Another instance held the job's lock, so this replica skipped the slot.
    SkippedHeld,
    /// The tick had already been claimed (run) by another instance.
    SkippedTickDone,
    /// This replica's previous run of the job was still going; the slot was skipped.
    SkippedStillRunning,
    /// The job's previous run was still going (here or elsewhere): the slot was buffered, and
    /// runs right after that run ends ([`Overlap::BufferOne`](crate::overlap::Overlap::BufferOne)).
    Buffered,
    /// The job was paused (see [`control::pause`](crate::control::pause::pause)); every
    /// replica skips its slots until it is resumed.
    SkippedPaused,
    /// This many slots, the latest of which is the report's slot, could not run on time and
    /// were not run (see [`CatchUp`](crate::schedule::catch_up::CatchUp)).
    Missed(u64),
    /// The job ran and failed: it returned an error or panicked, or its lock could not be taken
    /// or was lost. The message says which.
    Failed(String),
    /// The job was still running when the shutdown grace period ended and was cancelled; its
    /// lock was released.
    Cancelled,
    /// The job ran longer than its maximum run time ([`Job::max_run_time`](crate::job::Job::max_run_time),
    /// carried here) and was cancelled; its lock was released. The next slot runs as usual.
    TimedOut(Duration),
    /// The run was stopped by a later slot of its job
    /// ([`Overlap::Replace`](crate::overlap::Overlap::Replace)): cancelled as for a lost lock,
    /// its lock handed to the later slot's run.
    Replaced,
    /// The job had already run its maximum number of times across its replicas
    /// ([`Job::max_runs`](crate::job::Job::max_runs)): this slot did not run, and this replica
    /// fires the job no more.
    SkippedMaxRuns,
}

impl RunOutcome {
    /// The short label used in logs: `ran`, `skipped: held`, `skipped: tick done`,
    /// `skipped: still running`, `buffered`, `skipped: paused`, `missed`, `failed`,
    /// `cancelled`, `timed out`, `replaced`, `skipped: max runs`.
    pub fn label(&self) -> &'static str {
        match self {
            RunOutcome::Ran => "ran",
            RunOutcome::SkippedHeld => "skipped: held",
            RunOutcome::SkippedTickDone => "skipped: tick done",
            RunOutcome::SkippedStillRunning => "skipped: still running",
            RunOutcome::Buffered => "buffered",
            RunOutcome::SkippedPaused => "skipped: paused",
            RunOutcome::Missed(_) => "missed",
            RunOutcome::Failed(_) => "failed",
            RunOutcome::Cancelled => "cancelled",
            RunOutcome::TimedOut(_) => "timed out",
            RunOutcome::Replaced => "replaced",
            RunOutcome::SkippedMaxRuns => "skipped: max runs",
        }
    }

    /// The outcome as a Prometheus label value: `ran`, `skipped_held`, `skipped_tick_done`,
    /// `skipped_still_running`, `buffered`, `skipped_paused`, `missed`, `failed`, `cancelled`, `timed_out`,
    /// `replaced`, `skipped_max_runs`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            RunOutcome::Ran => "ran",
            RunOutcome::SkippedHeld => "skipped_held",
            RunOutcome::SkippedTickDone => "skipped_tick_done",
            RunOutcome::SkippedStillRunning => "skipped_still_running",
            RunOutcome::Buffered => "buffered",
            RunOutcome::SkippedPaused => "skipped_paused",
            RunOutcome::Missed(_) => "missed",
            RunOutcome::Failed(_) => "failed",
            RunOutcome::Cancelled => "cancelled",
            RunOutcome::TimedOut(_) => "timed_out",
            RunOutcome::Replaced => "replaced",
            RunOutcome::SkippedMaxRuns => "skipped_max_runs",
        }
    }

    /// Whether the job's body ran on this replica for this slot (successfully or not).
    pub fn ran_here(&self) -> bool {
        matches!(
            self,
            RunOutcome::Ran
                | RunOutcome::Failed(_)
                | RunOutcome::Cancelled
                | RunOutcome::TimedOut(_)
                | RunOutcome::Replaced
        )
    }
}

impl fmt::Display for RunOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunOutcome::Missed(n) => write!(f, "missed ({n} slots)"),
            RunOutcome::Failed(error) => write!(f, "failed: {error}"),
            RunOutcome::TimedOut(limit) => write!(f, "timed out (ran longer than {limit:?})"),
            other => f.write_str(other.label()),
        }
    }
}

/// One slot of one job on this replica: sent to every [`subscribe`](crate::scheduler::Scheduler::subscribe)r
/// when the slot is settled.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunReport {
    /// The job's name.
    pub job: String,
    /// The slot (scheduled fire time).
    pub slot: DateTime<Utc>,
    /// The slot in epoch milliseconds: the tick claimed in Redis.
    pub tick: i64,
    /// This replica's instance id.
    pub instance: String,
    /// What happened.
    pub outcome: RunOutcome,
    /// When the scheduler's clock said the slot fired here.
    pub fired_at: DateTime<Utc>,
    /// How long after its slot its body started (the scheduler's clock), its jitter, the claim
    /// grace a replica that was not preferred waited, and any wait for the lock included; for a
    /// slot whose body did not start, how long after its slot it fired (`fired_at - slot`).
    pub lateness: Duration,
    /// The delay the job's jitter window ([`Job::jitter`](crate::job::Job::jitter)) gave this
    /// slot: the same on every replica. The start lag metric is `lateness - jitter`.
    pub jitter: Duration,
    /// How long the run took (lock, job and release); zero for slots that did not start a run.
    pub duration: Duration,
    /// Who asked for it, for a manual ("run now") run; `slot` is then the time of the request.
    pub manual_by: Option<String>,
    /// Which attempt at the slot this was: 1 for its first run, 2 and up for its retries
    /// ([`Job::retry`](crate::job::Job::retry)).
    pub attempt: u32,
    /// When the next attempt is due, if this one failed and another was scheduled.
    pub retry_at: Option<DateTime<Utc>>,
    /// Whether this attempt failed and was the last one its retry policy allows (failed for
    /// good).
    pub gave_up: bool,
}

/// What [`SchedulerHandle::shutdown`](crate::handle::SchedulerHandle::shutdown) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Jobs whose running run finished within the grace period.
    pub finished: Vec<String>,
    /// Jobs whose run was cancelled at the end of the grace period, or when the shutdown was
    /// forced (their locks released).
    pub cancelled: Vec<String>,
    /// Whether the shutdown was cut short (a second signal, or the `force` future of
    /// [`SchedulerHandle::shutdown_forced_by`](crate::handle::SchedulerHandle::shutdown_forced_by)).
    pub forced: bool,
}
