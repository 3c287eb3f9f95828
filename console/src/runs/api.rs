//! The JSON API of a job's runs: the history searched and paged, one run in full, the counts
//! over time, and the two actions on runs (retry, backfill).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::Utc;
use lock_scheduler::control::{self, HistoryEntry};
use serde_json::{Value, json};

use crate::Console;
use crate::access::audit::Caller;
use crate::access::auth::authorize;
use crate::api::{Params, Segment, changed, params, segment};
use crate::error::ApiError;
use crate::json;
use crate::runs::actions;
use crate::runs::counts;
use crate::runs::query::{self, HistoryQuery};
use crate::view;

type Reply = Result<Json<Value>, ApiError>;

/// `GET /api/jobs/{name}/history?n=100&before=<id>&outcome=failed&q=timeout`
pub(crate) async fn history(State(console): State<Console>, name: Segment, query: Params) -> Reply {
    let name = segment(name)?;
    let query = HistoryQuery::parse(&params(query)?)?;
    let job = view::job(console.client(), &name).await?;
    let page = query::search(console.client(), &job.name, &query).await?;
    Ok(Json(json!({
        "job": job.name,
        "runs": page.runs.iter().map(json::history_entry).collect::<Vec<_>>(),
        "next_before": page.next_before,
        "scanned": page.scanned,
        "cut": page.cut,
    })))
}

/// A run of `job` and the other runs of its slot (from the kept history), or 404 `unknown_run`.
pub(crate) async fn find_run(
    console: &Console,
    job: &str,
    id: &str,
) -> Result<(HistoryEntry, Vec<HistoryEntry>), ApiError> {
    query::check_id(id)?;
    let run = control::history_entry(console.client(), job, id).await?.ok_or_else(|| {
        ApiError::not_found(
            "unknown_run",
            format!("{job}'s history holds no run {id} (it may have been trimmed)"),
        )
    })?;
    let mut whole = console.inner.retained.get(console.client(), job).await?;
    if !whole.runs.iter().any(|r| r.id == run.id) && !whole.cut {
        // Kept from before this run was recorded: read it anew.
        console.inner.retained.forget(job);
        whole = console.inner.retained.get(console.client(), job).await?;
    }
    let slot_runs: Vec<HistoryEntry> = if run.manual_by.is_some() {
        Vec::new()
    } else {
        whole.runs.iter().filter(|r| r.tick == run.tick && r.manual_by.is_none()).cloned().collect()
    };
    Ok((run, slot_runs))
}

/// `GET /api/jobs/{name}/runs/{id}`: one run in full, the runs of its slot, whether it can be
/// retried.
pub(crate) async fn run(State(console): State<Console>, path: Path2) -> Reply {
    let (name, id) = two(path)?;
    let job = view::job(console.client(), &name).await?;
    let (run, slot_runs) = find_run(&console, &job.name, &id).await?;
    let pending = control::pending_retries(console.client(), &job.name).await?;
    let refusal = actions::retry_refusal(&run, &slot_runs, &pending);
    Ok(Json(json!({
        "job": job.name,
        "run": json::history_entry(&run),
        "slot_runs": slot_runs.iter().map(json::history_entry).collect::<Vec<_>>(),
        "retry": {
            "possible": refusal.is_none(),
            "reason": refusal.map(|(code, why)| json!({ "code": code, "message": why })),
        },
    })))
}

/// `GET /api/jobs/{name}/stats`: runs per hour (or day) over the history kept.
pub(crate) async fn stats(State(console): State<Console>, name: Segment) -> Reply {
    let name = segment(name)?;
    let job = view::job(console.client(), &name).await?;
    let whole = console.inner.retained.get(console.client(), &job.name).await?;
    let counts = counts::count(&whole.runs, Utc::now());
    let mut answer = counts.to_json();
    answer["job"] = json!(job.name);
    answer["cut"] = json!(whole.cut);
    answer["age_ms"] = json!(u64::try_from(whole.read_at.elapsed().as_millis()).unwrap_or(u64::MAX));
    Ok(Json(answer))
}

/// `POST /api/jobs/{name}/runs/{id}/retry`: runs a failed run's slot again.
pub(crate) async fn retry(
    State(console): State<Console>,
    caller: Caller,
    path: Path2,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let (name, id) = two(path)?;
    let action = authorize(&console, &caller, "retry", &format!("{name} run {id}"))?;
    let result = async {
        let job = view::job(console.client(), &name).await?;
        // Fresh: the kept history may predate a retry queued meanwhile.
        console.inner.retained.forget(&job.name);
        let (run, slot_runs) = find_run(&console, &job.name, &id).await?;
        let pending = control::pending_retries(console.client(), &job.name).await?;
        if let Some((code, why)) = actions::retry_refusal(&run, &slot_runs, &pending) {
            return Err(ApiError::new(StatusCode::CONFLICT, code, why));
        }
        let answer = actions::retry(console.client(), &job.name, &run, &action.actor).await?;
        console.inner.retained.forget(&job.name);
        Ok((StatusCode::ACCEPTED, Json(answer)))
    }
    .await;
    action.finish(changed(&console, result).await)
}

/// `POST /api/jobs/{name}/backfill?from=...&to=...&force=1`
pub(crate) async fn backfill(
    State(console): State<Console>,
    caller: Caller,
    name: Segment,
    query: Params,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let name = segment(name)?;
    let action = authorize(&console, &caller, "backfill", &name)?;
    let result = async {
        let (from, to, force) = actions::backfill_params(&params(query)?)?;
        let job = view::job(console.client(), &name).await?;
        let done = control::backfill(console.client(), &job.name, from, to, force).await?;
        console.inner.retained.forget(&job.name);
        let times =
            |slots: &[chrono::DateTime<Utc>]| slots.iter().map(|t| t.to_rfc3339()).collect::<Vec<_>>();
        Ok((
            StatusCode::ACCEPTED,
            Json(json!({
                "job": job.name,
                "group": done.group,
                "from": from.to_rfc3339(),
                "to": to.to_rfc3339(),
                "force": force,
                "queued": times(&done.queued),
                "refused": times(&done.refused),
            })),
        ))
    }
    .await;
    action.finish(changed(&console, result).await)
}

/// Two path parameters.
pub(crate) type Path2 =
    Result<axum::extract::Path<(String, String)>, axum::extract::rejection::PathRejection>;

pub(crate) fn two(path: Path2) -> Result<(String, String), ApiError> {
    path.map(|axum::extract::Path(p)| p).map_err(|e| ApiError::bad_request("invalid_path", e.body_text()))
}
