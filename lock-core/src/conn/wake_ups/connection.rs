//! The pub/sub connection itself, of either kind (to one node, or to a cluster with sharded
//! pub/sub): opening it, subscribing a channel, and the messages it delivers.

use std::sync::{Arc, Weak};

use deadpool_redis::redis::cluster_async::ClusterConnection;
use deadpool_redis::redis::{self, PushInfo, PushKind, Value, aio::PubSubSink};
use futures_util::StreamExt;
use tokio::task::JoinHandle;

use super::{Hub, timed_out};
use crate::conn::deploy::PubSubSource;
use crate::error::{LockError, Result};
use crate::sync::lock_unpoisoned;

pub(super) struct PubSubConn {
    link: PubSubLink,
    pub(super) generation: u64,
}

/// A pub/sub connection of either kind.
enum PubSubLink {
    /// To one node: the sink, and the task reading messages (it owns the stream, and so the
    /// connection).
    Node { sink: PubSubSink, reader: JoinHandle<()> },
    /// To a cluster, with sharded pub/sub; messages arrive through its push sender.
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for PubSubConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.link {
            PubSubLink::Node { .. } => "node",
            PubSubLink::Cluster(_) => "cluster",
        };
        f.debug_struct("PubSubConn").field("kind", &kind).field("generation", &self.generation).finish()
    }
}

impl PubSubConn {
    /// A node connection whose reader ended without reporting (its runtime shut down) is dead.
    fn is_dead(&self) -> bool {
        match &self.link {
            PubSubLink::Node { reader, .. } => reader.is_finished(),
            PubSubLink::Cluster(_) => false,
        }
    }

    async fn subscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        match &mut self.link {
            PubSubLink::Node { sink, .. } => sink.subscribe(channel).await,
            PubSubLink::Cluster(conn) => conn.ssubscribe(channel).await,
        }
    }

    pub(super) async fn unsubscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        match &mut self.link {
            PubSubLink::Node { sink, .. } => sink.unsubscribe(channel).await,
            PubSubLink::Cluster(conn) => conn.sunsubscribe(channel).await,
        }
    }
}

impl Drop for PubSubConn {
    fn drop(&mut self) {
        if let PubSubLink::Node { reader, .. } = &self.link {
            reader.abort();
        }
    }
}

impl Hub {
    async fn connect(self: &Arc<Self>) -> Result<PubSubConn> {
        let source = self.lock_conn.deployment().pubsub_source().await?;
        let generation = {
            let mut state = lock_unpoisoned(&self.state);
            state.generations += 1;
            state.generations
        };
        let link = match source {
            PubSubSource::Node(client) => self.connect_node(&client, generation).await?,
            PubSubSource::Cluster(recipe) => {
                let weak: Weak<Hub> = Arc::downgrade(self);
                // Called by redis-rs for every push, without blocking: dispatch at once.
                let on_push = move |push: PushInfo| -> std::result::Result<(), std::convert::Infallible> {
                    if let Some(shared) = weak.upgrade() {
                        shared.on_cluster_push(push, generation);
                    }
                    Ok(())
                };
                let client = recipe
                    .builder()
                    .use_protocol(redis::ProtocolVersion::RESP3)
                    .push_sender(on_push)
                    .build()
                    .map_err(|e| LockError::redis("opening the sharded pub/sub connection", e))?;
                let conn = tokio::time::timeout(self.timeout, client.get_async_connection())
                    .await
                    .unwrap_or_else(|_| Err(timed_out()))
                    .map_err(|e| LockError::redis("opening the sharded pub/sub connection", e))?;
                PubSubLink::Cluster(conn)
            }
        };
        lock_unpoisoned(&self.state).live = Some(generation);
        Ok(PubSubConn { link, generation })
    }

    /// [`Ticket::ensure_subscribed`] for `channel`, under the connection's lock `conn`.
    pub(super) async fn subscribe_locked(
        self: &Arc<Self>,
        conn: &mut Option<PubSubConn>,
        channel: &str,
    ) -> Result<bool> {
        {
            let state = lock_unpoisoned(&self.state);
            // A reader that ended without reporting (its runtime shut down) means a dead
            // connection too.
            let live = conn
                .as_ref()
                .filter(|c| !c.is_dead())
                .map(|c| c.generation)
                .filter(|g| state.live == Some(*g));
            let known = state.channels.get(channel);
            if live.is_some() && known.is_some_and(|c| c.confirmed && c.subscribed == live) {
                return Ok(false);
            }
            if live.is_none() {
                *conn = None;
            }
        }
        if conn.is_none() {
            *conn = Some(self.connect().await?);
        }
        let Some(c) = conn.as_mut() else { return Ok(true) };
        // Recorded before the round trip: if this future is dropped mid-way, the last waiter
        // to leave still sends the UNSUBSCRIBE (ordered after this SUBSCRIBE by the mutex).
        if let Some(known) = lock_unpoisoned(&self.state).channels.get_mut(channel) {
            known.subscribed = Some(c.generation);
            known.confirmed = false;
        }
        let subscribed = tokio::time::timeout(self.timeout, c.subscribe(channel))
            .await
            .unwrap_or_else(|_| Err(timed_out()));
        if let Err(e) = subscribed {
            self.reset(conn);
            return Err(LockError::redis(format!("subscribing to `{channel}`"), e));
        }
        if let Some(known) = lock_unpoisoned(&self.state).channels.get_mut(channel)
            && known.subscribed == Some(c.generation)
        {
            known.confirmed = true;
        }
        Ok(true)
    }

    /// A pub/sub connection to one node, and the task reading its messages.
    async fn connect_node(self: &Arc<Self>, client: &redis::Client, generation: u64) -> Result<PubSubLink> {
        let pubsub = tokio::time::timeout(self.timeout, client.get_async_pubsub())
            .await
            .unwrap_or_else(|_| Err(timed_out()))
            .map_err(|e| LockError::redis("opening the pub/sub connection", e))?;
        let (sink, mut stream) = pubsub.split();
        let weak: Weak<Hub> = Arc::downgrade(self);
        let reader = tokio::spawn(async move {
            while let Some(msg) = stream.next().await {
                let Some(shared) = weak.upgrade() else { return };
                let token: String = msg.get_payload().unwrap_or_default();
                shared.deliver(msg.get_channel_name(), &token);
            }
            // The connection is gone: forget it, and let every head retry (and resubscribe),
            // since a release may have been announced while it was down.
            if let Some(shared) = weak.upgrade() {
                shared.connection_lost(generation);
            }
        });
        Ok(PubSubLink::Node { sink, reader })
    }

    /// A message on `channel`: wakes its listeners, and the waiter it names, or, empty, every
    /// waiter there.
    pub(super) fn deliver(&self, channel: &str, token: &str) {
        let state = lock_unpoisoned(&self.state);
        let Some(channel) = state.channels.get(channel) else { return };
        channel.slots.values().filter(|s| s.listener).for_each(|s| s.hand_over());
        match channel.slots.get(token) {
            Some(slot) => slot.hand_over(),
            // Freed with lapsed tickets queued: whoever waits here may retry.
            None if token.is_empty() => channel.slots.values().for_each(|s| s.wake()),
            None => {}
        }
    }

    /// A push from the cluster connection of `generation`: a sharded message, or a node
    /// connection lost. redis-rs reconnects to that node, but after a failover the node is gone
    /// and the connection, which sends no commands, never learns who serves its slots now: its
    /// sharded subscriptions would stay lost. So the whole connection counts as lost, and is
    /// rebuilt (with the current slot map) and resubscribed.
    fn on_cluster_push(self: &Arc<Self>, push: PushInfo, generation: u64) {
        let text = |v: Option<&Value>| match v {
            Some(Value::BulkString(b)) => std::str::from_utf8(b).ok().map(str::to_owned),
            Some(Value::SimpleString(s)) => Some(s.clone()),
            _ => None,
        };
        tracing::trace!(kind = ?push.kind, data = ?push.data, "cluster pub/sub push");
        match push.kind {
            PushKind::SMessage => {
                if let Some(channel) = text(push.data.first()) {
                    self.deliver(&channel, &text(push.data.get(1)).unwrap_or_default());
                }
            }
            PushKind::Disconnection => {
                tracing::debug!("a cluster node's pub/sub connection closed");
                self.connection_lost(generation);
            }
            // Ours (the channel is gone from the state then), or the server's own.
            PushKind::SUnsubscribe => {
                if let Some(channel) = text(push.data.first()) {
                    self.channel_dropped(&channel);
                }
            }
            _ => {}
        }
    }

    /// Drops the connection after an error on it.
    pub(super) fn reset(self: &Arc<Self>, conn: &mut Option<PubSubConn>) {
        if let Some(old) = conn.take() {
            self.connection_lost(old.generation);
        }
    }
}
