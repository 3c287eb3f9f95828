//! The holdings record: what each client identity holds, written by the client itself so that
//! operators' tools enumerate locks (and semaphores, read-write locks) without reading the
//! keyspace. One hash per identity, [`schema::holdings_key`] (owner token -> `<kind>|<name>`),
//! and an index of identities, [`schema::HOLDINGS_INDEX`] (owner -> when its record expires),
//! both in one cluster slot.
//!
//! Never on an acquisition's path: [`Holdings::register`] pushes the new hold onto a list, and
//! one background task per client writes what changed, [`DELAY`] after the first change
//! (coalescing every change meanwhile), in one pipeline: `HSET` the new holds, `HDEL` those
//! released or lost, `PEXPIRE` the record, `ZADD` the index. A hold taken and given back within
//! the delay never reaches Redis. While anything is recorded the task refreshes the record's
//! expiry every [`REFRESH`]; the record lives [`EXTRA`] past the longest recorded lease, so the
//! record of a client that died outlives every lock it held (they show until taken over or
//! expired). No script reads the record: it is bookkeeping, not part of the protocol's safety,
//! and a reader checks each recorded key still holds the recorded token.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use deadpool_redis::redis;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::conn::Conn;
use crate::held::background::{Background, RunningFlag};
use crate::held::state::LockState;
use crate::schema;
use crate::sync::lock_unpoisoned;

/// How long after a change the record is written: changes meanwhile go in the same write.
pub(crate) const DELAY: Duration = Duration::from_millis(100);

/// How often a non-empty record's expiry is refreshed (and released holds removed).
pub(crate) const REFRESH: Duration = Duration::from_secs(5);

/// How long a record outlives the longest lease it lists: more than two refreshes, so a record
/// refreshed late still outlives its locks.
pub(crate) const EXTRA: Duration = Duration::from_secs(15);

/// After a failed write, try again this soon.
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(500);

/// Fields per `HSET` or `HDEL`.
const CHUNK: usize = 1000;

/// Index entries this much older than now are pruned (clients' clocks differ a little).
const INDEX_GRACE_MS: u64 = 60_000;

/// A client's holdings record and the task that writes it.
#[derive(Debug)]
pub(crate) struct Holdings {
    shared: Arc<Recorder>,
    /// The task that writes the records.
    task: Background,
}

#[derive(Debug)]
struct Recorder {
    conn: Arc<Conn>,
    /// Holds taken since the task last looked.
    fresh: Mutex<Vec<Arc<LockState>>>,
    wake: Notify,
    /// What the record says, as the task last wrote it; only the task touches it.
    recorded: Mutex<Recorded>,
    /// One write at a time, so that writes reach Redis in the order their diffs were made.
    writing: tokio::sync::Mutex<()>,
    writes: AtomicU64,
}

#[derive(Debug, Default)]
struct Recorded {
    /// Lock id -> the hold (ids, not tokens: no second copy of each token per held lock).
    holds: HashMap<u64, Arc<LockState>>,
    /// The lock ids whose tokens Redis has (as far as the last writes went).
    written: HashSet<u64>,
    /// Owners whose record may hold something.
    owners: HashSet<String>,
    /// The last write failed: the next one rewrites every record whole.
    rewrite: bool,
}

impl Holdings {
    pub(crate) fn new(conn: Arc<Conn>) -> Self {
        let shared = Recorder {
            conn,
            fresh: Mutex::default(),
            wake: Notify::new(),
            recorded: Mutex::default(),
            writing: tokio::sync::Mutex::new(()),
            writes: AtomicU64::new(0),
        };
        Holdings { shared: Arc::new(shared), task: Background::default() }
    }

    /// Records `state` (a hold just taken) at the next write.
    pub(crate) fn register(&self, state: Arc<LockState>) {
        let first = {
            let mut fresh = lock_unpoisoned(&self.shared.fresh);
            fresh.push(state);
            fresh.len() == 1
        };
        if first {
            self.shared.wake.notify_one();
        }
        self.task.ensure(|running| run(Arc::downgrade(&self.shared), running));
    }

    /// Writes what changed now, without the delay: returns whether the write went through.
    pub(crate) async fn write_now(&self) -> bool {
        self.shared.write().await.0
    }

    /// Pipelines written so far.
    pub(crate) fn writes(&self) -> u64 {
        self.shared.writes.load(Ordering::Relaxed)
    }
}

async fn run(shared: Weak<Recorder>, _running: RunningFlag) {
    let mut next_refresh: Option<Instant> = None;
    loop {
        let Some(recorder) = shared.upgrade() else { return };
        let woken = recorder.wake.notified();
        let changed = match next_refresh {
            Some(at) => tokio::select! {
                () = woken => true,
                () = tokio::time::sleep_until(at) => false,
            },
            None => {
                woken.await;
                true
            }
        };
        if changed {
            tokio::time::sleep(DELAY).await;
        }
        let (ok, busy) = recorder.write().await;
        next_refresh = match (ok, busy) {
            (false, _) => Some(Instant::now() + RETRY_AFTER_ERROR),
            (true, true) => Some(Instant::now() + REFRESH),
            (true, false) => None,
        };
    }
}

/// Whether the record should list `state`: held, or released but still kept in Redis for its
/// minimum hold (`at_least`).
fn recordable(state: &LockState, now: Instant) -> bool {
    state.is_active()
        || (state.is_released() && state.at_least.is_some_and(|min| state.acquired_at + min > now))
}

fn owner(token: &str) -> &str {
    schema::owner_of(token).unwrap_or(token)
}

fn epoch_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0))
}

impl Recorder {
    /// Writes what changed since the last write, and refreshes the records' expiry. Returns
    /// whether the write went through and whether anything is left recorded.
    async fn write(&self) -> (bool, bool) {
        let _one = self.writing.lock().await;
        let fresh = std::mem::take(&mut *lock_unpoisoned(&self.fresh));
        let now = Instant::now();
        let (pipe, busy) = {
            let mut guard = lock_unpoisoned(&self.recorded);
            let recorded = &mut *guard;
            for state in fresh.into_iter().filter(|s| recordable(s, now)) {
                recorded.holds.insert(state.id, state);
            }
            let rewrite = std::mem::take(&mut recorded.rewrite);
            let mut removed: HashMap<String, Vec<String>> = HashMap::new();
            let written = &mut recorded.written;
            recorded.holds.retain(|id, state| {
                let keep = recordable(state, now);
                if !keep && written.remove(id) {
                    removed.entry(owner(&state.token).to_owned()).or_default().push(state.token.clone());
                }
                keep
            });
            if rewrite {
                written.clear();
                removed.clear();
            }
            // What Redis does not have yet (everything, on a rewrite). A hold taken and given
            // back between two writes is never sent.
            let mut added: HashMap<String, Vec<(String, String)>> = HashMap::new();
            for (id, state) in &recorded.holds {
                if written.insert(*id) {
                    let value = schema::holding_value(state.hold.record_kind(), &state.key);
                    let token = &state.token;
                    added.entry(owner(token).to_owned()).or_default().push((token.clone(), value));
                }
            }
            let live: HashSet<String> = recorded.holds.values().map(|s| owner(&s.token).to_owned()).collect();
            let longest = recorded.holds.values().map(|s| s.lease).max().unwrap_or_default();
            let ttl_ms = u64::try_from((longest + EXTRA).as_millis()).unwrap_or(u64::MAX);
            let expires = epoch_ms().saturating_add(ttl_ms);
            let owners: Vec<String> = recorded.owners.union(&live).cloned().collect();
            let mut pipe = redis::pipe();
            for owner in &owners {
                let key = schema::holdings_key(owner);
                if rewrite || !live.contains(owner) {
                    pipe.cmd("DEL").arg(&key).ignore();
                }
                for chunk in removed.get(owner).map(Vec::as_slice).unwrap_or_default().chunks(CHUNK) {
                    pipe.cmd("HDEL").arg(&key).arg(chunk).ignore();
                }
                for chunk in added.get(owner).map(Vec::as_slice).unwrap_or_default().chunks(CHUNK) {
                    let mut hset = redis::cmd("HSET");
                    hset.arg(&key);
                    for (token, value) in chunk {
                        hset.arg(token).arg(value);
                    }
                    pipe.add_command(hset).ignore();
                }
                if live.contains(owner) {
                    // Not ignored: 0 says the record is gone (a failover lost it, a flush): it
                    // is then written whole again.
                    pipe.cmd("PEXPIRE").arg(&key).arg(ttl_ms);
                    pipe.cmd("ZADD").arg(schema::HOLDINGS_INDEX).arg(expires).arg(owner).ignore();
                } else {
                    pipe.cmd("ZREM").arg(schema::HOLDINGS_INDEX).arg(owner).ignore();
                }
            }
            if !owners.is_empty() {
                pipe.cmd("ZREMRANGEBYSCORE")
                    .arg(schema::HOLDINGS_INDEX)
                    .arg("-inf")
                    .arg(epoch_ms().saturating_sub(INDEX_GRACE_MS))
                    .ignore();
                // The index outlives every record it names (each client pushes its expiry out
                // to its own records' at least, never in), and nothing is kept forever.
                let index_ttl = ttl_ms.saturating_add(INDEX_GRACE_MS);
                pipe.cmd("PEXPIRE").arg(schema::HOLDINGS_INDEX).arg(index_ttl).arg("NX").ignore();
                pipe.cmd("PEXPIRE").arg(schema::HOLDINGS_INDEX).arg(index_ttl).arg("GT").ignore();
            }
            recorded.owners = live;
            let pipe = (!owners.is_empty()).then_some(pipe);
            (pipe, !recorded.holds.is_empty())
        };
        let Some(pipe) = pipe else { return (true, busy) };
        self.writes.fetch_add(1, Ordering::Relaxed);
        match self.conn.query_pipeline::<Vec<i64>>(&pipe).await {
            Ok(found) if found.contains(&0) => {
                tracing::debug!("a holdings record was gone from Redis; rewriting it whole");
                lock_unpoisoned(&self.recorded).rewrite = true;
                (false, true)
            }
            Ok(_) => (true, busy),
            Err(e) => {
                tracing::debug!(error = %e, "writing the holdings record failed; rewriting it whole soon");
                lock_unpoisoned(&self.recorded).rewrite = true;
                (false, true)
            }
        }
    }
}
