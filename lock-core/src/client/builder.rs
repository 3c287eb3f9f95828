//! [`LockClientBuilder`]: validates a client's configuration and wires its parts together.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::Pool;

use crate::acquire::Core;
use crate::client::LockClient;
use crate::conn::Conn;
use crate::conn::deploy::Deployment;
use crate::conn::deploy::url::{self, Spec};
use crate::conn::eviction::EvictionCheck;
use crate::conn::wake_ups::WakeUps;
use crate::error::{LockError, Result};
use crate::options::{ClientConfig, validate_lease};
use crate::replica_ack::ReplicaAck;

/// Watchdog lease when none is configured (Redisson's number); renewed every third of it.
pub const DEFAULT_WATCHDOG_LEASE: Duration = Duration::from_secs(30);
/// How long one Redis command may take before it fails.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
/// First fallback retry of a waiter that heard no release message; doubles up to the cap.
pub const DEFAULT_WAIT_BACKOFF: Duration = Duration::from_millis(50);
/// Longest fallback between retries. Releases normally wake a waiter at once through
/// pub/sub; this only bounds the wait when a message is missed or the holder crashed.
pub const DEFAULT_MAX_WAIT_BACKOFF: Duration = Duration::from_secs(1);
/// TTL of a client's liveness key (renewed every third of it): a crashed replica's locks are
/// taken over this long after it stopped, and a process stalled longer than this loses its
/// locks. Short enough that a crashed replica's scheduled job runs again within ~10 s.
pub const DEFAULT_LIVENESS_TTL: Duration = Duration::from_secs(6);
/// Shortest hand-off reservation: a released lock waits this long (or the command timeout,
/// if longer) for the waiter it was handed to before anyone else may take it.
const MIN_HANDOFF: Duration = Duration::from_millis(100);
/// Connections in a pool the client creates itself. Lock commands share one multiplexed
/// connection; the pool is there for reconnects and for the application's own commands.
const DEFAULT_POOL_SIZE: usize = 4;
/// Longest fallback retry accepted: beyond it a waiter that missed a release message would
/// sit idle for longer than any sensible wait bound.
const MAX_WAIT_BACKOFF_LIMIT: Duration = Duration::from_secs(60);

/// Builds a [`LockClient`](crate::LockClient); start from
/// [`LockClient::builder`](crate::LockClient::builder).
///
/// Name the deployment with exactly one of [`url`](Self::url) (any of the URL forms below),
/// [`sentinel`](Self::sentinel) or [`cluster`](Self::cluster).
///
/// Its `Debug` output never shows passwords (URLs are shown with `***` for their credentials).
#[derive(Clone)]
#[must_use]
pub struct LockClientBuilder {
    url: Option<String>,
    sentinel: Option<(Vec<String>, String)>,
    cluster: Option<Vec<String>>,
    credentials: Option<(String, String)>,
    tls_root_ca: Option<Vec<u8>>,
    replica_ack: Option<ReplicaAck>,
    pool: Option<Pool>,
    instance_id: Option<String>,
    watchdog_lease: Duration,
    liveness_ttl: Duration,
    command_timeout: Duration,
    backoff: (Duration, Duration),
    eviction: EvictionCheck,
}

impl Default for LockClientBuilder {
    fn default() -> Self {
        LockClientBuilder {
            url: None,
            sentinel: None,
            cluster: None,
            credentials: None,
            tls_root_ca: None,
            replica_ack: None,
            pool: None,
            instance_id: None,
            watchdog_lease: DEFAULT_WATCHDOG_LEASE,
            liveness_ttl: DEFAULT_LIVENESS_TTL,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            backoff: (DEFAULT_WAIT_BACKOFF, DEFAULT_MAX_WAIT_BACKOFF),
            eviction: EvictionCheck::Warn,
        }
    }
}

impl LockClientBuilder {
    /// Validates the configuration and builds the client. Connects lazily: an unreachable
    /// Redis shows up as [`LockError::Redis`] on first use, and the client recovers by
    /// itself once Redis is back.
    pub fn build(self) -> Result<LockClient> {
        let mut origin = self.clone();
        origin.pool = None;
        let origin = Arc::new(origin);
        Ok(LockClient { core: Arc::new(self.into_core()?), origin })
    }

    /// Where Redis is, as a URL (what `REDIS_URL` holds for [`LockClient::from_env`](crate::LockClient::from_env)):
    ///
    /// - one node: `redis://[[user]:password@]host[:port][/db]`, `rediss://...` for TLS
    ///   (needs the crate's `tls` feature);
    /// - a master behind Sentinel:
    ///   `redis+sentinel://[[user]:password@]host1[:port1][,host2[:port2]...]/master_name[/db]`
    ///   (sentinel port 26379 by default; the credentials are the master's, the sentinels are
    ///   reached without any; `rediss+sentinel://` for TLS to the sentinels and the master);
    /// - a Redis Cluster: `redis+cluster://[[user]:password@]host1[:port1][,host2[:port2]...]`
    ///   (port 6379 by default; any of its nodes will do; `rediss+cluster://` for TLS).
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), lock_core::LockError> {
    /// use lock_core::LockClient;
    ///
    /// let single = LockClient::builder().url("redis://:secret@10.0.0.5:6379/0").build()?;
    /// let sentinel = LockClient::builder()
    ///     .url("redis+sentinel://:secret@10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/mymaster")
    ///     .build()?;
    /// let cluster = LockClient::builder()
    ///     .url("redis+cluster://locks:secret@10.0.1.1:6379,10.0.1.2:6379,10.0.1.3:6379")
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// A master behind Redis Sentinel: the sentinels' addresses (`redis://host:26379`, or
    /// `rediss://` for TLS, which then also applies to the master) and the master's name (as in
    /// `sentinel monitor <name> ...`). The client asks the sentinels for the master, checks that
    /// it is one, and asks again after a connection failure or a `READONLY` reply, so it follows
    /// a failover without being rebuilt. The master's credentials go in
    /// [`credentials`](Self::credentials); a sentinel URL's own credentials are the sentinels'.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), lock_core::LockError> {
    /// use lock_core::LockClient;
    ///
    /// let client = LockClient::builder()
    ///     .sentinel(["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"], "mymaster")
    ///     .credentials("locks", "secret")
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn sentinel<S: Into<String>>(
        mut self,
        sentinels: impl IntoIterator<Item = S>,
        master_name: impl Into<String>,
    ) -> Self {
        self.sentinel = Some((sentinels.into_iter().map(Into::into).collect(), master_name.into()));
        self
    }

    /// A Redis Cluster, reached through some of its nodes (`redis://host:port`, or `rediss://`
    /// for TLS); the client learns the others from them and follows `MOVED`/`ASK` redirections
    /// and resharding. Every lock's keys share one slot (hash tags), waiting uses sharded
    /// pub/sub (`SSUBSCRIBE`, Redis 7+), and renewals are pipelined per node.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), lock_core::LockError> {
    /// use lock_core::LockClient;
    ///
    /// let client = LockClient::builder()
    ///     .cluster(["redis://10.0.1.1:6379", "redis://10.0.1.2:6379", "redis://10.0.1.3:6379"])
    ///     .credentials("locks", "secret")
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn cluster<S: Into<String>>(mut self, nodes: impl IntoIterator<Item = S>) -> Self {
        self.cluster = Some(nodes.into_iter().map(Into::into).collect());
        self
    }

    /// The ACL user and password for the Redis nodes (the Sentinel master, the cluster's
    /// nodes, or the single node), instead of credentials in the URL. Use `"default"` as the
    /// user for a plain `requirepass` server. A refused password fails with
    /// [`LockError::Auth`]. Never shown by `Debug`.
    pub fn credentials(mut self, username: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some((username.into(), password.into()));
        self
    }

    /// Trust this CA certificate (PEM) for `rediss://` connections, e.g. a private CA the
    /// servers' certificates are issued from, instead of the system's trust store. Needs the
    /// crate's `tls` feature.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let ca = std::fs::read("/etc/redis/tls/ca.crt")?;
    /// let client = lock_core::LockClient::builder()
    ///     .url("rediss://locks:secret@redis.internal:6380/")
    ///     .tls_root_ca(ca)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn tls_root_ca(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_ca = Some(pem.into());
        self
    }

    /// Opt in to replica acknowledgement: after each acquisition, `WAIT replicas timeout` on
    /// the connection that wrote the lock (in a cluster, on the master of the key's slot).
    /// When fewer replicas acknowledge, [`ReplicaAck::on_shortfall`] decides: release and fail
    /// with [`LockError::ReplicaAck`] (the default), or keep the lock and log a warning.
    ///
    /// This narrows the window in which a failover loses a fresh lock; it does not close it
    /// (replication stays asynchronous; it is not consensus). Fencing tokens are the answer for
    /// correctness. Off by default, and then the uncontended acquisition stays one command.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), lock_core::LockError> {
    /// use std::time::Duration;
    /// use lock_core::{AckShortfall, LockClient, ReplicaAck};
    ///
    /// let client = LockClient::builder()
    ///     .url("redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster")
    ///     .replica_ack(ReplicaAck::new(1, Duration::from_millis(200)).on_shortfall(AckShortfall::Error))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn replica_ack(mut self, ack: ReplicaAck) -> Self {
        self.replica_ack = Some(ack);
        self
    }

    /// Run lock commands through this existing pool (single node only). The URL is still
    /// needed: deadpool-redis does not expose a pool's address, and waiting uses a dedicated
    /// pub/sub connection.
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

    /// The TTL of this client's liveness key (default 6 s), renewed every third of it. Every
    /// owner token names its client's liveness key; a caller that finds a lock held by a
    /// client whose key has expired takes the lock over. So a crashed replica's locks free
    /// about this long after the crash instead of at the end of their leases; and a process
    /// that stalls longer than this (a long GC-like pause, SIGSTOP, a VM freeze) finds its
    /// locks lost when it resumes (`lost()` fires, `is_held()` is false) and uses a new
    /// identity for later locks. Must be more than twice the command timeout.
    pub fn liveness_ttl(mut self, ttl: Duration) -> Self {
        self.liveness_ttl = ttl;
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

    /// What to do when Redis may evict keys that have a TTL, which would let a held lock
    /// vanish under memory pressure: warn (the default), refuse to work, or not check. See
    /// [`EvictionCheck`] for what is checked and when.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), lock_core::LockError> {
    /// use lock_core::{EvictionCheck, LockClient};
    ///
    /// let client = LockClient::builder()
    ///     .url("redis://10.0.0.5:6379/")
    ///     .eviction_check(EvictionCheck::Error)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn eviction_check(mut self, check: EvictionCheck) -> Self {
        self.eviction = check;
        self
    }

    /// Validates the configuration and wires the client's parts (see `LockClientBuilder::build`
    /// in `client.rs`).
    pub(crate) fn into_core(self) -> Result<Core> {
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
        validate_lease(self.liveness_ttl, "liveness TTL")?;
        if self.liveness_ttl <= self.command_timeout.saturating_mul(2) {
            return Err(LockError::Config(format!(
                "liveness_ttl ({:?}) must be more than twice the command timeout ({:?}), so that a \
                 renewal can fail and be retried before the lease runs out",
                self.liveness_ttl, self.command_timeout
            )));
        }
        if let Some(ack) = &self.replica_ack {
            validate_replica_ack(ack, self.command_timeout)?;
        }
        let instance_id = match self.instance_id {
            Some(id) => id,
            None => default_instance_id(),
        };
        validate_instance_id(&instance_id)?;
        let spec = match (self.url, self.sentinel, self.cluster) {
            (Some(url), None, None) => url::parse(&url)?,
            (None, Some((sentinels, master)), None) => {
                Spec::Sentinel { node: sentinel_node_url(&sentinels), sentinels, master }
            }
            (None, None, Some(nodes)) => Spec::Cluster { nodes },
            (None, None, None) => {
                return Err(LockError::Config(
                    "no Redis given: call url(\"redis://127.0.0.1:6379/\"), sentinel([...], \"mymaster\") \
                     or cluster([...]) on the builder (or set REDIS_URL for LockClient::from_env)"
                        .into(),
                ));
            }
            _ => {
                return Err(LockError::Config(
                    "more than one Redis deployment given: use only one of url(...), sentinel(...) and \
                     cluster(...)"
                        .into(),
                ));
            }
        };
        check_tls(&spec, self.tls_root_ca.is_some())?;
        if self.pool.is_some() && !matches!(spec, Spec::Single(_)) {
            return Err(LockError::Config(
                "pool(...) is for a single node only; a Sentinel or cluster client opens its own \
                 connections (drop the pool, or use a redis:// URL)"
                    .into(),
            ));
        }
        let (credentials, ca, timeout) =
            (self.credentials.as_ref(), self.tls_root_ca.as_deref(), self.command_timeout);
        let deployment = match &spec {
            Spec::Single(url) => {
                Deployment::single(url, self.pool, credentials, ca, DEFAULT_POOL_SIZE, timeout)?
            }
            Spec::Sentinel { sentinels, master, node } => {
                Deployment::sentinel(sentinels, master, node, credentials, ca, timeout)?
            }
            Spec::Cluster { nodes } => Deployment::cluster(nodes, credentials, ca, timeout)?,
        };
        let config = ClientConfig {
            instance_id,
            watchdog_lease: self.watchdog_lease,
            liveness_ttl: self.liveness_ttl,
            handoff: self.command_timeout.max(MIN_HANDOFF),
            backoff: self.backoff,
            replica_ack: self.replica_ack,
        };
        let conn = std::sync::Arc::new(Conn::new(deployment, self.command_timeout, self.eviction));
        let waiters = WakeUps::new(conn.clone(), self.command_timeout);
        Ok(Core::new(config, conn, waiters))
    }
}

/// The settings URL of a Sentinel master named by the builder: TLS when the sentinels use it.
fn sentinel_node_url(sentinels: &[String]) -> String {
    let tls = sentinels.iter().any(|s| s.trim_start().starts_with("rediss://"));
    format!("{}://sentinel-master/0", if tls { "rediss" } else { "redis" })
}

fn validate_replica_ack(ack: &ReplicaAck, command_timeout: Duration) -> Result<()> {
    if ack.replicas == 0 {
        return Err(LockError::Config(
            "replica_ack needs at least 1 replica (leave it unset to not wait for replicas)".into(),
        ));
    }
    if ack.timeout.is_zero() || ack.timeout >= command_timeout {
        return Err(LockError::Config(format!(
            "the replica_ack timeout ({:?}) must be greater than zero and shorter than the command \
             timeout ({command_timeout:?}): lower it, or raise command_timeout(...)",
            ack.timeout
        )));
    }
    Ok(())
}

/// TLS needs the `tls` feature; a root CA needs TLS somewhere.
fn check_tls(spec: &Spec, root_ca: bool) -> Result<()> {
    let uses_tls = match spec {
        Spec::Single(url) => url.starts_with("rediss://") || url.starts_with("valkeys://"),
        Spec::Sentinel { sentinels, node, .. } => {
            node.starts_with("rediss://") || sentinels.iter().any(|s| s.trim_start().starts_with("rediss://"))
        }
        Spec::Cluster { nodes } => nodes.iter().any(|n| n.trim_start().starts_with("rediss://")),
    };
    if uses_tls && !cfg!(feature = "tls") {
        return Err(LockError::Config(
            "rediss:// (TLS) needs lock-core's `tls` feature; enable it or use redis://".into(),
        ));
    }
    if root_ca && !uses_tls {
        return Err(LockError::Config(
            "tls_root_ca(...) is set but no address uses TLS: use rediss:// addresses".into(),
        ));
    }
    #[cfg(feature = "tls")]
    if uses_tls && rustls::crypto::CryptoProvider::get_default().is_none() {
        // rustls needs a process-wide provider; an application that chose one keeps it.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    Ok(())
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
            "invalid instance id {:?}: use 1 to 256 bytes (UTF-8) without spaces, e.g. the pod name",
            id.chars().take(64).collect::<String>()
        )));
    }
    Ok(())
}

impl fmt::Debug for LockClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let urls = |urls: &[String]| urls.iter().map(|u| redacted(u)).collect::<Vec<_>>();
        f.debug_struct("LockClientBuilder")
            .field("url", &self.url.as_deref().map(redacted))
            .field("sentinel", &self.sentinel.as_ref().map(|(s, master)| (urls(s), master)))
            .field("cluster", &self.cluster.as_deref().map(urls))
            .field("credentials", &self.credentials.as_ref().map(|(user, _)| format!("{user}:***")))
            .field(
                "tls_root_ca",
                &self.tls_root_ca.as_ref().map(|pem| format!("<{} bytes of PEM>", pem.len())),
            )
            .field("replica_ack", &self.replica_ack)
            .field("pool", &self.pool.as_ref().map(|_| "<pool>"))
            .field("instance_id", &self.instance_id)
            .field("watchdog_lease", &self.watchdog_lease)
            .field("liveness_ttl", &self.liveness_ttl)
            .field("command_timeout", &self.command_timeout)
            .field("wait_backoff", &self.backoff)
            .field("eviction_check", &self.eviction)
            .finish()
    }
}

/// `url` with its password (and user) replaced by `***`, for display.
pub(crate) fn redacted(url: &str) -> String {
    let scheme_end = match url.find("://") {
        // Anything but a scheme before `://` may be a mistyped URL's credentials.
        Some(end) if crate::conn::deploy::url::is_scheme(&url[..end]) => end,
        _ => return "<unparsable url>".to_owned(),
    };
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
        assert_eq!(redacted("redis:/:secret@host://"), "<unparsable url>");
    }
}
