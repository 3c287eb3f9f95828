//! [`Core`]: what every clone of a `LockClient` shares, wired together, and the entry of every
//! acquisition (validation, re-entrancy, the span, metrics, the guard of a lock just taken).
//!
//! The acquisition paths are its children: `fail_fast` (one plain `SET NX` or the scripted try),
//! `waiting` (a bounded wait in the queue of waiters) and `claims` (many ticks claimed at once);
//! `cleanup` gives up the token of a command whose outcome is unknown (through the releaser),
//! `replica_ack` waits for replicas, and `section` runs a body under a lock it takes.

pub(crate) mod claims;
pub(crate) mod cleanup;
pub(crate) mod fail_fast;
mod replica_ack;
pub(crate) mod section;
pub(crate) mod waiting;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::conn::Conn;
use crate::conn::wake_ups::WakeUps;
use crate::error::{LockError, Result};
use crate::held::guard::LockGuard;
use crate::held::holdings::Holdings;
use crate::held::liveness::{Identity, Liveness};
use crate::held::release::Releaser;
use crate::held::scope;
use crate::held::state::{LockState, NewState};
use crate::held::unsettled::Unsettled;
use crate::held::watchdog::Watchdog;
use crate::options::{ClientConfig, Lease, LockOptions};
use crate::schema;
use crate::schema::hold::Hold;
use crate::telemetry::{Acquisition, MetricsCache};

/// What every clone of a client shares: configuration, the connection, the liveness lease,
/// the watchdog, the waiting machinery and the releaser.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) config: ClientConfig,
    pub(crate) conn: Arc<Conn>,
    pub(crate) liveness: Liveness,
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) waiters: WakeUps,
    pub(crate) releaser: Arc<Releaser>,
    /// The record of what this client holds, for operators' tools.
    pub(crate) holdings: Holdings,
    /// The metrics of the keys this client locks.
    pub(crate) metrics: MetricsCache,
    next_lock_id: AtomicU64,
}

/// What is being taken: a key and the kind of hold on it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) key: &'a str,
    pub(crate) hold: Hold,
}

impl<'a> Target<'a> {
    /// The lock `key`.
    pub(crate) fn lock(key: &'a str) -> Self {
        Target { key, hold: Hold::Lock }
    }
}

/// Outcome of an acquisition.
pub(crate) enum Attempt {
    Acquired(LockGuard),
    Held(Option<Duration>),
    /// The scheduler tick was already claimed; carries the last claimed tick.
    TickDone(i64),
}

/// How a lock was taken: its fence, and when the command that took it (for its lease) was sent.
pub(crate) struct Taken {
    pub(crate) fence: Option<u64>,
    pub(crate) sent_at: Instant,
    /// Earlier tries of the token that may still run (a waiter's, whose replies were lost).
    pub(crate) unsettled: Option<Unsettled>,
}

impl Taken {
    /// Taken by a command whose reply said so: the key lives a lease from its send.
    pub(crate) fn by_reply(fence: Option<u64>, sent_at: Instant) -> Self {
        Taken { fence, sent_at, unsettled: None }
    }
}

/// Checks what an acquisition is given: the key, the options and the tick to claim, if any.
pub(crate) fn check_input(key: &str, options: &LockOptions, tick: Option<i64>) -> Result<()> {
    schema::validate_key(key)?;
    options.validate()?;
    // Lua compares ticks as doubles: exact up to 2^53 (epoch ms reach that in year 287,396).
    if let Some(tick) = tick
        && tick.unsigned_abs() > 1 << 53
    {
        return Err(LockError::InvalidOptions(format!("tick {tick} is out of range (at most ±2^53 ms)")));
    }
    Ok(())
}

/// The lease a lock is taken with, and whether the watchdog renews it.
#[derive(Clone, Copy)]
pub(crate) struct LeaseOf {
    pub(crate) lease: Duration,
    pub(crate) watchdog: bool,
}

impl Core {
    /// Wires the parts together.
    pub(crate) fn new(config: ClientConfig, conn: Arc<Conn>, waiters: WakeUps) -> Self {
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
        let holdings = Holdings::new(conn.clone());
        Core {
            config,
            holdings,
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

    pub(crate) fn instance_id(&self) -> &str {
        &self.config.instance_id
    }

    pub(crate) fn lease_of(&self, options: &LockOptions) -> LeaseOf {
        match options.lease {
            Lease::Fixed(lease) => LeaseOf { lease, watchdog: false },
            Lease::Watchdog => LeaseOf { lease: self.config.watchdog_lease, watchdog: true },
        }
    }

    /// Takes `target` without a tick: contention is [`LockError::Held`].
    pub(crate) async fn take(&self, target: Target<'_>, options: LockOptions) -> Result<LockGuard> {
        match self.hold_for(target, options, None).await? {
            Attempt::Acquired(guard) => Ok(guard),
            Attempt::Held(remaining) => Err(LockError::Held { key: target.key.to_owned(), remaining }),
            // Only reported when a tick is passed.
            Attempt::TickDone(tick) => Err(LockError::TickClaimed { key: target.key.to_owned(), tick }),
        }
    }

    /// Takes `target` (a lock, a permit, a read or write hold), optionally claiming a
    /// scheduler tick with a lock; contention is an [`Attempt`] rather than an error.
    pub(crate) async fn hold_for(
        &self,
        target: Target<'_>,
        options: LockOptions,
        tick: Option<i64>,
    ) -> Result<Attempt> {
        let key = target.key;
        check_input(key, &options, tick)?;
        if let Some(nested) = self.nested(target)? {
            return Ok(Attempt::Acquired(nested));
        }
        let span = tracing::info_span!(
            "lock_acquire",
            key,
            kind = target.hold.label(),
            instance = %self.instance_id(),
            fence = tracing::field::Empty,
        );
        let started = Instant::now();
        let attempt = async {
            match self.acquire(target, options, tick, started).await {
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
            _ => self.metrics.of(key, target.hold).acquisition(outcome, waited),
        }
        attempt
    }

    /// A nested guard, if the current task's locked sections already hold `target`: the same
    /// lock, or a read-write lock held for writing (any hold inside) or for reading (a read
    /// inside). A write inside a read section could only deadlock: refused at once. Permits
    /// never nest: each acquisition takes another one.
    fn nested(&self, target: Target<'_>) -> Result<Option<LockGuard>> {
        if matches!(target.hold, Hold::Permit { .. }) {
            return Ok(None);
        }
        let Some(state) = scope::find(self.scope_id(), target.key) else { return Ok(None) };
        match (state.hold, target.hold) {
            (Hold::Lock, Hold::Lock) | (Hold::Write, Hold::Read | Hold::Write) | (Hold::Read, Hold::Read) => {
            }
            (Hold::Read, Hold::Write) => {
                return Err(LockError::WriteInsideRead { key: target.key.to_owned() });
            }
            // Another primitive of the same name: not this one's section.
            _ => return Ok(None),
        }
        if let Some(reason) = state.loss() {
            return Err(LockError::Lost { key: target.key.to_owned(), reason });
        }
        tracing::trace!(key = target.key, instance = %self.instance_id(), "re-entrant acquisition");
        Ok(Some(LockGuard::nested(state, self.releaser.clone())))
    }

    /// [`hold_for`](Self::hold_for) past the re-entrancy check, inside the acquire span;
    /// `started` is when the call began.
    async fn acquire(
        &self,
        target: Target<'_>,
        options: LockOptions,
        tick: Option<i64>,
        started: Instant,
    ) -> Result<Attempt> {
        let attempt = self.acquire_with(target, &options, tick, started).await?;
        // The identity died while the try was under way: the connection was re-established
        // to a Redis that had forgotten its liveness key (a restart without persistence), and
        // the check on reconnecting killed it before this try went out on the new link. The
        // lock is ours in Redis but under a token others take for a dead client's, so the
        // guard is lost from birth: give it back and try once more with the new identity. A
        // tick is not retried: the first try claimed it, and a second would be refused as done.
        let guard = match attempt {
            Attempt::Acquired(guard) if tick.is_none() && guard.state().identity_is_dead() => guard,
            attempt => return Ok(attempt),
        };
        tracing::debug!(
            key = target.key,
            "the client's identity died while the lock was being taken (Redis forgot its liveness key); trying again with the new identity"
        );
        if let Err(e) = guard.release().await {
            // The retry takes the stale token over (its liveness key is gone) if it is still there.
            tracing::debug!(key = target.key, error = %crate::error::ErrorChain(&e), "giving back a lock taken with a dead identity failed");
        }
        let mut options = options;
        options.wait = options.wait.map(|wait| wait.saturating_sub(started.elapsed()));
        self.acquire_with(target, &options, tick, Instant::now()).await
    }

    /// One acquisition as `options` say (fail fast or waiting).
    async fn acquire_with(
        &self,
        target: Target<'_>,
        options: &LockOptions,
        tick: Option<i64>,
        started: Instant,
    ) -> Result<Attempt> {
        match options.wait {
            None => {
                let identity = self.liveness.identity(started).await?;
                let token = self.new_token(&identity);
                self.fail_fast(target, token, &identity, options, tick, started).await
            }
            // Boxed: the waiting machinery is large and off the fail-fast path; inline, it
            // would make every `try_lock` future several kilobytes to move around.
            Some(wait) => Box::pin(self.wait_for(target, options, tick, wait)).await,
        }
    }

    /// The guard of a lock just acquired; registered with the watchdog if it renews.
    pub(crate) fn guard(
        &self,
        target: Target<'_>,
        token: String,
        identity: &Arc<Identity>,
        options: &LockOptions,
        taken: Taken,
    ) -> LockGuard {
        let Taken { fence, sent_at, unsettled } = taken;
        let LeaseOf { lease, watchdog } = self.lease_of(options);
        let key = target.key;
        let state = Arc::new(LockState::new(NewState {
            id: self.next_lock_id.fetch_add(1, Ordering::Relaxed),
            key: key.to_owned(),
            hold: target.hold,
            token,
            fence,
            lease,
            at_least: options.at_least,
            sent_at,
            valid_for: lease,
            unsettled,
            identity: identity.clone(),
            metrics: self.metrics.of(key, target.hold),
        }));
        if watchdog {
            self.watchdog.register(state.clone());
        }
        self.holdings.register(state.clone());
        if let Some(fence) = fence {
            tracing::Span::current().record("fence", fence);
        }
        tracing::debug!(?lease, watchdog, "lock acquired");
        LockGuard::new(state, self.releaser.clone())
    }

    /// A fresh owner token of `identity` (see `schema::new_token`).
    pub(crate) fn new_token(&self, identity: &Identity) -> String {
        schema::new_token(&identity.owner, identity.lock_id())
    }
}
