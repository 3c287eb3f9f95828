//! Taking a lock. [`Core`] is what every clone of a `LockClient` shares.
//!
//! - Uncontended, no fence, no tick: one plain `SET key token NX PX lease GET`.
//! - Fenced, claiming a tick, or waiting: the `ACQUIRE` script (see `scripts.rs`).
//! - A lock held by a token whose client's liveness key is gone is taken over at once.
//! - A command whose outcome is unknown is cleaned up in the background (`Releaser::abandon`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadpool_redis::redis::{self, Value};
use tokio::time::Instant;
use tracing::Instrument;

use crate::conn::{Conn, Sent};
use crate::error::{LockError, LossReason, Result};
use crate::guard::LockGuard;
use crate::keys;
use crate::liveness::{Identity, Liveness};
use crate::options::{ClientConfig, Lease, LockOptions, drift, millis};
use crate::release::Releaser;
use crate::replica_ack::AckShortfall;
use crate::scope;
use crate::scripts::{ACQUIRE, EXTEND, Eval};
use crate::state::{LockState, NewState};
use crate::telemetry::{self, Acquisition, MetricsCache, Unclaimed};
use crate::waiters::{Ticket, Waiters};
use crate::watchdog::Watchdog;

/// Stands in for a wait bound too large to add to an `Instant`.
const FOREVER: Duration = Duration::from_secs(60 * 60 * 24 * 365 * 30);

/// What every clone of a client shares: configuration, the connection, the liveness lease,
/// the watchdog, the waiting machinery and the releaser.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) config: ClientConfig,
    pub(crate) conn: Arc<Conn>,
    pub(crate) liveness: Liveness,
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) waiters: Waiters,
    pub(crate) releaser: Arc<Releaser>,
    /// The metrics of the keys this client locks.
    metrics: MetricsCache,
    next_lock_id: AtomicU64,
}

/// Outcome of an acquisition.
pub(crate) enum Attempt {
    Acquired(LockGuard),
    Held(Option<Duration>),
    /// The scheduler tick was already claimed; carries the last claimed tick.
    TickDone(i64),
}

/// What one round trip said.
enum Reply {
    Acquired {
        fence: Option<u64>,
        sent_at: Instant,
    },
    Held {
        remaining: Option<Duration>,
        holder: Option<String>,
    },
    /// `ours`: the key holds the caller's token anyway, which must be passed on.
    TickDone {
        last: i64,
        ours: bool,
    },
}

/// How a lock was taken: its fence, when the command that took it was sent, and how long the
/// key is known to live from then (`None`: the lease).
struct Taken {
    fence: Option<u64>,
    sent_at: Instant,
    valid_for: Option<Duration>,
}

impl Taken {
    /// Taken by a command whose reply said so: the key lives a lease from its send.
    fn by_reply(fence: Option<u64>, sent_at: Instant) -> Self {
        Taken { fence, sent_at, valid_for: None }
    }
}

/// The lease a lock is taken with, and whether the watchdog renews it.
#[derive(Clone, Copy)]
struct LeaseOf {
    lease: Duration,
    watchdog: bool,
}

impl Core {
    /// Wires the parts together.
    pub(crate) fn new(config: ClientConfig, conn: Arc<Conn>, waiters: Waiters) -> Self {
        let instance = config.instance_id.clone();
        let liveness = Liveness::new(conn.clone(), instance.clone(), config.liveness_ttl);
        let watchdog = Arc::new(Watchdog::new(conn.clone(), instance.clone(), config.watchdog_lease));
        let releaser = Arc::new(Releaser::new(
            conn.clone(),
            watchdog.clone(),
            instance,
            config.handoff,
            config.replica_ack,
        ));
        Core {
            config,
            conn,
            liveness,
            watchdog,
            waiters,
            releaser,
            metrics: MetricsCache::default(),
            next_lock_id: AtomicU64::new(0),
        }
    }

    /// Identity of this client for the re-entrancy scope.
    pub(crate) fn scope_id(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    fn instance_id(&self) -> &str {
        &self.config.instance_id
    }

    fn lease_of(&self, options: &LockOptions) -> LeaseOf {
        match options.lease {
            Lease::Fixed(lease) => LeaseOf { lease, watchdog: false },
            Lease::Watchdog => LeaseOf { lease: self.config.watchdog_lease, watchdog: true },
        }
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
        // Lua compares ticks as doubles: exact up to 2^53 (epoch ms reach that in year 287,396).
        if let Some(tick) = tick
            && tick.unsigned_abs() > 1 << 53
        {
            return Err(LockError::InvalidOptions(format!("tick {tick} is out of range (at most ±2^53 ms)")));
        }
        if let Some(state) = scope::find(self.scope_id(), key) {
            if let Some(reason) = state.loss() {
                return Err(LockError::Lost { key: key.to_owned(), reason });
            }
            tracing::trace!(key, instance = %self.instance_id(), "re-entrant acquisition");
            return Ok(Attempt::Acquired(LockGuard::nested(state, self.releaser.clone())));
        }
        let span = tracing::info_span!(
            "lock_acquire",
            key,
            instance = %self.instance_id(),
            fence = tracing::field::Empty,
        );
        let started = Instant::now();
        let attempt = async {
            match self.acquire(key, options, tick, started).await {
                // Boxed, as every path off the uncontended one: its future (a release
                // included) would otherwise make every acquisition's larger to move and touch.
                Ok(Attempt::Acquired(guard)) if self.config.replica_ack.is_some() => {
                    Box::pin(self.acknowledged(key, guard)).await.map(Attempt::Acquired)
                }
                attempt => attempt,
            }
        }
        .instrument(span)
        .await;
        let outcome = match &attempt {
            Ok(Attempt::Acquired(_)) => Acquisition::Acquired,
            Ok(Attempt::Held(_) | Attempt::TickDone(_)) => Acquisition::Held,
            Err(LockError::Timeout { .. }) => Acquisition::Timeout,
            Err(_) => Acquisition::Error,
        };
        let waited = started.elapsed();
        match &attempt {
            Ok(Attempt::Acquired(guard)) => guard.state().metrics.acquisition(outcome, waited),
            _ => self.metrics.of(key).acquisition(outcome, waited),
        }
        attempt
    }

    /// With replica acknowledgement on: `WAIT`s for the replicas after an acquisition, and
    /// on a shortfall releases the lock and fails, or warns and keeps it (`ReplicaAck`).
    async fn acknowledged(&self, key: &str, guard: LockGuard) -> Result<LockGuard> {
        let Some(ack) = self.config.replica_ack else { return Ok(guard) };
        let (got, error) = match self.conn.wait_replicas(key, ack.replicas, ack.timeout).await {
            Ok(got) => (got, None),
            Err(e) => (0, Some(e)),
        };
        if got >= ack.replicas {
            tracing::trace!(replicas = got, "replicas acknowledged the lock");
            return Ok(guard);
        }
        match ack.on_shortfall {
            AckShortfall::Warn => {
                tracing::warn!(
                    wanted = ack.replicas,
                    got,
                    error = error.as_ref().map(tracing::field::display),
                    "fewer replicas than wanted acknowledged the lock; keeping it (a failover now could lose it)"
                );
                Ok(guard)
            }
            _ => {
                tracing::warn!(
                    wanted = ack.replicas,
                    got,
                    "fewer replicas than wanted acknowledged the lock; releasing it"
                );
                if let Err(e) = guard.release().await {
                    tracing::debug!(error = %e, "release after a replica shortfall failed; the lock expires with its lease");
                }
                Err(match error {
                    Some(e) => e,
                    None => LockError::ReplicaAck { key: key.to_owned(), wanted: ack.replicas, got },
                })
            }
        }
    }

    /// [`lock_for`](Self::lock_for) past the re-entrancy check, inside the acquire span;
    /// `started` is when the call began.
    async fn acquire(
        &self,
        key: &str,
        options: LockOptions,
        tick: Option<i64>,
        started: Instant,
    ) -> Result<Attempt> {
        match options.wait {
            None => {
                let identity = self.liveness.identity(started).await?;
                let token = new_token(&identity);
                self.fail_fast(key, token, &identity, &options, tick, started).await
            }
            // Boxed: the waiting machinery is large and off the fail-fast path; inline, it
            // would make every `try_lock` future several kilobytes to move around.
            Some(wait) => Box::pin(self.wait_for(key, &options, tick, wait)).await,
        }
    }

    /// A waiting acquisition, bounded by `wait` from now.
    async fn wait_for(
        &self,
        key: &str,
        options: &LockOptions,
        tick: Option<i64>,
        wait: Duration,
    ) -> Result<Attempt> {
        // A wait too long to represent (e.g. Duration::MAX, "forever") waits for decades.
        let now = Instant::now();
        let deadline = now.checked_add(wait).unwrap_or_else(|| now + FOREVER);
        let identity = self.identity_until(deadline).await?;
        let token = new_token(&identity);
        Waiting::new(self, key, options, tick, wait, deadline, identity, token).run().await
    }

    /// This client's liveness identity. Creating it (first use, or after it died) needs Redis;
    /// a waiting caller keeps trying while Redis is unreachable, up to `deadline`.
    async fn identity_until(&self, deadline: Instant) -> Result<Arc<Identity>> {
        let (mut pause, max) = self.config.backoff;
        loop {
            match self.liveness.identity(Instant::now()).await {
                Err(e) if e.is_transient() && Instant::now() + pause < deadline => {
                    tokio::time::sleep(jittered(pause)).await;
                    pause = pause.saturating_mul(2).min(max);
                }
                result => return result,
            }
        }
    }

    /// One try (two if the holder turns out to be dead and is taken over). `started`: when
    /// the call began, standing in for the first try's send time (a little early, so the
    /// lease it implies ends a little early: safe) to spare a clock read.
    async fn fail_fast(
        &self,
        key: &str,
        token: String,
        identity: &Arc<Identity>,
        options: &LockOptions,
        tick: Option<i64>,
        started: Instant,
    ) -> Result<Attempt> {
        let lease = self.lease_of(options);
        let plain = !options.fencing && tick.is_none();
        let mut taken_over = false;
        loop {
            let reply = if plain {
                let sent_at = if taken_over { Instant::now() } else { started };
                self.set_nx(key, &token, lease.lease, sent_at).await?
            } else {
                Box::pin(self.script(key, &token, options, tick, None, &Sent::default())).await?
            };
            match reply {
                Reply::Acquired { fence, sent_at } => {
                    return Ok(Attempt::Acquired(self.guard(
                        key,
                        token,
                        identity,
                        options,
                        Taken::by_reply(fence, sent_at),
                    )));
                }
                Reply::TickDone { last, ours } => {
                    if ours {
                        self.releaser.abandon(key, &token, Instant::now(), lease.lease, false, None);
                    }
                    return Ok(Attempt::TickDone(last));
                }
                Reply::Held { remaining, holder } => {
                    if !taken_over && let Some(holder) = holder {
                        taken_over = true;
                        if Box::pin(self.take_over_if_dead(key, &holder)).await? {
                            continue;
                        }
                    }
                    let remaining = match remaining {
                        Some(remaining) => Some(remaining),
                        None => Box::pin(self.pttl(key)).await?,
                    };
                    tracing::trace!(?remaining, "lock is held by another owner");
                    return Ok(Attempt::Held(remaining));
                }
            }
        }
    }

    /// The uncontended path: `SET key token NX PX lease GET`, no script, sent after
    /// `sent_at`.
    async fn set_nx(&self, key: &str, token: &str, lease: Duration, sent_at: Instant) -> Result<Reply> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(key).arg(token).arg("NX").arg("PX").arg(millis(lease, "lease")?).arg("GET");
        let sent = Sent::default();
        let cleanup = CleanupOnDrop::new(&self.releaser, key, token, sent_at, lease, &sent);
        let previous: Option<String> =
            match self.conn.query_once(&cmd, || format!("acquiring lock `{key}`"), &sent).await {
                Ok(previous) => previous,
                Err(e) => return Err(cleanup.failed(e)),
            };
        cleanup.disarm();
        Ok(match previous {
            // Our own token can only come from an earlier send of it, which this path never
            // makes; the expiry this send set is then the one in force either way.
            None => Reply::Acquired { fence: None, sent_at },
            Some(holder) if keys::unmarked(&holder) == token => Reply::Acquired { fence: None, sent_at },
            Some(holder) => Reply::Held { remaining: None, holder: Some(keys::unmarked(&holder).to_owned()) },
        })
    }

    /// The scripted path. With `ticket`, a refused caller joins (or stays in) the queue of
    /// waiters; such a caller keeps its token and cleans up when its wait ends, so an unknown
    /// outcome is left to it.
    async fn script(
        &self,
        key: &str,
        token: &str,
        options: &LockOptions,
        tick: Option<i64>,
        ticket: Option<Duration>,
        sent: &Sent,
    ) -> Result<Reply> {
        let lease = self.lease_of(options).lease;
        let (waiters, tickets) = (keys::aux(key, "waiters"), keys::aux(key, "waiters:until"));
        let mut invocation = match (options.fencing, tick.is_some()) {
            // The fence and tick keys only when the script touches them.
            (_, true) => Eval::new(
                &ACQUIRE,
                &[
                    key,
                    &waiters,
                    &tickets,
                    &keys::aux(key, "fence"),
                    &keys::aux(key, "tick"),
                    &keys::aux(key, "tick:by"),
                ],
            ),
            (true, false) => Eval::new(&ACQUIRE, &[key, &waiters, &tickets, &keys::aux(key, "fence")]),
            (false, false) => Eval::new(&ACQUIRE, &[key, &waiters, &tickets]),
        };
        invocation
            .arg(token)
            .arg(millis(lease, "lease")?)
            .arg(if options.fencing { "1" } else { "0" })
            .arg(tick.map(|t| t.to_string()).unwrap_or_default())
            .arg(ticket.map_or(Ok(0), |d| millis(d, "waiter ticket"))?)
            .arg(millis(self.config.handoff, "hand-off")?)
            .arg(self.conn.publish_command());
        let sent_at = Instant::now();
        // A waiting caller's token is cleaned up by its `Waiting` (which knows whether it is
        // queued); a fail-fast caller's here, if its outcome is unknown.
        let cleanup =
            ticket.is_none().then(|| CleanupOnDrop::new(&self.releaser, key, token, sent_at, lease, sent));
        let reply: Vec<Value> =
            match self.conn.invoke_once(&invocation, || format!("acquiring lock `{key}`"), sent).await {
                Ok(reply) => reply,
                Err(e) => {
                    return Err(match cleanup {
                        Some(cleanup) => cleanup.failed(e),
                        None => e,
                    });
                }
            };
        if let Some(cleanup) = cleanup {
            cleanup.disarm();
        }
        let int = |i: usize| match reply.get(i) {
            Some(Value::Int(n)) => *n,
            _ => 0,
        };
        let lapsed = |i: usize| {
            telemetry::handoffs_unclaimed(key, Unclaimed::Lapsed, u64::try_from(int(i)).unwrap_or(0));
        };
        Ok(match int(0) {
            1 => {
                lapsed(2);
                Reply::Acquired {
                    fence: options.fencing.then(|| u64::try_from(int(1)).unwrap_or(0)),
                    sent_at,
                }
            }
            2 => Reply::TickDone { last: int(1), ours: int(2) == 1 },
            _ => {
                lapsed(3);
                // A holder that is not text is not one of this crate's tokens: never taken over.
                let holder = match reply.get(2) {
                    Some(Value::BulkString(b)) => String::from_utf8(b.clone()).ok(),
                    _ => None,
                };
                Reply::Held { remaining: u64::try_from(int(1)).ok().map(Duration::from_millis), holder }
            }
        })
    }

    /// The holder's remaining lease, for the error of a fail-fast caller.
    async fn pttl(&self, key: &str) -> Result<Option<Duration>> {
        let mut cmd = redis::cmd("PTTL");
        cmd.arg(key);
        let pttl: i64 = self.conn.query(&cmd, || format!("reading the lease of lock `{key}`")).await?;
        Ok(u64::try_from(pttl).ok().map(Duration::from_millis))
    }

    /// Takes over `key` if `holder`'s client is dead (its liveness key is gone): releases it
    /// as that holder would have (handing it to the oldest waiter). Returns whether the holder
    /// was dead, so the caller tries again: the key no longer holds its token, whether this
    /// call released it or something else did first (the dead holder's own clean-up, its
    /// expiry, another caller's take-over).
    async fn take_over_if_dead(&self, key: &str, holder: &str) -> Result<bool> {
        if !self.liveness.is_dead(holder).await? {
            return Ok(false);
        }
        if self.releaser.release_token(key, holder).await? {
            tracing::warn!(
                holder,
                "the holder's client is gone (its liveness lease expired); took the lock over"
            );
        }
        Ok(true)
    }

    /// The guard of a lock just acquired; registered with the watchdog if it renews.
    fn guard(
        &self,
        key: &str,
        token: String,
        identity: &Arc<Identity>,
        options: &LockOptions,
        taken: Taken,
    ) -> LockGuard {
        let Taken { fence, sent_at, valid_for } = taken;
        let LeaseOf { lease, watchdog } = self.lease_of(options);
        let state = Arc::new(LockState::new(NewState {
            id: self.next_lock_id.fetch_add(1, Ordering::Relaxed),
            key: key.to_owned(),
            token,
            fence,
            lease,
            at_least: options.at_least,
            sent_at,
            valid_for: valid_for.unwrap_or(lease),
            identity: identity.clone(),
            metrics: self.metrics.of(key),
        }));
        if watchdog {
            self.watchdog.register(state.clone());
        }
        if let Some(fence) = fence {
            tracing::Span::current().record("fence", fence);
        }
        tracing::debug!(?lease, watchdog, "lock acquired");
        LockGuard::new(state, self.releaser.clone())
    }
}

impl Core {
    /// Extends a lock taken by hand-off to its lease (`EXTEND`: only if the key still holds
    /// its token), in the background; a refusal means it was not ours after all: lost.
    fn confirm_hand_off(&self, state: Arc<LockState>) {
        let (conn, watchdog) = (self.conn.clone(), self.watchdog.clone());
        tokio::spawn(async move {
            let Ok(lease) = millis(state.lease, "lease") else { return };
            for attempt in 0..2 {
                let mut invocation = Eval::new(&EXTEND, &[&state.key]);
                invocation.arg(&state.token).arg(lease);
                let sent_at = Instant::now();
                match conn.invoke::<i64>(&invocation, || format!("confirming lock `{}`", state.key)).await {
                    Ok(1) => return state.extend_from(sent_at),
                    Ok(_) => {
                        watchdog.unregister(state.id);
                        state.mark_lost(LossReason::NotOwner);
                        return;
                    }
                    Err(e) if attempt == 0 => {
                        tracing::debug!(key = %state.key, error = %e, "confirming a handed-over lock failed; retrying");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    // The watchdog renews it at its next pass, if that comes in time.
                    Err(e) => {
                        tracing::warn!(key = %state.key, error = %e, "confirming a handed-over lock failed")
                    }
                }
            }
        });
    }
}

/// `"<instance-id>:<client id>:<uuid v4>"`: the owner prefix names the client's liveness key.
/// Built without the formatting machinery (it is on every acquisition's path).
fn new_token(identity: &Identity) -> String {
    let mut buf = uuid::Uuid::encode_buffer();
    let uuid = identity.lock_id().hyphenated().encode_lower(&mut buf);
    let owner = &identity.owner;
    let mut token = String::with_capacity(owner.len() + 1 + uuid.len());
    token.push_str(owner);
    token.push(':');
    token.push_str(uuid);
    token
}

/// `d` scaled by a random factor in [0.75, 1.0), so waiters of different clients spread out.
fn jittered(d: Duration) -> Duration {
    let r = (uuid::Uuid::new_v4().as_u128() % 1000) as u32;
    Duration::try_from_secs_f64(d.as_secs_f64() * (0.75 + f64::from(r) / 4000.0)).unwrap_or(d)
}

/// One waiting acquisition: try (joining the Redis-side queue when refused), make sure the
/// hand-off will be heard, then sleep until it is announced, a fallback retry is due, or the
/// wait bound passes. The token is kept across retries, so a late success of an earlier try
/// is recognised as ours; a wait that ends without the lock cleans its token up.
struct Waiting<'a> {
    core: &'a Core,
    key: &'a str,
    options: &'a LockOptions,
    tick: Option<i64>,
    wait: Duration,
    deadline: Instant,
    identity: Arc<Identity>,
    token: String,
    /// The waiter's ticket in the Redis-side queue; it outlives the longest pause.
    line: Duration,
    /// Registration for the hand-off message, once refused.
    ticket: Option<Ticket>,
    backoff: Duration,
    /// The holder's remaining lease, as last reported.
    remaining: Option<Duration>,
    /// The last transient failure, reported if the bound passes before Redis comes back.
    last_error: Option<LockError>,
    /// When the last try was sent, if any, and on which connection (`None`: tries whose
    /// outcome is unknown went out on another connection than a later one, so no single
    /// connection orders a clean-up after all of them): the token may be in Redis from then on.
    last_sent: Option<(Instant, Option<u64>)>,
    /// The try in flight, if any: the connection it went out on (filled when it is sent) and
    /// when. A wait dropped while its try is out must clean up after it too.
    in_flight: Sent,
    in_flight_at: Instant,
    /// The last try's reply was lost: its outcome is unknown.
    unknown: bool,
    done: bool,
    /// When the try that first put this waiter in the queue was sent: a release that hands
    /// the lock over runs after it.
    queued_since: Option<Instant>,
    /// The last wake-up was a release naming this waiter.
    handed: bool,
}

/// What one try of a waiting acquisition leads to.
enum Step {
    Done(Attempt),
    TryAgain,
    Wait,
}

impl<'a> Waiting<'a> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        core: &'a Core,
        key: &'a str,
        options: &'a LockOptions,
        tick: Option<i64>,
        wait: Duration,
        deadline: Instant,
        identity: Arc<Identity>,
        token: String,
    ) -> Self {
        let (initial, max) = core.config.backoff;
        // Registered before the first try, so a hand-off announced right after it is heard
        // when the channel is already subscribed (another waiter, or a lingering one).
        let ticket = Some(core.waiters.register(key, &token));
        Waiting {
            core,
            key,
            options,
            tick,
            wait,
            deadline,
            identity,
            token,
            line: max.saturating_mul(3).max(Duration::from_secs(1)),
            ticket,
            backoff: initial,
            remaining: None,
            last_error: None,
            last_sent: None,
            in_flight: Sent::default(),
            in_flight_at: Instant::now(),
            unknown: false,
            done: false,
            queued_since: None,
            handed: false,
        }
    }

    async fn run(mut self) -> Result<Attempt> {
        loop {
            match self.try_once().await? {
                Step::Done(attempt) => return Ok(attempt),
                Step::TryAgain if Instant::now() < self.deadline => continue,
                Step::TryAgain => return Err(self.timed_out()),
                Step::Wait => {}
            }
            if self.listen().await? {
                // Newly subscribed: a hand-off may have been announced before.
                continue;
            }
            self.pause().await?;
            if std::mem::take(&mut self.handed)
                && let Some(attempt) = self.accept_hand_off()
            {
                return Ok(attempt);
            }
        }
    }

    /// The release named this waiter: the key holds its token, set by a script that ran after
    /// the try that queued it, with the hand-off time as expiry. So the key lives at least
    /// until that try's send + the hand-off time: the waiter goes ahead at once on that
    /// deadline (no confirming round trip) and extends the key to its lease in the background.
    /// Fenced and tick-claiming waiters confirm with the script instead (it draws the fence,
    /// claims the tick), as do waiters with a minimum hold and one whose deadline would be too
    /// close to be worth it.
    fn accept_hand_off(&mut self) -> Option<Attempt> {
        // A minimum hold counts from the acquisition, which must then be known exactly.
        let confirm_first = self.options.fencing || self.tick.is_some() || self.options.at_least.is_some();
        if confirm_first || self.identity.is_dead() {
            return None;
        }
        let since = self.queued_since?;
        let handoff = self.core.config.handoff;
        let valid_until = since + handoff.saturating_sub(drift(handoff));
        if valid_until < Instant::now() + handoff / 4 {
            return None;
        }
        // Done: the token is the guard's now (the drop clean-up needs it only when not done).
        self.done = true;
        let (key, token, options) = (self.key, std::mem::take(&mut self.token), self.options);
        let taken = Taken { fence: None, sent_at: since, valid_for: Some(handoff) };
        let guard = self.core.guard(key, token, &self.identity, options, taken);
        guard.state().metrics.handoff();
        self.core.confirm_hand_off(guard.state().clone());
        Some(Attempt::Acquired(guard))
    }

    /// One scripted try with a ticket.
    async fn try_once(&mut self) -> Result<Step> {
        let core = self.core;
        if self.identity.is_dead() {
            self.start_afresh().await?;
        }
        self.in_flight = Sent::default();
        let try_sent_at = Instant::now();
        self.in_flight_at = try_sent_at;
        let reply = core
            .script(self.key, &self.token, self.options, self.tick, Some(self.line), &self.in_flight)
            .await;
        self.last_sent = self.sent_so_far();
        self.in_flight = Sent::default();
        self.unknown = reply.as_ref().err().is_some_and(LockError::outcome_unknown);
        match reply {
            Ok(Reply::Acquired { fence, sent_at }) => {
                self.done = true;
                let guard = core.guard(
                    self.key,
                    std::mem::take(&mut self.token),
                    &self.identity,
                    self.options,
                    Taken::by_reply(fence, sent_at),
                );
                if self.queued_since.is_some() {
                    guard.state().metrics.handoff();
                }
                Ok(Step::Done(Attempt::Acquired(guard)))
            }
            // Not `done`: if the key holds our token, the clean-up passes it on.
            Ok(Reply::TickDone { last, .. }) => Ok(Step::Done(Attempt::TickDone(last))),
            Ok(Reply::Held { remaining, holder }) => {
                self.remaining = remaining;
                self.last_error = None;
                self.queued_since.get_or_insert(try_sent_at);
                let Some(holder) = holder else { return Ok(Step::Wait) };
                match core.take_over_if_dead(self.key, &holder).await {
                    Ok(true) => Ok(Step::TryAgain),
                    Ok(false) => Ok(Step::Wait),
                    Err(e) if e.is_transient() => {
                        self.last_error = Some(e);
                        Ok(Step::Wait)
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) if e.is_transient() => {
                tracing::debug!(error = %e, "redis unavailable while waiting; retrying");
                self.remaining = None;
                self.last_error = Some(e);
                Ok(Step::Wait)
            }
            Err(e) => Err(e),
        }
    }

    /// The client's identity died while this waiter waited (a stall or an outage longer than
    /// the liveness TTL): a lock taken with its token would be lost at once, so the token is
    /// given up and the wait goes on with a new one, at the back of the queue.
    async fn start_afresh(&mut self) -> Result<()> {
        self.abandon();
        self.identity = self.core.identity_until(self.deadline).await?;
        self.token = new_token(&self.identity);
        self.ticket = Some(self.core.waiters.register(self.key, &self.token));
        self.queued_since = None;
        Ok(())
    }

    /// Cleans up the current token (queue entry, and the key if it was handed to it or taken
    /// by a try whose reply was lost).
    fn abandon(&mut self) {
        self.last_sent = self.sent_so_far();
        self.in_flight = Sent::default();
        if let Some((sent_at, generation)) = self.last_sent.take() {
            let lease = self.core.lease_of(self.options).lease;
            self.core.releaser.abandon(self.key, &self.token, sent_at, lease, true, generation);
        }
    }

    /// When this waiter's tries went out and on which connection, counting the one in flight:
    /// see `last_sent`.
    fn sent_so_far(&self) -> Option<(Instant, Option<u64>)> {
        let Some(generation) = self.in_flight.generation() else { return self.last_sent };
        let generation = match self.last_sent {
            // An earlier try with an unknown outcome on another connection is not ordered
            // before a clean-up on this one (nor, once so, on any later one).
            Some((_, None)) => None,
            Some((_, Some(earlier))) if self.unknown && earlier != generation => None,
            _ => Some(generation),
        };
        Some((self.in_flight_at, generation))
    }

    /// Registers for the hand-off message and makes sure the channel is subscribed; true if
    /// it had to subscribe just now.
    async fn listen(&mut self) -> Result<bool> {
        if self.ticket.is_none() {
            tracing::debug!(wait = ?self.wait, "lock held; waiting");
        }
        let ticket = self.ticket.get_or_insert_with(|| self.core.waiters.register(self.key, &self.token));
        match tokio::time::timeout_at(self.deadline, ticket.ensure_subscribed()).await {
            Err(_) => Err(self.timed_out()),
            Ok(Ok(subscribed)) => Ok(subscribed),
            Ok(Err(e)) if e.is_transient() => {
                self.last_error = Some(e);
                Ok(false)
            }
            Ok(Err(e)) => Err(e),
        }
    }

    /// Sleeps until the hand-off is announced, the fallback retry is due (jittered backoff,
    /// never later than the holder's remaining lease), or the wait bound passes.
    async fn pause(&mut self) -> Result<()> {
        let (initial, max) = self.core.config.backoff;
        let fallback = jittered(self.backoff).min(self.remaining.unwrap_or(max));
        self.backoff = self.backoff.saturating_mul(2).min(max);
        let Some(ticket) = self.ticket.as_ref() else { return Ok(()) };
        tokio::select! {
            handed = ticket.woken() => {
                self.backoff = initial;
                self.handed = handed;
            }
            () = tokio::time::sleep(fallback) => {}
            () = tokio::time::sleep_until(self.deadline) => return Err(self.timed_out()),
        }
        Ok(())
    }

    fn timed_out(&mut self) -> LockError {
        tracing::debug!(waited = ?self.wait, "timed out waiting for lock");
        self.last_error
            .take()
            .unwrap_or_else(|| LockError::Timeout { key: self.key.to_owned(), waited: self.wait })
    }
}

impl Drop for Waiting<'_> {
    // However the wait ends without the lock (timeout, error, cancellation, a claimed tick),
    // the token leaves the queue and, if a try's reply was lost or the lock was handed over
    // just now, the key: other waiters are not held up until the ticket or lease lapses.
    fn drop(&mut self) {
        if !self.done {
            self.abandon();
        }
    }
}

/// Cleans up an acquisition's token in the background unless disarmed once its reply is in:
/// a future dropped while its command was out, or a reply lost to a timeout or a dropped
/// connection, may still have taken the lock.
struct CleanupOnDrop<'a> {
    releaser: &'a Arc<Releaser>,
    key: &'a str,
    token: &'a str,
    sent_at: Instant,
    lease: Duration,
    sent: &'a Sent,
    armed: bool,
}

impl<'a> CleanupOnDrop<'a> {
    fn new(
        releaser: &'a Arc<Releaser>,
        key: &'a str,
        token: &'a str,
        sent_at: Instant,
        lease: Duration,
        sent: &'a Sent,
    ) -> Self {
        CleanupOnDrop { releaser, key, token, sent_at, lease, sent, armed: true }
    }

    fn disarm(mut self) {
        self.armed = false;
    }

    /// The command failed with `e`: clean up only if the outcome is unknown (a server's
    /// error reply means the command did nothing).
    fn failed(mut self, e: LockError) -> LockError {
        self.armed = e.outcome_unknown();
        e
    }
}

impl Drop for CleanupOnDrop<'_> {
    fn drop(&mut self) {
        // Never sent (no connection): nothing can have happened.
        if self.armed && self.sent.generation().is_some() {
            let generation = self.sent.generation();
            self.releaser.abandon(self.key, self.token, self.sent_at, self.lease, false, generation);
        }
    }
}
