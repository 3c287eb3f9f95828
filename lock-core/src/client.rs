//! [`LockClient`]: connections, acquisition, waiting and release.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use deadpool_redis::redis::aio::MultiplexedConnection;
use deadpool_redis::redis::{
    self, AsyncConnectionConfig, ErrorKind, FromRedisValue, RedisError, Script, ServerErrorKind,
};
use deadpool_redis::{Manager, Pool, Runtime};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::{LockError, Result};
use crate::guard::LockGuard;
use crate::keys;
use crate::options::{Lease, LockOptions, millis, validate_lease};
use crate::scope;
use crate::scripts::{ACQUIRE, LEAVE, RELEASE};
use crate::section;
use crate::state::{LockState, NewState};
use crate::waiters::{TRY_NOW, Waiters};
use crate::watchdog::Watchdog;
use crate::{lock_unpoisoned, read_unpoisoned, write_unpoisoned};

/// Watchdog lease when none is configured (Redisson's number); renewed every third of it.
pub const DEFAULT_WATCHDOG_LEASE: Duration = Duration::from_secs(30);
/// How long one Redis command may take before it fails.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
/// Connections in a pool the client creates itself. Lock commands share one multiplexed
/// connection; the pool is there for reconnects and for the application's own commands.
const DEFAULT_POOL_SIZE: usize = 4;

/// First fallback retry of a waiter that heard no release message; doubles up to the cap.
pub const DEFAULT_WAIT_BACKOFF: Duration = Duration::from_millis(50);
/// Stands in for a wait bound too large to add to an `Instant`.
const FOREVER: Duration = Duration::from_secs(60 * 60 * 24 * 365 * 30);

/// Longest fallback between retries. Releases normally wake a waiter at once through
/// pub/sub; this only bounds the wait when a message is missed or the holder crashed.
pub const DEFAULT_MAX_WAIT_BACKOFF: Duration = Duration::from_secs(1);

static DEFAULT_CLIENT: RwLock<Option<LockClient>> = RwLock::new(None);

/// A Redis lock client. Cheap to clone (an `Arc` inside); clones share connections, the
/// watchdog and the waiting machinery.
///
/// ```no_run
/// use std::time::Duration;
/// use lock_core::{LockClient, LockOptions};
///
/// # async fn demo() -> Result<(), lock_core::LockError> {
/// let client = LockClient::from_url("redis://127.0.0.1:6379/")?;
/// let guard = client.lock("lock:report", LockOptions::new().wait(Duration::from_secs(5))).await?;
/// // ... work only one replica may do at a time ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    inner: Arc<ClientInner>,
}

/// Builds a [`LockClient`]; start from [`LockClient::builder`].
#[derive(Debug, Clone)]
#[must_use]
pub struct LockClientBuilder {
    url: Option<String>,
    pool: Option<Pool>,
    instance_id: Option<String>,
    watchdog_lease: Duration,
    command_timeout: Duration,
    backoff: (Duration, Duration),
}

#[derive(Debug)]
pub(crate) struct ClientConfig {
    pub(crate) instance_id: String,
    pub(crate) watchdog_lease: Duration,
    pub(crate) command_timeout: Duration,
    /// Initial and longest fallback retry interval of a waiter.
    pub(crate) backoff: (Duration, Duration),
}

pub(crate) struct ClientInner {
    pub(crate) config: ClientConfig,
    pool: Pool,
    /// The multiplexed connection lock commands share, with a generation so that a failed
    /// command drops only the connection it failed on.
    conn: Mutex<Option<(u64, MultiplexedConnection)>>,
    conn_generation: AtomicU64,
    next_lock_id: AtomicU64,
    /// Background releases in flight (guards dropped, cancelled releases, cleanups).
    pending_releases: AtomicUsize,
    releases_done: Notify,
    pub(crate) watchdog: Watchdog,
    pub(crate) waiters: Waiters,
}

/// Outcome of one acquisition attempt.
pub(crate) enum Attempt {
    Acquired(LockGuard),
    Held(Option<Duration>),
    /// The scheduler tick was already claimed; carries the last claimed tick.
    TickDone(i64),
}

impl LockClientBuilder {
    /// The Redis URL: `redis://[[user]:password@]host[:port][/db]`, or `rediss://` for TLS
    /// (needs the crate's `tls` feature).
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// Run lock commands through this existing pool. The URL is still needed: deadpool-redis
    /// does not expose a pool's address, and waiting uses a dedicated pub/sub connection.
    pub fn pool(mut self, pool: Pool) -> Self {
        self.pool = Some(pool);
        self
    }

    /// The identity written into every owner token and log line. Defaults to `POD_NAME`,
    /// then `HOSTNAME`, then a generated `instance-<hex>`.
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// The lease of watchdog locks (default 30 s); they are renewed every third of it.
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = lease;
        self
    }

    /// How long one Redis command may take (default 2 s). Keep it well under a third of the
    /// shortest lease you use, so a slow reply cannot outlive a renewal window.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// The fallback retry interval of a waiter that hears no release message: starts at
    /// `initial`, doubles, and stays at `max` (defaults 50 ms and 1 s), each jittered and never
    /// later than the holder's remaining lease. Releases wake waiters at once through pub/sub;
    /// this only matters when a holder dies without releasing or a message is missed.
    pub fn wait_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.backoff = (initial, max);
        self
    }

    /// Validates the configuration and builds the client. Connects lazily: an unreachable
    /// Redis shows up as [`LockError::Redis`] on first use, and the client recovers by
    /// itself once Redis is back.
    pub fn build(self) -> Result<LockClient> {
        let url = self.url.ok_or_else(|| {
            LockError::Config("a Redis URL is required (e.g. redis://127.0.0.1:6379/)".into())
        })?;
        let client = open_url(&url)?;
        validate_lease(self.watchdog_lease, "watchdog lease")?;
        if self.command_timeout.is_zero() {
            return Err(LockError::Config("the command timeout must be greater than zero".into()));
        }
        let (initial, max) = self.backoff;
        if initial.is_zero() || max < initial {
            return Err(LockError::Config(format!(
                "wait backoff must satisfy 0 < initial <= max, got {initial:?} and {max:?}"
            )));
        }
        let instance_id = match self.instance_id {
            Some(id) => id,
            None => default_instance_id(),
        };
        validate_instance_id(&instance_id)?;
        let connection_config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.command_timeout))
            .set_response_timeout(Some(self.command_timeout));
        let pool = match self.pool {
            Some(pool) => pool,
            None => {
                let manager =
                    Manager::new_with_config(url.as_str(), connection_config).map_err(|e| invalid_url(&e))?;
                Pool::builder(manager)
                    .max_size(DEFAULT_POOL_SIZE)
                    .runtime(Runtime::Tokio1)
                    .build()
                    .map_err(|e| LockError::Config(format!("could not build the connection pool: {e}")))?
            }
        };
        Ok(LockClient {
            inner: Arc::new(ClientInner {
                config: ClientConfig {
                    instance_id,
                    watchdog_lease: self.watchdog_lease,
                    command_timeout: self.command_timeout,
                    backoff: self.backoff,
                },
                pool,
                conn: Mutex::new(None),
                conn_generation: AtomicU64::new(0),
                next_lock_id: AtomicU64::new(0),
                pending_releases: AtomicUsize::new(0),
                releases_done: Notify::new(),
                watchdog: Watchdog::default(),
                waiters: Waiters::new(client, self.command_timeout),
            }),
        })
    }
}

fn open_url(url: &str) -> Result<redis::Client> {
    if url.trim().is_empty() {
        return Err(LockError::Config("the Redis URL is empty (e.g. redis://127.0.0.1:6379/)".into()));
    }
    if url.starts_with("rediss://") && !cfg!(feature = "tls") {
        return Err(LockError::Config(
            "rediss:// (TLS) needs lock-core's `tls` feature; enable it or use redis://".into(),
        ));
    }
    #[cfg(feature = "tls")]
    if url.starts_with("rediss://") && rustls::crypto::CryptoProvider::get_default().is_none() {
        // rustls needs a process-wide provider; an application that chose one keeps it.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    redis::Client::open(url).map_err(|e| invalid_url(&e))
}

// The URL itself is not echoed: it may carry a password.
fn invalid_url(e: &RedisError) -> LockError {
    LockError::Config(format!(
        "invalid Redis URL ({e}); expected redis://[[user]:password@]host[:port][/db] \
         or rediss://... for TLS"
    ))
}

fn default_instance_id() -> String {
    ["POD_NAME", "HOSTNAME"]
        .iter()
        .filter_map(|var| std::env::var(var).ok())
        .map(|v| v.trim().to_owned())
        .find(|v| !v.is_empty())
        .unwrap_or_else(|| {
            let id = uuid::Uuid::new_v4().simple().to_string();
            format!("instance-{}", &id[..8])
        })
}

fn validate_instance_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > 256 || id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(LockError::Config(format!(
            "invalid instance id {id:?}: use 1 to 256 characters without spaces, e.g. the pod name"
        )));
    }
    Ok(())
}

impl LockClient {
    /// A builder with the defaults: watchdog lease 30 s, command timeout 2 s, instance id from
    /// the environment.
    pub fn builder() -> LockClientBuilder {
        LockClientBuilder {
            url: None,
            pool: None,
            instance_id: None,
            watchdog_lease: DEFAULT_WATCHDOG_LEASE,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            backoff: (DEFAULT_WAIT_BACKOFF, DEFAULT_MAX_WAIT_BACKOFF),
        }
    }

    /// A client for the Redis at `url`, with the defaults.
    pub fn from_url(url: &str) -> Result<Self> {
        Self::builder().url(url).build()
    }

    /// A client for the Redis named by the `REDIS_URL` environment variable.
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
        &self.inner.config.instance_id
    }

    /// The connection pool, for the application's own Redis commands.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// Number of locks the watchdog is renewing.
    pub fn renewing(&self) -> usize {
        self.inner.watchdog.len()
    }

    /// Renewal script calls sent since the client was created.
    pub fn renewals_sent(&self) -> u64 {
        self.inner.watchdog.renewals.load(Ordering::Relaxed)
    }

    /// Number of keys this client is waiting on or still subscribed to.
    pub fn waiting_keys(&self) -> usize {
        self.inner.waiters.channels()
    }

    /// Waits, at most `timeout`, for the releases this client runs in the background (guards
    /// dropped without `release()`, cancelled releases) to finish. Call it before the runtime
    /// shuts down, e.g. at the end of a graceful shutdown, so those locks are freed now rather
    /// than at the end of their leases. Returns whether none is left.
    pub async fn flush_releases(&self, timeout: Duration) -> bool {
        let inner = &self.inner;
        let done = async {
            loop {
                let notified = inner.releases_done.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if inner.pending_releases.load(Ordering::Acquire) == 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(timeout, done).await.is_ok()
    }

    /// Number of this client's tasks waiting for `key`.
    pub fn waiters(&self, key: &str) -> usize {
        self.inner.waiters.queued(&keys::release_channel(key))
    }

    pub(crate) fn inner(&self) -> &Arc<ClientInner> {
        &self.inner
    }

    /// Identity of this client for the re-entrancy scope.
    pub(crate) fn scope_id(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// Tries once to take `key`, failing fast with [`LockError::Held`] if another owner holds
    /// it, or if waiters are queued for it (they are served first). `options.wait` is ignored.
    pub async fn try_lock(&self, key: &str, options: LockOptions) -> Result<LockGuard> {
        let options = LockOptions { wait: None, ..options };
        self.lock(key, options).await
    }

    /// Takes `key`, waiting up to `options.wait` if it is held (no wait: fail fast).
    ///
    /// Waiting does not poll: the waiter subscribes to the key's release channel and retries
    /// when a release is announced, falling back to a jittered retry no later than the
    /// holder's remaining lease. Waiters of one client queue in arrival order, and each
    /// client's first waiter holds a ticket in a queue kept in Redis, so a free lock goes to
    /// the client that has waited longest.
    ///
    /// Inside a locked section of the current task that already holds `key` (see
    /// [`with_lock`](Self::with_lock)), returns a nested guard without touching Redis.
    pub async fn lock(&self, key: &str, options: LockOptions) -> Result<LockGuard> {
        match self.lock_for(key, options, None).await? {
            Attempt::Acquired(guard) => Ok(guard),
            Attempt::Held(remaining) => Err(LockError::Held { key: key.to_owned(), remaining }),
            // Only reported when a tick is passed.
            Attempt::TickDone(tick) => Err(LockError::TickClaimed { key: key.to_owned(), tick }),
        }
    }

    /// [`lock`](Self::lock), optionally claiming a scheduler tick with the lock, and reporting
    /// contention as an [`Attempt`] rather than an error.
    pub(crate) async fn lock_for(
        &self,
        key: &str,
        options: LockOptions,
        tick: Option<i64>,
    ) -> Result<Attempt> {
        keys::validate(key)?;
        options.validate()?;
        if let Some(state) = scope::find(self.scope_id(), key) {
            if let Some(reason) = state.loss() {
                return Err(LockError::Lost { key: key.to_owned(), reason });
            }
            tracing::trace!(key, instance = %self.instance_id(), "re-entrant acquisition");
            return Ok(Attempt::Acquired(LockGuard::new(state, self.clone(), true)));
        }
        self.acquire(key, &options, tick).await
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
    pub async fn with_lock<F: Future>(&self, key: &str, options: LockOptions, fut: F) -> Result<F::Output> {
        section::run(self, key, options, scope::claim_tick(), fut).await.result
    }

    /// Acquires `key`, waiting per `options.wait`. With `tick`, also claims that scheduler
    /// tick atomically, reporting [`Attempt::TickDone`] if it was already claimed.
    pub(crate) async fn acquire(
        &self,
        key: &str,
        options: &LockOptions,
        tick: Option<i64>,
    ) -> Result<Attempt> {
        let token = self.new_token();
        match options.wait {
            None => self.attempt(key, &token, options, tick, None).await,
            // Boxed: the waiting machinery is large and off the fail-fast path; inline, it
            // would make every `try_lock` future several kilobytes to move around.
            Some(wait) => Box::pin(self.wait_for(key, options, tick, wait, token)).await,
        }
    }

    /// The waiting half of [`acquire`](Self::acquire).
    async fn wait_for(
        &self,
        key: &str,
        options: &LockOptions,
        tick: Option<i64>,
        wait: Duration,
        mut token: String,
    ) -> Result<Attempt> {
        // A wait too long to represent (e.g. Duration::MAX, "forever") waits for decades.
        let now = Instant::now();
        let deadline = now.checked_add(wait).unwrap_or_else(|| now + FOREVER);
        let channel = keys::release_channel(key);
        let waiters = &self.inner.waiters;
        // Fast path, unless tasks of this client are already queued: then wait behind them.
        // While waiting, connection failures are retried until the bound; the last one is
        // reported if the bound passes without Redis coming back.
        let mut last_error = None;
        let mut remaining = None;
        let (initial_backoff, max_backoff) = self.inner.config.backoff;
        // A head's ticket in the Redis-side queue outlives its longest pause between attempts.
        let line = Some(max_backoff.saturating_mul(3).max(Duration::from_secs(1)));
        let mut queued = QueuedTokens::new(&self.inner, key);
        // The fast path does not join the Redis-side queue: only this client's head does, as it
        // is the one that keeps its ticket fresh (a queued ticket nobody renews would hold up
        // every client until it lapses).
        if !waiters.has_queue(&channel) {
            match self.attempt(key, &token, options, tick, None).await {
                Ok(Attempt::Held(pttl)) => remaining = pttl,
                Ok(done) => return Ok(queued.acquired(&token, done)),
                Err(e) if e.is_transient() => {
                    // That attempt's token may be cleaned up later: never reuse it.
                    token = self.new_token();
                    last_error = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        tracing::debug!(key, instance = %self.instance_id(), ?wait, "lock held; waiting");
        let ticket = waiters.join(&channel);
        // A new head retries once subscribed: a release may have been announced before the
        // subscription was in place.
        let mut try_now = ticket.is_head();
        let mut backoff = initial_backoff;
        loop {
            let head = ticket.is_head();
            let fallback = if head {
                let step = match tokio::time::timeout_at(deadline, ticket.ensure_subscribed()).await {
                    Err(_) => return Err(last_error.unwrap_or_else(|| self.timeout(key, wait))),
                    Ok(Ok(())) if try_now => {
                        queued.push(&token);
                        self.attempt(key, &token, options, tick, line).await
                    }
                    Ok(Ok(())) => Ok(Attempt::Held(remaining)),
                    Ok(Err(e)) => Err(e),
                };
                match step {
                    Ok(Attempt::Held(pttl)) => {
                        remaining = pttl;
                        last_error = None;
                    }
                    Ok(done) => {
                        ticket.acquired();
                        return Ok(queued.acquired(&token, done));
                    }
                    Err(e) if e.is_transient() => {
                        tracing::debug!(key, instance = %self.instance_id(), error = %e, "redis unavailable while waiting; retrying");
                        token = self.new_token();
                        remaining = None;
                        last_error = Some(e);
                    }
                    Err(e) => return Err(e),
                }
                let fallback = jittered(backoff).min(remaining.unwrap_or(max_backoff));
                backoff = backoff.saturating_mul(2).min(max_backoff);
                fallback
            } else {
                if try_now {
                    // Queued behind this client's head, whose future may be kept alive without
                    // being polled: try now and then, without joining the Redis-side queue.
                    if let Ok(done @ (Attempt::Acquired(_) | Attempt::TickDone(_))) =
                        self.attempt(key, &token, options, tick, None).await
                    {
                        ticket.acquired();
                        return Ok(queued.acquired(&token, done));
                    }
                }
                jittered(max_backoff.saturating_mul(4))
            };
            let sleep = tokio::time::sleep(fallback);
            tokio::select! {
                signal = ticket.signaled() => {
                    try_now = signal == TRY_NOW;
                    if try_now {
                        backoff = initial_backoff;
                    }
                }
                () = sleep => try_now = true,
                () = tokio::time::sleep_until(deadline) => {
                    return Err(last_error.unwrap_or_else(|| self.timeout(key, wait)));
                }
            }
        }
    }

    /// `"<instance-id>:<uuid v4>"`, built without the formatting machinery (it is on every
    /// acquisition's path).
    fn new_token(&self) -> String {
        let mut buf = uuid::Uuid::encode_buffer();
        let uuid = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buf);
        let id = self.instance_id();
        let mut token = String::with_capacity(id.len() + 1 + uuid.len());
        token.push_str(id);
        token.push(':');
        token.push_str(uuid);
        token
    }

    fn timeout(&self, key: &str, waited: Duration) -> LockError {
        tracing::debug!(key, instance = %self.instance_id(), ?waited, "timed out waiting for lock");
        LockError::Timeout { key: key.to_owned(), waited }
    }

    /// One acquisition attempt: one round trip.
    ///
    /// `line` is the waiter ticket: a waiting caller that is refused joins the Redis-side
    /// queue of waiters for that long (renewed by each attempt); `None` for callers that do not
    /// wait their turn (fail fast, or not the head of this client's queue).
    async fn attempt(
        &self,
        key: &str,
        token: &str,
        options: &LockOptions,
        tick: Option<i64>,
        line: Option<Duration>,
    ) -> Result<Attempt> {
        let inner = &self.inner;
        let (lease, watchdog) = match options.lease {
            Lease::Fixed(lease) => (lease, false),
            Lease::Watchdog => (inner.config.watchdog_lease, true),
        };
        let mut invocation = ACQUIRE.prepare_invoke();
        invocation.key(key).key(keys::aux(key, "waiters")).key(keys::aux(key, "waiters:until"));
        // The fence and tick keys only when the script touches them.
        if options.fencing || tick.is_some() {
            invocation.key(keys::aux(key, "fence"));
        }
        if tick.is_some() {
            invocation.key(keys::aux(key, "tick"));
        }
        invocation
            .arg(token)
            .arg(millis(lease, "lease")?)
            .arg(if options.fencing { "1" } else { "0" })
            .arg(tick.map(|t| t.to_string()).unwrap_or_default())
            .arg(line.map_or(Ok(0), |d| millis(d, "waiter ticket"))?);
        let sent_at = Instant::now();
        // If the reply is lost (error) or never awaited (the caller's future is dropped), the
        // command may still have run: free the key in case it holds our token
        // (compare-and-delete, so harmless otherwise).
        let cleanup = CleanupOnDrop { inner, key, token, armed: true };
        let reply: Result<(i64, i64)> = inner.invoke(&invocation, || format!("acquiring lock `{key}`")).await;
        let (status, value) = reply?;
        cleanup.disarm();
        match status {
            1 => {
                let fence = options.fencing.then(|| u64::try_from(value).unwrap_or(0));
                let state = Arc::new(LockState::new(NewState {
                    id: inner.next_lock_id.fetch_add(1, Ordering::Relaxed),
                    key: key.to_owned(),
                    token: token.to_owned(),
                    fence,
                    lease,
                    at_least: options.at_least,
                    instance: inner.config.instance_id.clone(),
                    sent_at,
                }));
                if watchdog {
                    inner.watchdog.register(inner, state.clone());
                }
                tracing::debug!(key, instance = %inner.config.instance_id, fence, ?lease, watchdog, "lock acquired");
                Ok(Attempt::Acquired(LockGuard::new(state, self.clone(), false)))
            }
            2 => Ok(Attempt::TickDone(value)),
            _ => {
                let remaining = u64::try_from(value).ok().map(Duration::from_millis);
                tracing::trace!(key, instance = %inner.config.instance_id, ?remaining, "lock is held by another owner");
                Ok(Attempt::Held(remaining))
            }
        }
    }
}

/// `d` scaled by a random factor in [0.75, 1.0), so waiters of different clients spread out.
fn jittered(d: Duration) -> Duration {
    let r = (uuid::Uuid::new_v4().as_u128() % 1000) as u32;
    Duration::try_from_secs_f64(d.as_secs_f64() * (0.75 + f64::from(r) / 4000.0)).unwrap_or(d)
}

impl ClientInner {
    /// Runs a script invocation on the shared connection, reconnecting and retrying once if
    /// the connection had failed (every script here is safe to run twice).
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
        action: impl Fn() -> String,
    ) -> Result<T> {
        self.invoke_with(invocation, action, true).await
    }

    /// [`invoke`](Self::invoke); with `retry_timeouts` false, a timed-out command (which may
    /// still have run) is reported instead of sent again.
    pub(crate) async fn invoke_with<T: FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
        action: impl Fn() -> String,
        retry_timeouts: bool,
    ) -> Result<T> {
        let mut retried = false;
        loop {
            let (generation, mut conn) = self.connection(&action).await?;
            match invocation.invoke_async(&mut conn).await {
                Ok(value) => return Ok(value),
                Err(e) if is_connection_error(&e) && !retried && (retry_timeouts || !e.is_timeout()) => {
                    self.drop_connection(generation);
                    retried = true;
                }
                Err(e) => {
                    if is_connection_error(&e) {
                        self.drop_connection(generation);
                    }
                    return Err(LockError::redis(action(), e));
                }
            }
        }
    }

    /// Sends a pipeline on the shared connection (no retry: the caller decides).
    pub(crate) async fn query_pipeline<T: FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, RedisError> {
        let (generation, mut conn) = match self.connection(&|| String::new()).await {
            Ok(c) => c,
            Err(LockError::Redis { source, .. }) => return Err(source),
            Err(e) => return Err(RedisError::from(std::io::Error::other(e.to_string()))),
        };
        let result = pipe.query_async(&mut conn).await;
        if let Err(e) = &result
            && is_connection_error(e)
        {
            self.drop_connection(generation);
        }
        result
    }

    pub(crate) async fn load_script(&self, script: &Script) -> Result<()> {
        let action = || "loading a lock script".to_owned();
        let (_, mut conn) = self.connection(&action).await?;
        script
            .prepare_invoke()
            .load_async(&mut conn)
            .await
            .map(drop)
            .map_err(|e| LockError::redis(action(), e))
    }

    async fn connection(&self, action: &impl Fn() -> String) -> Result<(u64, MultiplexedConnection)> {
        if let Some((generation, conn)) = lock_unpoisoned(&self.conn).as_ref() {
            return Ok((*generation, conn.clone()));
        }
        // Boxed: connecting is rare, and its future would otherwise be inlined into (and
        // copied along with) every command's future.
        Box::pin(self.connect(action())).await
    }

    async fn connect(&self, action: String) -> Result<(u64, MultiplexedConnection)> {
        let action = || action.clone();
        let pooled = tokio::time::timeout(self.config.command_timeout, self.pool.get())
            .await
            .map_err(|_| {
                let timed_out =
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "no pooled connection in time");
                LockError::redis(action(), RedisError::from(timed_out))
            })?
            .map_err(|e| match e {
                deadpool_redis::PoolError::Backend(e) => LockError::redis(action(), e),
                e => LockError::Pool { action: action(), source: e },
            })?;
        // Taken out of the pool for good: the application's pooled connections must not be
        // the one lock commands share (a blocking command or a SELECT there would stall or
        // misdirect every lock).
        let mut conn = deadpool_redis::Connection::take(pooled);
        conn.set_response_timeout(self.config.command_timeout);
        let generation = self.conn_generation.fetch_add(1, Ordering::Relaxed) + 1;
        let mut slot = lock_unpoisoned(&self.conn);
        // Another task may have connected meanwhile; keep the first so all share one.
        let (generation, conn) = slot.get_or_insert((generation, conn));
        Ok((*generation, conn.clone()))
    }

    fn drop_connection(&self, generation: u64) {
        let mut slot = lock_unpoisoned(&self.conn);
        if slot.as_ref().is_some_and(|(g, _)| *g == generation) {
            *slot = None;
        }
    }

    /// Releases `state`'s lock: compare-and-delete and announce, or, within a minimum hold,
    /// shorten the key's expiry to what is left of it.
    pub(crate) async fn release(&self, state: &LockState) -> Result<bool> {
        let was_held = state.mark_released();
        self.watchdog.unregister(state.id);
        let keep = state
            .at_least
            .map(|min| min.saturating_sub(state.acquired_at.elapsed()))
            .filter(|d| !d.is_zero());
        let mut invocation = RELEASE.prepare_invoke();
        invocation.key(&state.key).arg(&state.token).arg(keep.map_or(Ok(0), |d| millis(d, "at_least"))?);
        // Not retried after a timeout: a late first RELEASE would make the retry report that
        // the lock was no longer ours.
        let owned: i64 =
            self.invoke_with(&invocation, || format!("releasing lock `{}`", state.key), false).await?;
        let owned = owned == 1;
        if owned {
            tracing::debug!(key = %state.key, instance = %self.config.instance_id, fence = state.fence, held_for = ?state.acquired_at.elapsed(), kept_for = ?keep, "lock released");
        } else if was_held {
            tracing::warn!(key = %state.key, instance = %self.config.instance_id, fence = state.fence, "lock released, but it had already expired or been taken over");
        }
        Ok(owned)
    }

    /// Drop's release: runs in the background on the current runtime.
    pub(crate) fn release_in_background(self: &Arc<Self>, state: &Arc<LockState>) {
        self.watchdog.unregister(state.id);
        let task_state = state.clone();
        let spawned = self.spawn_release(move |inner| async move {
            if let Err(e) = inner.release(&task_state).await {
                tracing::warn!(key = %task_state.key, error = %e, "background release failed; the lock expires at the end of its lease");
            }
        });
        if !spawned {
            state.mark_released();
            tracing::warn!(key = %state.key, "lock guard dropped outside a tokio runtime; the lock expires at the end of its lease");
        }
    }

    pub(crate) fn release_token_in_background(self: &Arc<Self>, key: &str, token: &str) {
        let (key, token) = (key.to_owned(), token.to_owned());
        self.spawn_release(move |inner| async move {
            let mut invocation = RELEASE.prepare_invoke();
            invocation.key(&key).arg(&token).arg(0);
            let _: Result<i64> = inner.invoke(&invocation, || format!("cleaning up lock `{key}`")).await;
        });
    }

    /// Spawns a release on the current runtime, counted until it ends so that
    /// [`LockClient::flush_releases`] can wait for it. False without a runtime.
    fn spawn_release<F, Fut>(self: &Arc<Self>, release: F) -> bool
    where
        F: FnOnce(Arc<ClientInner>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return false };
        let pending = PendingRelease::enter(self.clone());
        let task = release(self.clone());
        rt.spawn(async move {
            task.await;
            drop(pending);
        });
        true
    }
}

/// One background release in flight; counted in `ClientInner::pending_releases`.
struct PendingRelease {
    inner: Arc<ClientInner>,
}

impl PendingRelease {
    fn enter(inner: Arc<ClientInner>) -> Self {
        inner.pending_releases.fetch_add(1, Ordering::AcqRel);
        PendingRelease { inner }
    }
}

impl Drop for PendingRelease {
    // Also runs when the task is dropped unfinished (its runtime shut down).
    fn drop(&mut self) {
        if self.inner.pending_releases.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.inner.releases_done.notify_waiters();
        }
    }
}

/// The tokens a waiting acquisition may have left in the Redis-side queue of waiters. Those
/// that did not get the lock are taken out when the wait ends, however it ends (success,
/// error, timeout, cancellation), so they do not hold up other clients until they lapse.
struct QueuedTokens<'a> {
    inner: &'a Arc<ClientInner>,
    key: &'a str,
    tokens: Vec<String>,
}

impl<'a> QueuedTokens<'a> {
    fn new(inner: &'a Arc<ClientInner>, key: &'a str) -> Self {
        QueuedTokens { inner, key, tokens: Vec::new() }
    }

    fn push(&mut self, token: &str) {
        if self.tokens.last().is_none_or(|t| t != token) {
            self.tokens.push(token.to_owned());
        }
    }

    /// The acquiring token left the queue in the same script; the others still have to.
    fn acquired(mut self, token: &str, done: Attempt) -> Attempt {
        self.tokens.retain(|t| t != token);
        done
    }
}

impl Drop for QueuedTokens<'_> {
    fn drop(&mut self) {
        for token in std::mem::take(&mut self.tokens) {
            let (queue, until) = (keys::aux(self.key, "waiters"), keys::aux(self.key, "waiters:until"));
            self.inner.spawn_release(move |inner| async move {
                let mut invocation = LEAVE.prepare_invoke();
                invocation.key(&queue).key(&until).arg(&token);
                let _: Result<i64> =
                    inner.invoke(&invocation, || "leaving the queue of waiters".to_owned()).await;
            });
        }
    }
}

/// Releases an acquisition's token in the background unless disarmed once its reply is in.
struct CleanupOnDrop<'a> {
    inner: &'a Arc<ClientInner>,
    key: &'a str,
    token: &'a str,
    armed: bool,
}

impl CleanupOnDrop<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for CleanupOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.inner.release_token_in_background(self.key, self.token);
        }
    }
}

pub(crate) fn is_connection_error(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
        // A failover behind a stable address leaves us on a replica: reconnect.
        || e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
}

/// Errors that may go away by themselves: connection trouble, or a server that is loading its
/// data or failing over.
pub(crate) fn is_transient(e: &RedisError) -> bool {
    is_connection_error(e)
        || e.is_timeout()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading | ServerErrorKind::TryAgain | ServerErrorKind::MasterDown
            )
        )
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("instance_id", &self.inner.config.instance_id)
            .field("watchdog_lease", &self.inner.config.watchdog_lease)
            .field("renewing", &self.inner.watchdog.len())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for ClientInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientInner").field("config", &self.config).finish_non_exhaustive()
    }
}

/// Lets `client = ...` in `#[distributed_lock]` take a `LockClient`, a reference or an `Arc`.
impl AsRef<LockClient> for LockClient {
    fn as_ref(&self) -> &LockClient {
        self
    }
}
