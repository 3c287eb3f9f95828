//! Checking a [`Job`] before it is scheduled: its name (the one rule of
//! [`schema::job_name_problem`]), schedule, lock and limits.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::error::SchedulerError;
use crate::job::{Job, JobLock};
use crate::job_metrics::JobMetrics;
use crate::schedule::Schedule;
use crate::schema;
use crate::shared::JobEntry;

/// Validates `job` against the names and lock keys already taken.
pub(crate) fn validate(
    job: Job,
    names: &HashSet<Arc<str>>,
    lock_keys: &HashSet<String>,
) -> Result<JobEntry, SchedulerError> {
    if let Some(problem) = schema::job_name_problem(&job.name) {
        return Err(SchedulerError::InvalidJob { job: job.name.clone(), reason: problem.into() });
    }
    if names.contains(job.name.as_str()) {
        return Err(SchedulerError::DuplicateJob { job: job.name });
    }
    let schedule = Schedule::new(&job.cron, job.time_zone.as_deref())
        .map_err(|source| SchedulerError::Schedule { job: job.name.clone(), source })?;
    let lock = validate_lock(&job)?;
    // The claimed tick is stored per lock key: two jobs on one key would take each
    // other's ticks and skip their own slots.
    if let Some(lock) = &lock
        && lock_keys.contains(&lock.key)
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
    Ok(JobEntry {
        name: job.name.into(),
        schedule,
        func: job.func,
        lock,
        catch_up: job.catch_up,
        max_run_time: job.max_run_time,
        warned_unlocked: AtomicBool::new(false),
        running: AtomicBool::new(false),
        may_be_held: AtomicBool::new(true),
        metrics: JobMetrics::default(),
    })
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
