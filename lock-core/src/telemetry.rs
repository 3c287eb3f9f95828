//! Metrics through the [`metrics`](https://docs.rs/metrics) facade. lock-core records; the
//! application chooses an exporter (Prometheus, StatsD, ...) by installing a recorder. A
//! client registers the metrics of a key once and reuses them, so an
//! acquisition and its release record through handles rather than by name and labels.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `lock_acquisitions_total` | counter | `key`, `kind`, `outcome` = `acquired` \| `held` \| `timeout` \| `error` | acquisitions (re-entrant ones not counted) |
//! | `lock_wait_seconds` | histogram | `key`, `kind`, `outcome` | time from the call to its outcome |
//! | `lock_hold_seconds` | histogram | `key`, `kind` | from acquisition to release |
//! | `lock_handoffs_total` | counter | `key`, `kind` | locks a waiting caller got (handed over by a release, or free when it retried) |
//! | `lock_handoffs_unclaimed_total` | counter | `key`, `kind`, `reason` = `waiter_left` \| `lapsed` | hand-offs that reached nobody |
//! | `lock_renewals_total` | counter | | lock-key renewals the watchdog sent |
//! | `lock_renewal_failures_total` | counter | | renewal batches that failed (Redis unreachable, timeout) |
//! | `lock_losses_total` | counter | `key`, `kind`, `reason` = `expired` \| `not_owner` | held locks lost |
//! | `lock_redis_requests_total` | counter | | requests sent to Redis: a command or a pipeline (round trips, pipelined or not; subscriptions not counted) |
//! | `lock_redis_eviction_risk` | gauge | | 1 if the last connection found a master that may evict keys with a TTL (see [`EvictionCheck`](crate::EvictionCheck)), else 0 |
//!
//! `kind` is `lock`, `semaphore`, `read` or `write`.
//!
//! The `key` label is the lock key with every `:`-separated segment that contains a digit
//! replaced by `*` (`lock:product:42` → `lock:product:*`), so per-resource keys do not create
//! one time series per resource; see [`set_key_label`] for other choices.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use metrics::{Counter, Histogram, SharedString};

use crate::schema::hold::Hold;
use crate::sync::{read_unpoisoned, write_unpoisoned};

/// How lock keys become the `key` label of lock-core's metrics.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub enum KeyLabel {
    /// Segments (between `:`) that contain a digit become `*`: `lock:product:42` →
    /// `lock:product:*`, `lock:daily-report` unchanged. The default.
    #[default]
    Pattern,
    /// The full key. Only for a bounded set of keys.
    Full,
    /// No key label at all (the label is `*`).
    Omitted,
    /// The application's own mapping (e.g. to a fixed set of resource kinds). It should
    /// depend on the key alone: a client computes a key's label once and reuses it.
    Custom(fn(&str) -> String),
}

static KEY_LABEL: RwLock<KeyLabel> = RwLock::new(KeyLabel::Pattern);

/// Bumped by [`set_key_label`], so clients drop labels computed under the previous choice.
static KEY_LABEL_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Chooses how lock keys become the `key` label of every metric recorded afterwards, process
/// wide.
pub fn set_key_label(label: KeyLabel) {
    *write_unpoisoned(&KEY_LABEL) = label;
    KEY_LABEL_GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// The `key` label recorded for `key` under the current [`KeyLabel`].
pub fn key_label(key: &str) -> String {
    match *read_unpoisoned(&KEY_LABEL) {
        KeyLabel::Pattern => key_pattern(key),
        KeyLabel::Full => key.to_owned(),
        KeyLabel::Omitted => "*".to_owned(),
        KeyLabel::Custom(f) => f(key),
    }
}

/// `key` with each `:`-separated segment that contains an ASCII digit replaced by `*`.
pub fn key_pattern(key: &str) -> String {
    let has_digit = |s: &str| s.bytes().any(|b| b.is_ascii_digit());
    if !has_digit(key) {
        return key.to_owned();
    }
    let mut label = String::with_capacity(key.len());
    for (i, segment) in key.split(':').enumerate() {
        if i > 0 {
            label.push(':');
        }
        label.push_str(if has_digit(segment) { "*" } else { segment });
    }
    label
}

/// How an acquisition ended, as the `outcome` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquisition {
    Acquired,
    Held,
    Timeout,
    Error,
}

impl Acquisition {
    fn label(self) -> &'static str {
        match self {
            Acquisition::Acquired => "acquired",
            Acquisition::Held => "held",
            Acquisition::Timeout => "timeout",
            Acquisition::Error => "error",
        }
    }
}

/// The metrics of one lock key: its label, and the handles of what every acquisition and
/// release records, registered once.
#[derive(Debug)]
pub(crate) struct KeyMetrics {
    label: SharedString,
    /// `lock`, `semaphore`, `read` or `write`.
    kind: &'static str,
    acquired: Counter,
    acquired_wait: Histogram,
    hold: Histogram,
    /// Not a metric but a hint kept with them, per key and client: this client's last release
    /// of the key found callers queued. Its next release then sends the full release script at
    /// once instead of trying the one-key one first (which would reply "hand over" and cost a
    /// round trip). Only speed depends on it: both scripts check the token.
    queued_last: AtomicBool,
}

impl KeyMetrics {
    fn register(key: &str, kind: &'static str) -> Self {
        let label = SharedString::from_shared(Arc::<str>::from(key_label(key)));
        KeyMetrics {
            acquired: metrics::counter!("lock_acquisitions_total", "key" => label.clone(), "kind" => kind, "outcome" => "acquired"),
            acquired_wait: metrics::histogram!("lock_wait_seconds", "key" => label.clone(), "kind" => kind, "outcome" => "acquired"),
            hold: metrics::histogram!("lock_hold_seconds", "key" => label.clone(), "kind" => kind),
            label,
            kind,
            queued_last: AtomicBool::new(false),
        }
    }

    /// Whether this client's last release of the key found callers queued.
    pub(crate) fn queued_last(&self) -> bool {
        self.queued_last.load(Ordering::Relaxed)
    }

    /// Records whether a release of the key found callers queued.
    pub(crate) fn set_queued_last(&self, queued: bool) {
        self.queued_last.store(queued, Ordering::Relaxed);
    }

    /// An acquisition that ended with `outcome` after `waited`.
    pub(crate) fn acquisition(&self, outcome: Acquisition, waited: Duration) {
        if outcome == Acquisition::Acquired {
            self.acquired.increment(1);
            self.acquired_wait.record(waited.as_secs_f64());
            return;
        }
        let (key, kind, outcome) = (self.label.clone(), self.kind, outcome.label());
        metrics::counter!("lock_acquisitions_total", "key" => key.clone(), "kind" => kind, "outcome" => outcome)
            .increment(1);
        metrics::histogram!("lock_wait_seconds", "key" => key, "kind" => kind, "outcome" => outcome)
            .record(waited.as_secs_f64());
    }

    /// A lock released after being held for `held_for`.
    pub(crate) fn held(&self, held_for: Duration) {
        self.hold.record(held_for.as_secs_f64());
    }

    /// A lock a waiting caller got.
    pub(crate) fn handoff(&self) {
        metrics::counter!("lock_handoffs_total", "key" => self.label.clone(), "kind" => self.kind)
            .increment(1);
    }

    /// A held lock lost.
    pub(crate) fn lost(&self, reason: crate::error::LossReason) {
        let reason = match reason {
            crate::error::LossReason::Expired => "expired",
            crate::error::LossReason::NotOwner => "not_owner",
            crate::error::LossReason::Revoked => "revoked",
        };
        metrics::counter!("lock_losses_total", "key" => self.label.clone(), "kind" => self.kind, "reason" => reason)
            .increment(1);
    }
}

/// Keys whose metrics a client keeps registered; past it the cache starts over (per-resource
/// keys come and go).
const CACHED_KEYS: usize = 1024;

/// A client's [`KeyMetrics`] by lock key. Registering a metric by name and labels costs more
/// than the rest of an uncontended acquisition (the label, hashing, allocations), so it is
/// done once per key, as the `metrics` crate recommends for hot paths. Handles belong to the
/// recorder they were registered with: the cache starts over when the current recorder (by
/// address) or the [`KeyLabel`] choice changes.
#[derive(Debug, Default)]
pub(crate) struct MetricsCache {
    inner: RwLock<Cached>,
}

#[derive(Debug, Default)]
struct Cached {
    recorder: usize,
    generation: u64,
    by_key: HashMap<Box<str>, Arc<KeyMetrics>>,
}

impl Cached {
    fn current(&self, recorder: usize, generation: u64) -> bool {
        self.recorder == recorder && self.generation == generation
    }
}

impl MetricsCache {
    /// The metrics of `key` held as `hold`, registered on first use.
    pub(crate) fn of(&self, key: &str, hold: Hold) -> Arc<KeyMetrics> {
        // Locks look their key up as it is (no allocation on the hot path); the other kinds
        // under `<kind>\0<key>`, which no lock key can be (no control characters).
        match hold {
            Hold::Lock => self.cached(key, "lock"),
            other => self.cached(&format!("{}\0{key}", other.label()), other.label()),
        }
    }

    fn cached(&self, key: &str, kind: &'static str) -> Arc<KeyMetrics> {
        let recorder = metrics::with_recorder(|r| std::ptr::from_ref(r).cast::<()>() as usize);
        let generation = KEY_LABEL_GENERATION.load(Ordering::Acquire);
        // Read-locked on the common path: acquisitions on several threads do not queue here.
        {
            let cached = read_unpoisoned(&self.inner);
            if cached.current(recorder, generation)
                && let Some(metrics) = cached.by_key.get(key)
            {
                return metrics.clone();
            }
        }
        let mut cached = write_unpoisoned(&self.inner);
        if !cached.current(recorder, generation) {
            *cached = Cached { recorder, generation, by_key: HashMap::new() };
        }
        if let Some(metrics) = cached.by_key.get(key) {
            return metrics.clone();
        }
        if cached.by_key.len() >= CACHED_KEYS {
            cached.by_key.clear();
        }
        let metrics = Arc::new(KeyMetrics::register(key.rsplit('\0').next().unwrap_or(key), kind));
        cached.by_key.insert(key.into(), metrics.clone());
        metrics
    }
}

/// Why a hand-off reached nobody (`lock_handoffs_unclaimed_total`'s `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unclaimed {
    /// The waiter had given up: its clean-up passed the reservation on at once.
    WaiterLeft,
    /// The reservation ran out untaken (its waiter's process died or stalled past the
    /// hand-off time); noticed by the next script that looked at the queue.
    Lapsed,
}

/// Hand-offs of `key` (held as `kind`) that reached nobody: `n` of them, for `reason`. Rare, so
/// not cached.
pub(crate) fn handoffs_unclaimed(key: &str, kind: &'static str, reason: Unclaimed, n: u64) {
    if n == 0 {
        return;
    }
    let reason = match reason {
        Unclaimed::WaiterLeft => "waiter_left",
        Unclaimed::Lapsed => "lapsed",
    };
    metrics::counter!("lock_handoffs_unclaimed_total", "key" => key_label(key), "kind" => kind, "reason" => reason)
        .increment(n);
}

/// One request (a command or a pipeline) about to be sent to Redis.
pub(crate) fn request_sent() {
    metrics::counter!("lock_redis_requests_total").increment(1);
}

pub(crate) fn renewals(sent: usize) {
    metrics::counter!("lock_renewals_total").increment(sent as u64);
}

pub(crate) fn renewal_failure() {
    metrics::counter!("lock_renewal_failures_total").increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_bound_cardinality() {
        assert_eq!(key_pattern("lock:product:42"), "lock:product:*");
        assert_eq!(key_pattern("lock:daily-report"), "lock:daily-report");
        assert_eq!(key_pattern("lock:{order}:7:line:3"), "lock:{order}:*:line:*");
    }
}
