//! An admin console for [`lock_core`] locks and [`lock_scheduler`] jobs: a server-rendered web
//! page and a JSON API, as an axum [`Router`] that a service mounts behind its own
//! middleware, or that `lockctl serve` runs standalone.
//!
//! ```no_run
//! # async fn demo(client: lock_core::LockClient) -> Result<(), Box<dyn std::error::Error>> {
//! let console = lock_console::Console::new(client).token(std::env::var("LOCKCTL_ADMIN_TOKEN")?)?;
//! let app = axum::Router::new().nest("/admin", console.router());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8088").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
//!
//! - **Reads** (`GET`: the pages, `/api/locks`, `/api/jobs`, `/api/replicas`, ...) are open to
//!   whoever reaches the address: bind it to loopback or put it behind your own access control.
//! - **Actions** (`DELETE /api/locks/{key}`, `POST /api/jobs/{name}/pause|resume|run`) need
//!   `Authorization: Bearer <token>`: 401 without it (or with a wrong one), 403 in read-only
//!   mode or when no token is configured. A cross-site request is refused (403) before
//!   anything else: the browser's `Sec-Fetch-Site` and `Origin` must say same origin, and a
//!   page of another site cannot attach the `Authorization` header without a CORS preflight,
//!   which the console never answers.
//! - Bad input (an unknown job, an unbounded pattern, control characters, a huge `n`) gets a
//!   4xx with a JSON error naming the problem; Redis failing gets a 503. No response, page or
//!   log line holds the Redis URL or its password.
//!
//! The API is described by an OpenAPI 3.1 document at `GET /api/openapi.json`.

mod api;
mod auth;
mod error;
pub mod json;
mod openapi;
mod page;
mod view;

use std::fmt;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use lock_core::LockClient;

pub use error::ConsoleError;

/// Shortest accepted action token, in bytes: a token is a shared secret, not a password.
pub const MIN_TOKEN_LEN: usize = 16;

/// The console: what it reads (a [`LockClient`]) and who may act (its token, read-only mode).
/// Cheap to clone.
#[derive(Clone)]
pub struct Console {
    inner: Arc<Inner>,
}

struct Inner {
    client: LockClient,
    token: Option<String>,
    read_only: bool,
    lock_pattern: String,
}

impl Console {
    /// A console over `client`, with no action token (actions are refused until
    /// [`token`](Self::token) sets one) and `*` as the locks page's default pattern.
    pub fn new(client: LockClient) -> Self {
        Console { inner: Arc::new(Inner { client, token: None, read_only: false, lock_pattern: "*".into() }) }
    }

    /// Sets the bearer token that actions must present. Errors if it is shorter than
    /// [`MIN_TOKEN_LEN`] bytes or contains whitespace or control characters (it travels in a
    /// header).
    pub fn token(self, token: impl Into<String>) -> Result<Self, ConsoleError> {
        let token = token.into();
        if token.len() < MIN_TOKEN_LEN {
            return Err(ConsoleError::WeakToken(format!(
                "the admin token is {} bytes long; use at least {MIN_TOKEN_LEN} (e.g. `openssl rand -hex 16`)",
                token.len()
            )));
        }
        if token.chars().any(|c| c.is_whitespace() || c.is_control() || !c.is_ascii()) {
            return Err(ConsoleError::WeakToken(
                "the admin token must be printable ASCII without spaces (it is sent in an HTTP header)"
                    .into(),
            ));
        }
        Ok(self.with(|inner| inner.token = Some(token)))
    }

    /// Read-only mode: every action is refused with 403, token or not; the page shows no
    /// buttons.
    pub fn read_only(self, read_only: bool) -> Self {
        self.with(|inner| inner.read_only = read_only)
    }

    /// The pattern the locks page lists when none is given (default `*`). A narrower one
    /// (`lock:*`) keeps the page's `SCAN` short on a Redis shared with other data.
    pub fn lock_pattern(self, pattern: impl Into<String>) -> Self {
        let pattern = pattern.into();
        self.with(|inner| inner.lock_pattern = pattern)
    }

    fn with(self, change: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = match Arc::try_unwrap(self.inner) {
            Ok(inner) => inner,
            Err(shared) => Inner {
                client: shared.client.clone(),
                token: shared.token.clone(),
                read_only: shared.read_only,
                lock_pattern: shared.lock_pattern.clone(),
            },
        };
        change(&mut inner);
        Console { inner: Arc::new(inner) }
    }

    /// Whether actions can be allowed at all (a token is set and not read-only).
    pub fn actions_enabled(&self) -> bool {
        self.inner.token.is_some() && !self.inner.read_only
    }

    pub(crate) fn client(&self) -> &LockClient {
        &self.inner.client
    }

    /// The console's routes: the pages, their assets and `/api/...`. Mount it where you like
    /// (`Router::nest("/admin", ...)`): every link and request of the page is relative.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/", get(page::overview))
            .route("/locks", get(page::locks))
            .route("/jobs", get(page::jobs))
            .route("/jobs/{name}", get(page::job))
            .route("/replicas", get(page::replicas))
            .route("/console.js", get(page::script))
            .route("/console.css", get(page::style))
            .route("/api/openapi.json", get(openapi::document))
            .route("/api/locks", get(api::locks))
            .route("/api/locks/{key}", get(api::lock).delete(api::unlock))
            .route("/api/jobs", get(api::jobs))
            .route("/api/jobs/{name}/history", get(api::history))
            .route("/api/jobs/{name}/pause", post(api::pause))
            .route("/api/jobs/{name}/resume", post(api::resume))
            .route("/api/jobs/{name}/run", post(api::run))
            .route("/api/replicas", get(api::replicas))
            .route("/api/{*rest}", get(api::not_found).post(api::not_found).delete(api::not_found))
            .fallback(page::not_found)
            .layer(axum::middleware::from_fn(auth::security_headers))
            .with_state(self.clone())
    }
}

impl fmt::Debug for Console {
    // The token is a secret; the client's Debug never shows its password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Console")
            .field("token", &self.inner.token.as_ref().map(|_| "<set>"))
            .field("read_only", &self.inner.read_only)
            .field("lock_pattern", &self.inner.lock_pattern)
            .finish_non_exhaustive()
    }
}
