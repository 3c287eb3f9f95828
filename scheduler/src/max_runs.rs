//! [`Job::max_runs`](crate::job::Job::max_runs): the slots a job runs, counted cluster-wide in
//! [`schema::run_count_key`] by the run that claimed each (inside its locked section, so each
//! slot counts once); the run that finds the count past the limit does not run its body, and
//! every replica that learns the limit is reached stops firing the job.

use std::sync::atomic::Ordering;

use lock_core::{LockClient, redis};

use crate::command;
use crate::error::ControlError;
use crate::schema::{self, RUN_COUNT_TTL};
use crate::shared::JobEntry;

/// Counts a run of `job` (limit `limit`) about to start its body, in one round trip. `Ok(None)`:
/// it may run; `Ok(Some(count))`: the limit was reached before it (`count` is the count with
/// this one); the job is then marked done here, as it is after its last allowed run.
pub(crate) async fn count(
    client: &LockClient,
    job: &JobEntry,
    limit: u32,
) -> Result<Option<u64>, ControlError> {
    let key = schema::run_count_key(&job.name)?;
    let mut pipe = redis::pipe();
    pipe.cmd("INCR").arg(&key);
    pipe.cmd("PEXPIRE").arg(&key).arg(RUN_COUNT_TTL.as_millis() as u64).ignore();
    let (count,): (u64,) = command::query(client, "counting the job's runs", &pipe).await?;
    if count >= u64::from(limit) {
        reached(job, limit);
    }
    Ok((count > u64::from(limit)).then_some(count))
}

/// Marks `job` done on this replica: its timer fires it no more. Logged once per replica.
pub(crate) fn reached(job: &JobEntry, limit: u32) {
    if !job.max_runs_done.swap(true, Ordering::SeqCst) {
        tracing::info!(
            job = %job.name,
            max_runs = limit,
            "the job has run {limit} time(s) across its replicas (its max_runs): it fires no more"
        );
    }
}

/// How many of `job`'s slots have run, as counted against its maximum number of runs
/// ([`Job::max_runs`](crate::job::Job::max_runs)), read from Redis: `None` for a job without one
/// (or whose count expired). A count past the maximum includes the claims that found the limit
/// reached (one per replica at most).
pub async fn run_count(client: &LockClient, job: &str) -> Result<Option<u64>, ControlError> {
    let key = schema::run_count_key(job)?;
    let mut pipe = redis::pipe();
    pipe.cmd("GET").arg(&key);
    let (count,): (Option<u64>,) = command::query(client, "reading a job's run count", &pipe).await?;
    Ok(count)
}

/// Whether `job` has reached its maximum number of runs, as far as this replica knows.
pub(crate) fn done(job: &JobEntry) -> bool {
    job.max_runs_done.load(Ordering::Relaxed)
}
