//! Task-scoped re-entrancy: the locks held by the locked sections the current task is inside.

use std::future::Future;
use std::sync::Arc;

use crate::error::LossReason;
use crate::state::LockState;

tokio::task_local! {
    static HELD: Arc<Vec<Held>>;
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

    /// Whether the lock is still known to be ours; see [`LockGuard::is_held`](crate::LockGuard::is_held).
    pub fn is_held(&self) -> bool {
        self.state.is_held()
    }

    /// Resolves when the lock is lost; see [`LockGuard::lost`](crate::LockGuard::lost).
    pub fn lost(&self) -> impl Future<Output = LossReason> + Send + 'static {
        self.state.clone().lost()
    }
}
