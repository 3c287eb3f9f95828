//! The limit on requests served at once: past it, a request is answered 429 `busy` at once, so
//! that a crowd of viewers (or a script in a loop) cannot pile reads onto Redis.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::Console;
use crate::error::ApiError;

/// Serves `request` if a slot is free (held until its response is ready), else 429.
/// `/healthz` is not counted: a probe must not fail because viewers are busy.
pub(crate) async fn admit(State(console): State<Console>, request: Request, next: Next) -> Response {
    if request.uri().path() == "/healthz" {
        return next.run(request).await;
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
    next.run(request).await
}
