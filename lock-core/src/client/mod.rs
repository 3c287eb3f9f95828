//! [`LockClient`]: the facade applications use. The work happens below it (`acquire`, `held`,
//! `conn`, `primitives`, `tick`); this module and its children (`builder`, `inspect`,
//! `scheduling`) only build, forward and report.

pub(crate) mod builder;
pub(crate) mod elections;
pub mod inspect;
pub(crate) mod recorded;
mod scheduling;
pub(crate) mod subscription;

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::Pool;
use deadpool_redis::redis;

use crate::acquire::section;
use crate::acquire::{Core, Target};
use crate::client::builder::LockClientBuilder;
use crate::election::ElectionBuilder;
use crate::error::{LockError, Result};
use crate::held::guard::LockGuard;
use crate::held::scope;
use crate::options::LockOptions;
use crate::primitives::rw_lock::RwLock;
use crate::primitives::semaphore::Semaphore;
use crate::sync::{read_unpoisoned, write_unpoisoned};

static DEFAULT_CLIENT: std::sync::RwLock<Option<LockClient>> = std::sync::RwLock::new(None);

/// A Redis lock client. Cheap to clone (an `Arc` inside); clones share connections, the
/// watchdog and the waiting machinery.
///
/// ```no_run
/// use std::time::Duration;
/// use lock_core::{LockClient, LockOptions};
///
/// # async fn demo() -> Result<(), lock_core::LockError> {
/// let client = LockClient::from_url("redis://127.0.0.1:6379/")?;
/// let guard = client.acquire("lock:report", LockOptions::new().wait(Duration::from_secs(5))).await?;
/// // ... work only one replica may do at a time ...
/// let still_ours = guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    core: Arc<Core>,
    /// The configuration it was built from (without a caller's pool), for
    /// [`with_own_connection`](Self::with_own_connection).
    origin: Arc<LockClientBuilder>,
}

/// A snapshot of what a client is doing, from [`LockClient::stats`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// Locks held through this client: guards alive and not released (nested guards of a
    /// re-entrant hold not counted).
    pub held: usize,
    /// Held locks the watchdog renews.
    pub renewing: usize,
    /// Keys this client waits on or is still subscribed to.
    pub waiting_keys: usize,
    /// This client's tasks waiting for a lock, per key.
    pub waiters: BTreeMap<String, usize>,
    /// Lock-key renewal commands sent since the client was created.
    pub renewals_sent: u64,
    /// Liveness-key renewals sent since the client was created (about three per liveness
    /// TTL, however many locks are held).
    pub liveness_renewals: u64,
    /// Releases and clean-ups running in the background (dropped guards, cancelled
    /// releases, acquisitions whose reply was lost); see [`LockClient::flush_releases`].
    pub background_releases: usize,
    /// Writes of this client's holdings record so far (one pipeline each, at most one per
    /// 100 ms while holds change, one per 5 s while any is held).
    pub holdings_writes: u64,
}

impl ClientStats {
    /// This client's tasks waiting for `key`.
    pub fn waiters_on(&self, key: &str) -> usize {
        self.waiters.get(key).copied().unwrap_or(0)
    }
}

impl LockClient {
    /// A builder with the defaults: watchdog lease 30 s, command timeout 2 s, instance id from
    /// the environment.
    pub fn builder() -> LockClientBuilder {
        LockClientBuilder::default()
    }

    /// A client for the Redis at `url`, with the defaults.
    pub fn from_url(url: &str) -> Result<Self> {
        Self::builder().url(url).build()
    }

    /// A client for the Redis named by the `REDIS_URL` environment variable, in any of the forms
    /// of [`LockClientBuilder::url`]: `redis://`/`rediss://` (one node), `redis+sentinel://`
    /// (Sentinel) or `redis+cluster://` (Cluster).
    pub fn from_env() -> Result<Self> {
        let url = std::env::var("REDIS_URL").map_err(|_| {
            LockError::Config("REDIS_URL is not set (e.g. REDIS_URL=redis://127.0.0.1:6379/)".into())
        })?;
        Self::from_url(&url)
    }

    /// A client whose commands go through an existing deadpool-redis pool; `url` must name the
    /// same server (it opens the pub/sub connection used for waiting).
    pub fn from_pool(pool: Pool, url: &str) -> Result<Self> {
        Self::builder().pool(pool).url(url).build()
    }

    /// Installs this client as the process-wide default, used by `#[distributed_lock]` when
    /// no `client = ...` is given. Replaces any earlier default; locks taken through the
    /// earlier one stay valid.
    pub fn install_default(&self) {
        *write_unpoisoned(&DEFAULT_CLIENT) = Some(self.clone());
    }

    /// The installed default client, or [`LockError::NotConfigured`].
    pub fn default_client() -> Result<LockClient> {
        read_unpoisoned(&DEFAULT_CLIENT).clone().ok_or(LockError::NotConfigured)
    }

    /// This client's instance id, as written into owner tokens.
    pub fn instance_id(&self) -> &str {
        &self.core.config.instance_id
    }

    /// The connection pool of a single-node client, for the application's own Redis commands;
    /// `None` for a Sentinel or cluster client, which has no pool (open your own
    /// `redis::Client`, `redis::sentinel::SentinelClient` or `redis::cluster::ClusterClient`
    /// from the same addresses).
    pub fn pool(&self) -> Option<&Pool> {
        self.core.conn.pool()
    }

    /// Runs `pipe` (or a single command in a pipeline) on the lock commands' connection, on any
    /// deployment: the way for an application or tool to reach the same Redis without its own
    /// client. In a cluster every command's keys must be in one slot (use a hash tag).
    ///
    /// Only short commands: the connection is shared with every lock of this client, so a
    /// blocking command (`BLPOP`, `WAIT` with a long timeout), `SELECT`, `SUBSCRIBE` or `MULTI`
    /// here would stall or break them.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
    /// let mut pipe = lock_core::redis::pipe();
    /// pipe.cmd("SET").arg("{report}:last").arg(42).ignore().cmd("GET").arg("{report}:last");
    /// let (last,): (i64,) = client.query_pipeline(&pipe).await?;
    /// # Ok(()) }
    /// ```
    pub async fn query_pipeline<T: redis::FromRedisValue>(&self, pipe: &redis::Pipeline) -> Result<T> {
        self.core
            .conn
            .query_pipeline(pipe)
            .await
            .map_err(|e| LockError::redis("running an application command", e))
    }

    /// The string values of `keys` (`None`: missing, or not a string), in one round trip per
    /// Redis node whatever their number: `MGET` (in chunks of 1,000 keys) on a single node or
    /// a Sentinel master, a pipeline of `GET`s per node in a cluster (where one `MGET` may not
    /// span slots). For reading many small flags at once, such as a scheduler's pause flags.
    pub async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<String>>> {
        self.core.conn.get_many(keys).await.map_err(|e| LockError::redis("reading keys", e))
    }

    /// The keys matching the glob `pattern` (`SCAN MATCH`, never `KEYS`; every master of a
    /// cluster is scanned), at least `limit` of them if there are that many (a few more may
    /// come back; none twice unless the keyspace changes meanwhile).
    pub async fn scan_keys(&self, pattern: &str, limit: usize) -> Result<Vec<String>> {
        let mut keys = self.core.conn.scan(pattern, None, limit).await?;
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// What this client is doing right now: held locks, renewals, waiters, background
    /// releases.
    pub fn stats(&self) -> ClientStats {
        let (waiting_keys, waiters) = self.core.waiters.snapshot();
        ClientStats {
            held: self.core.releaser.held(),
            renewing: self.core.watchdog.len(),
            waiting_keys,
            waiters,
            renewals_sent: self.core.watchdog.renewals(),
            liveness_renewals: self.core.liveness.renewals(),
            background_releases: self.core.releaser.in_flight(),
            holdings_writes: self.core.holdings.writes(),
        }
    }

    /// Waits, at most `timeout`, for the releases this client runs in the background (guards
    /// dropped without `release()`, cancelled releases) to finish. Call it before the runtime
    /// shuts down, e.g. at the end of a graceful shutdown, so those locks are freed now rather
    /// than at the end of their leases. Returns whether none is left.
    pub async fn flush_releases(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.core.releaser.flush()).await.is_ok()
    }

    /// Tries once to take `key`, failing fast with [`LockError::Held`] if another owner holds
    /// it, or if waiters are queued for it (they are served first). `options.wait` is ignored.
    pub async fn try_lock(&self, key: &str, options: LockOptions) -> Result<LockGuard> {
        let options = LockOptions { wait: None, ..options };
        self.acquire(key, options).await
    }

    /// The old name of [`acquire`](Self::acquire), which says better what it does: unlike
    /// `tokio::sync::Mutex::lock` or Redisson's `lock()`, it does not wait unless
    /// `options.wait` is set.
    #[deprecated(since = "0.1.0", note = "renamed `acquire`: it fails fast unless `options.wait` is set")]
    pub async fn lock(&self, key: &str, options: LockOptions) -> Result<LockGuard> {
        self.acquire(key, options).await
    }

    /// Takes `key` as `options` say: fail fast by default ([`LockError::Held`]), or wait up to
    /// `options.wait` if it is held (`LockOptions::new().wait(Duration::from_secs(5))`).
    ///
    /// Waiting does not poll: each waiter holds a ticket in a queue kept in Redis, its client
    /// subscribes to its own release channel for the key (`{<key>}:released:<client id>`), and
    /// a release hands the key to the oldest live ticket and announces it on that client's
    /// channel. A waiter falls back to a jittered retry no later than the holder's remaining
    /// lease. So a free lock goes to the waiter, of any client, that has waited longest (for
    /// when a newcomer can still win, see the guide's "Guarantees and failure modes").
    ///
    /// Inside a locked section of the current task that already holds `key` (see
    /// [`with_lock`](Self::with_lock)), returns a nested guard without touching Redis.
    pub async fn acquire(&self, key: &str, options: LockOptions) -> Result<LockGuard> {
        self.core.take(Target::lock(key), options).await
    }

    /// Takes `key` (per `options`), runs `fut` while holding it, and releases it on every path:
    /// completion, panic (the guard is dropped while unwinding) and cancellation of the
    /// returned future. Inside `fut`, acquiring the same key again through this client is
    /// re-entrant, and [`current`](crate::current) describes the lock.
    ///
    /// If the lock is lost while `fut` runs, `options.on_lost` decides, as for
    /// `#[distributed_lock]`: [`OnLost::Cancel`](crate::OnLost::Cancel) (the default) drops
    /// `fut` at its next await and returns [`LockError::Lost`];
    /// [`OnLost::Continue`](crate::OnLost::Continue) lets it finish and logs the loss.
    ///
    /// Inside [`tick::scope`](crate::tick::scope), the first such section claims the run's tick
    /// with its lock and fails with [`LockError::TickClaimed`] if it was already claimed.
    ///
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// use lock_core::{LockClient, LockError, LockOptions};
    ///
    /// # async fn rebuild_index() -> usize { 0 }
    /// async fn reindex(client: &LockClient) -> Result<usize, LockError> {
    ///     // Wait up to 5 s for another replica's reindex to finish, then run ours under the lock.
    ///     let options = LockOptions::new().wait(Duration::from_secs(5));
    ///     client.with_lock("lock:search-index", options, rebuild_index()).await
    /// }
    /// ```
    pub async fn with_lock<F: Future>(&self, key: &str, options: LockOptions, fut: F) -> Result<F::Output> {
        section::run(&self.core, Target::lock(key), options, scope::claim_tick(), fut).await.result
    }

    /// The semaphore `name` of `permits` permits (see [`Semaphore`]). `name` is validated like
    /// a lock key (it is the Redis key of the semaphore's holders; its `{hash tag}` places it
    /// in a cluster, as for a lock). Fails with [`LockError::InvalidKey`] or, when `permits`
    /// is 0, [`LockError::InvalidOptions`].
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        Semaphore::new(self.core.clone(), name, permits)
    }

    /// The read-write lock `name` (see [`RwLock`]), validated like a lock key (its `{hash
    /// tag}` places it in a cluster). A read-write lock and a lock of the same name are
    /// different things that would collide in Redis: use distinct names.
    pub fn rw_lock(&self, name: &str) -> Result<RwLock> {
        RwLock::new(self.core.clone(), name)
    }

    /// Joins (with [`ElectionBuilder::join`]) the leader election `name`: one member leads
    /// at a time, with a term that strictly increases with every new leader, the others follow
    /// and know who leads. `name` is the election lock's key (validated by `join`). See
    /// [`Candidacy`](crate::Candidacy).
    pub fn election(&self, name: &str) -> ElectionBuilder {
        ElectionBuilder::new(self.core.clone(), name)
    }

    /// Reads the state of the lock `key`, for operators' tools: holder, TTL, fence, last tick,
    /// waiters with their tickets, hand-off records, and whether the holder's client is alive.
    /// Two round trips (the liveness key may live in another cluster slot).
    ///
    /// Only what the protocol recorded is read: a key's value is read only if some client's
    /// holdings record (see [`schema::holdings_key`](crate::schema::holdings_key)) names it.
    /// A name no record names reads as a free lock if nothing is there, and is
    /// [`LockError::NotALock`] otherwise (only its `TYPE` is read); so are a client's liveness
    /// key and a lock's auxiliary keys. A lock appears in the records within about 100 ms of
    /// its acquisition.
    pub async fn inspect(&self, key: &str) -> Result<inspect::LockInfo> {
        inspect::read(&self.core, key).await
    }

    /// Lists held locks whose name matches the glob `pattern` (Redis's glob syntax), at most
    /// `limit`, sorted by key: the names the clients' holdings records give (never a `SCAN`
    /// of the keyspace), each checked against what its key holds now, so a lock released or
    /// taken over since is left out. Locks of a client that died show until they are taken
    /// over or expire. Costs a few commands plus about three per lock, whatever the size of
    /// the database.
    pub async fn list_locks(&self, pattern: &str, limit: usize) -> Result<Vec<inspect::LockSummary>> {
        Ok(inspect::list(&self.core, pattern, limit, usize::MAX).await?.locks)
    }

    /// [`list_locks`](Self::list_locks) with a bound on the work: at most `scan_budget`
    /// recorded holds matching `pattern` are checked. When the budget runs out first (or more
    /// than 1,000 client identities have records), the listing says it is not complete.
    pub async fn list_locks_within(
        &self,
        pattern: &str,
        limit: usize,
        scan_budget: usize,
    ) -> Result<inspect::LockListing> {
        inspect::list(&self.core, pattern, limit, scan_budget).await
    }

    /// Force-releases the lock `key`, whoever holds it, as its holder's release would: handed
    /// to the oldest live waiter if any, else deleted. Returns the token it was taken from
    /// (`None`: the lock was free); [`LockError::ChangedHands`] if it changed hands every time
    /// it was read. The holder is not told: its next renewal fails and its guard reports the
    /// loss; until then it may still believe it holds the lock (fencing protects the data).
    /// A key no holdings record names (see [`inspect`](Self::inspect)) is
    /// [`LockError::NotALock`] and left alone, whatever its value.
    pub async fn force_unlock(&self, key: &str) -> Result<Option<String>> {
        inspect::force_unlock(&self.core, key).await
    }

    /// Force-releases one hold of `name` by `token`, whatever `name` is: a lock, a semaphore
    /// (one permit: the others are left alone) or a read-write lock (a reader or the writer);
    /// given on to the oldest live waiter that fits, as the holder's release would. Returns
    /// whether `token` held it. As with [`force_unlock`](Self::force_unlock), the holder is
    /// told only by its next renewal. `token` must be an owner token that a holdings record
    /// names for `name` ([`LockError::NotALock`] otherwise, nothing changed).
    pub async fn force_release(&self, name: &str, token: &str) -> Result<bool> {
        inspect::force_release(&self.core, name, token).await
    }

    /// A new client built from this one's configuration (the same Redis, credentials, TLS,
    /// timeouts and instance id) with connections of its own: nothing it does queues behind
    /// this client's lock commands, renewals or liveness lease, and nothing this client does
    /// waits for it. For tools that read a lot from inside a service, such as the admin console
    /// embedded in a replica. A caller's pool ([`LockClientBuilder::pool`]) is not shared: the
    /// new client opens its own. Connects lazily, like [`LockClientBuilder::build`].
    pub fn with_own_connection(&self) -> Result<LockClient> {
        LockClientBuilder::clone(&self.origin).build()
    }

    /// Writes this client's holdings record now (see
    /// [`schema::holdings_key`](crate::schema::holdings_key)) instead of within the usual
    /// 100 ms of a change: so that locks just taken show in `lockctl list` and the console
    /// at once (tests, a tool that takes a lock and then looks). Returns whether the write
    /// reached Redis (if not, the client writes the record whole again shortly).
    pub async fn record_holdings(&self) -> bool {
        self.core.holdings.write_now().await
    }

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.core
    }
}

/// Lets `client = ...` in `#[distributed_lock]` take a `LockClient`, a reference or an `Arc`.
impl AsRef<LockClient> for LockClient {
    fn as_ref(&self) -> &LockClient {
        self
    }
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("instance_id", &self.core.config.instance_id)
            .field("watchdog_lease", &self.core.config.watchdog_lease)
            .field("renewing", &self.core.watchdog.len())
            .finish_non_exhaustive()
    }
}
