//! The election's metrics (through the `metrics` facade, like the lock's; the `election`
//! label is the name under the process's [`KeyLabel`](crate::telemetry::KeyLabel)).
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `lock_election_leader_changes_total` | counter | `election` | times this process became leader |
//! | `lock_election_is_leader` | gauge | `election` | 1 while this process leads, else 0 |
//! | `lock_election_term` | gauge | `election` | the term of this process's latest leadership |
//! | `lock_election_leaderless_seconds` | histogram | `election` | on becoming leader: how long this member saw no leader before (since the last leader stepped down, was lost or was seen gone) |
//! | `lock_election_losses_total` | counter | `election` | leaderships lost without stepping down (renewal refused, deadline passed) |

use std::time::Duration;

use crate::telemetry::key_label;

/// The metrics of one election in this process.
#[derive(Debug, Clone)]
pub(crate) struct ElectionMetrics {
    label: String,
}

impl ElectionMetrics {
    pub(crate) fn new(name: &str) -> Self {
        ElectionMetrics { label: key_label(name) }
    }

    pub(crate) fn elected(&self, term: u64, leaderless: Option<Duration>) {
        let label = self.label.clone();
        metrics::counter!("lock_election_leader_changes_total", "election" => label.clone()).increment(1);
        metrics::gauge!("lock_election_is_leader", "election" => label.clone()).set(1.0);
        // Terms are µs since the epoch (about 2^51 now): exact in an f64.
        metrics::gauge!("lock_election_term", "election" => label.clone()).set(term as f64);
        if let Some(gap) = leaderless {
            metrics::histogram!("lock_election_leaderless_seconds", "election" => label)
                .record(gap.as_secs_f64());
        }
    }

    pub(crate) fn stepped_down(&self, lost: bool) {
        let label = self.label.clone();
        metrics::gauge!("lock_election_is_leader", "election" => label.clone()).set(0.0);
        if lost {
            metrics::counter!("lock_election_losses_total", "election" => label).increment(1);
        }
    }
}
