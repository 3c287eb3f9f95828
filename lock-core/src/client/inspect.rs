//! What operators' tools (`lockctl`, the admin console) read about locks: who holds one, for
//! how long, its fence, its queue of waiters, whether the holder's client is alive. The entry
//! points are [`LockClient::inspect`](crate::LockClient::inspect),
//! [`LockClient::list_locks`](crate::LockClient::list_locks) and
//! [`LockClient::force_unlock`](crate::LockClient::force_unlock); this module holds what they
//! return, and reads the keys of `crate::schema`. Nothing here is needed to take or
//! release locks.
//!
//! Which keys are locks is known from the holdings records the clients keep (see
//! [`schema::holdings_key`]), never from the keyspace: listing reads the records and then only
//! the keys they name; showing, unlocking and releasing read a key's value only if some record
//! names it. Another application's key is never read (at most its `TYPE`, to tell a free name
//! from a foreign one), whatever its value looks like.
//!
//! ```no_run
//! # async fn demo(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
//! let state = client.inspect("lock:daily-report").await?;
//! if let Some(holder) = &state.holder {
//!     println!("held by {} for {:?} more", holder.instance.as_deref().unwrap_or("?"), state.ttl);
//! }
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use deadpool_redis::redis::{self, Value};

use crate::acquire::Core;
use crate::client::recorded::{self, Recorded};
use crate::error::{LockError, Result};
use crate::schema::hold::Hold;
use crate::schema::{self, RELEASED_SUFFIX};

/// The holder of a lock, parsed from the owner token in the key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The value of the key without its queue mark (a `|w` suffix while callers are queued
    /// behind the holder): `<instance>:<client id>:<uuid>`, or that plus `:released` for a lock
    /// kept for its minimum hold after its release.
    pub token: String,
    /// The instance id in the token (`None` for a value this crate did not write).
    pub instance: Option<String>,
    /// The holder's liveness key ([`schema::liveness_key`]), if the token names one.
    pub liveness_key: Option<String>,
    /// Whether the holder's liveness key exists: `Some(false)` means the holder's client is gone
    /// (crashed, or stalled past its liveness TTL) and the next caller takes the lock over.
    pub alive: Option<bool>,
    /// The lock was released and is only kept for the rest of its minimum hold (`at_least`).
    pub released: bool,
    /// For a semaphore's permit or a reader: how long its hold has left (zero once lapsed, when
    /// the next caller drops it). `None` for a lock or a writer, whose key's TTL is
    /// [`LockInfo::ttl`].
    pub expires_in: Option<Duration>,
}

/// What a name in Redis is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockKind {
    /// A lock (or nothing: a free name reads as a free lock).
    Lock,
    /// A semaphore ([`LockClient::semaphore`](crate::LockClient::semaphore)), with the number
    /// of permits it is in use with.
    Semaphore {
        /// The declared number of permits (`None` if not recorded).
        permits: Option<u32>,
    },
    /// A read-write lock ([`LockClient::rw_lock`](crate::LockClient::rw_lock)) with readers,
    /// or readers waiting. Held only by a writer and with no reader queued, it reads as a
    /// [`Lock`](Self::Lock) whose holder is the writer.
    RwLock,
}

/// A caller queued for a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// The waiter's owner token.
    pub token: String,
    /// Its ticket's deadline, epoch milliseconds (server time); past it the ticket lapses.
    pub ticket_until_ms: Option<i64>,
    /// How long its ticket has left (zero when lapsed), from the server's clock.
    pub ticket_remaining: Option<Duration>,
    /// Whether the next hand-off would give it the lock when its turn comes: its ticket has not
    /// lapsed, and its client has not let a reservation of this lock lapse untaken (see
    /// [`Handoff`]). A waiter that is not live is dropped from the queue when reached.
    pub live: bool,
}

/// The last hand-off of a lock to one client: a release reserved the lock for one of that
/// client's waiters until `deadline_ms`. A reservation still recorded after its deadline was
/// not taken (the client died, or stalled past its hand-off time): the queue then skips that
/// client's other waiters until the client shows it is alive (queues anew or releases).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Handoff {
    /// The client id (the second field of its owner tokens, `<instance>:<client id>:<uuid>`).
    pub client_id: String,
    /// When the reservation ran or runs out, epoch milliseconds (server time).
    pub deadline_ms: i64,
    /// The deadline passed without the client taking the lock.
    pub lapsed: bool,
}

/// One lock's state, as [`LockClient::inspect`](crate::LockClient::inspect) found it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock key.
    pub key: String,
    /// A lock, a semaphore or a read-write lock.
    pub kind: LockKind,
    /// Who holds it (a lock's holder, a read-write lock's writer); `None` when free.
    pub holder: Option<Holder>,
    /// A semaphore's permit holders, or a read-write lock's readers, soonest to lapse first.
    pub holders: Vec<Holder>,
    /// The key's remaining expiry (`None`: free, or no expiry).
    pub ttl: Option<Duration>,
    /// The last fence drawn for the key, if its counter still exists.
    pub fence: Option<u64>,
    /// The last scheduler tick claimed with the key (epoch milliseconds), if any.
    pub last_tick: Option<i64>,
    /// The callers queued for it, oldest first.
    pub waiters: Vec<Waiter>,
    /// The hand-offs recorded per client (see [`Handoff`]).
    pub handoffs: Vec<Handoff>,
}

impl LockInfo {
    /// Whether some owner holds the key (a permit, a read hold or the lock itself).
    pub fn is_held(&self) -> bool {
        self.holder.is_some() || self.holders.iter().any(|h| h.expires_in.is_none_or(|d| !d.is_zero()))
    }

    /// How many queued waiters are live (see [`Waiter::live`]).
    pub fn live_waiters(&self) -> usize {
        self.waiters.iter().filter(|w| w.live).count()
    }
}

/// A lock found by [`LockClient::list_locks`](crate::LockClient::list_locks).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockSummary {
    /// The lock key (a semaphore's or a read-write lock's name).
    pub key: String,
    /// A lock, a semaphore or a read-write lock.
    pub kind: LockKind,
    /// Its holder, or one of them: a semaphore's permit holder or a reader soonest to lapse
    /// (liveness not checked: see [`LockClient::inspect`](crate::LockClient::inspect)).
    pub holder: Holder,
    /// How many hold it (1 for a lock or a writer).
    pub holders: usize,
    /// Its remaining expiry.
    pub ttl: Option<Duration>,
}

/// What [`LockClient::list_locks_within`](crate::LockClient::list_locks_within) found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockListing {
    /// The locks found, sorted by key.
    pub locks: Vec<LockSummary>,
    /// Whether every key was looked at: `false` when the scan budget ran out first, so more
    /// locks may match.
    pub complete: bool,
}

/// A key that belongs to the lock machinery rather than naming a lock (see
/// [`schema::is_auxiliary_key`]).
pub fn is_auxiliary_key(key: &str) -> bool {
    schema::is_auxiliary_key(key)
}

/// Parses an owner token as this crate writes it. `None` for a value this crate did not write
/// (a key that is not a lock).
pub fn parse_token(token: &str) -> Option<Holder> {
    let token = schema::unmarked(token);
    let (bare, released) = match token.strip_suffix(RELEASED_SUFFIX) {
        Some(bare) if schema::owner_of(bare).is_some() => (bare, true),
        _ => (token, false),
    };
    let owner = schema::owner_of(bare)?;
    Some(Holder {
        token: token.to_owned(),
        instance: Some(schema::instance_of(owner).to_owned()),
        liveness_key: Some(schema::liveness_key(owner)),
        alive: None,
        released,
        expires_in: None,
    })
}

/// Reads the state of the lock `key` (see [`LockClient::inspect`](crate::LockClient::inspect)).
pub(crate) async fn read(core: &Core, key: &str) -> Result<LockInfo> {
    schema::validate_key(key)?;
    refuse_machinery(key)?;
    if recorded::holds_of(core, key).await?.is_empty() {
        return unrecorded(core, key).await;
    }
    read_recorded(core, key).await
}

/// Reads the state of `key`, which a record of the protocol names as a lock (a holdings record,
/// or an election's leader record): the caller has checked that.
pub(crate) async fn read_recorded(core: &Core, key: &str) -> Result<LockInfo> {
    refuse_machinery(key)?;
    let conn = &core.conn;
    let action = || format!("reading lock `{}`", short(key));
    let mut pipe = redis::pipe();
    pipe.cmd("TYPE")
        .arg(key)
        .cmd("GET")
        .arg(schema::fence_key(key))
        .cmd("GET")
        .arg(schema::tick_key(key))
        .cmd("LRANGE")
        .arg(schema::queue_key(key))
        .arg(0)
        .arg(-1)
        .cmd("ZRANGE")
        .arg(schema::tickets_key(key))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .cmd("ZRANGE")
        .arg(schema::readers_key(key))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .cmd("TIME");
    type Reply = (
        String,
        Option<String>,
        Option<String>,
        Vec<String>,
        Vec<(String, f64)>,
        Vec<(String, f64)>,
        (i64, i64),
    );
    let (kind, fence, tick, queue, tickets, readers, time): Reply =
        conn.query_pipeline(&pipe).await.map_err(|e| LockError::redis(action(), e))?;
    let now_ms = time.0 * 1000 + time.1 / 1000;
    // The key itself: a token (a lock, a writer) or a semaphore's holders. Anything else is
    // someone else's data: refused before its value is read (and a WRONGTYPE never happens).
    let (value, pttl, members) = match kind.as_str() {
        "zset" => {
            let mut cmd = redis::cmd("ZRANGE");
            cmd.arg(key).arg(0).arg(-1).arg("WITHSCORES");
            let members: Vec<(String, f64)> = conn.query(&cmd, action).await?;
            if !is_semaphore(&members) {
                return Err(not_a_lock(key, "a sorted set that is not a semaphore's"));
            }
            (None, -2, members)
        }
        "string" | "none" => {
            let mut pipe = redis::pipe();
            pipe.cmd("GET").arg(key).cmd("PTTL").arg(key);
            let (value, pttl): (Option<String>, i64) =
                conn.query_pipeline(&pipe).await.map_err(|e| LockError::redis(action(), e))?;
            if value.as_deref().is_some_and(|v| parse_token(v).is_none()) {
                return Err(not_a_lock(key, NOT_A_TOKEN));
            }
            (value, pttl, Vec::new())
        }
        other => return Err(not_a_lock(key, type_name(other))),
    };
    // Records are scored with the reservation's deadline, negated once counted as lapsed.
    let handoffs: Vec<Handoff> = tickets
        .iter()
        .filter_map(|(member, score)| {
            let client_id = schema::handoff_record_client(member)?;
            let deadline_ms = score.abs() as i64;
            Some(Handoff { client_id: client_id.to_owned(), deadline_ms, lapsed: deadline_ms <= now_ms })
        })
        .collect();
    let readers_queued = queue.iter().any(|e| schema::is_reader_entry(e));
    let waiters = queue
        .into_iter()
        .map(|entry| {
            let token = schema::token_of_entry(&entry).to_owned();
            let until = tickets.iter().find(|(t, _)| *t == token).map(|(_, ms)| *ms as i64);
            let client_lapsed =
                handoffs.iter().any(|h| h.lapsed && schema::client_id_of(&token) == h.client_id);
            Waiter {
                ticket_remaining: until.map(|u| remaining_ms(u, now_ms)),
                ticket_until_ms: until,
                live: until.is_some_and(|u| u > now_ms) && !client_lapsed,
                token,
            }
        })
        .collect();
    let kind = if kind == "zset" {
        let permits = members
            .iter()
            .find(|(m, _)| m == schema::PERMITS_MEMBER)
            .and_then(|(_, score)| u32::try_from(-(*score as i64)).ok());
        LockKind::Semaphore { permits }
    } else if !readers.is_empty() || readers_queued {
        LockKind::RwLock
    } else {
        LockKind::Lock
    };
    let mut holders = Vec::new();
    // Members that are not owner tokens are left out: `is_semaphore` admitted the set, and the
    // readers key is the protocol's own name.
    let tokens = members.into_iter().chain(readers).filter_map(|(m, until)| Some((parse_token(&m)?, until)));
    for (mut holder, until) in tokens {
        holder.expires_in = Some(remaining_ms(until as i64, now_ms));
        holder.alive = alive(core, key, &holder).await?;
        holders.push(holder);
    }
    let holder = match value {
        None => None,
        Some(token) => {
            let mut holder = parse_token(&token).ok_or_else(|| not_a_lock(key, NOT_A_TOKEN))?;
            holder.alive = alive(core, key, &holder).await?;
            Some(holder)
        }
    };
    Ok(LockInfo {
        key: key.to_owned(),
        kind,
        ttl: holder.as_ref().and(ttl_of(pttl)),
        holder,
        holders,
        fence: fence.and_then(|f| f.parse().ok()),
        last_tick: tick.and_then(|t| t.parse().ok()),
        waiters,
        handoffs,
    })
}

/// A name no record names: free if nothing is there, else someone else's key (only its type
/// is read, never its value).
async fn unrecorded(core: &Core, key: &str) -> Result<LockInfo> {
    match kind_of(core, key).await?.as_str() {
        "none" => Ok(LockInfo {
            key: key.to_owned(),
            kind: LockKind::Lock,
            holder: None,
            holders: Vec::new(),
            ttl: None,
            fence: None,
            last_tick: None,
            waiters: Vec::new(),
            handoffs: Vec::new(),
        }),
        _ => Err(not_a_lock(key, NOT_RECORDED)),
    }
}

/// What a key is when no client recorded holding it.
const NOT_RECORDED: &str = "a key that no lock client recorded as held";

/// What a string key holds when its value is not an owner token.
const NOT_A_TOKEN: &str = "a string that is not an owner token";

/// Refuses the protocol's own keys that do not name a lock: a client's liveness key, and the
/// auxiliary keys of a lock (fence, tick, queue, tickets, readers). Releasing a liveness key
/// would let others take over that client's live locks.
fn refuse_machinery(key: &str) -> Result<()> {
    if key.starts_with(schema::LIVENESS_PREFIX) {
        return Err(not_a_lock(key, "a client's liveness key"));
    }
    if schema::lock_of_auxiliary_key(key).is_some() {
        return Err(not_a_lock(key, "an auxiliary key of a lock (fence, tick, queue or readers)"));
    }
    Ok(())
}

/// Whether the members of a sorted set are a semaphore's: the protocol's `#permits` marker
/// (every write of a semaphore adds it first) and owner tokens.
fn is_semaphore(members: &[(String, f64)]) -> bool {
    members.iter().any(|(m, _)| m == schema::PERMITS_MEMBER)
        && members.iter().all(|(m, _)| m == schema::PERMITS_MEMBER || parse_token(m).is_some())
}

fn not_a_lock(key: &str, found: &'static str) -> LockError {
    LockError::NotALock { key: key.to_owned(), found }
}

/// A Redis type a lock never has, as messages say it.
fn type_name(kind: &str) -> &'static str {
    match kind {
        "hash" => "a hash",
        "list" => "a list",
        "set" => "a set",
        "stream" => "a stream",
        _ => "a value of a type locks never have",
    }
}

/// What a key holds, checked against the protocol's markers before anything is changed.
enum Found {
    /// Nothing under the name itself (a free lock, or a read-write lock with readers only).
    Nothing,
    /// A string holding an owner token: a lock, or a read-write lock's writer. The value as
    /// read (with its queue mark, if any).
    Token(String),
    /// A semaphore's holders.
    Semaphore,
}

/// Reads what `key` is; anything but a lock, a writer or a semaphore is [`LockError::NotALock`].
async fn found(core: &Core, key: &str) -> Result<Found> {
    refuse_machinery(key)?;
    if recorded::holds_of(core, key).await?.is_empty() {
        return match kind_of(core, key).await?.as_str() {
            "none" => Ok(Found::Nothing),
            _ => Err(not_a_lock(key, NOT_RECORDED)),
        };
    }
    let action = || format!("reading lock `{}`", short(key));
    match kind_of(core, key).await?.as_str() {
        "none" => Ok(Found::Nothing),
        "string" => {
            let value: Option<String> = core.conn.query(&redis::Cmd::get(key), action).await?;
            match value {
                None => Ok(Found::Nothing),
                Some(value) if parse_token(&value).is_some() => Ok(Found::Token(value)),
                Some(_) => Err(not_a_lock(key, NOT_A_TOKEN)),
            }
        }
        "zset" => {
            let mut cmd = redis::cmd("ZRANGE");
            cmd.arg(key).arg(0).arg(-1).arg("WITHSCORES");
            let members: Vec<(String, f64)> = core.conn.query(&cmd, action).await?;
            if is_semaphore(&members) {
                Ok(Found::Semaphore)
            } else {
                Err(not_a_lock(key, "a sorted set that is not a semaphore's"))
            }
        }
        other => Err(not_a_lock(key, type_name(other))),
    }
}

/// Whether `holder`'s client is alive (its liveness key exists), if its token names one.
async fn alive(core: &Core, key: &str, holder: &Holder) -> Result<Option<bool>> {
    let Some(live) = &holder.liveness_key else { return Ok(None) };
    let exists: bool = core
        .conn
        .query(&redis::Cmd::exists(live), || format!("reading the liveness of `{}`'s holder", short(key)))
        .await?;
    Ok(Some(exists))
}

fn remaining_ms(until_ms: i64, now_ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(until_ms.saturating_sub(now_ms)).unwrap_or(0))
}

/// Lists held locks matching `pattern` (see
/// [`LockClient::list_locks`](crate::LockClient::list_locks)): the names the holdings records
/// give, each checked against what its key holds now. `budget`: holds examined at most.
pub(crate) async fn list(core: &Core, pattern: &str, limit: usize, budget: usize) -> Result<LockListing> {
    let (holds, mut complete) = recorded::holds(core).await?;
    let mut holds: Vec<Recorded> =
        holds.into_iter().filter(|h| recorded::glob_match(pattern, &h.name)).collect();
    if holds.len() > budget {
        holds.truncate(budget);
        complete = false;
    }
    let mut by_name: BTreeMap<String, Vec<Recorded>> = BTreeMap::new();
    for hold in holds {
        by_name.entry(hold.name.clone()).or_default().push(hold);
    }
    let names: Vec<(String, Vec<Recorded>)> = by_name.into_iter().collect();
    let mut found = Vec::new();
    for (node, names) in core.conn.split_by_node(names, |(name, _)| name.as_str()).await {
        for chunk in names.chunks(200) {
            found.extend(check_chunk(core, chunk, node.clone()).await?);
        }
    }
    found.sort_by(|a, b| a.key.cmp(&b.key));
    if found.len() > limit {
        found.truncate(limit);
    }
    Ok(LockListing { locks: found, complete })
}

/// Reads, in one pipeline to `node`, what the recorded keys of `chunk` hold now, and keeps
/// those still held by a recorded token.
async fn check_chunk(
    core: &Core,
    chunk: &[(String, Vec<Recorded>)],
    node: Option<crate::conn::deploy::slots::Node>,
) -> Result<Vec<LockSummary>> {
    let action = || "reading recorded locks".to_owned();
    let mut pipe = redis::pipe();
    pipe.cmd("TIME");
    for (name, holds) in chunk {
        // A lock or a writer: the key's value and expiry. A semaphore: its permits marker and
        // each recorded permit's lapse time. Readers: each recorded reader's.
        pipe.cmd("GET").arg(name).cmd("PTTL").arg(name);
        pipe.cmd("ZSCORE").arg(name).arg(schema::PERMITS_MEMBER);
        for hold in holds {
            match hold.kind {
                'p' => pipe.cmd("ZSCORE").arg(name).arg(&hold.token),
                'r' => pipe.cmd("ZSCORE").arg(schema::readers_key(name)).arg(&hold.token),
                _ => pipe.cmd("ECHO").arg(""),
            };
        }
    }
    // Each command on a key of the wrong type fails alone (WRONGTYPE): that key is left out.
    pipe.ignore_errors();
    let replies: Vec<redis::RedisResult<Value>> =
        core.conn.query_pipeline_on(&pipe, node).await.map_err(|e| LockError::redis(action(), e))?;
    let mut replies = replies.into_iter();
    let now_ms = match replies.next() {
        Some(Ok(time)) => {
            let (secs, micros): (i64, i64) =
                redis::from_redis_value(time).map_err(|e| LockError::redis(action(), e.into()))?;
            secs * 1000 + micros / 1000
        }
        _ => {
            return Err(LockError::redis(
                action(),
                redis::RedisError::from((redis::ErrorKind::Parse, "no TIME reply")),
            ));
        }
    };
    let mut found = Vec::new();
    for (name, holds) in chunk {
        let value = replies.next().and_then(Result::ok);
        let pttl = replies.next().and_then(Result::ok);
        let permits = replies.next().and_then(Result::ok);
        let scores: Vec<Option<f64>> = holds
            .iter()
            .map(|_| replies.next().and_then(Result::ok).and_then(|v| redis::from_redis_value(v).ok()))
            .collect();
        // The key holds a recorded token (a lock, a writer; marked, or kept after release).
        if let Some(Value::BulkString(bytes)) = &value
            && let Some(holder) = std::str::from_utf8(bytes).ok().and_then(parse_token)
        {
            let bare = holder.token.strip_suffix(RELEASED_SUFFIX).unwrap_or(&holder.token);
            if holds.iter().any(|h| matches!(h.kind, 'l' | 'w') && h.token == bare) {
                let pttl = pttl.and_then(|v| redis::from_redis_value::<i64>(v).ok()).unwrap_or(-2);
                found.push(LockSummary {
                    key: name.clone(),
                    kind: LockKind::Lock,
                    holder,
                    holders: 1,
                    ttl: ttl_of(pttl),
                });
                continue;
            }
        }
        let mut live: Vec<(&Recorded, i64)> = holds
            .iter()
            .zip(&scores)
            .filter(|(h, _)| matches!(h.kind, 'p' | 'r'))
            .filter_map(|(h, score)| Some((h, (*score)? as i64)))
            .filter(|(_, until)| *until > now_ms)
            .collect();
        live.sort_by_key(|(_, until)| *until);
        let Some((first, until)) = live.first() else { continue };
        let Some(mut holder) = parse_token(&first.token) else { continue };
        holder.expires_in = Some(remaining_ms(*until, now_ms));
        let kind = if first.kind == 'p' {
            let permits = permits
                .and_then(|v| redis::from_redis_value::<Option<f64>>(v).ok().flatten())
                .and_then(|score| u32::try_from(-(score as i64)).ok());
            LockKind::Semaphore { permits }
        } else {
            LockKind::RwLock
        };
        found.push(LockSummary {
            key: name.clone(),
            kind,
            holder,
            holders: live.len(),
            ttl: Some(remaining_ms(*until, now_ms)),
        });
    }
    Ok(found)
}

/// Force-releases the lock `key` (see
/// [`LockClient::force_unlock`](crate::LockClient::force_unlock)).
pub(crate) async fn force_unlock(core: &Core, key: &str) -> Result<Option<String>> {
    schema::validate_key(key)?;
    // A few tries: the holder may release or hand over between the read and the release.
    const ATTEMPTS: u32 = 5;
    for _ in 0..ATTEMPTS {
        // Checked on every try: only an owner token is ever compared and deleted, so another
        // application's string (or a liveness key) is never released.
        let value = match found(core, key).await? {
            Found::Nothing => return Ok(None),
            Found::Token(value) => value,
            Found::Semaphore => {
                return Err(LockError::InvalidOptions(format!(
                    "`{}` is a semaphore: give back one permit with force_release(name, token) \
                     (`lockctl unlock <name> --token <token>`)",
                    short(key)
                )));
            }
        };
        // The release compares the token itself and hands over to a waiter if the value is marked.
        let token = schema::unmarked(&value).to_owned();
        if core.releaser.release_token(key, Hold::Lock, &token).await? {
            tracing::warn!(key = short(key), holder = %token, "lock force-released by an operator");
            return Ok(Some(token));
        }
    }
    Err(LockError::ChangedHands { key: short(key).to_owned(), attempts: ATTEMPTS })
}

/// Force-releases one hold of `name`, whatever it is: a lock's, a semaphore's permit, a
/// read-write lock's reader or writer (see
/// [`LockClient::force_release`](crate::LockClient::force_release)).
pub(crate) async fn force_release(core: &Core, name: &str, token: &str) -> Result<bool> {
    schema::validate_key(name)?;
    if parse_token(token).is_none() {
        return Err(LockError::InvalidOptions(format!(
            "`{}` is not an owner token (`<instance>:<client id>:<uuid>`): copy a holder's token from \
             `lockctl show <name>`",
            short(token)
        )));
    }
    if !recorded::holds_of(core, name).await?.iter().any(|h| h.token == token) {
        return Err(not_a_lock(name, "a name no lock client recorded holding with that token"));
    }
    let hold = match found(core, name).await? {
        // The release does not look at the count.
        Found::Semaphore => Hold::Permit { permits: 1 },
        // A lock's value carries the queue mark while waiters queue; a read-write lock's writer
        // never does. Either way the read-write script finds the token's mode (writer or
        // reader), and for a key with nobody queued its release is a lock's.
        Found::Token(value) if value.len() != schema::unmarked(&value).len() => Hold::Lock,
        Found::Token(_) | Found::Nothing => Hold::Read,
    };
    let released = core.releaser.release_token(name, hold, token).await?;
    if released {
        tracing::warn!(
            key = short(name),
            holder = token,
            kind = hold.label(),
            "hold force-released by an operator"
        );
    }
    Ok(released)
}

/// The Redis type of `key` (`none` when it does not exist).
async fn kind_of(core: &Core, key: &str) -> Result<String> {
    let mut cmd = redis::cmd("TYPE");
    cmd.arg(key);
    core.conn.query(&cmd, || format!("reading lock `{}`", short(key))).await
}

fn ttl_of(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

/// A key shortened for messages (a 1 MB key is not echoed back in full).
fn short(key: &str) -> &str {
    match key.char_indices().nth(120) {
        Some((i, _)) => &key[..i],
        None => key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tokens() {
        let token = "pod-1:0123456789ab:01234567-89ab-cdef-0123-456789abcdef";
        let holder = parse_token(token).expect("a token");
        assert_eq!(holder.instance.as_deref(), Some("pod-1"));
        assert_eq!(holder.liveness_key, Some(schema::liveness_key("pod-1:0123456789ab")));
        assert!(!holder.released);
        let kept = parse_token(&format!("{token}{RELEASED_SUFFIX}")).expect("a kept token");
        assert!(kept.released);
        assert_eq!(kept.instance.as_deref(), Some("pod-1"));
        assert!(parse_token("hello").is_none());
        assert!(is_auxiliary_key(&schema::fence_key("lock:a")));
        assert!(is_auxiliary_key(&schema::tick_claimant_key("lock:a")));
        assert!(is_auxiliary_key(&schema::liveness_key("pod-1:0123456789ab")));
        assert!(!is_auxiliary_key("lock:a"));
    }
}
