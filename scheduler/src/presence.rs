//! What a replica says about itself to its group, next to its announcement (`replicas_key`):
//! when its scheduler started, its host, the version it was given and the jobs it is running,
//! so that operators see which build runs where (a rolling deploy half done, say).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::schema::{self, MEMBER_TTL};

/// The jobs this replica is running now (a view of the scheduler's own counts).
pub(crate) type RunningJobs = Arc<dyn Fn() -> Vec<Arc<str>> + Send + Sync>;

/// This replica's description, fixed at start but for what it runs.
pub(crate) struct Presence {
    started: DateTime<Utc>,
    host: String,
    version: String,
    running: RunningJobs,
}

impl std::fmt::Debug for Presence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Presence")
            .field("started", &self.started)
            .field("host", &self.host)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// What was last written, and when: the description is sent again when it changes, and at
/// least every half [`MEMBER_TTL`] so that its hash outlives the gaps between writes.
#[derive(Debug, Default)]
pub(crate) struct LastSaid(Option<(String, Instant)>);

impl Presence {
    pub(crate) fn new(started: DateTime<Utc>, version: Option<&str>, running: RunningJobs) -> Presence {
        Presence { started, host: host_name(), version: version.unwrap_or_default().to_owned(), running }
    }

    /// The description as stored ([`schema::replica_about`]).
    pub(crate) fn describe(&self) -> String {
        let running = (self.running)();
        let names: Vec<&str> = running.iter().map(|name| &**name).collect();
        schema::replica_about(self.started.timestamp_millis(), &self.host, &self.version, &names)
    }
}

impl LastSaid {
    /// `about` if it is to be sent now (it changed, or was last sent half a TTL ago).
    pub(crate) fn due(&self, about: String, now: Instant) -> Option<String> {
        match &self.0 {
            Some((said, at)) if *said == about && now.duration_since(*at) < MEMBER_TTL / 2 => None,
            _ => Some(about),
        }
    }

    /// `about` was written at `at`.
    pub(crate) fn said(&mut self, about: String, at: Instant) {
        self.0 = Some((about, at));
    }
}

/// The host name: `HOSTNAME` if set (Kubernetes sets it to the pod's name), else the kernel's
/// (Linux), else empty.
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.trim().is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_description_is_sent_when_it_changes_or_half_a_ttl_later() {
        let t0 = Instant::now();
        let mut last = LastSaid::default();
        assert_eq!(last.due("a".into(), t0).as_deref(), Some("a"));
        last.said("a".into(), t0);
        assert_eq!(last.due("a".into(), t0 + Duration::from_millis(1)), None);
        assert_eq!(last.due("b".into(), t0 + Duration::from_millis(1)).as_deref(), Some("b"));
        assert_eq!(last.due("a".into(), t0 + MEMBER_TTL / 2).as_deref(), Some("a"));
    }

    #[test]
    fn the_description_lists_the_running_jobs() {
        let started = DateTime::from_timestamp_millis(1_700_000_000_000).expect("time");
        let presence = Presence::new(started, Some("2.0.1"), Arc::new(|| vec![Arc::from("report")]));
        let about = presence.describe();
        let (ms, _host, version, running) = schema::parse_replica_about(&about).expect("parses");
        assert_eq!((ms, version, running), (1_700_000_000_000, "2.0.1", vec!["report"]));
    }
}
