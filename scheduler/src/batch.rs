//! The claims of the runs a timer wake starts, made together: once their pause flags are known,
//! the ticks of the jobs whose lock the scheduler knows ([`Job::lock`](crate::job::Job::lock)) are
//! claimed with their locks in one [`LockClient::claim_ticks`] call (one round trip per Redis
//! node, whatever the number of jobs), and each run is handed its share. Runs of jobs whose fn
//! takes its own lock claim their tick in their first locked section, as before.

use std::sync::Arc;

use lock_core::tick::{Claim, ClaimRequest};
use lock_core::{LockClient, LockError, redis};
use tokio::sync::oneshot;
use tracing::Instrument;

use crate::command;
use crate::error::ControlError;
use crate::overlap::Overlap;
use crate::pause_check::PauseCheck;
use crate::schema::CLAIM_SLOT;
use crate::shared::JobEntry;

/// What a run gets from its batch.
#[derive(Debug)]
pub(crate) enum Share {
    /// The job is paused: nothing was claimed.
    Paused,
    /// How the claim went.
    Claim(Result<Claim, LockError>),
    /// How the claim of an [`Overlap::Allow`](crate::overlap::Overlap::Allow) job's tick,
    /// without its lock, went: `Ok(0)` claimed, `Ok(last)` claimed already (the last claimed
    /// tick).
    Slot(Result<i64, ControlError>),
}

/// The claims of one timer wake's runs, collected while the runs are spawned.
#[derive(Default)]
pub(crate) struct ClaimBatch {
    claims: Vec<(Arc<JobEntry>, i64, oneshot::Sender<Share>)>,
}

impl ClaimBatch {
    /// Adds `job`'s claim of `tick` (its lock must be known); its run waits on the receiver.
    pub(crate) fn add(&mut self, job: &Arc<JobEntry>, tick: i64) -> oneshot::Receiver<Share> {
        let (tx, rx) = oneshot::channel();
        self.claims.push((job.clone(), tick, tx));
        rx
    }

    /// Once `pause` is answered, claims the ticks of the jobs not paused, all in one call, and
    /// hands each run its share (a run that is gone drops its claim, which releases the lock).
    pub(crate) fn send(self, client: LockClient, mut pause: PauseCheck) {
        if self.claims.is_empty() {
            return;
        }
        tokio::spawn(
            async move {
                let mut claims = Vec::with_capacity(self.claims.len());
                for (job, tick, tx) in self.claims {
                    if pause.is_paused(&job.name).await {
                        let _ = tx.send(Share::Paused);
                    } else {
                        claims.push((job, tick, tx));
                    }
                }
                // Jobs whose slots may overlap claim their tick without the lock, in a pipeline
                // sent alongside the locks' claims: the wake still costs one round trip.
                let (free, claims): (Vec<_>, Vec<_>) =
                    claims.into_iter().partition(|(job, _, _)| job.overlap == Overlap::Allow);
                let requests: Vec<ClaimRequest<'_>> = claims
                    .iter()
                    .filter_map(|(job, tick, _)| {
                        job.lock
                            .as_ref()
                            .map(|lock| ClaimRequest::new(&lock.key, *tick, lock.options.clone()))
                    })
                    .collect();
                if requests.len() != claims.len() {
                    // Only jobs with a lock are added (`Start::for_slot`); were one not, every run of
                    // the batch would report its claim as failed (its share dropped).
                    tracing::error!("a batched claim without a lock key; the batch is not sent");
                    return;
                }
                let (results, slots) =
                    tokio::join!(client.claim_ticks(&requests), claim_slots(&client, &free));
                drop(requests);
                for ((_, _, tx), result) in claims.into_iter().zip(results) {
                    let _ = tx.send(Share::Claim(result));
                }
                for ((_, _, tx), slot) in free.into_iter().zip(slots) {
                    let _ = tx.send(Share::Slot(slot));
                }
            }
            .in_current_span(),
        );
    }
}

/// Claims the ticks of `free` (jobs whose slots may overlap) without their locks, in one
/// pipeline ([`claim_slot`]); per claim, its share.
async fn claim_slots(
    client: &LockClient,
    free: &[(Arc<JobEntry>, i64, oneshot::Sender<Share>)],
) -> Vec<Result<i64, ControlError>> {
    if free.is_empty() {
        return Vec::new();
    }
    let mut pipe = redis::pipe();
    // Loaded in the same pipeline: a pipeline's EVALSHA is not retried after NOSCRIPT.
    pipe.load_script(&CLAIM_SLOT).ignore();
    for (job, tick, _) in free {
        if let Some(lock) = &job.lock {
            claim_slot(&mut pipe, &lock.key, *tick);
        }
    }
    match command::query::<Vec<i64>>(client, "claiming slots", &pipe).await {
        Ok(replies) if replies.len() == free.len() => replies.into_iter().map(Ok).collect(),
        Ok(_) => free.iter().map(|_| Err(ControlError::Unavailable("claiming slots"))).collect(),
        Err(e) => {
            // Reported by each run as a failed claim; the cause is logged here, once.
            tracing::warn!(error = %lock_core::ErrorChain(&e), claims = free.len(), "could not claim slots");
            free.iter().map(|_| Err(ControlError::Unavailable("claiming slots"))).collect()
        }
    }
}

/// Claims `tick` for an [`Overlap::Allow`] job (its lock key `key`) without its lock, in the
/// pipeline `pipe` ([`CLAIM_SLOT`]; its reply: 0 claimed, else the last claimed tick).
pub(crate) fn claim_slot(pipe: &mut redis::Pipeline, key: &str, tick: i64) {
    let mut invocation = CLAIM_SLOT.key(lock_core::schema::tick_key(key));
    invocation.arg(tick).arg(lock_core::schema::TICK_TTL.as_millis() as u64);
    pipe.invoke_script(&invocation);
}
