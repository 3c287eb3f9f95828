//! What operators read about elections ([`LockClient::elections`],
//! [`LockClient::election_info`]): the index of elections, and per election its leader (from
//! the lock key and the leader's record) and candidates (the lock's queue).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use deadpool_redis::redis;

use crate::acquire::Core;
use crate::client::{LockClient, inspect};
use crate::election::record::{self, ELECTIONS_INDEX};
use crate::election::role::Leader;
use crate::error::{LockError, Result};
use crate::schema;

/// An election as operators see it, from [`LockClient::elections`] or
/// [`LockClient::election_info`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElectionInfo {
    /// The election's name (its lock key).
    pub name: String,
    /// The leader, if any.
    pub leader: Option<Leader>,
    /// The lock key's remaining expiry (the leader's lease as last renewed).
    pub lease_remaining: Option<Duration>,
    /// The candidates waiting to lead, oldest first (the next leader first): their owners,
    /// `<instance>:<client id>`, live ones only.
    pub candidates: Vec<String>,
    /// When a leader of this election last wrote its record, if the index knows the election.
    pub last_seen: Option<SystemTime>,
}

/// Reads one election.
async fn read(core: &Core, name: &str, last_seen: Option<SystemTime>) -> Result<ElectionInfo> {
    schema::validate_key(name)?;
    let mut pipe = redis::pipe();
    pipe.cmd("GET").arg(record::record_key(name));
    let (record,): (Option<String>,) = core
        .conn
        .query_pipeline(&pipe)
        .await
        .map_err(|e| LockError::redis(format!("reading the leader record of election `{name}`"), e))?;
    // A leader's record names the election's key as a lock of the protocol, as a holdings
    // record does (which a leader's background task writes a moment after it is elected).
    let lock = if record.is_some() {
        inspect::read_recorded(core, name).await?
    } else {
        inspect::read(core, name).await?
    };
    let token = lock.holder.as_ref().map(|h| h.token.as_str());
    let candidates = lock
        .waiters
        .iter()
        .filter(|w| w.live)
        .filter_map(|w| schema::owner_of(&w.token).map(str::to_owned))
        .collect();
    Ok(ElectionInfo {
        name: name.to_owned(),
        leader: record::leader_of(token, record.as_deref()),
        lease_remaining: lock.ttl,
        candidates,
        last_seen,
    })
}

/// The elections in the index (most recently active first), at most `limit`, each read.
async fn list(core: &Core, limit: usize) -> Result<Vec<ElectionInfo>> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    pipe.cmd("ZREVRANGE").arg(ELECTIONS_INDEX).arg(0).arg(limit.saturating_sub(1)).arg("WITHSCORES");
    let (names,): (Vec<(String, f64)>,) = core
        .conn
        .query_pipeline(&pipe)
        .await
        .map_err(|e| LockError::redis("listing elections".to_owned(), e))?;
    let mut elections = Vec::with_capacity(names.len());
    for (name, score) in names {
        // An entry someone else wrote that is not a valid name is skipped, not an error.
        if schema::validate_key(&name).is_err() {
            continue;
        }
        let seen = UNIX_EPOCH + Duration::from_millis(score.max(0.0) as u64);
        match read(core, &name, Some(seen)).await {
            Ok(info) => elections.push(info),
            Err(LockError::NotALock { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(elections)
}

impl LockClient {
    /// The elections whose leaders wrote their record in the last hour (the index
    /// `lock-elections`), most recently active first, at most `limit`, each with its leader,
    /// term, since when and live candidates. One round trip for the index, then three per
    /// election.
    pub async fn elections(&self, limit: usize) -> Result<Vec<ElectionInfo>> {
        list(self.core(), limit).await
    }

    /// One election's leader, term, since when and live candidates, whether or not it is in
    /// the index. [`LockError::InvalidKey`] for a name that is not a valid lock key,
    /// [`LockError::NotALock`] when the name's key is not a lock.
    pub async fn election_info(&self, name: &str) -> Result<ElectionInfo> {
        read(self.core(), name, None).await
    }
}
