//! The retries of failed runs waiting for their time, as every replica of a group sees them
//! ([`schema::retries_key`](crate::schema::retries_key)): what `lockctl` and the console show
//! as a job's next retry.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use lock_core::{LockClient, redis};

use crate::command::{self, query};
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

/// Every pending retry of every job, soonest first. One `SCAN` for the groups' retry sets
/// (found even while none of a group's replicas is up), then one read per group.
pub async fn all_pending_retries(client: &LockClient) -> Result<Vec<PendingRetry>, ControlError> {
    let mut found = Vec::new();
    let keys = command::scan(client, "listing pending retries", &schema::retries_key("*")).await?;
    let groups: BTreeSet<&str> = keys.iter().filter_map(|k| schema::group_of_retries(k)).collect();
    for group in groups {
        let mut pipe = redis::pipe();
        pipe.cmd("ZRANGE").arg(schema::retries_key(group)).arg(0).arg(-1).arg("WITHSCORES");
        let (entries,): (Vec<(String, i64)>,) = query(client, "reading pending retries", &pipe).await?;
        for (member, due) in entries {
            let Some((name, tick, attempt)) = schema::parse_retry_member(&member) else { continue };
            let Some(due) = DateTime::from_timestamp_millis(due) else { continue };
            found.push(PendingRetry { group: group.to_owned(), job: name.to_owned(), tick, attempt, due });
        }
    }
    found.sort_by_key(|retry| retry.due);
    Ok(found)
}
