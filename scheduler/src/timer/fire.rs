//! Firing the slots that came due: each job's missed slots reported, the slot to run started
//! (its claim in the wake's batch), held back behind older missed slots, skipped while the
//! previous run goes on, or deferred by the claim grace on replicas not preferred for it.

use std::cmp::Reverse;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::time::Instant;
use tracing::Instrument;

use crate::batch::ClaimBatch;
use crate::overlap::Overlap;
use crate::pause_check::PauseCheck;
use crate::recorder;
use crate::report::RunOutcome;
use crate::run::buffer;
use crate::run::{self, Start};
use crate::schedule::catch_up::CatchUp;
use crate::schedule::due::Due;
use crate::shared::{JobEntry, Shared};
use crate::ticks;
use crate::timer::Timer;
use crate::timer::deferred::Deferred;

/// Slots are whole seconds, so a slot found less than this late is the only one due (and it
/// is on time: [`ON_TIME`](crate::schedule::catch_up::ON_TIME) is a second too).
const ONLY_DUE: TimeDelta = TimeDelta::seconds(1);

impl Timer {
    /// Fires every job whose queued slot is due. Their pause flags are read together, in one
    /// round trip, while their runs start.
    pub(super) fn fire_due(&mut self, now: DateTime<Utc>) {
        let Some(Reverse((first, _, _))) = self.queue.peek() else { return };
        if *first > now {
            return;
        }
        // Filled below; the check starts once every due job is known, and the batch's claims
        // once it is answered.
        let (tx, pause) = PauseCheck::pending();
        let mut batch = ClaimBatch::default();
        let (mut fired, mut due) = (Vec::new(), Vec::new());
        // The slots this wake defers end their grace together: their states are then read, and
        // their claims sent, in one go each, not in as many wakes as firing took milliseconds.
        // Counted from the end of the firing (set below), so none gets less than the grace.
        let deferred_before = self.deferred.len();
        let provisional = Instant::now() + self.shared.claim_grace;
        while let Some(Reverse((slot, seq, _))) = self.queue.peek() {
            if *slot > now {
                break;
            }
            let (fire_at, seq) = (*slot, *seq);
            let Some(Reverse((_, _, name))) = self.queue.pop() else { break };
            let Some(job) = self.jobs.get(&name).filter(|job| job.seq == seq) else {
                continue; // stale: the job was removed or requeued
            };
            // The entry fires at the slot plus the job's jitter.
            let slot = job.next_slot.unwrap_or(fire_at);
            if self.fire_job(&name, slot, now, &pause, &mut batch, provisional) {
                fired.push(name.clone());
            }
            due.push(name);
        }
        if self.deferred.len() > deferred_before {
            let grace_end = Instant::now() + self.shared.claim_grace;
            for deferred in self.deferred.iter_mut().skip(deferred_before) {
                deferred.at = grace_end;
            }
        }
        if !fired.is_empty() {
            PauseCheck::answer(tx, self.shared.client.clone(), fired);
        }
        batch.send(self.shared.client.clone(), pause);
        if !self.held_checks.is_empty() {
            let checks = std::mem::take(&mut self.held_checks);
            let (client, tx) = (self.shared.client.clone(), self.held_tx.clone());
            tokio::spawn(
                async move {
                    let keys: Vec<String> = checks.iter().map(|(_, _, key)| key.clone()).collect();
                    let Some(held) = ticks::held_among(&client, &keys).await else { return };
                    for ((job, slot, _), held) in checks.into_iter().zip(held) {
                        if held {
                            let _ = tx.send((job, slot));
                        }
                    }
                }
                .in_current_span(),
            );
        }
        // Next slots only once every due run is on its way: they are what costs CPU here.
        for name in due {
            self.requeue(&name);
        }
    }

    /// Deals with `name`'s slots in `(floor, now]`: reports those missed, fires the one to run.
    /// Returns whether a run started.
    fn fire_job(
        &mut self,
        name: &Arc<str>,
        queued: DateTime<Utc>,
        now: DateTime<Utc>,
        pause: &PauseCheck,
        batch: &mut ClaimBatch,
        grace_end: Instant,
    ) -> bool {
        let shared = self.shared.clone();
        let Some(job) = self.jobs.get_mut(name) else { return false };
        // Which slots are due is judged on the schedule shifted by the slot's jitter: a slot
        // fired its jitter late is on time.
        let shifted = now - job.entry.jitter(queued);
        let slot = if shifted - queued < ONLY_DUE {
            // The queued slot is the first after the floor, and the next one is at least a
            // second after it: it is the only one due, and on time.
            job.floor = queued;
            queued
        } else {
            let Some(due) = job.entry.schedule.due(job.floor, shifted, job.entry.catch_up) else {
                return false;
            };
            job.floor = due.floor;
            report_missed(&shared, &job.entry, &due, now);
            let Some(slot) = due.run else { return false };
            if !due.earlier.is_empty() {
                // CatchUp::Each: every missed slot, one at a time, oldest first.
                job.backlog.extend(due.earlier);
                job.backlog.push_back(slot);
                if !self.backlogged.contains(name) {
                    self.backlogged.push(name.clone());
                }
                return false;
            }
            slot
        };
        if job.entry.end_at.is_some_and(|end| slot > end) {
            return false; // a late wake past the job's end
        }
        if crate::max_runs::done(&job.entry) {
            return false; // it ran its maximum number of times
        }
        // Behind older missed slots (or, for CatchUp::Each, while the last claimed tick is
        // being read): claiming a newer tick first would make them unclaimable.
        let each = matches!(job.entry.catch_up, CatchUp::Each(_));
        if !job.backlog.is_empty() || (job.resyncing && each) {
            job.backlog.push_back(slot);
            if !self.backlogged.contains(name) {
                self.backlogged.push(name.clone());
            }
            return false;
        }
        let busy = match (&job.current, job.deferred) {
            (_, Some(waiting)) => Some(waiting),
            (Some(running), None) if !running.is_finished() => Some(running.slot),
            _ => None,
        };
        let busy = match (busy, job.entry.overlap) {
            // Runs alongside (or, for Replace, stops it and runs once it has stopped): the
            // running one is kept track of as an orphan (shutdown waits).
            (Some(_), Overlap::Allow | Overlap::Replace) if job.deferred.is_none() => {
                if let Some(running) = job.current.take() {
                    self.orphans.retain(|(_, run)| !run.is_finished());
                    self.orphans.push((job.entry.clone(), running));
                }
                None
            }
            (Some(_), Overlap::BufferOne) if job.deferred.is_none() => {
                buffer_behind(&shared, &job.entry, slot, now);
                return false;
            }
            (busy, _) => busy,
        };
        if let Some(busy) = busy {
            let local = |t: DateTime<Utc>| t.with_timezone(&job.entry.schedule.time_zone()).to_rfc3339();
            tracing::info!(
                job = %name,
                tick = %local(slot),
                running_tick = %local(busy),
                outcome = "skipped: still running",
                "the previous run is still running on this instance, skipping this tick"
            );
            shared.report(&job.entry, slot, now, RunOutcome::SkippedStillRunning, Duration::ZERO);
            return false;
        }
        // The preferred replica claims at once, the others after the grace: a live preferred
        // replica wins; a dead or slow one costs the grace, never the tick. A job known to take
        // no lock runs everywhere anyway: no point waiting.
        let preferred = job.entry.warned_unlocked.load(std::sync::atomic::Ordering::Relaxed)
            || shared.members.preferred(name, slot.timestamp_millis());
        if !preferred && !shared.claim_grace.is_zero() {
            job.deferred = Some(slot);
            self.deferred.push_back(Deferred { at: grace_end, job: name.clone(), slot, fired_at: now });
            // A lock held at the slot's time means the slot is skipped (skip-if-held), even if
            // the lock is free by the end of the grace. Not checked for jobs seen to be short
            // (one command each, at the busiest moment).
            // Only for `Skip`: an `Allow` slot does not mind the lock, a `BufferOne` slot finds
            // it held when it claims, and buffers itself then.
            if let Some(lock) = &job.entry.lock
                && job.entry.overlap == Overlap::Skip
                && job.entry.may_be_held.load(std::sync::atomic::Ordering::Relaxed)
            {
                self.held_checks.push((name.clone(), slot, lock.key.clone()));
            }
            return false;
        }
        let start = Start::for_slot(&job.entry, slot, pause, batch);
        job.current = Some(run::spawn(&shared, &job.entry, slot, now, start));
        true
    }
}

/// Logs, records and reports the slots of `due` that were missed.
fn report_missed(shared: &Arc<Shared>, job: &Arc<JobEntry>, due: &Due, now: DateTime<Utc>) {
    let Some(last_missed) = due.last_missed.filter(|_| due.missed > 0) else { return };
    tracing::warn!(
        job = %job.name,
        missed = due.missed,
        last_missed = %last_missed.with_timezone(&job.schedule.time_zone()).to_rfc3339(),
        "{} slot(s) could not run on time and were not run (catch-up policy: {:?})",
        due.missed,
        job.catch_up
    );
    let missed = RunOutcome::Missed(due.missed);
    let (shared_, job_) = (shared.clone(), job.clone());
    let recorded = missed.clone();
    tokio::spawn(
        async move {
            // Every replica that comes back finds the same missed slots: one records them.
            if recorder::first_to_record_missed(&shared_.client, &job_.name, last_missed.timestamp_millis())
                .await
            {
                shared_.record(&job_, last_missed, &recorded, Duration::ZERO).await;
            }
        }
        .in_current_span(),
    );
    shared.report(job, last_missed, now, missed, Duration::ZERO);
}

/// Buffers `slot` of `job` behind the run this replica has in flight
/// ([`Overlap::BufferOne`]), in the background: logged, recorded (once across the replicas) and
/// reported as buffered.
fn buffer_behind(shared: &Arc<Shared>, job: &Arc<JobEntry>, slot: DateTime<Utc>, now: DateTime<Utc>) {
    let (shared, job) = (shared.clone(), job.clone());
    tokio::spawn(
        async move {
            let Some(first) = buffer::buffer_slot(&shared, &job, slot).await else { return };
            tracing::info!(
                job = %job.name,
                tick = %slot.with_timezone(&job.schedule.time_zone()).to_rfc3339(),
                outcome = "buffered",
                "the previous run is still running on this instance: the slot is buffered and runs when it ends"
            );
            if first {
                shared.record(&job, slot, &RunOutcome::Buffered, Duration::ZERO).await;
            }
            shared.report(&job, slot, now, RunOutcome::Buffered, Duration::ZERO);
        }
        .in_current_span(),
    );
}
