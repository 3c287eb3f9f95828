//! The jobs' last claimed ticks, read from Redis: at start (the first floors) and whenever a
//! job's runs could not reach Redis, so that the slots since, which nobody ran, go through the
//! job's catch-up policy.

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use tracing::Instrument;

use crate::schedule::catch_up::MAX_CATCH_UP;
use crate::shared::{JobEntry, Shared};
use crate::ticks;
use crate::timer::Timer;
use crate::timer::wake::RECHECK;

/// The first floor of each job: its last claimed tick if older than `started` (at most
/// [`MAX_CATCH_UP`] before it), else `started`. `None` if Redis could not tell.
pub(crate) async fn first_floors(
    shared: &Shared,
    jobs: &[Arc<JobEntry>],
    started: DateTime<Utc>,
) -> Option<Vec<DateTime<Utc>>> {
    let keys: Vec<&str> = jobs.iter().filter_map(|j| j.lock.as_ref().map(|l| l.key.as_str())).collect();
    let lasts = match ticks::last_ticks(&shared.client, &keys).await {
        Ok(lasts) => lasts,
        Err(e) => {
            tracing::warn!(error = %e, "could not read the jobs' last claimed ticks; retrying in the background");
            return None;
        }
    };
    let oldest = started - TimeDelta::from_std(MAX_CATCH_UP).unwrap_or(TimeDelta::MAX);
    let mut lasts = lasts.into_iter();
    Some(
        jobs.iter()
            .map(|job| {
                let last = if job.lock.is_some() { lasts.next().flatten() } else { None };
                match last.and_then(DateTime::from_timestamp_millis) {
                    Some(last) if last < started => last.max(oldest),
                    _ => started,
                }
            })
            .collect(),
    )
}

impl Timer {
    /// Reads `name`'s last claimed tick in the background (retrying while Redis does not
    /// answer), for jobs whose lock key the scheduler knows.
    pub(super) fn start_resync(&mut self, name: &Arc<str>) {
        let Some(job) = self.jobs.get_mut(name) else { return };
        let Some(lock) = job.entry.lock.as_ref() else { return };
        if job.resyncing {
            return;
        }
        job.resyncing = true;
        let (client, key, tx, name) =
            (self.shared.client.clone(), lock.key.clone(), self.synced_tx.clone(), name.clone());
        tokio::spawn(
            async move {
                loop {
                    // Paced: a run that keeps failing asks again at most once a second.
                    tokio::time::sleep(RECHECK).await;
                    match ticks::last_ticks(&client, &[&key]).await {
                        Ok(last) => {
                            let _ = tx.send((name, last.into_iter().next().flatten()));
                            return;
                        }
                        Err(e) => {
                            tracing::debug!(job = %name, error = %e, "could not read the last claimed tick; retrying");
                            if tx.is_closed() {
                                return;
                            }
                        }
                    }
                }
            }
            .in_current_span(),
        );
    }

    /// Moves `name`'s floor back to its last claimed tick (at most [`MAX_CATCH_UP`] ago): the
    /// slots after it, which nobody ran, become due and go through the job's catch-up policy.
    pub(super) fn apply_resync(&mut self, name: &Arc<str>, last: Option<i64>) {
        let now = self.shared.clock.now();
        let Some(job) = self.jobs.get_mut(name) else { return };
        job.resyncing = false;
        let Some(last) = last.and_then(DateTime::from_timestamp_millis) else { return };
        let oldest = now - TimeDelta::from_std(MAX_CATCH_UP).unwrap_or(TimeDelta::MAX);
        let floor = last.max(oldest);
        if floor < job.floor {
            tracing::debug!(job = %name, last_claimed = %last, "slots since the last claimed tick were not run");
            job.floor = floor;
            // Held-back slots are found again from the new floor, in order.
            job.backlog.clear();
            self.requeue(name);
        }
    }
}
