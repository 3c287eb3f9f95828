//! Start and end times against a real redis-server: a job runs the slots from its start to its
//! end, both included, and none outside them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::LockClient;
use lock_scheduler::chrono::{DurationRound, TimeDelta, Utc};
use lock_scheduler::{Job, Scheduler, SchedulerError};
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
