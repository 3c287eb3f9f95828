//! The scheduler's lifecycle as its timer and group announcer see it.

use tokio::time::Instant;

/// What the timer is told, through a `watch` channel whose sender the
/// [`SchedulerHandle`] owns (dropping it tells it to stop firing and leave running jobs alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Running,
    /// Stop firing; wait for running jobs until the deadline, then cancel them. A later
    /// `Stopping` with an earlier deadline (a forced shutdown) moves the deadline.
    Stopping(Instant),
}

impl State {
    /// The shutdown deadline, once stopping.
    pub(crate) fn deadline(self) -> Option<Instant> {
        match self {
            State::Running => None,
            State::Stopping(deadline) => Some(deadline),
        }
    }
}
