//! Backfill: run each slot of a job between two instants once, as if it had been on time (the
//! run's slot is the scheduled time, not now), on the live replicas of the job's group.
//!
//! The slots are queued in the group's pending retries ([`schema::retries_key`], attempt
//! [`BACKFILL_ATTEMPT`](schema::BACKFILL_ATTEMPT)): each replica takes some with its next poll,
//! one replica each (`ZREM`), and runs it under the job's lock without claiming its tick (the
//! claimed tick has moved past it). Each run is recorded in the job's history with
//! `backfill = 1`. A slot the history shows already ran is refused unless forced.

use std::collections::BTreeSet;

use chrono::{DateTime, TimeDelta, Utc};
use lock_core::{LockClient, redis};

use crate::command::query;
use crate::control::history::history;
use crate::error::ControlError;
use crate::schedule::Schedule;
use crate::schema::{self, BACKFILL_ATTEMPT, HISTORY_LEN, MAX_BACKFILL, RETRY_TTL, job_name_problem};

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
    /// The slots not queued because they already ran (the history says so), oldest first.
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
    let (refused, queued): (Vec<_>, Vec<_>) =
        slots.into_iter().partition(|slot| ran.contains(&slot.timestamp_millis()));
    if !queued.is_empty() {
        let key = schema::retries_key(&group);
        let mut pipe = redis::pipe();
        let zadd = pipe.cmd("ZADD").arg(&key);
        for slot in &queued {
            zadd.arg(now.timestamp_millis()).arg(schema::retry_member(
                job,
                slot.timestamp_millis(),
                BACKFILL_ATTEMPT,
            ));
        }
        zadd.ignore();
        let ttl = RETRY_TTL.as_millis() as u64;
        pipe.cmd("PEXPIRE").arg(&key).arg(ttl).arg("NX").ignore();
        pipe.cmd("PEXPIRE").arg(&key).arg(ttl).arg("GT").ignore();
        crate::retry::pending::announce(&mut pipe, client, &group, "retry");
        // The group found by the admin reads as long as its retries last: its own request (the
        // index is on another Cluster slot), sent concurrently.
        let mut index = redis::pipe();
        crate::index::add_group(&mut index, &group, RETRY_TTL);
        tokio::try_join!(
            query::<()>(client, "queueing a backfill", &pipe),
            crate::index::send(client, "indexing a group's retries", &index)
        )?;
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
