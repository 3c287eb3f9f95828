//! Releasing locks: the owner-checked release itself, and the releases (and other clean-ups)
//! that run in the background when a guard is dropped, a release is cancelled or an
//! acquisition's outcome is unknown, counted so that a shutdown can wait for them.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

use crate::conn::Conn;
use crate::error::Result;
use crate::options::millis;
use crate::scripts::RELEASE;
use crate::state::LockState;
use crate::watchdog::Watchdog;

/// Releases this client's locks; shared by its guards.
#[derive(Debug)]
pub(crate) struct Releaser {
    conn: Arc<Conn>,
    watchdog: Arc<Watchdog>,
    instance: String,
    /// Guards alive and not yet released (nested ones excluded).
    held: AtomicUsize,
    /// Background tasks in flight.
    in_flight: AtomicUsize,
    /// Woken when `in_flight` drops to zero.
    idle: Notify,
}

impl Releaser {
    pub(crate) fn new(conn: Arc<Conn>, watchdog: Arc<Watchdog>, instance: String) -> Self {
        Releaser {
            conn,
            watchdog,
            instance,
            held: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            idle: Notify::new(),
        }
    }

    /// Counts a new guard as held; [`guard_done`](Self::guard_done) uncounts it.
    pub(crate) fn guard_created(&self) {
        self.held.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn guard_done(&self) {
        self.held.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Releases `state`'s lock: compare-and-delete and announce, or, within a minimum hold,
    /// shorten the key's expiry to what is left of it. Returns whether it was still ours.
    pub(crate) async fn release(&self, state: &LockState) -> Result<bool> {
        let was_held = state.mark_released();
        self.watchdog.unregister(state.id);
        let keep = state
            .at_least
            .map(|min| min.saturating_sub(state.acquired_at.elapsed()))
            .filter(|d| !d.is_zero());
        let mut invocation = RELEASE.prepare_invoke();
        invocation.key(&state.key).arg(&state.token).arg(keep.map_or(Ok(0), |d| millis(d, "at_least"))?);
        // Not retried after a timeout: a late first RELEASE would make the retry report that
        // the lock was no longer ours.
        let owned: i64 =
            self.conn.invoke_with(&invocation, || format!("releasing lock `{}`", state.key), false).await?;
        let owned = owned == 1;
        if owned {
            tracing::debug!(key = %state.key, instance = %self.instance, fence = state.fence, held_for = ?state.acquired_at.elapsed(), kept_for = ?keep, "lock released");
        } else if was_held {
            tracing::warn!(key = %state.key, instance = %self.instance, fence = state.fence, "lock released, but it had already expired or been taken over");
        }
        Ok(owned)
    }

    /// A dropped guard's release: runs in the background on the current runtime.
    pub(crate) fn release_in_background(self: &Arc<Self>, state: &Arc<LockState>) {
        self.watchdog.unregister(state.id);
        let task_state = state.clone();
        let spawned = self.spawn(move |releaser| async move {
            if let Err(e) = releaser.release(&task_state).await {
                tracing::warn!(key = %task_state.key, error = %e, "background release failed; the lock expires at the end of its lease");
            }
        });
        if !spawned {
            state.mark_released();
            tracing::warn!(key = %state.key, "lock guard dropped outside a tokio runtime; the lock expires at the end of its lease");
        }
    }

    /// Deletes `key` if it holds `token`: the clean-up of an acquisition whose outcome is
    /// unknown (its reply was lost or never awaited).
    pub(crate) fn release_token_in_background(self: &Arc<Self>, key: &str, token: &str) {
        let (key, token) = (key.to_owned(), token.to_owned());
        self.spawn(move |releaser| async move {
            let mut invocation = RELEASE.prepare_invoke();
            invocation.key(&key).arg(&token).arg(0);
            let _: Result<i64> =
                releaser.conn.invoke(&invocation, || format!("cleaning up lock `{key}`")).await;
        });
    }

    /// Runs a script in the background, counted like a release; errors are ignored (the
    /// script's effect also lapses by itself).
    pub(crate) fn run_in_background(
        self: &Arc<Self>,
        invocation: deadpool_redis::redis::ScriptInvocation<'static>,
        action: &'static str,
    ) {
        self.spawn(move |releaser| async move {
            let _: Result<i64> = releaser.conn.invoke(&invocation, || action.to_owned()).await;
        });
    }

    /// Spawns `task` on the current runtime, counted until it ends so that
    /// [`flush`](Self::flush) can wait for it. False without a runtime.
    fn spawn<F, Fut>(self: &Arc<Self>, task: F) -> bool
    where
        F: FnOnce(Arc<Releaser>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return false };
        let counted = InFlight::enter(self.clone());
        let task = task(self.clone());
        rt.spawn(async move {
            task.await;
            drop(counted);
        });
        true
    }

    /// Waits until no background task is in flight.
    pub(crate) async fn flush(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.in_flight.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// One background task in flight; counted in `Releaser::in_flight`.
struct InFlight {
    releaser: Arc<Releaser>,
}

impl InFlight {
    fn enter(releaser: Arc<Releaser>) -> Self {
        releaser.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight { releaser }
    }
}

impl Drop for InFlight {
    // Also runs when the task is dropped unfinished (its runtime shut down).
    fn drop(&mut self) {
        if self.releaser.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.releaser.idle.notify_waiters();
        }
    }
}
