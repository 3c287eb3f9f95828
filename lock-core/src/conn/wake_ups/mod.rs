//! Hearing about hand-offs: one shared pub/sub connection per client, subscribed to this
//! client's release channel of every key it waits on (`schema::release_channel`,
//! reference-counted: unsubscribed shortly after its last waiter leaves).
//!
//! A release hands the lock to the oldest waiter in the Redis-side queue and publishes that
//! waiter's token on its client's channel: only that client hears it, and only the waiter
//! registered with that token wakes, so N waiting replicas cost what one does. An empty message (the key was freed while lapsed tickets were
//! queued) or a lost connection wakes every waiter of the key, to retry.
//!
//! The same connection carries the application's own subscriptions ([`WakeUps::listen`],
//! behind [`LockClient::subscribe`](crate::LockClient::subscribe)): a listener hears every
//! message on its channel, and is told when the connection was lost and again when it is
//! restored, so it can look at whatever it watches after a gap.
//!
//! On one node or a Sentinel master the connection is a plain pub/sub connection (`SUBSCRIBE`;
//! the scripts `PUBLISH`). In a cluster it is a RESP3 cluster connection using sharded pub/sub
//! (`SSUBSCRIBE`; the scripts `SPUBLISH`, the channel being in the key's slot), so a release is
//! heard through the shard that owns the key, and redis-rs resubscribes after a failover or a
//! slot migration.

mod connection;
mod linger;
mod restore;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_redis::redis;
use tokio::sync::Notify;

use crate::conn::Conn;
use crate::error::Result;
use crate::schema;
use crate::sync::lock_unpoisoned;

use connection::PubSubConn;
use linger::LingerTimer;

/// How long a channel stays subscribed after its last waiter left: a client that waits on
/// the same key again soon (a contended loop) does not pay a SUBSCRIBE round trip each time.
const LINGER: Duration = Duration::from_millis(200);

#[derive(Debug)]
pub(crate) struct WakeUps {
    shared: Arc<Hub>,
}

#[derive(Debug)]
struct Hub {
    state: Mutex<State>,
    /// The pub/sub connection. Subscribe and unsubscribe run under this lock, so they reach
    /// Redis in the order the registrations changed.
    conn: tokio::sync::Mutex<Option<PubSubConn>>,
    /// The lock commands' connection, for its deployment: where pub/sub connections open.
    lock_conn: Arc<Conn>,
    /// Bound on connecting and on each subscribe/unsubscribe round trip.
    timeout: Duration,
    /// Whether a task restores a lost connection's subscriptions.
    restoring: AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    channels: HashMap<String, Channel>,
    /// The generation of the live pub/sub connection, if one is up.
    live: Option<u64>,
    generations: u64,
    next_slot: u64,
}

#[derive(Debug)]
struct Channel {
    /// The lock key whose hand-offs to this client the channel announces.
    key: String,
    /// Waiting tasks by the token they wait with.
    slots: HashMap<String, Arc<Slot>>,
    /// The connection generation on which this channel is (being) subscribed.
    subscribed: Option<u64>,
    /// Whether Redis confirmed that subscription; until then a waiter subscribes again
    /// (SUBSCRIBE is idempotent), so a cancelled SUBSCRIBE cannot leave others deaf.
    confirmed: bool,
    /// When the last waiter left, if nobody waits now. The subscription goes only after a
    /// whole [`LINGER`] without waiters: a task that holds the lock briefly between waits
    /// must not pay a SUBSCRIBE round trip for each.
    idle_since: Option<std::time::Instant>,
    /// Whether a linger timer runs for this channel: one per channel, not one per waiter
    /// that leaves (a contended loop leaves hundreds of times a second).
    lingering: bool,
}

#[derive(Debug)]
struct Slot {
    id: u64,
    /// A listener ([`WakeUps::listen`]): woken by every message on its channel, whatever
    /// it says; not a lock waiter (not counted in the client's stats).
    listener: bool,
    woken: AtomicBool,
    /// The wake-up was a release naming this waiter: the key now holds its token.
    handed: AtomicBool,
    notify: Notify,
}

impl Slot {
    fn wake(&self) {
        self.woken.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    fn hand_over(&self) {
        self.handed.store(true, Ordering::Release);
        self.wake();
    }
}

/// A waiting task's registration on a key's channel. Dropping it unregisters.
#[derive(Debug)]
pub(crate) struct Ticket {
    shared: Arc<Hub>,
    channel: String,
    token: String,
    slot: Arc<Slot>,
}

impl WakeUps {
    pub(crate) fn new(lock_conn: Arc<Conn>, timeout: Duration) -> Self {
        WakeUps {
            shared: Arc::new(Hub {
                state: Mutex::default(),
                conn: tokio::sync::Mutex::new(None),
                lock_conn,
                timeout,
                restoring: AtomicBool::new(false),
            }),
        }
    }

    /// Registers a waiter for `key` that waits with `token`.
    pub(crate) fn register(&self, key: &str, token: &str) -> Ticket {
        let name = schema::release_channel(key, schema::client_id_of(token));
        let mut state = lock_unpoisoned(&self.shared.state);
        self.add(&mut state, name, key, token.to_owned(), false)
    }

    /// Registers a listener of `channel`: its ticket is handed over by every message there,
    /// and woken (not handed over) when the connection is lost and when it is restored.
    pub(crate) fn listen(&self, channel: &str) -> Ticket {
        let mut state = lock_unpoisoned(&self.shared.state);
        // Never a lock token (those do not start with a NUL), so never named by a hand-off.
        let token = format!("\0listen:{}", state.next_slot + 1);
        self.add(&mut state, channel.to_owned(), channel, token, true)
    }

    /// A slot on channel `name` (announcing `key`), waiting with `token`.
    fn add(&self, state: &mut State, name: String, key: &str, token: String, listener: bool) -> Ticket {
        state.next_slot += 1;
        let slot = Arc::new(Slot {
            id: state.next_slot,
            listener,
            woken: AtomicBool::new(false),
            handed: AtomicBool::new(false),
            notify: Notify::new(),
        });
        let channel = state.channels.entry(name.clone()).or_insert_with(|| Channel {
            key: key.to_owned(),
            slots: HashMap::new(),
            subscribed: None,
            confirmed: false,
            idle_since: None,
            lingering: false,
        });
        channel.idle_since = None;
        channel.slots.insert(token.clone(), slot.clone());
        Ticket { shared: self.shared.clone(), channel: name, token, slot }
    }

    /// The number of channels with waiters or a subscription, and the number of waiting
    /// tasks per lock key (the application's own subscriptions not counted).
    pub(crate) fn snapshot(&self) -> (usize, BTreeMap<String, usize>) {
        let state = lock_unpoisoned(&self.shared.state);
        let locks = |c: &&Channel| !c.slots.values().all(|s| s.listener);
        let waiters = state.channels.values().filter(locks).fold(BTreeMap::new(), |mut waiters, c| {
            // A key's waiters may sit on several channels (one per identity of this client).
            *waiters.entry(c.key.clone()).or_default() += c.slots.values().filter(|s| !s.listener).count();
            waiters
        });
        let channels = state.channels.values().filter(|c| c.slots.is_empty() || locks(c)).count();
        (channels, waiters)
    }
}

impl Ticket {
    /// The channel this ticket is registered on.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }

    /// Waits until a hand-off to this waiter (or a reason to retry) is announced.
    /// Returns true if it was a release naming this waiter (the key holds its token since).
    pub(crate) async fn woken(&self) -> bool {
        loop {
            let notified = self.slot.notify.notified();
            if self.slot.woken.swap(false, Ordering::AcqRel) {
                return self.slot.handed.swap(false, Ordering::AcqRel);
            }
            notified.await;
        }
    }

    /// Makes sure the client is subscribed to this ticket's channel, connecting the shared
    /// pub/sub connection if needed. Returns once Redis has confirmed the subscription, so a
    /// release published after this returns is heard; `true` if it subscribed just now (a
    /// hand-off may have been announced before, so the caller should look at once).
    pub(crate) async fn ensure_subscribed(&self) -> Result<bool> {
        let mut conn = self.shared.conn.lock().await;
        self.shared.subscribe_locked(&mut conn, &self.channel).await
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = lock_unpoisoned(&self.shared.state);
        let Some(channel) = state.channels.get_mut(&self.channel) else { return };
        if channel.slots.get(&self.token).is_some_and(|s| s.id == self.slot.id) {
            channel.slots.remove(&self.token);
        }
        if channel.slots.is_empty() {
            channel.idle_since = Some(std::time::Instant::now());
            if channel.subscribed.is_none() {
                state.channels.remove(&self.channel);
            } else if !channel.lingering
                && let Ok(rt) = tokio::runtime::Handle::try_current()
            {
                channel.lingering = true;
                drop(state);
                let shared = self.shared.clone();
                let name = self.channel.clone();
                rt.spawn(async move {
                    let timer = LingerTimer { shared, channel: name };
                    timer.shared.linger(&timer.channel).await;
                });
            }
        }
    }
}

fn timed_out() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, "pub/sub command timed out"))
}
