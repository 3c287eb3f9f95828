//! Checking a [`Job`] before it is scheduled: its name (the one rule of
//! [`schema::job_name_problem`]), schedule (overrides applied), lock, limits and state.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize};

use crate::error::SchedulerError;
use crate::job::{Job, JobBody, JobFn, JobLock};
use crate::job_args::States;
use crate::job_metrics::JobMetrics;
use crate::overrides::{Overrides, resolve};
use crate::schema;
use crate::shared::JobEntry;

/// What a job is checked against: the jobs already in (name -> where it comes from), their lock
/// keys, the schedule overrides and the state given to the scheduler.
pub(crate) struct Context<'a> {
    pub(crate) names: &'a HashMap<Arc<str>, Option<&'static str>>,
    pub(crate) lock_keys: &'a HashSet<String>,
    pub(crate) overrides: &'a Overrides,
    pub(crate) states: &'a Arc<States>,
}

/// Where a job comes from, in messages.
pub(crate) fn origin_of(function: Option<&'static str>) -> String {
    match function {
        Some(function) => format!("`{function}`"),
        None => "a job built in code".to_owned(),
    }
}

/// Validates `job` in `cx`. `None`: its schedule was turned off (`-`).
pub(crate) fn validate(job: Job, cx: &Context<'_>) -> Result<Option<JobEntry>, SchedulerError> {
    if let Some(problem) = schema::job_name_problem(&job.name) {
        return Err(SchedulerError::InvalidJob { job: job.name.clone(), reason: problem.into() });
    }
    if let Some(first) = cx.names.get(job.name.as_str()) {
        return Err(SchedulerError::DuplicateJob {
            job: job.name.clone(),
            first: origin_of(*first),
            second: origin_of(job.function),
        });
    }
    let Some((schedule, origin)) = resolve(&job, cx.overrides)? else {
        tracing::info!(job = %job.name, "job turned off by its schedule override (`-`): not scheduled");
        return Ok(None);
    };
    let func = ready(&job, cx.states)?;
    let lock = validate_lock(&job)?;
    // The claimed tick is stored per lock key: two jobs on one key would take each
    // other's ticks and skip their own slots.
    if let Some(lock) = &lock
        && cx.lock_keys.contains(&lock.key)
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
    if let Some(problem) = job.retry.as_ref().and_then(|policy| policy.problem()) {
        return Err(SchedulerError::InvalidJob { job: job.name.clone(), reason: problem });
    }
    if job.overlap != crate::overlap::Overlap::Skip && lock.is_none() {
        return Err(SchedulerError::InvalidJob {
            job: job.name.clone(),
            reason: format!(
                "overlap {:?} needs the scheduler to know the job's lock: call `.lock(key)` (a fn annotated \
                 with #[distributed_lock] takes its own, which only `Overlap::Skip` works with)",
                job.overlap
            ),
        });
    }
    if job.jitter > std::time::Duration::from_secs(24 * 60 * 60) {
        return Err(SchedulerError::InvalidJob {
            job: job.name.clone(),
            reason: format!("the jitter window is {:?}: give at most a day", job.jitter),
        });
    }
    if let (Some(start), Some(end)) = (job.start_at, job.end_at)
        && end < start
    {
        return Err(SchedulerError::InvalidJob {
            job: job.name.clone(),
            reason: format!("its end time ({end}) is before its start time ({start}): swap or fix them"),
        });
    }
    if job.pause_after_failures == Some(0) {
        return Err(SchedulerError::InvalidJob {
            job: job.name.clone(),
            reason: "pause_after_failures is 0: give the number of failed slots in a row (1 or more) that \
                     pause the job"
                .into(),
        });
    }
    if job.max_runs == Some(0) {
        return Err(SchedulerError::InvalidJob {
            job: job.name.clone(),
            reason: "max_runs is 0: give the number of runs (1 or more) after which the job stops firing"
                .into(),
        });
    }
    Ok(Some(JobEntry {
        name: job.name.into(),
        function: job.function,
        schedule,
        origin,
        func,
        lock,
        catch_up: job.catch_up,
        max_run_time: job.max_run_time,
        retry: job.retry,
        pause_after_failures: job.pause_after_failures,
        overlap: job.overlap,
        jitter: job.jitter,
        start_at: job.start_at,
        end_at: job.end_at,
        warned_unlocked: AtomicBool::new(false),
        running: AtomicUsize::new(0),
        may_be_held: AtomicBool::new(true),
        metrics: JobMetrics::default(),
        replace: tokio::sync::watch::Sender::new(i64::MIN),
        max_runs: job.max_runs,
        max_runs_done: AtomicBool::new(false),
    }))
}

/// The job's body, given the state it takes (every type of it checked to be there).
fn ready(job: &Job, states: &Arc<States>) -> Result<JobFn, SchedulerError> {
    match &job.body {
        JobBody::Ready(func) => Ok(func.clone()),
        JobBody::NeedsState { body, needs } => {
            if let Some(missing) = states.missing(needs).first() {
                return Err(SchedulerError::MissingState {
                    job: job.name.clone(),
                    function: origin_of(job.function),
                    type_name: missing.type_name,
                });
            }
            let (body, states) = (body.clone(), states.clone());
            Ok(Arc::new(move |run| body(run, &states)))
        }
    }
}

fn validate_lock(job: &Job) -> Result<Option<JobLock>, SchedulerError> {
    let invalid = |reason: String| SchedulerError::InvalidJob { job: job.name.clone(), reason };
    let Some(key) = &job.lock_key else {
        if job.lock_options.is_some() {
            return Err(invalid("lock options are set but no lock key: call `.lock(key)` as well".into()));
        }
        return Ok(None);
    };
    let invalid_lock = |source| SchedulerError::InvalidLock { job: job.name.clone(), source };
    lock_core::validate_key(key).map_err(invalid_lock)?;
    let mut options = job.lock_options.clone().unwrap_or_default();
    if let Some(on_lost) = job.on_lost {
        options = options.on_lost(on_lost);
    }
    options.validate().map_err(invalid_lock)?;
    Ok(Some(JobLock { key: key.clone(), options }))
}
