//! Reading a job's run history: the capped, expiring Redis stream per job
//! ([`schema::history_key`](crate::schema::history_key)) the replicas write their runs to.

use std::time::Duration;

use chrono::{DateTime, Utc};
use lock_core::LockClient;
use lock_core::redis;

use crate::command::query;
use crate::error::ControlError;
use crate::schema::{self, field, history_key};

/// One run of a job, as recorded in its history.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HistoryEntry {
    /// The stream entry id (`<ms>-<seq>`, the time it was recorded).
    pub id: String,
    /// The slot, epoch milliseconds (the tick claimed in Redis).
    pub tick: i64,
    /// The slot as a time.
    pub slot: Option<DateTime<Utc>>,
    /// The instance that recorded it.
    pub instance: String,
    /// The outcome's label (`ran`, `failed`, `cancelled`, `timed out`, `missed`, `skipped: paused`).
    pub outcome: String,
    /// How long the run took.
    pub duration: Duration,
    /// The error of a failed run, or what a missed record counts.
    pub error: Option<String>,
    /// Who asked for it, for a manual ("run now") run (its `tick` is then the request's time).
    pub manual_by: Option<String>,
    /// The "run now" request a manual run served.
    pub request: Option<String>,
    /// Which attempt at the slot it was (1 for the first run), for jobs with a retry policy
    /// ([`Job::retry`](crate::job::Job::retry)); `None` for the others.
    pub attempt: Option<u32>,
    /// When the next attempt was due, if this one failed and another was scheduled.
    pub retry_at: Option<DateTime<Utc>>,
    /// It failed, and was the last attempt its retry policy allowed: the slot failed for good.
    pub gave_up: bool,
    /// A run of a past slot asked for by a [`backfill`](crate::control::backfill::backfill).
    pub backfill: bool,
}

/// The last `n` runs of `job`, newest first.
pub async fn history(client: &LockClient, job: &str, n: usize) -> Result<Vec<HistoryEntry>, ControlError> {
    let key = history_key(job)?;
    let mut pipe = redis::pipe();
    pipe.cmd("XREVRANGE").arg(&key).arg("+").arg("-").arg("COUNT").arg(n.max(1));
    let (entries,): (Vec<StreamEntry>,) = query(client, "reading a job's run history", &pipe).await?;
    Ok(entries.into_iter().take(n).map(|(id, fields)| entry(id, fields)).collect())
}

/// The runs of `job` recorded at or after `since` (the entries' ids are their record times),
/// newest first, at most `n` of them (the history keeps about
/// [`HISTORY_LEN`](crate::schema::HISTORY_LEN) in all).
pub async fn history_since(
    client: &LockClient,
    job: &str,
    since: DateTime<Utc>,
    n: usize,
) -> Result<Vec<HistoryEntry>, ControlError> {
    let key = history_key(job)?;
    let mut pipe = redis::pipe();
    let min = since.timestamp_millis().max(0);
    pipe.cmd("XREVRANGE").arg(&key).arg("+").arg(min).arg("COUNT").arg(n.max(1));
    let (entries,): (Vec<StreamEntry>,) = query(client, "reading a job's run history", &pipe).await?;
    Ok(entries.into_iter().take(n).map(|(id, fields)| entry(id, fields)).collect())
}

/// The runs of `job` recorded before the entry `before` (its id, as [`HistoryEntry::id`] gives
/// it; `None`: from the newest), newest first, at most `n`: a page of the history, the next
/// page starting before the last entry of this one. One `XREVRANGE`, whatever the history's
/// length. Errors: [`ControlError::InvalidArgument`] for an id that is not `<ms>-<seq>`.
pub async fn history_before(
    client: &LockClient,
    job: &str,
    before: Option<&str>,
    n: usize,
) -> Result<Vec<HistoryEntry>, ControlError> {
    let key = history_key(job)?;
    let end = match before {
        Some(id) => {
            check_entry_id(id)?;
            // Exclusive: the page starts after the entry it is given.
            format!("({id}")
        }
        None => "+".to_owned(),
    };
    let mut pipe = redis::pipe();
    pipe.cmd("XREVRANGE").arg(&key).arg(end).arg("-").arg("COUNT").arg(n.max(1));
    let (entries,): (Vec<StreamEntry>,) = query(client, "reading a job's run history", &pipe).await?;
    Ok(entries.into_iter().take(n).map(|(id, fields)| entry(id, fields)).collect())
}

/// The run of `job` recorded as the entry `id`, if the history still holds it. One `XRANGE`.
/// Errors: [`ControlError::InvalidArgument`] for an id that is not `<ms>-<seq>`.
pub async fn history_entry(
    client: &LockClient,
    job: &str,
    id: &str,
) -> Result<Option<HistoryEntry>, ControlError> {
    let key = history_key(job)?;
    check_entry_id(id)?;
    let mut pipe = redis::pipe();
    pipe.cmd("XRANGE").arg(&key).arg(id).arg(id);
    let (entries,): (Vec<StreamEntry>,) = query(client, "reading a run of a job's history", &pipe).await?;
    Ok(entries.into_iter().next().map(|(id, fields)| entry(id, fields)))
}

/// Refuses an entry id that is not `<ms>-<seq>` (two whole numbers).
fn check_entry_id(id: &str) -> Result<(), ControlError> {
    let number =
        |part: &str| !part.is_empty() && part.len() <= 20 && part.bytes().all(|b| b.is_ascii_digit());
    match id.split_once('-') {
        Some((ms, seq)) if number(ms) && number(seq) => Ok(()),
        _ => Err(ControlError::InvalidArgument {
            what: "history entry id",
            reason: format!(
                "a history entry's id is `<ms>-<seq>` (e.g. 1764590400000-0), not {:?}",
                id.chars().take(48).collect::<String>()
            ),
        }),
    }
}

/// A stream entry as XRANGE returns it: its id and its field-value pairs.
pub(crate) type StreamEntry = (String, Vec<(String, String)>);

pub(crate) fn entry(id: String, fields: Vec<(String, String)>) -> HistoryEntry {
    let get = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let tick = get(field::TICK).and_then(|t| t.parse().ok()).unwrap_or_default();
    HistoryEntry {
        id,
        tick,
        slot: DateTime::from_timestamp_millis(tick),
        instance: get(field::INSTANCE).unwrap_or_default(),
        outcome: get(field::OUTCOME).unwrap_or_default(),
        duration: Duration::from_millis(
            get(field::DURATION_MS).and_then(|d| d.parse().ok()).unwrap_or_default(),
        ),
        error: get(field::ERROR),
        manual_by: get(field::MANUAL_BY),
        request: get(field::REQUEST),
        attempt: get(field::ATTEMPT).and_then(|a| a.parse().ok()),
        retry_at: get(field::RETRY_AT).and_then(|t| t.parse().ok()).and_then(DateTime::from_timestamp_millis),
        gave_up: get(field::GAVE_UP).is_some_and(|v| v == "1"),
        backfill: get(field::BACKFILL).is_some_and(|v| v == "1"),
    }
}

/// The jobs that have a run history or a pause flag in Redis, sorted: the candidates from the
/// job index ([`schema::job_index_key`], one command, never a `SCAN`), each checked with one
/// `EXISTS` of its history and pause flag (same hash tag), all in one round trip. The Redis work
/// depends on the number of jobs, not on how many other keys Redis holds.
///
/// A history last written by a version before the index (and not since) is not listed: the
/// job is, once a replica records its next run or it is paused.
pub async fn jobs(client: &LockClient) -> Result<Vec<String>, ControlError> {
    let candidates = crate::index::jobs(client).await?;
    if candidates.is_empty() {
        return Ok(candidates);
    }
    let mut pipe = redis::pipe();
    for job in &candidates {
        pipe.cmd("EXISTS").arg(history_key(job)?).arg(schema::pause_key(job)?);
    }
    let found: Vec<i64> = query(client, "listing jobs", &pipe).await?;
    Ok(candidates.into_iter().zip(found).filter(|(_, n)| *n > 0).map(|(job, _)| job).collect())
}

/// Whether `job` has a run history or a pause flag in Redis: one `EXISTS` of its two keys
/// (one hash tag). Unlike looking it up in [`jobs`], this also finds a history written by a
/// version from before the job index.
pub async fn has_history_or_pause_flag(client: &LockClient, job: &str) -> Result<bool, ControlError> {
    let mut pipe = redis::pipe();
    pipe.cmd("EXISTS").arg(history_key(job)?).arg(schema::pause_key(job)?);
    let (found,): (i64,) = query(client, "looking for a job's history", &pipe).await?;
    Ok(found > 0)
}

/// Failed and timed-out runs of `job` recorded in about the last day: the counts per hour
/// written with the history entries ([`schema::failures_key`]), for the current hour and the 24
/// before it (so between 24 and 25 hours). One read of one small key, however long the
/// history.
pub async fn failures_last_day(client: &LockClient, job: &str) -> Result<u64, ControlError> {
    let key = schema::failures_key(job)?;
    let since = schema::failure_hour(chrono::Utc::now().timestamp_millis()) - 24;
    let mut read = redis::pipe();
    read.cmd("ZRANGE").arg(&key).arg(0).arg(-1).arg("WITHSCORES");
    let (counts,): (Vec<(i64, f64)>,) = query(client, "counting a job's failures", &read).await?;
    Ok(counts.iter().filter(|(hour, _)| *hour >= since).map(|(_, n)| *n as u64).sum())
}
