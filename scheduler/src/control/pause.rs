//! Pausing and resuming a job on every replica at once: a flag in Redis
//! ([`schema::pause_key`](crate::schema::pause_key)) that each replica checks when it is about to claim a slot.

use chrono::Utc;
use lock_core::LockClient;
use lock_core::redis;

use crate::command::query;
use crate::error::ControlError;
use crate::schema::{failure_streak_key, pause_key};

/// Whether a job is paused, and since when.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PauseState {
    /// The job's name.
    pub job: String,
    /// What the pause flag says (who paused it, when), if set.
    pub paused: Option<String>,
}

/// Pauses `job` on every replica: from the next slot on, each replica records the slot as
/// [`RunOutcome::SkippedPaused`](crate::report::RunOutcome::SkippedPaused) instead of running it, until [`resume`]. A run already in
/// progress is not stopped. `by` says who paused it (shown by `lockctl`); pausing a paused job
/// records the new `by` and time. Returns whether it was paused already (one round trip: the
/// flag is set and its old value read by one `SET ... GET`).
pub async fn pause_by(client: &LockClient, job: &str, by: &str) -> Result<bool, ControlError> {
    let key = pause_key(job)?;
    let value = format!("{} by {by}", Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg(&key).arg(value).arg("GET");
    // Listed by the admin reads while paused, even with no history and no replica: its own
    // request (the index is on another Cluster slot), sent concurrently.
    let mut index = redis::pipe();
    crate::index::add_paused_job(&mut index, job);
    let ((before,), ()): ((Option<String>,), ()) = tokio::try_join!(
        query(client, "pausing a job", &pipe),
        crate::index::send(client, "indexing a paused job", &index)
    )?;
    Ok(before.is_some())
}

/// Pauses `job` on every replica (see [`pause_by`]), naming this client's instance. Returns
/// whether it was paused already.
pub async fn pause(client: &LockClient, job: &str) -> Result<bool, ControlError> {
    pause_by(client, job, client.instance_id()).await
}

/// Resumes a paused `job`; returns whether it was paused. Also clears its count of failed
/// slots in a row ([`Job::pause_after_failures`](crate::job::Job::pause_after_failures)), so a
/// job paused by its failures gets the whole count again.
pub async fn resume(client: &LockClient, job: &str) -> Result<bool, ControlError> {
    let key = pause_key(job)?;
    let mut pipe = redis::pipe();
    // Same hash tag: one round trip on Cluster too.
    pipe.cmd("DEL").arg(&key).cmd("DEL").arg(failure_streak_key(job)?).ignore();
    let mut index = redis::pipe();
    crate::index::end_pause(&mut index, job);
    let ((deleted,), ()): ((i64,), ()) = tokio::try_join!(
        query(client, "resuming a job", &pipe),
        crate::index::send(client, "indexing a resumed job", &index)
    )?;
    Ok(deleted == 1)
}

/// Whether `job` is paused, and by whom.
pub async fn pause_state(client: &LockClient, job: &str) -> Result<PauseState, ControlError> {
    let key = pause_key(job)?;
    let mut pipe = redis::pipe();
    pipe.cmd("GET").arg(&key);
    let (paused,): (Option<String>,) = query(client, "reading a job's pause flag", &pipe).await?;
    Ok(PauseState { job: job.to_owned(), paused })
}
