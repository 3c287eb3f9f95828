//! The one multiplexed connection that lock commands share: connecting, reconnecting after a
//! failure, and sending scripts, commands and pipelines with a timeout.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadpool_redis::Pool;
use deadpool_redis::redis::aio::MultiplexedConnection;
use deadpool_redis::redis::{self, FromRedisValue, RedisError, Script};

use crate::error::{LockError, Result, is_connection_error};
use crate::lock_unpoisoned;

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

/// The lock commands' connection, taken out of `pool` on first use and again after a failure.
#[derive(Debug)]
pub(crate) struct Conn {
    pool: Pool,
    /// The live connection, with a generation so that a failed command drops only the
    /// connection it failed on.
    slot: Mutex<Option<(u64, MultiplexedConnection)>>,
    generation: AtomicU64,
    /// How long one command (or one pipeline) may take.
    pub(crate) timeout: Duration,
}

impl Conn {
    pub(crate) fn new(pool: Pool, timeout: Duration) -> Self {
        Conn { pool, slot: Mutex::new(None), generation: AtomicU64::new(0), timeout }
    }

    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Runs a script invocation, reconnecting and retrying once if the connection had failed.
    /// Only for scripts whose second run reports what the first did (extend, leave, a
    /// take-over's release); see [`invoke_once`](Self::invoke_once).
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
        action: impl Fn() -> String,
    ) -> Result<T> {
        match self.invoke_once(invocation, &action, &Sent::default()).await {
            Err(e) if e.outcome_unknown() => self.invoke_once(invocation, &action, &Sent::default()).await,
            result => result,
        }
    }

    /// Runs a script invocation once, recording in `sent` the connection it went out on: an
    /// acquisition or release whose reply is lost must be cleaned up, not sent again (a
    /// second run would report the first one's effect as someone else's).
    pub(crate) async fn invoke_once<T: FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
        action: impl Fn() -> String,
        sent: &Sent,
    ) -> Result<T> {
        let (generation, mut conn) = self.connection(&action).await?;
        sent.record(generation);
        invocation.invoke_async(&mut conn).await.map_err(|e| self.failed(generation, action(), e))
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

    /// Sends one command, once.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        action: impl Fn() -> String,
    ) -> Result<T> {
        self.query_once(cmd, action, &Sent::default()).await
    }

    /// A failed command: drops its connection if that is what failed.
    fn failed(&self, generation: u64, action: String, e: RedisError) -> LockError {
        if is_connection_error(&e) {
            self.drop_connection(generation);
        }
        LockError::redis(action, e)
    }

    /// The generation of the live connection, if one is up. Commands sent on one connection
    /// run in order, so a clean-up that runs on the generation an uncertain command was sent
    /// on runs after it.
    pub(crate) fn generation(&self) -> Option<u64> {
        lock_unpoisoned(&self.slot).as_ref().map(|(g, _)| *g)
    }

    /// Sends a pipeline (no retry: the caller decides).
    pub(crate) async fn query_pipeline<T: FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, RedisError> {
        let (generation, mut conn) = match self.connection(&String::new).await {
            Ok(c) => c,
            Err(LockError::Redis { source, .. } | LockError::Auth { source, .. }) => return Err(source),
            Err(e) => return Err(RedisError::from(std::io::Error::other(e.to_string()))),
        };
        let result = pipe.query_async(&mut conn).await;
        if let Err(e) = &result
            && is_connection_error(e)
        {
            self.drop_connection(generation);
        }
        result
    }

    /// Loads `script` into the server's script cache (before a pipeline of EVALSHA calls).
    pub(crate) async fn load_script(&self, script: &Script) -> Result<()> {
        let action = || "loading a lock script".to_owned();
        let (_, mut conn) = self.connection(&action).await?;
        script
            .prepare_invoke()
            .load_async(&mut conn)
            .await
            .map(drop)
            .map_err(|e| LockError::redis(action(), e))
    }

    async fn connection(&self, action: &impl Fn() -> String) -> Result<(u64, MultiplexedConnection)> {
        if let Some((generation, conn)) = lock_unpoisoned(&self.slot).as_ref() {
            return Ok((*generation, conn.clone()));
        }
        // Boxed: connecting is rare, and its future would otherwise be inlined into (and
        // copied along with) every command's future.
        Box::pin(self.connect(action())).await
    }

    async fn connect(&self, action: String) -> Result<(u64, MultiplexedConnection)> {
        let action = || action.clone();
        let pooled = tokio::time::timeout(self.timeout, self.pool.get())
            .await
            .map_err(|_| {
                let timed_out =
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "no pooled connection in time");
                LockError::redis(action(), RedisError::from(timed_out))
            })?
            .map_err(|e| match e {
                deadpool_redis::PoolError::Backend(e) => LockError::redis(action(), e),
                e => LockError::Pool { action: action(), source: e },
            })?;
        // Taken out of the pool for good: the application's pooled connections must not be
        // the one lock commands share (a blocking command or a SELECT there would stall or
        // misdirect every lock).
        let mut conn = deadpool_redis::Connection::take(pooled);
        conn.set_response_timeout(self.timeout);
        // A server that wants a password answers PING with NOAUTH: a clear error now rather
        // than a protocol error on the first script.
        redis::cmd("PING").query_async::<()>(&mut conn).await.map_err(|e| LockError::redis(action(), e))?;
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let mut slot = lock_unpoisoned(&self.slot);
        // Another task may have connected meanwhile; keep the first so all share one.
        let (generation, conn) = slot.get_or_insert((generation, conn));
        Ok((*generation, conn.clone()))
    }

    fn drop_connection(&self, generation: u64) {
        let mut slot = lock_unpoisoned(&self.slot);
        if slot.as_ref().is_some_and(|(g, _)| *g == generation) {
            *slot = None;
        }
    }
}
