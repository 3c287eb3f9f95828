#![doc = include_str!("../README.md")]

mod batch;
mod clock;
mod command;
mod directory;
mod error;
mod handle;
mod history;
mod job;
mod job_metrics;
mod manual;
mod members;
mod pause;
mod report;
mod run;
mod schedule;
mod scheduler;
#[doc(hidden)]
pub mod schema;
mod shared;
mod signal;
mod state;
mod ticks;
mod timer;
pub mod tokio_cron;
mod validate;

pub use clock::{Clock, OffsetClock, SystemClock};
pub use directory::{RegisteredJob, Replica, registered_jobs, replicas};
pub use error::{ControlError, SchedulerError};
pub use handle::SchedulerHandle;
pub use history::{HistoryEntry, history, history_since, jobs};
pub use job::{Job, JobOutput, RunContext};
pub use manual::{RunRequest, request_run, run_now, wait_taken};
pub use pause::{PauseState, pause, pause_by, pause_state, resume};
pub use report::{RunOutcome, RunReport, ShutdownReport};
pub use schedule::{CatchUp, CronField, ON_TIME, Schedule, ScheduleError};
pub use scheduler::{
    DEFAULT_CLAIM_GRACE, DEFAULT_GROUP, DEFAULT_SHUTDOWN_GRACE, Scheduler, SchedulerBuilder,
};
pub use schema::{HISTORY_LEN, HISTORY_TTL, RUN_PICKUP, RUN_REQUEST_TTL, history_key, pause_key};
pub use signal::{ShutdownSignal, ShutdownSignals, shutdown_signal};

/// The `chrono` crate slots are expressed in.
pub use chrono;
/// The `chrono-tz` crate; [`Tz`] is the time zone type of local slots.
pub use chrono_tz::{self, Tz};
/// The lock client crate, re-exported for convenience.
pub use lock_core;

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>(_: &T) {}
    fn assert_send<T: Send>(_: &T) {}

    /// Schedulers, handles and their futures can be moved into `tokio::spawn`.
    #[allow(dead_code)]
    fn thread_safety(scheduler: Scheduler, other: Scheduler, handle: SchedulerHandle) {
        assert_send_sync(&scheduler);
        assert_send_sync(&handle);
        assert_send(&handle.shutdown());
        assert_send(&scheduler.run_until_signal());
        assert_send(&other.start());
    }
}
