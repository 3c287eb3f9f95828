//! Pausing and resuming a job on every replica at once: a flag in Redis
//! ([`schema::pause_key`]) that each replica checks when it is about to claim a slot.
//!
//! ```no_run
//! # async fn demo(client: lock_core::LockClient) -> Result<(), scheduler::ControlError> {
//! scheduler::pause(&client, "daily-report").await?;
//! for run in scheduler::history(&client, "daily-report", 10).await? {
//!     println!("tick {} on {}: {} in {:?}", run.tick, run.instance, run.outcome, run.duration);
//! }
//! scheduler::resume(&client, "daily-report").await?;
//! # Ok(()) }
//! ```

use std::collections::HashSet;
use std::sync::Arc;

use chrono::Utc;
use lock_core::LockClient;
use lock_core::redis;
use tokio::sync::watch;
use tracing::Instrument;

use crate::command::query;
use crate::error::ControlError;
use crate::schema::pause_key;

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
/// [`RunOutcome::SkippedPaused`] instead of running it, until [`resume`]. A run already in
/// progress is not stopped. `by` says who paused it (shown by `lockctl`).
pub async fn pause_by(client: &LockClient, job: &str, by: &str) -> Result<(), ControlError> {
    let key = pause_key(job)?;
    let value = format!("{} by {by}", Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg(&key).arg(value).ignore();
    query::<()>(client, "pausing a job", &pipe).await
}

/// Pauses `job` on every replica (see [`pause_by`]), naming this client's instance.
pub async fn pause(client: &LockClient, job: &str) -> Result<(), ControlError> {
    pause_by(client, job, client.instance_id()).await
}

/// Resumes a paused `job`; returns whether it was paused.
pub async fn resume(client: &LockClient, job: &str) -> Result<bool, ControlError> {
    let key = pause_key(job)?;
    let mut pipe = redis::pipe();
    pipe.cmd("DEL").arg(&key);
    let (deleted,): (i64,) = query(client, "resuming a job", &pipe).await?;
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

/// Which of `jobs` are paused, in one read per Redis node whatever their number
/// ([`LockClient::get_many`]: the timer checks every job due in the same instant at once); a
/// Redis failure counts as not paused (the runs' own locks then report the failure).
pub(crate) async fn paused_among(client: &LockClient, jobs: &[Arc<str>]) -> HashSet<Arc<str>> {
    let (asked, keys): (Vec<Arc<str>>, Vec<String>) =
        jobs.iter().filter_map(|job| pause_key(job).ok().map(|key| (job.clone(), key))).unzip();
    if asked.is_empty() {
        return HashSet::new();
    }
    match crate::command::read_keys(client, "the pause flags", &keys).await {
        Some(flags) => {
            asked.into_iter().zip(flags).filter(|(_, flag)| flag.is_some()).map(|(job, _)| job).collect()
        }
        None => HashSet::new(),
    }
}

/// The sending side of a [`PauseCheck`].
pub(crate) struct PauseAnswer(watch::Sender<Option<Arc<HashSet<Arc<str>>>>>);

/// The answer of one [`paused_among`] check, shared by the runs it was made for.
#[derive(Clone)]
pub(crate) struct PauseCheck(watch::Receiver<Option<Arc<HashSet<Arc<str>>>>>);

impl PauseCheck {
    /// A check not started yet: runs may wait on it; [`answer`](Self::answer) starts it.
    pub(crate) fn pending() -> (PauseAnswer, PauseCheck) {
        let (tx, rx) = watch::channel(None);
        (PauseAnswer(tx), PauseCheck(rx))
    }

    /// Checks `jobs` in the background and answers the runs waiting on the check.
    pub(crate) fn answer(answer: PauseAnswer, client: LockClient, jobs: Vec<Arc<str>>) {
        tokio::spawn(
            async move {
                let paused = paused_among(&client, &jobs).await;
                answer.0.send_replace(Some(Arc::new(paused)));
            }
            .in_current_span(),
        );
    }

    /// Whether `job` was paused when checked.
    pub(crate) async fn is_paused(&mut self, job: &str) -> bool {
        match self.0.wait_for(Option::is_some).await {
            Ok(answer) => answer.as_ref().is_some_and(|paused| paused.contains(job)),
            Err(_) => false,
        }
    }
}
