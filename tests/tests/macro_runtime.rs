//! `#[distributed_lock]` end to end against a real Redis: each mode, replicas, re-entrancy,
//! release on panic and cancellation, loss cancellation and fencing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lock_core::schema;
use lock_core::{LockClient, LockError, LockOptions, LossReason, distributed_lock};
use tests::harness::{RedisServer, init_tracing, wait_until};

fn client(server: &RedisServer, instance: &str) -> LockClient {
    LockClient::builder()
        .url(server.url())
        .instance_id(instance)
        .watchdog_lease(Duration::from_millis(600))
        .command_timeout(Duration::from_millis(200))
        .build()
        .expect("valid client configuration")
}

static RAN: AtomicU32 = AtomicU32::new(0);

#[distributed_lock(key = "job:skip", skip_if_held, client = client)]
async fn skip_job(client: &LockClient) -> Option<&'static str> {
    RAN.fetch_add(1, Ordering::SeqCst);
    Some("ran")
}

#[distributed_lock(key = "job:fail-fast", client = client)]
async fn fail_fast_job(client: &LockClient) -> Result<&'static str, LockError> {
    Ok("ran")
}

#[distributed_lock(key = "job:wait", wait = "3s", client = client)]
async fn waiting_job(client: &LockClient) -> Result<Instant, LockError> {
    Ok(Instant::now())
}

#[distributed_lock(key = "job:wait", wait = "300ms", client = client)]
async fn short_wait_job(client: &LockClient) -> Result<(), LockError> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_mode_end_to_end() {
    init_tracing();
    let server = RedisServer::shared();
    let (a, b) = (client(&server, "pod-1"), client(&server, "pod-2"));

    // skip_if_held: runs when free, skips (body not run) when held.
    assert_eq!(skip_job(&a).await, Some("ran"));
    let held = b.try_lock("job:skip", LockOptions::new()).await.unwrap();
    let before = RAN.load(Ordering::SeqCst);
    assert_eq!(skip_job(&a).await, None, "skipped");
    assert_eq!(RAN.load(Ordering::SeqCst), before, "the body did not run");
    held.release().await.unwrap();

    // fail fast: a held lock is an error.
    assert_eq!(fail_fast_job(&a).await.unwrap(), "ran");
    let held = b.try_lock("job:fail-fast", LockOptions::new()).await.unwrap();
    let err = fail_fast_job(&a).await.unwrap_err();
    assert!(matches!(&err, LockError::Held { key, .. } if key == "job:fail-fast"), "{err}");
    held.release().await.unwrap();

    // wait: runs once the holder releases; times out when it never does.
    let held = b.try_lock("job:wait", LockOptions::new()).await.unwrap();
    let waiter = tokio::spawn({
        let a = a.clone();
        async move { waiting_job(&a).await }
    });
    assert!(wait_until(Duration::from_secs(2), || a.stats().waiters_on("job:wait") == 1).await);
    let released = Instant::now();
    held.release().await.unwrap();
    let ran_at = waiter.await.unwrap().unwrap();
    assert!(ran_at - released < Duration::from_millis(500), "ran right after the release");
    let _held = b.try_lock("job:wait", LockOptions::new()).await.unwrap();
    let err = short_wait_job(&a).await.unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err}");
}

#[distributed_lock(key = "job:replicated", skip_if_held, client = client)]
async fn replicated_job(client: &LockClient, runs: &AtomicU32, finished: &AtomicU32) -> Option<()> {
    runs.fetch_add(1, Ordering::SeqCst);
    // Hold the lock until the other replica's call has returned, so the calls overlap.
    let deadline = Instant::now() + Duration::from_secs(5);
    while finished.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        tokio::task::yield_now().await;
    }
    Some(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_body_per_overlap() {
    init_tracing();
    let server = RedisServer::shared();
    let replicas = [client(&server, "pod-1"), client(&server, "pod-2")];
    let mut winners = [0u32; 2];
    for round in 0..20 {
        let runs = Arc::new(AtomicU32::new(0));
        let finished = Arc::new(AtomicU32::new(0));
        let start = Arc::new(tokio::sync::Barrier::new(2));
        let calls: Vec<_> = replicas
            .iter()
            .cloned()
            .map(|c| {
                let (runs, finished, start) = (runs.clone(), finished.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    let ran = replicated_job(&c, &runs, &finished).await.is_some();
                    finished.fetch_add(1, Ordering::SeqCst);
                    ran
                })
            })
            .collect();
        let mut ran = Vec::new();
        for call in calls {
            ran.push(tokio::time::timeout(Duration::from_secs(10), call).await.unwrap().unwrap());
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1, "round {round}: exactly one body ran");
        assert_eq!(ran.iter().filter(|r| **r).count(), 1, "round {round}: one ran, one skipped");
        winners[usize::from(!ran[0])] += 1;
    }
    eprintln!("wins per replica: {winners:?}");
}

#[distributed_lock(key = "job:nested", client = client)]
async fn outer(client: &LockClient) -> Result<String, LockError> {
    let token = lock_core::current().expect("inside the locked call").token().to_owned();
    let inner_token = inner(client).await?;
    assert_eq!(inner_token, token, "the nested call shares the outer hold");
    Ok(token)
}

#[distributed_lock(key = "job:nested", wait = "1s", client = client)]
async fn inner(client: &LockClient) -> Result<String, LockError> {
    Ok(lock_core::current().expect("inside the locked call").token().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_annotated_fns_with_the_same_key_are_reentrant() {
    init_tracing();
    let server = RedisServer::shared();
    let a = client(&server, "pod-1");
    let token =
        tokio::time::timeout(Duration::from_secs(5), outer(&a)).await.expect("no self-deadlock").unwrap();
    assert!(token.starts_with("pod-1:"));
    assert_eq!(server.cli(&["EXISTS", "job:nested"]), "0", "released after the outer call");
}

#[distributed_lock(key = "job:panics", skip_if_held, client = client)]
async fn panicking_job(client: &LockClient) {
    panic!("job failed");
}

#[distributed_lock(key = "job:cancelled", skip_if_held, client = client)]
async fn endless_job(client: &LockClient, started: &tokio::sync::Notify) {
    started.notify_one();
    std::future::pending::<()>().await;
}

#[distributed_lock(key = "job:errors", client = client)]
async fn failing_job(client: &LockClient, input: &str) -> anyhow::Result<u32> {
    let n: u32 = input.parse()?;
    Ok(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_returned_with_question_mark_releases_the_lock() {
    init_tracing();
    let server = RedisServer::shared();
    let a = LockClient::builder().url(server.url()).build().unwrap();
    let err = failing_job(&a, "not a number").await.unwrap_err();
    assert!(
        err.downcast_ref::<std::num::ParseIntError>().is_some(),
        "the body's own error comes back: {err}"
    );
    assert_eq!(server.cli(&["EXISTS", "job:errors"]), "0", "released before the call returned");
    assert_eq!(failing_job(&a, "7").await.unwrap(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panics_and_cancellation_release_the_lock() {
    init_tracing();
    let server = RedisServer::shared();
    // 30 s watchdog lease: only the release on unwind/drop frees the key this fast.
    let a = LockClient::builder().url(server.url()).build().unwrap();

    let task_client = a.clone();
    let panicked = tokio::spawn(async move { panicking_job(&task_client).await }).await;
    assert!(panicked.unwrap_err().is_panic());
    assert!(wait_until(Duration::from_secs(1), || server.cli(&["EXISTS", "job:panics"]) == "0").await);

    let started = Arc::new(tokio::sync::Notify::new());
    let (task_client, task_started) = (a.clone(), started.clone());
    let call = tokio::spawn(async move { endless_job(&task_client, &task_started).await });
    started.notified().await;
    assert_eq!(server.cli(&["EXISTS", "job:cancelled"]), "1");
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    assert!(wait_until(Duration::from_secs(1), || server.cli(&["EXISTS", "job:cancelled"]) == "0").await);
}

#[distributed_lock(key = "job:lost", client = client)]
async fn long_job(
    client: &LockClient,
    started: &tokio::sync::Notify,
    finished: &AtomicBool,
) -> Result<(), LockError> {
    started.notify_one();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    finished.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_lost_cancel_stops_the_body() {
    init_tracing();
    let server = RedisServer::shared();
    let a = client(&server, "pod-1");
    let started = Arc::new(tokio::sync::Notify::new());
    let finished = Arc::new(AtomicBool::new(false));
    let call = tokio::spawn({
        let (a, started, finished) = (a.clone(), started.clone(), finished.clone());
        async move { long_job(&a, &started, &finished).await }
    });
    started.notified().await;
    server.cli(&["DEL", "job:lost"]);
    let result =
        tokio::time::timeout(Duration::from_secs(3), call).await.expect("cancelled promptly").unwrap();
    assert!(
        matches!(result, Err(LockError::Lost { reason: LossReason::NotOwner, .. })),
        "the call reports the loss: {result:?}"
    );
    assert!(!finished.load(Ordering::SeqCst), "the body was stopped before its end");
}

#[distributed_lock(key = "job:fenced:{id}", fencing, client = client)]
async fn fenced(client: &LockClient, id: u32) -> Result<u64, LockError> {
    Ok(lock_core::current().and_then(|l| l.fence()).unwrap_or(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_exposes_increasing_fences_to_the_body() {
    init_tracing();
    let server = RedisServer::shared();
    let (a, b) = (client(&server, "pod-1"), client(&server, "pod-2"));
    let mut fences = Vec::new();
    for i in 0..6 {
        fences.push(fenced(if i % 2 == 0 { &a } else { &b }, 9).await.unwrap());
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    assert!(fences[0] >= 1);
    assert_eq!(server.cli(&["GET", &schema::fence_key("job:fenced:9")]), fences[5].to_string());
}

#[distributed_lock(key = "job:per-item:{item}", skip_if_held, client = client)]
async fn process_item(client: &LockClient, item: u32, done: &AtomicU32) -> Option<()> {
    done.fetch_add(1, Ordering::SeqCst);
    Some(())
}

#[distributed_lock(key = "job:loop", skip_if_held, client = client)]
async fn process_batch(client: &LockClient, done: &AtomicU32) -> Option<()> {
    done.fetch_add(1, Ordering::SeqCst);
    Some(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_first_locked_call_of_a_scheduler_run_claims_its_tick() {
    use lock_core::tick::{TickOutcome, scope as with_tick};
    init_tracing();
    let server = RedisServer::shared();
    let (a, b) = (client(&server, "pod-1"), client(&server, "pod-2"));
    let tick = i64::try_from(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis(),
    )
    .unwrap();

    // A run that calls locked fns several times: every call runs; the first claims the tick.
    let done = AtomicU32::new(0);
    let ((), outcome) = with_tick(tick, async {
        for _ in 0..3 {
            assert_eq!(
                process_batch(&a, &done).await,
                Some(()),
                "a later call is not skipped as 'tick done'"
            );
        }
        for item in 0..3 {
            assert_eq!(process_item(&a, item, &done).await, Some(()));
        }
    })
    .await;
    assert_eq!(done.load(Ordering::SeqCst), 6);
    assert!(matches!(outcome, Some(TickOutcome::Ran)), "{outcome:?}");
    assert_eq!(server.cli(&["GET", &schema::tick_key("job:loop")]), tick.to_string());
    assert_eq!(
        server.cli(&["EXISTS", &schema::tick_key("job:per-item:0")]),
        "0",
        "only the first call claimed a tick"
    );

    // The same tick on another replica: its first call finds the tick claimed and skips.
    let other = AtomicU32::new(0);
    let (skipped, outcome) = with_tick(tick, process_batch(&b, &other)).await;
    assert_eq!(skipped, None);
    assert!(matches!(outcome, Some(TickOutcome::Claimed { last_tick })  if last_tick == tick), "{outcome:?}");
    assert_eq!(other.load(Ordering::SeqCst), 0);
}
