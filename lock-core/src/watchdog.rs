//! The renewal task: one per client, renewing every held watchdog lock in pipelined batches.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use deadpool_redis::redis::{self, ErrorKind, ServerErrorKind};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::ClientInner;
use crate::error::LossReason;
use crate::lock_unpoisoned;
use crate::options::millis;
use crate::scripts::EXTEND;
use crate::state::LockState;

/// Renewals sent in one pipeline: large enough that 10,000 locks take a handful of round
/// trips, small enough that one batch stays well inside the command timeout.
const BATCH: usize = 1000;

/// After a failed pass, retry this soon (or at the regular interval, if shorter) so a short
/// Redis hiccup does not eat a whole interval of the lease.
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(500);

#[derive(Debug, Default)]
pub(crate) struct Watchdog {
    held: Mutex<HashMap<u64, Arc<LockState>>>,
    task: Mutex<Option<JoinHandle<()>>>,
    /// Renewal script calls sent, for observability and benchmarks.
    pub(crate) renewals: AtomicU64,
}

impl Watchdog {
    /// Starts renewing `state`; starts the renewal task if it is not running (first lock, or
    /// the runtime that ran it has gone).
    pub(crate) fn register(&self, client: &Arc<ClientInner>, state: Arc<LockState>) {
        lock_unpoisoned(&self.held).insert(state.id, state);
        let mut task = lock_unpoisoned(&self.task);
        if task.as_ref().is_none_or(JoinHandle::is_finished) {
            let weak = Arc::downgrade(client);
            let interval = client.config.watchdog_lease / 3;
            *task = Some(tokio::spawn(run(weak, interval)));
        }
    }

    pub(crate) fn unregister(&self, id: u64) {
        lock_unpoisoned(&self.held).remove(&id);
    }

    /// Number of locks being renewed.
    pub(crate) fn len(&self) -> usize {
        lock_unpoisoned(&self.held).len()
    }

    fn snapshot(&self) -> Vec<Arc<LockState>> {
        lock_unpoisoned(&self.held).values().cloned().collect()
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(task) = lock_unpoisoned(&self.task).take() {
            task.abort();
        }
    }
}

async fn run(client: Weak<ClientInner>, interval: Duration) {
    let mut next = Instant::now() + interval;
    loop {
        tokio::time::sleep_until(next).await;
        // The task holds the client weakly: once the last handle is gone, renewal stops.
        let Some(client) = client.upgrade() else { return };
        let ok = renew_all(&client).await;
        next = Instant::now() + if ok { interval } else { interval.min(RETRY_AFTER_ERROR) };
    }
}

/// One renewal pass over every held lock. Returns false if any batch failed.
async fn renew_all(client: &Arc<ClientInner>) -> bool {
    let locks = client.watchdog.snapshot();
    let mut ok = true;
    for batch in locks.chunks(BATCH) {
        ok &= renew_batch(client, batch).await;
    }
    ok
}

async fn renew_batch(client: &Arc<ClientInner>, batch: &[Arc<LockState>]) -> bool {
    let batch: Vec<&Arc<LockState>> = batch.iter().filter(|s| s.is_active()).collect();
    if batch.is_empty() {
        return true;
    }
    let mut pipe = redis::pipe();
    for state in &batch {
        // Leases were validated at acquisition, so the conversion cannot fail here.
        let lease = millis(state.lease, "lease").unwrap_or(u64::MAX);
        pipe.cmd("EVALSHA").arg(EXTEND.get_hash()).arg(1).arg(&state.key).arg(&state.token).arg(lease);
    }
    let sent_at = Instant::now();
    client.watchdog.renewals.fetch_add(batch.len() as u64, Ordering::Relaxed);
    let mut result = client.query_pipeline::<Vec<i64>>(&pipe).await;
    if let Err(e) = &result
        && e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
    {
        // The server lost its script cache (restart, SCRIPT FLUSH): load and send again.
        if client.load_script(&EXTEND).await.is_ok() {
            result = client.query_pipeline::<Vec<i64>>(&pipe).await;
        }
    }
    match result {
        Ok(replies) => {
            for (state, reply) in batch.iter().zip(replies) {
                if reply == 1 {
                    state.extend_from(sent_at);
                    tracing::trace!(key = %state.key, instance = %state.instance, "lock renewed");
                } else {
                    // Refused: the key is gone or holds another token. A guard released while
                    // this batch was in flight is no longer HELD, so it is not reported.
                    client.watchdog.unregister(state.id);
                    state.mark_lost(LossReason::NotOwner);
                }
            }
            tracing::debug!(locks = batch.len(), instance = %client.config.instance_id, "watchdog renewed locks");
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, locks = batch.len(), instance = %client.config.instance_id, "lock renewal failed; retrying");
            let now = Instant::now();
            for state in batch {
                if now >= state.deadline() {
                    client.watchdog.unregister(state.id);
                    state.mark_lost(LossReason::Expired);
                }
            }
            false
        }
    }
}
