//! The scheduler's Redis schema, in one place: every key it writes besides lock-core's (the
//! tick claims live in [`lock_core::schema`]), their expiries, the fields of a history entry,
//! the job-name rule, and the Lua scripts (`schema/lua/*.lua`). Nothing else in the workspace
//! spells these keys: `lockctl` and the tests use these functions.
//!
//! Keys of one job share a Redis Cluster slot (hash tag `{job:<name>}`); every key expires:
//!
//! | key | type | content | expiry |
//! |---|---|---|---|
//! | [`pause_key`] `scheduler:{job:<name>}:paused` | string | who paused it and when | none while paused (deleted by resume) |
//! | [`failure_streak_key`] `scheduler:{job:<name>}:slot_outcomes` | zset | the final outcomes of the job's latest slots, for pause on failure: slot (epoch ms) -> `2 * slot + 1` failed for good, `2 * slot` succeeded; at least the latest 256 kept (deleted by resume) | [`FAILURE_STREAK_TTL`] after the last outcome |
//! | [`buffered_key`] `scheduler:{job:<name>}:buffered` | string | the slot (epoch ms) buffered behind a running run ([`Overlap::BufferOne`](crate::overlap::Overlap::BufferOne)), taken by that run's end | [`BUFFERED_TTL`] |
//! | [`run_count_key`] `scheduler:{job:<name>}:run_count` | string | the job's slots run so far, counted by the run that claimed each ([`Job::max_runs`](crate::job::Job::max_runs)) | [`RUN_COUNT_TTL`] after the last count |
//! | [`missed_key`] `scheduler:{job:<name>}:missed` | string | the latest missed slot recorded (so replicas record it once) | [`MISSED_TTL`] |
//! | [`failures_key`] `scheduler:{job:<name>}:failures` | zset | hour (since the epoch, UTC) -> failed and timed-out runs recorded in it, counted with their history entries; hours older than a day dropped by the next count | [`FAILURES_TTL`] after the last failure |
//! | [`run_once_key`] `scheduler:{job:<name>}:run-once:<key>` | string | a "run now" asked with an idempotency key ([`control::run_now_once`](crate::control::run_now_once)): `pending` while its request waits for a replica, then the request taken (`<group>\t<id>\t<by>\t<ms>`) | [`RUN_ONCE_TTL`] |
//! | [`history_key`] `scheduler:{job:<name>}:history` | stream | one entry per run, fields in [`field`] | [`HISTORY_TTL`] after the last entry, give or take a minute (each replica renews it at most once a minute); trimmed to about [`HISTORY_LEN`] entries once a minute |
//! | [`members_key`] `scheduler:{group:<name>}:members` | zset | instance id -> when its announcement lapses (server clock, ms) | [`MEMBER_TTL`] after the last announcement |
//! | [`replicas_key`] `scheduler:{group:<name>}:replicas` | hash | instance id -> what the replica says about itself ([`replica_about`]: `<started ms>\t<host>\t<version>\t<running job>...`), written with its announcement when it changes (at least every half [`MEMBER_TTL`]); a member's field goes when its announcement lapses | [`MEMBER_TTL`] after the last write |
//! | [`jobs_key`] `scheduler:{group:<name>}:jobs` | hash | job name -> its schedule in force ([`registry_entry`]: `<schedule>\t<time zone>\t<origin>`), written by the replicas that have the job | as the member set |
//! | [`runs_key`] `scheduler:{group:<name>}:runs` | hash | job name -> a pending "run now" request (`<id>\t<by>\t<ms>`), removed by the replica that takes it | [`RUN_REQUEST_TTL`] |
//! | [`replace_key`] `scheduler:{group:<name>}:replace` | zset | job name -> the latest slot (epoch ms) that asked its running run to stop ([`Overlap::Replace`](crate::overlap::Overlap::Replace)); only moves forward (`ZADD GT`), entries older than [`REPLACE_TTL`] dropped by the next request | [`REPLACE_TTL`] after the last request |
//! | [`retries_key`] `scheduler:{group:<name>}:retries` | zset | a pending retry ([`retry_member`]: `<job>\t<slot ms>\t<attempt>`) -> when it is due (epoch ms), removed by the replica that takes it | [`RETRY_TTL`] after the latest due time written |
//! | [`retry_taken_key`] `scheduler:{group:<name>}:retries:taken:<member>` | string | the instance id of the replica that took a pending retry (`take_retries.lua`), so that a take sent again after a lost reply gets the same answer | [`RETRY_TAKEN_TTL`] |
//! | [`backfilled_key`] `scheduler:{group:<name>}:backfilled` | zset | a slot queued for backfill ([`backfill_request`]: `<job>\t<slot ms>`) -> when (epoch ms): an unforced request does not queue it again, and its run does not start if the slot's own run ended after the request | [`RETRY_TTL`] after the last request |
//! | [`group_index_key`] `scheduler:groups` | zset | group name -> until when its keys may exist (epoch ms, the writer's clock: [`RETRY_TTL`] after its last announcement or retry written), so that the admin reads find the groups without `SCAN` | [`RETRY_TTL`] after the last write |
//! | [`job_index_key`] `scheduler:job-index` | zset | job name -> until when its history or pause flag may exist (epoch ms, the writer's clock: [`HISTORY_TTL`] after its history's expiry was last renewed; `+inf` while paused), so that the admin reads find the jobs without `SCAN` | [`HISTORY_TTL`] after the last write |
//!
//! The replicas of a group are told of its new run-now requests, retries and backfill slots on
//! the pub/sub channel [`group_channel`] `scheduler:{group:<name>}:changed` (not a key), in the
//! group's slot, and look for them every [`RUN_POLL`] in case a message was lost.
//!
//! The two index keys hold no hash tag: each is one key, read with one command, on its own
//! Cluster slot; they are written in the same pipeline as the keys they index (no extra round
//! trip), never inside a script of another slot. An entry past its score is ignored by the
//! readers and dropped by the next write; readers check that what an entry names still exists.

#[cfg(test)]
mod script_tests;

use std::sync::LazyLock;
use std::time::Duration;

use lock_core::redis::Script;

use crate::error::ControlError;

/// Entries kept per job in the run history, approximately: each replica trims a job's
/// history (`XADD MAXLEN ~`) when it renews its expiry, at most once a minute, so it holds
/// this many plus up to a minute of entries.
pub const HISTORY_LEN: usize = 1000;

/// How long a job's run history outlives its last entry (give or take a minute: each replica
/// renews the expiry with its entries at most once a minute).
pub const HISTORY_TTL: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// How long a job's missed-slots marker is kept: as long as a claimed tick
/// ([`lock_core::schema::TICK_TTL`]), since no older slot is ever reported missed.
pub const MISSED_TTL: Duration = lock_core::schema::TICK_TTL;

/// How long a job's count of failed slots in a row outlives the last failure: as long as a
/// claimed tick ([`lock_core::schema::TICK_TTL`]).
pub const FAILURE_STREAK_TTL: Duration = lock_core::schema::TICK_TTL;

/// How long a buffered slot waits for the run it is buffered behind to end
/// ([`Overlap::BufferOne`](crate::overlap::Overlap::BufferOne)).
pub const BUFFERED_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// How long a slot of an [`Overlap::Replace`](crate::overlap::Overlap::Replace) job waits, at
/// least, for the run it replaces to stop and give the lock back (the job's lock wait, if
/// longer, is used instead): the running replica sees the request within [`RUN_POLL`] (at
/// once on the same replica), its body stops at its next `.await`, and the release hands the
/// lock over. Past it the slot is skipped (`skipped: held`).
pub const REPLACE_WAIT: Duration = Duration::from_secs(10);

/// How long a request to replace a running run ([`replace_key`]) is kept: long enough for
/// the running replica's next look ([`RUN_POLL`]) and the waiting slot ([`REPLACE_WAIT`]).
/// The set expires this long after the last request, and a request drops the entries older.
pub const REPLACE_TTL: Duration = Duration::from_secs(60);

/// How long a job's run count ([`run_count_key`]) outlives the last run it counted: a job
/// started again after that long counts from zero.
pub const RUN_COUNT_TTL: Duration = HISTORY_TTL;

/// How long a replica's announcement in its group lasts: a replica that stopped renewing
/// (crashed, partitioned) stops being preferred for runs after at most this, on every replica
/// at once. Lock-core's default liveness TTL, so that by the time a crashed replica's locks
/// are taken over, it is no longer preferred for the slots after (no claim-grace delay).
pub const MEMBER_TTL: Duration = lock_core::DEFAULT_LIVENESS_TTL;

/// How long a "run now" request waits for a replica to take it. Replicas hear of it at once
/// ([`group_channel`]), or within [`RUN_POLL`] if that message was lost; a requester that sees
/// no taker within [`RUN_PICKUP`] withdraws it.
pub const RUN_REQUEST_TTL: Duration = Duration::from_secs(10);

/// How often each replica looks for "run now" requests and due retries of its group without
/// being told: the fallback for a lost notification on [`group_channel`] (one pipeline of four
/// commands, under one command a second). Replicas are told of every request, retry and
/// backfill as it is written, look at once after their subscription is (re)made, and wake at
/// the earliest pending retry's due time; this poll also checks that the group's job registry
/// ([`jobs_key`]) still exists (it lasts as long as the members, whose announcements renew it).
/// It was 500 ms, the only way requests were found, before replicas were told.
pub const RUN_POLL: Duration = Duration::from_secs(5);

/// How long a requester waits for a replica to take its "run now" request: long enough for a
/// replica that missed the announcement to find it by its poll ([`RUN_POLL`]); taken in
/// milliseconds otherwise.
pub const RUN_PICKUP: Duration = Duration::from_secs(7);

/// How long a "run now" asked with an idempotency key is remembered: the same key within this
/// time answers with the first request instead of running the job again.
pub const RUN_ONCE_TTL: Duration = Duration::from_secs(10 * 60);

/// Longest idempotency key, in bytes.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 64;

/// The attempt number that marks a pending entry as a backfill run, not a retry.
pub const BACKFILL_ATTEMPT: u32 = 0;

/// Most slots one backfill call may queue.
pub const MAX_BACKFILL: usize = 1000;

/// How long the marker of a taken retry is kept ([`retry_taken_key`]): a replica whose take
/// lost its reply sends it again with its next look, within seconds.
pub const RETRY_TAKEN_TTL: Duration = Duration::from_secs(10 * 60);

/// How long a group's pending retries outlive the latest due time written to them: long
/// enough for a group whose replicas are all down for a while to find them on return.
pub const RETRY_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Longest job name, in bytes (it is part of three keys).
pub use lock_schedule::MAX_JOB_NAME_LEN;

/// Longest group name, in bytes.
pub const MAX_GROUP_NAME_LEN: usize = 256;

/// How long a job's failure counts ([`failures_key`]) outlive its last failure: the 24 hours a
/// view sums, plus the hour being counted.
pub const FAILURES_TTL: Duration = Duration::from_secs(25 * 60 * 60);

/// The key of [`group_index_key`].
const GROUP_INDEX: &str = "scheduler:groups";

/// The key of [`job_index_key`].
const JOB_INDEX: &str = "scheduler:job-index";

const JOB_PREFIX: &str = "scheduler:{job:";
const FAILURES: &str = "}:failures";
const RUN_ONCE: &str = "}:run-once:";
const PAUSED: &str = "}:paused";
const HISTORY: &str = "}:history";
const MISSED: &str = "}:missed";
const FAILURE_STREAK: &str = "}:slot_outcomes";
const BUFFERED: &str = "}:buffered";
const RUN_COUNT: &str = "}:run_count";

/// The fields of a run history entry.
pub mod field {
    /// The slot, epoch milliseconds (the tick claimed in Redis).
    pub const TICK: &str = "tick";
    /// The instance that recorded the run.
    pub const INSTANCE: &str = "instance";
    /// The outcome's label ([`RunOutcome::label`](crate::report::RunOutcome::label)).
    pub const OUTCOME: &str = "outcome";
    /// How long the run took, ms.
    pub const DURATION_MS: &str = "duration_ms";
    /// The error of a failed run, or what a missed record counts (absent otherwise).
    pub const ERROR: &str = "error";
    /// Who asked for a manual ("run now") run; absent for the slots' runs. Its `tick` is
    /// then the time of the request.
    pub const MANUAL_BY: &str = "manual_by";
    /// The id of the "run now" request a manual run served.
    pub const REQUEST: &str = "request";
    /// The attempt (1 for the slot's first run), for jobs with a retry policy.
    pub const ATTEMPT: &str = "attempt";
    /// When the next attempt of a failed run is due (epoch ms), if one was scheduled.
    pub const RETRY_AT: &str = "retry_at";
    /// `1` on a failed run that used up its attempts (failed for good).
    pub const GAVE_UP: &str = "gave_up";
    /// `1` on a run of a slot asked for by a backfill.
    pub const BACKFILL: &str = "backfill";
}

/// Why `name` cannot name a job, if it cannot: the one rule the scheduler (at build time),
/// the control functions (pause, history, ...) and the `#[scheduled]` attribute apply.
pub use lock_schedule::job_name_problem;

fn job_key(job: &str, suffix: &str) -> Result<String, ControlError> {
    match job_name_problem(job) {
        Some(problem) => Err(ControlError::InvalidJob(problem)),
        None => Ok(format!("{JOB_PREFIX}{job}{suffix}")),
    }
}

/// The Redis key of `job`'s pause flag.
pub fn pause_key(job: &str) -> Result<String, ControlError> {
    job_key(job, PAUSED)
}

/// The Redis key of `job`'s run history stream.
pub fn history_key(job: &str) -> Result<String, ControlError> {
    job_key(job, HISTORY)
}

/// The Redis key remembering the "run now" of `job` asked with the idempotency `key` (see
/// [`idempotency_key_problem`]).
pub fn run_once_key(job: &str, key: &str) -> Result<String, ControlError> {
    if let Some(reason) = idempotency_key_problem(key) {
        return Err(ControlError::InvalidArgument { what: "idempotency key", reason });
    }
    job_key(job, &format!("{RUN_ONCE}{key}"))
}

/// Why `key` cannot be an idempotency key, if it cannot: 1 to [`MAX_IDEMPOTENCY_KEY_LEN`]
/// letters, digits and `-_.:` (a UUID, or random hex, as a client makes one per action).
pub fn idempotency_key_problem(key: &str) -> Option<String> {
    let ok = !key.is_empty()
        && key.len() <= MAX_IDEMPOTENCY_KEY_LEN
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
    (!ok).then(|| {
        format!(
            "an idempotency key is 1 to {MAX_IDEMPOTENCY_KEY_LEN} letters, digits and `-_.:` (e.g. a UUID), not {:?}",
            key.chars().take(MAX_IDEMPOTENCY_KEY_LEN + 1).collect::<String>()
        )
    })
}

/// The Redis key of `job`'s failure counts per hour (a sorted set: the hour since the epoch,
/// UTC -> failed and timed-out runs recorded in it), written with the history entries so that
/// counting a day's failures reads one small key instead of a day of history. A sorted set
/// because `ZADD INCR` is among the commands the documented ACL user may run (`INCR` is not).
pub fn failures_key(job: &str) -> Result<String, ControlError> {
    job_key(job, FAILURES)
}

/// The hour (since the epoch, UTC) of `epoch_ms`, as [`failures_key`] counts it.
pub fn failure_hour(epoch_ms: i64) -> i64 {
    epoch_ms.div_euclid(3_600_000)
}

/// The Redis key of `job`'s missed-slots marker.
pub fn missed_key(job: &str) -> Result<String, ControlError> {
    job_key(job, MISSED)
}

/// The Redis key of the final outcomes of `job`'s latest slots, from which its failed slots in
/// a row are counted in slot order
/// ([`Job::pause_after_failures`](crate::job::Job::pause_after_failures)): a sorted set, slot
/// (epoch ms) -> `2 * slot + 1` if it failed for good, `2 * slot` if it succeeded. Not to be
/// confused with [`failures_key`], the console's failures per hour.
pub fn failure_streak_key(job: &str) -> Result<String, ControlError> {
    job_key(job, FAILURE_STREAK)
}

/// The Redis key of `job`'s slot buffered behind its running run.
pub fn buffered_key(job: &str) -> Result<String, ControlError> {
    job_key(job, BUFFERED)
}

/// The Redis key of `job`'s count of slots run ([`Job::max_runs`](crate::job::Job::max_runs)).
pub fn run_count_key(job: &str) -> Result<String, ControlError> {
    job_key(job, RUN_COUNT)
}

/// The Redis key of the index of scheduler groups: a sorted set of group name -> until when
/// (epoch ms) its registry, member set or pending retries may exist. Every announcement of a
/// replica and every retry or backfill written renews its group's entry (and the key's
/// expiry, [`RETRY_TTL`]), so the admin reads list the groups with one `ZRANGE` instead of
/// scanning the keyspace.
pub fn group_index_key() -> &'static str {
    GROUP_INDEX
}

/// The Redis key of the index of jobs known by a history or a pause flag: a sorted set of
/// job name -> until when (epoch ms) that history may exist (`+inf` while paused). Written
/// with the history entry that renews the history's expiry and by pause and resume (the
/// key's expiry: [`HISTORY_TTL`]), so that [`jobs`](crate::control::jobs) reads one key
/// instead of scanning the keyspace.
pub fn job_index_key() -> &'static str {
    JOB_INDEX
}

/// Until when an index entry written now lasts, `ttl` from now (epoch ms, this machine's
/// clock: the index's lifetimes are days, so seconds of skew between writers do not matter).
pub fn index_score(ttl: Duration) -> i64 {
    chrono::Utc::now().timestamp_millis().saturating_add(ttl.as_millis() as i64)
}

/// The `SCAN` pattern matching every job's keys.
pub fn job_keys_pattern() -> String {
    format!("{JOB_PREFIX}*")
}

/// The job a pause flag or history key belongs to (`None` for any other key).
pub fn job_of_key(key: &str) -> Option<&str> {
    let rest = key.strip_prefix(JOB_PREFIX)?;
    rest.strip_suffix(HISTORY).or_else(|| rest.strip_suffix(PAUSED))
}

/// Why `group` cannot name a scheduler group, if it cannot.
pub fn group_name_problem(group: &str) -> Option<&'static str> {
    let trimmed = group.trim();
    if trimmed.is_empty() || trimmed.chars().any(char::is_control) || trimmed.len() > MAX_GROUP_NAME_LEN {
        Some("it must be 1 to 256 bytes without control characters")
    } else {
        None
    }
}

/// The Redis key of `group`'s member set.
pub fn members_key(group: &str) -> String {
    format!("scheduler:{{group:{group}}}:members")
}

/// The Redis key of what `group`'s replicas say about themselves (instance id ->
/// [`replica_about`]).
pub fn replicas_key(group: &str) -> String {
    format!("scheduler:{{group:{group}}}:replicas")
}

/// What a replica says about itself in [`replicas_key`]: when its scheduler started (epoch
/// ms), its host, its version (empty if none was given) and the jobs it is running, separated
/// by tabs. Control characters in the host and the version become spaces (they are free text
/// from the environment); job names never hold any.
pub fn replica_about(started_ms: i64, host: &str, version: &str, running: &[&str]) -> String {
    let clean = |text: &str| -> String {
        text.chars().map(|c| if c.is_control() { ' ' } else { c }).take(200).collect()
    };
    let mut about = format!("{started_ms}\t{}\t{}", clean(host), clean(version));
    for job in running {
        about.push('\t');
        about.push_str(job);
    }
    about
}

/// A [`replica_about`] entry's start (epoch ms), host, version and running jobs.
pub fn parse_replica_about(about: &str) -> Option<(i64, &str, &str, Vec<&str>)> {
    let mut fields = about.split('\t');
    let started = fields.next()?.parse().ok()?;
    let host = fields.next()?;
    let version = fields.next()?;
    Some((started, host, version, fields.collect()))
}

/// The Redis key of `group`'s job registry (job name -> schedule).
pub fn jobs_key(group: &str) -> String {
    format!("scheduler:{{group:{group}}}:jobs")
}

/// The Redis key of `group`'s pending "run now" requests.
pub fn runs_key(group: &str) -> String {
    format!("scheduler:{{group:{group}}}:runs")
}

/// The pub/sub channel (not a key: nothing is stored) on which `group`'s replicas are told
/// that a "run now" request, a retry or a backfill slot was written for the group ([`runs_key`],
/// [`retries_key`]); published (`PUBLISH`, or `SPUBLISH` in a cluster: same hash tag, same slot)
/// after the write, in the same script or pipeline. Also told: a request to stop a running run
/// ([`replace_key`], `Overlap::Replace`). The message says which (`run`, `retry`, `replace`);
/// replicas look at all of them either way.
pub fn group_channel(group: &str) -> String {
    format!("scheduler:{{group:{group}}}:changed")
}

/// The Redis key of `group`'s pending retries (due time -> [`retry_member`]).
pub fn retries_key(group: &str) -> String {
    format!("scheduler:{{group:{group}}}:retries")
}

/// The Redis key of `group`'s requests to stop a running run (job -> the latest slot, epoch
/// ms, that asked: [`Overlap::Replace`](crate::overlap::Overlap::Replace)). In the group's slot,
/// so the replicas read it in their run-now poll.
pub fn replace_key(group: &str) -> String {
    format!("scheduler:{{group:{group}}}:replace")
}

/// The Redis key that says which replica took the pending retry `member` of the group whose
/// pending retries are `retries` ([`retries_key`]): written with the take, so that a take whose
/// reply was lost can be sent again with the same answer.
pub fn retry_taken_key(retries: &str, member: &str) -> String {
    format!("{retries}:taken:{member}")
}

/// The Redis key of `group`'s backfill requests: `<job>\t<slot ms>` ([`backfill_request`]) ->
/// when a backfill of that slot was queued (epoch ms), kept [`RETRY_TTL`].
pub fn backfilled_key(group: &str) -> String {
    format!("scheduler:{{group:{group}}}:backfilled")
}

/// A slot's member in [`backfilled_key`]: `<job>\t<slot ms>`.
pub fn backfill_request(job: &str, tick: i64) -> String {
    format!("{job}\t{tick}")
}

/// The group a pending-retries key belongs to (`None` for any other key).
pub fn group_of_retries(key: &str) -> Option<&str> {
    key.strip_prefix("scheduler:{group:")?.strip_suffix("}:retries")
}

/// A pending retry as stored in [`retries_key`]: `<job>\t<slot ms>\t<attempt>`. Attempt `0`
/// marks a backfill run of the slot ([`BACKFILL_ATTEMPT`]).
pub fn retry_member(job: &str, tick: i64, attempt: u32) -> String {
    format!("{job}\t{tick}\t{attempt}")
}

/// A stored retry's job, slot (epoch ms) and attempt.
pub fn parse_retry_member(member: &str) -> Option<(&str, i64, u32)> {
    let (rest, attempt) = member.rsplit_once('\t')?;
    let (job, tick) = rest.rsplit_once('\t')?;
    Some((job, tick.parse().ok()?, attempt.parse().ok()?))
}

/// The `SCAN` pattern matching every group's job registry.
pub fn job_registries_pattern() -> String {
    jobs_key("*")
}

/// The group a job registry key belongs to (`None` for any other key).
pub fn group_of_registry(key: &str) -> Option<&str> {
    key.strip_prefix("scheduler:{group:")?.strip_suffix("}:jobs")
}

/// The `SCAN` pattern matching every group's member set.
pub fn member_sets_pattern() -> String {
    members_key("*")
}

/// The group a member set key belongs to (`None` for any other key).
pub fn group_of_members(key: &str) -> Option<&str> {
    key.strip_prefix("scheduler:{group:")?.strip_suffix("}:members")
}

/// A job's schedule as the registry holds it: `<schedule>\t<time zone>\t<origin>` (the cron
/// expression or `every ...`, its zone, and where it came from: `code`, `config`, `env <VAR>`).
pub fn registry_entry(expression: &str, time_zone: &str, origin: &str) -> String {
    format!("{expression}\t{time_zone}\t{origin}")
}

/// A registry entry's schedule, time zone and origin (`code` for an entry written before the
/// origin was recorded).
pub fn parse_registry_entry(entry: &str) -> Option<(&str, &str, &str)> {
    let (expression, rest) = entry.split_once('\t')?;
    let (zone, origin) = rest.split_once('\t').unwrap_or((rest, "code"));
    Some((expression, zone, origin))
}

/// A "run now" request as stored: `<id>\t<by>\t<requested at, epoch ms>`.
pub fn run_request(id: &str, by: &str, at_ms: i64) -> String {
    // Tabs and line breaks in `by` would break the format; it is free text from an operator.
    let by: String = by.chars().map(|c| if c.is_control() { ' ' } else { c }).take(200).collect();
    format!("{id}\t{by}\t{at_ms}")
}

/// A stored request's id, requester and time (epoch ms).
pub fn parse_run_request(request: &str) -> Option<(&str, &str, i64)> {
    let mut parts = request.splitn(3, '\t');
    let (id, by, at) = (parts.next()?, parts.next()?, parts.next()?);
    Some((id, by, at.parse().ok()?))
}

/// The scripts' source text (each file's header states its KEYS, ARGV and reply).
pub mod lua {
    /// `announce.lua`: announce a replica, drop lapsed ones, read the live ones.
    pub const ANNOUNCE: &str = include_str!("lua/announce.lua");
    /// `record_missed.lua`: agree on the one replica that records missed slots.
    pub const RECORD_MISSED: &str = include_str!("lua/record_missed.lua");
    /// `request_run.lua`: ask a group to run a job now.
    pub const REQUEST_RUN: &str = include_str!("lua/request_run.lua");
    /// `take_retries.lua`: take due pending retries, once each; the same answer when sent again.
    pub const TAKE_RETRIES: &str = include_str!("lua/take_retries.lua");
    /// `queue_backfill.lua`: queue backfill slots, each once across concurrent requests.
    pub const QUEUE_BACKFILL: &str = include_str!("lua/queue_backfill.lua");
    /// `take_run.lua`: take (or withdraw) a pending run request, once.
    pub const TAKE_RUN: &str = include_str!("lua/take_run.lua");
    /// `claim_slot.lua`: claim a tick without the lock (`Overlap::Allow`).
    pub const CLAIM_SLOT: &str = include_str!("lua/claim_slot.lua");
    /// `count_failure.lua`: count a slot failed for good; pause the job at the limit.
    pub const COUNT_FAILURE: &str = include_str!("lua/count_failure.lua");
}

/// See [`lua::ANNOUNCE`].
pub(crate) static ANNOUNCE: LazyLock<Script> = LazyLock::new(|| Script::new(lua::ANNOUNCE));

/// See [`lua::REQUEST_RUN`].
pub(crate) static REQUEST_RUN: LazyLock<Script> = LazyLock::new(|| Script::new(lua::REQUEST_RUN));

/// See [`lua::TAKE_RETRIES`].
pub(crate) static TAKE_RETRIES: LazyLock<Script> = LazyLock::new(|| Script::new(lua::TAKE_RETRIES));

/// See [`lua::QUEUE_BACKFILL`].
pub(crate) static QUEUE_BACKFILL: LazyLock<Script> = LazyLock::new(|| Script::new(lua::QUEUE_BACKFILL));

/// See [`lua::TAKE_RUN`].
pub(crate) static TAKE_RUN: LazyLock<Script> = LazyLock::new(|| Script::new(lua::TAKE_RUN));

/// See [`lua::CLAIM_SLOT`].
pub(crate) static CLAIM_SLOT: LazyLock<Script> = LazyLock::new(|| Script::new(lua::CLAIM_SLOT));

/// See [`lua::COUNT_FAILURE`].
pub(crate) static COUNT_FAILURE: LazyLock<Script> = LazyLock::new(|| Script::new(lua::COUNT_FAILURE));

/// See [`lua::RECORD_MISSED`].
pub(crate) static RECORD_MISSED: LazyLock<Script> = LazyLock::new(|| Script::new(lua::RECORD_MISSED));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_a_job_share_a_slot_and_list_back_to_it() {
        assert_eq!(pause_key("daily-report").ok().as_deref(), Some("scheduler:{job:daily-report}:paused"));
        assert_eq!(history_key("daily-report").ok().as_deref(), Some("scheduler:{job:daily-report}:history"));
        assert_eq!(missed_key("daily-report").ok().as_deref(), Some("scheduler:{job:daily-report}:missed"));
        assert_eq!(failures_key("r").ok().as_deref(), Some("scheduler:{job:r}:failures"));
        for key in [pause_key("a:b}c"), history_key("a:b}c")] {
            assert_eq!(job_of_key(&key.expect("valid")), Some("a:b}c"));
        }
        assert_eq!(job_of_key(&missed_key("x").expect("valid")), None);
        assert_eq!(job_of_key("lock:x"), None);
        assert_eq!(members_key("g"), "scheduler:{group:g}:members");
        assert_eq!(group_of_registry(&jobs_key("a}b")), Some("a}b"));
        assert_eq!(group_of_members(&members_key("g")), Some("g"));
        assert_eq!(group_of_registry(&members_key("g")), None);
        assert_eq!(runs_key("g"), "scheduler:{group:g}:runs");
        assert_eq!(group_channel("g"), "scheduler:{group:g}:changed");
        assert_eq!(retries_key("g"), "scheduler:{group:g}:retries");
        assert_eq!(parse_retry_member(&retry_member("a\tb", 42, 3)), Some(("a\tb", 42, 3)));
        assert_eq!(parse_retry_member("x\t1"), None);
        let entry = registry_entry("0 0 * * * *", "Europe/Lisbon", "env SCHEDULE_X");
        assert_eq!(parse_registry_entry(&entry), Some(("0 0 * * * *", "Europe/Lisbon", "env SCHEDULE_X")));
        assert_eq!(
            parse_registry_entry("every 30s\tUTC"),
            Some(("every 30s", "UTC", "code")),
            "an older entry"
        );
        let request = run_request("r1", "ana\tat\nthe desk", 42);
        assert_eq!(parse_run_request(&request), Some(("r1", "ana at the desk", 42)));
    }

    #[test]
    fn one_job_name_rule() {
        assert!(matches!(pause_key(" "), Err(ControlError::InvalidJob(_))));
        assert!(matches!(history_key("a\nb"), Err(ControlError::InvalidJob(_))));
        assert!(job_name_problem(&"x".repeat(MAX_JOB_NAME_LEN)).is_none());
        assert!(job_name_problem(&"x".repeat(MAX_JOB_NAME_LEN + 1)).is_some());
        assert!(group_name_problem("").is_some());
        assert!(group_name_problem(&"g".repeat(257)).is_some());
        assert!(group_name_problem("payments").is_none());
    }
}
