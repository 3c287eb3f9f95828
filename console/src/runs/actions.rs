//! What an operator does with runs from the page, through the scheduler's admin calls:
//! retrying a failed run (a backfill of its one slot, forced; or a new run-now for a failed
//! run-now) and backfilling a range of slots. The checks that keep a retry from running a slot
//! twice live here.

use std::collections::HashMap;

use chrono::{DateTime, NaiveDateTime, Utc};
use lock_core::LockClient;
use lock_scheduler::control::{self, HistoryEntry};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::json;
use crate::runs::query::id_order;
use crate::view;

/// Whether a run can be retried from the page, and if not why (for the page and the API).
pub(crate) fn retry_refusal(
    run: &HistoryEntry,
    slot_runs: &[HistoryEntry],
    pending: &[control::PendingRetry],
) -> Option<(&'static str, String)> {
    if !view::is_failure(&run.outcome) {
        return Some((
            "not_failed",
            format!("this run's outcome is `{}`: only a failed or timed-out run is retried", run.outcome),
        ));
    }
    if run.manual_by.is_some() {
        // A run-now has no slot: its retry is a new run-now, always possible.
        return None;
    }
    if let Some(retry) = pending.iter().find(|r| r.tick == run.tick) {
        return Some((
            "retry_pending",
            format!(
                "a retry of this slot is already waiting (attempt {}, due {}): it runs without you",
                retry.attempt,
                retry.due.to_rfc3339()
            ),
        ));
    }
    // The history is newest first: a run of the same slot recorded after this one.
    if let Some(later) =
        slot_runs.iter().find(|r| id_order(&r.id) > id_order(&run.id) && r.manual_by.is_none())
    {
        return Some((
            "retried_already",
            format!(
                "this slot ran again after this run (`{}`, run {}): see that run",
                later.outcome, later.id
            ),
        ));
    }
    None
}

/// Retries `run` of `job` as `actor`: for a run-now, a new run-now; for a slot's run, a
/// backfill of that one slot (forced: its history shows it failed). Answers what was asked.
pub(crate) async fn retry(
    client: &LockClient,
    job: &str,
    run: &HistoryEntry,
    actor: &str,
) -> Result<Value, ApiError> {
    if run.manual_by.is_some() {
        let request = control::run_now(client, job, actor).await?;
        return Ok(
            json!({ "job": job, "retried": run.id, "via": "run_now", "run_request": json::run_request(&request) }),
        );
    }
    let slot =
        run.slot.ok_or_else(|| ApiError::bad_request("invalid_id", "this run has no slot to run again"))?;
    let done = control::backfill(client, job, slot, slot, true).await?;
    if done.queued.is_empty() {
        return Err(ApiError::new(
            axum::http::StatusCode::CONFLICT,
            "not_on_schedule",
            format!(
                "{} is not a slot of {job}'s current schedule (did the schedule change?), so it cannot be run again as \
                 that slot: use Run now",
                slot.to_rfc3339()
            ),
        ));
    }
    Ok(json!({
        "job": job,
        "retried": run.id,
        "via": "backfill",
        "group": done.group,
        "slot": slot.to_rfc3339(),
        "queued": done.queued.iter().map(|t| t.to_rfc3339()).collect::<Vec<_>>(),
    }))
}

/// A backfill's range and force flag from the query string: `from` and `to` as RFC 3339 or
/// as a `datetime-local` field sends them (`2026-12-01T00:00`, taken as UTC); `force` is `1`,
/// `true` or `on`.
pub(crate) fn backfill_params(
    params: &HashMap<String, String>,
) -> Result<(DateTime<Utc>, DateTime<Utc>, bool), ApiError> {
    let instant = |name: &str| -> Result<DateTime<Utc>, ApiError> {
        let text = params.get(name).map(|t| t.trim()).filter(|t| !t.is_empty()).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_backfill",
                format!("`{name}` is missing: give a time, e.g. 2026-12-01T00:00:00Z"),
            )
        })?;
        parse_instant(text).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_backfill",
                format!(
                    "`{name}` is {:?}, not a time: give RFC 3339 (2026-12-01T00:00:00Z) or 2026-12-01T00:00 (UTC)",
                    text.chars().take(40).collect::<String>()
                ),
            )
        })
    };
    let force = matches!(params.get("force").map(String::as_str), Some("1" | "true" | "on"));
    Ok((instant("from")?, instant("to")?, force))
}

/// RFC 3339, or a UTC date and time without a zone (seconds optional).
fn parse_instant(text: &str) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.with_timezone(&Utc));
    }
    ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"]
        .iter()
        .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
        .map(|t| t.and_utc())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backfill_ranges_are_read_in_either_form() {
        let params: HashMap<String, String> =
            [("from", "2026-12-01T00:00"), ("to", "2026-12-01T02:30:00Z"), ("force", "on")]
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
        let (from, to, force) = backfill_params(&params).unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(
            (from.to_rfc3339(), to.to_rfc3339(), force),
            ("2026-12-01T00:00:00+00:00".into(), "2026-12-01T02:30:00+00:00".into(), true)
        );
        let missing = backfill_params(&HashMap::new()).err().map(|e| e.code);
        assert_eq!(missing, Some("invalid_backfill"));
        assert_eq!(parse_instant("yesterday"), None);
    }
}
