//! The shared snapshot: what the overview, the jobs list and the replicas show, read from Redis
//! at most once per interval however many people (or scripts) look, within a budget of time
//! and of holds checked. A snapshot that ran out of budget says so (`partial`) rather than
//! failing, and viewers that arrive while one is being read wait for it instead of reading
//! Redis again.

use std::sync::Arc;
use std::time::Duration;

use lock_core::inspect::LockSummary;
use lock_scheduler::control::{self, Replica};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::Console;
use crate::error::{ApiError, ConsoleError};
use crate::view::{self, JobView};

/// What the pages show, as one read found it.
pub(crate) struct Snapshot {
    pub(crate) jobs: Vec<JobView>,
    pub(crate) replicas: Vec<Replica>,
    /// Held locks matching the console's default pattern (at most [`view::MAX_LIMIT`]).
    pub(crate) locks: Vec<LockSummary>,
    /// The parts the budget did not let the read finish (`jobs`, `replicas`, `locks`); empty
    /// when the snapshot is whole.
    pub(crate) partial: Vec<&'static str>,
    /// The jobs listed whose state (pause flag, last run, failures) was not read in time.
    pub(crate) missing_jobs: Vec<String>,
    /// When the read started.
    pub(crate) taken: Instant,
}

impl Snapshot {
    /// Milliseconds since the read started.
    pub(crate) fn age_ms(&self) -> u64 {
        u64::try_from(self.taken.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// How often and how much the snapshot reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    /// A snapshot younger than this is served as it is.
    pub(crate) interval: Duration,
    /// The longest one read may take; past it, what is missing is left out (`partial`).
    pub(crate) time: Duration,
    /// Recorded holds the locks listing may check.
    pub(crate) keys: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Budget { interval: Duration::from_secs(2), time: Duration::from_secs(2), keys: 100_000 }
    }
}

impl Budget {
    pub(crate) fn new(interval: Duration, time: Duration, keys: usize) -> Result<Self, ConsoleError> {
        if time.is_zero() || keys == 0 {
            return Err(ConsoleError::InvalidLimit(
                "the snapshot's budget needs a time longer than zero and at least one hold to check".into(),
            ));
        }
        Ok(Budget { interval, time, keys })
    }
}

/// A read's outcome, as viewers share it.
type Outcome = Result<Arc<Snapshot>, ApiError>;

/// The last snapshot (or the error its read ended with) and when its read started, shared by
/// every request.
#[derive(Default)]
pub(crate) struct Shared {
    last: Mutex<Option<(Instant, Outcome)>>,
}

impl Shared {
    /// The current snapshot: the last one if younger than the interval, else a new read. One
    /// read at a time: requests that come meanwhile wait for it and share it. An error is kept
    /// for the interval too, so that a failing Redis is not asked once per viewer.
    pub(crate) async fn get(&self, console: &Console) -> Result<Arc<Snapshot>, ApiError> {
        let budget = console.inner.budget;
        let mut last = self.last.lock().await;
        if let Some((at, result)) = &*last
            && at.elapsed() < budget.interval
        {
            return result.clone();
        }
        let started = Instant::now();
        let result = read(console, budget).await.map(Arc::new);
        *last = Some((started, result.clone()));
        result
    }
}

impl Shared {
    /// Drops the last snapshot, so that the next view reads anew: after an action, which
    /// changes what the pages show. Waits for a read in progress (which may predate the
    /// action) and drops it too.
    pub(crate) async fn invalidate(&self) {
        *self.last.lock().await = None;
    }
}

/// Reads a snapshot within `budget`, on the console's own connection, holding one of its
/// permits for Redis work.
async fn read(console: &Console, budget: Budget) -> Result<Snapshot, ApiError> {
    let taken = Instant::now();
    let deadline = taken + budget.time;
    let _permit = console.redis_permit(deadline).await?;
    let client = console.client();
    let mut partial = Vec::new();
    // Jobs first: what operators come for; their per-job reads all go out at once, and what
    // came back by the deadline is shown (the rest listed by name, said missing).
    let mut missing_jobs = Vec::new();
    let jobs = match tokio::time::timeout_at(deadline, view::jobs(client, deadline)).await {
        Ok(read) => {
            let (jobs, missing) = read?;
            if !missing.is_empty() {
                partial.push("jobs");
            }
            missing_jobs = missing;
            jobs
        }
        Err(_) => {
            partial.push("jobs");
            Vec::new()
        }
    };
    let replicas = match tokio::time::timeout_at(deadline, control::replicas(client)).await {
        Ok(replicas) => replicas?,
        Err(_) => {
            partial.push("replicas");
            Vec::new()
        }
    };
    let locks = match tokio::time::timeout_at(
        deadline,
        client.list_locks_within(&console.inner.lock_pattern, view::MAX_LIMIT, budget.keys),
    )
    .await
    {
        Ok(listing) => {
            let listing = listing?;
            if !listing.complete {
                partial.push("locks");
            }
            listing.locks
        }
        Err(_) => {
            partial.push("locks");
            Vec::new()
        }
    };
    Ok(Snapshot { jobs, replicas, locks, partial, missing_jobs, taken })
}
