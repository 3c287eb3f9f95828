#![doc = include_str!("../README.md")]
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
//! - **Host check**: a request whose `Host` is neither a loopback address (`127.0.0.1`, `::1`,
//!   `localhost`, any port) nor a name allowed with [`Console::allow_host`] is refused (421
//!   `host_not_allowed`), so a web page cannot read a loopback console through DNS rebinding.
//!   `GET /healthz` is exempt (probes address the pod by IP) and reveals nothing.
//! - **Reads** (`GET`: the pages, `/api/locks`, `/api/jobs`, `/api/replicas`, ...) are open to
//!   whoever passes the host check, unless [`Console::require_token_for_reads`] asks for the
//!   bearer token on them too.
//! - **Actions** (`DELETE /api/locks/{key}`, `POST /api/jobs/{name}/pause|resume|run|backfill`,
//!   `POST /api/jobs/{name}/runs/{id}/retry`) need
//!   `Authorization: Bearer <token>` (the scheme in any case) with an admin token: 401 without
//!   it (or with a wrong one), 403 `forbidden` with a token that may only read
//!   ([`Console::read_token`]), 403 in read-only mode or when no token is configured. Refused
//!   tokens are limited per client address and from all addresses together (429 past either,
//!   [`Console::failed_token_limit`], [`Console::failed_token_budget`]); a correct token is
//!   accepted whatever others sent, so guessers cannot lock operators out, and a token too easy
//!   to guess is refused when the console is configured ([`token_problem`]). A cross-site
//!   request is refused (403) before anything else: the browser's `Sec-Fetch-Site` and
//!   `Origin` must say same origin, and a page of another site cannot attach the
//!   `Authorization` header without a CORS preflight, which the console never answers. Each
//!   token has a name ([`Console::named_token`]): the history and the pause flag say who acted,
//!   and every action and every refused token is logged through `tracing` (target
//!   `lock_console::audit`) with the client's address, the token's fingerprint and the outcome
//!   (an unlock also with the holder it released).
//! - **Only locks**: the lock endpoints read and release only keys that some lock client
//!   recorded holding (its holdings record, see `lock_core::schema::holdings_key`); any other
//!   key is 404 `not_a_lock` and its value is never read (only its type, to tell a free name),
//!   whatever it looks like.
//! - **Its own connection**: the console reads through a client of its own built from the
//!   given one's configuration, at most 2 requests reading Redis at once, every request served
//!   on a worker thread of its own, so an embedded console never starves the service's locks,
//!   renewals or scheduler.
//! - Bad input (an unknown job, an unbounded pattern, control characters, a huge `n`) gets a
//!   4xx with a JSON error naming the problem (a wrong method too: 405); Redis failing gets a
//!   503. No response, page or log line holds the Redis URL or its password.
//!
//! [`serve`] runs the router on a listener with a header-read timeout (a half-sent or idle
//! connection is closed), caps on connections that half-open connections cannot hold shut (a
//! new connection takes the place of the least valuable one), and a shutdown that ends within
//! a bound even with connections left half open; `lockctl serve` uses it.
//!
//! The API is described by an OpenAPI 3.1 document at `GET /api/openapi.json`.

// The OpenAPI document is one `json!` literal, nested deeper than the default limit allows.
#![recursion_limit = "256"]

mod access;
mod api;
mod error;
pub mod json;
mod openapi;
mod page;
mod runs;
mod serve;
mod snapshot;
mod view;
mod worker;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use lock_core::LockClient;

pub use access::token::{
    DEFAULT_TOKEN_NAME, MIN_TOKEN_DISTINCT, MIN_TOKEN_GUESSES_LOG10, MIN_TOKEN_LEN, Role, token_problem,
};
pub use error::ConsoleError;
pub use serve::{ServeOptions, serve};

/// Requests served at once by default.
const DEFAULT_MAX_REQUESTS: usize = 32;
/// Requests reading Redis at once by default (the shared snapshot's read counts as one).
const DEFAULT_REDIS_WORK: usize = 2;

/// The console: what it reads (a [`LockClient`]) and who may act (its tokens, read-only mode),
/// which hosts it answers for and how many refused tokens it tolerates. Cheap to clone.
#[derive(Clone)]
pub struct Console {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    client: LockClient,
    /// The action tokens, each with the name the history records for its actions.
    tokens: Vec<access::token::NamedToken>,
    read_only: bool,
    lock_pattern: String,
    /// Host names allowed besides loopback, lower case; `None`: any host (the check is off).
    allowed_hosts: Option<Vec<String>>,
    reads_need_token: bool,
    /// Refused tokens per client address, shared by every clone of the console.
    attempts: Arc<access::attempts::FailedAttempts>,
    /// How often and how much the shared snapshot reads.
    budget: snapshot::Budget,
    /// The shared snapshot of what the overview, jobs and replicas show.
    snapshot: Arc<snapshot::Shared>,
    /// Requests being served, at most its permits; beyond it, 429.
    requests: Arc<tokio::sync::Semaphore>,
    /// The thread every request runs on, apart from the embedding service's runtime.
    worker: Arc<worker::Worker>,
    /// Requests reading Redis at once, at most its permits; the others wait their turn within
    /// the read budget's time, then get 429.
    redis_work: Arc<tokio::sync::Semaphore>,
    /// Jobs' whole histories, kept briefly for the counts over time and a run's slot.
    retained: Arc<runs::retained::Retained>,
}

impl Console {
    /// A console over `client`, with no action token (actions are refused until
    /// [`token`](Self::token) sets one), `*` as the locks page's default pattern, answering
    /// only for loopback hosts, open reads, and 401 for at most 5 refused tokens per client
    /// address a minute and 100 from all addresses, 429 beyond (see
    /// [`failed_token_limit`](Self::failed_token_limit) and
    /// [`failed_token_budget`](Self::failed_token_budget)).
    ///
    /// The console reads and acts through a client of its own, built from `client`'s
    /// configuration ([`LockClient::with_own_connection`]): its Redis work never queues behind
    /// the locks, renewals and liveness lease of the service it is embedded in, and it reads
    /// Redis for at most 2 requests at once ([`max_concurrent_redis_reads`](Self::max_concurrent_redis_reads)).
    pub fn new(client: LockClient) -> Self {
        let client = match client.with_own_connection() {
            Ok(own) => own,
            Err(e) => {
                tracing::warn!(error = %e, "the console could not build a client of its own: it shares the service's connection");
                client
            }
        };
        Console {
            inner: Arc::new(Inner {
                client,
                tokens: Vec::new(),
                read_only: false,
                lock_pattern: "*".into(),
                allowed_hosts: Some(Vec::new()),
                reads_need_token: false,
                attempts: Arc::new(access::attempts::FailedAttempts::default()),
                budget: snapshot::Budget::default(),
                snapshot: Arc::new(snapshot::Shared::default()),
                requests: Arc::new(tokio::sync::Semaphore::new(DEFAULT_MAX_REQUESTS)),
                redis_work: Arc::new(tokio::sync::Semaphore::new(DEFAULT_REDIS_WORK)),
                worker: Arc::new(worker::Worker::start()),
                retained: Arc::default(),
            }),
        }
    }

    /// Sets the bearer token that actions must present, named [`DEFAULT_TOKEN_NAME`]
    /// (`console`) in the history and the audit log; replaces any token set before. Errors if
    /// it is weak (see [`token_problem`]) or contains whitespace or control characters (it
    /// travels in a header).
    pub fn token(self, token: impl Into<String>) -> Result<Self, ConsoleError> {
        let named = access::token::NamedToken::new(DEFAULT_TOKEN_NAME, token.into(), Role::Admin)?;
        Ok(self.with(|inner| inner.tokens = vec![named]))
    }

    /// Adds an admin token named `name`: an action presenting it is recorded as done by `name`
    /// (in the history, the pause flag and the audit log). Names are 1 to 64 letters, digits
    /// and `.-_@`; two tokens may share neither a name nor a value. Errors as
    /// [`token`](Self::token) does on a weak token.
    pub fn named_token(
        self,
        name: impl Into<String>,
        token: impl Into<String>,
    ) -> Result<Self, ConsoleError> {
        self.token_with_role(name, token, Role::Admin)
    }

    /// Adds a token named `name` that may only read: with
    /// [`require_token_for_reads`](Self::require_token_for_reads) it opens the pages and the
    /// API's reads; every action presenting it is refused (403 `forbidden`) and audited. For
    /// dashboards, scripts that collect, and people who look but do not act.
    pub fn read_token(self, name: impl Into<String>, token: impl Into<String>) -> Result<Self, ConsoleError> {
        self.token_with_role(name, token, Role::Read)
    }

    /// Adds a token named `name` with `role` (see [`named_token`](Self::named_token) and
    /// [`read_token`](Self::read_token)).
    pub fn token_with_role(
        self,
        name: impl Into<String>,
        token: impl Into<String>,
        role: Role,
    ) -> Result<Self, ConsoleError> {
        let named = access::token::NamedToken::new(&name.into(), token.into(), role)?;
        if let Some(clash) = self.inner.tokens.iter().find(|t| t.name == named.name || t.same_secret(&named))
        {
            return Err(ConsoleError::DuplicateToken(format!(
                "a token named `{}` (or with the same value) is already set: give each operator their own",
                clash.name
            )));
        }
        Ok(self.with(|inner| inner.tokens.push(named)))
    }

    /// Read-only mode: every action is refused with 403, token or not; the page shows no
    /// buttons.
    pub fn read_only(self, read_only: bool) -> Self {
        self.with(|inner| inner.read_only = read_only)
    }

    /// The pattern the locks page lists when none is given (default `*`), matched against the
    /// names the clients' holdings records give (never a scan of the keyspace).
    pub fn lock_pattern(self, pattern: impl Into<String>) -> Self {
        let pattern = pattern.into();
        self.with(|inner| inner.lock_pattern = pattern)
    }

    /// Also answers requests whose `Host` is `name` (any port), e.g. the name a reverse proxy
    /// forwards. Loopback hosts are always allowed. Errors on a name with a port, a scheme, a
    /// path or characters no host name has.
    pub fn allow_host(self, name: impl AsRef<str>) -> Result<Self, ConsoleError> {
        let name = access::host::normalize_allowed(name.as_ref())?;
        Ok(self.with(|inner| {
            if let Some(hosts) = &mut inner.allowed_hosts {
                hosts.push(name);
            }
        }))
    }

    /// Turns the host check off: for a service that mounts the router behind its own checks
    /// of `Host` (the console then answers whatever name the request gives).
    pub fn allow_any_host(self) -> Self {
        self.with(|inner| inner.allowed_hosts = None)
    }

    /// Reads (the pages and `GET /api/...`) need the bearer token too: 401 without it.
    /// `/healthz` and the page's script and style stay open. A browser then needs a proxy that
    /// adds the header; scripts send it themselves.
    pub fn require_token_for_reads(self, required: bool) -> Self {
        self.with(|inner| inner.reads_need_token = required)
    }

    /// After `max` refused tokens from one client address within `window`, every further
    /// refused token from that address gets 429 `too_many_attempts` (with `Retry-After`)
    /// instead of 401 until the window ends (default: 5 a minute). A correct token is always
    /// accepted: refusals never lock an operator out, even behind a proxy where every client
    /// shares the proxy's address. Errors if `max` is 0 or `window` zero.
    pub fn failed_token_limit(self, max: u32, window: Duration) -> Result<Self, ConsoleError> {
        let attempts = self.inner.attempts.with_address_limit(max, window)?;
        Ok(self.with(|inner| inner.attempts = Arc::new(attempts)))
    }

    /// After `max` refused tokens from all client addresses together within `window`, every
    /// further refused token gets 429 `too_many_attempts` until the window ends (default: 100 a
    /// minute), however many addresses they come from. A correct token is always accepted.
    /// Errors if `max` is 0 or `window` zero.
    pub fn failed_token_budget(self, max: u32, window: Duration) -> Result<Self, ConsoleError> {
        let attempts = self.inner.attempts.with_global_limit(max, window)?;
        Ok(self.with(|inner| inner.attempts = Arc::new(attempts)))
    }

    /// How the overview, the jobs list and the replicas are read: one snapshot shared by
    /// every viewer, read again at most once per `interval`, each read taking at most `time`
    /// and checking at most `keys` recorded holds for the locks it counts (the locks come from
    /// the clients' holdings records, never a scan of the keyspace). What the budget cut short
    /// is said missing and the answer says `partial`; what was read is shown. Defaults: 2 s,
    /// 2 s, 100,000 holds. Errors if `time` is zero or `keys` is 0.
    pub fn snapshot_budget(
        self,
        interval: Duration,
        time: Duration,
        keys: usize,
    ) -> Result<Self, ConsoleError> {
        let budget = snapshot::Budget::new(interval, time, keys)?;
        Ok(self.with(|inner| {
            inner.budget = budget;
            inner.snapshot = Arc::new(snapshot::Shared::default());
        }))
    }

    /// Most requests served at once (default 32); a request beyond it gets 429 `busy` at once
    /// rather than adding to Redis's load. Not counted: `/healthz`, and the views served from
    /// the shared snapshot (`/`, `/jobs`, `/replicas`, `GET /api/jobs`, `GET /api/replicas`),
    /// which cost one read per interval however many wait for it. Errors if `max` is 0.
    pub fn max_concurrent_requests(self, max: usize) -> Result<Self, ConsoleError> {
        if max == 0 || max > tokio::sync::Semaphore::MAX_PERMITS {
            return Err(ConsoleError::InvalidLimit(format!(
                "the limit on concurrent requests must be from 1 to {}",
                tokio::sync::Semaphore::MAX_PERMITS
            )));
        }
        Ok(self.with(|inner| inner.requests = Arc::new(tokio::sync::Semaphore::new(max))))
    }

    /// Most requests reading Redis at once (default 2; the shared snapshot's read counts as
    /// one however many viewers wait for it): the others wait for a turn for at most the
    /// snapshot budget's time, then get 429 `busy`. What bounds the console's share of Redis
    /// and of its own connection, so a crowd of viewers cannot starve the service it is
    /// embedded in. Errors if `max` is 0.
    pub fn max_concurrent_redis_reads(self, max: usize) -> Result<Self, ConsoleError> {
        if max == 0 || max > tokio::sync::Semaphore::MAX_PERMITS {
            return Err(ConsoleError::InvalidLimit(format!(
                "the limit on concurrent Redis reads must be from 1 to {}",
                tokio::sync::Semaphore::MAX_PERMITS
            )));
        }
        Ok(self.with(|inner| inner.redis_work = Arc::new(tokio::sync::Semaphore::new(max))))
    }

    /// A turn to read Redis, waited for until `deadline` (then 429 `busy`).
    pub(crate) async fn redis_permit(
        &self,
        deadline: tokio::time::Instant,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, error::ApiError> {
        let wait = self.inner.redis_work.clone().acquire_owned();
        match tokio::time::timeout_at(deadline, wait).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => {
                let mut error = error::ApiError::new(
                    axum::http::StatusCode::TOO_MANY_REQUESTS,
                    "busy",
                    "the console is reading Redis for as many requests as it allows at once: try again in a moment",
                );
                error.retry_after = Some(Duration::from_secs(1));
                Err(error)
            }
        }
    }

    fn with(self, change: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = Arc::unwrap_or_clone(self.inner);
        change(&mut inner);
        Console { inner: Arc::new(inner) }
    }

    /// Whether actions can be allowed at all (an admin token is set and not read-only).
    pub fn actions_enabled(&self) -> bool {
        self.inner.tokens.iter().any(|t| t.role == Role::Admin) && !self.inner.read_only
    }

    pub(crate) fn client(&self) -> &LockClient {
        &self.inner.client
    }

    /// The console's routes: the pages, their assets, `/healthz` and `/api/...`. Mount it
    /// where you like (`Router::nest("/admin", ...)`): every link and request of the page is
    /// relative. The client's address, for the audit log and the limit on refused tokens,
    /// comes from axum's `ConnectInfo<SocketAddr>` (which [`serve`] provides; with
    /// `axum::serve`, use `into_make_service_with_connect_info`).
    ///
    /// ```no_run
    /// # async fn demo(client: lock_core::LockClient, api: axum::Router) -> Result<(), Box<dyn std::error::Error>> {
    /// let console = lock_console::Console::new(client).token(std::env::var("LOCKCTL_ADMIN_TOKEN")?)?;
    /// // Under /admin of the service's own router, behind its middleware.
    /// let app = api.nest("/admin", console.router());
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:8088").await?;
    /// axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>()).await?;
    /// # Ok(()) }
    /// ```
    pub fn router(&self) -> Router {
        Router::new()
            .route("/healthz", get(api::healthz))
            .route("/livez", get(api::healthz))
            .route("/readyz", get(api::readyz))
            .route("/", get(page::overview::overview))
            .route("/locks", get(page::locks::locks))
            .route("/locks/{key}", get(page::lock::lock))
            .route("/jobs", get(page::jobs::jobs))
            .route("/jobs/{name}", get(page::job::job))
            .route("/jobs/{name}/runs/{id}", get(page::run::run))
            .route("/replicas", get(page::replicas::replicas))
            .route("/elections", get(page::elections::elections))
            .route("/console.js", get(page::assets::script))
            .route("/console.css", get(page::assets::style))
            .route("/api/openapi.json", get(openapi::document))
            .route("/api/locks", get(api::locks))
            .route("/api/locks/{key}", get(api::lock).delete(api::unlock))
            .route("/api/jobs", get(api::jobs))
            .route("/api/jobs/{name}/history", get(runs::api::history))
            .route("/api/jobs/{name}/stats", get(runs::api::stats))
            .route("/api/jobs/{name}/runs/{id}", get(runs::api::run))
            .route("/api/jobs/{name}/runs/{id}/retry", post(runs::api::retry))
            .route("/api/jobs/{name}/backfill", post(runs::api::backfill))
            .route("/api/jobs/{name}/pause", post(api::pause))
            .route("/api/jobs/{name}/resume", post(api::resume))
            .route("/api/jobs/{name}/run", post(api::run))
            .route("/api/replicas", get(api::replicas))
            .route("/api/{*rest}", get(api::not_found).post(api::not_found).delete(api::not_found))
            .fallback(page::assets::not_found)
            .method_not_allowed_fallback(api::method_not_allowed)
            // Outermost last: headers on every response, then the host check, the limit on
            // requests in flight, then reads.
            .layer(axum::middleware::from_fn_with_state(self.clone(), access::auth::reads))
            .layer(axum::middleware::from_fn_with_state(self.clone(), access::busy::admit))
            .layer(axum::middleware::from_fn_with_state(self.clone(), access::host::check))
            .layer(axum::middleware::from_fn(access::auth::security_headers))
            .with_state(self.clone())
    }
}

impl fmt::Debug for Console {
    // The tokens are secrets: only their names are shown. The client's Debug never shows its
    // password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Console")
            .field(
                "tokens",
                &self
                    .inner
                    .tokens
                    .iter()
                    .map(|t| format!("{} ({})", t.name, t.role.as_str()))
                    .collect::<Vec<_>>(),
            )
            .field("read_only", &self.inner.read_only)
            .field("lock_pattern", &self.inner.lock_pattern)
            .field("allowed_hosts", &self.inner.allowed_hosts)
            .field("reads_need_token", &self.inner.reads_need_token)
            .finish_non_exhaustive()
    }
}
