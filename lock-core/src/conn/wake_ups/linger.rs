//! Lingering subscriptions: a channel stays subscribed for [`LINGER`] after its last waiter
//! left, then is unsubscribed.

use std::sync::Arc;
use std::time::Duration;

use super::{Hub, LINGER, State, timed_out};
use crate::sync::lock_unpoisoned;

/// [`Hub::idle`] under the caller's lock.
fn idle_in(state: &mut State, channel: &str) -> Option<Duration> {
    let c = state.channels.get_mut(channel)?;
    match c.idle_since {
        Some(since) if c.slots.is_empty() => Some(LINGER.saturating_sub(since.elapsed())),
        _ => {
            c.lingering = false;
            None
        }
    }
}

/// A channel's running linger timer: lowers the channel's flag when the timer's future ends
/// or is dropped (its runtime shut down), so the next waiter to leave starts another.
pub(super) struct LingerTimer {
    pub(super) shared: Arc<Hub>,
    pub(super) channel: String,
}

impl Drop for LingerTimer {
    fn drop(&mut self) {
        if let Some(c) = lock_unpoisoned(&self.shared.state).channels.get_mut(&self.channel) {
            c.lingering = false;
        }
    }
}

impl Hub {
    /// The linger timer of `channel` (one per channel, not one per waiter that leaves: a
    /// contended loop leaves hundreds of times a second). Unsubscribes once nobody has waited
    /// on it for a whole [`LINGER`], waiting longer while waiters come and go; ends at once
    /// if a waiter is there (the next one to leave starts a timer again).
    pub(super) async fn linger(self: &Arc<Self>, channel: &str) {
        let mut wait = LINGER;
        loop {
            tokio::time::sleep(wait).await;
            match self.idle(channel) {
                Some(left) if !left.is_zero() => wait = left,
                Some(_) => match self.unsubscribe_if_idle(channel).await {
                    Some(left) => wait = left,
                    None => return,
                },
                None => return,
            }
        }
    }

    /// How much of [`LINGER`] is left before `channel` may be unsubscribed (zero: none);
    /// `None` if it is gone or has a waiter again (then its timer ends: the flag is lowered).
    fn idle(&self, channel: &str) -> Option<Duration> {
        idle_in(&mut lock_unpoisoned(&self.state), channel)
    }

    /// Unsubscribes from `channel` if nobody has waited on it for [`LINGER`]. Returns how
    /// long to keep lingering if a waiter came and left while this waited for the connection.
    async fn unsubscribe_if_idle(self: &Arc<Self>, channel: &str) -> Option<Duration> {
        let mut conn = self.conn.lock().await;
        let subscribed = {
            // Checked and removed under one lock: a waiter registering in between would
            // otherwise lose its channel.
            let mut state = lock_unpoisoned(&self.state);
            match idle_in(&mut state, channel) {
                Some(left) if !left.is_zero() => return Some(left),
                Some(_) => {
                    let subscribed = state.channels.remove(channel).and_then(|c| c.subscribed);
                    subscribed.filter(|g| state.live == Some(*g))
                }
                None => None,
            }
        };
        if let (Some(generation), Some(c)) = (subscribed, conn.as_mut())
            && c.generation == generation
            && let Err(e) = tokio::time::timeout(self.timeout, c.unsubscribe(channel))
                .await
                .unwrap_or_else(|_| Err(timed_out()))
        {
            tracing::debug!(error = %crate::error::ErrorChain(&e), channel, "unsubscribe failed; resetting the pub/sub connection");
            self.reset(&mut conn);
        }
        None
    }
}
