//! The indexes of scheduler groups and jobs ([`schema::group_index_key`],
//! [`schema::job_index_key`]): what the admin reads (`control`) list instead of scanning the
//! keyspace, so that a view costs Redis the same however many unrelated keys it holds.
//!
//! Writers send their entry concurrently with what it indexes (no added latency): in its own
//! pipeline, since the index keys have no hash tag and a Cluster pipeline may not cross slots.
//! An entry's score is until when what it names may exist, so readers skip lapsed entries and
//! writers drop them; entries last a day or more, so the periodic writers renew theirs about
//! once a minute ([`RENEWAL`]), not with every announcement or history entry.
//!
//! There is no fallback for data written before the indexes existed: a group reappears with its
//! next announcement (every 2 s), a job with the next run a replica records or its next pause.

use std::time::Duration;

use lock_core::{LockClient, redis};

use crate::command::query;
use crate::error::ControlError;
use crate::schema::{self, HISTORY_TTL};

/// How often a replica renews its group's entry (and a history's writer its job's, with the
/// history's own expiry): entries last [`RETRY_TTL`](schema::RETRY_TTL) and
/// [`HISTORY_TTL`], so a minute costs one command a minute per replica and nothing more.
pub(crate) const RENEWAL: Duration = Duration::from_secs(60);

/// Sends `pipe` (commands on one index key, built with the functions here).
pub(crate) async fn send(
    client: &LockClient,
    action: &'static str,
    pipe: &redis::Pipeline,
) -> Result<(), ControlError> {
    query::<()>(client, action, pipe).await
}

/// Adds to `pipe` the entry of `group` in the group index, lasting at least `ttl` from now
/// (never shortened: `GT`), with the index's expiry raised to match, and the lapsed entries
/// dropped. Every command's reply is ignored.
pub(crate) fn add_group(pipe: &mut redis::Pipeline, group: &str, ttl: Duration) {
    add(pipe, schema::group_index_key(), group, ttl);
}

/// Adds to `pipe` the entries of `jobs` in the job index, lasting at least [`HISTORY_TTL`] from
/// now (never shortened: `GT`), in one `ZADD`, the lapsed entries dropped, and the index's
/// expiry set to [`HISTORY_TTL`]: a plain `PEXPIRE` (one command, however many jobs), since
/// every finite entry was written with that TTL at an earlier time and so lapses before. Adds
/// nothing for no jobs.
pub(crate) fn add_jobs<'a>(pipe: &mut redis::Pipeline, jobs: impl IntoIterator<Item = &'a str>) {
    let key = schema::job_index_key();
    let score = schema::index_score(HISTORY_TTL);
    let mut jobs = jobs.into_iter().peekable();
    if jobs.peek().is_none() {
        return;
    }
    let zadd = pipe.cmd("ZADD").arg(key).arg("GT");
    for job in jobs {
        zadd.arg(score).arg(job);
    }
    zadd.ignore();
    drop_lapsed(pipe, key);
    pipe.cmd("PEXPIRE").arg(key).arg(HISTORY_TTL.as_millis() as u64).ignore();
}

/// Adds to `pipe` the entry of a paused `job`: kept while the flag is (`+inf`), the index's own
/// expiry renewed to [`HISTORY_TTL`].
pub(crate) fn add_paused_job(pipe: &mut redis::Pipeline, job: &str) {
    let key = schema::job_index_key();
    pipe.cmd("ZADD").arg(key).arg("+inf").arg(job).ignore();
    pipe.cmd("PEXPIRE").arg(key).arg(HISTORY_TTL.as_millis() as u64).ignore();
}

/// Adds to `pipe` the end of `job`'s pause in the job index: its entry then lasts as long as a
/// history written now could (only if it has one: `XX`), so that it drops out with the history.
pub(crate) fn end_pause(pipe: &mut redis::Pipeline, job: &str) {
    let key = schema::job_index_key();
    pipe.cmd("ZADD").arg(key).arg("XX").arg(schema::index_score(HISTORY_TTL)).arg(job).ignore();
}

fn add(pipe: &mut redis::Pipeline, key: &str, member: &str, ttl: Duration) {
    pipe.cmd("ZADD").arg(key).arg("GT").arg(schema::index_score(ttl)).arg(member).ignore();
    drop_lapsed(pipe, key);
    expire(pipe, key, ttl);
}

/// Entries lapse one by one; the set is small (one per group or job), so dropping the lapsed
/// ones with each write costs little and keeps readers from carrying them.
fn drop_lapsed(pipe: &mut redis::Pipeline, key: &str) {
    pipe.cmd("ZREMRANGEBYSCORE")
        .arg(key)
        .arg("-inf")
        .arg(format!("({}", chrono::Utc::now().timestamp_millis()))
        .ignore();
}

/// The key's expiry set if it has none (a new key), and raised if sooner (never lowered:
/// other entries may last longer).
fn expire(pipe: &mut redis::Pipeline, key: &str, ttl: Duration) {
    let ms = ttl.as_millis() as u64;
    pipe.cmd("PEXPIRE").arg(key).arg(ms).arg("NX").ignore();
    pipe.cmd("PEXPIRE").arg(key).arg(ms).arg("GT").ignore();
}

/// The names whose entry in the index `key` has not lapsed, sorted (one `ZRANGEBYSCORE`).
async fn live(client: &LockClient, action: &'static str, key: &str) -> Result<Vec<String>, ControlError> {
    let mut pipe = redis::pipe();
    pipe.cmd("ZRANGEBYSCORE").arg(key).arg(chrono::Utc::now().timestamp_millis()).arg("+inf");
    let (mut names,): (Vec<String>,) = query(client, action, &pipe).await?;
    names.sort();
    Ok(names)
}

/// The scheduler groups that announced a replica or wrote a retry within [`RETRY_TTL`](schema::RETRY_TTL),
/// sorted: those whose registry, member set or pending retries may still exist.
pub(crate) async fn groups(client: &LockClient) -> Result<Vec<String>, ControlError> {
    let mut groups = live(client, "listing scheduler groups", schema::group_index_key()).await?;
    groups.retain(|g| schema::group_name_problem(g).is_none());
    Ok(groups)
}

/// The jobs of the job index, sorted: those that may have a history or a pause flag (callers
/// check which do).
pub(crate) async fn jobs(client: &LockClient) -> Result<Vec<String>, ControlError> {
    let mut jobs = live(client, "listing jobs", schema::job_index_key()).await?;
    jobs.retain(|j| schema::job_name_problem(j).is_none());
    Ok(jobs)
}
