//! The JSON API's handlers (`/api/...`). Each one validates its input, reads or acts through
//! the console's client, and answers JSON: the shapes of [`crate::json`], or an error.

use std::collections::HashMap;

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use lock_scheduler::control;
use serde_json::{Value, json};

use crate::Console;
use crate::access::audit::Caller;
use crate::access::auth::authorize;
use crate::error::ApiError;
use crate::json;
use crate::view::{self, LockQuery};

/// The query string's parameters.
pub(crate) type Params = Result<Query<HashMap<String, String>>, QueryRejection>;
/// One path parameter.
pub(crate) type Segment = Result<Path<String>, PathRejection>;

type Reply = Result<Json<Value>, ApiError>;

pub(crate) fn params(params: Params) -> Result<HashMap<String, String>, ApiError> {
    params.map(|Query(p)| p).map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))
}

pub(crate) fn segment(segment: Segment) -> Result<String, ApiError> {
    segment.map(|Path(s)| s).map_err(|e| ApiError::bad_request("invalid_path", e.body_text()))
}

/// The `pattern` and `limit` of a locks listing (the page's and the API's), checked.
pub(crate) fn lock_query(console: &Console, query: Params) -> Result<LockQuery, ApiError> {
    let query = params(query)?;
    LockQuery::parse(
        query.get("pattern").map(String::as_str),
        query.get("limit").map(String::as_str),
        &console.inner.lock_pattern,
    )
}

/// `GET /api/locks?pattern=lock:*&limit=100`
pub(crate) async fn locks(State(console): State<Console>, query: Params) -> Reply {
    let query = lock_query(&console, query)?;
    let (locks, complete) = view::locks(console.client(), &query, console.inner.budget.keys).await?;
    Ok(Json(json!({
        "pattern": query.pattern,
        "limit": query.limit,
        "partial": !complete,
        "locks": locks.iter().map(json::lock_summary).collect::<Vec<_>>(),
    })))
}

/// `GET /api/locks/{key}`
pub(crate) async fn lock(State(console): State<Console>, key: Segment) -> Reply {
    let key = segment(key)?;
    view::check_text("key", &key)?;
    let info = console.client().inspect(&key).await?;
    Ok(Json(json::lock_info(&info)))
}

/// `DELETE /api/locks/{key}[?token=...]`: force-releases the lock (whoever holds it), or the
/// one hold of a semaphore or read-write lock that `token` names. A key that is not a lock is
/// 404 `not_a_lock`, left alone.
pub(crate) async fn unlock(
    State(console): State<Console>,
    caller: Caller,
    key: Segment,
    query: Params,
) -> Reply {
    let key = segment(key)?;
    let mut action = authorize(&console, &caller, "unlock", &key)?;
    let result = async {
        view::check_text("key", &key)?;
        let query = params(query)?;
        let client = console.client();
        if let Some(token) = query.get("token") {
            view::check_text("token", token)?;
            let released = client.force_release(&key, token).await?;
            return Ok((
                Json(json!({ "key": key, "released": released, "holder": token })),
                released.then(|| token.clone()),
            ));
        }
        let info = client.inspect(&key).await?;
        if !info.holders.is_empty() {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "token_required",
                format!(
                    "{key} is a {} with {} holder(s): name the one to release with ?token=<token>",
                    json::kind_name(info.kind),
                    info.holders.len()
                ),
            ));
        }
        let taken = client.force_unlock(&key).await?;
        let instance = taken.as_deref().and_then(lock_core::inspect::parse_token).and_then(|h| h.instance);
        let answer =
            json!({ "key": key, "released": taken.is_some(), "holder": taken, "instance": instance });
        Ok((Json(answer), taken))
    }
    .await;
    let result = result.map(|(answer, released)| {
        // The audit line names whom the lock was taken from (`none` when it was free already).
        action.holder = Some(released.unwrap_or_else(|| "none".into()));
        answer
    });
    action.finish(changed(&console, result).await)
}

/// `GET /api/jobs`: from the shared snapshot.
pub(crate) async fn jobs(State(console): State<Console>) -> Reply {
    let snapshot = console.inner.snapshot.get(&console).await?;
    Ok(Json(json!({
        "jobs": snapshot.jobs.iter().map(view::JobView::to_json).collect::<Vec<_>>(),
        "partial": snapshot.partial.contains(&"jobs"),
        "missing": snapshot.missing_jobs,
        "age_ms": snapshot.age_ms(),
    })))
}

/// `POST /api/jobs/{name}/pause`
pub(crate) async fn pause(State(console): State<Console>, caller: Caller, name: Segment) -> Reply {
    let name = segment(name)?;
    let action = authorize(&console, &caller, "pause", &name)?;
    let result = async {
        let job = view::job(console.client(), &name).await?;
        let was_paused = control::pause_by(console.client(), &job.name, &action.actor).await?;
        Ok(Json(json!({ "job": job.name, "paused": true, "was_paused": was_paused, "by": action.actor })))
    }
    .await;
    action.finish(changed(&console, result).await)
}

/// `POST /api/jobs/{name}/resume`
pub(crate) async fn resume(State(console): State<Console>, caller: Caller, name: Segment) -> Reply {
    let name = segment(name)?;
    let action = authorize(&console, &caller, "resume", &name)?;
    let result = async {
        let job = view::job(console.client(), &name).await?;
        let was_paused = control::resume(console.client(), &job.name).await?;
        Ok(Json(json!({ "job": job.name, "paused": false, "was_paused": was_paused })))
    }
    .await;
    action.finish(changed(&console, result).await)
}

/// `POST /api/jobs/{name}/run`: one live replica runs the job once, now. With an
/// `Idempotency-Key` header, once per key: the same key again (a double click, a retried
/// request) answers with the first request (`replayed: true`) and runs nothing more.
pub(crate) async fn run(
    State(console): State<Console>,
    caller: Caller,
    name: Segment,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let name = segment(name)?;
    let action = authorize(&console, &caller, "run", &name)?;
    let result = async {
        let key = idempotency_key(&caller.headers)?;
        let (request, replayed) = match key {
            Some(key) => {
                let once = control::run_now_once(console.client(), &name, &action.actor, key).await?;
                (once.request, once.replayed)
            }
            None => (control::run_now(console.client(), &name, &action.actor).await?, false),
        };
        let mut answer = json::run_request(&request);
        answer["replayed"] = json!(replayed);
        Ok((StatusCode::ACCEPTED, Json(answer)))
    }
    .await;
    action.finish(changed(&console, result).await)
}

/// The request's `Idempotency-Key` header, if it has one (checked by the scheduler's rule).
fn idempotency_key(headers: &axum::http::HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else { return Ok(None) };
    let key = value.to_str().map_err(|_| {
        ApiError::bad_request(
            "invalid_argument",
            "the Idempotency-Key header must be letters, digits and `-_.:`",
        )
    })?;
    if let Some(problem) = lock_scheduler::schema::idempotency_key_problem(key) {
        return Err(ApiError::bad_request("invalid_argument", problem));
    }
    Ok(Some(key))
}

/// `GET /api/replicas`: from the shared snapshot.
pub(crate) async fn replicas(State(console): State<Console>) -> Reply {
    let snapshot = console.inner.snapshot.get(&console).await?;
    Ok(Json(json!({
        "replicas": snapshot.replicas.iter().map(json::replica).collect::<Vec<_>>(),
        "partial": snapshot.partial.contains(&"replicas"),
        "age_ms": snapshot.age_ms(),
    })))
}

/// After an action that succeeded, the pages must show its effect: the next view reads anew.
pub(crate) async fn changed<T>(console: &Console, result: Result<T, ApiError>) -> Result<T, ApiError> {
    if result.is_ok() {
        console.inner.snapshot.invalidate().await;
    }
    result
}

/// How long `/readyz` waits for Redis's answer to its PING.
const READY_PING: std::time::Duration = std::time::Duration::from_secs(1);

/// `GET /healthz` and `GET /livez`: the console is serving. Liveness only: no Redis round trip,
/// so that a Redis outage does not get the console restarted (`/readyz` tells that). Exempt
/// from the host check and the read token.
pub(crate) async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// `GET /readyz`: Redis answers the console's PING within 1 s (200), or not (503, with why).
/// Exempt from the host check and the read token; the reason never holds a password (lock-core's
/// errors never show one).
pub(crate) async fn readyz(State(console): State<Console>) -> (StatusCode, Json<Value>) {
    let mut ping = lock_core::redis::pipe();
    ping.cmd("PING");
    let answer =
        tokio::time::timeout(READY_PING, console.inner.client.query_pipeline::<(String,)>(&ping)).await;
    let reason = match answer {
        Ok(Ok(_)) => return (StatusCode::OK, Json(json!({ "status": "ok" }))),
        Ok(Err(e)) => lock_core::ErrorChain(&e).to_string(),
        Err(_) => format!("no answer from Redis within {READY_PING:?}"),
    };
    (StatusCode::SERVICE_UNAVAILABLE, Json(json!({ "status": "unavailable", "reason": reason })))
}

/// A known path asked with a method it does not serve.
pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this path does not serve that method: see /api/openapi.json",
    )
}

/// Any other `/api/...` path.
pub(crate) async fn not_found() -> ApiError {
    ApiError::not_found("no_route", "no such API endpoint: see /api/openapi.json")
}
