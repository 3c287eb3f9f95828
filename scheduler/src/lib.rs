#![doc = include_str!("../README.md")]
#![doc = include_str!("overview.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[doc(hidden)]
#[path = "macro_support.rs"]
pub mod __private;
mod batch;
mod clock;
mod command;
pub mod control;
mod declared;
mod error;
mod failures;
mod handle;
mod health;
mod index;
mod job;
mod job_args;
mod job_metrics;
mod max_runs;
mod members;
mod overlap;
mod overrides;
mod pause_check;
mod presence;
mod recorder;
mod report;
mod retry;
mod run;
mod run_context;
mod run_taker;
mod running;
mod schedule;
mod scheduler;
#[doc(hidden)]
pub mod schema;
mod shared;
mod signal;
mod singleton;
mod spread;
mod state;
mod ticks;
mod timer;
#[cfg(feature = "tokio-cron")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio-cron")))]
pub mod tokio_cron;
mod validate;

pub use clock::{Clock, OffsetClock, SystemClock};
pub use error::SchedulerError;
pub use handle::SchedulerHandle;
pub use health::{Health, HealthProbe, LIVENESS_WINDOW};
pub use job::{Job, JobOutput};
pub use job_args::{FromRun, MissingState, State, StateNeed, States};
pub use lock_schedule::{CronField, Every, ScheduleError, When};
pub use overlap::Overlap;
pub use overrides::ScheduleOrigin;
pub use report::{RunOutcome, RunReport, ShutdownReport};
pub use retry::policy::{MAX_ATTEMPTS, RetryPolicy};
pub use run_context::RunContext;
pub use schedule::Schedule;
pub use schedule::catch_up::{CatchUp, ON_TIME};
pub use scheduler::{
    DEFAULT_CLAIM_GRACE, DEFAULT_GROUP, DEFAULT_SHUTDOWN_GRACE, Scheduler, SchedulerBuilder,
};
pub use schema::{HISTORY_LEN, HISTORY_TTL, RETRY_TTL, RUN_PICKUP, RUN_REQUEST_TTL, history_key, pause_key};
pub use signal::{ShutdownSignal, ShutdownSignals, shutdown_signal};
pub use singleton::args::{FromSingleton, SingletonContext, Term};
pub use singleton::{DEFAULT_RESTART_DELAY, Singleton};

/// The `chrono` crate slots are expressed in.
pub use chrono;
/// The `chrono-tz` crate; [`Tz`] is the time zone type of local slots.
pub use chrono_tz::{self, Tz};
/// The lock client crate, re-exported for convenience.
pub use lock_core;
/// The schedule dialect (cron expressions, intervals, time zones, durations), shared with the
/// `#[scheduled]` attribute.
pub use lock_schedule;

/// Declares a scheduled job on its `async fn` (feature `macros`, on by default): see the crate
/// docs.
#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use lock_scheduler_macros::scheduled;

/// Declares a singleton task on its `async fn` (feature `macros`, on by default): one replica
/// at a time runs it, the leader of its election. See [`Singleton`].
#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use lock_scheduler_macros::singleton;

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
