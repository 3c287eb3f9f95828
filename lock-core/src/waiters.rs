//! Hearing about hand-offs: one shared pub/sub connection per client, subscribed to this
//! client's release channel of every key it waits on (`schema::release_channel`,
//! reference-counted: unsubscribed shortly after its last waiter leaves).
//!
//! A release hands the lock to the oldest waiter in the Redis-side queue and publishes that
//! waiter's token on its client's channel: only that client hears it, and only the waiter
//! registered with that token wakes, so N waiting replicas cost what one does. An empty message (the key was freed while lapsed tickets were
//! queued) or a lost connection wakes every waiter of the key, to retry.
//!
//! On one node or a Sentinel master the connection is a plain pub/sub connection (`SUBSCRIBE`;
//! the scripts `PUBLISH`). In a cluster it is a RESP3 cluster connection using sharded pub/sub
//! (`SSUBSCRIBE`; the scripts `SPUBLISH`, the channel being in the key's slot), so a release is
//! heard through the shard that owns the key, and redis-rs resubscribes after a failover or a
//! slot migration.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use deadpool_redis::redis::cluster_async::ClusterConnection;
use deadpool_redis::redis::{self, PushInfo, PushKind, Value, aio::PubSubSink};
use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::conn::Conn as LockConn;
use crate::deploy::PubSubSource;
use crate::error::{LockError, Result};
use crate::schema;
use crate::sync::lock_unpoisoned;

/// How long a channel stays subscribed after its last waiter left: a client that waits on
/// the same key again soon (a contended loop) does not pay a SUBSCRIBE round trip each time.
const LINGER: Duration = Duration::from_millis(200);

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

#[derive(Debug)]
pub(crate) struct Waiters {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// The pub/sub connection. Subscribe and unsubscribe run under this lock, so they reach
    /// Redis in the order the registrations changed.
    conn: tokio::sync::Mutex<Option<Conn>>,
    /// The lock commands' connection, for its deployment: where pub/sub connections open.
    lock_conn: Arc<LockConn>,
    /// Bound on connecting and on each subscribe/unsubscribe round trip.
    timeout: Duration,
    /// Whether a task restores a lost connection's subscriptions.
    restoring: AtomicBool,
}

struct Conn {
    link: Link,
    generation: u64,
}

/// A pub/sub connection of either kind.
enum Link {
    /// To one node: the sink, and the task reading messages (it owns the stream, and so the
    /// connection).
    Node { sink: PubSubSink, reader: JoinHandle<()> },
    /// To a cluster, with sharded pub/sub; messages arrive through its push sender.
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.link {
            Link::Node { .. } => "node",
            Link::Cluster(_) => "cluster",
        };
        f.debug_struct("Conn").field("kind", &kind).field("generation", &self.generation).finish()
    }
}

impl Conn {
    /// A node connection whose reader ended without reporting (its runtime shut down) is dead.
    fn is_dead(&self) -> bool {
        match &self.link {
            Link::Node { reader, .. } => reader.is_finished(),
            Link::Cluster(_) => false,
        }
    }

    async fn subscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        match &mut self.link {
            Link::Node { sink, .. } => sink.subscribe(channel).await,
            Link::Cluster(conn) => conn.ssubscribe(channel).await,
        }
    }

    async fn unsubscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        match &mut self.link {
            Link::Node { sink, .. } => sink.unsubscribe(channel).await,
            Link::Cluster(conn) => conn.sunsubscribe(channel).await,
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Link::Node { reader, .. } = &self.link {
            reader.abort();
        }
    }
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
    shared: Arc<Shared>,
    channel: String,
    token: String,
    slot: Arc<Slot>,
}

impl Waiters {
    pub(crate) fn new(lock_conn: Arc<LockConn>, timeout: Duration) -> Self {
        Waiters {
            shared: Arc::new(Shared {
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
        state.next_slot += 1;
        let slot = Arc::new(Slot {
            id: state.next_slot,
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
        channel.slots.insert(token.to_owned(), slot.clone());
        Ticket { shared: self.shared.clone(), channel: name, token: token.to_owned(), slot }
    }

    /// The number of channels with waiters or a subscription, and the number of waiting
    /// tasks per lock key.
    pub(crate) fn snapshot(&self) -> (usize, BTreeMap<String, usize>) {
        let state = lock_unpoisoned(&self.shared.state);
        let waiters = state.channels.values().filter(|c| !c.slots.is_empty()).fold(
            BTreeMap::new(),
            |mut waiters, c| {
                // A key's waiters may sit on several channels (one per identity of this client).
                *waiters.entry(c.key.clone()).or_default() += c.slots.len();
                waiters
            },
        );
        (state.channels.len(), waiters)
    }
}

impl Ticket {
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

/// [`Shared::idle`] under the caller's lock.
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
struct LingerTimer {
    shared: Arc<Shared>,
    channel: String,
}

impl Drop for LingerTimer {
    fn drop(&mut self) {
        if let Some(c) = lock_unpoisoned(&self.shared.state).channels.get_mut(&self.channel) {
            c.lingering = false;
        }
    }
}

fn timed_out() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, "pub/sub command timed out"))
}

impl Shared {
    async fn connect(self: &Arc<Self>) -> Result<Conn> {
        let source = self.lock_conn.target().pubsub_source().await?;
        let generation = {
            let mut state = lock_unpoisoned(&self.state);
            state.generations += 1;
            state.generations
        };
        let link = match source {
            PubSubSource::Node(client) => self.connect_node(&client, generation).await?,
            PubSubSource::Cluster(recipe) => {
                let weak: Weak<Shared> = Arc::downgrade(self);
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
                Link::Cluster(conn)
            }
        };
        lock_unpoisoned(&self.state).live = Some(generation);
        Ok(Conn { link, generation })
    }

    /// [`Ticket::ensure_subscribed`] for `channel`, under the connection's lock `conn`.
    async fn subscribe_locked(self: &Arc<Self>, conn: &mut Option<Conn>, channel: &str) -> Result<bool> {
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
                    Err(e) => tracing::trace!(error = %crate::ErrorChain(&e), "lock pub/sub not restored yet"),
                }
            }
            if let Some(shared) = weak.upgrade() {
                shared.restoring.store(false, Ordering::Release);
            }
        });
    }

    /// Wakes every waiter to retry.
    fn wake_all(&self) {
        let state = lock_unpoisoned(&self.state);
        for channel in state.channels.values() {
            channel.slots.values().for_each(|s| s.wake());
        }
    }

    /// A pub/sub connection to one node, and the task reading its messages.
    async fn connect_node(self: &Arc<Self>, client: &redis::Client, generation: u64) -> Result<Link> {
        let pubsub = tokio::time::timeout(self.timeout, client.get_async_pubsub())
            .await
            .unwrap_or_else(|_| Err(timed_out()))
            .map_err(|e| LockError::redis("opening the pub/sub connection", e))?;
        let (sink, mut stream) = pubsub.split();
        let weak: Weak<Shared> = Arc::downgrade(self);
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
        Ok(Link::Node { sink, reader })
    }

    /// A message on `channel`: wakes the waiter it names, or, empty, every waiter there.
    fn deliver(&self, channel: &str, token: &str) {
        let state = lock_unpoisoned(&self.state);
        let Some(channel) = state.channels.get(channel) else { return };
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
            _ => {}
        }
    }

    /// Drops the connection after an error on it.
    fn reset(self: &Arc<Self>, conn: &mut Option<Conn>) {
        if let Some(old) = conn.take() {
            self.connection_lost(old.generation);
        }
    }

    /// Forgets the connection of `generation`, lets every head retry (a release may have been
    /// announced while it was down), and restores its subscriptions in the background.
    fn connection_lost(self: &Arc<Self>, generation: u64) {
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

    /// The linger timer of `channel` (one per channel, not one per waiter that leaves: a
    /// contended loop leaves hundreds of times a second). Unsubscribes once nobody has waited
    /// on it for a whole [`LINGER`], waiting longer while waiters come and go; ends at once
    /// if a waiter is there (the next one to leave starts a timer again).
    async fn linger(self: &Arc<Self>, channel: &str) {
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
            tracing::debug!(error = %crate::ErrorChain(&e), channel, "unsubscribe failed; resetting the pub/sub connection");
            self.reset(&mut conn);
        }
        None
    }
}
