//! The pending retries of a scheduler group in Redis ([`schema::retries_key`]): added by the
//! replica whose attempt failed (and announced on the group's channel, so every replica learns
//! when it is due), read by the replicas' looks for "run now" requests, taken (once) by
//! `take_retries.lua`.

use chrono::{DateTime, Utc};
use lock_core::{LockClient, redis};

use crate::command::{self, query};
use crate::error::ControlError;
use crate::schema::{self, RETRY_TAKEN_TTL, RETRY_TTL, TAKE_RETRIES};

/// Most due retries a replica reads in one look (it looks again at once when it read this
/// many).
pub(crate) const DUE_PER_POLL: usize = 256;

/// Adds attempt `attempt` of `job`'s slot `tick`, due at `due`, to the group's pending retries
/// (`retries`, its key), in one round trip: the entry, and the key's expiry set if it had none
/// and raised if it was sooner (never lowered: other entries may be due later), and the
/// group's entry in the group index made to last as long.
pub(crate) async fn add(
    client: &LockClient,
    retries: &str,
    job: &str,
    tick: i64,
    attempt: u32,
    due: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<(), ControlError> {
    let ttl = (due - now).to_std().unwrap_or_default() + RETRY_TTL;
    let ttl_ms = ttl.as_millis() as u64;
    let mut pipe = redis::pipe();
    pipe.cmd("ZADD")
        .arg(retries)
        .arg(due.timestamp_millis())
        .arg(schema::retry_member(job, tick, attempt))
        .ignore();
    pipe.cmd("PEXPIRE").arg(retries).arg(ttl_ms).arg("NX").ignore();
    pipe.cmd("PEXPIRE").arg(retries).arg(ttl_ms).arg("GT").ignore();
    if let Some(group) = schema::group_of_retries(retries) {
        // After the write (same connection, in order): a replica told of it finds it.
        announce(&mut pipe, client, group, "retry");
    }
    // The group's index entry lasts as long as the set, so the admin reads find it even
    // after every replica of the group stopped; sent concurrently (another Cluster slot).
    let mut index = redis::pipe();
    if let Some(group) = schema::group_of_retries(retries) {
        crate::index::add_group(&mut index, group, ttl);
    }
    let indexing = async {
        if index.cmd_iter().next().is_some()
            && let Err(e) = crate::index::send(client, "indexing a group's retries", &index).await
        {
            // The group's replicas renew it within a minute while any of them runs.
            tracing::debug!(error = %e, "could not write the group's entry in the group index");
        }
    };
    let (added, ()) = tokio::join!(query::<()>(client, "scheduling a retry", &pipe), indexing);
    added
}

/// Adds to `pipe` the announcement on `group`'s channel ([`schema::group_channel`]) that
/// something was written for its replicas (`what`: `run`, `retry`). Ignored in the reply.
pub(crate) fn announce(pipe: &mut redis::Pipeline, client: &LockClient, group: &str, what: &str) {
    pipe.cmd(client.publish_command()).arg(schema::group_channel(group)).arg(what).ignore();
}

/// Adds to `pipe` the read of the retries due at `now`, then the earliest one not yet due with
/// its due time (two commands, in the look's pipeline; replies: members, `[member, ms]`).
pub(crate) fn read_due(pipe: &mut redis::Pipeline, retries: &str, now: DateTime<Utc>) {
    let now = now.timestamp_millis();
    pipe.cmd("ZRANGEBYSCORE").arg(retries).arg("-inf").arg(now).arg("LIMIT").arg(0).arg(DUE_PER_POLL);
    pipe.cmd("ZRANGEBYSCORE")
        .arg(retries)
        .arg(format!("({now}"))
        .arg("+inf")
        .arg("WITHSCORES")
        .arg("LIMIT")
        .arg(0)
        .arg(1);
}

/// Takes the retries `members` (as read) for `taker` (this replica's instance id): per member,
/// whether this replica has it. Each is taken by at most one replica (`take_retries.lua`
/// removes it and marks it taken in one step); sent again after a lost reply, it answers the
/// same. One round trip for all.
pub(crate) async fn take(
    client: &LockClient,
    retries: &str,
    taker: &str,
    members: &[&str],
    timeout: std::time::Duration,
) -> Result<Vec<bool>, ControlError> {
    if members.is_empty() {
        return Ok(Vec::new());
    }
    let mut invocation = TAKE_RETRIES.key(retries);
    for member in members {
        invocation.key(schema::retry_taken_key(retries, member));
    }
    invocation.arg(taker).arg(RETRY_TAKEN_TTL.as_millis() as u64);
    for member in members {
        invocation.arg(*member);
    }
    let taken: Vec<i64> =
        command::run_script(client, "taking due retries", &TAKE_RETRIES, &invocation, timeout).await?;
    Ok(taken.into_iter().map(|n| n == 1).collect())
}
