//! Steps of the wall clock (a suspended VM, an NTP correction), noticed by comparing it with the
//! monotonic clock at each wake.

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::time::Instant;

use crate::timer::Timer;

/// A difference between wall-clock and monotonic time elapsed larger than this is a step of
/// the wall clock (timers fire within milliseconds; a busy runtime delays both clocks alike).
const JUMP: TimeDelta = TimeDelta::milliseconds(500);

impl Timer {
    /// Recomputes every job's next slot if the wall clock stepped since the last reading.
    pub(super) fn notice_jump(&mut self, now: DateTime<Utc>) {
        let mono = Instant::now();
        let (wall_then, mono_then) = self.anchor;
        self.anchor = (now, mono);
        let elapsed = TimeDelta::from_std(mono - mono_then).unwrap_or(TimeDelta::MAX);
        let step = (now - wall_then) - elapsed;
        if step.abs() <= JUMP {
            return;
        }
        tracing::warn!(
            step_ms = step.num_milliseconds(),
            "the wall clock stepped; recomputing every job's next slot"
        );
        self.queue.clear();
        let names: Vec<Arc<str>> = self.jobs.keys().cloned().collect();
        for name in names {
            self.requeue(&name);
        }
    }
}
