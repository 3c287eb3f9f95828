//! The raw baseline: the two commands a minimal Redis lock needs, on one multiplexed
//! connection, with none of lock-core's bookkeeping.

use std::sync::LazyLock;

use anyhow::{Context, Result};
use lock_core::redis::{self, Script};
use lock_core::schema;

use crate::conn::RawConn;

/// Lease of raw locks, as lock-core's default watchdog lease.
pub(crate) const LEASE_MS: u64 = 30_000;

/// Compare-and-delete: delete the key only if it holds our token.
static CAD: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/compare_and_delete.lua")));

/// A unique token as long as lock-core's (`lockbench:` + 36 characters).
pub(crate) fn token(n: u64) -> String {
    format!("lockbench:{n:036}")
}

/// `SET key token NX PX lease`: true when taken.
pub(crate) async fn acquire(conn: &mut RawConn, key: &str, token: &str, lease_ms: u64) -> Result<bool> {
    let reply: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(lease_ms)
        .query_async(conn)
        .await
        .with_context(|| format!("raw SET NX on `{key}`"))?;
    Ok(reply.is_some())
}

/// EVALSHA compare-and-delete: true when the key held `token`.
pub(crate) async fn release(conn: &mut RawConn, key: &str, token: &str) -> Result<bool> {
    let deleted: i64 = CAD
        .key(key)
        .arg(token)
        .invoke_async(conn)
        .await
        .with_context(|| format!("raw release of `{key}`"))?;
    Ok(deleted == 1)
}

/// lock-core's own scripts (the same `.lua` files), so the `--explain` rows send exactly what
/// lock-core sends.
static LC_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(lock_core::schema::lua::ACQUIRE));
static LC_RELEASE_OWN: LazyLock<Script> = LazyLock::new(|| Script::new(lock_core::schema::lua::RELEASE_OWN));

/// lock-core's acquire script, invoked as lock-core invokes it without fencing on one node
/// (3 keys, 9 args): true when taken.
pub(crate) async fn lc_acquire(conn: &mut RawConn, key: &str, token: &str, lease_ms: u64) -> Result<bool> {
    let reply: Vec<i64> = LC_ACQUIRE
        .key(key)
        .key(schema::queue_key(key))
        .key(schema::tickets_key(key))
        .arg(token)
        .arg(lease_ms)
        .arg("0")
        .arg("")
        .arg(0)
        .arg(1000)
        .arg("PUBLISH")
        .arg(schema::release_channel_prefix(key))
        .arg(schema::TICK_TTL.as_millis() as u64)
        .invoke_async(conn)
        .await
        .with_context(|| format!("lock-core acquire script on `{key}`"))?;
    Ok(reply.first() == Some(&1))
}

/// lock-core's release for the holder's own lock with no minimum hold, uncontended: the
/// one-key `release_own.lua` (1 key, 1 arg); the bench's raw locks never queue, so its "hand
/// over" reply (-1) never comes: true when the key held `token`.
pub(crate) async fn lc_release(conn: &mut RawConn, key: &str, token: &str) -> Result<bool> {
    let owned: i64 = LC_RELEASE_OWN
        .key(key)
        .arg(token)
        .invoke_async(conn)
        .await
        .with_context(|| format!("lock-core release script on `{key}`"))?;
    anyhow::ensure!(owned != -1, "lock-core release of `{key}`: a raw lock had callers queued");
    Ok(owned == 1)
}
