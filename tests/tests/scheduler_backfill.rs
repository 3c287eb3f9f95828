//! Backfill against a real redis-server, with two replicas: ten past slots queued run once
//! each, as if on time (the run's slot is the scheduled time), recorded as backfill; asked
//! again, every slot is refused as already run, unless forced.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_scheduler::chrono::{DurationRound, TimeDelta, Utc};
use lock_scheduler::control::{self, ControlError};
use lock_scheduler::{Job, Scheduler};
use tests::harness::{RedisServer, init_tracing, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_past_slots_run_once_each_and_again_run_none() {
    init_tracing();
    let server = RedisServer::start();
    let client = tests::harness::client(&server, "operator");
    // (instance, slot) of each run.
    let runs: Arc<Mutex<Vec<(String, i64)>>> = Arc::default();
    let mut handles = Vec::new();
    for pod in ["pod-a", "pod-b"] {
        let seen = runs.clone();
        // Starting in a day: none of its own slots runs during the test, only the backfilled ones.
        let job = Job::with_context("backfilled", "* * * * * *", move |ctx| {
            seen.lock().expect("runs").push((ctx.instance().to_owned(), ctx.tick()));
            async {}
        })
        .lock("lock:backfilled")
        .start_at(Utc::now() + TimeDelta::days(1));
        let scheduler = Scheduler::builder()
            .client(tests::harness::client(&server, pod))
            .job(job)
            .build()
            .expect("valid");
        handles.push(scheduler.start().await.expect("starts"));
    }
    // The replicas register the job within a poll.
    let now = Utc::now().duration_trunc(TimeDelta::seconds(1)).expect("trunc");
    let (from, to) = (now - TimeDelta::seconds(30), now - TimeDelta::seconds(21));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let first = loop {
        match control::backfill(&client, "backfilled", from, to, false).await {
            Ok(done) => break done,
            Err(ControlError::UnknownJob { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("backfill: {e}"),
        }
    };
    let expected: Vec<i64> = (0..10).map(|s| (from + TimeDelta::seconds(s)).timestamp_millis()).collect();
    assert_eq!(first.queued.iter().map(|t| t.timestamp_millis()).collect::<Vec<_>>(), expected);
    assert!(first.refused.is_empty());
    assert!(
        wait_until(Duration::from_secs(20), || runs.lock().expect("runs").len() >= 10).await,
        "ten runs: {:?}",
        runs.lock().expect("runs")
    );
    // Each slot ran once, with its scheduled time as its slot; recorded as backfill.
    let history_ready = async || {
        let history = control::history(&client, "backfilled", 100).await.expect("history");
        history.into_iter().filter(|e| e.backfill && e.outcome == "ran").count()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while history_ready().await < 10 {
        assert!(tokio::time::Instant::now() < deadline, "ten backfill entries in the history");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut per_slot: BTreeMap<i64, usize> = BTreeMap::new();
    for (_, slot) in runs.lock().expect("runs").iter() {
        *per_slot.entry(*slot).or_default() += 1;
    }
    assert_eq!(per_slot.keys().copied().collect::<Vec<_>>(), expected, "the ten slots ran");
    assert!(per_slot.values().all(|n| *n == 1), "each once across the replicas: {per_slot:?}");
    let instances: std::collections::BTreeSet<String> =
        runs.lock().expect("runs").iter().map(|(i, _)| i.clone()).collect();
    println!("backfill: 10 slots, each once, run by {instances:?}");
    // Again: all ten already ran.
    let again = control::backfill(&client, "backfilled", from, to, false).await.expect("backfill again");
    assert!(again.queued.is_empty(), "{again:?}");
    assert_eq!(again.refused.len(), 10);
    // A range in the future is refused with a reason.
    let future = control::backfill(&client, "backfilled", now, now + TimeDelta::hours(1), false).await;
    assert!(matches!(future, Err(ControlError::InvalidBackfill { .. })), "{future:?}");
    for handle in handles {
        handle.shutdown().await;
    }
    assert_eq!(runs.lock().expect("runs").len(), 10, "nothing ran again");
}
