//! What lock-core and the scheduler record through the `metrics` facade, read back from
//! metrics-util's debugging recorder (installed for this test binary), against a real Redis.
//!
//! One test: the recorder is process-wide, and the values are totals.

use std::time::Duration;

use lock_core::{LockClient, LockError, LockOptions, schema};
use lock_scheduler::{Job, RunOutcome, Scheduler};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tests::harness::{RedisServer, init_tracing};

/// (name, labels sorted as "k=v", value) of every metric recorded since the last snapshot
/// (taking one drains the recorder).
type Values = Vec<(String, Vec<String>, DebugValue)>;

fn values(snapshotter: &Snapshotter) -> Values {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<String> =
                key.labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
            labels.sort();
            (key.name().to_owned(), labels, value)
        })
        .collect()
}

fn counter(values: &Values, name: &str, labels: &[&str]) -> u64 {
    values
        .iter()
        .find(|(n, l, _)| n == name && l.iter().map(String::as_str).eq(labels.iter().copied()))
        .map_or(0, |(_, _, v)| match v {
            DebugValue::Counter(c) => *c,
            other => panic!("{name} is not a counter: {other:?}"),
        })
}

fn histogram(values: &Values, name: &str, labels: &[&str]) -> Vec<f64> {
    values
        .iter()
        .find(|(n, l, _)| n == name && l.iter().map(String::as_str).eq(labels.iter().copied()))
        .map_or_else(Vec::new, |(_, _, v)| match v {
            DebugValue::Histogram(h) => h.iter().map(|f| f.into_inner()).collect(),
            other => panic!("{name} is not a histogram: {other:?}"),
        })
}

fn client(server: &RedisServer, instance: &str) -> LockClient {
    LockClient::builder()
        .url(server.url())
        .instance_id(instance)
        .command_timeout(Duration::from_secs(2))
        .build()
        .expect("valid client configuration")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_jobs_are_measured_with_bounded_key_labels() {
    init_tracing();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("the only recorder of this test binary");
    let server = RedisServer::start();
    let (a, b) = (client(&server, "pod-1"), client(&server, "pod-2"));

    // Per-resource keys share one label: lock:product:* (the default key pattern).
    let key = "lock:product:42";
    let label = "key=lock:product:*";
    let guard = a.acquire(key, LockOptions::new()).await.expect("acquired");
    assert!(matches!(b.try_lock(key, LockOptions::new()).await, Err(LockError::Held { .. })));
    let waited = b.acquire(key, LockOptions::new().wait(Duration::from_millis(200))).await;
    assert!(matches!(waited, Err(LockError::Timeout { .. })), "{waited:?}");
    // A waiter that gets the lock handed over when it is released.
    let b2 = b.clone();
    let waiter = tokio::spawn(async move {
        b2.acquire("lock:product:42", LockOptions::new().wait(Duration::from_secs(60))).await
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while b.stats().waiters_on(key) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(guard.release().await.expect("released"));
    let handed = waiter.await.expect("task").expect("handed over");
    assert!(handed.release().await.expect("released"));
    // Another resource: same label.
    a.acquire("lock:product:7", LockOptions::new())
        .await
        .expect("acquired")
        .release()
        .await
        .expect("released");

    let snap = values(&snapshotter);
    assert_eq!(counter(&snap, "lock_acquisitions_total", &[label, "kind=lock", "outcome=acquired"]), 3);
    assert_eq!(counter(&snap, "lock_acquisitions_total", &[label, "kind=lock", "outcome=held"]), 1);
    assert_eq!(counter(&snap, "lock_acquisitions_total", &[label, "kind=lock", "outcome=timeout"]), 1);
    assert_eq!(counter(&snap, "lock_handoffs_total", &[label, "kind=lock"]), 1);
    let holds = histogram(&snap, "lock_hold_seconds", &[label, "kind=lock"]);
    assert_eq!(holds.len(), 3, "{holds:?}");
    let timeouts = histogram(&snap, "lock_wait_seconds", &[label, "kind=lock", "outcome=timeout"]);
    assert!(timeouts.len() == 1 && timeouts[0] >= 0.2, "waited at least the bound: {timeouts:?}");
    assert!(
        !snap.iter().any(|(_, labels, _)| labels.iter().any(|l| l.contains("42"))),
        "no per-resource label"
    );

    // Hand-offs that found nobody waiting. A dead client's two queued tickets: the release
    // reserves the lock for the first; once that lapses, the next look at the queue skips the
    // second (counted once, as `lapsed`), and a live waiter gets it.
    let key = "lock:unclaimed";
    let guard = a.acquire(key, LockOptions::new()).await.expect("acquired");
    let now_ms = server.cli(&["TIME"]).lines().next().expect("seconds").parse::<u64>().expect("int") * 1000;
    let (queue, tickets) = (&schema::queue_key(key), &schema::tickets_key(key));
    // Killed a moment ago: its liveness key has not expired yet, so nobody can tell it is dead.
    server.cli(&["SET", &schema::liveness_key("pod-9:abcdef012345"), "1", "PX", "60000"]);
    for dead in [
        "pod-9:abcdef012345:00000000-0000-4000-8000-000000000001",
        "pod-9:abcdef012345:00000000-0000-4000-8000-000000000002",
    ] {
        server.cli(&["RPUSH", queue, &format!("150|{dead}")]);
        server.cli(&["ZADD", tickets, &(now_ms + 60_000).to_string(), dead]);
    }
    let b2 = b.clone();
    let waiter =
        tokio::spawn(async move { b2.acquire(key, LockOptions::new().wait(Duration::from_secs(30))).await });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while server.cli(&["LLEN", queue]) != "3" {
        assert!(tokio::time::Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(guard.release().await.expect("released"));
    let got = waiter.await.expect("task").expect("the live waiter gets it after the lapse");
    assert!(got.release().await.expect("released"));
    let snap = values(&snapshotter);
    assert_eq!(
        counter(
            &snap,
            "lock_handoffs_unclaimed_total",
            &["key=lock:unclaimed", "kind=lock", "reason=lapsed"]
        ),
        1
    );

    // A waiter that gives up just after a release reserved the lock for it: its clean-up passes
    // the lock on at once (`waiter_left`). The waiter's client runs on a thread of its own, held
    // still while the release reserves the lock for it; then its wait is cancelled first thing.
    let guard = a.acquire(key, LockOptions::new()).await.expect("acquired");
    let (cancel_tx, cancel_rx) = tokio::sync::oneshot::channel::<()>();
    let (freeze_tx, freeze_rx) = tokio::sync::oneshot::channel::<()>();
    let (frozen_tx, frozen_rx) = std::sync::mpsc::channel::<()>();
    let (thaw_tx, thaw_rx) = std::sync::mpsc::channel::<()>();
    let c = client(&server, "pod-3");
    let leaver = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async move {
            let wait = tokio::spawn({
                let c = c.clone();
                async move {
                    tokio::select! {
                        biased;
                        _ = cancel_rx => None,
                        got = c.acquire(key, LockOptions::new().wait(Duration::from_secs(30))) => Some(got.is_ok()),
                    }
                }
            });
            // Runs until the test has seen the queue entry in Redis, then holds the thread (and
            // so everything on this runtime) still.
            freeze_rx.await.expect("test alive");
            frozen_tx.send(()).expect("test alive");
            thaw_rx.recv().expect("test alive");
            assert_eq!(wait.await.expect("task"), None, "cancelled before it could take the lock");
            c.flush_releases(Duration::from_secs(10)).await;
        });
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while server.cli(&["LLEN", queue]) != "1" {
        assert!(tokio::time::Instant::now() < deadline, "the leaver never queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    freeze_tx.send(()).expect("leaver running");
    frozen_rx.recv().expect("leaver frozen");
    assert!(guard.release().await.expect("released"));
    assert!(server.cli(&["GET", key]).starts_with("pod-3:"), "reserved for the leaver");
    cancel_tx.send(()).expect("leaver waiting");
    thaw_tx.send(()).expect("leaver frozen");
    leaver.join().expect("leaver thread");
    assert_eq!(server.cli(&["GET", key]), "(nil)", "passed on (nobody else waits: freed)");
    let snap = values(&snapshotter);
    assert_eq!(
        counter(
            &snap,
            "lock_handoffs_unclaimed_total",
            &["key=lock:unclaimed", "kind=lock", "reason=waiter_left"]
        ),
        1
    );

    // Requests to Redis: 300 ticks claimed together, their bodies run at once and their
    // locks released in groups, are a handful of round trips (one each would be 600).
    let keys: Vec<String> = (0..300).map(|i| format!("lock:burst:{i}")).collect();
    let requests: Vec<lock_core::tick::ClaimRequest<'_>> =
        keys.iter().map(|k| lock_core::tick::ClaimRequest::new(k, 1, LockOptions::new())).collect();
    let _ = values(&snapshotter);
    let mut runs = Vec::new();
    for claim in a.claim_ticks(&requests).await {
        let Ok(lock_core::tick::Claim::Claimed(claimed)) = claim else { panic!("claimed: {claim:?}") };
        runs.push(tokio::spawn(claimed.run(async {})));
    }
    for run in runs {
        run.await.expect("task").expect("ran");
    }
    let sent = counter(&values(&snapshotter), "lock_redis_requests_total", &[]);
    assert!((2..=15).contains(&sent), "{sent} requests for 300 claims and releases");
    assert!(keys.iter().all(|key| server.cli(&["EXISTS", key]) == "0"), "all released");

    // A job: runs counted by outcome, with duration and start lag; paused slots counted too.
    let job =
        Job::new("metrics-job", "* * * * * *", || async { Ok::<_, String>(()) }).lock("lock:metrics-job");
    let scheduler = Scheduler::builder().client(a.clone()).job(job).build().expect("valid scheduler");
    let mut reports = scheduler.subscribe();
    let handle = scheduler.start().await.expect("starts");
    let mut next_outcome = async || {
        tokio::time::timeout(Duration::from_secs(30), reports.recv())
            .await
            .expect("a report")
            .expect("report")
            .outcome
    };
    while next_outcome().await != RunOutcome::Ran {}
    handle.pause("metrics-job").await.expect("paused");
    while next_outcome().await != RunOutcome::SkippedPaused {}
    assert!(handle.resume("metrics-job").await.expect("resumed"));
    while next_outcome().await != RunOutcome::Ran {}
    handle.shutdown().await;

    let snap = values(&snapshotter);
    let job_label = "job_name=metrics-job";
    assert!(counter(&snap, "scheduler_runs_total", &[job_label, "outcome=ran"]) >= 2);
    assert!(counter(&snap, "scheduler_runs_total", &[job_label, "outcome=skipped_paused"]) >= 1);
    assert!(histogram(&snap, "scheduler_run_duration_seconds", &[job_label, "outcome=ran"]).len() >= 2);
    let lag = histogram(&snap, "scheduler_start_lag_seconds", &[job_label]);
    // A run starts after its slot, and on a machine this size well within a second of it.
    assert!(lag.len() >= 2 && lag.iter().all(|l| (0.0..5.0).contains(l)), "{lag:?}");
    assert!(
        counter(&snap, "lock_acquisitions_total", &["key=lock:metrics-job", "kind=lock", "outcome=acquired"])
            >= 2
    );

    // The run history has the runs and the paused slot, newest first.
    let history = lock_scheduler::control::history(&a, "metrics-job", 100).await.expect("history");
    assert!(history.iter().any(|e| e.outcome == "skipped: paused"), "{history:?}");
    assert!(
        history.iter().filter(|e| e.outcome == "ran" && e.instance == "pod-1").count() >= 2,
        "{history:?}"
    );
    assert!(history.windows(2).all(|w| w[0].id >= w[1].id), "newest first: {history:?}");
    let ttl = server.cli(&["PTTL", &lock_scheduler::history_key("metrics-job").expect("a valid job name")]);
    assert!(ttl.trim().parse::<i64>().is_ok_and(|ms| ms > 0), "the history expires: {ttl}");

    // The connect-time eviction check: a fresh client on this Redis (no maxmemory) found it
    // safe; on one that may evict keys with a TTL it says so (and, by default, works on).
    let fresh = client(&server, "pod-3");
    fresh
        .try_lock("lock:evict", LockOptions::new())
        .await
        .expect("acquired")
        .release()
        .await
        .expect("released");
    assert_eq!(gauge(&values(&snapshotter), "lock_redis_eviction_risk"), Some(0.0));
    server.cli(&["CONFIG", "SET", "maxmemory", "100mb"]);
    server.cli(&["CONFIG", "SET", "maxmemory-policy", "volatile-lru"]);
    let risky = client(&server, "pod-4");
    risky
        .try_lock("lock:evict", LockOptions::new())
        .await
        .expect("warned only")
        .release()
        .await
        .expect("released");
    assert_eq!(gauge(&values(&snapshotter), "lock_redis_eviction_risk"), Some(1.0));
}

fn gauge(values: &Values, name: &str) -> Option<f64> {
    values.iter().find(|(n, _, _)| n == name).map(|(_, _, v)| match v {
        DebugValue::Gauge(g) => g.into_inner(),
        other => panic!("{name} is not a gauge: {other:?}"),
    })
}
