//! Every job's state at a glance, for dashboards: [`job_summaries`] reads the job index once,
//! the pause flags in one `MGET` (per node), and each job's last run and failure counts in one
//! pipeline of two commands, the jobs' pipelines all sent at once. So a slow link costs a few
//! round trips whatever the number of jobs, and the Redis work is two commands per job plus a
//! few, whatever else Redis holds. Within a deadline: what came back in time is returned, and
//! the names of the jobs whose state did not are listed as missing.

use std::collections::HashSet;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use lock_core::LockClient;
use lock_core::redis;
use tokio::time::Instant;

use crate::command::query;
use crate::control::history::{HistoryEntry, StreamEntry, entry};
use crate::error::ControlError;
use crate::schema::{self, history_key};

/// A job's last history entry and its failure counts per hour, as one pipeline reads them.
type LastRead = (Vec<StreamEntry>, Vec<(i64, f64)>);

/// One job's state as [`job_summaries`] read it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobSummary {
    /// The job's name.
    pub job: String,
    /// Who paused it and when (the pause flag's value), if it is paused.
    pub paused: Option<String>,
    /// Failed and timed-out runs recorded in about the last day (see
    /// [`failures_last_day`](crate::control::failures_last_day)).
    pub failures_last_day: u64,
    /// Its latest recorded run.
    pub last: Option<HistoryEntry>,
}

/// What [`job_summaries`] read before its deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobSummaries {
    /// The jobs whose state was read, sorted by name (those with a history or a pause flag).
    pub jobs: Vec<JobSummary>,
    /// The jobs the index names whose state was not read before the deadline, sorted.
    pub missing: Vec<String>,
}

/// The state of every job the job index names (those with a history or a pause flag), read
/// until `deadline`: see the module's documentation.
pub async fn job_summaries(client: &LockClient, deadline: Instant) -> Result<JobSummaries, ControlError> {
    let names = crate::index::jobs(client).await?;
    if names.is_empty() {
        return Ok(JobSummaries { jobs: Vec::new(), missing: Vec::new() });
    }
    let mut pause_keys = Vec::with_capacity(names.len());
    for job in &names {
        pause_keys.push(schema::pause_key(job)?);
    }
    let flags = client
        .get_many(&pause_keys)
        .await
        .map_err(|source| ControlError::Redis { action: "reading pause flags", source })?;
    let since = schema::failure_hour(chrono::Utc::now().timestamp_millis()) - 24;
    let mut reads = FuturesUnordered::new();
    for (job, paused) in names.iter().cloned().zip(flags) {
        let mut pipe = redis::pipe();
        // One hash tag per job: one node, one round trip.
        pipe.cmd("XREVRANGE").arg(history_key(&job)?).arg("+").arg("-").arg("COUNT").arg(1);
        pipe.cmd("ZRANGE").arg(schema::failures_key(&job)?).arg(0).arg(-1).arg("WITHSCORES");
        reads.push(async move {
            let read: Result<LastRead, ControlError> = query(client, "reading a job's last run", &pipe).await;
            (job, paused, read)
        });
    }
    let mut jobs = Vec::with_capacity(names.len());
    let mut read_ok: HashSet<String> = HashSet::new();
    loop {
        let next = tokio::time::timeout_at(deadline, reads.next()).await;
        let Ok(Some((job, paused, read))) = next else { break };
        let (last, counts) = read?;
        read_ok.insert(job.clone());
        let last = last.into_iter().next().map(|(id, fields)| entry(id, fields));
        // Indexed, yet neither history nor flag: gone since (expired), not listed.
        if last.is_none() && paused.is_none() {
            continue;
        }
        let failures_last_day =
            counts.iter().filter(|(hour, _)| *hour >= since).map(|(_, n)| *n as u64).sum();
        jobs.push(JobSummary { job, paused, failures_last_day, last });
    }
    jobs.sort_by(|a, b| a.job.cmp(&b.job));
    drop(reads);
    let mut missing: Vec<String> = names.into_iter().filter(|n| !read_ok.contains(n)).collect();
    missing.sort();
    Ok(JobSummaries { jobs, missing })
}
