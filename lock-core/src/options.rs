//! Per-acquisition options: lease, wait bound, minimum hold and fencing.

use std::time::Duration;

use crate::error::{LockError, Result};

/// The shortest lease accepted. Below this the clock-drift allowance (1% + 2 ms) would leave
/// the holder almost no time in which it knows it owns the lock.
pub const MIN_LEASE: Duration = Duration::from_millis(10);

/// How long a lock lives in Redis without its holder doing anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Lease {
    /// Use the client's watchdog lease (30 s by default) and renew it every third of that
    /// while the guard lives. A crashed holder's lock is taken over after about one liveness TTL
    /// (its client's liveness lease), or at the latest when the lease runs out.
    #[default]
    Watchdog,
    /// Expire exactly this long after acquisition; never renewed.
    Fixed(Duration),
}

/// What a locked call does with its body when the lock is lost while the body runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnLost {
    /// Drop the body at its next await and return [`LockError::Lost`]: the body never keeps
    /// running once this process knows another may hold the lock. The default.
    #[default]
    Cancel,
    /// Let the body finish and log the loss. For bodies that must not stop half-way; pair it
    /// with fencing so the store rejects writes made after the loss.
    Continue,
}

/// Options for one acquisition. Start from [`LockOptions::new`] (fail fast, watchdog lease,
/// no minimum hold, no fencing) and chain the setters.
///
/// ```
/// use std::time::Duration;
/// use lock_core::LockOptions;
///
/// let options = LockOptions::new()
///     .wait(Duration::from_secs(2))
///     .lease(Duration::from_secs(10))
///     .fencing(true);
/// assert_eq!(options.wait, Some(Duration::from_secs(2)));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockOptions {
    /// Fixed lease or watchdog.
    pub lease: Lease,
    /// How long [`LockClient::acquire`](crate::LockClient::acquire) waits for a held lock; `None`
    /// fails fast with [`LockError::Held`].
    pub wait: Option<Duration>,
    /// Minimum time the lock stays taken after acquisition, even if released earlier
    /// (ShedLock's `lockAtLeastFor`): releasing before it shortens the key's expiry to what is
    /// left of it instead of deleting the key.
    pub at_least: Option<Duration>,
    /// Whether to draw a fencing token (a per-key counter that strictly increases with every
    /// acquisition) for stores that reject stale writers.
    pub fencing: bool,
    /// What a locked section ([`LockClient::with_lock`](crate::LockClient::with_lock), an
    /// annotated fn, a scheduler run) does when the lock is lost while its body runs. A bare
    /// [`LockGuard`](crate::LockGuard) only reports the loss (see its `lost()`).
    pub on_lost: OnLost,
}

impl LockOptions {
    /// Fail fast, watchdog lease, no minimum hold, no fencing.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fixed lease: the lock expires this long after acquisition and is never renewed.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Lease::Fixed(lease);
        self
    }

    /// The watchdog lease (the default): renewed in the background while the guard lives.
    pub fn watchdog(mut self) -> Self {
        self.lease = Lease::Watchdog;
        self
    }

    /// Wait up to `wait` for a held lock instead of failing fast.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Keep the lock taken for at least `at_least` after acquisition.
    pub fn at_least(mut self, at_least: Duration) -> Self {
        self.at_least = Some(at_least);
        self
    }

    /// Draw a fencing token on acquisition.
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.fencing = fencing;
        self
    }

    /// What a locked section does with its body when the lock is lost (default: cancel it).
    pub fn on_lost(mut self, on_lost: OnLost) -> Self {
        self.on_lost = on_lost;
        self
    }

    /// Checks the options as an acquisition would (lease at least [`MIN_LEASE`], `at_least` no
    /// longer than a fixed lease), so configuration can be rejected before it is used.
    pub fn validate(&self) -> Result<()> {
        if let Lease::Fixed(lease) = self.lease {
            validate_lease(lease, "lease")?;
            if let Some(at_least) = self.at_least
                && at_least > lease
            {
                return Err(LockError::InvalidOptions(format!(
                    "at_least ({at_least:?}) is longer than the fixed lease ({lease:?}): the lock \
                     would expire before the minimum hold; lengthen the lease or use the watchdog"
                )));
            }
        }
        if let Some(at_least) = self.at_least {
            millis(at_least, "at_least")?;
        }
        Ok(())
    }
}

/// A client's settings, validated by the builder.
#[derive(Debug, Clone)]
pub(crate) struct ClientConfig {
    pub(crate) instance_id: String,
    pub(crate) watchdog_lease: Duration,
    /// TTL of the client's liveness key.
    pub(crate) liveness_ttl: Duration,
    /// How long a released lock stays reserved for the waiter it was handed to.
    pub(crate) handoff: Duration,
    /// Initial and longest fallback retry interval of a waiter.
    pub(crate) backoff: (Duration, Duration),
    /// `WAIT` after acquisitions (and releases), if opted in.
    pub(crate) replica_ack: Option<crate::replica_ack::ReplicaAck>,
}

/// Checks that a lease is usable: at least [`MIN_LEASE`] and representable in milliseconds.
pub(crate) fn validate_lease(lease: Duration, what: &str) -> Result<()> {
    if lease < MIN_LEASE {
        return Err(LockError::InvalidOptions(format!(
            "{what} must be at least {MIN_LEASE:?}, got {lease:?}"
        )));
    }
    millis(lease, what).map(drop)
}

/// A duration as the whole milliseconds Redis takes, rounded up so a lease is never shorter
/// than asked.
pub(crate) fn millis(d: Duration, what: &str) -> Result<u64> {
    let ms = d.as_nanos().div_ceil(1_000_000);
    // Redis keeps expiry times as signed 64-bit milliseconds since the epoch.
    const LIMIT: u128 = (i64::MAX / 2) as u128;
    if ms > LIMIT {
        return Err(LockError::InvalidOptions(format!("{what} {d:?} is too long for Redis")));
    }
    Ok(ms as u64)
}

/// When a periodic renewal task (watchdog, liveness) runs next: at a fixed rate after a pass
/// that succeeded (a slow pass does not push the next one back), soon after one that failed,
/// and never in the past (after a stall it starts again from now instead of catching up).
pub(crate) fn next_pass(
    scheduled: tokio::time::Instant,
    interval: Duration,
    ok: bool,
    retry_after_error: Duration,
) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    let next = if ok { scheduled + interval } else { now + interval.min(retry_after_error) };
    next.max(now)
}

/// The time a holder subtracts from its lease for clock drift between it and Redis
/// (Redlock's allowance: 1% + 2 ms).
pub(crate) fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_zero_and_tiny_leases() {
        let err = LockOptions::new().lease(Duration::ZERO).validate().unwrap_err();
        assert!(err.to_string().contains("at least 10ms"), "{err}");
        assert!(LockOptions::new().lease(MIN_LEASE).validate().is_ok());
    }

    #[test]
    fn rejects_at_least_beyond_fixed_lease() {
        let err = LockOptions::new()
            .lease(Duration::from_secs(1))
            .at_least(Duration::from_secs(2))
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("at_least"), "{err}");
        assert!(
            LockOptions::new().at_least(Duration::from_secs(60)).validate().is_ok(),
            "a watchdog lock can be held for any minimum"
        );
    }

    #[test]
    fn drift_leaves_a_margin_before_every_lease_ends() {
        assert_eq!(drift(Duration::from_secs(1)), Duration::from_millis(12));
        assert_eq!(drift(Duration::from_secs(30)), Duration::from_millis(302));
        for lease in
            [MIN_LEASE, Duration::from_millis(100), Duration::from_secs(30), Duration::from_secs(86_400)]
        {
            let trusted = lease.saturating_sub(drift(lease));
            assert!(trusted < lease && !trusted.is_zero(), "{lease:?}: trusted for {trusted:?}");
        }
    }

    #[test]
    fn millis_round_up() {
        assert_eq!(millis(Duration::from_micros(1500), "x").unwrap(), 2);
        assert_eq!(millis(Duration::from_secs(3), "x").unwrap(), 3000);
    }
}
