//! What the expansion of `#[scheduled]` calls, and nothing else. Not a stable API: applications
//! use [`Job`](crate::Job) and [`SchedulerBuilder`](crate::SchedulerBuilder).

use std::future::Future;
use std::sync::Arc;

use futures_util::FutureExt;

pub use inventory;
pub use lock_core::{LockOptions, OnLost};
pub use std::time::Duration;

pub use crate::declared::Registration;
pub use crate::job_args::{FromRun, MissingState, StateNeed, States};
pub use crate::overlap::Overlap;
pub use crate::retry::policy::RetryPolicy;
pub use crate::run_context::RunContext;
pub use crate::schedule::catch_up::CatchUp;
pub use crate::singleton::args::{FromSingleton, SingletonContext};
pub use crate::singleton::declared::SingletonRegistration;

use crate::job::{Job, JobBody, JobOutput, Timing};

/// A job as the attribute declares it (checked at compile time already; checked again when the
/// scheduler is built).
#[derive(Debug)]
pub struct Declaration {
    /// The job's name.
    pub name: &'static str,
    /// The cron expression, or `every <duration>`.
    pub schedule: &'static str,
    /// The time zone of a cron expression.
    pub zone: Option<&'static str>,
    /// An interval's offset.
    pub offset: Option<Duration>,
    /// The lock the scheduler takes around it (`None`: the fn is `#[distributed_lock]`ed and
    /// takes its own).
    pub lock: Option<&'static str>,
    /// Options of that lock.
    pub lock_options: Option<LockOptions>,
    /// What happens to a run whose lock is lost.
    pub on_lost: Option<OnLost>,
    /// The catch-up policy.
    pub catch_up: Option<CatchUp>,
    /// The maximum run time.
    pub max_run_time: Option<Duration>,
    /// How failed runs are retried.
    pub retry: Option<RetryPolicy>,
    /// How many slots failed for good in a row pause the job.
    pub pause_after_failures: Option<u32>,
    /// What a slot does while the previous run goes on.
    pub overlap: Option<Overlap>,
    /// The jitter window.
    pub jitter: Option<Duration>,
    /// No slot before this (epoch ms, checked at compile time).
    pub start_at_ms: Option<i64>,
    /// No slot after this (epoch ms, checked at compile time).
    pub end_at_ms: Option<i64>,
    /// Runs after which the job stops firing.
    pub max_runs: Option<u32>,
}

/// The job of `declaration`, running `body` (which extracts the fn's arguments and calls it) at
/// each slot. `needs`: the state each argument takes.
pub fn job<F, Fut>(declaration: Declaration, needs: &[fn() -> Option<StateNeed>], body: F) -> Job
where
    F: Fn(RunContext, &States) -> Result<Fut, MissingState> + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: JobOutput,
{
    let body = Arc::new(move |run: RunContext, states: &States| match body(run, states) {
        Ok(run) => run.map(JobOutput::into_job_result).boxed(),
        Err(missing) => std::future::ready(Err(missing.to_string())).boxed(),
    });
    let needs = needs.iter().filter_map(|need| need()).collect();
    let timing = Timing::Text {
        schedule: declaration.schedule.to_owned(),
        zone: declaration.zone.map(str::to_owned),
        offset: declaration.offset,
    };
    let mut job = Job::from_body(declaration.name.to_owned(), timing, JobBody::NeedsState { body, needs });
    if let Some(key) = declaration.lock {
        job = job.lock(key);
    }
    if let Some(options) = declaration.lock_options {
        job = job.lock_options(options);
    }
    if let Some(on_lost) = declaration.on_lost {
        job = job.on_lost(on_lost);
    }
    if let Some(catch_up) = declaration.catch_up {
        job = job.catch_up(catch_up);
    }
    if let Some(limit) = declaration.max_run_time {
        job = job.max_run_time(limit);
    }
    if let Some(policy) = declaration.retry {
        job = job.retry(policy);
    }
    if let Some(failures) = declaration.pause_after_failures {
        job = job.pause_after_failures(failures);
    }
    if let Some(overlap) = declaration.overlap {
        job = job.overlap(overlap);
    }
    if let Some(window) = declaration.jitter {
        job = job.jitter(window);
    }
    // In range: the macro parsed them from RFC 3339 text.
    if let Some(start) = declaration.start_at_ms.and_then(chrono::DateTime::from_timestamp_millis) {
        job = job.start_at(start);
    }
    if let Some(end) = declaration.end_at_ms.and_then(chrono::DateTime::from_timestamp_millis) {
        job = job.end_at(end);
    }
    if let Some(runs) = declaration.max_runs {
        job = job.max_runs(runs);
    }
    job
}

/// A job of `function` (its path), for a registration and for `<fn>::job()`.
pub fn from_function(mut job: Job, function: &'static str) -> Job {
    job.function = Some(function);
    job
}

/// The singleton `name`, running `body` (which extracts the fn's arguments and calls it) each
/// time this replica is elected. `needs`: the state each argument takes.
pub fn singleton<F, Fut>(
    name: &'static str,
    election: Option<&'static str>,
    restart_delay: Option<Duration>,
    needs: &[fn() -> Option<StateNeed>],
    body: F,
) -> crate::singleton::Singleton
where
    F: Fn(SingletonContext, &States) -> Result<Fut, MissingState> + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: JobOutput,
{
    let body: crate::singleton::Body = Arc::new(move |context: SingletonContext, states: &States| {
        body(context, states).map(|run| run.map(JobOutput::into_job_result).boxed())
    });
    let needs = needs.iter().filter_map(|need| need()).collect();
    let mut singleton = crate::singleton::Singleton::from_body(name.to_owned(), body, needs);
    if let Some(key) = election {
        singleton = singleton.election(key);
    }
    if let Some(delay) = restart_delay {
        singleton = singleton.restart_delay(delay);
    }
    singleton
}

/// A singleton of `function` (its path), for a registration and for `<fn>::singleton()`.
pub fn singleton_of_function(
    mut singleton: crate::singleton::Singleton,
    function: &'static str,
) -> crate::singleton::Singleton {
    singleton.function = Some(function);
    singleton
}
