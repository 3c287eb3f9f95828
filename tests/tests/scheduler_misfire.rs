//! Misfires decided once for the whole cluster, against a real redis-server: every replica
//! stopped for a few ticks then started again, and Redis frozen for a few ticks.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_scheduler::chrono::Utc;
use lock_scheduler::{CatchUp, Job, RunContext, Scheduler, SchedulerHandle};
use tests::harness::{RedisServer, client, init_tracing, wait_until};

/// Every run: (job, tick, instance).
type Runs = Arc<Mutex<Vec<(String, i64, String)>>>;

fn job(name: &str, catch_up: CatchUp, runs: &Runs) -> Job {
    let runs = runs.clone();
    Job::with_context(name.to_owned(), "* * * * * *", move |ctx: RunContext| {
        runs.lock().expect("runs").push((ctx.job().to_owned(), ctx.tick(), ctx.instance().to_owned()));
        std::future::ready(())
    })
    .lock(format!("lock:{name}"))
    .catch_up(catch_up)
}

const JOBS: [(&str, CatchUp); 3] = [
    ("each", CatchUp::Each(10)),
    ("latest", CatchUp::Latest(Duration::from_secs(60))),
    ("skip", CatchUp::Never),
];

async fn replica(server: &RedisServer, instance: &str, runs: &Runs) -> SchedulerHandle {
    let mut builder = Scheduler::builder()
        .client(client(server, instance))
        .group("misfire")
        .claim_grace(Duration::from_millis(200))
        .shutdown_grace(Duration::from_secs(2));
    for (name, catch_up) in JOBS {
        builder = builder.job(job(name, catch_up, runs));
    }
    builder.build().expect("valid scheduler").start().await.expect("starts")
}

/// Per job: tick -> how many runs.
fn per_tick(runs: &Runs) -> BTreeMap<String, BTreeMap<i64, usize>> {
    let mut out: BTreeMap<String, BTreeMap<i64, usize>> = BTreeMap::new();
    for (job, tick, _) in runs.lock().expect("runs").iter() {
        *out.entry(job.clone()).or_default().entry(*tick).or_default() += 1;
    }
    out
}

fn last_tick(runs: &Runs, job: &str) -> Option<i64> {
    runs.lock().expect("runs").iter().filter(|r| r.0 == job).map(|r| r.1).max()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_coming_back_together_deal_with_the_missed_slots_once_per_policy() {
    init_tracing();
    let server = RedisServer::start();
    let runs: Runs = Arc::default();
    let first = [replica(&server, "a1", &runs).await, replica(&server, "a2", &runs).await];
    let all_ran = |runs: &Runs| JOBS.iter().all(|(name, _)| last_tick(runs, name).is_some());
    assert!(wait_until(Duration::from_secs(5), || all_ran(&runs)).await, "every job ran");
    for handle in first {
        handle.shutdown().await;
    }
    let before: BTreeMap<&str, i64> =
        JOBS.iter().map(|(name, _)| (*name, last_tick(&runs, name).expect("ran"))).collect();

    // Every replica down for about 3.5 s (the outage is the scenario, not a synchronisation),
    // then two come back in the same second (so they find the same missed slots).
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(
        wait_until(Duration::from_secs(2), || (100..400).contains(&(Utc::now().timestamp_millis() % 1000)))
            .await
    );
    let restart = Utc::now().timestamp_millis();
    let second = [replica(&server, "b1", &runs).await, replica(&server, "b2", &runs).await];
    let settled =
        |runs: &Runs| JOBS.iter().all(|(name, _)| last_tick(runs, name).is_some_and(|t| t >= restart + 2000));
    assert!(wait_until(Duration::from_secs(10), || settled(&runs)).await, "the jobs run again");
    // Catch-up runs of `each` go one at a time: wait for them too.
    let each_done = || {
        let ticks = per_tick(&runs).remove("each").unwrap_or_default();
        let (lo, hi) = (ticks.keys().next().copied().unwrap_or(0), ticks.keys().last().copied().unwrap_or(0));
        (lo..=hi).step_by(1000).all(|t| ticks.contains_key(&t))
    };
    assert!(
        wait_until(Duration::from_secs(10), each_done).await,
        "every missed slot of `each` ran: {:?}",
        per_tick(&runs)
    );
    let history = [
        second[0].history("latest", 50).await.expect("history"),
        second[0].history("skip", 50).await.expect("history"),
    ];
    for handle in second {
        handle.shutdown().await;
    }

    let ticks = per_tick(&runs);
    for (name, _) in JOBS {
        let doubles: Vec<_> = ticks[name].iter().filter(|(_, n)| **n > 1).collect();
        assert!(doubles.is_empty(), "{name}: ticks run more than once: {doubles:?}");
    }
    // The slots of the outage: (last run before it, restart].
    let gap = |name: &str| -> Vec<i64> { (before[name] + 1000..=restart).step_by(1000).collect() };
    let ran_in_gap = |name: &str| gap(name).iter().filter(|t| ticks[name].contains_key(t)).count();
    assert!(gap("each").len() >= 3, "the outage spans slots: {:?}", gap("each"));
    assert_eq!(
        ran_in_gap("each"),
        gap("each").len(),
        "each: every missed slot ran once: {:?}",
        ticks["each"]
    );
    // Latest and skip: the most recent slot at the restart runs (late within 60 s, or found
    // within a second of its time), the older ones are missed, recorded once by one replica.
    for (name, history) in [("latest", &history[0]), ("skip", &history[1])] {
        assert_eq!(ran_in_gap(name), 1, "{name}: one slot of the outage ran: {:?}", ticks[name]);
        let missed: Vec<_> = history.iter().filter(|h| h.outcome == "missed").collect();
        assert_eq!(missed.len(), 1, "{name}: the missed slots are recorded once: {history:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_frozen_for_a_few_ticks_never_makes_a_slot_run_twice_and_the_jobs_resume() {
    init_tracing();
    let server = RedisServer::start();
    let runs: Runs = Arc::default();
    let replicas = [replica(&server, "r1", &runs).await, replica(&server, "r2", &runs).await];
    let ran = |runs: &Runs| JOBS.iter().all(|(name, _)| last_tick(runs, name).is_some());
    assert!(wait_until(Duration::from_secs(5), || ran(&runs)).await, "every job ran");

    server.pause();
    // Frozen for 3 ticks (the outage is the scenario): every run fails to reach Redis.
    tokio::time::sleep(Duration::from_secs(3)).await;
    server.resume();
    let resumed = Utc::now().timestamp_millis();
    let again =
        |runs: &Runs| JOBS.iter().all(|(name, _)| last_tick(runs, name).is_some_and(|t| t >= resumed + 1000));
    assert!(
        wait_until(Duration::from_secs(12), || again(&runs)).await,
        "every job runs again: {:?}",
        per_tick(&runs)
    );
    for handle in replicas {
        handle.shutdown().await;
    }
    for (name, ticks) in per_tick(&runs) {
        let doubles: Vec<_> = ticks.iter().filter(|(_, n)| **n > 1).collect();
        assert!(doubles.is_empty(), "{name}: ticks run more than once: {doubles:?}");
    }
}
