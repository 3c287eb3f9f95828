//! What the current task is inside of: the locks held by its locked sections (re-entrancy),
//! and the scheduler tick its run is for (claimed by its first locked section).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{LockError, LossReason};
use crate::held::state::LockState;
use crate::sync::lock_unpoisoned;

tokio::task_local! {
    static HELD: Arc<Vec<Held>>;
    static TICK: TickContext;
}

/// How the run of a tick went, as its first locked section saw it; see [`crate::tick`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum TickOutcome {
    /// The tick was claimed here and the locked body ran (whatever it returned).
    Ran,
    /// Another owner held the lock, so the tick was not claimed here.
    Held,
    /// The tick had already been claimed, by another replica or an earlier run.
    Claimed {
        /// The last claimed tick (epoch milliseconds of its scheduled fire time).
        last_tick: i64,
    },
    /// Taking the lock failed (Redis error, invalid key or options).
    LockFailed(LockError),
    /// The tick was claimed, but the lock was lost while the body ran and the body was
    /// cancelled.
    Lost(LossReason),
}

struct TickContext {
    /// `None`: a run outside any slot (a manual run), whose first section claims no tick.
    tick: Option<i64>,
    /// Set by the first locked section of the run, the one that claims the tick and reports.
    claimed: AtomicBool,
    outcome: Arc<Mutex<Option<TickOutcome>>>,
}

/// Runs `fut` as the run of tick `tick`; returns its output and the outcome reported by its
/// first locked section, if it had one.
pub(crate) async fn tick_scope<F: Future>(tick: Option<i64>, fut: F) -> (F::Output, Option<TickOutcome>) {
    let outcome = Arc::new(Mutex::new(None));
    let context = TickContext { tick, claimed: AtomicBool::new(false), outcome: outcome.clone() };
    let output = TICK.scope(context, fut).await;
    let outcome = lock_unpoisoned(&outcome).take();
    (output, outcome)
}

/// What the first outermost locked section of a run does for it: report the run's outcome
/// and, with a tick, claim that tick with its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TickClaim(pub(crate) Option<i64>);

/// The claim of the first outermost locked section of a run (which then reports the run's
/// outcome); `None` for any other section.
pub(crate) fn claim_tick() -> Option<TickClaim> {
    if current().is_some() {
        // Locks taken inside a locked section are the body's own business.
        return None;
    }
    TICK.try_with(|t| (!t.claimed.swap(true, Ordering::AcqRel)).then_some(TickClaim(t.tick))).ok().flatten()
}

/// Records the tick's outcome; only the section that claimed the tick calls it.
pub(crate) fn report_tick(outcome: TickOutcome) {
    let _ = TICK.try_with(|t| *lock_unpoisoned(&t.outcome) = Some(outcome));
}

#[derive(Debug, Clone)]
struct Held {
    /// Identity of the client that holds it: the same key on another client (another Redis)
    /// is another lock.
    client: usize,
    state: Arc<LockState>,
}

/// The innermost hold of `key` through `client` in the current task, if any.
pub(crate) fn find(client: usize, key: &str) -> Option<Arc<LockState>> {
    HELD.try_with(|held| {
        held.iter().rev().find(|h| h.client == client && h.state.key == key).map(|h| h.state.clone())
    })
    .ok()
    .flatten()
}

/// Runs `fut` with `state` added to the current task's held locks.
pub(crate) async fn enter<F: Future>(client: usize, state: Arc<LockState>, fut: F) -> F::Output {
    let mut held = HELD.try_with(|held| held.as_ref().clone()).unwrap_or_default();
    held.push(Held { client, state });
    HELD.scope(Arc::new(held), fut).await
}

/// The lock held by the innermost locked section ([`LockClient::with_lock`] or an annotated
/// fn) that the current task is running in, or `None` outside any.
///
/// [`LockClient::with_lock`]: crate::LockClient::with_lock
///
/// ```no_run
/// # async fn write_with_fence(_: u64) {}
/// # async fn demo(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
/// use lock_core::LockOptions;
///
/// client
///     .with_lock("lock:product:42", LockOptions::new().fencing(true), async {
///         let lock = lock_core::current().expect("inside a locked section");
///         write_with_fence(lock.fence().unwrap_or(0)).await;
///     })
///     .await?;
/// # Ok(()) }
/// ```
pub fn current() -> Option<CurrentLock> {
    HELD.try_with(|held| held.last().map(|h| CurrentLock { state: h.state.clone() })).ok().flatten()
}

/// A view of the lock held by the current locked section; see [`current`].
#[derive(Debug, Clone)]
pub struct CurrentLock {
    state: Arc<LockState>,
}

impl CurrentLock {
    /// The lock's key.
    pub fn key(&self) -> &str {
        &self.state.key
    }

    /// The owner token stored in Redis.
    pub fn token(&self) -> &str {
        &self.state.token
    }

    /// The fencing token, when the lock was taken with fencing.
    pub fn fence(&self) -> Option<u64> {
        self.state.fence
    }

    /// Whether the lock is still known to be ours; see [`LockGuard::is_held`](crate::held::guard::LockGuard::is_held).
    pub fn is_held(&self) -> bool {
        self.state.is_held()
    }

    /// Resolves when the lock is lost; see [`LockGuard::lost`](crate::held::guard::LockGuard::lost).
    pub fn lost(&self) -> impl Future<Output = LossReason> + Send + 'static {
        self.state.clone().lost()
    }

    /// Gives the lock up as lost ([`LossReason::Revoked`]), from any task that has this view:
    /// the locked section is cancelled as for any lost lock (with `OnLost::Cancel`, its body is
    /// dropped at its next `.await` and the section returns [`LockError::Lost`]; with
    /// `OnLost::Continue`, the body goes on and sees [`is_held`](Self::is_held) false), and its
    /// release then frees the key, still this owner's. The scheduler's `Overlap::Replace` stops a
    /// run with it. Returns false if the lock was already released or lost.
    pub fn revoke(&self) -> bool {
        self.state.mark_lost(LossReason::Revoked)
    }
}
