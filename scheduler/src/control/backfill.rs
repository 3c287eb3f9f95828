//! Backfill: run each slot of a job between two instants once, as if it had been on time (the
//! run's slot is the scheduled time, not now), on the live replicas of the job's group.
//!
//! The slots are queued in the group's pending retries ([`schema::retries_key`], attempt
//! [`BACKFILL_ATTEMPT`](schema::BACKFILL_ATTEMPT)): each replica takes some with its next poll,
//! one replica each (`take_retries.lua`), and runs it under the job's lock; it claims the
//! slot's tick only when the slot is after the last claimed one (its own claim still to come,
//! which then finds it done), else leaves the tick line alone. Each run is recorded in the job's history with
//! `backfill = 1`. A slot the history shows already ran is refused unless forced, and so is one
//! queued for backfill in the last [`RETRY_TTL`] (`queue_backfill.lua` checks and queues in one
//! step, so two concurrent requests do not both queue a slot). A backfill run that finds, once
//! it holds the job's lock, an entry of the slot's own run written after the request (the run
//! was in flight when the request read the history) does not start its body.

use std::collections::BTreeSet;

use chrono::{DateTime, TimeDelta, Utc};
use lock_core::{LockClient, redis};

use crate::command::{TIMEOUT, query, run_script};
use crate::control::history::{HistoryEntry, history};
use crate::error::ControlError;
use crate::schedule::Schedule;
use crate::schema::{
    self, BACKFILL_ATTEMPT, CLAIM_SLOT, HISTORY_LEN, MAX_BACKFILL, QUEUE_BACKFILL, RETRY_TTL,
    job_name_problem,
};

/// What a [`backfill`] queued and refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Backfill {
    /// The job.
    pub job: String,
    /// The scheduler group whose replicas run the slots.
    pub group: String,
    /// The slots queued to run, oldest first.
    pub queued: Vec<DateTime<Utc>>,
    /// The slots not queued, oldest first: they already ran (the history says so), or, unless
    /// forced, a backfill of them was queued in the last [`RETRY_TTL`] (by a concurrent request,
    /// say).
    pub refused: Vec<DateTime<Utc>>,
}

/// Queues every slot of `job` in `[from, to]` to run once on a live replica of its group, as if
/// on time, skipping those its history shows already ran (ran, failed, timed out, cancelled, or
/// backfilled) unless `force`. Returns at once; the group's replicas are told at once (or find
/// them within [`RUN_POLL`](schema::RUN_POLL) if that message is lost), and the runs appear in
/// the history with `backfill = 1`.
///
/// Round trips: one `SCAN` and one read per group to find the job, one history read, one write
/// of the queued slots. Errors: [`ControlError::UnknownJob`] when no group registers the job,
/// [`ControlError::InvalidBackfill`] for a backwards or future range, or one of more than
/// [`MAX_BACKFILL`] slots.
pub async fn backfill(
    client: &LockClient,
    job: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    force: bool,
) -> Result<Backfill, ControlError> {
    if let Some(problem) = job_name_problem(job) {
        return Err(ControlError::InvalidJob(problem));
    }
    let invalid = |reason: String| ControlError::InvalidBackfill { job: job.to_owned(), reason };
    let now = Utc::now();
    if to < from {
        return Err(invalid(format!("the range ends ({to}) before it starts ({from}): swap them")));
    }
    if to > now {
        return Err(invalid(format!("the range ends in the future ({to}): backfill runs past slots only")));
    }
    let (group, schedule) = registered(client, job).await?;
    let schedule = schedule.map_err(|e| invalid(format!("its registered schedule does not parse: {e}")))?;
    let mut slots = Vec::new();
    let mut cursor = from - TimeDelta::milliseconds(1);
    while let Some(slot) = schedule.next_after(cursor).map(|t| t.with_timezone(&Utc)).filter(|t| *t <= to) {
        if slots.len() == MAX_BACKFILL {
            return Err(invalid(format!(
                "the range holds more than {MAX_BACKFILL} slots: backfill it in parts"
            )));
        }
        slots.push(slot);
        cursor = slot;
    }
    let ran: BTreeSet<i64> = if force {
        BTreeSet::new()
    } else {
        history(client, job, HISTORY_LEN * 2)
            .await?
            .into_iter()
            .filter(|e| {
                matches!(e.outcome.as_str(), "ran" | "failed" | "timed out" | "cancelled" | "replaced")
            })
            .filter(|e| e.manual_by.is_none())
            .map(|e| e.tick)
            .collect()
    };
    let (mut refused, candidates): (Vec<_>, Vec<_>) =
        slots.into_iter().partition(|slot| ran.contains(&slot.timestamp_millis()));
    let mut queued = Vec::new();
    if !candidates.is_empty() {
        // Checked and queued in one step: a concurrent request (or an earlier one whose runs
        // have not ended) does not queue a slot again.
        let mut invocation = QUEUE_BACKFILL.key(schema::retries_key(&group));
        invocation
            .key(schema::backfilled_key(&group))
            .arg(now.timestamp_millis())
            .arg(RETRY_TTL.as_millis() as u64)
            .arg(if force { "1" } else { "0" });
        for slot in &candidates {
            let tick = slot.timestamp_millis();
            invocation
                .arg(schema::retry_member(job, tick, BACKFILL_ATTEMPT))
                .arg(schema::backfill_request(job, tick));
        }
        let mut announce = redis::pipe();
        crate::retry::pending::announce(&mut announce, client, &group, "retry");
        // The group found by the admin reads as long as its retries last: its own request (the
        // index is on another Cluster slot), sent concurrently.
        let mut index = redis::pipe();
        crate::index::add_group(&mut index, &group, RETRY_TTL);
        let (answers, ()) = tokio::try_join!(
            run_script::<Vec<i64>>(client, "queueing a backfill", &QUEUE_BACKFILL, &invocation, TIMEOUT),
            crate::index::send(client, "indexing a group's retries", &index)
        )?;
        for (slot, answer) in candidates.into_iter().zip(answers) {
            if answer == 1 { queued.push(slot) } else { refused.push(slot) }
        }
        refused.sort();
        if !queued.is_empty() {
            // After the write (same connection, in order): a replica told of it finds it.
            query::<()>(client, "announcing a backfill", &announce).await?;
        }
    }
    Ok(Backfill { job: job.to_owned(), group, queued, refused })
}

/// The group that registers `job` (the first by name, if several), and its schedule.
async fn registered(
    client: &LockClient,
    job: &str,
) -> Result<(String, Result<Schedule, String>), ControlError> {
    // The groups from their index, then every registry's entry for the job in one round trip.
    let groups = crate::index::groups(client).await?;
    if groups.is_empty() {
        return Err(ControlError::UnknownJob { job: job.to_owned() });
    }
    let mut pipe = redis::pipe();
    for group in &groups {
        pipe.cmd("HGET").arg(schema::jobs_key(group)).arg(job);
    }
    let entries: Vec<Option<String>> = query(client, "reading a job's registered schedule", &pipe).await?;
    for (group, entry) in groups.iter().zip(entries) {
        let Some((expression, zone, _)) = entry.as_deref().and_then(schema::parse_registry_entry) else {
            continue;
        };
        // An interval is aligned to the epoch: its registered zone is only informative.
        let zone = (!expression.starts_with("every")).then_some(zone);
        let schedule = match lock_schedule::When::parse(expression, zone) {
            Ok(Some(when)) => Schedule::from_when(&when).map_err(|e| e.to_string()),
            Ok(None) => Err("the job is turned off".to_owned()),
            Err(e) => Err(e.to_string()),
        };
        return Ok((group.to_owned(), schedule));
    }
    Err(ControlError::UnknownJob { job: job.to_owned() })
}

/// Claims slot `tick` of a job (lock `lock_key`) for a backfill run that holds the job's lock,
/// when it is after the job's last claimed tick (F3): the slot's own claim may still be to come
/// (its replica stalled, the claim grace, a catch-up after a failed claim, a buffered slot
/// handed over at shutdown), and then answers "tick done" instead of running the slot again.
/// `true`: claimed here, so the slot's own run has not started (every own run claims first);
/// `false`: this tick or a later one was claimed already (nothing changed, the tick line is
/// never moved back), and [`ran_since_request`] decides. One script call ([`CLAIM_SLOT`]: the
/// same check and write as the own claims, so a concurrent one of them cannot also claim it).
pub(crate) async fn claim_if_unclaimed(
    client: &LockClient,
    lock_key: &str,
    tick: i64,
) -> Result<bool, ControlError> {
    let mut invocation = CLAIM_SLOT.key(lock_core::schema::tick_key(lock_key));
    invocation.arg(tick).arg(lock_core::schema::TICK_TTL.as_millis() as u64);
    let last: i64 =
        run_script(client, "claiming a backfilled slot", &CLAIM_SLOT, &invocation, TIMEOUT).await?;
    Ok(last == 0)
}

/// Most history entries a backfill run reads to find its slot's own run ended after the
/// request ([`ran_since_request`]).
const RAN_SINCE_READ: usize = 200;

/// Whether slot `tick` of `job` (lock `lock_key`) ran on its own while a backfill of it was
/// queued in `group`, so that the backfill run must not start its body: its own run (not a
/// backfill, not a manual run) has an entry recorded after the request (it was in flight when
/// the request read the history), or the slot is the job's last claimed tick and its own run
/// has no entry yet (it ended a moment ago, its entry not yet written). Read by the backfill
/// run once it holds the job's lock. `false` when the slot was not queued by a request (a
/// buffered slot handed over at shutdown). Two round trips: the request's time with the last
/// claimed tick, then the latest history entries.
pub(crate) async fn ran_since_request(
    client: &LockClient,
    group: &str,
    job: &str,
    lock_key: Option<&str>,
    tick: i64,
) -> Result<bool, ControlError> {
    let mut request = redis::pipe();
    request.cmd("ZSCORE").arg(schema::backfilled_key(group)).arg(schema::backfill_request(job, tick));
    // Another Cluster slot: its own read, sent concurrently. A job whose fn takes its own lock:
    // its tick key is not known here.
    let read_last = async {
        let Some(key) = lock_key else { return Ok((None,)) };
        let mut pipe = redis::pipe();
        pipe.cmd("GET").arg(lock_core::schema::tick_key(key));
        query::<(Option<String>,)>(client, "reading the last claimed tick", &pipe).await
    };
    let ((requested,), (last,)) =
        tokio::try_join!(query::<(Option<f64>,)>(client, "reading a backfill request", &request), read_last)?;
    let Some(requested) = requested.map(|ms| ms as i64) else { return Ok(false) };
    let entries = history(client, job, RAN_SINCE_READ).await?;
    let own: Vec<&HistoryEntry> = entries
        .iter()
        .filter(|e| {
            e.tick == tick
                && e.manual_by.is_none()
                && !e.backfill
                && matches!(e.outcome.as_str(), "ran" | "failed" | "timed out" | "cancelled" | "replaced")
        })
        .collect();
    let after_request = own.iter().any(|e| {
        e.id.split('-').next().and_then(|ms| ms.parse::<i64>().ok()).is_some_and(|ms| ms >= requested)
    });
    let claimed = last.and_then(|t| t.parse::<i64>().ok()) == Some(tick);
    Ok(after_request || (claimed && own.is_empty()))
}
