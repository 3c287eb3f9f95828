//! The one multiplexed connection that lock commands share: connecting (to a node, the
//! Sentinel master or the cluster, see `deploy`), reconnecting after a failure, and sending
//! scripts, commands and pipelines with a timeout.

pub(crate) mod batches;
pub(crate) mod deploy;
pub(crate) mod eviction;
pub(crate) mod wake_ups;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, RwLock, Weak};
use std::time::{Duration, Instant};

use deadpool_redis::Pool;
use deadpool_redis::redis::{self, FromRedisValue, RedisError, Script};

use crate::conn::deploy::slots::{self, Node, SlotMap};
use crate::conn::deploy::{Deployment, Link};
use crate::conn::eviction::EvictionCheck;
use crate::error::{LockError, Result, is_connection_error};
use crate::schema::eval::Eval;
use crate::sync::{lock_unpoisoned, read_unpoisoned, write_unpoisoned};

/// How long a cluster slot map is trusted before it is read again (a redirected reply makes it
/// stale at once).
const SLOT_MAP_TTL: Duration = Duration::from_secs(30);

/// The connection generation a command went out on (0: not sent).
#[derive(Debug, Default)]
pub(crate) struct Sent(AtomicU64);

impl Sent {
    fn record(&self, generation: u64) {
        self.0.store(generation, Ordering::Relaxed);
    }

    /// The generation, if the command was sent.
    pub(crate) fn generation(&self) -> Option<u64> {
        Some(self.0.load(Ordering::Relaxed)).filter(|g| *g != 0)
    }
}

/// What must be done on a new connection before any command uses it: the liveness check of
/// the client's identity (`held::liveness`, which this layer does not import). A Redis that
/// restarted without persistence has forgotten the client's liveness key, and a lock taken
/// with that identity's token would be taken over at once by anyone who finds it.
pub(crate) trait OnConnect: Send + Sync {
    /// Runs on `link`, before it is shared; an error fails the connection (nothing was sent on
    /// it but this check, so the command that connected fails as not sent).
    fn on_connect<'a>(&'a self, link: &'a Link) -> Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>>;
}

/// The lock commands' connection, opened on first use and again after a failure.
pub(crate) struct Conn {
    deployment: Deployment,
    /// The live connection, with a generation so that a failed command drops only the
    /// connection it failed on. Read by every command, written only on (re)connecting.
    slot: RwLock<Option<(u64, Link)>>,
    generation: AtomicU64,
    /// A cluster's slot map, for splitting pipelines by node, and when it was read.
    slot_map: Mutex<Option<(Instant, SlotMap)>>,
    /// How long one command (or one pipeline) may take.
    pub(crate) timeout: Duration,
    /// What to do on connecting to a Redis that may evict lock keys.
    eviction: EvictionCheck,
    /// Run on every new connection before it is shared (weak: its owner holds this `Conn`).
    on_connect: OnceLock<Weak<dyn OnConnect>>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("deployment", &self.deployment)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Conn {
    pub(crate) fn new(deployment: Deployment, timeout: Duration, eviction: EvictionCheck) -> Self {
        Conn {
            deployment,
            slot: RwLock::new(None),
            generation: AtomicU64::new(0),
            slot_map: Mutex::new(None),
            timeout,
            eviction,
            on_connect: OnceLock::new(),
        }
    }

    /// Sets what runs on every new connection before it is shared (once; later calls are
    /// ignored: one client has one liveness lease).
    pub(crate) fn set_on_connect(&self, hook: Weak<dyn OnConnect>) {
        if self.on_connect.set(hook).is_err() {
            tracing::debug!("a connection hook was already set; keeping the first");
        }
    }

    pub(crate) fn deployment(&self) -> &Deployment {
        &self.deployment
    }

    /// The command the scripts announce hand-offs with: sharded in a cluster, so the message
    /// goes through the key's shard only (its channel is in the key's slot).
    pub(crate) fn publish_command(&self) -> &'static str {
        if self.deployment.is_cluster() { "SPUBLISH" } else { "PUBLISH" }
    }

    /// The pool of a single-node client.
    pub(crate) fn pool(&self) -> Option<&Pool> {
        self.deployment.pool()
    }

    /// Runs a script, reconnecting and retrying once if the connection had failed. Only for
    /// scripts whose second run reports what the first did (extend, leave, a take-over's
    /// release); see [`invoke_once`](Self::invoke_once).
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        eval: &Eval,
        action: impl Fn() -> String,
    ) -> Result<T> {
        match self.invoke_once(eval, &action, &Sent::default()).await {
            Err(e) if e.outcome_unknown() => self.invoke_once(eval, &action, &Sent::default()).await,
            result => result,
        }
    }

    /// Runs a script once, recording in `sent` the connection it went out on: an acquisition
    /// or release whose reply is lost must be cleaned up, not sent again (a second run would
    /// report the first one's effect as someone else's).
    pub(crate) async fn invoke_once<T: FromRedisValue>(
        &self,
        eval: &Eval,
        action: impl Fn() -> String,
        sent: &Sent,
    ) -> Result<T> {
        let (generation, mut conn) = self.connection(&action).await?;
        sent.record(generation);
        eval.run(&mut conn).await.map_err(|e| self.failed(generation, action(), e))
    }

    /// Sends one command, once, recording in `sent` the connection it went out on.
    pub(crate) async fn query_once<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        action: impl Fn() -> String,
        sent: &Sent,
    ) -> Result<T> {
        let (generation, mut conn) = self.connection(&action).await?;
        sent.record(generation);
        cmd.query_async(&mut conn).await.map_err(|e| self.failed(generation, action(), e))
    }

    /// Sends a command whose second run changes nothing the first did not (a renewal), again
    /// at once on a new connection if the first send found its connection broken: a reset
    /// connection is noticed only when a command fails on it, and the next pass would be late.
    pub(crate) async fn query_idempotent<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        action: impl Fn() -> String,
    ) -> Result<T> {
        match self.query(cmd, &action).await {
            Err(e) if e.connection_broken() => self.query(cmd, action).await,
            result => result,
        }
    }

    /// Sends one command, once.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        action: impl Fn() -> String,
    ) -> Result<T> {
        self.query_once(cmd, action, &Sent::default()).await
    }

    /// `WAIT replicas timeout` on the connection that wrote `key` (in a cluster, on the
    /// master of its slot): the number of replicas that acknowledged this connection's writes.
    pub(crate) async fn wait_replicas(&self, key: &str, replicas: u32, timeout: Duration) -> Result<u32> {
        let action = || format!("waiting for replicas to acknowledge lock `{key}`");
        let (generation, mut conn) = self.connection(&action).await?;
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(replicas).arg(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX).max(1));
        let reply = conn.query_at_key(cmd, key).await.map_err(|e| self.failed(generation, action(), e))?;
        Ok(match reply {
            redis::Value::Int(acked) => u32::try_from(acked).unwrap_or(0),
            _ => 0,
        })
    }

    /// The keys matching `pattern` (and of `kind`, e.g. "string", if given), at most about
    /// `limit`: `SCAN` on the node, or on every master of a cluster.
    pub(crate) async fn scan(&self, pattern: &str, kind: Option<&str>, limit: usize) -> Result<Vec<String>> {
        Ok(self.scan_within(pattern, kind, limit, usize::MAX).await?.0)
    }

    /// [`scan`](Self::scan), examining at most about `budget` keys per node (`SCAN` walks the
    /// whole keyspace whatever `MATCH` says, so only this bounds the work); also whether the
    /// scan was complete (every node walked to the end, or `limit` found).
    pub(crate) async fn scan_within(
        &self,
        pattern: &str,
        kind: Option<&str>,
        limit: usize,
        budget: usize,
    ) -> Result<(Vec<String>, bool)> {
        /// Keys one `SCAN` call examines, about.
        const COUNT: usize = 1000;
        let action =
            || format!("scanning for keys matching `{}`", pattern.chars().take(120).collect::<String>());
        let nodes: Vec<Option<Node>> = if self.deployment.is_cluster() {
            let map = self.slot_map().await.ok_or_else(|| {
                LockError::redis(action(), RedisError::from(std::io::Error::other("no cluster slot map")))
            })?;
            map.masters().into_iter().map(Some).collect()
        } else {
            vec![None]
        };
        let mut found = Vec::new();
        let mut complete = true;
        for node in nodes {
            let mut cursor: u64 = 0;
            let mut examined: usize = 0;
            loop {
                let (generation, mut conn) = self.connection(&action).await?;
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(COUNT);
                if let Some(kind) = kind {
                    scan.arg("TYPE").arg(kind);
                }
                let reply = conn
                    .query_on_node(scan, node.as_ref())
                    .await
                    .map_err(|e| self.failed(generation, action(), e))?;
                let (next, batch): (u64, Vec<String>) =
                    redis::from_redis_value(reply).map_err(|e| LockError::redis(action(), e.into()))?;
                found.extend(batch);
                cursor = next;
                examined = examined.saturating_add(COUNT);
                if cursor == 0 || found.len() >= limit {
                    break;
                }
                if examined >= budget {
                    complete = false;
                    break;
                }
            }
        }
        Ok((found, complete))
    }

    /// A failed command: drops its connection if that is what failed.
    fn failed(&self, generation: u64, action: String, e: RedisError) -> LockError {
        if is_connection_error(&e) {
            self.drop_connection(generation);
        }
        if e.is_cluster_error() {
            self.slot_map_stale();
        }
        LockError::redis(action, e)
    }

    /// Sends a pipeline (no retry: the caller decides). In a cluster its commands must all be
    /// for keys of one slot, or `node` must name the node that serves all of them.
    pub(crate) async fn query_pipeline<T: FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, RedisError> {
        self.query_pipeline_on(pipe, None).await
    }

    /// [`query_pipeline`](Self::query_pipeline), sent to `node` in a cluster.
    pub(crate) async fn query_pipeline_on<T: FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
        node: Option<Node>,
    ) -> Result<T, RedisError> {
        self.query_pipeline_once(pipe, node, &Sent::default()).await
    }

    /// [`query_pipeline_on`](Self::query_pipeline_on), recording in `sent` the connection it
    /// went out on (for the clean-up of acquisitions whose reply is lost).
    pub(crate) async fn query_pipeline_once<T: FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
        node: Option<Node>,
        sent: &Sent,
    ) -> Result<T, RedisError> {
        let (generation, conn) = match self.connection(&String::new).await {
            Ok(c) => c,
            Err(
                LockError::Redis { source, .. }
                | LockError::Auth { source, .. }
                | LockError::Tls { source, .. },
            ) => {
                return Err(source);
            }
            Err(e) => return Err(RedisError::from(std::io::Error::other(e.to_string()))),
        };
        sent.record(generation);
        let result = pipe.query_async(&mut conn.to_node(node)).await;
        if let Err(e) = &result {
            if is_connection_error(e) {
                self.drop_connection(generation);
            }
            self.slot_map_stale();
        }
        result
    }

    /// See [`LockClient::get_many`](crate::LockClient::get_many).
    pub(crate) async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<String>>, RedisError> {
        const MGET_CHUNK: usize = 1000;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let indexed: Vec<(usize, &str)> = keys.iter().map(String::as_str).enumerate().collect();
        let cluster = self.deployment.is_cluster();
        let groups = self.split_by_node(indexed, |(_, key)| key).await;
        let reads = groups.into_iter().map(|(node, items)| async move {
            let mut pipe = redis::pipe();
            if cluster {
                // One bad key (another type) spoils only its own value.
                pipe.ignore_errors();
                for (_, key) in &items {
                    pipe.cmd("GET").arg(*key);
                }
                let values: Vec<redis::RedisResult<Option<String>>> =
                    self.query_pipeline_on(&pipe, node).await?;
                Ok::<_, RedisError>(
                    items
                        .into_iter()
                        .zip(values)
                        .map(|((i, _), v)| (i, v.ok().flatten()))
                        .collect::<Vec<_>>(),
                )
            } else {
                for chunk in items.chunks(MGET_CHUNK) {
                    let cmd = pipe.cmd("MGET");
                    for (_, key) in chunk {
                        cmd.arg(*key);
                    }
                }
                let chunks: Vec<Vec<Option<String>>> = self.query_pipeline_on(&pipe, node).await?;
                Ok(items.into_iter().map(|(i, _)| i).zip(chunks.into_iter().flatten()).collect())
            }
        });
        let mut values = vec![None; keys.len()];
        for read in futures_util::future::join_all(reads).await {
            for (i, value) in read? {
                values[i] = value;
            }
        }
        Ok(values)
    }

    /// Groups `items` by the cluster node serving their keys (one group of all of them on a
    /// single node or Sentinel master), so each group can go out as one pipeline. Items whose
    /// node is unknown get a group of their own each, routed by their key.
    pub(crate) async fn split_by_node<T>(
        &self,
        items: Vec<T>,
        key_of: impl Fn(&T) -> &str,
    ) -> Vec<(Option<Node>, Vec<T>)> {
        if !self.deployment.is_cluster() || items.is_empty() {
            return vec![(None, items)];
        }
        let map = self.slot_map().await;
        let mut groups: Vec<(Option<Node>, Vec<T>)> = Vec::new();
        for item in items {
            let node = map.as_ref().and_then(|m| m.node_of(slots::slot(key_of(&item).as_bytes())).cloned());
            match node {
                Some(node) => match groups.iter_mut().find(|(n, _)| n.as_ref() == Some(&node)) {
                    Some((_, group)) => group.push(item),
                    None => groups.push((Some(node), vec![item])),
                },
                None => groups.push((None, vec![item])),
            }
        }
        groups
    }

    /// The cluster's slot map, read again when stale.
    async fn slot_map(&self) -> Option<SlotMap> {
        if let Some((read_at, map)) = lock_unpoisoned(&self.slot_map).as_ref()
            && read_at.elapsed() < SLOT_MAP_TTL
        {
            return Some(map.clone());
        }
        let reply: redis::Value = self
            .query(&redis::cmd("CLUSTER").arg("SLOTS").to_owned(), || {
                "reading the cluster's slot map".to_owned()
            })
            .await
            .inspect_err(
                |e| tracing::debug!(error = %crate::error::ErrorChain(e), "could not read the cluster's slot map"),
            )
            .ok()?;
        let map = SlotMap::parse(&reply)?;
        *lock_unpoisoned(&self.slot_map) = Some((Instant::now(), map.clone()));
        Some(map)
    }

    fn slot_map_stale(&self) {
        *lock_unpoisoned(&self.slot_map) = None;
    }

    /// Loads `script` into the server's script cache (before a pipeline of EVALSHA calls; in
    /// a cluster, on every master).
    pub(crate) async fn load_script(&self, script: &Script) -> Result<()> {
        let action = || "loading a lock script".to_owned();
        let (_, mut conn) = self.connection(&action).await?;
        script.load_async(&mut conn).await.map(drop).map_err(|e| LockError::redis(action(), e))
    }

    /// The connection for one request (counted in `lock_redis_requests_total`), with the
    /// generation to record for it (see [`per_command`](Self::per_command)).
    async fn connection(&self, action: &impl Fn() -> String) -> Result<(u64, Link)> {
        crate::telemetry::request_sent();
        if let Some((generation, conn)) = read_unpoisoned(&self.slot).as_ref() {
            return Ok((self.per_command(*generation), conn.clone()));
        }
        // Boxed: connecting is rare, and its future would otherwise be inlined into (and
        // copied along with) every command's future.
        let (generation, conn) = Box::pin(self.connect(action())).await?;
        Ok((self.per_command(generation), conn))
    }

    /// The generation a command records: what orders a later clean-up after a command whose
    /// reply was lost (Redis runs one socket's commands in order). On one node that is the
    /// connection's, one socket for its whole life. A cluster connection stays while redis-rs
    /// replaces a failed node's socket underneath, so two of its commands are not known to
    /// share a socket: each gets a generation of its own, and a lost reply there is settled
    /// only by finding the token, or by its lease running out.
    fn per_command(&self, generation: u64) -> u64 {
        if self.deployment.is_cluster() {
            self.generation.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            generation
        }
    }

    async fn connect(&self, action: String) -> Result<(u64, Link)> {
        let link = self.deployment.connect(&action).await?;
        // Before the link is shared: with EvictionCheck::Error no command may use it.
        eviction::check(&link, self.eviction, self.timeout).await?;
        // Also before: a command that connected (its token chosen before) must not be the
        // first to use an identity that Redis has forgotten; the hook settles the identity on
        // this link first, so such a command finds its identity dead on its reply.
        if let Some(hook) = self.on_connect.get().and_then(Weak::upgrade) {
            match tokio::time::timeout(self.timeout, hook.on_connect(&link)).await {
                Ok(result) => result?,
                Err(_) => {
                    let timed_out = std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no answer to the liveness check within {:?}", self.timeout),
                    );
                    return Err(LockError::redis(action, RedisError::from(timed_out)));
                }
            }
        }
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let mut slot = write_unpoisoned(&self.slot);
        // Another task may have connected meanwhile; keep the first so all share one.
        let (generation, conn) = slot.get_or_insert((generation, link));
        Ok((*generation, conn.clone()))
    }

    fn drop_connection(&self, generation: u64) {
        // A cluster connection is kept: redis-rs reconnects a failed node and re-reads the
        // slot map by itself, while a new connection must reach every node of the map first.
        // With one shard cut off (a partition, a node that accepts connections but never
        // answers) rebuilding would take the client off every shard until it heals.
        if self.deployment.is_cluster() {
            return;
        }
        let mut slot = write_unpoisoned(&self.slot);
        if slot.as_ref().is_some_and(|(g, _)| *g == generation) {
            *slot = None;
        }
    }
}
