//! A lost pub/sub connection: every waiter told to look once, and the subscriptions restored
//! in the background as soon as Redis serves them again.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Hub;
use crate::sync::lock_unpoisoned;

/// How often a lost pub/sub connection is tried again while waiters need it, for the first
/// [`RESTORE_FAST`]: a failover's new master (Sentinel) or a slot's new owner (Cluster) is
/// heard from within this of serving.
const RESTORE_POLL: Duration = Duration::from_millis(50);

/// How long a lost pub/sub connection is tried every [`RESTORE_POLL`]; then the pause doubles
/// up to [`RESTORE_POLL_MAX`], so that a lasting refusal (an ACL without `SUBSCRIBE`, a node
/// that stays down) costs a few tries a second, not twenty.
const RESTORE_FAST: Duration = Duration::from_secs(10);

/// The longest pause between tries of a lost pub/sub connection.
const RESTORE_POLL_MAX: Duration = Duration::from_millis(500);

/// How long a lost pub/sub connection is tried again in the background; past it, the waiters'
/// own retries reconnect (they fall back to their timers meanwhile).
const RESTORE_FOR: Duration = Duration::from_secs(60);

impl Hub {
    /// Restores the subscriptions of a lost connection in the background, as soon as Redis
    /// serves them again (a restarted node, a promoted master, a slot's new owner), then wakes
    /// every waiter to look once: a release may have been announced while nobody listened.
    /// Without it a waiter would hear nothing until its own fallback timer fired, and in a
    /// cluster the sharded subscriptions of a failed master never come back by themselves
    /// (the cluster connection learns the new owner only from a command routed there).
    fn restore(self: &Arc<Self>) {
        if self.restoring.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.restoring.store(false, Ordering::Release);
            return;
        };
        let weak = Arc::downgrade(self);
        rt.spawn(async move {
            let started = tokio::time::Instant::now();
            let mut poll = RESTORE_POLL;
            while started.elapsed() < RESTORE_FOR {
                tokio::time::sleep(poll).await;
                if started.elapsed() >= RESTORE_FAST {
                    poll = (poll * 2).min(RESTORE_POLL_MAX);
                }
                let Some(shared) = weak.upgrade() else { return };
                let wanted: Vec<String> = {
                    let state = lock_unpoisoned(&shared.state);
                    state.channels.iter().filter(|(_, c)| !c.slots.is_empty()).map(|(n, _)| n.clone()).collect()
                };
                if wanted.is_empty() {
                    break;
                }
                let restored = {
                    let mut conn = shared.conn.lock().await;
                    let mut outcome = Ok(());
                    for channel in &wanted {
                        if let Err(e) = shared.subscribe_locked(&mut conn, channel).await {
                            outcome = Err(e);
                            break;
                        }
                    }
                    outcome
                };
                match restored {
                    Ok(()) => {
                        shared.wake_all();
                        tracing::debug!(channels = wanted.len(), after = ?started.elapsed(), "lock pub/sub subscriptions restored");
                        break;
                    }
                    Err(e) => tracing::trace!(error = %crate::error::ErrorChain(&e), "lock pub/sub not restored yet"),
                }
            }
            if let Some(shared) = weak.upgrade() {
                shared.restoring.store(false, Ordering::Release);
            }
        });
    }

    /// The server dropped this client's subscription of `channel`: Redis unsubscribes a shard
    /// channel's subscribers when their node gives its slot up (a slot migration; a replica
    /// promoted over its failed master, which is how a subscription made on the replica during
    /// a failover ends). If waiters still need it, it is subscribed again in the background,
    /// and they look once: a release may have been announced meanwhile.
    pub(super) fn channel_dropped(self: &Arc<Self>, channel: &str) {
        let wanted = {
            let mut state = lock_unpoisoned(&self.state);
            match state.channels.get_mut(channel) {
                Some(c) if !c.slots.is_empty() => {
                    c.confirmed = false;
                    c.subscribed = None;
                    c.slots.values().for_each(|s| s.wake());
                    true
                }
                _ => false,
            }
        };
        if wanted {
            tracing::debug!(channel, "a sharded subscription was dropped by the server; subscribing again");
            self.restore();
        }
    }

    /// Wakes every waiter to retry.
    fn wake_all(&self) {
        let state = lock_unpoisoned(&self.state);
        for channel in state.channels.values() {
            channel.slots.values().for_each(|s| s.wake());
        }
    }

    /// Forgets the connection of `generation`, lets every head retry (a release may have been
    /// announced while it was down), and restores its subscriptions in the background.
    pub(super) fn connection_lost(self: &Arc<Self>, generation: u64) {
        let was_live = {
            let mut state = lock_unpoisoned(&self.state);
            let was_live = state.live == Some(generation);
            if was_live {
                state.live = None;
            }
            was_live
        };
        self.wake_all();
        if was_live {
            tracing::debug!("lock pub/sub connection closed");
            self.restore();
        }
    }
}
