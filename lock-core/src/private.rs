//! The runtime behind `#[distributed_lock]` and the scheduler. Not a stable API: the macro's
//! expansion and the scheduler crate call it; applications use [`LockClient`] instead.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::client::{Attempt, LockClient};
use crate::error::{LockError, Result};
use crate::guard::LockGuard;
use crate::lock_unpoisoned;
use crate::options::{LockOptions, OnLost};
use crate::outcome::{LockResult, Skippable};
use crate::scope;

pub use crate::outcome::{LockResult as __LockResult, Skippable as __Skippable};

/// What the macro knows about one call: everything but the body.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The formatted key.
    pub key: String,
    /// Fail fast when `None`, else wait this long.
    pub wait: Option<Duration>,
    /// Fixed lease, or the watchdog when `None`.
    pub lease: Option<Duration>,
    /// Minimum hold.
    pub at_least: Option<Duration>,
    /// Draw a fencing token.
    pub fencing: bool,
    /// What to do with the body when the lock is lost.
    pub on_lost: OnLost,
}

impl Spec {
    /// A fail-fast, watchdog, unfenced spec for `key`, cancelling on loss.
    pub fn new(key: String) -> Self {
        Spec { key, wait: None, lease: None, at_least: None, fencing: false, on_lost: OnLost::Cancel }
    }

    fn options(&self) -> LockOptions {
        let mut options = LockOptions::new().fencing(self.fencing);
        if let Some(lease) = self.lease {
            options = options.lease(lease);
        }
        if let Some(wait) = self.wait {
            options = options.wait(wait);
        }
        if let Some(at_least) = self.at_least {
            options = options.at_least(at_least);
        }
        options
    }
}

/// The installed default client.
pub fn default_client() -> Result<LockClient> {
    LockClient::default_client()
}

/// The client named by `client = <expr>`.
pub fn client_from<C: AsRef<LockClient> + ?Sized>(client: &C) -> Result<LockClient> {
    Ok(client.as_ref().clone())
}

impl AsRef<LockClient> for LockClient {
    fn as_ref(&self) -> &LockClient {
        self
    }
}

/// How a locked call went, as the scheduler records it for a tick.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The body ran with the lock held (whatever it returned).
    Ran,
    /// Another owner held the lock.
    SkippedHeld,
    /// The tick had already been claimed by another replica.
    SkippedTickDone,
    /// Taking the lock failed (Redis error, timeout).
    LockFailed(String),
    /// The lock was lost while the body ran and the body was cancelled.
    Lost,
}

tokio::task_local! {
    static TICK: TickContext;
}

struct TickContext {
    tick: i64,
    /// Set by the first locked call of the run, the one that claims the tick and reports.
    claimed: AtomicBool,
    outcome: Arc<Mutex<Option<Outcome>>>,
}

/// Runs `fut` as the run of scheduler tick `tick` (epoch ms of the scheduled fire time): the
/// first locked call inside claims the tick atomically with its lock, and its outcome is
/// returned (`None` if `fut` took no lock). Later locked calls of the same run (a loop over
/// an annotated fn, say) take plain locks.
pub async fn with_tick<F: Future>(tick: i64, fut: F) -> (F::Output, Option<Outcome>) {
    let outcome = Arc::new(Mutex::new(None));
    let context = TickContext { tick, claimed: AtomicBool::new(false), outcome: outcome.clone() };
    let output = TICK.scope(context, fut).await;
    let outcome = lock_unpoisoned(&outcome).take();
    (output, outcome)
}

/// The run's tick, for the first locked call of a scheduler run (which then reports the
/// run's outcome); `None` for any other call.
fn claim_tick() -> Option<i64> {
    TICK.try_with(|t| (!t.claimed.swap(true, Ordering::AcqRel)).then_some(t.tick)).ok().flatten()
}

/// Records the run's outcome, if this call is the one that reports it.
fn record(reporter: bool, outcome: Outcome) {
    if reporter {
        let _ = TICK.try_with(|t| *lock_unpoisoned(&t.outcome) = Some(outcome));
    }
}

/// Fail-fast or waiting mode: a held lock or a timeout becomes the fn's error.
pub async fn run<R: LockResult, F: Future<Output = R>>(client: Result<LockClient>, spec: Spec, body: F) -> R {
    let (entry, reporter) = enter(client, &spec).await;
    match entry {
        Entry::Acquired(client, guard) => {
            run_body(&client, guard, spec.on_lost, reporter, body).await.unwrap_or_else(R::lock_failed)
        }
        Entry::Held(e) | Entry::Failed(e) => R::lock_failed(e),
        Entry::TickDone(tick) => R::lock_failed(LockError::TickClaimed { key: spec.key, tick }),
    }
}

/// `skip_if_held` mode: a held lock (or a claimed tick) skips the body.
pub async fn run_skip<R: Skippable, F: Future<Output = R>>(
    client: Result<LockClient>,
    spec: Spec,
    body: F,
) -> R {
    let (entry, reporter) = enter(client, &spec).await;
    match entry {
        Entry::Acquired(client, guard) => {
            run_body(&client, guard, spec.on_lost, reporter, body).await.unwrap_or_else(R::lock_failed)
        }
        // The scheduler logs the skip of the call that reports its run, with job and tick.
        Entry::Held(_) if reporter => R::skipped(),
        Entry::Held(_) => {
            tracing::info!(key = %spec.key, "lock {} is held by another instance, skipping", spec.key);
            R::skipped()
        }
        Entry::TickDone(_) => R::skipped(),
        Entry::Failed(e) => R::lock_failed(e),
    }
}

enum Entry {
    Acquired(LockClient, LockGuard),
    Held(LockError),
    TickDone(i64),
    Failed(LockError),
}

/// Takes the lock; also says whether this call reports the scheduler run's outcome.
async fn enter(client: Result<LockClient>, spec: &Spec) -> (Entry, bool) {
    // Only the first outermost locked call of a scheduler run claims its tick and reports on
    // it; locks taken inside its body, or by later calls, are the job's own business.
    let tick = if scope::current().is_none() { claim_tick() } else { None };
    let reporter = tick.is_some();
    let client = match client {
        Ok(client) => client,
        Err(e) => {
            record(reporter, Outcome::LockFailed(e.to_string()));
            return (Entry::Failed(e), reporter);
        }
    };
    let entry = match client.lock_for(&spec.key, spec.options(), tick).await {
        Ok(Attempt::Acquired(guard)) => Entry::Acquired(client, guard),
        Ok(Attempt::Held(remaining)) => {
            record(reporter, Outcome::SkippedHeld);
            Entry::Held(LockError::Held { key: spec.key.clone(), remaining })
        }
        Ok(Attempt::TickDone(tick)) => {
            record(reporter, Outcome::SkippedTickDone);
            Entry::TickDone(tick)
        }
        Err(e) if e.is_contention() => {
            record(reporter, Outcome::SkippedHeld);
            Entry::Held(e)
        }
        Err(e) => {
            record(reporter, Outcome::LockFailed(e.to_string()));
            Entry::Failed(e)
        }
    };
    (entry, reporter)
}

async fn run_body<F: Future>(
    client: &LockClient,
    guard: LockGuard,
    on_lost: OnLost,
    reporter: bool,
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
                    record(reporter, Outcome::Lost);
                    tracing::error!(key = %state.key, instance = %state.instance, fence = state.fence, "lock lost ({reason}); the locked call was cancelled");
                    // Dropping the guard releases in the background, if it is still ours.
                    drop(guard);
                    return Err(LockError::Lost { key: state.key.clone(), reason });
                }
            }
        }
    };
    record(reporter, Outcome::Ran);
    match guard.release().await {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(key = %state.key, instance = %state.instance, "lock was no longer held when the locked call ended")
        }
        Err(e) => {
            tracing::warn!(key = %state.key, instance = %state.instance, error = %e, "releasing the lock failed; it will expire at the end of its lease")
        }
    }
    Ok(output)
}
