//! Pause on failure ([`Job::pause_after_failures`](crate::job::Job::pause_after_failures)): each
//! slot that failed for good (its last attempt failed) is counted in Redis
//! ([`schema::failure_streak_key`]), and the replica whose count reaches the limit pauses the job
//! on every replica, with the reason in the pause record. A success resets the count (a
//! `DEL` in the history write's pipeline: no round trip of its own), and so does resuming.

use chrono::Utc;

use crate::command;
use crate::report::RunOutcome;
use crate::schema::{self, COUNT_FAILURE, FAILURE_STREAK_TTL};
use crate::shared::{JobEntry, Shared};

/// Most characters of the last error kept in the pause record.
const REASON_ERROR_LEN: usize = 300;

/// Counts `job`'s slot that failed for good with `outcome`; pauses the job when it is the
/// `limit`th in a row. One round trip. A Redis failure is logged: the slot is then not counted.
pub(crate) async fn count(shared: &Shared, job: &JobEntry, limit: u32, outcome: &RunOutcome) {
    let (Ok(count_key), Ok(pause_key)) =
        (schema::failure_streak_key(&job.name), schema::pause_key(&job.name))
    else {
        return;
    };
    let record = pause_record(&shared.instance, limit, outcome);
    let mut invocation = COUNT_FAILURE.key(&count_key);
    invocation.key(&pause_key).arg(limit).arg(FAILURE_STREAK_TTL.as_millis() as u64).arg(&record);
    let action = "counting a failed slot";
    match command::run_script::<(u32, i64)>(
        &shared.client,
        action,
        &COUNT_FAILURE,
        &invocation,
        command::TIMEOUT,
    )
    .await
    {
        Ok((_, 1)) => {
            job.metrics.paused_on_failure(&job.name);
            tracing::warn!(
                failures = limit,
                "the job failed {limit} slot(s) in a row: paused on every replica (lockctl resume or \
                 lock_scheduler::control::resume to resume it)"
            );
        }
        Ok((failures, _)) => tracing::debug!(failures, limit, "failed slot counted"),
        Err(e) => tracing::warn!(
            error = %lock_core::ErrorChain(&e),
            "could not count the failed slot towards pausing the job"
        ),
    }
}

/// The pause record of a job paused by its failures: when, by which replica, and why, in the
/// `<time> by <who>` form of an operator's pause.
fn pause_record(instance: &str, limit: u32, outcome: &RunOutcome) -> String {
    let at = Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let last = match outcome {
        RunOutcome::Failed(error) => error.chars().take(REASON_ERROR_LEN).collect::<String>(),
        other => other.to_string(),
    };
    format!("{at} by {instance}: paused after {limit} failed run(s) in a row; last: {last}")
}
