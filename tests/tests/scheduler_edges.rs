//! The scheduler's protocol at its edges, against a real redis-server: retries that come due
//! after the next slot, pause on failure counted by slot, `BufferOne` behind a run-now and at
//! shutdown, claims that fail without running, `max_runs` with a failed count, lost replies of
//! the take of due retries, backfills overlapping runs, and the start lag of a slot run after
//! the claim grace.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::LockClient;
use lock_scheduler::control::{self, HistoryEntry};
use lock_scheduler::{Job, RetryPolicy, Scheduler};
use tests::harness::{FaultProxy, Hold, RedisServer, init_tracing, wait_until};

/// What the bodies saw: (tick, attempt, instance), in start order.
type Starts = Arc<Mutex<Vec<(i64, u32, String)>>>;

fn starts_of(starts: &Starts) -> Vec<(i64, u32, String)> {
    starts.lock().expect("starts").clone()
}

/// Retries that come due after the next slot has claimed its tick still run, once each: a job
/// every 2 s whose first attempts fail, retried 3 s later, on two replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_due_after_the_next_slot_run_once_each() {
    init_tracing();
    let server = RedisServer::start();
    let starts: Starts = Arc::default();
    let replica = |instance: &str| {
        let starts = starts.clone();
        let job = Job::with_context("late-retry", "*/2 * * * * *", move |ctx| {
            starts.lock().expect("starts").push((ctx.tick(), ctx.attempt(), ctx.instance().to_owned()));
            let attempt = ctx.attempt();
            async move { if attempt == 1 { Err("attempt 1 fails".to_owned()) } else { Ok(()) } }
        })
        .lock("lock:late-retry")
        .retry(RetryPolicy::attempts(2).base_delay(Duration::from_secs(3)).jitter(0.0));
        Scheduler::builder()
            .client(tests::harness::client(&server, instance))
            .job(job)
            .build()
            .expect("valid")
    };
    let a = replica("pod-a").start().await.expect("a");
    let b = replica("pod-b").start().await.expect("b");
    // The first three slots whose attempt 1 ran: each attempt 2 comes due 3 s later, after the
    // next slot (2 s later) claimed its tick.
    let firsts = || {
        let mut ticks: Vec<i64> = starts_of(&starts).into_iter().filter(|s| s.1 == 1).map(|s| s.0).collect();
        ticks.sort_unstable();
        ticks.truncate(3);
        ticks
    };
    let retried = |tick: i64| starts_of(&starts).iter().any(|s| s.0 == tick && s.1 == 2);
    let all_retried = wait_until(Duration::from_secs(30), || {
        let ticks = firsts();
        ticks.len() == 3 && ticks.iter().all(|t| retried(*t))
    })
    .await;
    // Any duplicate of an attempt starts within a poll of the first: wait past the next slot's
    // retry too before stopping.
    let last = firsts().last().copied().unwrap_or_default();
    let _ = wait_until(Duration::from_secs(10), || retried(last + 2000)).await;
    a.shutdown().await;
    b.shutdown().await;
    let seen = starts_of(&starts);
    assert!(all_retried, "every slot's attempt 2 ran (slots {:?}): {seen:?}", firsts());
    let mut runs: BTreeMap<(i64, u32), usize> = BTreeMap::new();
    for (tick, attempt, _) in &seen {
        *runs.entry((*tick, *attempt)).or_default() += 1;
    }
    assert!(runs.len() >= 6, "material to check: {seen:?}");
    assert!(runs.values().all(|n| *n == 1), "each (slot, attempt) ran once across the replicas: {runs:?}");
    // The history says so too: every retried slot's attempt 2 ran.
    let client = tests::harness::client(&server, "operator");
    let history: Vec<HistoryEntry> = control::history(&client, "late-retry", 100).await.expect("history");
    for tick in firsts() {
        let ran: Vec<&HistoryEntry> =
            history.iter().filter(|e| e.tick == tick && e.attempt == Some(2)).collect();
        assert_eq!(ran.len(), 1, "one history entry for slot {tick}'s attempt 2: {history:?}");
        assert_eq!(ran[0].outcome, "ran", "{history:?}");
    }
}

/// Reads a string key (`None` if absent).
async fn get(client: &LockClient, key: &str) -> Option<String> {
    let mut conn = client.pool().expect("single node").get().await.expect("connection");
    deadpool_redis::redis::cmd("GET").arg(key).query_async(&mut conn).await.expect("GET")
}

/// Whether `key` exists.
async fn exists(client: &LockClient, key: &str) -> bool {
    let mut conn = client.pool().expect("single node").get().await.expect("connection");
    deadpool_redis::redis::cmd("EXISTS").arg(key).query_async(&mut conn).await.expect("EXISTS")
}

/// Runs one command, ignoring its reply.
async fn cmd(client: &LockClient, args: &[&str]) {
    let mut conn = client.pool().expect("single node").get().await.expect("connection");
    let mut command = deadpool_redis::redis::cmd(args[0]);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    let _: deadpool_redis::redis::Value = command.query_async(&mut conn).await.expect("command");
}

async fn history_of(client: &LockClient, job: &str) -> Vec<HistoryEntry> {
    control::history(client, job, 100).await.expect("history")
}

/// P1: a job whose every run fails pauses itself, even when each slot's retry comes due after
/// the next slot (every second, retried 1.5 s later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_every_run_fails_pauses_itself_when_retries_end_after_the_next_slot() {
    init_tracing();
    let server = RedisServer::start();
    let starts: Starts = Arc::default();
    let replica = |instance: &str| {
        let starts = starts.clone();
        let job = Job::with_context("always-fails", "* * * * * *", move |ctx| {
            starts.lock().expect("starts").push((ctx.tick(), ctx.attempt(), ctx.instance().to_owned()));
            async move { Err::<(), _>("fails".to_owned()) }
        })
        .lock("lock:always-fails")
        .retry(RetryPolicy::attempts(2).base_delay(Duration::from_millis(1500)).jitter(0.0))
        .pause_after_failures(2);
        Scheduler::builder()
            .client(tests::harness::client(&server, instance))
            .job(job)
            .build()
            .expect("valid")
    };
    let a = replica("pod-a").start().await.expect("a");
    let b = replica("pod-b").start().await.expect("b");
    let client = tests::harness::client(&server, "operator");
    let pause_key = lock_scheduler::schema::pause_key("always-fails").expect("valid");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let record = loop {
        if let Some(record) = get(&client, &pause_key).await {
            break Some(record);
        }
        if tokio::time::Instant::now() > deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    a.shutdown().await;
    b.shutdown().await;
    let seen = starts_of(&starts);
    let record = record.unwrap_or_else(|| panic!("the job paused itself: {seen:?}"));
    println!("pause record: {record}");
    assert!(record.contains("paused after 2 failed run(s) in a row"), "{record}");
    assert!(seen.iter().any(|s| s.1 == 2), "retries ran: {seen:?}");
}

/// U1: a `BufferOne` slot buffered behind a "run now" run starts when that run ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_buffered_behind_a_run_now_starts_when_it_ends() {
    init_tracing();
    let server = RedisServer::start();
    let starts: Starts = Arc::default();
    let starts_ = starts.clone();
    // Slots every 2 s run 10 ms; the run-now (its slot is the request's time, not an even
    // second) runs 3 s, so at least one slot comes while it runs.
    let job = Job::with_context("buffer-manual", "*/2 * * * * *", move |ctx| {
        starts_.lock().expect("starts").push((ctx.tick(), ctx.attempt(), ctx.instance().to_owned()));
        let long = ctx.tick() % 2000 != 0;
        async move {
            tokio::time::sleep(if long { Duration::from_secs(3) } else { Duration::from_millis(10) }).await;
        }
    })
    .lock("lock:buffer-manual")
    .overlap(lock_scheduler::Overlap::BufferOne);
    let client = tests::harness::client(&server, "operator");
    let a = Scheduler::builder()
        .client(tests::harness::client(&server, "pod-a"))
        .job(job)
        .build()
        .expect("valid")
        .start()
        .await
        .expect("a");
    // After a slot ran, ask for a run now (again if it found a slot's run in flight).
    assert!(wait_until(Duration::from_secs(10), || !starts_of(&starts).is_empty()).await, "a slot ran");
    let manual_started = || starts_of(&starts).iter().any(|s| s.0 % 2000 != 0);
    for _ in 0..5 {
        control::run_now(&client, "buffer-manual", "test").await.expect("run now");
        if wait_until(Duration::from_secs(2), manual_started).await {
            break;
        }
    }
    assert!(manual_started(), "the run now started: {:?}", starts_of(&starts));
    let buffered = || async {
        history_of(&client, "buffer-manual")
            .await
            .into_iter()
            .filter(|e| e.outcome == "buffered")
            .map(|e| e.tick)
            .max()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let tick = loop {
        if let Some(tick) = buffered().await {
            break tick;
        }
        assert!(tokio::time::Instant::now() < deadline, "a slot was buffered behind the run now");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let ran = wait_until(Duration::from_secs(10), || starts_of(&starts).iter().any(|s| s.0 == tick)).await;
    a.shutdown().await;
    let seen = starts_of(&starts);
    assert!(ran, "the slot {tick} buffered behind the run now started: {seen:?}");
    assert_eq!(seen.iter().filter(|s| s.0 == tick).count(), 1, "once: {seen:?}");
}

/// Point 3: a replica told to stop while its `BufferOne` run has a slot buffered behind it
/// starts nothing after that: the buffered slot runs once on the other replica, every run it
/// started is reported and counted by its shutdown, and the lock is free at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_replica_hands_its_buffered_slot_over_and_starts_nothing() {
    init_tracing();
    let server = RedisServer::start();
    let client = tests::harness::client(&server, "operator");
    // (tick, instance, when) of every body start.
    let starts: Arc<Mutex<Vec<(i64, String, tokio::time::Instant)>>> = Arc::default();
    let end = lock_scheduler::chrono::Utc::now() + lock_scheduler::chrono::TimeDelta::seconds(4);
    let replica = |instance: &str| {
        let starts = starts.clone();
        let job = Job::with_context("buffer-stop", "* * * * * *", move |ctx| {
            starts.lock().expect("starts").push((
                ctx.tick(),
                ctx.instance().to_owned(),
                tokio::time::Instant::now(),
            ));
            async move { tokio::time::sleep(Duration::from_millis(2500)).await }
        })
        .lock("lock:buffer-stop")
        .overlap(lock_scheduler::Overlap::BufferOne)
        .end_at(end);
        Scheduler::builder()
            .client(tests::harness::client(&server, instance))
            .job(job)
            .build()
            .expect("valid")
    };
    let (a, b) = (replica("pod-a"), replica("pod-b"));
    let mut reports_a = a.subscribe();
    let mut reports_b = b.subscribe();
    let a = a.start().await.expect("a");
    let b = b.start().await.expect("b");
    let started = || starts.lock().expect("starts").clone();
    assert!(wait_until(Duration::from_secs(10), || !started().is_empty()).await, "a slot ran");
    let runner = started()[0].1.clone();
    let buffered =
        async || history_of(&client, "buffer-stop").await.into_iter().any(|e| e.outcome == "buffered");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !buffered().await {
        assert!(tokio::time::Instant::now() < deadline, "a slot was buffered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (stopping, other) = if runner == "pod-a" { (a, b) } else { (b, a) };
    let told = tokio::time::Instant::now();
    let report = stopping.shutdown().await;
    // The buffered slot (the latest one) runs on the other replica, once.
    let last_buffered = || async {
        history_of(&client, "buffer-stop")
            .await
            .into_iter()
            .filter(|e| e.outcome == "buffered")
            .map(|e| e.tick)
            .max()
            .expect("buffered")
    };
    let ran_elsewhere =
        wait_until(Duration::from_secs(15), || started().iter().any(|s| s.1 != runner && s.2 > told)).await;
    // The other replica ends its chain of buffered slots (the job ends 4 s after the start).
    let (buffer_key, pending_key) = (
        lock_scheduler::schema::buffered_key("buffer-stop").expect("valid"),
        lock_scheduler::schema::retries_key(lock_scheduler::DEFAULT_GROUP),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut quiet = 0;
    while quiet < 3 {
        assert!(tokio::time::Instant::now() < deadline, "the other replica went idle");
        let idle = other.running_jobs().is_empty()
            && get(&client, &buffer_key).await.is_none()
            && !exists(&client, &pending_key).await;
        quiet = if idle { quiet + 1 } else { 0 };
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    other.shutdown().await;
    let seen = started();
    let late: Vec<_> = seen.iter().filter(|s| s.1 == runner && s.2 > told).collect();
    assert!(late.is_empty(), "{runner} started nothing after it was told to stop: {late:?}");
    assert_eq!(report.finished.len() + report.cancelled.len(), 1, "the run in flight, counted: {report:?}");
    assert!(ran_elsewhere, "the buffered slot ran on the other replica: {seen:?}");
    let tick = last_buffered().await;
    let runs_of_tick: Vec<_> = seen.iter().filter(|s| s.0 == tick).collect();
    assert_eq!(runs_of_tick.len(), 1, "the buffered slot {tick} ran once: {seen:?}");
    assert_ne!(runs_of_tick[0].1, runner, "on the other replica");
    // Every body started is reported by its replica.
    let mut reported = 0;
    for reports in [&mut reports_a, &mut reports_b] {
        while let Ok(report) = reports.try_recv() {
            if report.outcome.ran_here() {
                reported += 1;
            }
        }
    }
    assert_eq!(reported, seen.len(), "every started run reported: {seen:?}");
    let lock_held = get(&client, "lock:buffer-stop").await;
    assert_eq!(lock_held, None, "the lock is free once both replicas stopped");
}

/// M1: with `max_runs(1)`, a slot whose count fails (here `INCR` answers an error) is not
/// retried uncounted: one body in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_could_not_be_counted_is_not_retried() {
    init_tracing();
    let server = RedisServer::start();
    let client = tests::harness::client(&server, "operator");
    let count_key = lock_scheduler::schema::run_count_key("once").expect("valid");
    // The count answers an error until the test fixes it.
    cmd(&client, &["HSET", &count_key, "not", "a counter"]).await;
    let starts: Starts = Arc::default();
    let starts_ = starts.clone();
    // Slots 5 s apart, retried after 1 s: a retry would run before the next slot.
    let job = Job::with_context("once", "*/5 * * * * *", move |ctx| {
        starts_.lock().expect("starts").push((ctx.tick(), ctx.attempt(), ctx.instance().to_owned()));
        async {}
    })
    .lock("lock:once")
    .max_runs(1)
    .retry(RetryPolicy::attempts(3).base_delay(Duration::from_secs(1)).jitter(0.0));
    let a = Scheduler::builder()
        .client(tests::harness::client(&server, "pod-a"))
        .job(job)
        .build()
        .expect("valid")
        .start()
        .await
        .expect("a");
    let uncounted = async || {
        history_of(&client, "once")
            .await
            .into_iter()
            .find(|e| e.outcome == "failed" && e.error.as_deref().is_some_and(|e| e.contains("max_runs")))
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let failed = loop {
        if let Some(entry) = uncounted().await {
            break entry;
        }
        assert!(tokio::time::Instant::now() < deadline, "a run could not be counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    cmd(&client, &["DEL", &count_key]).await;
    // The next slot (5 s later) counts and runs; a retry of the uncounted slot (1 s later)
    // would be a second body.
    assert!(wait_until(Duration::from_secs(10), || !starts_of(&starts).is_empty()).await, "a slot ran");
    let _ = wait_until(Duration::from_secs(4), || starts_of(&starts).len() > 1).await;
    a.shutdown().await;
    let seen = starts_of(&starts);
    assert_eq!(seen.len(), 1, "one body for max_runs(1) (slot {} uncounted): {seen:?}", failed.tick);
    assert!(seen.iter().all(|s| s.0 != failed.tick), "the uncounted slot was not retried: {seen:?}");
}

/// A1: a slot whose claim fails without running (here the claim script answers an error) is
/// left to the resync, which runs it once Redis answers: no retry runs it a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_failed_without_running_is_run_by_the_resync_only() {
    init_tracing();
    let server = RedisServer::start();
    let client = tests::harness::client(&server, "operator");
    let starts: Starts = Arc::default();
    let starts_ = starts.clone();
    let job = Job::with_context("a1", "*/5 * * * * *", move |ctx| {
        starts_.lock().expect("starts").push((ctx.tick(), ctx.attempt(), ctx.instance().to_owned()));
        async {}
    })
    .lock("lock:a1")
    .retry(RetryPolicy::attempts(2).base_delay(Duration::from_secs(2)).jitter(0.0));
    let a = Scheduler::builder()
        .client(tests::harness::client(&server, "pod-a"))
        .job(job)
        .build()
        .expect("valid")
        .start()
        .await
        .expect("a");
    // The first slot runs; then scripts are refused (an ACL change), so the next claim answers
    // an error before it writes anything; plain commands (the retry's ZADD) still work.
    assert!(wait_until(Duration::from_secs(10), || !starts_of(&starts).is_empty()).await, "a slot ran");
    cmd(&client, &["ACL", "SETUSER", "default", "-evalsha", "-eval"]).await;
    let failed =
        async || history_of(&client, "a1").await.into_iter().find(|e| e.outcome == "failed").map(|e| e.tick);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let slot = loop {
        if let Some(slot) = failed().await {
            break slot;
        }
        assert!(tokio::time::Instant::now() < deadline, "a claim failed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // Redis answers again; its last claimed tick is the first slot's: the failed slot is missed.
    cmd(&client, &["ACL", "SETUSER", "default", "+evalsha", "+eval"]).await;
    let ran = wait_until(Duration::from_secs(8), || starts_of(&starts).iter().any(|s| s.0 == slot)).await;
    // A retry would come 2 s after the failure; wait past it (before the next slot, 5 s on).
    let _ = wait_until(Duration::from_millis(3500), || {
        starts_of(&starts).iter().filter(|s| s.0 == slot).count() > 1
    })
    .await;
    a.shutdown().await;
    let seen = starts_of(&starts);
    assert!(ran, "the resync ran the slot {slot} whose claim failed: {seen:?}");
    let runs: Vec<_> = seen.iter().filter(|s| s.0 == slot).collect();
    assert_eq!(runs.len(), 1, "the slot {slot} ran once: {seen:?}");
}

/// R1: the take of a due retry runs but its reply is lost (the fault proxy holds the replies of
/// the connection that sent it): the replica takes it again with its next look and runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_whose_take_lost_its_reply_still_runs() {
    init_tracing();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).expect("proxy");
    let client = tests::harness::client(&server, "operator");
    let starts: Starts = Arc::default();
    let starts_ = starts.clone();
    let job = Job::with_context("r1", "*/10 * * * * *", move |ctx| {
        starts_.lock().expect("starts").push((ctx.tick(), ctx.attempt(), ctx.instance().to_owned()));
        let attempt = ctx.attempt();
        async move { if attempt == 1 { Err("attempt 1 fails".to_owned()) } else { Ok(()) } }
    })
    .lock("lock:r1")
    .retry(RetryPolicy::attempts(2).base_delay(Duration::from_secs(2)).jitter(0.0));
    let replica = LockClient::builder()
        .url(proxy.url())
        .instance_id("pod-a")
        .command_timeout(Duration::from_millis(500))
        .build()
        .expect("client");
    let a = Scheduler::builder().client(replica).job(job).build().expect("valid").start().await.expect("a");
    assert!(wait_until(Duration::from_secs(15), || !starts_of(&starts).is_empty()).await, "a slot ran");
    let tick = starts_of(&starts)[0].0;
    // The retry is written before the failed attempt's history entry: once the entry is there,
    // the take (the only command naming the member from now on) is the next to carry it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !history_of(&client, "r1").await.iter().any(|e| e.tick == tick && e.outcome == "failed") {
        assert!(tokio::time::Instant::now() < deadline, "attempt 1 failed and was recorded");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let member = lock_scheduler::schema::retry_member("r1", tick, 2);
    proxy.on_command(member.as_bytes().to_vec(), Hold::Replies);
    let ran =
        wait_until(Duration::from_secs(20), || starts_of(&starts).iter().any(|s| s.0 == tick && s.1 == 2))
            .await;
    let fired = proxy.stats();
    proxy.release_held();
    let _ = wait_until(Duration::from_secs(2), || starts_of(&starts).iter().filter(|s| s.1 == 2).count() > 1)
        .await;
    a.shutdown().await;
    let seen = starts_of(&starts);
    println!("proxy: {fired:?}");
    assert!(ran, "the retry whose take lost its reply ran: {seen:?}");
    assert_eq!(seen.iter().filter(|s| s.0 == tick && s.1 == 2).count(), 1, "once: {seen:?}");
}

/// Point 4: a slot whose preferred replica is dead runs after the claim grace on another one,
/// and its reported lateness includes that grace (it is measured to the body's start).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lateness_includes_the_claim_grace_waited() {
    init_tracing();
    let server = RedisServer::start();
    let client = tests::harness::client(&server, "operator");
    // A member that never runs anything: preferred for about half of the slots.
    let members = lock_scheduler::schema::members_key(lock_scheduler::DEFAULT_GROUP);
    let lapse = (lock_scheduler::chrono::Utc::now().timestamp_millis() + 3_600_000).to_string();
    cmd(&client, &["ZADD", &members, &lapse, "pod-ghost"]).await;
    // (tick, how late the body started, ms).
    let delays: Arc<Mutex<Vec<(i64, i64)>>> = Arc::default();
    let delays_ = delays.clone();
    let job = Job::with_context("late", "* * * * * *", move |ctx| {
        let late = lock_scheduler::chrono::Utc::now() - ctx.slot();
        delays_.lock().expect("delays").push((ctx.tick(), late.num_milliseconds()));
        async {}
    })
    .lock("lock:late");
    let scheduler = Scheduler::builder()
        .client(tests::harness::client(&server, "pod-a"))
        .claim_grace(Duration::from_millis(500))
        .job(job)
        .build()
        .expect("valid");
    let mut reports = scheduler.subscribe();
    let a = scheduler.start().await.expect("a");
    let graced = || delays.lock().expect("delays").iter().filter(|d| d.1 >= 500).count();
    let enough = wait_until(Duration::from_secs(20), || graced() >= 2).await;
    a.shutdown().await;
    let delays = delays.lock().expect("delays").clone();
    assert!(enough, "slots ran after the claim grace: {delays:?}");
    let mut checked = 0;
    while let Ok(report) = reports.try_recv() {
        if report.outcome != lock_scheduler::RunOutcome::Ran {
            continue;
        }
        let Some((_, late)) = delays.iter().find(|d| d.0 == report.tick) else { continue };
        let reported = report.lateness.as_millis() as i64;
        assert!(
            reported >= late - 5,
            "slot {}: reported lateness {reported} ms, its body started {late} ms late",
            report.tick
        );
        if *late >= 500 {
            checked += 1;
        }
    }
    assert!(checked >= 2, "reports of slots run after the grace: {delays:?}");
}

/// A replica of a job every 5 s whose runs take 2 s, recording each body's (tick, attempt,
/// instance).
async fn slow_replica(server: &RedisServer, job: &str, starts: &Starts) -> lock_scheduler::SchedulerHandle {
    let starts = starts.clone();
    let job = Job::with_context(job, "*/5 * * * * *", move |ctx| {
        starts.lock().expect("starts").push((ctx.tick(), ctx.attempt(), ctx.instance().to_owned()));
        async { tokio::time::sleep(Duration::from_secs(2)).await }
    })
    .lock(format!("lock:{job}"));
    Scheduler::builder()
        .client(tests::harness::client(server, "pod-a"))
        .job(job)
        .build()
        .expect("valid")
        .start()
        .await
        .expect("start")
}

/// F1: a backfill of a slot whose own run is still in flight (not yet in the history) does not
/// run it a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_of_a_slot_in_flight_does_not_run_it_again() {
    init_tracing();
    let server = RedisServer::start();
    let client = tests::harness::client(&server, "operator");
    let starts: Starts = Arc::default();
    let a = slow_replica(&server, "bf1", &starts).await;
    assert!(wait_until(Duration::from_secs(10), || !starts_of(&starts).is_empty()).await, "a slot ran");
    let slot = starts_of(&starts)[0].0;
    let at = lock_scheduler::chrono::DateTime::from_timestamp_millis(slot).expect("slot");
    let queued = control::backfill(&client, "bf1", at, at, false).await.expect("backfill");
    assert_eq!(queued.queued, [at], "queued while its run is in flight: {queued:?}");
    // The backfill waits for the lock, then would run; the next slot is 5 s after this one.
    let again =
        wait_until(Duration::from_secs(4), || starts_of(&starts).iter().filter(|s| s.0 == slot).count() > 1)
            .await;
    a.shutdown().await;
    let seen = starts_of(&starts);
    assert!(!again, "the slot {slot} ran once: {seen:?}");
    assert_eq!(seen.iter().filter(|s| s.0 == slot).count(), 1, "{seen:?}");
}

/// F2: a second backfill request of a slot whose backfill run is in flight does not queue it
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_backfill_requests_of_a_slot_run_it_once() {
    init_tracing();
    let server = RedisServer::start();
    let client = tests::harness::client(&server, "operator");
    let starts: Starts = Arc::default();
    let a = slow_replica(&server, "bf2", &starts).await;
    // A slot before the replica started: nobody ran it.
    assert!(wait_until(Duration::from_secs(10), || !starts_of(&starts).is_empty()).await, "a slot ran");
    let first = starts_of(&starts)[0].0;
    let past = first - 5000;
    let at = lock_scheduler::chrono::DateTime::from_timestamp_millis(past).expect("slot");
    let one = control::backfill(&client, "bf2", at, at, false).await.expect("backfill");
    assert_eq!(one.queued, [at], "{one:?}");
    assert!(
        wait_until(Duration::from_secs(10), || starts_of(&starts).iter().any(|s| s.0 == past)).await,
        "the backfill started"
    );
    // Its run is in flight: the history does not show it yet.
    let two = control::backfill(&client, "bf2", at, at, false).await.expect("second backfill");
    assert!(two.queued.is_empty(), "not queued again: {two:?}");
    assert_eq!(two.refused, [at], "{two:?}");
    let again =
        wait_until(Duration::from_secs(4), || starts_of(&starts).iter().filter(|s| s.0 == past).count() > 1)
            .await;
    a.shutdown().await;
    let seen = starts_of(&starts);
    assert!(!again, "the slot {past} ran once: {seen:?}");
}

/// F3: a backfill of a slot whose own claim is still to come (here the next slot, queued with
/// its request before the replica starts, as a buffered slot is handed over at shutdown) claims
/// the slot's tick: its own claim then finds it done, and the body runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_before_the_slots_own_claim_runs_it_once() {
    init_tracing();
    let server = RedisServer::start();
    let client = tests::harness::client(&server, "operator");
    let starts: Starts = Arc::default();
    let starts_ = starts.clone();
    let job = Job::with_context("f3", "*/10 * * * * *", move |ctx| {
        starts_.lock().expect("starts").push((ctx.tick(), ctx.attempt(), ctx.instance().to_owned()));
        async {}
    })
    .lock("lock:f3");
    // The first slot at least 4 s away: its backfill runs well before its own claim.
    let now = lock_scheduler::chrono::Utc::now().timestamp_millis();
    let slot = ((now + 4000) / 10_000 + 1) * 10_000;
    let group = lock_scheduler::DEFAULT_GROUP;
    let (entry, request) = (
        lock_scheduler::schema::retry_member("f3", slot, lock_scheduler::schema::BACKFILL_ATTEMPT),
        lock_scheduler::schema::backfill_request("f3", slot),
    );
    let now = now.to_string();
    cmd(&client, &["ZADD", &lock_scheduler::schema::retries_key(group), &now, &entry]).await;
    cmd(&client, &["ZADD", &lock_scheduler::schema::backfilled_key(group), &now, &request]).await;
    let a = Scheduler::builder()
        .client(tests::harness::client(&server, "pod-a"))
        .job(job)
        .build()
        .expect("valid")
        .start()
        .await
        .expect("a");
    let runs = || starts_of(&starts).into_iter().filter(|s| s.0 == slot).count();
    assert!(wait_until(Duration::from_secs(10), || runs() > 0).await, "the backfill ran");
    // Past the slot's own time (and its claim): a second run would show by then.
    let until = Duration::from_millis(
        (slot + 3000 - lock_scheduler::chrono::Utc::now().timestamp_millis()).max(0) as u64,
    );
    let again = wait_until(until, || runs() > 1).await;
    a.shutdown().await;
    let seen = starts_of(&starts);
    assert!(!again, "the slot {slot} ran once: {seen:?}");
    assert_eq!(runs(), 1, "{seen:?}");
    // The one run was the backfill, before the slot's own claim (else nothing was checked).
    let ran: Vec<_> = history_of(&client, "f3")
        .await
        .into_iter()
        .filter(|e| e.tick == slot && e.outcome == "ran")
        .collect();
    assert_eq!(ran.len(), 1, "one run of {slot} recorded: {ran:?}");
    assert!(ran[0].backfill, "the backfill ran it first: {ran:?}");
}
