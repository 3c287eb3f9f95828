//! Metrics through the [`metrics`](https://docs.rs/metrics) facade. lock-core records; the
//! application chooses an exporter (Prometheus, StatsD, ...) by installing a recorder. Without
//! one, recording costs a few atomic loads.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `lock_acquisitions_total` | counter | `key`, `outcome` = `acquired` \| `held` \| `timeout` \| `error` | acquisitions (re-entrant ones not counted) |
//! | `lock_wait_seconds` | histogram | `key`, `outcome` | time from the call to its outcome |
//! | `lock_hold_seconds` | histogram | `key` | from acquisition to release |
//! | `lock_handoffs_total` | counter | `key` | locks a waiting caller got (handed over by a release, or free when it retried) |
//! | `lock_renewals_total` | counter | | lock-key renewals the watchdog sent |
//! | `lock_renewal_failures_total` | counter | | renewal batches that failed (Redis unreachable, timeout) |
//! | `lock_losses_total` | counter | `key`, `reason` = `expired` \| `not_owner` | held locks lost |
//!
//! The `key` label is the lock key with every `:`-separated segment that contains a digit
//! replaced by `*` (`lock:product:42` → `lock:product:*`), so per-resource keys do not create
//! one time series per resource; see [`set_key_label`] for other choices.

use std::sync::RwLock;
use std::time::Duration;

use crate::{read_unpoisoned, write_unpoisoned};

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
    /// The application's own mapping (e.g. to a fixed set of resource kinds).
    Custom(fn(&str) -> String),
}

static KEY_LABEL: RwLock<KeyLabel> = RwLock::new(KeyLabel::Pattern);

/// Chooses how lock keys become the `key` label of every metric recorded afterwards, process
/// wide.
pub fn set_key_label(label: KeyLabel) {
    *write_unpoisoned(&KEY_LABEL) = label;
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
    // On every acquisition and release: one allocation, none of the iterator adapters'.
    if !key.bytes().any(|b| b.is_ascii_digit()) {
        return key.to_owned();
    }
    let mut label = String::with_capacity(key.len());
    for (i, segment) in key.split(':').enumerate() {
        if i > 0 {
            label.push(':');
        }
        label.push_str(if segment.bytes().any(|b| b.is_ascii_digit()) { "*" } else { segment });
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

pub(crate) fn acquisition(key: &str, outcome: Acquisition, waited: Duration) {
    let key = key_label(key);
    let outcome = outcome.label();
    metrics::counter!("lock_acquisitions_total", "key" => key.clone(), "outcome" => outcome).increment(1);
    metrics::histogram!("lock_wait_seconds", "key" => key, "outcome" => outcome).record(waited.as_secs_f64());
}

pub(crate) fn handoff(key: &str) {
    metrics::counter!("lock_handoffs_total", "key" => key_label(key)).increment(1);
}

pub(crate) fn held(key: &str, held_for: Duration) {
    metrics::histogram!("lock_hold_seconds", "key" => key_label(key)).record(held_for.as_secs_f64());
}

pub(crate) fn renewals(sent: usize) {
    metrics::counter!("lock_renewals_total").increment(sent as u64);
}

pub(crate) fn renewal_failure() {
    metrics::counter!("lock_renewal_failures_total").increment(1);
}

pub(crate) fn lost(key: &str, reason: crate::LossReason) {
    let reason = match reason {
        crate::LossReason::Expired => "expired",
        crate::LossReason::NotOwner => "not_owner",
    };
    metrics::counter!("lock_losses_total", "key" => key_label(key), "reason" => reason).increment(1);
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
