//! The raw baseline: the two commands a minimal Redis lock needs, on one multiplexed
//! connection, with none of lock-core's bookkeeping.

use std::sync::LazyLock;

use anyhow::{Context, Result};
use lock_core::redis::{self, Script};

use crate::conn::RawConn;

/// Lease of raw locks, as lock-core's default watchdog lease.
pub(crate) const LEASE_MS: u64 = 30_000;

/// Compare-and-delete: delete the key only if it holds our token.
static CAD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    )
});

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

/// lock-core's script sources, read at compile time so the `--explain` rows always send
/// exactly what lock-core sends.
const LOCK_CORE_SCRIPTS: &str = include_str!("../../lock-core/src/scripts.rs");

/// The body of `static <name>: LazyLock<Script> = ... Script::new(r"...")` in lock-core.
fn lock_core_script(name: &str) -> Option<Script> {
    let rest = &LOCK_CORE_SCRIPTS[LOCK_CORE_SCRIPTS.find(&format!("static {name}:"))?..];
    let open = rest.find("r\"")? + 2;
    let len = rest[open..].find('"')?;
    Some(Script::new(&rest[open..open + len]))
}

static LC_ACQUIRE: LazyLock<Option<Script>> = LazyLock::new(|| lock_core_script("ACQUIRE"));
static LC_RELEASE: LazyLock<Option<Script>> = LazyLock::new(|| lock_core_script("RELEASE"));

fn lc_script(script: &'static LazyLock<Option<Script>>, name: &str) -> Result<&'static Script> {
    script.as_ref().with_context(|| format!("no `static {name}` script found in lock-core/src/scripts.rs"))
}

/// The `{<key>}:<suffix>` auxiliary key of an untagged key, as lock-core names it.
fn aux(key: &str, suffix: &str) -> String {
    format!("{{{key}}}:{suffix}")
}

/// lock-core's acquire script, invoked as lock-core does without fencing on one node (3 keys,
/// 7 args): true when taken.
pub(crate) async fn lc_acquire(conn: &mut RawConn, key: &str, token: &str, lease_ms: u64) -> Result<bool> {
    let (status, _): (i64, i64) = lc_script(&LC_ACQUIRE, "ACQUIRE")?
        .key(key)
        .key(aux(key, "waiters"))
        .key(aux(key, "waiters:until"))
        .arg(token)
        .arg(lease_ms)
        .arg("0")
        .arg("")
        .arg(0)
        .arg(1000)
        .arg("PUBLISH")
        .invoke_async(conn)
        .await
        .with_context(|| format!("lock-core acquire script on `{key}`"))?;
    Ok(status == 1)
}

/// lock-core's release script, invoked as lock-core does on one node (1 key, 1 arg): true when
/// the key held `token`.
pub(crate) async fn lc_release(conn: &mut RawConn, key: &str, token: &str) -> Result<bool> {
    let owned: i64 = lc_script(&LC_RELEASE, "RELEASE")?
        .key(key)
        .arg(token)
        .invoke_async(conn)
        .await
        .with_context(|| format!("lock-core release script on `{key}`"))?;
    Ok(owned == 1)
}

/// A release that lock-core could send instead (a proposal measured by `--explain`):
/// compare-and-delete and announce, with no minimum-hold branch and the channel name built in
/// Lua, so the command carries one key and one argument like the raw baseline's.
static LEAN_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) \
         redis.call('PUBLISH', KEYS[1] .. ':released', ARGV[1]) return 1 end return 0",
    )
});

/// `SET key token NX PX lease GET` without Lua (Redis >= 7.0): the previous value, `None`
/// when the key was free (taken now).
pub(crate) async fn set_nx_get(conn: &mut RawConn, key: &str, token: &str, lease_ms: u64) -> Result<bool> {
    let prev: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(lease_ms)
        .arg("GET")
        .query_async(conn)
        .await
        .with_context(|| format!("SET NX GET on `{key}`"))?;
    Ok(prev.is_none() || prev.as_deref() == Some(token))
}

/// The proposed lean release: true when the key held `token`.
pub(crate) async fn lean_release(conn: &mut RawConn, key: &str, token: &str) -> Result<bool> {
    let owned: i64 = LEAN_RELEASE
        .key(key)
        .arg(token)
        .invoke_async(conn)
        .await
        .with_context(|| format!("lean release of `{key}`"))?;
    Ok(owned == 1)
}
