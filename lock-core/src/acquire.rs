//! Taking a lock: one attempt (one round trip), and waiting for a held lock. [`Core`] is what
//! every clone of a `LockClient` shares.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::conn::Conn;
use crate::error::{LockError, Result};
use crate::guard::LockGuard;
use crate::keys;
use crate::options::{ClientConfig, Lease, LockOptions, millis};
use crate::release::Releaser;
use crate::scope;
use crate::scripts::{ACQUIRE, LEAVE};
use crate::state::{LockState, NewState};
use crate::waiters::{TRY_NOW, Waiters};
use crate::watchdog::Watchdog;

/// Stands in for a wait bound too large to add to an `Instant`.
const FOREVER: Duration = Duration::from_secs(60 * 60 * 24 * 365 * 30);

/// What every clone of a client shares: configuration, the connection, the watchdog, the
/// waiting machinery and the releaser.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) config: ClientConfig,
    pub(crate) conn: Arc<Conn>,
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) waiters: Waiters,
    pub(crate) releaser: Arc<Releaser>,
    next_lock_id: AtomicU64,
}

/// Outcome of one acquisition attempt.
pub(crate) enum Attempt {
    Acquired(LockGuard),
    Held(Option<Duration>),
    /// The scheduler tick was already claimed; carries the last claimed tick.
    TickDone(i64),
}

impl Core {
    /// Wires the parts together.
    pub(crate) fn new(config: ClientConfig, conn: Arc<Conn>, waiters: Waiters) -> Self {
        let instance = config.instance_id.clone();
        let watchdog = Arc::new(Watchdog::new(conn.clone(), instance.clone(), config.watchdog_lease));
        let releaser = Arc::new(Releaser::new(conn.clone(), watchdog.clone(), instance));
        Core { config, conn, watchdog, waiters, releaser, next_lock_id: AtomicU64::new(0) }
    }

    /// Identity of this client for the re-entrancy scope.
    pub(crate) fn scope_id(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    fn instance_id(&self) -> &str {
        &self.config.instance_id
    }

    /// `LockClient::lock`, optionally claiming a scheduler tick with the lock, and reporting
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
            return Ok(Attempt::Acquired(LockGuard::nested(state, self.releaser.clone())));
        }
        self.acquire(key, &options, tick).await
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
        let waiters = &self.waiters;
        // Fast path, unless tasks of this client are already queued: then wait behind them.
        // While waiting, connection failures are retried until the bound; the last one is
        // reported if the bound passes without Redis coming back.
        let mut last_error = None;
        let mut remaining = None;
        let (initial_backoff, max_backoff) = self.config.backoff;
        // A head's ticket in the Redis-side queue outlives its longest pause between attempts.
        let line = Some(max_backoff.saturating_mul(3).max(Duration::from_secs(1)));
        let mut queued = QueuedTokens::new(&self.releaser, key);
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
        let inner = self;
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
        let cleanup = CleanupOnDrop { releaser: &self.releaser, key, token, armed: true };
        let reply: Result<(i64, i64)> =
            inner.conn.invoke(&invocation, || format!("acquiring lock `{key}`")).await;
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
                    inner.watchdog.register(state.clone());
                }
                tracing::debug!(key, instance = %inner.config.instance_id, fence, ?lease, watchdog, "lock acquired");
                Ok(Attempt::Acquired(LockGuard::new(state, self.releaser.clone())))
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

/// The tokens a waiting acquisition may have left in the Redis-side queue of waiters. Those
/// that did not get the lock are taken out when the wait ends, however it ends (success,
/// error, timeout, cancellation), so they do not hold up other clients until they lapse.
struct QueuedTokens<'a> {
    releaser: &'a Arc<Releaser>,
    key: &'a str,
    tokens: Vec<String>,
}

impl<'a> QueuedTokens<'a> {
    fn new(releaser: &'a Arc<Releaser>, key: &'a str) -> Self {
        QueuedTokens { releaser, key, tokens: Vec::new() }
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
            let mut invocation = LEAVE.prepare_invoke();
            invocation
                .key(keys::aux(self.key, "waiters"))
                .key(keys::aux(self.key, "waiters:until"))
                .arg(token);
            self.releaser.run_in_background(invocation, "leaving the queue of waiters");
        }
    }
}

/// Releases an acquisition's token in the background unless disarmed once its reply is in.
struct CleanupOnDrop<'a> {
    releaser: &'a Arc<Releaser>,
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
            self.releaser.release_token_in_background(self.key, self.token);
        }
    }
}
