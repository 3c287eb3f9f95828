//! Pause on failure ([`Job::pause_after_failures`](crate::job::Job::pause_after_failures)): each
//! slot's final outcome is kept in Redis by slot ([`schema::failure_streak_key`], a sorted set
//! scored `2 * slot + 1` for a slot that failed for good, `2 * slot` for one that succeeded), and
//! the replica that records a failed slot making `limit` failed slots in a row *in slot order*
//! pauses the job on every replica, with the reason in the pause record. Slot order, not the
//! order in which the outcomes came: a slot's retries can end after the next slot succeeded, and
//! that success must not hide two consecutive failed slots. A success is added by the history
//! write's pipeline (no round trip of its own); resuming deletes the outcomes.

use chrono::Utc;
use lock_core::redis;

use crate::command;
use crate::report::RunOutcome;
use crate::schema::{self, COUNT_FAILURE, FAILURE_STREAK_TTL};
use crate::shared::{JobEntry, Shared};

/// Most characters of the last error kept in the pause record.
const REASON_ERROR_LEN: usize = 300;

/// How many final outcomes of `job`'s slots are kept for a limit of `limit` failures in a row:
/// enough for the streak around any recent slot, and for slots whose retries end many slots
/// later. A slot whose outcome comes when it is older than all of them counts alone.
pub(crate) fn kept(limit: u32) -> u32 {
    limit.saturating_mul(2).saturating_add(2).max(MIN_KEPT)
}

/// Least number of final outcomes kept ([`kept`]).
const MIN_KEPT: u32 = 256;

/// Adds to `pipe` (the history write's) the success of slot `tick` to the final outcomes
/// `outcomes` (kept: `keep`), ignored in the reply.
pub(crate) fn add_success(pipe: &mut redis::Pipeline, outcomes: &str, tick: i64, keep: u32) {
    pipe.cmd("ZADD").arg(outcomes).arg(tick.saturating_mul(2)).arg(tick).ignore();
    pipe.cmd("PEXPIRE").arg(outcomes).arg(FAILURE_STREAK_TTL.as_millis() as u64).ignore();
    pipe.cmd("ZREMRANGEBYRANK").arg(outcomes).arg(0).arg(-i64::from(keep) - 1).ignore();
}

/// Records `job`'s slot `tick` as failed for good with `outcome`; pauses the job when it makes
/// `limit` failed slots in a row in slot order. One round trip. A Redis failure is logged: the
/// slot is then not counted.
pub(crate) async fn count(shared: &Shared, job: &JobEntry, limit: u32, tick: i64, outcome: &RunOutcome) {
    let (Ok(count_key), Ok(pause_key)) =
        (schema::failure_streak_key(&job.name), schema::pause_key(&job.name))
    else {
        return;
    };
    let record = pause_record(&shared.instance, limit, outcome);
    let mut invocation = COUNT_FAILURE.key(&count_key);
    invocation
        .key(&pause_key)
        .arg(limit)
        .arg(FAILURE_STREAK_TTL.as_millis() as u64)
        .arg(&record)
        .arg(tick)
        .arg(kept(limit));
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
        Ok((failures, _)) => tracing::debug!(failures, limit, "failed slot counted (failed slots in a row)"),
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
