//! Writing a job's run history: the [`Recorder`] appends each run to the job's capped, expiring
//! Redis stream ([`schema::history_key`]), the runs that end together in one round trip.
//! [`control::history`](crate::control::history::history) reads it back.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lock_core::LockClient;
use lock_core::redis;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::Instrument;

use crate::command::{self, query};
use crate::report::RunOutcome;
use crate::schema::{self, HISTORY_LEN, HISTORY_TTL, field, history_key};

/// Whether a run with this outcome goes into the history: runs (whatever their end), missed,
/// paused and buffered slots; not the skips of replicas that lost the race for a slot.
pub(crate) fn recorded(outcome: &RunOutcome) -> bool {
    outcome.ran_here()
        || matches!(
            outcome,
            RunOutcome::Missed(_)
                | RunOutcome::SkippedPaused
                | RunOutcome::Buffered
                | RunOutcome::SkippedMaxRuns
        )
}

/// One run to append to its job's history.
pub(crate) struct Record {
    pub(crate) job: Arc<str>,
    pub(crate) tick: i64,
    pub(crate) instance: Arc<str>,
    pub(crate) outcome: RunOutcome,
    pub(crate) duration: Duration,
    /// A manual run's request id and requester.
    pub(crate) manual: Option<(Arc<str>, Arc<str>)>,
    /// The attempt at the slot, for jobs with a retry policy.
    pub(crate) attempt: Option<u32>,
    /// When the next attempt is due (epoch ms), if one was scheduled.
    pub(crate) retry_at: Option<i64>,
    /// The attempt failed and was the last one allowed.
    pub(crate) gave_up: bool,
    /// A backfill run of a past slot.
    pub(crate) backfill: bool,
    /// A success of a job that pauses on failure: its slot's outcome is added to the job's
    /// final outcomes by slot ([`failures`](crate::failures)), which keep this many, in the same
    /// pipeline.
    pub(crate) success_kept: Option<u32>,
}

/// Most runs written in one pipeline.
const RECORD_BATCH: usize = 512;

type Queued = (Record, oneshot::Sender<()>);

/// Least time between two history writes of a replica, unless the last one was full: runs
/// ending in a burst (a slot's short jobs) share one pipelined round trip per interval, so
/// their round trips do not grow with their number. A run's entry waits at most this long;
/// one written after a quiet spell goes at once.
const WRITE_INTERVAL: Duration = Duration::from_millis(10);

/// Writes run history entries: the runs that end together (a thousand jobs due in the same
/// second) share one pipelined round trip instead of one each ([`WRITE_INTERVAL`]).
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

/// How often a replica renews a job's history expiry and trims it: the key lives
/// [`HISTORY_TTL`] after the last entry, give or take this (a `PEXPIRE` with each entry cost
/// Redis as much again as half the entry), and holds [`HISTORY_LEN`] entries plus at most
/// those a minute adds.
const EXPIRY_RENEWAL: Duration = Duration::from_secs(60);

async fn write_records(client: LockClient, mut rx: mpsc::UnboundedReceiver<Queued>) {
    let mut batch = Vec::new();
    // When this replica last renewed each job's history expiry.
    let mut renewed: HashMap<Arc<str>, Instant> = HashMap::new();
    let mut pruned = Instant::now();
    let mut last_write: Option<Instant> = None;
    while let Some(first) = rx.recv().await {
        if let Some(next) = last_write.map(|at| at + WRITE_INTERVAL).filter(|next| *next > Instant::now()) {
            tokio::time::sleep_until(next).await;
        }
        batch.push(first);
        while batch.len() < RECORD_BATCH {
            match rx.try_recv() {
                Ok(more) => batch.push(more),
                Err(_) => break,
            }
        }
        let now = Instant::now();
        // A full batch may have more behind it: those go at once.
        last_write = (batch.len() < RECORD_BATCH).then_some(now);
        let records: Vec<&Record> = batch.iter().map(|(record, _)| record).collect();
        let missing = write(&client, &records, &mut renewed, now).await;
        if !missing.is_empty() {
            // Streams gone since this replica renewed them (deleted, flushed, a restart without
            // persistence): created again, with their expiry.
            for record in &missing {
                renewed.remove(&record.job);
            }
            let still = write(&client, &missing, &mut renewed, now).await;
            if !still.is_empty() {
                tracing::debug!(
                    runs = still.len(),
                    "history streams deleted while being written; entries dropped"
                );
            }
        }
        for (_, ack) in batch.drain(..) {
            let _ = ack.send(());
        }
        // Jobs removed at runtime leave their entries: forget the stale ones now and then.
        if now - pruned >= EXPIRY_RENEWAL {
            renewed.retain(|_, at| now - *at < EXPIRY_RENEWAL);
            pruned = now;
        }
    }
}

/// Writes `records` in one pipeline. A history this replica has not renewed for
/// [`EXPIRY_RENEWAL`] gets its entry and its expiry; the others get their entry only if their
/// stream exists (`XADD NOMKSTREAM`), so that no history is ever created without an expiry.
/// Returns the records not written because their stream was gone. Failures are logged.
async fn write<'a>(
    client: &LockClient,
    records: &[&'a Record],
    renewed: &mut HashMap<Arc<str>, Instant>,
    now: Instant,
) -> Vec<&'a Record> {
    let mut pipe = redis::pipe();
    let mut sent = Vec::with_capacity(records.len());
    for record in records {
        let renew = renewed.get(&record.job).is_none_or(|at| now - *at >= EXPIRY_RENEWAL);
        if renew {
            renewed.insert(record.job.clone(), now);
        }
        if add_record(&mut pipe, record, renew) {
            sent.push((*record, renew));
        }
    }
    if sent.is_empty() {
        return Vec::new();
    }
    // With each history's expiry, its job's entry in the job index, so that the admin reads find
    // a job known only by its history without scanning the keyspace: a request of its own (the
    // index is on another Cluster slot), sent concurrently.
    let mut index = redis::pipe();
    crate::index::add_jobs(
        &mut index,
        sent.iter().filter(|(_, renew)| *renew).map(|(record, _)| &*record.job),
    );
    let indexing = async {
        if index.cmd_iter().next().is_none() {
            return;
        }
        if let Err(e) = crate::index::send(client, "indexing jobs' histories", &index).await {
            // Renewed with the history's next renewal, a minute later at most.
            tracing::debug!(error = %e, "could not write jobs' entries in the job index");
        }
    };
    let (written, ()) =
        tokio::join!(query::<Vec<redis::Value>>(client, "recording runs in the history", &pipe), indexing);
    match written {
        Ok(ids) => sent
            .into_iter()
            .zip(ids)
            .filter(|(_, id)| matches!(id, redis::Value::Nil))
            .map(|((record, _), _)| record)
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, runs = sent.len(), "could not record runs in their jobs' history");
            // Renewed with the next entries instead.
            for (record, renew) in &sent {
                if *renew {
                    renewed.remove(&record.job);
                }
            }
            Vec::new()
        }
    }
}

/// Adds to `pipe` the commands appending `record` to its job's history: with `renew`, the
/// entry (creating the stream if need be), trimming the stream to about [`HISTORY_LEN`]
/// entries, and the history's expiry; without, the entry only if the stream exists (the
/// `XADD` then replies nil). Returns whether it added any (not for an invalid job name).
fn add_record(pipe: &mut redis::Pipeline, record: &Record, renew: bool) -> bool {
    let Record {
        job,
        tick,
        instance,
        outcome,
        duration,
        manual,
        attempt,
        retry_at,
        gave_up,
        backfill,
        success_kept,
    } = record;
    let Ok(key) = history_key(job) else { return false };
    let xadd = pipe.cmd("XADD").arg(&key);
    if renew {
        // Trimmed with the renewal rather than by every entry: `MAXLEN ~` on each `XADD` cost
        // Redis about a seventh of the entry's CPU, on every run.
        xadd.arg("MAXLEN").arg("~").arg(HISTORY_LEN);
    } else {
        xadd.arg("NOMKSTREAM");
    }
    xadd.arg("*")
        .arg(field::TICK)
        .arg(tick)
        .arg(field::INSTANCE)
        .arg(&**instance)
        .arg(field::OUTCOME)
        .arg(outcome.label())
        .arg(field::DURATION_MS)
        .arg(duration.as_millis() as u64);
    match outcome {
        RunOutcome::Failed(error) => {
            xadd.arg(field::ERROR).arg(error.chars().take(1000).collect::<String>());
        }
        RunOutcome::Missed(n) => {
            xadd.arg(field::ERROR).arg(format!("{n} slot(s) missed"));
        }
        RunOutcome::TimedOut(limit) => {
            xadd.arg(field::ERROR).arg(format!("ran longer than its maximum run time of {limit:?}"));
        }
        _ => {}
    }
    if let Some((id, by)) = manual {
        xadd.arg(field::MANUAL_BY).arg(&**by).arg(field::REQUEST).arg(&**id);
    }
    if let Some(attempt) = attempt {
        xadd.arg(field::ATTEMPT).arg(*attempt);
    }
    if let Some(at) = retry_at {
        xadd.arg(field::RETRY_AT).arg(*at);
    }
    if *gave_up {
        xadd.arg(field::GAVE_UP).arg(1);
    }
    if *backfill {
        xadd.arg(field::BACKFILL).arg(1);
    }
    if renew {
        pipe.cmd("PEXPIRE").arg(&key).arg(HISTORY_TTL.as_millis() as u64).ignore();
    }
    // Failures are counted per hour beside the history, so that a view of "failures in the
    // last 24 hours" reads counters instead of a day of history. (A record whose stream was
    // gone is written again, and counted again: only after a job's history expired.)
    if matches!(outcome, RunOutcome::Failed(_) | RunOutcome::TimedOut(_))
        && let Ok(counts) = schema::failures_key(job)
    {
        let hour = schema::failure_hour(chrono::Utc::now().timestamp_millis());
        pipe.cmd("ZADD").arg(&counts).arg("INCR").arg(1).arg(hour).ignore();
        // The hours a day and more back. An older one cannot be left: the set expires a day
        // after its last failure, so while it lives some failure falls in every such window.
        let zrem = pipe.cmd("ZREM").arg(&counts);
        for old in hour - 50..=hour - 25 {
            zrem.arg(old);
        }
        zrem.ignore();
        pipe.cmd("PEXPIRE").arg(&counts).arg(schema::FAILURES_TTL.as_millis() as u64).ignore();
    }
    if let Some(keep) = success_kept
        && let Ok(outcomes) = schema::failure_streak_key(job)
    {
        crate::failures::add_success(pipe, &outcomes, *tick, *keep);
    }
    true
}

/// Whether this replica is the one to record the missed slots ending at `tick` in `job`'s
/// history: replicas that find the same missed slots agree through Redis, so they are
/// recorded once. A Redis failure answers yes (recorded, perhaps twice, rather than lost).
pub(crate) async fn first_to_record_missed(client: &LockClient, job: &str, tick: i64) -> bool {
    let Ok(key) = schema::missed_key(job) else { return false };
    let mut invocation = schema::RECORD_MISSED.key(&key);
    invocation.arg(tick).arg(schema::MISSED_TTL.as_millis() as u64);
    let action = "agreeing on who records missed slots";
    match command::run_script::<i64>(client, action, &schema::RECORD_MISSED, &invocation, command::TIMEOUT)
        .await
    {
        Ok(set) => set == 1,
        Err(_) => true,
    }
}
