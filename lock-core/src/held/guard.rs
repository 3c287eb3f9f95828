//! [`LockGuard`]: the proof of ownership of a held lock.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{LossReason, Result};
use crate::held::release::Releaser;
use crate::held::state::LockState;

/// Proof that this process holds a lock.
///
/// Release it with [`release`](LockGuard::release) to learn whether it was still ours; dropping
/// it without releasing (an early return, a panic, a cancelled future) releases it in the
/// background at once, so the lock frees within a round trip instead of at lease expiry.
///
/// A guard obtained for a key that the current task already holds through
/// [`LockClient::with_lock`](crate::LockClient::with_lock) (or an annotated fn) is *nested*: it shares the outer hold, and
/// releasing or dropping it touches neither Redis nor the outer hold.
#[must_use = "dropping a LockGuard releases the lock at once"]
pub struct LockGuard {
    state: Arc<LockState>,
    releaser: Arc<Releaser>,
    nested: bool,
    done: bool,
}

impl LockGuard {
    /// The guard of a lock just acquired.
    pub(crate) fn new(state: Arc<LockState>, releaser: Arc<Releaser>) -> Self {
        releaser.guard_created();
        LockGuard { state, releaser, nested: false, done: false }
    }

    /// A guard sharing an outer hold of the same task.
    pub(crate) fn nested(state: Arc<LockState>, releaser: Arc<Releaser>) -> Self {
        LockGuard { state, releaser, nested: true, done: false }
    }

    pub(crate) fn state(&self) -> &Arc<LockState> {
        &self.state
    }

    /// The lock's key.
    pub fn key(&self) -> &str {
        &self.state.key
    }

    /// The owner token stored in Redis: `"<instance-id>:<client id>:<uuid>"` (see
    /// [`schema::owner_of`](crate::schema::owner_of)); its owner part names the client's liveness key.
    pub fn token(&self) -> &str {
        &self.state.token
    }

    /// The fencing token drawn at acquisition, when fencing was requested. It strictly
    /// increases with every acquisition of the key, so a store that remembers the highest
    /// fence it has seen can reject writes from a holder that stalled past its lease.
    pub fn fence(&self) -> Option<u64> {
        self.state.fence
    }

    /// The lease: fixed, or the watchdog's, renewed while the guard lives.
    pub fn lease(&self) -> Duration {
        self.state.lease
    }

    /// Whether this guard shares an outer hold of the same task (re-entrant acquisition).
    pub fn is_nested(&self) -> bool {
        self.nested
    }

    /// Whether the lock is still ours as far as this process can tell: not lost, and its
    /// local deadline (last successful acquisition or renewal + lease − clock-drift allowance)
    /// not passed. Use it before a side effect that must not happen without the lock, and
    /// prefer [`fence`](Self::fence) where the store can check it.
    pub fn is_held(&self) -> bool {
        self.state.is_held()
    }

    /// The local deadline: until then the lock is known to be ours.
    pub fn valid_until(&self) -> Instant {
        self.state.deadline()
    }

    /// A future that resolves when ownership is lost: a renewal was refused (the key was
    /// deleted or taken over from outside), or the local deadline passed without a successful
    /// renewal (Redis unreachable, process stalled, fixed lease run out). It never resolves
    /// once the lock is released. Race it against the work with `tokio::select!` to stop work
    /// that must not go on unprotected.
    ///
    /// ```no_run
    /// use lock_core::{LockClient, LockError, LockOptions};
    ///
    /// # async fn copy_partition() {}
    /// async fn migrate(client: &LockClient) -> Result<(), LockError> {
    ///     let guard = client.try_lock("lock:migration", LockOptions::new()).await?;
    ///     tokio::select! {
    ///         () = copy_partition() => {
    ///             guard.release().await?;
    ///             Ok(())
    ///         }
    ///         // Another replica may hold it from here on: stop, and say why.
    ///         reason = guard.lost() => Err(LockError::Lost { key: guard.key().to_owned(), reason }),
    ///     }
    /// }
    /// ```
    pub fn lost(&self) -> impl Future<Output = LossReason> + Send + 'static {
        self.state.clone().lost()
    }

    /// Releases the lock. Returns whether it was still ours: `false` means it had expired or
    /// been taken over, so the protected work ran (partly) unprotected.
    #[must_use = "`false` means the work ran (partly) without the lock"]
    ///
    /// With a minimum hold (`at_least`) the key is kept until the minimum has passed instead
    /// of being deleted. A nested guard touches nothing and reports whether the outer hold is
    /// still valid.
    pub async fn release(self) -> Result<bool> {
        self.release_as(false).await
    }

    /// [`release`](Self::release), the one-key release grouped with others when `grouped`.
    pub(crate) async fn release_as(mut self, grouped: bool) -> Result<bool> {
        if self.nested {
            self.done = true;
            return Ok(self.state.is_held());
        }
        // If this future is dropped before the release is done (a timeout around it, a
        // cancelled caller), `done` is still false and Drop releases in the background.
        let result = self.releaser.release(&self.state, grouped).await;
        self.done = true;
        self.releaser.guard_done();
        result
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.done || self.nested {
            return;
        }
        self.releaser.guard_done();
        self.releaser.release_in_background(&self.state);
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.state.key)
            .field("token", &self.state.token)
            .field("fence", &self.state.fence)
            .field("nested", &self.nested)
            .field("held", &self.state.is_held())
            .finish()
    }
}

/// A guard of another primitive (a permit, a read or a write hold): a [`LockGuard`] inside,
/// with the same methods, so that each primitive's guard is its own type.
macro_rules! hold_guard {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[must_use = concat!("dropping a ", stringify!($name), " gives the ", $what, " back at once")]
        pub struct $name(pub(crate) $crate::held::guard::LockGuard);

        impl $name {
            /// The name of the primitive this hold is on (its Redis key).
            pub fn name(&self) -> &str {
                self.0.key()
            }

            #[doc = concat!("The owner token of this ", $what, ", as stored in Redis (see [`LockGuard::token`](crate::held::guard::LockGuard::token)).")]
            pub fn token(&self) -> &str {
                self.0.token()
            }

            #[doc = concat!("The fencing token drawn when this ", $what, " was taken, when fencing was requested: it strictly increases with every acquisition on this primitive.")]
            pub fn fence(&self) -> Option<u64> {
                self.0.fence()
            }

            /// The lease: fixed, or the watchdog's, renewed while the guard lives.
            pub fn lease(&self) -> std::time::Duration {
                self.0.lease()
            }

            /// Whether this guard shares an outer hold of the same task (see the primitive's
            /// re-entrancy rules); always `false` for a permit.
            pub fn is_nested(&self) -> bool {
                self.0.is_nested()
            }

            #[doc = concat!("Whether the ", $what, " is still ours as far as this process can tell (see [`LockGuard::is_held`](crate::held::guard::LockGuard::is_held)).")]
            pub fn is_held(&self) -> bool {
                self.0.is_held()
            }

            /// The local deadline: until then the hold is known to be ours.
            pub fn valid_until(&self) -> tokio::time::Instant {
                self.0.valid_until()
            }

            #[doc = concat!("Resolves when the ", $what, " is lost (see [`LockGuard::lost`](crate::held::guard::LockGuard::lost)); never once released.")]
            pub fn lost(&self) -> impl std::future::Future<Output = $crate::error::LossReason> + Send + 'static {
                self.0.lost()
            }

            #[doc = concat!("Gives the ", $what, " back (handed to the oldest waiter that fits, if any). Returns whether it was still ours: `false` means the work ran (partly) without it.")]
            #[must_use = "`false` means the work ran (partly) without the hold"]
            pub async fn release(self) -> $crate::error::Result<bool> {
                self.0.release().await
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("name", &self.0.key())
                    .field("token", &self.0.token())
                    .field("fence", &self.0.fence())
                    .field("nested", &self.0.is_nested())
                    .field("held", &self.0.is_held())
                    .finish()
            }
        }
    };
}
pub(crate) use hold_guard;
