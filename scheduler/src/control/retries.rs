//! The retries of failed runs waiting for their time, as every replica of a group sees them
//! ([`schema::retries_key`](crate::schema::retries_key)): what `lockctl` and the console show
//! as a job's next retry.

use chrono::{DateTime, Utc};
use lock_core::{LockClient, redis};

use crate::command::query;
use crate::error::ControlError;
use crate::schema::{self, job_name_problem};

/// A retry of a failed run, waiting in Redis for a replica of its group to take it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PendingRetry {
    /// The scheduler group whose replicas may take it.
    pub group: String,
    /// The job.
    pub job: String,
    /// The slot being retried (epoch ms).
    pub tick: i64,
    /// The attempt it will be (2 for the first retry).
    pub attempt: u32,
    /// When it is due.
    pub due: DateTime<Utc>,
}

/// The pending retries of `job` (of every group that has one), soonest first: see
/// [`all_pending_retries`].
pub async fn pending_retries(client: &LockClient, job: &str) -> Result<Vec<PendingRetry>, ControlError> {
    if let Some(problem) = job_name_problem(job) {
        return Err(ControlError::InvalidJob(problem));
    }
    let mut all = all_pending_retries(client).await?;
    all.retain(|retry| retry.job == job);
    Ok(all)
}

/// Every pending retry of every job, soonest first. The groups from their index
/// ([`schema::group_index_key`], one command, never a `SCAN`; a group stays there as long as
/// its retries, so they are found even while none of its replicas is up), then every group's
/// retry set in one round trip.
pub async fn all_pending_retries(client: &LockClient) -> Result<Vec<PendingRetry>, ControlError> {
    let mut found = Vec::new();
    let groups = crate::index::groups(client).await?;
    if groups.is_empty() {
        return Ok(found);
    }
    let mut pipe = redis::pipe();
    for group in &groups {
        pipe.cmd("ZRANGE").arg(schema::retries_key(group)).arg(0).arg(-1).arg("WITHSCORES");
    }
    let sets: Vec<Vec<(String, i64)>> = query(client, "reading pending retries", &pipe).await?;
    for (group, entries) in groups.iter().zip(sets) {
        for (member, due) in entries {
            let Some((name, tick, attempt)) = schema::parse_retry_member(&member) else { continue };
            let Some(due) = DateTime::from_timestamp_millis(due) else { continue };
            found.push(PendingRetry { group: group.to_owned(), job: name.to_owned(), tick, attempt, due });
        }
    }
    found.sort_by_key(|retry| retry.due);
    Ok(found)
}
