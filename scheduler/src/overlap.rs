//! What happens to a slot that comes while the job's previous run is still going on somewhere
//! ([`Overlap`]), and the Redis side of [`Overlap::BufferOne`]: the claimant leaves the slot in
//! the job's buffer ([`schema::buffered_key`]), the running run takes it when it ends. The
//! stopping of a run by a later slot ([`Overlap::Replace`]) is in [`replace`].

pub(crate) mod replace;

use std::sync::Arc;

use chrono::DateTime;
use lock_core::redis;

use crate::command::{self, query};
use crate::pause_check::PauseCheck;
use crate::run::{self, Start};
use crate::schema::{self, BUFFERED_TTL, CLAIM_SLOT};
use crate::shared::{JobEntry, Shared};

/// What a slot does when it comes while the job's previous run (or retry) is still running,
/// on this replica or another: [`Job::overlap`](crate::job::Job::overlap). Needs the
/// scheduler to know the job's lock ([`Job::lock`](crate::job::Job::lock)), except `Skip`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Overlap {
    /// The slot is skipped (reported as `skipped: held` or `skipped: still running`). The
    /// default. No Redis cost beyond the slot's claim.
    #[default]
    Skip,
    /// The slot runs alongside the previous run: each slot still runs once across the
    /// replicas (its tick is claimed, without the job's lock, which an `Allow` job does not
    /// take). Cost: the claim is one script call in the wake's claim round trip, and no release
    /// (cheaper than `Skip`'s lock). A retry of an `Allow` job is not claimed by tick: taking it
    /// from the pending retries is what makes it run once.
    Allow,
    /// The slot is kept (one at most: a later one replaces it) and runs right after the current
    /// run ends, on the replica that ran it. Reported as `buffered` (metrics, logs, one history
    /// entry). Cost: one round trip per run end (`GETDEL` of the buffer), and one when a slot
    /// is buffered (`SET` of the buffer and a look at the lock, pipelined).
    BufferOne,
    /// The slot stops the running run (on this replica or another) and runs once it has
    /// stopped: the old run is cancelled as for a lost lock (its body dropped at its next
    /// `.await`, [`lock_core::current`] inside it reporting the loss,
    /// [`LossReason::Revoked`](lock_core::LossReason::Revoked)), reported and recorded as
    /// `replaced`, and its lock handed to the new slot's run, which claims the slot's tick (so
    /// each slot still runs once across the replicas, one run at a time). The running replica
    /// sees the request within [`RUN_POLL`](crate::schema::RUN_POLL) (at once on the same
    /// replica); the new slot waits for the lock up to
    /// [`REPLACE_WAIT`](crate::schema::REPLACE_WAIT) (or the job's lock wait, if longer), then is
    /// skipped as held. A body that does not `.await` cannot be stopped; with
    /// [`OnLost::Continue`](lock_core::OnLost::Continue) the old run is told (its lock reads lost) but
    /// finishes, and the new one starts after it. Cost: nothing while runs do not overlap; per
    /// replacing slot, one round trip for the request (a script), then the waiting acquisition's
    /// (one or two); the running replica reads the request in the poll it already sends every
    /// `RUN_POLL` (one `MGET` more in it, only while a `Replace` run is in flight there).
    Replace,
}

/// Claims `tick` for an [`Overlap::Allow`] job (its lock key `key`) without its lock, in the
/// pipeline `pipe` ([`CLAIM_SLOT`]; its reply: 0 claimed, else the last claimed tick).
pub(crate) fn claim_slot(pipe: &mut redis::Pipeline, key: &str, tick: i64) {
    let mut invocation = CLAIM_SLOT.key(lock_core::schema::tick_key(key));
    invocation.arg(tick).arg(lock_core::schema::TICK_TTL.as_millis() as u64);
    pipe.invoke_script(&invocation);
}

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
        start(shared, job, slot);
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
        start(shared, job, slot);
    }
}

/// Starts `slot` of `job` now, on this replica (a buffered slot): its pause flag checked, its
/// tick claimed with the job's lock, the run adopted by the timer for shutdown.
pub(crate) fn start(shared: &Arc<Shared>, job: &Arc<JobEntry>, slot: DateTime<chrono::Utc>) {
    let (answer, pause) = PauseCheck::pending();
    PauseCheck::answer(answer, shared.client.clone(), vec![job.name.clone()]);
    let running = run::spawn(shared, job, slot, shared.clock.now(), Start::Single(pause));
    shared.adopt(job, running);
}
