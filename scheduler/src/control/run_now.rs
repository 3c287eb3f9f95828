//! "Run now": a request in Redis that exactly one live replica of the job's group takes and
//! runs once, through the job's lock ([`run_now`], `lockctl run`, the console's run button).
//!
//! Each replica keeps its jobs in its group's registry ([`schema::jobs_key`]). A request is
//! stored in [`schema::runs_key`] and announced on the group's channel
//! ([`schema::group_channel`]) by the same script, so the replicas hear of it at once; they
//! also look every [`RUN_POLL`](schema::RUN_POLL), for a message lost. A request is taken by
//! an atomic compare-and-delete (`take_run.lua`), so at most one replica runs it however many
//! see it. A replica that takes a request and then dies loses it: at most once, as the slots'
//! runs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use lock_core::{LockClient, redis};

use crate::command::{self, query};
use crate::error::ControlError;
use crate::schema::{self, REQUEST_RUN, RUN_PICKUP, RUN_REQUEST_TTL, TAKE_RUN, job_name_problem};

/// A "run now" request, as [`run_now`] and [`request_run`] return it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunRequest {
    /// The request's id: the `request` of the history entry of the run it caused.
    pub id: String,
    /// The job.
    pub job: String,
    /// The scheduler group whose replica takes it.
    pub group: String,
    /// Who asked (free text: an operator's name, `lockctl`, the console).
    pub by: String,
    /// When it was asked for (this process's clock).
    pub requested_at: DateTime<Utc>,
    /// The request as stored in Redis.
    pub(crate) stored: String,
}

/// Asks a live replica of `job`'s scheduler group to run it once now, and waits (up to
/// [`RUN_PICKUP`]) until one replica took the request. The run then goes as a slot's run
/// would, under the job's lock: skipped if the job is running (here or elsewhere), recorded
/// in the job's history with `manual_by = by`, whether or not the job is paused.
///
/// Errors: [`ControlError::UnknownJob`] when no group has the job,
/// [`ControlError::NoLiveReplica`] when its group has no live replica,
/// [`ControlError::RunPending`] when an earlier request is still untaken,
/// [`ControlError::NotTaken`] when no replica took it in time (it is withdrawn: nothing runs).
///
/// ```no_run
/// use lock_core::LockClient;
/// use lock_scheduler::control::{self, ControlError};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let client = LockClient::from_env()?;
/// match control::run_now(&client, "daily-report", "ops@example.com").await {
///     // A replica took it; its run shows in the history with this request's id.
///     Ok(request) => println!("taken as request {}", request.id),
///     Err(ControlError::RunPending { .. }) => println!("an earlier request is still waiting"),
///     Err(e) => return Err(e.into()),
/// }
/// # Ok(()) }
/// ```
pub async fn run_now(client: &LockClient, job: &str, by: &str) -> Result<RunRequest, ControlError> {
    let request = request_run(client, job, by).await?;
    if wait_taken(client, &request, RUN_PICKUP).await? {
        Ok(request)
    } else {
        Err(ControlError::NotTaken { job: job.to_owned(), within: RUN_PICKUP })
    }
}

/// Stores a "run now" request for `job` without waiting for a replica to take it (see
/// [`run_now`]); it lapses after [`RUN_REQUEST_TTL`] if none does.
pub async fn request_run(client: &LockClient, job: &str, by: &str) -> Result<RunRequest, ControlError> {
    if let Some(problem) = job_name_problem(job) {
        return Err(ControlError::InvalidJob(problem));
    }
    let requested_at = Utc::now();
    let id = request_id(requested_at);
    let stored = schema::run_request(&id, by, requested_at.timestamp_millis());
    let mut had_job = false;
    for group in groups(client).await? {
        let mut invocation = REQUEST_RUN.key(schema::members_key(&group));
        invocation.key(schema::jobs_key(&group)).key(schema::runs_key(&group));
        invocation.arg(job).arg(&stored).arg(RUN_REQUEST_TTL.as_millis() as u64);
        invocation.arg(client.publish_command()).arg(schema::group_channel(&group));
        let action = "requesting a run";
        match command::run_script::<i64>(client, action, &REQUEST_RUN, &invocation, command::TIMEOUT).await? {
            1 => {
                let by = schema::parse_run_request(&stored).map_or(by, |(_, by, _)| by).to_owned();
                return Ok(RunRequest { id, job: job.to_owned(), group, by, requested_at, stored });
            }
            0 => return Err(ControlError::RunPending { job: job.to_owned() }),
            -1 => had_job = true,
            _ => {}
        }
    }
    Err(if had_job {
        ControlError::NoLiveReplica { job: job.to_owned() }
    } else {
        ControlError::UnknownJob { job: job.to_owned() }
    })
}

/// Waits up to `within` for a replica to take `request`; withdraws it if none did. Returns
/// whether one took it (then it runs, once).
pub async fn wait_taken(
    client: &LockClient,
    request: &RunRequest,
    within: Duration,
) -> Result<bool, ControlError> {
    let key = schema::runs_key(&request.group);
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let mut pipe = redis::pipe();
        pipe.cmd("HGET").arg(&key).arg(&request.job);
        let (pending,): (Option<String>,) =
            query(client, "waiting for a replica to take a run", &pipe).await?;
        if pending.as_deref() != Some(request.stored.as_str()) {
            return Ok(true);
        }
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Withdrawn unless a replica took it at the last moment.
    let mut invocation = TAKE_RUN.key(&key);
    invocation.arg(&request.job).arg(&request.stored);
    let action = "withdrawing a run request";
    let withdrawn: i64 =
        command::run_script(client, action, &TAKE_RUN, &invocation, command::TIMEOUT).await?;
    Ok(withdrawn == 0)
}

/// The scheduler groups of the group index ([`schema::group_index_key`]), sorted.
async fn groups(client: &LockClient) -> Result<Vec<String>, ControlError> {
    crate::index::groups(client).await
}

/// A request id unique across processes: time, process and a counter.
fn request_id(at: DateTime<Utc>) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{:x}-{:x}-{n:x}", at.timestamp_millis(), std::process::id())
}
