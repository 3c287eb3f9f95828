//! The admin calls: what an operator (or `lockctl`, or the console) does to the jobs of running
//! schedulers, from any process with a [`LockClient`](lock_core::LockClient), through Redis.
//!
//! - pause and resume a job on every replica at once ([`pause`], [`resume`], [`pause_state`]);
//! - read how many times a job with a maximum number of runs has run ([`run_count`]);
//! - read its run history ([`history`], [`history_since`], [`history_before`] page by page,
//!   [`history_entry`], [`jobs`], [`has_history_or_pause_flag`]);
//! - run it once now on one live replica ([`run_now`], [`request_run`], [`wait_taken`]), once
//!   per idempotency key ([`run_now_once`]);
//! - run every slot between two instants once, as if on time ([`backfill`]);
//! - every job's pause flag, last run and recent failures at once, pipelined ([`job_summaries`]);
//! - see the retries of failed runs waiting for their time ([`pending_retries`], [`all_pending_retries`]);
//! - see which jobs and replicas the running scheduler groups announce ([`registered_jobs`],
//!   [`replicas`]).
//!
//! Each fails with a [`ControlError`].
//!
//! ```no_run
//! use lock_scheduler::control;
//!
//! # async fn demo(client: lock_scheduler::lock_core::LockClient) -> Result<(), control::ControlError> {
//! control::pause(&client, "daily-report").await?;
//! for run in control::history(&client, "daily-report", 10).await? {
//!     println!("tick {} on {}: {} in {:?}", run.tick, run.instance, run.outcome, run.duration);
//! }
//! control::resume(&client, "daily-report").await?;
//! # Ok(()) }
//! ```

pub(crate) mod backfill;
pub(crate) mod directory;
pub(crate) mod history;
pub(crate) mod pause;
pub(crate) mod retries;
pub(crate) mod run_now;
pub(crate) mod run_once;
pub(crate) mod summary;

pub use crate::error::ControlError;
pub use crate::max_runs::run_count;
pub use backfill::{Backfill, backfill};
pub use directory::{RegisteredJob, Replica, ReplicaAbout, registered_jobs, replicas};
pub use history::{
    HistoryEntry, failures_last_day, has_history_or_pause_flag, history, history_before, history_entry,
    history_since, jobs,
};
pub use pause::{PauseState, pause, pause_by, pause_state, resume};
pub use retries::{PendingRetry, all_pending_retries, pending_retries};
pub use run_now::{RunRequest, request_run, run_now, wait_taken};
pub use run_once::{RunOnce, run_now_once};
pub use summary::{JobSummaries, JobSummary, job_summaries};
