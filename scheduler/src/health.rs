//! A scheduler's health as a pod's probes ask it: *live* while its timer loop turns (it wakes
//! at least every second, even while waiting for Redis at start), *ready* while Redis answers
//! its announcements to its group (so the other replicas count it).
//!
//! [`HealthProbe`] is a cheap view of it for an HTTP handler: taken from the [`Scheduler`]
//! before it starts (a pod's probes are served from the first second) or from its handle.
//!
//! [`Scheduler`]: crate::Scheduler

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::schema::MEMBER_TTL;

/// A scheduler is live while its timer loop turned within this: the loop wakes at least every
/// second, so ten seconds without a turn means it is stuck (a blocked runtime, a task that died).
pub const LIVENESS_WINDOW: Duration = Duration::from_secs(10);

/// How often the wait for Redis at start marks the loop as turning (as often as the timer).
const TURN: Duration = Duration::from_secs(1);

/// What a scheduler says about itself to a pod's probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// Its timer loop turned within [`LIVENESS_WINDOW`] (also while it waits for Redis at
    /// start); false before [`Scheduler::start`](crate::Scheduler::start) and after it stopped.
    pub live: bool,
    /// Live, and its last announcement to its group reached Redis within the announcement's
    /// lifetime ([`MEMBER_TTL`]): Redis answers and the other replicas count this one. False
    /// while shutting down.
    pub ready: bool,
}

/// A cloneable view of a scheduler's [`Health`] (for a `/livez` and `/readyz` handler); from
/// [`Scheduler::health_probe`](crate::Scheduler::health_probe) or
/// [`SchedulerHandle::health_probe`](crate::SchedulerHandle::health_probe).
#[derive(Debug, Clone)]
pub struct HealthProbe {
    beats: Arc<Beats>,
}

impl HealthProbe {
    pub(crate) fn new(beats: Arc<Beats>) -> HealthProbe {
        HealthProbe { beats }
    }

    /// The scheduler's health now.
    pub fn health(&self) -> Health {
        self.beats.health(Instant::now())
    }
}

/// When the timer last turned and the last announcement reached Redis (ms after `base`, plus
/// one: zero is never).
#[derive(Debug)]
pub(crate) struct Beats {
    base: Instant,
    turned: AtomicU64,
    announced: AtomicU64,
    stopping: AtomicBool,
    stopped: AtomicBool,
    /// Becomes true at the first announcement that reached Redis.
    first: watch::Sender<bool>,
}

impl Default for Beats {
    fn default() -> Self {
        Beats {
            base: Instant::now(),
            turned: AtomicU64::new(0),
            announced: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            first: watch::channel(false).0,
        }
    }
}

impl Beats {
    fn stamp(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1
    }

    /// The timer loop (or the wait for Redis before it) turned.
    pub(crate) fn turned(&self) {
        self.turned.store(self.stamp(), Ordering::Relaxed);
    }

    /// An announcement reached Redis (`true`) or failed.
    pub(crate) fn announced(&self, ok: bool) {
        self.announced.store(if ok { self.stamp() } else { 0 }, Ordering::Relaxed);
        if ok {
            self.first.send_if_modified(|first| !std::mem::replace(first, true));
        }
    }

    /// A shutdown started: not ready any more.
    pub(crate) fn stopping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// The timer ended: not live any more.
    pub(crate) fn stopped(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// Whether an announcement has reached Redis yet.
    pub(crate) fn first_seen(&self) -> bool {
        *self.first.borrow()
    }

    /// Resolves once an announcement has reached Redis.
    pub(crate) async fn first_announcement(&self) {
        let mut first = self.first.subscribe();
        // Err only if the sender is gone, which it is not while `self` lives.
        let _ = first.wait_for(|announced| *announced).await;
    }

    /// Resolves once an announcement has reached Redis, marking the loop as turning every
    /// [`TURN`] meanwhile (a process waiting for Redis is live, only not ready).
    pub(crate) async fn wait_for_redis(&self) {
        loop {
            self.turned();
            tokio::select! {
                () = self.first_announcement() => return,
                () = tokio::time::sleep(TURN) => {}
            }
        }
    }

    fn within(&self, stamp: u64, window: Duration, now: Instant) -> bool {
        stamp != 0 && {
            let at = self.base + Duration::from_millis(stamp - 1);
            now.saturating_duration_since(at) < window
        }
    }

    pub(crate) fn health(&self, now: Instant) -> Health {
        let live = !self.stopped.load(Ordering::Relaxed)
            && self.within(self.turned.load(Ordering::Relaxed), LIVENESS_WINDOW, now);
        let ready = live
            && !self.stopping.load(Ordering::Relaxed)
            && self.within(self.announced.load(Ordering::Relaxed), MEMBER_TTL, now);
        Health { live, ready }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_while_turning_ready_while_announced() {
        let beats = Beats::default();
        let t0 = Instant::now();
        assert_eq!(beats.health(t0), Health { live: false, ready: false }, "not started");
        beats.turned();
        assert_eq!(beats.health(Instant::now()), Health { live: true, ready: false }, "no Redis yet");
        beats.announced(true);
        assert_eq!(beats.health(Instant::now()), Health { live: true, ready: true });
        let later = Instant::now() + MEMBER_TTL;
        assert!(!beats.health(later).ready, "an announcement older than its lifetime");
        beats.announced(false);
        assert_eq!(beats.health(Instant::now()), Health { live: true, ready: false }, "Redis went away");
        beats.announced(true);
        assert!(!beats.health(Instant::now() + LIVENESS_WINDOW).live, "a timer that stopped turning");
        beats.stopping();
        assert_eq!(beats.health(Instant::now()), Health { live: true, ready: false }, "shutting down");
        beats.stopped();
        assert_eq!(beats.health(Instant::now()), Health { live: false, ready: false }, "stopped");
    }
}
