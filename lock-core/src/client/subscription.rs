//! [`Subscription`]: the application's own channel on the client's shared pub/sub connection
//! (the one lock hand-offs are heard on), from [`LockClient::subscribe`].

use crate::client::LockClient;
use crate::conn::wake_ups::Ticket;
use crate::error::Result;

/// A subscription to one channel through the client's shared pub/sub connection: no
/// connection of its own, `SUBSCRIBE` on one node or a Sentinel master, sharded `SSUBSCRIBE` in
/// a cluster (publish with [`LockClient::publish_command`]). Dropping it unsubscribes (shortly
/// after, as for a lock's channel).
///
/// Pub/sub delivers at most once: a message published while the connection was down is lost.
/// So [`next`](Subscription::next) also reports [`Notice::Gap`] when the connection is lost and
/// again when the subscription is restored; on either notice, look at whatever the channel
/// announces changes of. Call [`ensure`](Subscription::ensure) now and then (at each
/// fallback look): it subscribes again if the background restoration gave up.
///
/// ```no_run
/// # async fn demo(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
/// // In a cluster, the channel's hash tag puts it in the slot of the keys it announces.
/// let sub = client.subscribe("orders:{eu}:changed").await?;
/// loop {
///     // A message or a gap: either way, read the state again.
///     let _notice = sub.next().await;
///     // ... read `orders:{eu}:*` ...
/// #   break;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Subscription {
    ticket: Ticket,
}

/// What [`Subscription::next`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notice {
    /// One or more messages were published on the channel since the last notice.
    Message,
    /// The connection was lost, or has just been restored: messages may have been missed.
    Gap,
}

impl Subscription {
    /// The channel.
    pub fn channel(&self) -> &str {
        self.ticket.channel()
    }

    /// Waits for the next notice. Messages published while nobody awaited are not lost:
    /// they are reported (as one [`Notice::Message`]) by the next call.
    pub async fn next(&self) -> Notice {
        if self.ticket.woken().await { Notice::Message } else { Notice::Gap }
    }

    /// Makes sure the channel is subscribed on a live connection (no round trip if it is);
    /// returns `true` if it had to subscribe again (messages may have been missed: look).
    pub async fn ensure(&self) -> Result<bool> {
        self.ticket.ensure_subscribed().await
    }
}

impl LockClient {
    /// Subscribes to `channel` through this client's shared pub/sub connection (see
    /// [`Subscription`]); returns once Redis confirmed the subscription, so a message published
    /// after this returns is heard. In a cluster, give the channel the hash tag of the keys
    /// whose changes it announces, and publish from a script or pipeline on those keys.
    pub async fn subscribe(&self, channel: &str) -> Result<Subscription> {
        let ticket = self.core.waiters.listen(channel);
        ticket.ensure_subscribed().await?;
        Ok(Subscription { ticket })
    }

    /// The command that publishes to a [`Subscription`]'s channel on this deployment:
    /// `SPUBLISH` in a cluster (sharded pub/sub), `PUBLISH` otherwise.
    pub fn publish_command(&self) -> &'static str {
        self.core.conn.publish_command()
    }
}
