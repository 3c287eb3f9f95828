//! Start and end times against a real redis-server: a job runs the slots from its start to its
//! end, both included, and none outside them; a maximum number of runs, counted across three
//! replicas.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::LockClient;
use lock_scheduler::chrono::{DurationRound, TimeDelta, Utc};
use lock_scheduler::{Job, Scheduler, SchedulerError, schema};
use tests::harness::{RedisServer, init_tracing, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_runs_the_slots_from_its_start_to_its_end_and_none_outside() {
    init_tracing();
    let server = RedisServer::start();
    let start = Utc::now().duration_trunc(TimeDelta::seconds(1)).expect("trunc") + TimeDelta::seconds(3);
    let end = start + TimeDelta::seconds(2);
    let ticks: Arc<Mutex<Vec<i64>>> = Arc::default();
    let seen = ticks.clone();
    let job = Job::with_context("bounded", "* * * * * *", move |ctx| {
        seen.lock().expect("ticks").push(ctx.tick());
        async {}
    })
    .lock("lock:bounded")
    .start_at(start)
    .end_at(end);
    let handle = Scheduler::builder()
        .client(tests::harness::client(&server, "solo"))
        .job(job)
        .build()
        .expect("valid")
        .start()
        .await
        .expect("starts");
    // Until two slots after the end: none of them may run.
    let after = (end + TimeDelta::seconds(2)).timestamp_millis();
    assert!(
        wait_until(Duration::from_secs(15), || Utc::now().timestamp_millis() > after).await,
        "the clock moves"
    );
    handle.shutdown().await;
    let ticks = ticks.lock().expect("ticks").clone();
    let expected: Vec<i64> = (0..3).map(|s| (start + TimeDelta::seconds(s)).timestamp_millis()).collect();
    assert_eq!(ticks, expected, "the slots from the start to the end, both included");
}

#[test]
fn an_end_before_the_start_is_a_typed_error() {
    let now = Utc::now();
    let job =
        Job::new("backwards", "* * * * * *", || async {}).start_at(now).end_at(now - TimeDelta::hours(1));
    let err = Scheduler::builder()
        .client(LockClient::builder().url("redis://127.0.0.1:1").build().expect("client"))
        .job(job)
        .build()
        .expect_err("refused");
    assert!(matches!(&err, SchedulerError::InvalidJob { job, .. } if job == "backwards"), "{err}");
    assert!(err.to_string().contains("is before its start time"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_runs_runs_a_job_that_many_times_across_the_replicas_then_no_more() {
    init_tracing();
    let server = RedisServer::start();
    let runs: Arc<Mutex<Vec<(String, i64)>>> = Arc::default();
    let mut handles = Vec::new();
    for pod in ["pod-a", "pod-b", "pod-c"] {
        let seen = runs.clone();
        let job = Job::with_context("limited", "* * * * * *", move |ctx| {
            seen.lock().expect("runs").push((ctx.instance().to_owned(), ctx.tick()));
            async {}
        })
        .lock("lock:limited")
        .max_runs(3);
        let scheduler = Scheduler::builder()
            .client(tests::harness::client(&server, pod))
            .job(job)
            .build()
            .expect("valid");
        handles.push(scheduler.start().await.expect("starts"));
    }
    let count = |runs: &Arc<Mutex<Vec<(String, i64)>>>| runs.lock().expect("runs").len();
    assert!(wait_until(Duration::from_secs(30), || count(&runs) >= 3).await, "three runs");
    // A replica that has not run the last run learns the limit at its next claim, and records it.
    let history = lock_scheduler::history_key("limited").expect("valid");
    let recorded = wait_until(Duration::from_secs(15), || {
        server.cli(&["XRANGE", &history, "-", "+"]).contains("skipped: max runs")
    })
    .await;
    assert!(recorded, "the history says the job reached its maximum");
    // A few periods more: nothing runs.
    let after = Utc::now().timestamp_millis() + 4000;
    assert!(
        wait_until(Duration::from_secs(15), || Utc::now().timestamp_millis() > after).await,
        "the clock moves"
    );
    for handle in handles {
        handle.shutdown().await;
    }
    let runs = runs.lock().expect("runs").clone();
    println!("max_runs(3): ran {runs:?}");
    assert_eq!(runs.len(), 3, "exactly three runs across the replicas: {runs:?}");
    let mut ticks: Vec<i64> = runs.iter().map(|r| r.1).collect();
    ticks.dedup();
    assert_eq!(ticks.len(), 3, "three slots, each once: {runs:?}");
    let key = schema::run_count_key("limited").expect("valid");
    let counted: i64 = server.cli(&["GET", &key]).trim().parse().expect("a count");
    assert!(counted >= 4, "the runs and the claims past the limit counted: {counted}");
    let operator = tests::harness::client(&server, "operator");
    let read = lock_scheduler::control::run_count(&operator, "limited").await.expect("read");
    assert_eq!(read, Some(counted as u64), "the admin read of the count");
    let ttl: i64 = server.cli(&["PTTL", &key]).trim().parse().expect("PTTL");
    assert!(ttl > 0, "the count expires: {ttl}");
    for key in server.cli(&["KEYS", "*"]).lines().filter(|k| !k.is_empty()) {
        let ttl: i64 = server.cli(&["PTTL", key]).parse().expect("a PTTL");
        assert!(ttl > 0 || ttl == -2, "{key} has no expiry (PTTL {ttl})");
    }
}

#[test]
fn a_max_runs_of_zero_is_a_typed_error() {
    let job = Job::new("never", "* * * * * *", || async {}).lock("lock:never").max_runs(0);
    let err = Scheduler::builder()
        .client(LockClient::builder().url("redis://127.0.0.1:1").build().expect("client"))
        .job(job)
        .build()
        .expect_err("refused");
    assert!(matches!(&err, SchedulerError::InvalidJob { job, .. } if job == "never"), "{err}");
    assert!(err.to_string().contains("max_runs is 0"), "{err}");
}
