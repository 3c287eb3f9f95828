//! Waiting for a held lock: one shared pub/sub connection per client, and per key a FIFO
//! queue of this client's waiters in which a release message wakes only the head.
//!
//! Only the head of a queue talks to Redis (retry at a release message, else after a jittered
//! backoff capped by the holder's remaining lease); the others wait to become head. So a
//! release costs one acquisition attempt per client, not one per waiting task, and the lock
//! passes between a client's tasks in arrival order.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use deadpool_redis::redis::{self, aio::PubSubSink};
use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::error::{LockError, Result};
use crate::keys;
use crate::lock_unpoisoned;

/// The signal a waiter receives. Higher values win when two arrive before it looks.
const NONE: u8 = 0;
/// You are now the head; the lock was just taken by your predecessor, so wait for a release.
pub(crate) const PROMOTED: u8 = 1;
/// A release was announced (or the connection was reset): try to acquire now.
pub(crate) const TRY_NOW: u8 = 2;

#[derive(Debug)]
pub(crate) struct Waiters {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// The pub/sub connection. Subscribe and unsubscribe run under this lock, so they reach
    /// Redis in the order the queues changed.
    conn: tokio::sync::Mutex<Option<Conn>>,
    client: redis::Client,
    /// Bound on connecting and on each subscribe/unsubscribe round trip.
    timeout: Duration,
    next_id: AtomicU64,
}

#[derive(Debug)]
struct Conn {
    sink: PubSubSink,
    generation: u64,
    /// The task reading messages; it owns the stream, and so the connection.
    reader: JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

#[derive(Debug, Default)]
struct State {
    channels: HashMap<String, Channel>,
    /// The generation of the live pub/sub connection, if one is up.
    live: Option<u64>,
    generations: u64,
}

#[derive(Debug, Default)]
struct Channel {
    queue: VecDeque<Arc<Slot>>,
    /// The connection generation on which this channel is subscribed.
    subscribed: Option<u64>,
}

#[derive(Debug)]
struct Slot {
    id: u64,
    signal: AtomicU8,
    notify: Notify,
}

impl Slot {
    fn signal(&self, signal: u8) {
        self.signal.fetch_max(signal, Ordering::AcqRel);
        self.notify.notify_one();
    }
}

/// A place in a key's queue. Dropping it leaves the queue (passing the turn on).
#[derive(Debug)]
pub(crate) struct Ticket {
    shared: Arc<Shared>,
    channel: String,
    slot: Arc<Slot>,
    /// Set when the holder of the ticket acquired the lock, so the next waiter only waits.
    acquired: bool,
}

impl Waiters {
    pub(crate) fn new(client: redis::Client, timeout: Duration) -> Self {
        Waiters {
            shared: Arc::new(Shared {
                state: Mutex::default(),
                conn: tokio::sync::Mutex::new(None),
                client,
                timeout,
                next_id: AtomicU64::new(0),
            }),
        }
    }

    /// Whether some task of this client is already waiting on `channel`; a newcomer then
    /// queues behind it instead of trying first.
    pub(crate) fn has_queue(&self, channel: &str) -> bool {
        lock_unpoisoned(&self.shared.state).channels.get(channel).is_some_and(|c| !c.queue.is_empty())
    }

    /// Joins the back of `channel`'s queue.
    pub(crate) fn join(&self, channel: &str) -> Ticket {
        let slot = Arc::new(Slot {
            id: self.shared.next_id.fetch_add(1, Ordering::Relaxed),
            signal: AtomicU8::new(NONE),
            notify: Notify::new(),
        });
        lock_unpoisoned(&self.shared.state)
            .channels
            .entry(channel.to_owned())
            .or_default()
            .queue
            .push_back(slot.clone());
        Ticket { shared: self.shared.clone(), channel: channel.to_owned(), slot, acquired: false }
    }

    /// The number of channels with waiters or a subscription, and the number of waiting
    /// tasks per lock key.
    pub(crate) fn snapshot(&self) -> (usize, BTreeMap<String, usize>) {
        let state = lock_unpoisoned(&self.shared.state);
        let waiters = state
            .channels
            .iter()
            .filter(|(_, c)| !c.queue.is_empty())
            .map(|(name, c)| (keys::key_of_channel(name).to_owned(), c.queue.len()))
            .collect();
        (state.channels.len(), waiters)
    }
}

impl Ticket {
    pub(crate) fn is_head(&self) -> bool {
        lock_unpoisoned(&self.shared.state)
            .channels
            .get(&self.channel)
            .and_then(|c| c.queue.front())
            .is_some_and(|front| front.id == self.slot.id)
    }

    /// Waits for the next signal ([`PROMOTED`] or [`TRY_NOW`]).
    pub(crate) async fn signaled(&self) -> u8 {
        loop {
            let signal = self.slot.signal.swap(NONE, Ordering::AcqRel);
            if signal != NONE {
                return signal;
            }
            self.slot.notify.notified().await;
        }
    }

    /// Records that this waiter got the lock: its successor is promoted but does not retry
    /// until the lock is released.
    pub(crate) fn acquired(mut self) {
        self.acquired = true;
    }

    /// Makes sure the client is subscribed to this ticket's channel, connecting the shared
    /// pub/sub connection if needed. Returns once Redis has confirmed the subscription, so a
    /// release published after this returns is seen.
    pub(crate) async fn ensure_subscribed(&self) -> Result<()> {
        let shared = &self.shared;
        let mut conn = shared.conn.lock().await;
        {
            let state = lock_unpoisoned(&shared.state);
            // A reader that ended without reporting (its runtime shut down) means a dead
            // connection too.
            let live = conn
                .as_ref()
                .filter(|c| !c.reader.is_finished())
                .map(|c| c.generation)
                .filter(|g| state.live == Some(*g));
            if live.is_some() && state.channels.get(&self.channel).and_then(|c| c.subscribed) == live {
                return Ok(());
            }
            if live.is_none() {
                *conn = None;
            }
        }
        if conn.is_none() {
            *conn = Some(shared.connect().await?);
        }
        let Some(c) = conn.as_mut() else { return Ok(()) };
        // Recorded before the round trip: if this future is dropped mid-way, the last waiter
        // to leave still sends the UNSUBSCRIBE (ordered after this SUBSCRIBE by the mutex).
        if let Some(channel) = lock_unpoisoned(&shared.state).channels.get_mut(&self.channel) {
            channel.subscribed = Some(c.generation);
        }
        let subscribed = tokio::time::timeout(shared.timeout, c.sink.subscribe(&self.channel))
            .await
            .unwrap_or_else(|_| Err(timed_out()));
        if let Err(e) = subscribed {
            shared.reset(&mut conn);
            return Err(LockError::redis(format!("subscribing to `{}`", self.channel), e));
        }
        Ok(())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = lock_unpoisoned(&self.shared.state);
        let Some(channel) = state.channels.get_mut(&self.channel) else { return };
        let was_head = channel.queue.front().is_some_and(|f| f.id == self.slot.id);
        channel.queue.retain(|s| s.id != self.slot.id);
        if was_head && let Some(next) = channel.queue.front() {
            // Pass on an unconsumed release message: the lock may be free right now.
            let pending = self.slot.signal.load(Ordering::Acquire);
            next.signal(if !self.acquired && pending == TRY_NOW { TRY_NOW } else { PROMOTED });
        }
        if channel.queue.is_empty() {
            if channel.subscribed.is_none() {
                state.channels.remove(&self.channel);
            } else if let Ok(rt) = tokio::runtime::Handle::try_current() {
                drop(state);
                let shared = self.shared.clone();
                let name = self.channel.clone();
                rt.spawn(async move { shared.unsubscribe_if_idle(name).await });
            }
        }
    }
}

fn timed_out() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, "pub/sub command timed out"))
}

impl Shared {
    async fn connect(self: &Arc<Self>) -> Result<Conn> {
        let pubsub = tokio::time::timeout(self.timeout, self.client.get_async_pubsub())
            .await
            .unwrap_or_else(|_| Err(timed_out()))
            .map_err(|e| LockError::redis("opening the pub/sub connection", e))?;
        let (sink, mut stream) = pubsub.split();
        let generation = {
            let mut state = lock_unpoisoned(&self.state);
            state.generations += 1;
            state.live = Some(state.generations);
            state.generations
        };
        let weak: Weak<Shared> = Arc::downgrade(self);
        let reader = tokio::spawn(async move {
            while let Some(msg) = stream.next().await {
                let Some(shared) = weak.upgrade() else { return };
                let state = lock_unpoisoned(&shared.state);
                if let Some(head) = state.channels.get(msg.get_channel_name()).and_then(|c| c.queue.front()) {
                    head.signal(TRY_NOW);
                }
            }
            // The connection is gone: forget it, and let every head retry (and resubscribe),
            // since a release may have been announced while it was down.
            if let Some(shared) = weak.upgrade() {
                shared.connection_lost(generation);
            }
        });
        Ok(Conn { sink, generation, reader })
    }

    /// Drops the connection after an error on it.
    fn reset(&self, conn: &mut Option<Conn>) {
        if let Some(old) = conn.take() {
            self.connection_lost(old.generation);
        }
    }

    /// Forgets the connection of `generation` and lets every head retry (and resubscribe),
    /// since a release may have been announced while it was down.
    fn connection_lost(&self, generation: u64) {
        let mut state = lock_unpoisoned(&self.state);
        if state.live == Some(generation) {
            state.live = None;
        }
        for channel in state.channels.values() {
            if let Some(head) = channel.queue.front() {
                head.signal(TRY_NOW);
            }
        }
        tracing::debug!("lock pub/sub connection closed");
    }

    /// Unsubscribes from `channel` if its queue is still empty once the connection is ours.
    async fn unsubscribe_if_idle(&self, channel: String) {
        let mut conn = self.conn.lock().await;
        let subscribed = {
            let mut state = lock_unpoisoned(&self.state);
            match state.channels.get(&channel) {
                Some(c) if c.queue.is_empty() => {
                    let subscribed = c.subscribed;
                    state.channels.remove(&channel);
                    subscribed.filter(|g| state.live == Some(*g))
                }
                _ => None,
            }
        };
        if let (Some(generation), Some(c)) = (subscribed, conn.as_mut())
            && c.generation == generation
            && let Err(e) = tokio::time::timeout(self.timeout, c.sink.unsubscribe(&channel))
                .await
                .unwrap_or_else(|_| Err(timed_out()))
        {
            tracing::debug!(error = %e, channel, "unsubscribe failed; resetting the pub/sub connection");
            self.reset(&mut conn);
        }
    }
}
