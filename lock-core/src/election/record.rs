//! What an election keeps in Redis beside its lock, for members and operators to read: the
//! leader's record (`{<name>}:election`: `<term> <since ms> <token>`, written by the leader
//! with the lock's lease as expiry and renewed while it leads), the channel a new leader
//! announces itself on (`{<name>}:leader`), and the index of elections (`lock-elections`, a
//! sorted set of names by the time their leader last wrote, trimmed after an hour).
//!
//! None of it decides anything: leadership is the lock alone. A record whose token is not the
//! lock key's is stale and read as "term not announced yet".

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use deadpool_redis::redis;

use crate::acquire::Core;
use crate::election::role::Leader;
use crate::error::{LockError, Result};
use crate::schema;

/// The sorted set of election names, scored by when their leader last wrote its record (ms
/// since the epoch).
pub(crate) const ELECTIONS_INDEX: &str = "lock-elections";

/// How long an election stays in [`ELECTIONS_INDEX`] after its last leader's last write.
pub(crate) const INDEX_RETENTION: Duration = Duration::from_secs(60 * 60);

/// The leader's record of election `name`.
pub(crate) fn record_key(name: &str) -> String {
    format!("{}election", schema::aux_prefix(name))
}

/// The channel on which a new leader of `name` announces itself (and a leader that stepped
/// down says so), so followers read the record at once instead of at their next look.
pub(crate) fn announce_channel(name: &str) -> String {
    format!("{}leader", schema::aux_prefix(name))
}

/// Milliseconds since the epoch of `t` (0 before the epoch).
pub(crate) fn epoch_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The record's value.
fn encode(term: u64, since: SystemTime, token: &str) -> String {
    format!("{term} {} {token}", epoch_ms(since))
}

/// A record's term and election time, if it is well formed and written by `token`.
fn decode(record: &str, token: &str) -> Option<(u64, SystemTime)> {
    let mut fields = record.splitn(3, ' ');
    let term = fields.next()?.parse().ok()?;
    let since_ms: u64 = fields.next()?.parse().ok()?;
    (fields.next()? == token).then(|| (term, UNIX_EPOCH + Duration::from_millis(since_ms)))
}

/// The leader described by the lock key's value `value` and the record `record`: `None` when
/// the key is free or holds something that is not an owner token.
pub(crate) fn leader_of(value: Option<&str>, record: Option<&str>) -> Option<Leader> {
    let token = schema::unmarked(value?);
    let owner = schema::owner_of(token)?;
    let (term, since) = match record.and_then(|r| decode(r, token)) {
        Some((term, since)) => (Some(term), Some(since)),
        None => (None, None),
    };
    Some(Leader { instance: schema::instance_of(owner).to_owned(), owner: owner.to_owned(), term, since })
}

/// Reads the current leader of `name`: one round trip (the key and the record share a slot).
pub(crate) async fn read(core: &Core, name: &str) -> Result<Option<Leader>> {
    let mut pipe = redis::pipe();
    pipe.cmd("GET").arg(name).cmd("GET").arg(record_key(name));
    let (value, record): (Option<String>, Option<String>) = core
        .conn
        .query_pipeline(&pipe)
        .await
        .map_err(|e| LockError::redis(format!("reading the leader of election `{name}`"), e))?;
    Ok(leader_of(value.as_deref(), record.as_deref()))
}

/// Writes the leader's record, and announces it on the election's channel when `announce`.
pub(crate) async fn write(
    core: &Core,
    name: &str,
    (term, since, token): (u64, SystemTime, &str),
    lease: Duration,
    announce: bool,
) -> Result<()> {
    let lease_ms = crate::options::millis(lease, "lease")?;
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg(record_key(name)).arg(encode(term, since, token)).arg("PX").arg(lease_ms).ignore();
    if announce {
        pipe.cmd(core.conn.publish_command()).arg(announce_channel(name)).arg(term).ignore();
    }
    core.conn
        .query_pipeline::<()>(&pipe)
        .await
        .map_err(|e| LockError::redis(format!("writing the leader record of election `{name}`"), e))?;
    // The index is another slot in a cluster: its own round trip.
    let now = epoch_ms(SystemTime::now());
    let retention = INDEX_RETENTION.as_millis() as u64;
    let mut pipe = redis::pipe();
    pipe.cmd("ZADD")
        .arg(ELECTIONS_INDEX)
        .arg(now)
        .arg(name)
        .ignore()
        .cmd("ZREMRANGEBYSCORE")
        .arg(ELECTIONS_INDEX)
        .arg("-inf")
        .arg(format!("({}", now.saturating_sub(retention)))
        .ignore()
        .cmd("PEXPIRE")
        .arg(ELECTIONS_INDEX)
        .arg(retention)
        .ignore();
    core.conn
        .query_pipeline::<()>(&pipe)
        .await
        .map_err(|e| LockError::redis("indexing an election".to_owned(), e))
}

/// Tells followers of `name` to look again (a leader stepped down).
pub(crate) async fn announce(core: &Core, name: &str) -> Result<()> {
    let mut pipe = redis::pipe();
    pipe.cmd(core.conn.publish_command()).arg(announce_channel(name)).arg("").ignore();
    core.conn
        .query_pipeline::<()>(&pipe)
        .await
        .map_err(|e| LockError::redis(format!("announcing a step-down in election `{name}`"), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "web-1:0123456789ab:01234567-89ab-cdef-0123-456789abcdef";

    #[test]
    fn a_record_names_its_leader_only_for_its_token() {
        let since = UNIX_EPOCH + Duration::from_millis(1_700_000_000_000);
        let record = encode(42, since, TOKEN);
        let leader = leader_of(Some(TOKEN), Some(&record)).expect("a leader");
        assert_eq!((leader.instance.as_str(), leader.term, leader.since), ("web-1", Some(42), Some(since)));
        // Queued behind: the key carries the mark; the record still matches.
        let marked = format!("{TOKEN}{}", schema::QUEUED_MARK);
        assert_eq!(leader_of(Some(&marked), Some(&record)).and_then(|l| l.term), Some(42));
        // A record of an earlier leader: the leader is known, its term not yet.
        let other = TOKEN.replace("web-1", "web-2");
        let leader = leader_of(Some(&other), Some(&record)).expect("a leader");
        assert_eq!((leader.instance.as_str(), leader.term), ("web-2", None));
        assert_eq!(leader_of(None, Some(&record)), None, "free: no leader");
        assert_eq!(leader_of(Some("not a token"), None), None);
        assert_eq!(decode("x 1 t", "t"), None);
    }

    #[test]
    fn keys_share_the_election_slot() {
        assert_eq!(record_key("orders"), "{orders}:election");
        assert_eq!(announce_channel("jobs:{eu}"), "jobs:{eu}:leader");
    }
}
