//! Slots this replica is not preferred for: deferred by the claim grace, then skipped if the
//! preferred replica claimed their tick (or held their lock at their time), started otherwise.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tracing::Instrument;

use crate::batch::ClaimBatch;
use crate::pause_check::PauseCheck;
use crate::report::RunOutcome;
use crate::run::{self, Start};
use crate::ticks;
use crate::timer::Timer;

/// Deferred slots whose claim grace ended, and the last tick claimed with each one's lock (in
/// the same order), if Redis answered.
pub(super) type Checked = (Vec<Deferred>, Option<Vec<Option<i64>>>);

/// A slot to try once the claim grace is over (if the preferred replica has not run it).
pub(super) struct Deferred {
    /// When its claim grace ends.
    pub(super) at: Instant,
    pub(super) job: Arc<str>,
    pub(super) slot: DateTime<Utc>,
    /// When the slot fired here.
    pub(super) fired_at: DateTime<Utc>,
}

impl Timer {
    /// A deferred slot whose lock was held at its time: skipped, as the preferred replica
    /// skipped it (or is running it).
    pub(super) fn skip_held(&mut self, name: &Arc<str>, slot: DateTime<Utc>) {
        let Some(job) = self.jobs.get_mut(name) else { return };
        if job.deferred != Some(slot) {
            return;
        }
        job.deferred = None;
        let tick = slot.with_timezone(&job.entry.schedule.time_zone()).to_rfc3339();
        tracing::info!(
            job = %name,
            tick = %tick,
            outcome = "skipped: held",
            "another instance holds the lock, skipping"
        );
        self.shared.report(&job.entry, slot, slot, RunOutcome::SkippedHeld, Duration::ZERO);
    }

    /// Looks at the slots whose claim grace is over, all in one round trip: the ticks claimed
    /// with their locks (so that the slots the preferred replica ran cost a read each, not a
    /// claim attempt). [`start_checked`](Self::start_checked) goes on with the answer; the
    /// slots stay deferred until then.
    pub(super) fn start_deferred(&mut self) {
        let now = Instant::now();
        if self.deferred.front().is_none_or(|d| d.at > now) {
            return;
        }
        let mut due = Vec::new();
        while let Some(first) = self.deferred.front()
            && first.at <= now
        {
            let Some(d) = self.deferred.pop_front() else { break };
            if self.jobs.get(&d.job).is_some_and(|job| job.deferred == Some(d.slot)) {
                due.push(d);
            } // else the job was removed, or added again
        }
        if due.is_empty() {
            return;
        }
        let keys: Vec<Option<String>> = due
            .iter()
            .map(|d| {
                self.jobs.get(&d.job).and_then(|job| job.entry.lock.as_ref()).map(|lock| lock.key.clone())
            })
            .collect();
        let (client, tx) = (self.shared.client.clone(), self.checked_tx.clone());
        tokio::spawn(
            async move {
                let keys: Vec<Option<&str>> = keys.iter().map(Option::as_deref).collect();
                let claimed = ticks::claimed_ticks(&client, &keys).await;
                let _ = tx.send((due, claimed));
            }
            .in_current_span(),
        );
    }

    /// Deals with deferred slots as Redis described them: a slot whose tick was claimed (the
    /// preferred replica ran it) is skipped here; the others start (to claim the tick, or be
    /// recorded as paused), their pause flags read together while they start. The flags of
    /// the slots skipped are not read: the preferred replica claimed the tick, so the job was
    /// not paused when the slot fired. Without an answer, every slot starts, and its claim
    /// decides.
    pub(super) fn start_checked(&mut self, slots: Vec<Deferred>, claimed: Option<Vec<Option<i64>>>) {
        let claimed = claimed.filter(|c| c.len() == slots.len()).unwrap_or_default();
        let (tx, pause) = PauseCheck::pending();
        let mut batch = ClaimBatch::default();
        let mut started = Vec::new();
        let mut claimed = claimed.into_iter();
        for d in slots {
            let last = claimed.next().flatten();
            let Some(job) = self.jobs.get_mut(&d.job) else { continue };
            if job.deferred != Some(d.slot) {
                continue; // removed and added again, or skipped as held meanwhile
            }
            job.deferred = None;
            if last.is_some_and(|last| last >= d.slot.timestamp_millis()) {
                run::skip_done(&self.shared, &job.entry, d.slot, d.fired_at);
                continue;
            }
            let start = Start::for_slot(&job.entry, d.slot, &pause, &mut batch);
            job.current = Some(run::spawn(&self.shared, &job.entry, d.slot, d.fired_at, start));
            started.push(d.job);
        }
        if !started.is_empty() {
            PauseCheck::answer(tx, self.shared.client.clone(), started);
        }
        batch.send(self.shared.client.clone(), pause);
    }
}
