//! What a holder knows about one held lock, shared by its guard, the watchdog and the
//! re-entrancy scope.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use std::sync::Arc;

use crate::error::LossReason;
use crate::held::liveness::Identity;
use crate::held::unsettled::Unsettled;
use crate::options::drift;
use crate::schema::hold::Hold;
use crate::telemetry::KeyMetrics;

const HELD: u8 = 0;
const RELEASED: u8 = 1;
const LOST_EXPIRED: u8 = 2;
const LOST_NOT_OWNER: u8 = 3;
const LOST_REVOKED: u8 = 4;

#[derive(Debug)]
pub(crate) struct LockState {
    pub(crate) id: u64,
    pub(crate) key: String,
    /// A lock, a permit, a read or a write hold.
    pub(crate) hold: Hold,
    pub(crate) token: String,
    pub(crate) fence: Option<u64>,
    pub(crate) lease: Duration,
    pub(crate) at_least: Option<Duration>,
    pub(crate) acquired_at: Instant,
    /// Earlier tries of the token whose replies were lost and that may still run: given up
    /// again after the release (see `Releaser::release`).
    pub(crate) unsettled: Option<Unsettled>,
    /// The key's metrics, registered by the client.
    pub(crate) metrics: Arc<KeyMetrics>,
    /// The client identity the token belongs to: its liveness lease caps the deadline.
    identity: Arc<Identity>,
    /// Local deadline, as nanoseconds after `acquired_at`; only moves forward.
    deadline_nanos: AtomicU64,
    status: AtomicU8,
    /// Woken when the status leaves HELD, once something waits for a loss (`watched`): most
    /// guards are released without anyone waiting, and the wake-up is a lock to take.
    changed: Notify,
    watched: AtomicBool,
}

pub(crate) struct NewState {
    pub(crate) id: u64,
    pub(crate) key: String,
    pub(crate) hold: Hold,
    pub(crate) token: String,
    pub(crate) fence: Option<u64>,
    pub(crate) lease: Duration,
    pub(crate) at_least: Option<Duration>,
    /// When the acquiring command was sent: the lease is counted from there, not from the reply.
    pub(crate) sent_at: Instant,
    /// How long the key is known to live from `sent_at`: the lease, or less for a lock handed
    /// over by a release and not yet confirmed.
    pub(crate) valid_for: Duration,
    pub(crate) unsettled: Option<Unsettled>,
    pub(crate) identity: Arc<Identity>,
    pub(crate) metrics: Arc<KeyMetrics>,
}

impl LockState {
    pub(crate) fn new(n: NewState) -> Self {
        // `valid_for - drift` after `acquired_at` (= `sent_at`): no clock arithmetic needed.
        let until = n.valid_for.saturating_sub(drift(n.valid_for));
        LockState {
            id: n.id,
            key: n.key,
            hold: n.hold,
            token: n.token,
            fence: n.fence,
            lease: n.lease,
            at_least: n.at_least,
            acquired_at: n.sent_at,
            unsettled: n.unsettled,
            metrics: n.metrics,
            identity: n.identity,
            deadline_nanos: AtomicU64::new(u64::try_from(until.as_nanos()).unwrap_or(u64::MAX)),
            status: AtomicU8::new(HELD),
            changed: Notify::new(),
            watched: AtomicBool::new(false),
        }
    }

    /// The instance id of the client that holds the lock (the owner prefix of its token).
    pub(crate) fn instance(&self) -> &str {
        self.identity.instance()
    }

    /// Until when the lock is known to be ours: the lock key's lease and the client's liveness
    /// lease, both counted from when their last renewal was sent, minus drift.
    pub(crate) fn deadline(&self) -> Instant {
        self.key_deadline().min(self.identity.deadline())
    }

    fn key_deadline(&self) -> Instant {
        self.acquired_at + Duration::from_nanos(self.deadline_nanos.load(Ordering::Acquire))
    }

    /// When the last successful acquisition or renewal of the key was sent.
    pub(crate) fn renewed_at(&self) -> Instant {
        self.key_deadline() - self.lease.saturating_sub(drift(self.lease))
    }

    /// Pushes the deadline to `sent_at + lease - drift` after a renewal sent at `sent_at`.
    pub(crate) fn extend_from(&self, sent_at: Instant) {
        let until = (sent_at + self.lease.saturating_sub(drift(self.lease)))
            .saturating_duration_since(self.acquired_at);
        let nanos = u64::try_from(until.as_nanos()).unwrap_or(u64::MAX);
        self.deadline_nanos.fetch_max(nanos, Ordering::AcqRel);
    }

    /// Held, as far as this process knows: not released, not lost, deadline not passed.
    pub(crate) fn is_held(&self) -> bool {
        self.status.load(Ordering::Acquire) == HELD
            && !self.identity.is_dead()
            && Instant::now() < self.deadline()
    }

    /// Whether the identity the token belongs to has died (its liveness key is gone).
    pub(crate) fn identity_is_dead(&self) -> bool {
        self.identity.is_dead()
    }

    pub(crate) fn is_active(&self) -> bool {
        self.status.load(Ordering::Acquire) == HELD
    }

    /// Whether its holder released it (as opposed to held, or lost).
    pub(crate) fn is_released(&self) -> bool {
        self.status.load(Ordering::Acquire) == RELEASED
    }

    pub(crate) fn loss(&self) -> Option<LossReason> {
        match self.status.load(Ordering::Acquire) {
            LOST_EXPIRED => Some(LossReason::Expired),
            LOST_NOT_OWNER => Some(LossReason::NotOwner),
            LOST_REVOKED => Some(LossReason::Revoked),
            HELD if self.identity.is_dead() || Instant::now() >= self.deadline() => Some(LossReason::Expired),
            _ => None,
        }
    }

    /// Marks the lock released by its holder; false if it was already released or lost.
    pub(crate) fn mark_released(&self) -> bool {
        let done = self.transition(RELEASED);
        if done {
            self.notify_changed();
        }
        done
    }

    /// Marks the lock lost and logs it; false if it was already released or lost.
    pub(crate) fn mark_lost(&self, reason: LossReason) -> bool {
        let code = match reason {
            LossReason::Expired => LOST_EXPIRED,
            LossReason::NotOwner => LOST_NOT_OWNER,
            LossReason::Revoked => LOST_REVOKED,
        };
        let done = self.transition(code);
        if done {
            self.metrics.lost(reason);
            if reason == LossReason::Revoked {
                // Asked for: not a failure of the lock.
                tracing::info!(
                    key = %self.key,
                    instance = %self.instance(),
                    fence = self.fence,
                    held_for = ?self.acquired_at.elapsed(),
                    "lock given up: {reason}"
                );
            } else {
                tracing::warn!(
                    key = %self.key,
                    instance = %self.instance(),
                    fence = self.fence,
                    held_for = ?self.acquired_at.elapsed(),
                    "lock lost: {reason}"
                );
            }
            self.notify_changed();
        }
        done
    }

    // SeqCst here and in `lost`: either `lost` sees the new status after raising `watched`,
    // or this sees `watched` raised after the status changed, and wakes it.
    fn transition(&self, to: u8) -> bool {
        self.status.compare_exchange(HELD, to, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }

    fn notify_changed(&self) {
        if self.watched.load(Ordering::SeqCst) {
            self.changed.notify_waiters();
        }
    }

    /// Resolves when the lock is lost; never, once it is released.
    pub(crate) async fn lost(self: std::sync::Arc<Self>) -> LossReason {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            self.watched.store(true, Ordering::SeqCst);
            let died = self.identity.died.notified();
            tokio::pin!(died);
            died.as_mut().enable();
            match self.status.load(Ordering::SeqCst) {
                LOST_EXPIRED => return LossReason::Expired,
                LOST_NOT_OWNER => return LossReason::NotOwner,
                LOST_REVOKED => return LossReason::Revoked,
                RELEASED => std::future::pending::<()>().await,
                _ => {}
            }
            let deadline = self.deadline();
            if self.identity.is_dead() || Instant::now() >= deadline {
                // Nobody renewed it in time: Redis may already have expired the key.
                self.mark_lost(LossReason::Expired);
                continue;
            }
            tokio::select! {
                () = &mut changed => {}
                () = &mut died => {}
                // The deadline may have moved meanwhile; the loop re-reads it.
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::MetricsCache;

    fn held(id: u64, identity: &Arc<Identity>, metrics: &MetricsCache) -> Arc<LockState> {
        Arc::new(LockState::new(NewState {
            id,
            key: "k".into(),
            hold: Hold::Lock,
            token: "t".into(),
            fence: None,
            lease: Duration::from_secs(60),
            at_least: None,
            sent_at: Instant::now(),
            valid_for: Duration::from_secs(60),
            unsettled: None,
            identity: identity.clone(),
            metrics: metrics.of("k", Hold::Lock),
        }))
    }

    /// `lost()` racing `mark_lost` on another thread always resolves at once: the wake-up is
    /// skipped only while nothing watches, and a watcher that starts late sees the status.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_loss_wakes_a_concurrent_watcher() {
        let identity = Arc::new(Identity::alive_for("test", Duration::from_secs(600)));
        let metrics = MetricsCache::default();
        for id in 0..2000 {
            let state = held(id, &identity, &metrics);
            let watcher = tokio::spawn(state.clone().lost());
            if id % 2 == 0 {
                tokio::task::yield_now().await;
            }
            assert!(state.mark_lost(LossReason::NotOwner));
            let reason = tokio::time::timeout(Duration::from_secs(5), watcher)
                .await
                .expect("a watcher of a lost lock is woken, not left until the deadline")
                .expect("watcher task");
            assert_eq!(reason, LossReason::NotOwner);
        }
    }

    /// A revoked lock (given up on request) reads lost, with its own reason, to a watcher and
    /// to `is_held`; revoking twice, or after the release, changes nothing.
    #[tokio::test]
    async fn a_revoked_lock_reads_lost_as_revoked() {
        let identity = Arc::new(Identity::alive_for("test", Duration::from_secs(600)));
        let metrics = MetricsCache::default();
        let state = held(1, &identity, &metrics);
        let watcher = tokio::spawn(state.clone().lost());
        tokio::task::yield_now().await;
        assert!(state.mark_lost(LossReason::Revoked));
        assert!(!state.mark_lost(LossReason::Revoked));
        let reason =
            tokio::time::timeout(Duration::from_secs(5), watcher).await.expect("woken").expect("task");
        assert_eq!(reason, LossReason::Revoked);
        assert_eq!(state.loss(), Some(LossReason::Revoked));
        assert!(!state.is_held());
        let released = held(2, &identity, &metrics);
        assert!(released.mark_released());
        assert!(!released.mark_lost(LossReason::Revoked), "a released lock is not revoked");
    }

    /// A released lock never reports a loss, watched or not.
    #[tokio::test]
    async fn a_released_lock_is_never_lost() {
        let identity = Arc::new(Identity::alive_for("test", Duration::from_secs(600)));
        let metrics = MetricsCache::default();
        let state = held(1, &identity, &metrics);
        let watcher = tokio::spawn(state.clone().lost());
        tokio::task::yield_now().await;
        assert!(state.mark_released());
        assert!(!state.mark_lost(LossReason::Expired));
        assert!(tokio::time::timeout(Duration::from_millis(100), watcher).await.is_err());
    }
}
