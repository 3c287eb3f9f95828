//! A job's whole history as the console keeps it for a short while: what the counts over time
//! and the other attempts of a slot are computed from. Read page by page (at most
//! [`MAX_ENTRIES`]), kept [`FRESH_FOR`] per job for at most [`MAX_JOBS`] jobs, so that a page
//! that refreshes every few seconds, for any number of viewers, reads a job's history at most
//! once per interval.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::LockClient;
use lock_scheduler::control::{self, HistoryEntry};
use tokio::time::Instant;

use crate::error::ApiError;

/// How long a read serves.
pub(crate) const FRESH_FOR: Duration = Duration::from_secs(30);
/// Most entries read: the history keeps about `HISTORY_LEN` plus a minute's worth.
pub(crate) const MAX_ENTRIES: usize = 2 * lock_scheduler::HISTORY_LEN;
/// Entries per round trip.
const PAGE: usize = 500;
/// Jobs kept at once: the least recently read goes first.
const MAX_JOBS: usize = 64;

/// A job's history as read at `read_at`, newest first.
pub(crate) struct Whole {
    pub(crate) runs: Vec<HistoryEntry>,
    pub(crate) read_at: Instant,
    /// It holds more than [`MAX_ENTRIES`]: the oldest were not read.
    pub(crate) cut: bool,
}

/// The kept histories, shared by every request.
#[derive(Default)]
pub(crate) struct Retained {
    jobs: Mutex<HashMap<String, Arc<Whole>>>,
}

impl Retained {
    /// `job`'s history, read anew if the kept one is older than [`FRESH_FOR`].
    pub(crate) async fn get(&self, client: &LockClient, job: &str) -> Result<Arc<Whole>, ApiError> {
        if let Some(whole) = self.lock().get(job).filter(|w| w.read_at.elapsed() < FRESH_FOR) {
            return Ok(whole.clone());
        }
        let whole = Arc::new(read(client, job).await?);
        let mut jobs = self.lock();
        if jobs.len() >= MAX_JOBS
            && !jobs.contains_key(job)
            && let Some(oldest) = jobs.iter().min_by_key(|(_, w)| w.read_at).map(|(k, _)| k.clone())
        {
            jobs.remove(&oldest);
        }
        jobs.insert(job.to_owned(), whole.clone());
        Ok(whole)
    }

    /// Forgets `job`'s (after an action that adds to its history soon).
    pub(crate) fn forget(&self, job: &str) {
        self.lock().remove(job);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Whole>>> {
        self.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

async fn read(client: &LockClient, job: &str) -> Result<Whole, ApiError> {
    let read_at = Instant::now();
    let mut runs: Vec<HistoryEntry> = Vec::new();
    loop {
        let before = runs.last().map(|r| r.id.clone());
        let page = control::history_before(client, job, before.as_deref(), PAGE).await?;
        let ended = page.len() < PAGE;
        runs.extend(page);
        if ended {
            return Ok(Whole { runs, read_at, cut: false });
        }
        if runs.len() >= MAX_ENTRIES {
            return Ok(Whole { runs, read_at, cut: true });
        }
    }
}
