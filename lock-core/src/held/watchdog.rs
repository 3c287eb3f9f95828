//! The renewal task: one per client, renewing every held watchdog lock in pipelined batches
//! (in a cluster, one batch per node, the nodes renewed concurrently: a pipeline to a cluster
//! node must not mix in keys another node serves).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use deadpool_redis::redis::{self, ErrorKind, ServerErrorKind};
use tokio::time::Instant;

use crate::conn::Conn;
use crate::conn::deploy::slots::Node;
use crate::error::{LossReason, is_redirect};
use crate::held::background::{Background, RunningFlag};
use crate::held::state::LockState;
use crate::options::{millis, next_pass};
use crate::schema::renewal::Renewal;
use crate::sync::lock_unpoisoned;

/// Renewals sent in one pipeline: large enough that 10,000 locks take a handful of round
/// trips, small enough that one batch stays well inside the command timeout.
const BATCH: usize = 1000;

/// After a failed pass, retry this soon (or at the regular interval, if shorter) so a short
/// Redis hiccup does not eat a whole interval of the lease.
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(500);

/// The held locks are split by id over this many maps, so that tasks on different worker
/// threads registering and releasing locks at once rarely take the same mutex.
const SHARDS: usize = 16;

/// Lock ids are distinct counters: they need no hashing.
#[derive(Debug, Default, Clone, Copy)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id;
    }
}

/// Renews a client's watchdog locks; the task runs while any is held.
#[derive(Debug)]
pub(crate) struct Watchdog {
    shared: Arc<Renewing>,
    /// The renewal task.
    task: Background,
}

type Held = HashMap<u64, Arc<LockState>, BuildHasherDefault<IdHasher>>;

/// What the renewal task reads.
#[derive(Debug)]
struct Renewing {
    conn: Arc<Conn>,
    instance: String,
    interval: Duration,
    held: [Mutex<Held>; SHARDS],
    /// Renewal script calls sent, for observability and benchmarks.
    renewals: AtomicU64,
}

impl Watchdog {
    /// A watchdog renewing through `conn` every third of `lease`.
    pub(crate) fn new(conn: Arc<Conn>, instance: String, lease: Duration) -> Self {
        let shared = Renewing {
            conn,
            instance,
            interval: lease / 3,
            held: Default::default(),
            renewals: AtomicU64::new(0),
        };
        Watchdog { shared: Arc::new(shared), task: Background::default() }
    }

    /// Starts renewing `state`; starts the renewal task if it is not running (first lock, or
    /// the runtime that ran it has gone).
    pub(crate) fn register(&self, state: Arc<LockState>) {
        self.shared.shard(state.id).insert(state.id, state);
        self.task.ensure(|running| run(Arc::downgrade(&self.shared), running));
    }

    pub(crate) fn unregister(&self, id: u64) {
        self.shared.unregister(id);
    }

    /// Number of locks being renewed.
    pub(crate) fn len(&self) -> usize {
        self.shared.held.iter().map(|shard| lock_unpoisoned(shard).len()).sum()
    }

    /// Renewal script calls sent so far.
    pub(crate) fn renewals(&self) -> u64 {
        self.shared.renewals.load(Ordering::Relaxed)
    }
}

impl Renewing {
    fn shard(&self, id: u64) -> MutexGuard<'_, Held> {
        // Ids count up, so consecutive locks land in different shards.
        lock_unpoisoned(&self.held[(id % SHARDS as u64) as usize])
    }

    fn unregister(&self, id: u64) {
        self.shard(id).remove(&id);
    }

    fn snapshot(&self) -> Vec<Arc<LockState>> {
        let mut all = Vec::new();
        for shard in &self.held {
            all.extend(lock_unpoisoned(shard).values().cloned());
        }
        all
    }
}

async fn run(shared: Weak<Renewing>, _running: RunningFlag) {
    let Some(interval) = shared.upgrade().map(|s| s.interval) else { return };
    // Loaded before the first pass, so that pass does not fail with NOSCRIPT.
    if let Some(client) = shared.upgrade() {
        let [extend, _] = Renewal::scripts();
        let _ = client.conn.load_script(extend).await;
    }
    let mut next = Instant::now() + interval;
    loop {
        tokio::time::sleep_until(next).await;
        // The task holds the watchdog weakly: once the client is gone, renewal stops.
        let Some(client) = shared.upgrade() else { return };
        let ok = renew_all(&client).await;
        next = next_pass(next, interval, ok, RETRY_AFTER_ERROR);
    }
}

/// One renewal pass over every held lock. Returns false if any batch failed.
async fn renew_all(client: &Renewing) -> bool {
    // Locks acquired since about the previous pass keep until the next one (they are at most
    // 1.5 intervals old then, with a lease of 3); a lock renewed by the previous pass, late in
    // its batches, is still renewed.
    let mut locks = client.snapshot();
    if let Some(fresh) = Instant::now().checked_sub(client.interval / 2) {
        locks.retain(|s| s.renewed_at() <= fresh);
    }
    let groups = client.conn.split_by_node(locks, |s| s.key.as_str()).await;
    let passes = groups.iter().map(|(node, locks)| async move {
        let mut ok = true;
        for batch in locks.chunks(BATCH) {
            ok &= renew_batch(client, batch, node.clone()).await;
        }
        ok
    });
    futures_util::future::join_all(passes).await.into_iter().all(|ok| ok)
}

async fn renew_batch(client: &Renewing, batch: &[Arc<LockState>], node: Option<Node>) -> bool {
    // A lock whose client identity died is lost, however long its key lives: not renewed.
    for state in batch.iter().filter(|s| s.is_active()) {
        if let Some(reason) = state.loss() {
            client.unregister(state.id);
            state.mark_lost(reason);
        }
    }
    let mut batch: Vec<&Arc<LockState>> = batch.iter().filter(|s| s.is_active()).collect();
    if batch.is_empty() {
        return true;
    }
    let (mut sent_at, mut result) = send_renewals(client, &batch, node.clone()).await;
    if result.as_ref().is_ok_and(|replies| replies.iter().any(is_noscript)) {
        // The server lost its script cache (restart, SCRIPT FLUSH): load them and send again,
        // without the locks released meanwhile.
        let [extend, member_renew] = Renewal::scripts();
        if client.conn.load_script(extend).await.is_ok()
            && client.conn.load_script(member_renew).await.is_ok()
        {
            batch.retain(|s| s.is_active());
            if batch.is_empty() {
                return true;
            }
            (sent_at, result) = send_renewals(client, &batch, node.clone()).await;
        }
    }
    let replies = match result {
        Ok(replies) => replies,
        // A pipeline to a cluster node failed (the node is gone, or the slot map names an
        // address the cluster connection does not know, e.g. behind a NAT or a managed
        // service's endpoints): each lock is renewed on its own, routed by its key, so a stale
        // map never costs a lease.
        Err(e) if node.is_some() => {
            tracing::debug!(error = %crate::error::ErrorChain(&e), locks = batch.len(), "pipelined renewal on a cluster node failed; renewing one by one");
            let each = batch.iter().map(|state| renew_one(client, state));
            return futures_util::future::join_all(each).await.into_iter().all(|ok| ok);
        }
        Err(e) => {
            crate::telemetry::renewal_failure();
            tracing::warn!(error = %crate::error::ErrorChain(&e), locks = batch.len(), instance = %client.instance, "lock renewal failed; retrying");
            expire_overdue(client, &batch);
            return false;
        }
    };
    crate::telemetry::renewals(replies.len());
    let mut ok = true;
    for (state, reply) in batch.iter().zip(replies) {
        match reply {
            Ok(1) => {
                state.extend_from(sent_at);
                tracing::trace!(key = %state.key, instance = %state.instance(), "lock renewed");
            }
            ref noscript if is_noscript(noscript) => {
                ok = false;
                expire_overdue(client, &[state]);
            }
            // The slot moved (a stale slot map, a resharding or a failover): renewed on its
            // own, routed by its key (redis-rs follows the redirection).
            Err(ref e) if is_redirect(e) => ok &= renew_one(client, state).await,
            // Refused (the key is gone or holds another token), or the key is not even a
            // string any more. A guard released while this batch was in flight is no longer
            // HELD, so it is not reported.
            reply => {
                if let Err(e) = reply {
                    tracing::debug!(key = %state.key, error = %crate::error::ErrorChain(&e), "renewal refused by the server");
                }
                client.unregister(state.id);
                state.mark_lost(LossReason::NotOwner);
            }
        }
    }
    tracing::debug!(locks = batch.len(), instance = %client.instance, "watchdog renewed locks");
    ok
}

/// Renews one lock through the key-routed connection; false if it could not be done now.
async fn renew_one(client: &Renewing, state: &Arc<LockState>) -> bool {
    let lease = millis(state.lease, "lease").unwrap_or(u64::MAX);
    let extend = Renewal { hold: state.hold, key: &state.key, token: &state.token, lease_ms: lease }.eval();
    let sent_at = Instant::now();
    client.renewals.fetch_add(1, Ordering::Relaxed);
    match client.conn.invoke::<i64>(&extend, || format!("renewing lock `{}`", state.key)).await {
        Ok(1) => {
            state.extend_from(sent_at);
            true
        }
        Ok(_) => {
            client.unregister(state.id);
            state.mark_lost(LossReason::NotOwner);
            true
        }
        Err(e) => {
            tracing::debug!(key = %state.key, error = %crate::error::ErrorChain(&e), "redirected renewal failed; retrying");
            expire_overdue(client, &[state]);
            false
        }
    }
}

/// One pipeline of renewals (EXTEND, or MEMBER_RENEW for permits and read holds; to `node`, in
/// a cluster); each reply stands alone, so one bad key cannot fail the rest.
async fn send_renewals(
    client: &Renewing,
    batch: &[&Arc<LockState>],
    node: Option<Node>,
) -> (Instant, Result<Vec<redis::RedisResult<i64>>, redis::RedisError>) {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for state in batch {
        // Leases were validated at acquisition, so the conversion cannot fail here.
        let lease = millis(state.lease, "lease").unwrap_or(u64::MAX);
        Renewal { hold: state.hold, key: &state.key, token: &state.token, lease_ms: lease }.push(&mut pipe);
    }
    let sent_at = Instant::now();
    client.renewals.fetch_add(batch.len() as u64, Ordering::Relaxed);
    (sent_at, client.conn.query_pipeline_on(&pipe, node).await)
}

fn is_noscript(reply: &redis::RedisResult<i64>) -> bool {
    reply.as_ref().is_err_and(|e| e.kind() == ErrorKind::Server(ServerErrorKind::NoScript))
}

/// After a failed renewal: locks whose local deadline has passed are lost.
fn expire_overdue(client: &Renewing, batch: &[&Arc<LockState>]) {
    let now = Instant::now();
    for state in batch {
        if now >= state.deadline() {
            client.unregister(state.id);
            state.mark_lost(LossReason::Expired);
        }
    }
}
