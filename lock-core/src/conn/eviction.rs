//! The check a client makes each time it connects: may this Redis evict keys that have a TTL?
//! Every lock key has one, so under memory pressure a `volatile-*` or `allkeys-*` policy can
//! delete a held lock, and the next caller's `SET NX` succeeds while the holder still works:
//! exclusion broken with nothing in any log. Only `noeviction` (or no `maxmemory`) is safe.

use std::time::Duration;

use deadpool_redis::redis::{self, Value};

use crate::conn::deploy::Link;
use crate::conn::deploy::slots::{Node, SlotMap};
use crate::error::{LockError, Result};

/// What a client does when it connects to a Redis that may evict lock keys; set with
/// [`LockClientBuilder::eviction_check`](crate::LockClientBuilder::eviction_check).
///
/// The check reads `INFO memory` (`maxmemory` and `maxmemory_policy`) on every master each time
/// the client (re)connects, so a Sentinel failover to a differently configured replica is
/// noticed; a `CONFIG SET` made while connected is not. Either way the gauge
/// `lock_redis_eviction_risk` says what the last check found (1: may evict, 0: safe).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum EvictionCheck {
    /// Log a warning (and set the gauge) and carry on. The default. A Redis that does not let
    /// the client run `INFO` (an ACL without it, a managed service that renames it) is logged
    /// at debug level.
    #[default]
    Warn,
    /// Refuse to work: every command fails with [`LockError::Eviction`] until Redis is
    /// configured with `maxmemory-policy noeviction` (or no `maxmemory`). A Redis whose
    /// settings cannot be read fails the same way.
    Error,
    /// Do not check (no `INFO` sent).
    Off,
}

/// One master's memory settings, as `INFO memory` reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Memory {
    maxmemory: u64,
    policy: String,
}

impl Memory {
    /// Parses an `INFO memory` reply; `None` without both fields.
    fn parse(info: &str) -> Option<Memory> {
        let field = |name: &str| {
            info.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(':'))).map(str::trim)
        };
        Some(Memory {
            maxmemory: field("maxmemory")?.parse().ok()?,
            policy: field("maxmemory_policy")?.to_owned(),
        })
    }

    /// Whether Redis may delete a key with a TTL to free memory: any policy but `noeviction`,
    /// once a limit is set (without one, a 64-bit Redis never evicts).
    fn may_evict(&self) -> bool {
        self.maxmemory > 0 && self.policy != "noeviction"
    }
}

/// Checks the masters `link` reaches (every master of a cluster) as `check` says, within
/// `timeout` (a Redis that accepts connections but never answers costs no more than the
/// command that connected): `Ok` to go on, or the error to fail the connection with.
pub(crate) async fn check(link: &Link, check: EvictionCheck, timeout: Duration) -> Result<()> {
    if check == EvictionCheck::Off {
        return Ok(());
    }
    let found = tokio::time::timeout(timeout, read_all(link))
        .await
        .unwrap_or_else(|_| Err(format!("no answer to INFO within {timeout:?}")));
    let risky = match &found {
        Ok(nodes) => nodes.iter().find(|(_, m)| m.may_evict()).cloned(),
        Err(_) => None,
    };
    metrics::gauge!("lock_redis_eviction_risk").set(if risky.is_some() { 1.0 } else { 0.0 });
    match (found, risky, check) {
        (Err(reason), _, EvictionCheck::Error) => Err(LockError::Eviction {
            detail: format!(
                "could not read maxmemory-policy ({reason}); allow `INFO` for this client's user, or \
                 choose EvictionCheck::Warn if the policy is known to be noeviction"
            ),
        }),
        (Err(reason), ..) => {
            tracing::debug!(%reason, "could not check Redis's maxmemory-policy");
            Ok(())
        }
        (Ok(_), Some((node, memory)), EvictionCheck::Error) => {
            Err(LockError::Eviction { detail: describe(&node, &memory) })
        }
        (Ok(_), Some((node, memory)), _) => {
            tracing::warn!(
                node = node.as_deref().unwrap_or("the master"),
                policy = %memory.policy,
                maxmemory = memory.maxmemory,
                "Redis may evict lock keys under memory pressure (a held lock would vanish and another \
                 caller take it): set `maxmemory-policy noeviction`"
            );
            Ok(())
        }
        (Ok(_), None, _) => Ok(()),
    }
}

/// What an [`LockError::Eviction`] says of a master that may evict.
fn describe(node: &Option<String>, memory: &Memory) -> String {
    format!(
        "{} has maxmemory-policy `{}` with maxmemory {} bytes, so it may delete a held lock under \
         memory pressure; set `maxmemory-policy noeviction` (or choose EvictionCheck::Warn)",
        node.as_deref().unwrap_or("the master"),
        memory.policy,
        memory.maxmemory
    )
}

/// The memory settings of the node, or of each master of a cluster (named `host:port`).
async fn read_all(link: &Link) -> std::result::Result<Vec<(Option<String>, Memory)>, String> {
    let mut link = link.clone();
    let masters: Vec<Option<Node>> = match &link {
        Link::Node(_) => vec![None],
        Link::Cluster(_) => {
            let reply = link
                .query_on_node(redis::cmd("CLUSTER").arg("SLOTS").to_owned(), None)
                .await
                .map_err(|e| e.to_string())?;
            let map = SlotMap::parse(&reply).ok_or("unreadable CLUSTER SLOTS reply")?;
            map.masters().into_iter().map(Some).collect()
        }
    };
    let mut found = Vec::with_capacity(masters.len());
    for node in masters {
        let reply = link
            .query_on_node(redis::cmd("INFO").arg("memory").to_owned(), node.as_ref())
            .await
            .map_err(|e| e.to_string())?;
        let text = match reply {
            Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
            Value::VerbatimString { text, .. } => text,
            Value::SimpleString(s) => s,
            other => return Err(format!("unexpected INFO reply {other:?}")),
        };
        let memory = Memory::parse(&text).ok_or("INFO memory without maxmemory/maxmemory_policy")?;
        found.push((node.map(|(host, port)| format!("{host}:{port}")), memory));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_noeviction_or_no_limit_is_safe() {
        let info = "# Memory\r\nused_memory:1024\r\nmaxmemory:0\r\nmaxmemory_human:0B\r\nmaxmemory_policy:allkeys-lru\r\n";
        let memory = Memory::parse(info).expect("parses");
        assert_eq!(memory, Memory { maxmemory: 0, policy: "allkeys-lru".into() });
        assert!(!memory.may_evict(), "no limit: nothing is evicted");
        let limited = |policy: &str| Memory { maxmemory: 100 << 20, policy: policy.into() };
        for policy in ["allkeys-lru", "volatile-lru", "volatile-ttl", "allkeys-random", "volatile-lfu"] {
            assert!(limited(policy).may_evict(), "{policy}");
        }
        assert!(!limited("noeviction").may_evict());
        assert_eq!(Memory::parse("# Memory\r\nused_memory:1\r\n"), None);
    }
}
