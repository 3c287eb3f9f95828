//! [`LockClientBuilder`]: validates a client's configuration and wires its parts together.

use std::fmt;
use std::time::Duration;

use deadpool_redis::redis::{self, AsyncConnectionConfig, RedisError};
use deadpool_redis::{Manager, Pool, Runtime};

use crate::acquire::Core;
use crate::conn::Conn;
use crate::error::{LockError, Result};
use crate::options::{ClientConfig, validate_lease};
use crate::waiters::Waiters;

/// Watchdog lease when none is configured (Redisson's number); renewed every third of it.
pub const DEFAULT_WATCHDOG_LEASE: Duration = Duration::from_secs(30);
/// How long one Redis command may take before it fails.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
/// First fallback retry of a waiter that heard no release message; doubles up to the cap.
pub const DEFAULT_WAIT_BACKOFF: Duration = Duration::from_millis(50);
/// Longest fallback between retries. Releases normally wake a waiter at once through
/// pub/sub; this only bounds the wait when a message is missed or the holder crashed.
pub const DEFAULT_MAX_WAIT_BACKOFF: Duration = Duration::from_secs(1);
/// Connections in a pool the client creates itself. Lock commands share one multiplexed
/// connection; the pool is there for reconnects and for the application's own commands.
const DEFAULT_POOL_SIZE: usize = 4;
/// Longest fallback retry accepted: beyond it a waiter that missed a release message would
/// sit idle for longer than any sensible wait bound.
const MAX_WAIT_BACKOFF_LIMIT: Duration = Duration::from_secs(60);

/// Builds a [`LockClient`](crate::LockClient); start from
/// [`LockClient::builder`](crate::LockClient::builder).
///
/// Its `Debug` output never shows the URL's password.
#[derive(Clone)]
#[must_use]
pub struct LockClientBuilder {
    url: Option<String>,
    pool: Option<Pool>,
    instance_id: Option<String>,
    watchdog_lease: Duration,
    command_timeout: Duration,
    backoff: (Duration, Duration),
}

impl Default for LockClientBuilder {
    fn default() -> Self {
        LockClientBuilder {
            url: None,
            pool: None,
            instance_id: None,
            watchdog_lease: DEFAULT_WATCHDOG_LEASE,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            backoff: (DEFAULT_WAIT_BACKOFF, DEFAULT_MAX_WAIT_BACKOFF),
        }
    }
}

impl LockClientBuilder {
    /// The Redis URL: `redis://[[user]:password@]host[:port][/db]`, or `rediss://` for TLS
    /// (needs the crate's `tls` feature).
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// Run lock commands through this existing pool. The URL is still needed: deadpool-redis
    /// does not expose a pool's address, and waiting uses a dedicated pub/sub connection.
    pub fn pool(mut self, pool: Pool) -> Self {
        self.pool = Some(pool);
        self
    }

    /// The identity written into every owner token and log line. Defaults to `POD_NAME`,
    /// then `HOSTNAME`, then a generated `instance-<hex>`.
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// The lease of watchdog locks (default 30 s); they are renewed every third of it.
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = lease;
        self
    }

    /// How long one Redis command may take (default 2 s). Keep it well under a third of the
    /// shortest lease you use, so a slow reply cannot outlive a renewal window.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// The fallback retry interval of a waiter that hears no release message: starts at
    /// `initial`, doubles, and stays at `max` (defaults 50 ms and 1 s), each jittered and never
    /// later than the holder's remaining lease. Releases wake waiters at once through pub/sub;
    /// this only matters when a holder dies without releasing or a message is missed.
    pub fn wait_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.backoff = (initial, max);
        self
    }

    /// Validates the configuration and wires the client's parts (see `LockClientBuilder::build`
    /// in `client.rs`).
    pub(crate) fn into_core(self) -> Result<Core> {
        let url = self.url.ok_or_else(|| {
            LockError::Config("a Redis URL is required (e.g. redis://127.0.0.1:6379/)".into())
        })?;
        let client = open_url(&url)?;
        validate_lease(self.watchdog_lease, "watchdog lease")?;
        if self.command_timeout.is_zero() {
            return Err(LockError::Config("the command timeout must be greater than zero".into()));
        }
        let (initial, max) = self.backoff;
        if initial.is_zero() || max < initial || max > MAX_WAIT_BACKOFF_LIMIT {
            return Err(LockError::Config(format!(
                "wait_backoff(initial, max) needs 0 < initial <= max <= {MAX_WAIT_BACKOFF_LIMIT:?}, \
                 got initial {initial:?} and max {max:?}"
            )));
        }
        let instance_id = match self.instance_id {
            Some(id) => id,
            None => default_instance_id(),
        };
        validate_instance_id(&instance_id)?;
        let connection_config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.command_timeout))
            .set_response_timeout(Some(self.command_timeout));
        let pool = match self.pool {
            Some(pool) => pool,
            None => {
                let manager =
                    Manager::new_with_config(url.as_str(), connection_config).map_err(|e| invalid_url(&e))?;
                Pool::builder(manager)
                    .max_size(DEFAULT_POOL_SIZE)
                    .runtime(Runtime::Tokio1)
                    .build()
                    .map_err(|e| LockError::Config(format!("could not build the connection pool: {e}")))?
            }
        };
        let config = ClientConfig { instance_id, watchdog_lease: self.watchdog_lease, backoff: self.backoff };
        let conn = std::sync::Arc::new(Conn::new(pool, self.command_timeout));
        let waiters = Waiters::new(client, self.command_timeout);
        Ok(Core::new(config, conn, waiters))
    }
}

fn open_url(url: &str) -> Result<redis::Client> {
    if url.trim().is_empty() {
        return Err(LockError::Config("the Redis URL is empty (e.g. redis://127.0.0.1:6379/)".into()));
    }
    if url.starts_with("rediss://") && !cfg!(feature = "tls") {
        return Err(LockError::Config(
            "rediss:// (TLS) needs lock-core's `tls` feature; enable it or use redis://".into(),
        ));
    }
    #[cfg(feature = "tls")]
    if url.starts_with("rediss://") && rustls::crypto::CryptoProvider::get_default().is_none() {
        // rustls needs a process-wide provider; an application that chose one keeps it.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    redis::Client::open(url).map_err(|e| invalid_url(&e))
}

// The URL itself is not echoed: it may carry a password.
fn invalid_url(e: &RedisError) -> LockError {
    LockError::Config(format!(
        "invalid Redis URL ({e}); expected redis://[[user]:password@]host[:port][/db] \
         or rediss://... for TLS"
    ))
}

fn default_instance_id() -> String {
    ["POD_NAME", "HOSTNAME"]
        .iter()
        .filter_map(|var| std::env::var(var).ok())
        .map(|v| v.trim().to_owned())
        .find(|v| !v.is_empty())
        .unwrap_or_else(|| {
            let id = uuid::Uuid::new_v4().simple().to_string();
            format!("instance-{}", &id[..8])
        })
}

fn validate_instance_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > 256 || id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(LockError::Config(format!(
            "invalid instance id {:?}: use 1 to 256 characters without spaces, e.g. the pod name",
            id.chars().take(64).collect::<String>()
        )));
    }
    Ok(())
}

impl fmt::Debug for LockClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClientBuilder")
            .field("url", &self.url.as_deref().map(redacted))
            .field("pool", &self.pool.as_ref().map(|_| "<pool>"))
            .field("instance_id", &self.instance_id)
            .field("watchdog_lease", &self.watchdog_lease)
            .field("command_timeout", &self.command_timeout)
            .field("wait_backoff", &self.backoff)
            .finish()
    }
}

/// `url` with its password (and user) replaced by `***`, for display.
pub(crate) fn redacted(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else { return "<unparsable url>".to_owned() };
    let rest = &url[scheme_end + 3..];
    let host_start = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..host_start].rfind('@') {
        Some(at) => format!("{}://***@{}", &url[..scheme_end], &rest[at + 1..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_credentials() {
        assert_eq!(redacted("redis://:secret@host:6379/0"), "redis://***@host:6379/0");
        assert_eq!(redacted("rediss://user:p@ss@host/"), "rediss://***@host/");
        assert_eq!(redacted("redis://host:6379/"), "redis://host:6379/");
        assert_eq!(redacted("not a url"), "<unparsable url>");
    }
}
