//! [`Deployment`]: the Redis deployment a client talks to, and how to open connections to it —
//! the lock commands' connection, and (for one node or a Sentinel master) the client the
//! pub/sub connection for waiting is opened from.

use std::fmt;
use std::time::Duration;

use deadpool_redis::redis::cluster::{ClusterClient, ClusterClientBuilder};
use deadpool_redis::redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use deadpool_redis::redis::{
    self, AsyncConnectionConfig, ConnectionAddr, IntoConnectionInfo, RedisError, TlsMode,
};
use deadpool_redis::{Pool, PoolError};

use super::link::Link;
use crate::error::{LockError, Result};

/// The deployment and what connecting to it needs.
pub(crate) struct Deployment {
    kind: Kind,
    timeout: Duration,
}

enum Kind {
    /// One node: lock connections are taken out of the pool; pub/sub opens from the client.
    Single { pool: Pool, client: redis::Client },
    /// A master found through sentinels, looked up again on every (re)connection so that a
    /// failover is followed.
    Sentinel { sentinel: tokio::sync::Mutex<SentinelClient>, master: String },
    /// A cluster.
    Cluster { client: ClusterClient, pubsub: ClusterClientBuilderRecipe },
}

/// How to build the cluster client of the sharded pub/sub connection (a builder cannot be
/// cloned, and the push sender is only known when the connection is opened).
pub(crate) struct ClusterClientBuilderRecipe {
    nodes: Vec<String>,
    credentials: Option<(String, String)>,
    root_ca: Option<Vec<u8>>,
    timeout: Duration,
}

impl ClusterClientBuilderRecipe {
    /// A builder for the cluster's nodes, with the client's credentials, CA and timeouts.
    pub(crate) fn builder(&self) -> ClusterClientBuilder {
        cluster_builder(&self.nodes, self.credentials.as_ref(), self.root_ca.as_deref(), self.timeout)
    }
}

/// Where connections for pub/sub come from.
pub(crate) enum PubSubSource<'a> {
    /// A node's client (a single node, or the master just found through Sentinel).
    Node(Box<redis::Client>),
    /// The cluster, through sharded pub/sub.
    Cluster(&'a ClusterClientBuilderRecipe),
}

impl Deployment {
    /// One node at `url`, through `pool` (given, or built here).
    pub(crate) fn single(
        url: &str,
        pool: Option<Pool>,
        credentials: Option<&(String, String)>,
        root_ca: Option<&[u8]>,
        pool_size: usize,
        timeout: Duration,
    ) -> Result<Deployment> {
        let mut info = url.into_connection_info().map_err(|e| invalid_url(&e))?;
        if let Some((user, password)) = credentials {
            let settings = info.redis_settings().clone().set_username(user).set_password(password);
            info = info.set_redis_settings(settings);
        }
        let client = open_client(info, root_ca)?;
        let pool = match pool {
            Some(pool) => pool,
            None => {
                let manager = deadpool_redis::Manager::new_with_config(
                    client.get_connection_info().clone(),
                    connection_config(timeout),
                )
                .map_err(|e| invalid_url(&e))?;
                Pool::builder(manager)
                    .max_size(pool_size)
                    .runtime(deadpool_redis::Runtime::Tokio1)
                    .build()
                    .map_err(|e| LockError::Config(format!("could not build the connection pool: {e}")))?
            }
        };
        Ok(Deployment { kind: Kind::Single { pool, client }, timeout })
    }

    /// The master `master` behind `sentinels`; `node` carries the master's credentials, db and
    /// TLS (its host is ignored).
    pub(crate) fn sentinel(
        sentinels: &[String],
        master: &str,
        node: &str,
        credentials: Option<&(String, String)>,
        root_ca: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<Deployment> {
        if sentinels.is_empty() {
            return Err(LockError::Config(
                "no sentinel addresses: give at least one, e.g. redis://10.0.0.1:26379".into(),
            ));
        }
        if master.trim().is_empty() {
            return Err(LockError::Config(
                "the Sentinel master name is empty: use the name from `sentinel monitor <name> ...`".into(),
            ));
        }
        let mut addrs = Vec::with_capacity(sentinels.len());
        let mut sentinel_auth = None;
        for url in sentinels {
            let info = url.as_str().into_connection_info().map_err(|e| {
                LockError::Config(format!(
                    "invalid sentinel address ({e}); use redis://host:26379 (rediss:// for TLS)"
                ))
            })?;
            if let ConnectionAddr::Unix(_) = info.addr() {
                return Err(LockError::Config(
                    "sentinels are reached over TCP: use redis://host:26379".into(),
                ));
            }
            let settings = info.redis_settings();
            if let Some(password) = settings.password() {
                sentinel_auth = Some((settings.username().map(str::to_owned), password.to_owned()));
            }
            addrs.push(info.addr().clone());
        }
        let sentinel_tls = addrs.iter().any(|a| matches!(a, ConnectionAddr::TcpTls { .. }));
        let node = node.into_connection_info().map_err(|e| invalid_url(&e))?;
        let settings = node.redis_settings();
        let mut builder = SentinelClientBuilder::new(addrs, master, SentinelServerType::Master)
            .map_err(|e| LockError::Config(format!("invalid Sentinel configuration: {e}")))?
            .set_client_to_redis_db(settings.db());
        let (user, password) = match credentials {
            Some((user, password)) => (Some(user.as_str()), Some(password.as_str())),
            None => (settings.username(), settings.password()),
        };
        if let Some(user) = user {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = password {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some((user, password)) = &sentinel_auth {
            if let Some(user) = user {
                builder = builder.set_client_to_sentinel_username(user);
            }
            builder = builder.set_client_to_sentinel_password(password);
        }
        if matches!(node.addr(), ConnectionAddr::TcpTls { .. }) {
            builder = builder.set_client_to_redis_tls_mode(TlsMode::Secure);
        }
        #[cfg(feature = "tls")]
        if let Some(pem) = root_ca {
            builder = builder.set_client_to_redis_certificates(certificates(pem));
            if sentinel_tls {
                builder = builder.set_client_to_sentinel_certificates(certificates(pem));
            }
        }
        #[cfg(not(feature = "tls"))]
        let _ = (root_ca, sentinel_tls);
        let sentinel =
            builder.build().map_err(|e| LockError::Config(format!("invalid Sentinel configuration: {e}")))?;
        Ok(Deployment {
            kind: Kind::Sentinel { sentinel: tokio::sync::Mutex::new(sentinel), master: master.to_owned() },
            timeout,
        })
    }

    /// A cluster reached through `nodes` (some of its nodes' URLs).
    pub(crate) fn cluster(
        nodes: &[String],
        credentials: Option<&(String, String)>,
        root_ca: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<Deployment> {
        if nodes.is_empty() {
            return Err(LockError::Config(
                "no cluster nodes: give at least one, e.g. redis://10.0.0.1:6379".into(),
            ));
        }
        for url in nodes {
            url.as_str().into_connection_info().map_err(|e| {
                LockError::Config(format!("invalid cluster node address ({e}); use redis://host:port"))
            })?;
        }
        let client = cluster_builder(nodes, credentials, root_ca, timeout)
            .build()
            .map_err(|e| LockError::Config(format!("invalid cluster configuration: {e}")))?;
        let pubsub = ClusterClientBuilderRecipe {
            nodes: nodes.to_vec(),
            credentials: credentials.cloned(),
            root_ca: root_ca.map(<[u8]>::to_vec),
            timeout,
        };
        Ok(Deployment { kind: Kind::Cluster { client, pubsub }, timeout })
    }

    /// The pool of a single-node client.
    pub(crate) fn pool(&self) -> Option<&Pool> {
        match &self.kind {
            Kind::Single { pool, .. } => Some(pool),
            _ => None,
        }
    }

    /// Whether this is a cluster (scripts publish with SPUBLISH, batches split by node).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.kind, Kind::Cluster { .. })
    }

    /// A new lock-commands connection, checked with a PING (so a refused password shows now).
    pub(crate) async fn connect(&self, action: &str) -> Result<Link> {
        let timed_out = |what: &str| {
            let e = std::io::Error::new(std::io::ErrorKind::TimedOut, format!("{what} timed out"));
            LockError::redis(action, RedisError::from(e))
        };
        let mut link = match &self.kind {
            Kind::Single { pool, .. } => {
                let pooled = tokio::time::timeout(self.timeout, pool.get())
                    .await
                    .map_err(|_| timed_out("taking a pooled connection"))?
                    .map_err(|e| match e {
                        PoolError::Backend(e) => LockError::redis(action, e),
                        e => LockError::Pool { action: action.to_owned(), source: std::sync::Arc::new(e) },
                    })?;
                // Taken out of the pool for good: the application's pooled connections must
                // not be the one lock commands share (a blocking command or a SELECT there
                // would stall or misdirect every lock).
                let mut conn = deadpool_redis::Connection::take(pooled);
                conn.set_response_timeout(self.timeout);
                Link::Node(conn)
            }
            Kind::Sentinel { .. } => {
                let client = self.master_client(action).await?;
                let conn = tokio::time::timeout(
                    self.timeout,
                    client.get_multiplexed_async_connection_with_config(&connection_config(self.timeout)),
                )
                .await
                .map_err(|_| timed_out("connecting to the master"))?
                .map_err(|e| LockError::redis(action, e))?;
                Link::Node(conn)
            }
            Kind::Cluster { client, .. } => {
                let conn = tokio::time::timeout(self.timeout, client.get_async_connection())
                    .await
                    .map_err(|_| timed_out("connecting to the cluster"))?
                    .map_err(|e| LockError::redis(action, e))?;
                Link::Cluster(conn)
            }
        };
        // A server that wants a password answers PING with NOAUTH: a clear error now rather
        // than a protocol error on the first script.
        redis::cmd("PING").query_async::<()>(&mut link).await.map_err(|e| LockError::redis(action, e))?;
        Ok(link)
    }

    /// Where the pub/sub connection for waiting comes from: for Sentinel, the master as the
    /// sentinels name it now.
    pub(crate) async fn pubsub_source(&self) -> Result<PubSubSource<'_>> {
        match &self.kind {
            Kind::Single { client, .. } => Ok(PubSubSource::Node(Box::new(client.clone()))),
            Kind::Sentinel { .. } => {
                Ok(PubSubSource::Node(Box::new(self.master_client("opening the pub/sub connection").await?)))
            }
            Kind::Cluster { pubsub, .. } => Ok(PubSubSource::Cluster(pubsub)),
        }
    }

    /// Asks the sentinels for the master (checked to be one).
    async fn master_client(&self, action: &str) -> Result<redis::Client> {
        let Kind::Sentinel { sentinel, master } = &self.kind else {
            return Err(LockError::Config("not a Sentinel deployment".into()));
        };
        let lookup = async { sentinel.lock().await.async_get_client().await };
        // The lookup asks each sentinel in turn, and checks the master it names.
        match tokio::time::timeout(self.timeout.saturating_mul(2), lookup).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => {
                Err(LockError::redis(format!("{action}: finding master `{master}` through Sentinel"), e))
            }
            Err(_) => {
                let e = std::io::Error::new(std::io::ErrorKind::TimedOut, "no sentinel answered in time");
                Err(LockError::redis(
                    format!("{action}: finding master `{master}` through Sentinel"),
                    e.into(),
                ))
            }
        }
    }
}

impl fmt::Debug for Deployment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No addresses or credentials: only the kind of deployment.
        let kind = match &self.kind {
            Kind::Single { .. } => "single node",
            Kind::Sentinel { .. } => "sentinel",
            Kind::Cluster { .. } => "cluster",
        };
        f.debug_struct("Deployment").field("kind", &kind).field("timeout", &self.timeout).finish()
    }
}

fn connection_config(timeout: Duration) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new().set_connection_timeout(Some(timeout)).set_response_timeout(Some(timeout))
}

/// The shortest wait before redis-rs retries a cluster command (ms); each wait is drawn between
/// it and [`RETRY_WAIT_MAX_MS`], and the retries end with the command timeout.
const RETRY_WAIT_MIN_MS: u64 = 10;
/// The longest wait before redis-rs retries a cluster command (ms): how late a command can be to
/// find a master promoted after a failover.
const RETRY_WAIT_MAX_MS: u64 = 50;

/// How many retries at waits of about [`RETRY_WAIT_MIN_MS`]..[`RETRY_WAIT_MAX_MS`] fill
/// `timeout`, at least redis-rs's default of 16.
fn retries_within(timeout: Duration) -> u32 {
    let per_retry = u128::from(RETRY_WAIT_MIN_MS);
    u32::try_from(timeout.as_millis() / per_retry).unwrap_or(u32::MAX).clamp(16, 10_000)
}

fn cluster_builder(
    nodes: &[String],
    credentials: Option<&(String, String)>,
    root_ca: Option<&[u8]>,
    timeout: Duration,
) -> ClusterClientBuilder {
    let mut builder = ClusterClientBuilder::new(nodes.iter().map(String::as_str))
        .connection_timeout(timeout)
        .response_timeout(timeout)
        // A command (redirections and retries included) gets the command timeout, as on a node.
        .overall_response_timeout(Some(timeout))
        // redis-rs waits at least 1.28 s before retrying a command whose slot has no reachable
        // master (CLUSTERDOWN while the cluster votes, no connection to the failed node): longer
        // than a command timeout. A waiter's try sent during a failover then only timed out,
        // even once the replica was promoted, and the hand-off it was woken for waited for it
        // (0.7-0.85 s after the release). Short waits retry on the promoted master at once.
        // Exponent base 1: every wait is drawn from min..max. (redis-rs computes
        // `base^retry * factor` unchecked, which overflows past about 60 retries at base 2.)
        .min_retry_wait(RETRY_WAIT_MIN_MS)
        .max_retry_wait(RETRY_WAIT_MAX_MS)
        .retry_wait_formula(RETRY_WAIT_MAX_MS, 1)
        // Enough retries to span the command timeout at those waits, so the timeout, not the
        // count, ends a command's attempts (16, the default, ran out in about half a second and
        // returned the last MOVED to the dead master).
        .retries(retries_within(timeout));
    if let Some((user, password)) = credentials {
        builder = builder.username(user).password(password);
    }
    #[cfg(feature = "tls")]
    if let Some(pem) = root_ca {
        builder = builder.certs(certificates(pem));
    }
    #[cfg(not(feature = "tls"))]
    let _ = root_ca;
    builder
}

fn open_client(info: redis::ConnectionInfo, root_ca: Option<&[u8]>) -> Result<redis::Client> {
    #[cfg(feature = "tls")]
    if let Some(pem) = root_ca {
        return redis::Client::build_with_tls(info, certificates(pem)).map_err(|e| {
            LockError::Config(format!("could not use the TLS root CA (tls_root_ca expects PEM): {e}"))
        });
    }
    #[cfg(not(feature = "tls"))]
    let _ = root_ca;
    redis::Client::open(info).map_err(|e| invalid_url(&e))
}

#[cfg(feature = "tls")]
fn certificates(pem: &[u8]) -> redis::TlsCertificates {
    redis::TlsCertificates { client_tls: None, root_cert: Some(pem.to_vec()) }
}

// The URL itself is not echoed: it may carry a password.
pub(crate) fn invalid_url(e: &RedisError) -> LockError {
    LockError::Config(format!(
        "invalid Redis URL ({e}); expected redis://[[user]:password@]host[:port][/db] \
         or rediss://... for TLS"
    ))
}
