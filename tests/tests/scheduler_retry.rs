//! Retries of failed runs across replica processes, against a real redis-server: each attempt
//! runs once across the replicas, spaced by the backoff; the retry waiting in Redis survives
//! a `kill -9` of the replica whose attempt failed; the last attempt is recorded as failed for
//! good.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::LockClient;
use lock_scheduler::chrono::Utc;
use lock_scheduler::control::{self, HistoryEntry};
use lock_scheduler::{Job, RetryPolicy, RunReport, Scheduler, schema};
use tests::harness::{RedisServer, init_tracing, wait_until};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How late an attempt may start after its backoff ended: replicas look for due retries every
/// 500 ms, then take the retry and check the pause flag (two round trips) before it starts.
/// Generous for a loaded machine; an attempt is never early.
const LATE_TOLERANCE_MS: i64 = 2000;

/// What a replica printed: (replica, kind (`attempt`, `failing`, `succeeded`), tick, attempt,
/// wall ms).
type Line = (usize, String, i64, u32, i64);

struct Replicas {
    children: Vec<Child>,
    lines: Arc<Mutex<Vec<Line>>>,
}

impl Replicas {
    /// `count` `retry_replica` processes: job on `cron`, failing its first `failing` attempts,
    /// `attempts` in all, backoff from `base_ms` by `factor`.
    fn spawn(
        server: &RedisServer,
        count: usize,
        cron: &str,
        failing: u32,
        attempts: u32,
        base_ms: u64,
    ) -> Self {
        let lines: Arc<Mutex<Vec<Line>>> = Arc::default();
        let mut children = Vec::new();
        for i in 0..count {
            let mut child = Command::new(env!("CARGO_BIN_EXE_retry_replica"))
                .args([server.url(), format!("pod-{i}"), "lock:retry".into(), cron.into()])
                .args([failing.to_string(), attempts.to_string(), base_ms.to_string(), "2".into()])
                .env("RUST_LOG", "warn")
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .kill_on_drop(true)
                .spawn()
                .expect("spawn retry_replica");
            let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
            let lines = lines.clone();
            tokio::spawn(async move {
                while let Ok(Some(line)) = stdout.next_line().await {
                    let parts: Vec<&str> = line.split_whitespace().collect();
                    if let [kind, tick, n, at] = parts.as_slice()
                        && let (Ok(tick), Ok(n), Ok(at)) = (tick.parse(), n.parse(), at.parse())
                    {
                        lines.lock().expect("lines").push((i, (*kind).to_owned(), tick, n, at));
                    }
                }
            });
            children.push(child);
        }
        Replicas { children, lines }
    }

    fn lines(&self) -> Vec<Line> {
        self.lines.lock().expect("lines").clone()
    }

    fn find(&self, kind: &str, tick: Option<i64>, attempt: u32) -> Option<Line> {
        self.lines().into_iter().find(|l| l.1 == kind && tick.is_none_or(|t| l.2 == t) && l.3 == attempt)
    }

    /// The lines of `kind` for `tick`.
    fn of(&self, kind: &str, tick: i64) -> Vec<Line> {
        self.lines().into_iter().filter(|l| l.1 == kind && l.2 == tick).collect()
    }
}

async fn history_of(client: &LockClient, tick: i64) -> Vec<HistoryEntry> {
    let mut entries: Vec<HistoryEntry> = control::history(client, "retry-job", 100)
        .await
        .expect("read the history")
        .into_iter()
        .filter(|e| e.tick == tick)
        .collect();
    entries.sort_by_key(|e| e.attempt);
    entries
}

async fn pending_members(client: &LockClient) -> Vec<String> {
    let mut conn = client.pool().expect("a single-node client").get().await.expect("a connection");
    deadpool_redis::redis::cmd("ZRANGE")
        .arg(schema::retries_key(lock_scheduler::DEFAULT_GROUP))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .expect("read the pending retries")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_failing_twice_then_succeeding_runs_three_attempts_once_each_spaced_by_the_backoff() {
    init_tracing();
    let server = RedisServer::start();
    let client = tests::harness::client(&server, "test");
    // Slots every 10 s; attempts 1 s and 2 s apart: a slot's attempts are over before the next.
    let replicas = Replicas::spawn(&server, 3, "*/10 * * * * *", 2, 3, 1000);
    assert!(
        wait_until(Duration::from_secs(25), || replicas.find("succeeded", None, 3).is_some()).await,
        "a slot succeeded at its third attempt: {:?}",
        replicas.lines()
    );
    let tick = replicas.find("succeeded", None, 3).expect("succeeded").2;
    // Any duplicate attempt would start within a poll of the one seen; the next slot's first
    // attempt is later still.
    assert!(
        wait_until(Duration::from_secs(15), || replicas.lines().iter().any(|l| l.2 > tick)).await,
        "the next slot ran: {:?}",
        replicas.lines()
    );
    let attempts = replicas.of("attempt", tick);
    let numbers: Vec<u32> = attempts.iter().map(|l| l.3).collect();
    assert_eq!(numbers, [1, 2, 3], "each attempt once, in order, across the replicas: {attempts:?}");
    for (n, backoff) in [(2u32, 1000i64), (3, 2000)] {
        let failed = replicas.of("failing", tick).into_iter().find(|l| l.3 == n - 1).expect("the failure");
        let started = attempts.iter().find(|l| l.3 == n).expect("the attempt");
        let gap = started.4 - failed.4;
        println!("attempt {n} started {gap} ms after attempt {} failed (backoff {backoff} ms)", n - 1);
        assert!(
            gap >= backoff,
            "attempt {n} started {gap} ms after the failure, before its backoff of {backoff} ms"
        );
        assert!(gap <= backoff + LATE_TOLERANCE_MS, "attempt {n} started {gap} ms after the failure");
    }
    // What Redis holds: every attempt in the history, the retries scheduled, none left pending.
    let history = history_of(&client, tick).await;
    let summary: Vec<(Option<u32>, &str, bool, bool)> =
        history.iter().map(|e| (e.attempt, e.outcome.as_str(), e.retry_at.is_some(), e.gave_up)).collect();
    assert_eq!(
        summary,
        [(Some(1), "failed", true, false), (Some(2), "failed", true, false), (Some(3), "ran", false, false)],
        "{history:#?}"
    );
    for (entry, line) in history.iter().zip(&attempts) {
        assert_eq!(entry.instance, format!("pod-{}", line.0), "the history names the replica that ran it");
    }
    let left: Vec<String> =
        pending_members(&client).await.into_iter().filter(|m| m.contains(&tick.to_string())).collect();
    assert!(left.is_empty(), "no retry of the slot left pending: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_replica_waiting_to_retry_hands_the_retry_to_another_replica() {
    init_tracing();
    let server = RedisServer::start();
    let client = tests::harness::client(&server, "test");
    let mut replicas = Replicas::spawn(&server, 3, "*/10 * * * * *", 1, 3, 3000);
    assert!(
        wait_until(Duration::from_secs(25), || replicas.find("failing", None, 1).is_some()).await,
        "a first attempt failed: {:?}",
        replicas.lines()
    );
    let (victim, _, tick, _, failed_at) = replicas.find("failing", None, 1).expect("failing");
    // Killed during the backoff, waiting: once the retry is in Redis and the failed attempt in
    // the history (written a few ms after the retry, which goes first so that a crash in
    // between loses the entry, never the retry), before the retry is due.
    let member = schema::retry_member("retry-job", tick, 2);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while !pending_members(&client).await.contains(&member) || history_of(&client, tick).await.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the retry is not pending in Redis, or not recorded");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(Utc::now().timestamp_millis() < failed_at + 3000, "killed before the retry was due");
    replicas.children[victim].start_kill().expect("kill -9 the replica whose attempt failed");
    assert!(
        wait_until(Duration::from_secs(10), || replicas.find("succeeded", Some(tick), 2).is_some()).await,
        "another replica ran the retry: {:?}",
        replicas.lines()
    );
    let retried = replicas.of("attempt", tick);
    assert_eq!(retried.iter().map(|l| l.3).collect::<Vec<_>>(), [1, 2], "{retried:?}");
    let second = &retried[1];
    assert_ne!(second.0, victim, "the killed replica cannot have run it");
    let gap = second.4 - failed_at;
    println!(
        "pod-{victim} killed during the backoff; pod-{} ran attempt 2 {gap} ms after attempt 1 failed",
        second.0
    );
    assert!((3000..=3000 + LATE_TOLERANCE_MS).contains(&gap), "attempt 2 started {gap} ms after the failure");
    // The run prints before its history entry is written (a few ms later, batched).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut history = history_of(&client, tick).await;
    while history.len() < 2 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
        history = history_of(&client, tick).await;
    }
    let summary: Vec<(Option<u32>, &str, String)> =
        history.iter().map(|e| (e.attempt, e.outcome.as_str(), e.instance.clone())).collect();
    assert_eq!(
        summary,
        [(Some(1), "failed", format!("pod-{victim}")), (Some(2), "ran", format!("pod-{}", second.0))],
        "{history:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_failing_every_attempt_is_recorded_failed_for_good() {
    init_tracing();
    let server = RedisServer::start();
    let client = tests::harness::client(&server, "solo");
    let job = Job::with_context("always-fails", "*/5 * * * * *", |ctx| async move {
        Err::<(), _>(format!("attempt {} fails", ctx.attempt()))
    })
    .lock("lock:always-fails")
    .retry(RetryPolicy::attempts(2).base_delay(Duration::from_millis(300)).jitter(0.0));
    let scheduler = Scheduler::builder().client(client.clone()).job(job).build().expect("valid");
    let reports: Arc<Mutex<Vec<RunReport>>> = Arc::default();
    let mut rx = scheduler.subscribe();
    let sink = reports.clone();
    tokio::spawn(async move {
        while let Ok(report) = rx.recv().await {
            sink.lock().expect("reports").push(report);
        }
    });
    let handle = scheduler.start().await.expect("starts");
    let gave_up = || reports.lock().expect("reports").iter().find(|r| r.gave_up).cloned();
    assert!(wait_until(Duration::from_secs(15), || gave_up().is_some()).await, "a slot gave up");
    let last = gave_up().expect("gave up");
    let of_slot: Vec<RunReport> =
        reports.lock().expect("reports").iter().filter(|r| r.tick == last.tick).cloned().collect();
    let seen: Vec<(u32, bool, bool)> =
        of_slot.iter().map(|r| (r.attempt, r.retry_at.is_some(), r.gave_up)).collect();
    assert_eq!(seen, [(1, true, false), (2, false, true)], "{of_slot:#?}");
    assert_eq!(of_slot[1].outcome, lock_scheduler::RunOutcome::Failed("attempt 2 fails".into()));
    let history: Vec<HistoryEntry> = control::history(&client, "always-fails", 10)
        .await
        .expect("history")
        .into_iter()
        .filter(|e| e.tick == last.tick)
        .collect();
    let recorded: Vec<(Option<u32>, bool, bool)> =
        history.iter().rev().map(|e| (e.attempt, e.retry_at.is_some(), e.gave_up)).collect();
    assert_eq!(recorded, [(Some(1), true, false), (Some(2), false, true)], "{history:#?}");
    handle.shutdown().await;
}

#[test]
fn a_bad_retry_policy_is_a_typed_error_naming_the_job() {
    let job = Job::new("bad-retry", "* * * * * *", || async {}).retry(RetryPolicy::attempts(0));
    let err = Scheduler::builder()
        .client(LockClient::builder().url("redis://127.0.0.1:1").build().expect("client"))
        .job(job)
        .build()
        .expect_err("refused");
    let message = err.to_string();
    assert!(message.contains("bad-retry") && message.contains("retry attempts is 0"), "{message}");
    assert!(matches!(err, lock_scheduler::SchedulerError::InvalidJob { .. }));
}
