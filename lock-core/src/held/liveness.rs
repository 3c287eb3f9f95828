//! The client's liveness lease: one small key per client, renewed every third of its TTL,
//! whose name every owner token carries. A caller that finds a lock held by a token whose
//! liveness key is gone knows the holder is dead (crashed, or stalled past the TTL, in which
//! case it has stopped trusting its guards) and may take the lock over at once, instead of
//! waiting out the lock's own lease.
//!
//! The key is renewed with `SET ... XX`, so once it has expired it never comes back: a client
//! that finds its key gone (it stalled longer than the TTL, or Redis lost its data) marks the
//! guards of that identity lost and starts a new identity, with a new key, for later locks.
//!
//! The renewal alone would learn of a Redis restart without persistence up to a third of the
//! TTL late, and meanwhile the client would take new locks with the forgotten identity, which
//! others would take over at once. So the same check also runs on every new connection before
//! any command uses it ([`OnConnect`]): an identity Redis has forgotten dies there and a new
//! one, its key created on that link, takes its place. A lock whose try was already under way
//! with the old identity finds it dead on its reply; the acquisition gives that lock back and
//! tries again with the new identity. Locks held *across* the restart are lost all the same
//! (Redis forgot them); their holders learn it at that check or at their next renewal.
//!
//! A Cluster connection is never replaced (redis-rs reconnects a failed node underneath, see
//! `Conn::drop_connection`), so the check runs only when it is first opened: there, a shard
//! that restarts empty is noticed at the next renewal, as before.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use deadpool_redis::redis;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::conn::deploy::Link;
use crate::conn::{Conn, OnConnect};
use crate::error::{LockError, Result};
use crate::options::{drift, millis, next_pass};
use crate::schema;
use crate::sync::{lock_unpoisoned, read_unpoisoned, write_unpoisoned};

/// After a failed renewal, retry this soon (or at the regular interval, if shorter).
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(250);

/// Remembered verdicts about other clients' liveness; cleared when it grows past this.
const CACHE_LIMIT: usize = 10_000;

/// One identity of a client: the owner prefix of its tokens and its liveness key. Guards hold
/// it to cap their validity by the liveness lease.
#[derive(Debug)]
pub(crate) struct Identity {
    /// `<instance>:<client id>`: the start of every owner token of this identity.
    pub(crate) owner: String,
    key: String,
    base: Instant,
    /// Local deadline of the liveness lease, in ns after `base`; only moves forward.
    deadline_nanos: AtomicU64,
    /// The key was found gone: every guard of this identity is lost.
    dead: AtomicBool,
    /// Woken when the identity dies.
    pub(crate) died: Notify,
    /// Random at creation; each lock id adds the next count to it (see [`lock_id`](Self::lock_id)).
    lock_id_base: u128,
    lock_ids: AtomicU64,
}

impl Identity {
    /// The instance id: the owner prefix without its client id.
    pub(crate) fn instance(&self) -> &str {
        schema::instance_of(&self.owner)
    }

    fn new(instance: &str) -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let owner = schema::new_owner(instance, &id);
        let key = schema::liveness_key(&owner);
        Identity {
            owner,
            key,
            base: Instant::now(),
            deadline_nanos: AtomicU64::new(0),
            dead: AtomicBool::new(false),
            died: Notify::new(),
            lock_id_base: uuid::Uuid::new_v4().as_u128(),
            lock_ids: AtomicU64::new(0),
        }
    }

    /// A fresh lock id for an owner token: unique per identity (a counter over a random
    /// base: no system call per acquisition, unlike a random v4 UUID each time) and across
    /// clients (the base). Tokens are not secrets (anyone who can read Redis sees them), so
    /// predictability does not matter; uniqueness does.
    pub(crate) fn lock_id(&self) -> uuid::Uuid {
        let n = self.lock_ids.fetch_add(1, Ordering::Relaxed);
        // The counter only reaches the low 64 bits (version and variant bits sit above them).
        let bytes = self.lock_id_base.wrapping_add(u128::from(n)).to_be_bytes();
        uuid::Builder::from_random_bytes(bytes).into_uuid()
    }

    /// Until when this identity's liveness key is known to exist (minus a drift allowance).
    pub(crate) fn deadline(&self) -> Instant {
        self.base + Duration::from_nanos(self.deadline_nanos.load(Ordering::Acquire))
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    fn usable(&self) -> bool {
        self.usable_at(Instant::now())
    }

    fn usable_at(&self, now: Instant) -> bool {
        !self.is_dead() && now < self.deadline()
    }

    fn extend_from(&self, sent_at: Instant, ttl: Duration) {
        let until = (sent_at + ttl.saturating_sub(drift(ttl))).saturating_duration_since(self.base);
        let nanos = u64::try_from(until.as_nanos()).unwrap_or(u64::MAX);
        self.deadline_nanos.fetch_max(nanos, Ordering::AcqRel);
    }

    /// An identity whose liveness lease is known to last `ttl` from now (unit tests).
    #[cfg(test)]
    pub(crate) fn alive_for(instance: &str, ttl: Duration) -> Self {
        let identity = Identity::new(instance);
        identity.extend_from(Instant::now(), ttl);
        identity
    }

    fn kill(&self) {
        if !self.dead.swap(true, Ordering::AcqRel) {
            tracing::warn!(key = %self.key, "this client's liveness lease expired (a stall longer than its TTL, or Redis lost its data): its locks may have been taken over and are lost");
            self.died.notify_waiters();
        }
    }
}

/// A client's liveness lease and what it knows about other clients'.
#[derive(Debug)]
pub(crate) struct Liveness {
    shared: Arc<Shared>,
    task: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug)]
struct Shared {
    conn: Arc<Conn>,
    instance: String,
    ttl: Duration,
    /// Read by every acquisition, replaced only when an identity dies.
    current: RwLock<Arc<Identity>>,
    /// Serialises the creation of a new identity's key.
    creating: tokio::sync::Mutex<()>,
    /// Other owners known alive until then.
    alive_until: Mutex<HashMap<String, Instant>>,
    renewals: AtomicU64,
}

impl Liveness {
    pub(crate) fn new(conn: Arc<Conn>, instance: String, ttl: Duration) -> Self {
        let current = RwLock::new(Arc::new(Identity::new(&instance)));
        let shared = Shared {
            conn,
            instance,
            ttl,
            current,
            creating: tokio::sync::Mutex::new(()),
            alive_until: Mutex::default(),
            renewals: AtomicU64::new(0),
        };
        let shared = Arc::new(shared);
        let hook: Weak<dyn OnConnect> = Arc::downgrade(&shared) as Weak<dyn OnConnect>;
        shared.conn.set_on_connect(hook);
        Liveness { shared, task: Mutex::new(None) }
    }

    /// The identity to acquire with: its liveness key exists and is being renewed. Creates
    /// the key (one round trip) on first use, and a new identity after the old one died.
    /// `now`: the caller's clock reading (one fewer on every acquisition).
    pub(crate) async fn identity(&self, now: Instant) -> Result<Arc<Identity>> {
        let current = read_unpoisoned(&self.shared.current).clone();
        if current.usable_at(now) {
            return Ok(current);
        }
        // Boxed: rare, and inline it would enlarge every acquisition's future.
        Box::pin(self.create_identity()).await
    }

    /// A usable identity, creating its liveness key (and a new identity, if the current one
    /// died) unless another caller just did.
    async fn create_identity(&self) -> Result<Arc<Identity>> {
        let _creating = self.shared.creating.lock().await;
        let mut identity = read_unpoisoned(&self.shared.current).clone();
        if identity.usable() {
            return Ok(identity);
        }
        // Never created, dead, or its deadline passed (the process stalled): a stale identity
        // may already be considered dead by others, so a new one is made.
        if identity.deadline_nanos.load(Ordering::Acquire) != 0 {
            identity.kill();
            identity = Arc::new(Identity::new(&self.shared.instance));
        }
        let ttl = millis(self.shared.ttl, "liveness TTL")?;
        let mut cmd = redis::cmd("SET");
        cmd.arg(&identity.key).arg(1).arg("PX").arg(ttl);
        let sent_at = Instant::now();
        self.shared.conn.query::<()>(&cmd, || "creating this client's liveness key".to_owned()).await?;
        identity.extend_from(sent_at, self.shared.ttl);
        *write_unpoisoned(&self.shared.current) = identity.clone();
        self.start_renewing();
        Ok(identity)
    }

    fn start_renewing(&self) {
        let mut task = lock_unpoisoned(&self.task);
        if task.as_ref().is_none_or(JoinHandle::is_finished) {
            *task = Some(tokio::spawn(renew(Arc::downgrade(&self.shared))));
        }
    }

    /// Whether the client owning `holder` (a token) is known dead: its liveness key is gone.
    /// Tokens without an owner, and this client's own, are never dead. One round trip unless
    /// the owner was seen alive recently.
    pub(crate) async fn is_dead(&self, holder: &str) -> Result<bool> {
        let Some(owner) = schema::owner_of(holder) else { return Ok(false) };
        if owner == read_unpoisoned(&self.shared.current).owner {
            return Ok(false);
        }
        let now = Instant::now();
        if lock_unpoisoned(&self.shared.alive_until).get(owner).is_some_and(|until| now < *until) {
            return Ok(false);
        }
        let mut cmd = redis::cmd("PTTL");
        cmd.arg(schema::liveness_key(owner));
        let pttl: i64 =
            self.shared.conn.query(&cmd, || "checking a lock holder's liveness".to_owned()).await?;
        if pttl == -2 {
            return Ok(true);
        }
        // -1 (no expiry: not ours to judge) counts as alive for a second.
        let alive_for = u64::try_from(pttl).map_or(Duration::from_secs(1), Duration::from_millis);
        let mut cache = lock_unpoisoned(&self.shared.alive_until);
        if cache.len() >= CACHE_LIMIT {
            cache.retain(|_, until| now < *until);
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
        }
        cache.insert(owner.to_owned(), now + alive_for);
        Ok(false)
    }

    /// Liveness renewals sent so far.
    pub(crate) fn renewals(&self) -> u64 {
        self.shared.renewals.load(Ordering::Relaxed)
    }
}

impl OnConnect for Shared {
    fn on_connect<'a>(
        &'a self,
        link: &'a Link,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + Send + 'a>> {
        Box::pin(self.check_on(link))
    }
}

impl Shared {
    /// The liveness check on a new connection, before it is shared: renews the current
    /// identity's key (`SET XX`, as the renewal does); if Redis has forgotten it, the identity
    /// dies and a new one, its key created on this link, replaces it. Sent on `link` itself,
    /// not through the shared connection (which is being re-established).
    async fn check_on(&self, link: &Link) -> Result<()> {
        let identity = read_unpoisoned(&self.current).clone();
        // Never created, dead, or past its deadline: no acquisition uses it, and the next one
        // makes a new identity (`create_identity`).
        if !identity.usable() {
            return Ok(());
        }
        let ttl = millis(self.ttl, "liveness TTL")?;
        let action = || "checking this client's liveness key on a new connection".to_owned();
        let mut link = link.clone();
        let mut renewal = redis::cmd("SET");
        renewal.arg(&identity.key).arg(1).arg("XX").arg("PX").arg(ttl);
        let sent_at = Instant::now();
        self.renewals.fetch_add(1, Ordering::Relaxed);
        let found: Option<String> =
            renewal.query_async(&mut link).await.map_err(|e| LockError::redis(action(), e))?;
        // As in `renew_once`: a renewal sent after the deadline does not revive the identity.
        if found.is_some() && sent_at < identity.deadline() {
            identity.extend_from(sent_at, self.ttl);
            return Ok(());
        }
        tracing::warn!(instance = %self.instance, "reconnected to a Redis that has forgotten this client's liveness key (a restart without persistence?): starting a new identity before any command uses the connection");
        identity.kill();
        let fresh = Arc::new(Identity::new(&self.instance));
        let mut create = redis::cmd("SET");
        create.arg(&fresh.key).arg(1).arg("PX").arg(ttl);
        let sent_at = Instant::now();
        create.query_async::<()>(&mut link).await.map_err(|e| LockError::redis(action(), e))?;
        fresh.extend_from(sent_at, self.ttl);
        let mut current = write_unpoisoned(&self.current);
        // Another connection's check (or `create_identity`) may have replaced it already;
        // theirs stands, and this key expires unused.
        if Arc::ptr_eq(&current, &identity) {
            *current = fresh;
        }
        Ok(())
    }
}

impl Drop for Liveness {
    fn drop(&mut self) {
        if let Some(task) = lock_unpoisoned(&self.task).take() {
            task.abort();
        }
    }
}

/// Renews the current identity's key every third of the TTL, at a fixed rate.
async fn renew(shared: Weak<Shared>) {
    let Some(interval) = shared.upgrade().map(|s| s.ttl / 3) else { return };
    let mut next = Instant::now() + interval;
    loop {
        tokio::time::sleep_until(next).await;
        let Some(shared) = shared.upgrade() else { return };
        let identity = read_unpoisoned(&shared.current).clone();
        let ok = renew_once(&shared, &identity).await;
        next = next_pass(next, interval, ok, RETRY_AFTER_ERROR);
    }
}

async fn renew_once(shared: &Shared, identity: &Identity) -> bool {
    if identity.is_dead() {
        return true;
    }
    let Ok(ttl) = millis(shared.ttl, "liveness TTL") else { return false };
    let mut cmd = redis::cmd("SET");
    cmd.arg(&identity.key).arg(1).arg("XX").arg("PX").arg(ttl);
    let sent_at = Instant::now();
    shared.renewals.fetch_add(1, Ordering::Relaxed);
    let renewal = shared.conn.query_idempotent(&cmd, || "renewing this client's liveness key".to_owned());
    match renewal.await {
        // Sent after the deadline had passed: its guards already count as lost (and may have
        // said so), so the identity is not revived.
        // A second send after a broken connection extends from the first: earlier, so safe.
        Ok(Some::<String>(_)) if sent_at >= identity.deadline() => {
            identity.kill();
            true
        }
        Ok(Some(_)) => {
            identity.extend_from(sent_at, shared.ttl);
            true
        }
        Ok(None) => {
            identity.kill();
            true
        }
        Err(e) => {
            tracing::warn!(instance = %shared.instance, error = %crate::error::ErrorChain(&e), "liveness renewal failed; retrying");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_ids_are_unique_v4_uuids_within_and_across_identities() {
        let (a, b) = (Identity::new("pod-1"), Identity::new("pod-1"));
        let mut seen = std::collections::HashSet::new();
        for identity in [&a, &b] {
            for _ in 0..1000 {
                let id = identity.lock_id();
                assert_eq!(id.get_version_num(), 4);
                let token = format!("{}:{}", identity.owner, id.hyphenated());
                assert_eq!(schema::owner_of(&token), Some(identity.owner.as_str()));
                assert!(seen.insert(id), "duplicate lock id {id}");
            }
        }
    }

    #[test]
    fn owner_is_found_only_in_this_crates_tokens() {
        let token = "pod-1:0123456789ab:3f2a9c1b-7d4e-4a1b-9c2d-0123456789ab";
        assert_eq!(schema::owner_of(token), Some("pod-1:0123456789ab"));
        assert_eq!(
            schema::owner_of("a:b:c:0123456789ab:3f2a9c1b-7d4e-4a1b-9c2d-0123456789ab"),
            Some("a:b:c:0123456789ab")
        );
        assert_eq!(schema::owner_of(&format!("{token}{}", schema::RELEASED_SUFFIX)), None);
        assert_eq!(schema::owner_of("pod-1:3f2a9c1b-7d4e-4a1b-9c2d-0123456789ab"), None);
        assert_eq!(schema::owner_of("anything"), None);
    }
}
