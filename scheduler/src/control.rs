//! Operating jobs across every replica at once: pause and resume (a flag in Redis that each
//! replica checks when it is about to claim a slot), and the run history (a capped Redis
//! stream per job).
//!
//! Keys, all of one job in one Redis Cluster slot (hash tag `{job:<name>}`), all expiring:
//!
//! | key | type | content | expiry |
//! |---|---|---|---|
//! | `scheduler:{job:<name>}:paused` | string | who paused it and when | none while paused (deleted by resume) |
//! | `scheduler:{job:<name>}:missed` | string | the latest missed slot recorded (so replicas record it once) | 7 days |
//! | `scheduler:{job:<name>}:history` | stream | one entry per run: `tick`, `slot`, `instance`, `outcome`, `duration_ms`, `error` | [`HISTORY_TTL`] after the last entry; capped at about [`HISTORY_LEN`] entries |
//!
//! ```no_run
//! # async fn demo(client: lock_core::LockClient) -> Result<(), scheduler::ControlError> {
//! scheduler::pause(&client, "daily-report").await?;
//! for run in scheduler::history(&client, "daily-report", 10).await? {
//!     println!("tick {} on {}: {} in {:?}", run.tick, run.instance, run.outcome, run.duration);
//! }
//! scheduler::resume(&client, "daily-report").await?;
//! # Ok(()) }
//! ```

use std::collections::HashSet;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use lock_core::redis;
use lock_core::{LockClient, LockError};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::Instrument;

use crate::report::RunOutcome;

/// Entries kept per job in the run history (approximately: `XADD MAXLEN ~`).
pub const HISTORY_LEN: usize = 1000;

/// How long a job's run history outlives its last entry.
pub const HISTORY_TTL: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// How long one control command may take.
const TIMEOUT: Duration = Duration::from_secs(5);

const PREFIX: &str = "scheduler:{job:";

/// A failed pause, resume or history command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// The job name cannot name a job.
    #[error("invalid job name: {0}")]
    InvalidJob(&'static str),
    /// Redis failed or refused the command.
    #[error("redis failed while {action}: {source}")]
    Redis {
        /// What was being done.
        action: &'static str,
        /// The Redis error.
        #[source]
        source: redis::RedisError,
    },
    /// No connection could be had (or the lock client failed otherwise).
    #[error("could not connect to redis while {action}: {reason}")]
    Connect {
        /// What was being done.
        action: &'static str,
        /// Why (never the URL or its password).
        reason: String,
    },
    /// The command got no answer in time.
    #[error("no answer from redis while {0}")]
    Unavailable(&'static str),
}

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
}

/// Whether a job is paused, and since when.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PauseState {
    /// The job's name.
    pub job: String,
    /// What the pause flag says (who paused it, when), if set.
    pub paused: Option<String>,
}

/// The Redis key of `job`'s pause flag.
pub fn pause_key(job: &str) -> Result<String, ControlError> {
    check(job)?;
    Ok(format!("{PREFIX}{job}}}:paused"))
}

/// The Redis key of `job`'s run history stream.
pub fn history_key(job: &str) -> Result<String, ControlError> {
    check(job)?;
    Ok(format!("{PREFIX}{job}}}:history"))
}

fn check(job: &str) -> Result<(), ControlError> {
    if job.trim().is_empty() {
        Err(ControlError::InvalidJob("the job name is empty"))
    } else if job.chars().any(char::is_control) {
        Err(ControlError::InvalidJob("the job name contains control characters"))
    } else if job.len() > 512 {
        Err(ControlError::InvalidJob("the job name is longer than 512 bytes"))
    } else {
        Ok(())
    }
}

async fn query<T: redis::FromRedisValue>(
    client: &LockClient,
    action: &'static str,
    cmd: &redis::Pipeline,
) -> Result<T, ControlError> {
    // Through the lock client's own connection: works on a single node, Sentinel and Cluster
    // alike (every pipeline here touches one job's keys, one slot).
    let run = async { client.query_pipeline(cmd).await.map_err(|e| control_error(action, e)) };
    tokio::time::timeout(TIMEOUT, run).await.map_err(|_| ControlError::Unavailable(action))?
}

fn control_error(action: &'static str, e: LockError) -> ControlError {
    match e {
        LockError::Redis { source, .. } | LockError::Auth { source, .. } => {
            ControlError::Redis { action, source }
        }
        e => ControlError::Connect { action, reason: e.to_string() },
    }
}

/// Pauses `job` on every replica: from the next slot on, each replica records the slot as
/// [`RunOutcome::SkippedPaused`] instead of running it, until [`resume`]. A run already in
/// progress is not stopped. `by` says who paused it (shown by `lockctl`).
pub async fn pause_by(client: &LockClient, job: &str, by: &str) -> Result<(), ControlError> {
    let key = pause_key(job)?;
    let value = format!("{} by {by}", Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg(&key).arg(value).ignore();
    query::<()>(client, "pausing a job", &pipe).await
}

/// Pauses `job` on every replica (see [`pause_by`]), naming this client's instance.
pub async fn pause(client: &LockClient, job: &str) -> Result<(), ControlError> {
    pause_by(client, job, client.instance_id()).await
}

/// Resumes a paused `job`; returns whether it was paused.
pub async fn resume(client: &LockClient, job: &str) -> Result<bool, ControlError> {
    let key = pause_key(job)?;
    let mut pipe = redis::pipe();
    pipe.cmd("DEL").arg(&key);
    let (deleted,): (i64,) = query(client, "resuming a job", &pipe).await?;
    Ok(deleted == 1)
}

/// Whether `job` is paused, and by whom.
pub async fn pause_state(client: &LockClient, job: &str) -> Result<PauseState, ControlError> {
    let key = pause_key(job)?;
    let mut pipe = redis::pipe();
    pipe.cmd("GET").arg(&key);
    let (paused,): (Option<String>,) = query(client, "reading a job's pause flag", &pipe).await?;
    Ok(PauseState { job: job.to_owned(), paused })
}

/// The last `n` runs of `job`, newest first.
pub async fn history(client: &LockClient, job: &str, n: usize) -> Result<Vec<HistoryEntry>, ControlError> {
    let key = history_key(job)?;
    let mut pipe = redis::pipe();
    pipe.cmd("XREVRANGE").arg(&key).arg("+").arg("-").arg("COUNT").arg(n.max(1));
    let (entries,): (Vec<StreamEntry>,) = query(client, "reading a job's run history", &pipe).await?;
    Ok(entries.into_iter().take(n).map(|(id, fields)| entry(id, fields)).collect())
}

/// A stream entry as XRANGE returns it: its id and its field-value pairs.
type StreamEntry = (String, Vec<(String, String)>);

fn entry(id: String, fields: Vec<(String, String)>) -> HistoryEntry {
    let field = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let tick = field("tick").and_then(|t| t.parse().ok()).unwrap_or_default();
    HistoryEntry {
        id,
        tick,
        slot: DateTime::from_timestamp_millis(tick),
        instance: field("instance").unwrap_or_default(),
        outcome: field("outcome").unwrap_or_default(),
        duration: Duration::from_millis(
            field("duration_ms").and_then(|d| d.parse().ok()).unwrap_or_default(),
        ),
        error: field("error"),
    }
}

/// The jobs that have a run history or a pause flag in Redis (`SCAN`, never `KEYS`), sorted.
pub async fn jobs(client: &LockClient) -> Result<Vec<String>, ControlError> {
    let action = "listing jobs";
    let pattern = format!("{PREFIX}*");
    let scan = client.scan_keys(&pattern, usize::MAX);
    let keys = tokio::time::timeout(TIMEOUT, scan)
        .await
        .map_err(|_| ControlError::Unavailable(action))?
        .map_err(|e| control_error(action, e))?;
    let mut names = std::collections::BTreeSet::new();
    for key in keys {
        let Some(rest) = key.strip_prefix(PREFIX) else { continue };
        if let Some(name) = rest.strip_suffix("}:history").or_else(|| rest.strip_suffix("}:paused")) {
            names.insert(name.to_owned());
        }
    }
    Ok(names.into_iter().collect())
}

/// Whether a run with this outcome goes into the history: runs (whatever their end), missed
/// slots and paused slots; not the skips of replicas that lost the race for a slot.
pub(crate) fn recorded(outcome: &RunOutcome) -> bool {
    outcome.ran_here() || matches!(outcome, RunOutcome::Missed(_) | RunOutcome::SkippedPaused)
}

/// One run to append to its job's history.
pub(crate) struct Record {
    pub(crate) job: Arc<str>,
    pub(crate) tick: i64,
    pub(crate) instance: Arc<str>,
    pub(crate) outcome: RunOutcome,
    pub(crate) duration: Duration,
}

/// Most runs written in one pipeline.
const RECORD_BATCH: usize = 512;

type Queued = (Record, oneshot::Sender<()>);

/// Writes run history entries: the runs that end together (a thousand jobs due in the same
/// second) share one pipelined round trip instead of one each.
pub(crate) struct Recorder {
    tx: mpsc::UnboundedSender<Queued>,
    rx: std::sync::Mutex<Option<mpsc::UnboundedReceiver<Queued>>>,
}

impl Recorder {
    pub(crate) fn new() -> Recorder {
        let (tx, rx) = mpsc::unbounded_channel();
        Recorder { tx, rx: std::sync::Mutex::new(Some(rx)) }
    }

    /// Starts the writer task (once; later calls do nothing). It ends when the recorder is
    /// dropped, after writing what was queued.
    pub(crate) fn start(&self, client: LockClient) {
        let rx = match self.rx.lock() {
            Ok(mut rx) => rx.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(rx) = rx {
            tokio::spawn(write_records(client, rx).in_current_span());
        }
    }

    /// Appends a run to its job's history (capped, expiring) and waits until it is written
    /// (or failed: failures are logged, never raised).
    pub(crate) async fn record(&self, record: Record) {
        let (ack, done) = oneshot::channel();
        if self.tx.send((record, ack)).is_ok() {
            let _ = done.await;
        }
    }
}

async fn write_records(client: LockClient, mut rx: mpsc::UnboundedReceiver<Queued>) {
    let mut batch = Vec::new();
    while let Some(first) = rx.recv().await {
        batch.push(first);
        while batch.len() < RECORD_BATCH {
            match rx.try_recv() {
                Ok(more) => batch.push(more),
                Err(_) => break,
            }
        }
        let mut pipe = redis::pipe();
        for (record, _) in &batch {
            add_record(&mut pipe, record);
        }
        if let Err(e) = query::<()>(&client, "recording runs in the history", &pipe).await {
            tracing::warn!(error = %e, runs = batch.len(), "could not record runs in their jobs' history");
        }
        for (_, ack) in batch.drain(..) {
            let _ = ack.send(());
        }
    }
}

/// Adds the commands appending `record` to its job's history to `pipe`.
fn add_record(pipe: &mut redis::Pipeline, record: &Record) {
    let Record { job, tick, instance, outcome, duration } = record;
    let Ok(key) = history_key(job) else { return };
    let xadd = pipe
        .cmd("XADD")
        .arg(&key)
        .arg("MAXLEN")
        .arg("~")
        .arg(HISTORY_LEN)
        .arg("*")
        .arg("tick")
        .arg(tick)
        .arg("instance")
        .arg(&**instance)
        .arg("outcome")
        .arg(outcome.label())
        .arg("duration_ms")
        .arg(duration.as_millis() as u64);
    match outcome {
        RunOutcome::Failed(error) => {
            xadd.arg("error").arg(error.chars().take(1000).collect::<String>());
        }
        RunOutcome::Missed(n) => {
            xadd.arg("error").arg(format!("{n} slot(s) missed"));
        }
        RunOutcome::TimedOut(limit) => {
            xadd.arg("error").arg(format!("ran longer than its maximum run time of {limit:?}"));
        }
        _ => {}
    }
    xadd.ignore();
    pipe.cmd("PEXPIRE").arg(&key).arg(HISTORY_TTL.as_millis() as u64).ignore();
}

/// Which of `jobs` are paused, in one pipelined round trip (the timer checks every job due in
/// the same instant at once); a Redis failure counts as not paused (the runs' own locks then
/// report the failure).
pub(crate) async fn paused_among(client: &LockClient, jobs: &[Arc<str>]) -> HashSet<Arc<str>> {
    let mut pipe = redis::pipe();
    let mut asked = Vec::with_capacity(jobs.len());
    for job in jobs {
        if let Ok(key) = pause_key(job) {
            pipe.cmd("EXISTS").arg(key);
            asked.push(job.clone());
        }
    }
    if asked.is_empty() {
        return HashSet::new();
    }
    match query::<Vec<i64>>(client, "reading the pause flags", &pipe).await {
        Ok(flags) => asked.into_iter().zip(flags).filter(|(_, n)| *n == 1).map(|(job, _)| job).collect(),
        Err(e) => {
            tracing::debug!(error = %e, "could not read the pause flags; running the slots");
            HashSet::new()
        }
    }
}

/// The sending side of a [`PauseCheck`].
pub(crate) struct PauseAnswer(watch::Sender<Option<Arc<HashSet<Arc<str>>>>>);

/// The last ticks claimed with the locks `keys`, in one pipelined round trip (`None`: none, or
/// forgotten after [`TICK_TTL`](lock_core::tick::TICK_TTL)).
pub(crate) async fn last_ticks(client: &LockClient, keys: &[&str]) -> Result<Vec<Option<i64>>, ControlError> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for key in keys {
        lock_core::validate_key(key)
            .map_err(|_| ControlError::InvalidJob("the job's lock key is invalid"))?;
        pipe.cmd("GET").arg(lock_core::schema::tick_key(key));
    }
    query(client, "reading the jobs' last claimed ticks", &pipe).await
}

/// Which of `keys` are locked right now, in one pipelined round trip (`None`: Redis failed).
pub(crate) async fn held_among(client: &LockClient, keys: &[String]) -> Option<Vec<bool>> {
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.cmd("EXISTS").arg(key);
    }
    let held: Vec<i64> = query(client, "checking which locks are held", &pipe).await.ok()?;
    Some(held.into_iter().map(|n| n == 1).collect())
}

/// KEYS: the job's missed-slots marker. ARGV: the latest missed tick, TTL ms. Sets the marker
/// to the tick unless it already holds it or a later one: 1 if set.
static MISSED: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local seen = redis.call('GET', KEYS[1])
if seen and tonumber(seen) >= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
",
    )
});

/// Whether this replica is the one to record the missed slots ending at `tick` in `job`'s
/// history: replicas that find the same missed slots agree through Redis, so they are
/// recorded once. A Redis failure answers yes (recorded, perhaps twice, rather than lost).
pub(crate) async fn first_to_record_missed(client: &LockClient, job: &str, tick: i64) -> bool {
    let Ok(key) = history_key(job) else { return false };
    let key = key.replace("}:history", "}:missed");
    let call = async {
        let mut invocation = MISSED.key(&key);
        invocation.arg(tick).arg(lock_core::tick::TICK_TTL.as_millis() as u64);
        // Through the lock connection: any deployment (a cluster has no pool).
        let mut pipe = redis::pipe();
        // Loaded in the same pipeline: a pipeline's EVALSHA is not retried after NOSCRIPT
        // (this runs every few seconds at most).
        pipe.load_script(&MISSED).ignore().invoke_script(&invocation);
        client.query_pipeline::<(i64,)>(&pipe).await.map(|(set,)| set).map_err(|e| e.to_string())
    };
    match tokio::time::timeout(TIMEOUT, call).await {
        Ok(Ok(set)) => set == 1,
        _ => true,
    }
}

/// The answer of one [`paused_among`] check, shared by the runs it was made for.
#[derive(Clone)]
pub(crate) struct PauseCheck(watch::Receiver<Option<Arc<HashSet<Arc<str>>>>>);

impl PauseCheck {
    /// A check not started yet: runs may wait on it; [`answer`](Self::answer) starts it.
    pub(crate) fn pending() -> (PauseAnswer, PauseCheck) {
        let (tx, rx) = watch::channel(None);
        (PauseAnswer(tx), PauseCheck(rx))
    }

    /// Checks `jobs` in the background and answers the runs waiting on the check.
    pub(crate) fn answer(answer: PauseAnswer, client: LockClient, jobs: Vec<Arc<str>>) {
        tokio::spawn(
            async move {
                let paused = paused_among(&client, &jobs).await;
                answer.0.send_replace(Some(Arc::new(paused)));
            }
            .in_current_span(),
        );
    }

    /// Whether `job` was paused when checked.
    pub(crate) async fn is_paused(&mut self, job: &str) -> bool {
        match self.0.wait_for(Option::is_some).await {
            Ok(answer) => answer.as_ref().is_some_and(|paused| paused.contains(job)),
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_a_slot() {
        assert_eq!(pause_key("daily-report").ok().as_deref(), Some("scheduler:{job:daily-report}:paused"));
        assert_eq!(history_key("daily-report").ok().as_deref(), Some("scheduler:{job:daily-report}:history"));
        assert!(matches!(pause_key(" "), Err(ControlError::InvalidJob(_))));
        assert!(matches!(history_key("a\nb"), Err(ControlError::InvalidJob(_))));
    }
}
