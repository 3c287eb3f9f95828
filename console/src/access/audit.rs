//! The audit trail: who asked for an action (the client's address, the token's name and
//! fingerprint), what it was, and how it ended, as one structured `tracing` event per action
//! or refusal (target `lock_console::audit`). Tokens never appear, only their fingerprints.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::HeaderMap;
use axum::http::request::Parts;

use crate::error::ApiError;

/// The `tracing` target of audit events.
pub(crate) const TARGET: &str = "lock_console::audit";

/// Who sent a request: its headers and, when the server provides it, the client's address.
pub(crate) struct Caller {
    pub(crate) addr: Option<SocketAddr>,
    pub(crate) headers: HeaderMap,
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let addr = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
        Ok(Caller { addr, headers: parts.headers.clone() })
    }
}

impl Caller {
    /// The address as logs show it (`unknown` without connect info).
    pub(crate) fn addr_text(&self) -> String {
        self.addr.map_or_else(|| "unknown".into(), |a| a.to_string())
    }
}

/// An action being done: what, on what, by whom. Made by the authorization check once the
/// token is accepted; [`Action::finish`] logs the outcome.
pub(crate) struct Action {
    pub(crate) kind: &'static str,
    pub(crate) target: String,
    pub(crate) client: String,
    /// The token's name: what the history records as the actor.
    pub(crate) actor: String,
    pub(crate) fingerprint: String,
    /// What an unlock released: the holder's token (an owner token, not a console secret), so
    /// that the audit line says whom the lock was taken from.
    pub(crate) holder: Option<String>,
}

impl Action {
    /// Logs how the action ended: `ok`, or the error's code. Passes the result through.
    pub(crate) fn finish<T>(&self, result: Result<T, ApiError>) -> Result<T, ApiError> {
        match &result {
            Ok(_) => match &self.holder {
                Some(holder) => tracing::info!(
                    target: TARGET,
                    action = self.kind,
                    target_name = ?self.target,
                    client = %self.client,
                    actor = %self.actor,
                    token = %self.fingerprint,
                    released = ?holder,
                    outcome = "ok",
                    "console action done"
                ),
                None => tracing::info!(
                    target: TARGET,
                    action = self.kind,
                    target_name = ?self.target,
                    client = %self.client,
                    actor = %self.actor,
                    token = %self.fingerprint,
                    outcome = "ok",
                    "console action done"
                ),
            },
            Err(e) => tracing::warn!(
                target: TARGET,
                action = self.kind,
                target_name = ?self.target,
                client = %self.client,
                actor = %self.actor,
                token = %self.fingerprint,
                outcome = e.code,
                status = e.status.as_u16(),
                "console action failed"
            ),
        }
        result
    }
}

/// Logs a refused request: an action (or a read that needs the token) turned away before
/// anything was done.
pub(crate) fn refused(
    kind: &'static str,
    target: &str,
    caller: &Caller,
    fingerprint: &str,
    error: &ApiError,
) {
    tracing::warn!(
        target: TARGET,
        action = kind,
        target_name = ?target,
        client = %caller.addr_text(),
        token = %fingerprint,
        outcome = error.code,
        status = error.status.as_u16(),
        "console request refused"
    );
}
