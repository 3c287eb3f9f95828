//! "Run now" against a real redis-server with three scheduler replicas: exactly one replica
//! runs each request, once, through the job's lock; the history says who asked; a running job
//! is skipped and reported; no replica, no job or a bad name get their own errors. Replicas hear
//! of a request at once (the group's channel), find one whose announcement was lost by their
//! poll, and an idle one looks only once per poll.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::LockClient;
use lock_scheduler::control::ControlError;
use lock_scheduler::{Job, Scheduler, SchedulerHandle};
use tests::harness::{RedisServer, client, init_tracing, wait_until};
use tokio::sync::Semaphore;

/// A job on a yearly cron (so only manual runs happen during the test) under a lock, counting
/// its runs; each run first takes a permit from `gate` (closed: the run blocks).
fn job(runs: &Arc<AtomicUsize>, gate: &Arc<Semaphore>) -> Job {
    let (runs, gate) = (runs.clone(), gate.clone());
    Job::new("report", "0 0 0 1 1 *", move || {
        let (runs, gate) = (runs.clone(), gate.clone());
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            let _permit = gate.acquire().await.map_err(|e| e.to_string())?;
            Ok::<(), String>(())
        }
    })
    .lock("lock:run-now:report")
}

async fn replicas(
    server: &RedisServer,
    runs: &Arc<AtomicUsize>,
    gate: &Arc<Semaphore>,
) -> Vec<SchedulerHandle> {
    let mut handles = Vec::new();
    for instance in ["pod-a", "pod-b", "pod-c"] {
        let scheduler = Scheduler::builder().client(client(server, instance)).job(job(runs, gate)).build();
        handles.push(scheduler.expect("valid scheduler").start().await.expect("scheduler starts"));
    }
    handles
}

/// Waits up to `timeout` until the job's history holds `n` manual runs.
async fn manual_runs_reach(client: &LockClient, n: usize, timeout: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        if manual_runs(client).await.len() >= n {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// The manual runs in the job's history: (request id, requested by, outcome).
async fn manual_runs(client: &LockClient) -> Vec<(String, String, String)> {
    let history = lock_scheduler::control::history(client, "report", 100).await.expect("history");
    history.into_iter().filter_map(|e| Some((e.request?, e.manual_by?, e.outcome))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_runs_once_on_one_replica_and_is_recorded() {
    init_tracing();
    let server = RedisServer::start();
    let (runs, gate) = (Arc::new(AtomicUsize::new(0)), Arc::new(Semaphore::new(1_000)));
    let handles = replicas(&server, &runs, &gate).await;
    let operator = client(&server, "operator");

    let request =
        lock_scheduler::control::run_now(&operator, "report", "ana").await.expect("a replica takes it");
    assert_eq!((request.job.as_str(), request.by.as_str()), ("report", "ana"));
    assert!(manual_runs_reach(&operator, 1, Duration::from_secs(5)).await);
    assert_eq!(manual_runs(&operator).await, [(request.id.clone(), "ana".into(), "ran".into())]);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "one replica ran it");
    assert_eq!(server.cli(&["HLEN", &lock_scheduler::schema::runs_key(lock_scheduler::DEFAULT_GROUP)]), "0");

    // Requests from several operators at once: each one accepted runs (or is reported
    // skipped) exactly once; the others are told a run is already pending.
    let mut accepted = 1;
    for round in 0..5 {
        let asks = (0..4).map(|i| {
            let operator = operator.clone();
            tokio::spawn(async move {
                lock_scheduler::control::run_now(&operator, "report", &format!("op-{round}-{i}")).await
            })
        });
        for ask in futures_util::future::join_all(asks).await {
            match ask.expect("task") {
                Ok(_) => accepted += 1,
                Err(ControlError::RunPending { .. }) => {}
                Err(e) => panic!("unexpected: {e}"),
            }
        }
        let want = accepted;
        assert!(manual_runs_reach(&operator, want, Duration::from_secs(5)).await);
    }
    let recorded = manual_runs(&operator).await;
    let ran = recorded.iter().filter(|(_, _, outcome)| outcome == "ran").count();
    assert_eq!(recorded.len(), accepted, "one history entry per accepted request: {recorded:?}");
    assert_eq!(runs.load(Ordering::SeqCst), ran, "every entry that says ran ran once: {recorded:?}");
    let ids: std::collections::BTreeSet<&str> = recorded.iter().map(|(id, _, _)| id.as_str()).collect();
    assert_eq!(ids.len(), accepted, "no request ran twice");
    for handle in handles {
        handle.shutdown().await;
    }
}

/// Three replicas with the gate closed, and one manual run (asked by "ana") started and
/// blocked in its body, holding the job's lock.
async fn one_run_blocked() -> (RedisServer, Arc<AtomicUsize>, Arc<Semaphore>, Vec<SchedulerHandle>, LockClient)
{
    init_tracing();
    let server = RedisServer::start();
    let (runs, gate) = (Arc::new(AtomicUsize::new(0)), Arc::new(Semaphore::new(0)));
    let handles = replicas(&server, &runs, &gate).await;
    let operator = client(&server, "operator");
    lock_scheduler::control::run_now(&operator, "report", "ana").await.expect("taken");
    assert!(wait_until(Duration::from_secs(5), || runs.load(Ordering::SeqCst) == 1).await, "started");
    (server, runs, gate, handles, operator)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_is_skipped_and_reported_and_errors_say_why() {
    let (_server, runs, gate, handles, operator) = one_run_blocked().await;
    // Blocked in its body, holding the job's lock: the next request is taken and skipped.
    lock_scheduler::control::run_now(&operator, "report", "bo").await.expect("taken");
    assert!(manual_runs_reach(&operator, 1, Duration::from_secs(5)).await);
    let skipped = manual_runs(&operator).await;
    assert_eq!(skipped[0].1, "bo");
    assert!(skipped[0].2.starts_with("skipped"), "{skipped:?}");
    gate.add_permits(10);
    assert!(manual_runs_reach(&operator, 2, Duration::from_secs(5)).await);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the skipped request did not run the job");

    match lock_scheduler::control::run_now(&operator, "no-such-job", "ana").await {
        Err(ControlError::UnknownJob { job }) => assert_eq!(job, "no-such-job"),
        other => panic!("unknown job: {other:?}"),
    }
    assert!(matches!(
        lock_scheduler::control::run_now(&operator, "a\nb", "ana").await,
        Err(ControlError::InvalidJob(_))
    ));
    for handle in handles {
        handle.shutdown().await;
    }
    // The replicas left their group; the registry outlives them for a few seconds.
    match lock_scheduler::control::run_now(&operator, "report", "ana").await {
        Err(e @ ControlError::NoLiveReplica { .. }) => {
            assert!(e.to_string().contains("no live scheduler replica"), "{e}")
        }
        other => panic!("no replica: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_or_cancels_a_manual_run_in_flight() {
    let (server, runs, _gate, handles, _operator) = one_run_blocked().await;
    assert_ne!(server.cli(&["GET", "lock:run-now:report"]), "(nil)", "the run holds the job's lock");
    // A forced shutdown cancels the blocked run on whichever replica took it, and frees its
    // lock; a graceful one would wait for it like for a slot's run.
    let mut cancelled = Vec::new();
    for handle in handles {
        let report = handle.shutdown_forced_by(std::future::ready(())).await;
        cancelled.extend(report.cancelled);
    }
    assert_eq!(cancelled, ["report"], "exactly one replica had the manual run in flight");
    assert_eq!(server.cli(&["GET", "lock:run-now:report"]), "(nil)", "its lock was released");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Waits (up to `timeout`) until the group's pending request for the job is no longer `stored`:
/// a replica took it. Returns how long that took, looking every millisecond.
async fn taken_after(server: &RedisServer, stored: &str, timeout: Duration) -> Option<Duration> {
    let runs = lock_scheduler::schema::runs_key(lock_scheduler::DEFAULT_GROUP);
    let started = tokio::time::Instant::now();
    while started.elapsed() < timeout {
        if server.cli(&["HGET", &runs, "report"]) != stored {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_taken_at_once_by_one_replica_without_waiting_for_the_poll() {
    init_tracing();
    let server = RedisServer::start();
    let (runs, gate) = (Arc::new(AtomicUsize::new(0)), Arc::new(Semaphore::new(1_000)));
    let handles = replicas(&server, &runs, &gate).await;
    let operator = client(&server, "operator");
    let poll = lock_scheduler::schema::RUN_POLL;
    let mut latencies = Vec::new();
    for i in 0..20 {
        let request = lock_scheduler::control::request_run(&operator, "report", &format!("op-{i}"))
            .await
            .expect("stored");
        let stored = lock_scheduler::schema::run_request(
            &request.id,
            &request.by,
            request.requested_at.timestamp_millis(),
        );
        let taken = taken_after(&server, &stored, poll * 2).await.expect("a replica took it");
        latencies.push(taken);
        // The next request only once this one ran (one pending request per job).
        assert!(manual_runs_reach(&operator, i + 1, Duration::from_secs(10)).await, "request {i} ran");
    }
    latencies.sort();
    let (median, worst) = (latencies[latencies.len() / 2], latencies[latencies.len() - 1]);
    println!(
        "request -> taken over 20 requests, 3 replicas: median {median:?}, p90 {:?}, max {worst:?}",
        latencies[17]
    );
    // Found by a poll every RUN_POLL, the median would be about half of it.
    assert!(median < poll / 10, "median {median:?}: the replicas did not hear the requests");
    assert!(worst < poll / 2, "max {worst:?}: a request waited for the poll");
    let recorded = manual_runs(&operator).await;
    assert_eq!(recorded.len(), 20, "{recorded:?}");
    assert!(recorded.iter().all(|(_, _, outcome)| outcome == "ran"), "{recorded:?}");
    let ids: std::collections::BTreeSet<&str> = recorded.iter().map(|(id, _, _)| id.as_str()).collect();
    assert_eq!(ids.len(), 20, "each request ran once");
    assert_eq!(runs.load(Ordering::SeqCst), 20, "each on one replica");
    for handle in handles {
        handle.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_announcement_was_lost_is_found_by_the_poll() {
    init_tracing();
    let server = RedisServer::start();
    let (runs, gate) = (Arc::new(AtomicUsize::new(0)), Arc::new(Semaphore::new(1_000)));
    let handles = replicas(&server, &runs, &gate).await;
    let operator = client(&server, "operator");
    // An announced request first: every replica looks when told, which restarts its poll
    // timer, so none looks again for a whole RUN_POLL (nothing else tells them anything here).
    lock_scheduler::control::run_now(&operator, "report", "ana").await.expect("a replica takes it");
    assert!(manual_runs_reach(&operator, 1, Duration::from_secs(5)).await);
    // Stored as request_run.lua does, without the message on the group's channel.
    let key = lock_scheduler::schema::runs_key(lock_scheduler::DEFAULT_GROUP);
    let stored = lock_scheduler::schema::run_request("lost-1", "nobody-told", 1);
    server.cli(&["HSET", &key, "report", &stored]);
    server.cli(&["PEXPIRE", &key, "10000"]);
    let poll = lock_scheduler::schema::RUN_POLL;
    let taken = taken_after(&server, &stored, poll + Duration::from_secs(3)).await;
    println!("an unannounced request was taken after {taken:?} (RUN_POLL {poll:?})");
    let taken = taken.expect("no replica found it within a poll");
    assert!(taken >= poll / 2, "taken after {taken:?}: found by something else than the poll");
    assert!(manual_runs_reach(&operator, 2, Duration::from_secs(5)).await);
    let lost = manual_runs(&operator).await.into_iter().filter(|(id, ..)| id == "lost-1").collect::<Vec<_>>();
    assert_eq!(lost, [("lost-1".into(), "nobody-told".into(), "ran".into())]);
    assert_eq!(runs.load(Ordering::SeqCst), 2, "one replica ran each request");
    for handle in handles {
        handle.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_replica_looks_for_requests_once_per_poll() {
    init_tracing();
    let server = RedisServer::start();
    let (runs, gate) = (Arc::new(AtomicUsize::new(0)), Arc::new(Semaphore::new(1_000)));
    let handles = replicas(&server, &runs, &gate).await;
    let operator = client(&server, "operator");
    // Started: each replica made its first look (the registry holds the job).
    lock_scheduler::control::run_now(&operator, "report", "ana").await.expect("a replica takes it");
    assert!(manual_runs_reach(&operator, 1, Duration::from_secs(5)).await);
    let poll = lock_scheduler::schema::RUN_POLL;
    let before = server.command_calls("hgetall");
    let window = tokio::time::Instant::now();
    tokio::time::sleep(poll * 2).await; // the measured window itself, not a synchronisation
    let looks = server.command_calls("hgetall") - before;
    let seconds = window.elapsed().as_secs_f64();
    println!("3 idle replicas looked {looks} times in {seconds:.1} s (RUN_POLL {poll:?})");
    // Each replica looks once per poll (plus at most one more at the window's edges); the old
    // 500 ms poll would have looked 20 times each.
    assert!(looks >= 3, "the replicas still look: {looks}");
    assert!(looks <= 3 * 3, "{looks} looks in {seconds:.1} s");
    for handle in handles {
        handle.shutdown().await;
    }
}
