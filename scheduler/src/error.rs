//! The scheduler's errors. Like every error of the workspace, a message says what failed at
//! its own level and leaves the cause to [`source`](std::error::Error::source): print the
//! whole chain (anyhow's `{:#}`, or [`lock_core::ErrorChain`]) and each cause appears once.

use lock_core::LockError;

use lock_schedule::ScheduleError;

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
    /// The job is misconfigured (its name, limits, or a lock key another job uses).
    #[error("job `{job}`: {reason}")]
    InvalidJob {
        /// The job's name.
        job: String,
        /// What is wrong.
        reason: String,
    },
    /// The job's lock key or lock options are invalid.
    #[error("job `{job}`: invalid lock")]
    InvalidLock {
        /// The job's name.
        job: String,
        /// What is wrong with the key or the options.
        #[source]
        source: LockError,
    },
    /// Two jobs have the same name.
    #[error(
        "two jobs are named `{job}` ({first} and {second}): job names must be unique (they identify runs \
         in logs, reports and Redis); give one a `name`"
    )]
    DuplicateJob {
        /// The repeated name.
        job: String,
        /// Where the first one comes from: its `#[scheduled]` function, or a job built in code.
        first: String,
        /// Where the second one comes from.
        second: String,
    },
    /// A job takes state the scheduler was not given.
    #[error(
        "job `{job}` ({function}) takes `State<{type_name}>`, but no `{type_name}` was given: call \
         `SchedulerBuilder::state(value)` with one"
    )]
    MissingState {
        /// The job's name.
        job: String,
        /// Its function (or "a job built in code").
        function: String,
        /// The type of state it takes.
        type_name: &'static str,
    },
    /// An override of a job's schedule (from the environment or the builder) does not parse.
    #[error("job `{job}`: the schedule in {variable} is invalid")]
    Override {
        /// The job's name.
        job: String,
        /// Where the override came from: the environment variable, or
        /// `SchedulerBuilder::schedule_override`.
        variable: String,
        /// What is wrong with it.
        #[source]
        source: ScheduleError,
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
    /// Redis did not answer within the [start deadline](crate::SchedulerBuilder::start_deadline).
    #[error("redis did not answer within the scheduler's start deadline ({waited:?})")]
    RedisUnavailable {
        /// The deadline that passed.
        waited: std::time::Duration,
        /// The last error of the announcement to the group.
        #[source]
        source: ControlError,
    },
}

// Defined here rather than in `control`, which re-exports it as its public home: the
// scheduler's own Redis commands (`command`: member announcements, reads of the claimed ticks)
// and the schema's job-name rule fail with it too, and both sit below `control`.

/// A failed admin call (the [`control`](crate::control) module's pause, history, "run now",
/// ...), or a failed Redis command of the scheduler's own.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// The job name cannot name a job.
    #[error("invalid job name: {0}")]
    InvalidJob(&'static str),
    /// The lock client's connection failed: Redis failed or refused the command (a wrong
    /// password, an ACL), or no connection could be had. The source, lock-core's error, says
    /// which (its messages never hold the URL's password).
    #[error("redis failed while {action}")]
    Redis {
        /// What was being done.
        action: &'static str,
        /// The lock client's error.
        #[source]
        source: LockError,
    },
    /// The command got no answer in time.
    #[error("no answer from redis while {0}")]
    Unavailable(&'static str),
    /// "Run now" for a job that no scheduler group has registered.
    #[error(
        "no scheduler replica has a job named `{job}` (is the name right, and is its scheduler running?)"
    )]
    UnknownJob {
        /// The job asked for.
        job: String,
    },
    /// "Run now" for a job whose scheduler group has no live replica.
    #[error("no live scheduler replica can run `{job}`: its group's replicas are all gone")]
    NoLiveReplica {
        /// The job asked for.
        job: String,
    },
    /// "Run now" while an earlier request for the job is still waiting for a replica.
    #[error("a run of `{job}` was already requested and not yet taken by a replica")]
    RunPending {
        /// The job asked for.
        job: String,
    },
    /// A backfill over a range that is empty, backwards, in the future or too long.
    #[error("cannot backfill `{job}`: {reason}")]
    InvalidBackfill {
        /// The job asked for.
        job: String,
        /// What is wrong with the range, and what to give instead.
        reason: String,
    },
    /// An argument of an admin call that cannot be what it names (a history entry's id, an
    /// idempotency key).
    #[error("invalid {what}: {reason}")]
    InvalidArgument {
        /// What the argument names.
        what: &'static str,
        /// What is wrong with it, and what to give instead.
        reason: String,
    },
    /// No replica took the "run now" request in time; it was withdrawn, nothing ran.
    #[error("no replica took the request to run `{job}` within {within:?}; it was withdrawn and nothing ran")]
    NotTaken {
        /// The job asked for.
        job: String,
        /// How long the request waited.
        within: std::time::Duration,
    },
}
