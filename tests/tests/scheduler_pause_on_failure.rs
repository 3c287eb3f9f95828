//! Pause on failure against a real redis-server, with two replicas: a job whose slots fail N
//! times in a row pauses itself on every replica, with the reason in its pause record; a
//! success in between resets the count, and so does resuming.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::LockClient;
use lock_scheduler::control::{self, HistoryEntry};
use lock_scheduler::{Job, Scheduler, SchedulerError, schema};
use tests::harness::{RedisServer, init_tracing, wait_until};

const JOB: &str = "flaky";

/// Runs whose number (1-based, across both replicas) is in `ok` succeed; the others fail.
fn replica(client: LockClient, runs: Arc<AtomicUsize>, ok: &'static [usize]) -> Scheduler {
    let job = Job::new(JOB, "* * * * * *", move || {
        let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
        async move { if ok.contains(&n) { Ok(()) } else { Err(format!("run {n} fails")) } }
    })
    .lock("lock:flaky")
    .pause_after_failures(3);
    Scheduler::builder().client(client).job(job).build().expect("valid")
}

async fn get(client: &LockClient, key: &str) -> Option<String> {
    let mut conn = client.pool().expect("single node").get().await.expect("connection");
    deadpool_redis::redis::cmd("GET").arg(key).query_async(&mut conn).await.expect("GET")
}

/// The failed slots in a row at the end of the job's final outcomes by slot (a zset scored
/// `2 * slot + 1` for a failed slot, `2 * slot` for a success); `None` when the key is gone.
async fn failed_in_a_row(client: &LockClient, key: &str) -> Option<usize> {
    let mut conn = client.pool().expect("single node").get().await.expect("connection");
    let scores: Vec<(String, f64)> = deadpool_redis::redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut conn)
        .await
        .expect("ZRANGE");
    if scores.is_empty() {
        return None;
    }
    Some(scores.iter().rev().take_while(|(_, score)| (*score as i64) % 2 == 1).count())
}

/// The outcomes recorded, oldest first.
async fn outcomes(client: &LockClient) -> Vec<String> {
    let entries: Vec<HistoryEntry> = control::history(client, JOB, 100).await.expect("history");
    entries.into_iter().rev().map(|e| e.outcome).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_failed_slots_in_a_row_pause_the_job_everywhere_and_resume_clears_the_count() {
    init_tracing();
    let server = RedisServer::start();
    let client = tests::harness::client(&server, "operator");
    let runs = Arc::new(AtomicUsize::new(0));
    // Runs 1 and 2 fail, 3 succeeds (the count starts again), 4, 5 and 6 fail: paused.
    let a = replica(tests::harness::client(&server, "pod-a"), runs.clone(), &[3]).start().await.expect("a");
    let b = replica(tests::harness::client(&server, "pod-b"), runs.clone(), &[3]).start().await.expect("b");
    let (pause_key, count_key) =
        (schema::pause_key(JOB).expect("valid"), schema::failure_streak_key(JOB).expect("valid"));
    // After run 3 succeeded, the count is gone: two failures did not pause the job.
    assert!(
        wait_until(Duration::from_secs(20), || runs.load(Ordering::SeqCst) >= 4).await,
        "four runs: {}",
        runs.load(Ordering::SeqCst)
    );
    let paused = async || get(&client, &pause_key).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let record = loop {
        if let Some(record) = paused().await {
            break record;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the job paused itself: {:?}",
            outcomes(&client).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!("pause record: {record}");
    assert!(record.contains("paused after 3 failed run(s) in a row; last: run 6 fails"), "{record}");
    assert!(record.contains(" by pod-"), "names the replica that paused it: {record}");
    assert_eq!(failed_in_a_row(&client, &count_key).await, Some(3));
    // Every replica skips its slots from then on, and records them as paused.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !outcomes(&client).await.iter().any(|o| o == "skipped: paused") {
        assert!(tokio::time::Instant::now() < deadline, "a paused slot recorded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let history = outcomes(&client).await;
    let ran: Vec<&str> = history.iter().map(String::as_str).filter(|o| *o != "skipped: paused").collect();
    assert_eq!(ran, ["failed", "failed", "ran", "failed", "failed", "failed"], "{history:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 6, "no run after the pause");
    let state = control::pause_state(&client, JOB).await.expect("pause state");
    assert_eq!(state.paused.as_deref(), Some(record.as_str()), "what lockctl shows");
    // Resume clears the count: the job runs again, and one more failure does not pause it.
    assert!(control::resume(&client, JOB).await.expect("resume"));
    assert_eq!(failed_in_a_row(&client, &count_key).await, None, "resume cleared the count");
    assert!(
        wait_until(Duration::from_secs(10), || runs.load(Ordering::SeqCst) >= 7).await,
        "the job runs again after resume"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while failed_in_a_row(&client, &count_key).await != Some(1) {
        assert!(tokio::time::Instant::now() < deadline, "the count starts again at 1");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(get(&client, &pause_key).await, None, "one failure after resume does not pause it");
    a.shutdown().await;
    b.shutdown().await;
}

#[test]
fn pause_after_zero_failures_is_a_typed_error_naming_the_job() {
    let job = Job::new("never", "* * * * * *", || async {}).pause_after_failures(0);
    let err = Scheduler::builder()
        .client(LockClient::builder().url("redis://127.0.0.1:1").build().expect("client"))
        .job(job)
        .build()
        .expect_err("refused");
    assert!(matches!(&err, SchedulerError::InvalidJob { job, .. } if job == "never"), "{err}");
    assert!(err.to_string().contains("pause_after_failures is 0"), "{err}");
}
