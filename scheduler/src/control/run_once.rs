//! "Run now" once per idempotency key: the same request sent again (a double click, a client
//! retrying after a lost answer, a script run twice) answers with the first request instead of
//! running the job again.
//!
//! The key is remembered beside the job's keys ([`schema::run_once_key`]) for
//! [`RUN_ONCE_TTL`]: set to `pending` (`SET NX`) by the first caller, which then asks for the
//! run ([`run_now`]) and records the request a replica took; a caller that finds the key waits
//! for that outcome and answers with the same request. A first caller that fails (no live
//! replica, the request not taken in time) forgets the key, so that the same key may try
//! again: nothing ran.

use std::time::Duration;

use chrono::DateTime;
use lock_core::{LockClient, redis};

use crate::command::query;
use crate::control::run_now::{RunRequest, run_now};
use crate::error::ControlError;
use crate::schema::{self, RUN_ONCE_TTL, RUN_PICKUP};

/// What the record says while the first caller's request waits for a replica.
const PENDING: &str = "pending";

/// A "run now" asked with an idempotency key, as [`run_now_once`] answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunOnce {
    /// The request a replica took: this call's, or the first one's with the same key.
    pub request: RunRequest,
    /// The key had been used: `request` is the first call's, and nothing new was asked.
    pub replayed: bool,
}

/// Asks a live replica to run `job` once now, as [`run_now`] does, unless a call with the same
/// idempotency `key` (1 to 64 letters, digits and `-_.:`; a UUID per click, say) did within
/// [`RUN_ONCE_TTL`]: then it answers with that call's request (`replayed`), waiting for it if
/// it is still under way. So three quick calls with one key make one run.
///
/// Round trips: one `SET NX` and, for the first call, [`run_now`]'s and one `SET` of the
/// outcome; a repeated call one `GET` every 50 ms while the first waits. Errors as
/// [`run_now`], and [`ControlError::InvalidArgument`] for a key that cannot be one.
pub async fn run_now_once(
    client: &LockClient,
    job: &str,
    by: &str,
    key: &str,
) -> Result<RunOnce, ControlError> {
    let record = schema::run_once_key(job, key)?;
    let ttl = RUN_ONCE_TTL.as_millis() as u64;
    // Twice at most: a repeated call whose first caller failed (and forgot the key) asks once
    // itself.
    for _ in 0..2 {
        let mut claim = redis::pipe();
        claim.cmd("SET").arg(&record).arg(PENDING).arg("NX").arg("PX").arg(ttl);
        let (claimed,): (Option<String>,) = query(client, "remembering a run-now's key", &claim).await?;
        if claimed.is_some() {
            return first_call(client, job, by, &record).await;
        }
        if let Some(request) = wait_for_first(client, job, &record).await? {
            return Ok(RunOnce { request, replayed: true });
        }
    }
    Err(ControlError::RunPending { job: job.to_owned() })
}

/// The first call with a key: asks for the run, then records the request taken, or forgets the
/// key if nothing was asked.
async fn first_call(client: &LockClient, job: &str, by: &str, record: &str) -> Result<RunOnce, ControlError> {
    match run_now(client, job, by).await {
        Ok(request) => {
            let mut remember = redis::pipe();
            let value = format!("{}\t{}", request.group, request.stored);
            remember.cmd("SET").arg(record).arg(value).arg("XX").arg("KEEPTTL").ignore();
            query::<()>(client, "remembering a run-now's request", &remember).await?;
            Ok(RunOnce { request, replayed: false })
        }
        Err(e) => {
            let mut forget = redis::pipe();
            forget.cmd("DEL").arg(record).ignore();
            // Best effort: if it stays, it lapses with its expiry, and the same key answers
            // "pending" until then.
            if let Err(forget_error) = query::<()>(client, "forgetting a run-now's key", &forget).await {
                tracing::warn!(error = %forget_error, "could not forget the idempotency key of a failed run-now");
            }
            Err(e)
        }
    }
}

/// Waits (up to the first call's own patience) for the first call with the key to record its
/// request; `None` if it failed and forgot the key.
async fn wait_for_first(
    client: &LockClient,
    job: &str,
    record: &str,
) -> Result<Option<RunRequest>, ControlError> {
    let deadline = tokio::time::Instant::now() + RUN_PICKUP + Duration::from_secs(5);
    loop {
        let mut read = redis::pipe();
        read.cmd("GET").arg(record);
        let (value,): (Option<String>,) = query(client, "reading a run-now's key", &read).await?;
        match value.as_deref() {
            None => return Ok(None),
            Some(PENDING) => {}
            Some(value) => return parse(job, value).map(Some),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ControlError::RunPending { job: job.to_owned() });
        }
        // Not a synchronisation primitive: the record is in Redis, written by another process.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The request recorded as `<group>\t<id>\t<by>\t<ms>`.
fn parse(job: &str, value: &str) -> Result<RunRequest, ControlError> {
    let invalid = || ControlError::InvalidArgument {
        what: "idempotency key",
        reason: "its record in Redis is not one this version writes: use another key".into(),
    };
    let (group, stored) = value.split_once('\t').ok_or_else(invalid)?;
    let (id, by, ms) = schema::parse_run_request(stored).ok_or_else(invalid)?;
    Ok(RunRequest {
        id: id.to_owned(),
        job: job.to_owned(),
        group: group.to_owned(),
        by: by.to_owned(),
        requested_at: DateTime::from_timestamp_millis(ms).ok_or_else(invalid)?,
        stored: stored.to_owned(),
    })
}
