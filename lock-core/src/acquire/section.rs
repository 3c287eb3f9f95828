//! A locked section: take the lock (claiming the tick of a scheduler run when this is the
//! run's first section), run the body inside the re-entrancy scope while watching for loss,
//! and release on every path. `with_lock`, `#[distributed_lock]` and the tick API all run
//! their bodies through here, so they treat a held lock and a lost lock the same way.

use std::future::Future;
use std::sync::Arc;

use tracing::Instrument;

use crate::acquire::{Attempt, Core, Target};
use crate::error::{LockError, Result};
use crate::held::guard::LockGuard;
use crate::held::scope::{self, TickClaim, TickOutcome};
use crate::options::{LockOptions, OnLost};

/// How a section ended.
pub(crate) struct Section<T> {
    /// The body's output, or why it did not run (or was cancelled).
    pub(crate) result: Result<T>,
    /// Whether this section claimed (or tried to claim) the tick of a scheduler run, and so
    /// reported its outcome; the scheduler then logs a skip itself, with job and tick.
    pub(crate) claimed_tick: bool,
}

/// Runs `body` holding `target` (a lock, a permit, a read or write hold), per `options`
/// (including `on_lost`). With `tick` (from [`scope::claim_tick`], or given; locks only),
/// reports the outcome to the enclosing run's scope and claims its tick, if it has one, with
/// the lock.
pub(crate) async fn run<F: Future>(
    client: &Arc<Core>,
    target: Target<'_>,
    options: LockOptions,
    tick: Option<TickClaim>,
    body: F,
) -> Section<F::Output> {
    let claimed_tick = tick.is_some();
    let report = |outcome: TickOutcome| {
        if claimed_tick {
            scope::report_tick(outcome);
        }
    };
    let on_lost = options.on_lost;
    let key = target.key;
    let guard = match client.hold_for(target, options, tick.and_then(|claim| claim.0)).await {
        Ok(Attempt::Acquired(guard)) => guard,
        Ok(Attempt::Held(remaining)) => {
            report(TickOutcome::Held);
            let result = Err(LockError::Held { key: key.to_owned(), remaining });
            return Section { result, claimed_tick };
        }
        Ok(Attempt::TickDone(last_tick)) => {
            report(TickOutcome::Claimed { last_tick });
            let result = Err(LockError::TickClaimed { key: key.to_owned(), tick: last_tick });
            return Section { result, claimed_tick };
        }
        Err(e) => {
            if e.is_contention() {
                report(TickOutcome::Held);
                return Section { result: Err(e), claimed_tick };
            }
            // The run's outcome and the caller's result both carry the error.
            report(TickOutcome::LockFailed(e.clone()));
            return Section { result: Err(e), claimed_tick };
        }
    };
    let result = hold(client, guard, on_lost, false, body).await;
    match &result {
        Err(LockError::Lost { reason, .. }) => report(TickOutcome::Lost(*reason)),
        _ => report(TickOutcome::Ran),
    }
    Section { result, claimed_tick }
}

/// Runs `body` under `guard`, then releases it (`grouped`: with other grouped releases, see
/// `held::release::group`). With [`OnLost::Cancel`], a loss drops the body at its next await and
/// becomes [`LockError::Lost`].
pub(crate) async fn hold<F: Future>(
    client: &Core,
    guard: LockGuard,
    on_lost: OnLost,
    grouped: bool,
    body: F,
) -> Result<F::Output> {
    let state = guard.state().clone();
    let span =
        tracing::info_span!("lock_hold", key = %state.key, instance = %state.instance(), fence = state.fence);
    hold_in_span(client, guard, on_lost, grouped, body).instrument(span).await
}

async fn hold_in_span<F: Future>(
    client: &Core,
    guard: LockGuard,
    on_lost: OnLost,
    grouped: bool,
    body: F,
) -> Result<F::Output> {
    let state = guard.state().clone();
    let body = scope::enter(client.scope_id(), state.clone(), body);
    let output = match on_lost {
        OnLost::Continue => body.await,
        OnLost::Cancel => {
            tokio::select! {
                biased;
                output = body => output,
                reason = state.clone().lost() => {
                    tracing::error!("lock lost ({reason}); the locked section was cancelled");
                    // Dropping the guard releases in the background, if it is still ours.
                    drop(guard);
                    return Err(LockError::Lost { key: state.key.clone(), reason });
                }
            }
        }
    };
    match guard.release_as(grouped).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!("lock was no longer held when the locked section ended")
        }
        Err(e) => {
            tracing::warn!(error = %crate::error::ErrorChain(&e), "releasing the lock failed; it will expire at the end of its lease")
        }
    }
    Ok(output)
}
