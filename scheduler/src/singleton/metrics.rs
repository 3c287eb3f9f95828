//! The singletons' metrics.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `scheduler_singleton_starts_total` | counter | `singleton` | bodies started on this replica |
//! | `scheduler_singleton_running` | gauge | `singleton` | 1 while the body runs on this replica |
//! | `scheduler_singleton_stops_total` | counter | `singleton`, `reason` = `returned` \| `failed` \| `lost` \| `shutdown` | bodies that ended on this replica, and why |

pub(crate) fn started(name: &str) {
    metrics::counter!("scheduler_singleton_starts_total", "singleton" => name.to_owned()).increment(1);
    metrics::gauge!("scheduler_singleton_running", "singleton" => name.to_owned()).set(1.0);
}

pub(crate) fn stopped(name: &str, reason: &'static str) {
    metrics::gauge!("scheduler_singleton_running", "singleton" => name.to_owned()).set(0.0);
    metrics::counter!("scheduler_singleton_stops_total", "singleton" => name.to_owned(), "reason" => reason)
        .increment(1);
}
