//! [`PauseCheck`]: whether the jobs a timer wake fires are paused, read for all of them at once
//! while their runs start.

use std::collections::HashSet;
use std::sync::Arc;

use lock_core::LockClient;
use tokio::sync::watch;
use tracing::Instrument;

use crate::command;
use crate::schema::pause_key;

/// Which of `jobs` are paused, in one read per Redis node whatever their number
/// ([`LockClient::get_many`]: the timer checks every job due in the same instant at once); a
/// Redis failure counts as not paused (the runs' own locks then report the failure).
pub(crate) async fn paused_among(client: &LockClient, jobs: &[Arc<str>]) -> HashSet<Arc<str>> {
    let (asked, keys): (Vec<Arc<str>>, Vec<String>) =
        jobs.iter().filter_map(|job| pause_key(job).ok().map(|key| (job.clone(), key))).unzip();
    if asked.is_empty() {
        return HashSet::new();
    }
    match command::read_keys(client, "the pause flags", &keys).await {
        Some(flags) => {
            // What this replica last read of each job's flag, for an alert that fires while a
            // job stays paused (`scheduler_job_paused`).
            for (job, flag) in asked.iter().zip(&flags) {
                let paused = if flag.is_some() { 1.0 } else { 0.0 };
                metrics::gauge!("scheduler_job_paused", "job_name" => job.to_string()).set(paused);
            }
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
