//! The console's errors: [`ConsoleError`] for its configuration, and [`ApiError`], what a
//! request that cannot be served gets (a status and a JSON body naming the problem).

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
    /// The action token is too short or has characters a header cannot carry.
    #[error("{0}")]
    WeakToken(String),
}

/// A request the console refuses or cannot serve: an HTTP status, a stable machine-readable
/// `code` and a message for people. Rendered as `{"error": {"code": ..., "message": ...}}`.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into() }
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
            _ => (StatusCode::SERVICE_UNAVAILABLE, "redis_unavailable"),
        };
        ApiError::new(status, code, message)
    }
}
