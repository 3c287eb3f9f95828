//! The JSON shapes of the console's API, also printed by `lockctl --json`, so that the two
//! agree field for field. Durations are milliseconds (`*_ms`), times RFC 3339 or epoch
//! milliseconds (`tick`).

use lock_core::inspect::{Holder, LockInfo, LockKind, LockSummary};
use lock_scheduler::control::{HistoryEntry, PendingRetry, RegisteredJob, Replica, RunRequest};
use serde_json::{Value, json};

/// `lock`, `semaphore` or `rw-lock`.
pub fn kind_name(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Semaphore { .. } => "semaphore",
        LockKind::RwLock => "rw-lock",
        _ => "lock",
    }
}

/// A holder: token, instance, liveness key, alive, released (kept for a minimum hold),
/// `expires_in_ms` (a permit's or a reader's own expiry).
pub fn holder(holder: &Holder) -> Value {
    json!({
        "token": holder.token,
        "instance": holder.instance,
        "liveness_key": holder.liveness_key,
        "alive": holder.alive,
        "released": holder.released,
        "expires_in_ms": holder.expires_in.map(|d| d.as_millis() as u64),
    })
}

/// A lock (or semaphore, or read-write lock) in full, as [`LockClient::inspect`] reads it.
///
/// [`LockClient::inspect`]: lock_core::LockClient::inspect
pub fn lock_info(info: &LockInfo) -> Value {
    let permits = match info.kind {
        LockKind::Semaphore { permits } => permits,
        _ => None,
    };
    json!({
        "key": info.key,
        "kind": kind_name(info.kind),
        "permits": permits,
        "held": info.is_held(),
        "holder": info.holder.as_ref().map(holder),
        "holders": info.holders.iter().map(holder).collect::<Vec<_>>(),
        "ttl_ms": info.ttl.map(|d| d.as_millis() as u64),
        "fence": info.fence,
        "last_tick": info.last_tick,
        "waiters": info.waiters.iter().map(|w| json!({
            "token": w.token,
            "ticket_until_ms": w.ticket_until_ms,
            "ticket_remaining_ms": w.ticket_remaining.map(|d| d.as_millis() as u64),
            "live": w.live,
        })).collect::<Vec<_>>(),
        "live_waiters": info.live_waiters(),
        "lapsed_waiters": info.waiters.len() - info.live_waiters(),
        "handoffs": info.handoffs.iter().map(|h| json!({
            "client_id": h.client_id,
            "deadline_ms": h.deadline_ms,
            "lapsed": h.lapsed,
        })).collect::<Vec<_>>(),
    })
}

/// A held lock as listed: key, kind, one holder, how many hold it, TTL.
pub fn lock_summary(lock: &LockSummary) -> Value {
    json!({
        "key": lock.key,
        "kind": kind_name(lock.kind),
        "holder": holder(&lock.holder),
        "holders": lock.holders,
        "ttl_ms": lock.ttl.map(|d| d.as_millis() as u64),
    })
}

/// One recorded run.
pub fn history_entry(e: &HistoryEntry) -> Value {
    json!({
        "id": e.id,
        "tick": e.tick,
        "slot": e.slot.map(|s| s.to_rfc3339()),
        "instance": e.instance,
        "outcome": e.outcome,
        "duration_ms": e.duration.as_millis() as u64,
        "error": e.error,
        "manual_by": e.manual_by,
        "request": e.request,
        "attempt": e.attempt,
        "retry_at": e.retry_at.map(|t| t.to_rfc3339()),
        "gave_up": e.gave_up,
        "backfill": e.backfill,
    })
}

/// A retry of a failed run waiting for its time.
pub fn pending_retry(retry: &PendingRetry) -> Value {
    json!({
        "group": retry.group,
        "job": retry.job,
        "tick": retry.tick,
        "attempt": retry.attempt,
        "due": retry.due.to_rfc3339(),
    })
}

/// A job as its group registered it.
pub fn registered_job(job: &RegisteredJob) -> Value {
    json!({
        "group": job.group,
        "name": job.name,
        "cron": job.cron,
        "time_zone": job.time_zone,
        "schedule_origin": job.origin.to_string(),
    })
}

/// A replica of a scheduler group.
pub fn replica(replica: &Replica) -> Value {
    json!({
        "group": replica.group,
        "instance": replica.instance,
        "live": replica.is_live(),
        "lapses_in_ms": replica.lapses_in.as_millis() as u64,
        "version": replica.about.as_ref().map(|a| &a.version),
        "host": replica.about.as_ref().map(|a| &a.host),
        "started_at": replica.about.as_ref().map(|a| a.started_at.to_rfc3339()),
        "running": replica.about.as_ref().map(|a| &a.running),
    })
}

/// An accepted "run now" request.
pub fn run_request(request: &RunRequest) -> Value {
    json!({
        "request": request.id,
        "job": request.job,
        "group": request.group,
        "by": request.by,
        "requested_at": request.requested_at.to_rfc3339(),
    })
}

/// A leader election: its name, the leader (instance, owner, term, since when), the lease left
/// and the live candidates in the order they would be elected.
pub fn election(info: &lock_core::ElectionInfo) -> Value {
    let epoch_ms = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
    };
    json!({
        "name": info.name,
        "leader": info.leader.as_ref().map(|l| json!({
            "instance": l.instance,
            "owner": l.owner,
            "term": l.term,
            "since_ms": l.since.map(epoch_ms),
        })),
        "lease_remaining_ms": info.lease_remaining.map(|d| d.as_millis() as u64),
        "candidates": info.candidates,
        "last_seen_ms": info.last_seen.map(epoch_ms),
    })
}
