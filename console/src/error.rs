//! The console's errors: [`ConsoleError`] for its configuration, and [`ApiError`], what a
//! request that cannot be served gets (a status and a JSON body naming the problem).

use std::time::Duration;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use lock_core::{ErrorChain, LockError};
use lock_scheduler::control::ControlError;
use serde_json::json;

/// A console configured wrongly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsoleError {
    /// The action token is too short, has too few different characters, or has characters a
    /// header cannot carry.
    #[error("{0}")]
    WeakToken(String),
    /// A token's name is empty, too long or has characters other than letters, digits and
    /// `.-_@`.
    #[error("{0}")]
    InvalidTokenName(String),
    /// Two tokens share a name or a value.
    #[error("{0}")]
    DuplicateToken(String),
    /// A name given to [`Console::allow_host`](crate::Console::allow_host) is not a host name.
    #[error("{0}")]
    InvalidHost(String),
    /// The limit on refused tokens is zero.
    #[error("{0}")]
    InvalidLimit(String),
}

/// A request the console refuses or cannot serve: an HTTP status, a stable machine-readable
/// `code` and a message for people. Rendered as `{"error": {"code": ..., "message": ...}}`.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
    /// For a 429: when to try again (the `Retry-After` header, whole seconds).
    pub(crate) retry_after: Option<Duration>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into(), retry_after: None }
    }

    pub(crate) fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub(crate) fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": { "code": self.code, "message": self.message } });
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(after) = self.retry_after {
            // Rounded up: a client that waits exactly this long is let through.
            let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

impl From<ControlError> for ApiError {
    fn from(e: ControlError) -> Self {
        let message = ErrorChain(&e).to_string();
        let (status, code) = match &e {
            ControlError::InvalidJob(_) => (StatusCode::BAD_REQUEST, "invalid_job"),
            ControlError::UnknownJob { .. } => (StatusCode::NOT_FOUND, "unknown_job"),
            ControlError::NoLiveReplica { .. } => (StatusCode::CONFLICT, "no_live_replica"),
            ControlError::RunPending { .. } => (StatusCode::CONFLICT, "run_pending"),
            ControlError::NotTaken { .. } => (StatusCode::SERVICE_UNAVAILABLE, "not_taken"),
            ControlError::InvalidBackfill { .. } => (StatusCode::BAD_REQUEST, "invalid_backfill"),
            ControlError::InvalidArgument { .. } => (StatusCode::BAD_REQUEST, "invalid_argument"),
            _ => (StatusCode::SERVICE_UNAVAILABLE, "redis_unavailable"),
        };
        ApiError::new(status, code, message)
    }
}

impl From<LockError> for ApiError {
    fn from(e: LockError) -> Self {
        let message = ErrorChain(&e).to_string();
        let (status, code) = match &e {
            LockError::InvalidKey { .. } => (StatusCode::BAD_REQUEST, "invalid_key"),
            LockError::InvalidOptions(_) | LockError::Config(_) => (StatusCode::BAD_REQUEST, "invalid_input"),
            LockError::ChangedHands { .. } => (StatusCode::CONFLICT, "changed_hands"),
            // Someone else's data (or the protocol's own bookkeeping): no lock by that name.
            LockError::NotALock { .. } => (StatusCode::NOT_FOUND, "not_a_lock"),
            _ => (StatusCode::SERVICE_UNAVAILABLE, "redis_unavailable"),
        };
        ApiError::new(status, code, message)
    }
}
