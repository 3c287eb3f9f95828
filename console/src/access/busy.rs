//! The limits on requests served at once: past the first, a request is answered 429 `busy` at
//! once; of those admitted, only a few read Redis at a time (the others wait their turn within
//! the read budget's time), so that a crowd of viewers (or a script in a loop) cannot pile
//! reads onto Redis or the console's connection.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::Console;
use crate::error::ApiError;

/// Serves `request` if a slot is free (held until its response is ready), else 429.
/// Not counted: the probes (`/healthz`, `/livez`, `/readyz`: a probe must not fail because viewers are busy) and the views
/// served from the shared snapshot, which reads Redis once for all of them whatever their
/// number (counting them turned a crowd waiting for one read into 429s).
pub(crate) async fn admit(State(console): State<Console>, request: Request, next: Next) -> Response {
    let shared = matches!(request.uri().path(), "/" | "/jobs" | "/replicas" | "/api/jobs" | "/api/replicas");
    if super::is_probe(request.uri().path()) {
        return next.run(request).await;
    }
    if shared && request.method() == axum::http::Method::GET {
        return console.inner.worker.run(next.run(request)).await;
    }
    let Ok(_slot) = console.inner.requests.clone().try_acquire_owned() else {
        let mut error = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "busy",
            "the console is serving as many requests as it allows at once: try again in a moment",
        );
        error.retry_after = Some(Duration::from_secs(1));
        return error.into_response();
    };
    // Assets and the API's description read nothing; everything else waits for a turn to
    // read Redis (the snapshot's views take theirs inside the shared read).
    let path = request.uri().path();
    let turn = if matches!(path, "/console.js" | "/console.css" | "/api/openapi.json") {
        None
    } else {
        match console.redis_permit(tokio::time::Instant::now() + console.inner.budget.time).await {
            Ok(turn) => Some(turn),
            Err(e) => return e.into_response(),
        }
    };
    // On the console's own thread (see `worker`), holding the turn until the response is ready.
    console
        .inner
        .worker
        .run(async move {
            let response = next.run(request).await;
            drop(turn);
            response
        })
        .await
}
