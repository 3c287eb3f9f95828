//! The Redis side of [`Overlap::BufferOne`](crate::overlap::Overlap::BufferOne): the claimant
//! leaves the slot in the job's buffer ([`schema::buffered_key`]), the running run takes it when
//! it ends.

use std::sync::Arc;

use chrono::DateTime;
use lock_core::redis;

use crate::command::{self, query};
use crate::pause_check::PauseCheck;
use crate::report::RunOutcome;
use crate::retry::pending;
use crate::schema::{self, BACKFILL_ATTEMPT, BUFFERED_TTL};
use crate::shared::{JobEntry, Shared};

use super::Start;

/// Buffers slot `tick` of `job` behind its running run (held lock `lock_key`), in one round
/// trip: writes the buffer, and looks whether the lock is still held. Returns whether this call
/// was the first to buffer this slot (then it is recorded in the history), and whether the
/// lock was found free (the run ended meanwhile, perhaps before it looked at the buffer: the
/// caller then starts the slot itself; its tick claim makes sure it runs once).
pub(crate) async fn buffer(
    shared: &Shared,
    job: &JobEntry,
    lock_key: &str,
    tick: i64,
) -> Option<(bool, bool)> {
    let key = schema::buffered_key(&job.name).ok()?;
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg(&key).arg(tick).arg("PX").arg(BUFFERED_TTL.as_millis() as u64).arg("GET");
    pipe.cmd("EXISTS").arg(lock_key);
    match query::<(Option<String>, bool)>(&shared.client, "buffering a slot", &pipe).await {
        Ok((before, held)) => Some((before.and_then(|t| t.parse::<i64>().ok()) != Some(tick), !held)),
        Err(e) => {
            tracing::warn!(error = %lock_core::ErrorChain(&e), "could not buffer the slot; it is skipped");
            None
        }
    }
}

/// Buffers `slot` of `job` behind the run holding its lock and, if the lock was found free
/// (that run ended meanwhile), starts the slot here. `None`: Redis failed (the slot is
/// skipped); else whether this replica was the first to buffer the slot (it records it).
pub(crate) async fn buffer_slot(
    shared: &Arc<Shared>,
    job: &Arc<JobEntry>,
    slot: DateTime<chrono::Utc>,
) -> Option<bool> {
    let lock = job.lock.as_ref()?;
    let (first, free) = buffer(shared, job, &lock.key, slot.timestamp_millis()).await?;
    if free {
        start(shared, job, slot).await;
    }
    Some(first)
}

/// At the end of a run of `job` at `tick` (its lock released): takes the slot buffered behind
/// it, if a later one is, and starts it on this replica (claiming its tick). One round trip.
pub(crate) async fn run_buffered(shared: &Arc<Shared>, job: &Arc<JobEntry>, tick: i64) {
    let Ok(key) = schema::buffered_key(&job.name) else { return };
    let mut pipe = redis::pipe();
    pipe.cmd("GETDEL").arg(&key);
    let buffered =
        match command::query::<(Option<String>,)>(&shared.client, "taking a buffered slot", &pipe).await {
            Ok((buffered,)) => buffered.and_then(|t| t.parse::<i64>().ok()),
            Err(e) => {
                tracing::warn!(error = %lock_core::ErrorChain(&e), "could not look for a buffered slot");
                return;
            }
        };
    if let Some(slot) = buffered.filter(|b| *b > tick).and_then(DateTime::from_timestamp_millis) {
        tracing::info!(buffered = slot.timestamp_millis(), "running the slot buffered behind this run");
        start(shared, job, slot).await;
    }
}

/// Starts `slot` of `job` now, on this replica (a buffered slot): its pause flag checked, its
/// tick claimed with the job's lock, the run adopted by the timer for shutdown. Once the
/// scheduler is stopping nothing starts here: the slot is handed to the group's other replicas
/// ([`hand_over`]).
pub(crate) async fn start(shared: &Arc<Shared>, job: &Arc<JobEntry>, slot: DateTime<chrono::Utc>) {
    let started = shared.start_outside_timer(job, || {
        let (answer, pause) = PauseCheck::pending();
        PauseCheck::answer(answer, shared.client.clone(), vec![job.name.clone()]);
        super::spawn(shared, job, slot, shared.clock.now(), Start::Single(pause))
    });
    if !started {
        hand_over(shared, job, slot).await;
    }
}

/// A buffered `slot` of `job` this replica may not start (it is stopping): added to the group's
/// pending entries as a backfill slot due now, which one other replica takes and runs under the
/// job's lock (once the run holding it ends). If that write fails the slot is reported and
/// recorded as missed: it did not run.
async fn hand_over(shared: &Arc<Shared>, job: &Arc<JobEntry>, slot: DateTime<chrono::Utc>) {
    let (now, retries) = (shared.clock.now(), shared.members.retries_key());
    let tick = slot.timestamp_millis();
    match pending::add(&shared.client, retries, &job.name, tick, BACKFILL_ATTEMPT, now, now).await {
        Ok(()) => tracing::info!(
            job = %job.name,
            buffered = tick,
            "shutting down: the slot buffered behind the run was handed to the group's other replicas"
        ),
        Err(e) => {
            tracing::warn!(
                job = %job.name,
                buffered = tick,
                error = %lock_core::ErrorChain(&e),
                "shutting down: the slot buffered behind the run could not be handed over; it is not run"
            );
            let outcome = RunOutcome::Missed(1);
            shared.record(job, slot, &outcome, std::time::Duration::ZERO).await;
            shared.report(job, slot, now, outcome, std::time::Duration::ZERO);
        }
    }
}
