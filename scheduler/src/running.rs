//! [`Running`]: a run in flight on this replica, as the timer keeps it for shutdown.

use chrono::{DateTime, Utc};
use tokio::task::JoinHandle;

use crate::report::RunOutcome;

/// A run in flight for a job on this replica.
pub(crate) struct Running {
    pub(crate) handle: JoinHandle<RunOutcome>,
    pub(crate) slot: DateTime<Utc>,
    pub(crate) fired_at: DateTime<Utc>,
    pub(crate) span: tracing::Span,
}

impl Running {
    /// Whether the run's task is over.
    pub(crate) fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }
}
