//! `lock_scheduler::tokio_cron` against a real redis-server: jobs of plain tokio-cron-scheduler
//! `JobScheduler`s, one per replica, run once per tick across the replicas.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_core::LockClient;
use lock_scheduler::chrono::Utc;
use lock_scheduler::tokio_cron::tokio_cron_scheduler::JobScheduler;
use lock_scheduler::tokio_cron::{InFlight, OncePerTick, once_per_tick};
use tests::harness::{RedisServer, init_tracing, wait_until};

fn client(server: &RedisServer, instance: &str) -> LockClient {
    LockClient::builder()
        .url(server.url())
        .instance_id(instance)
        .command_timeout(Duration::from_secs(2))
        .build()
        .expect("valid client configuration")
}

/// One run as the job saw it.
#[derive(Debug, Clone)]
struct Run {
    instance: String,
    /// Milliseconds from the slot to the job's first poll.
    lateness_ms: i64,
    started: Instant,
    ended: Option<Instant>,
}

type Runs = Arc<Mutex<BTreeMap<i64, Vec<Run>>>>;

fn snapshot(runs: &Runs) -> BTreeMap<i64, Vec<Run>> {
    runs.lock().expect("runs lock").clone()
}

/// Starts one replica: its own `JobScheduler` and its own lock client, with the one-line job
/// (or the builder's, when `hold` is given), recording each run per tick.
async fn replica(
    server: &RedisServer,
    instance: &str,
    key: &str,
    runs: &Runs,
    hold: Duration,
) -> JobScheduler {
    let client = client(server, instance);
    let sched = JobScheduler::new().await.expect("a JobScheduler");
    let runs = runs.clone();
    let job = OncePerTick::new(&client, key, "* * * * * *").job_with_context(move |run| {
        let runs = runs.clone();
        async move {
            let lateness_ms = (Utc::now() - run.slot()).num_milliseconds();
            let index = {
                let mut runs = runs.lock().expect("runs lock");
                let of_tick = runs.entry(run.tick()).or_default();
                of_tick.push(Run {
                    instance: run.instance().to_owned(),
                    lateness_ms,
                    started: Instant::now(),
                    ended: None,
                });
                of_tick.len() - 1
            };
            tokio::time::sleep(hold).await;
            if let Some(r) =
                runs.lock().expect("runs lock").get_mut(&run.tick()).and_then(|v| v.get_mut(index))
            {
                r.ended = Some(Instant::now());
            }
        }
    });
    sched.add(job.expect("a valid job")).await.expect("job added");
    sched
}

async fn start_all(scheds: &mut [JobScheduler]) {
    for sched in scheds.iter_mut() {
        sched.start().await.expect("scheduler starts");
    }
}

async fn shutdown_all(scheds: &mut [JobScheduler]) {
    for sched in scheds.iter_mut() {
        sched.shutdown().await.expect("scheduler stops");
    }
}

/// Every tick from the first to the last observed ran exactly once, on some replica.
fn assert_once_per_tick(runs: &BTreeMap<i64, Vec<Run>>) {
    for (tick, of_tick) in runs {
        assert_eq!(of_tick.len(), 1, "tick {tick} ran more than once: {runs:#?}");
    }
    let ticks: Vec<i64> = runs.keys().copied().collect();
    for pair in ticks.windows(2) {
        assert_eq!(pair[1] - pair[0], 1000, "a tick was skipped by every replica: {ticks:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_on_tokio_cron_scheduler_run_each_tick_once() {
    init_tracing();
    let server = RedisServer::start();
    let runs: Runs = Arc::default();
    let mut scheds = Vec::new();
    for pod in ["pod-1", "pod-2", "pod-3"] {
        scheds.push(replica(&server, pod, "lock:tcs-every-second", &runs, Duration::ZERO).await);
    }
    start_all(&mut scheds).await;
    // Five ticks are seen within a generous deadline (tokio-cron-scheduler polls every 500 ms).
    assert!(
        wait_until(Duration::from_secs(20), || snapshot(&runs).len() >= 5).await,
        "{:#?}",
        snapshot(&runs)
    );
    shutdown_all(&mut scheds).await;
    // Runs fired just before the shutdown finish (they take no time).
    tokio::time::sleep(Duration::from_millis(300)).await;

    let runs = snapshot(&runs);
    assert_once_per_tick(&runs);
    for (tick, of_tick) in &runs {
        let run = &of_tick[0];
        // The slot, not "now": a run starts after its slot, within the polling lateness.
        assert!((0..1000).contains(&run.lateness_ms), "tick {tick}: {run:?}");
    }
    let last = runs.keys().next_back().copied().expect("runs");
    let claimed: i64 = server
        .cli(&["GET", &lock_core::schema::tick_key("lock:tcs-every-second")])
        .trim()
        .parse()
        .expect("a tick");
    assert!(claimed >= last, "{claimed} < {last}");
    // Every replica competed; which one wins a tick is up to timing.
    let winners: std::collections::BTreeSet<&str> =
        runs.values().flat_map(|v| v.iter().map(|r| r.instance.as_str())).collect();
    assert!(winners.iter().all(|w| ["pod-1", "pod-2", "pod-3"].contains(w)), "{winners:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_longer_than_the_period_holds_the_lock_and_runs_never_overlap() {
    init_tracing();
    let server = RedisServer::start();
    let runs: Runs = Arc::default();
    let mut scheds = Vec::new();
    for pod in ["pod-1", "pod-2", "pod-3"] {
        scheds.push(replica(&server, pod, "lock:tcs-slow", &runs, Duration::from_millis(1500)).await);
    }
    start_all(&mut scheds).await;
    assert!(
        wait_until(Duration::from_secs(20), || {
            snapshot(&runs).values().flatten().filter(|r| r.ended.is_some()).count() >= 3
        })
        .await,
        "{:#?}",
        snapshot(&runs)
    );
    shutdown_all(&mut scheds).await;
    // tokio-cron-scheduler's shutdown does not wait for running jobs: wait for them here.
    assert!(
        wait_until(Duration::from_secs(5), || snapshot(&runs).values().flatten().all(|r| r.ended.is_some()))
            .await
    );

    let runs = snapshot(&runs);
    for (tick, of_tick) in &runs {
        assert_eq!(of_tick.len(), 1, "tick {tick} ran more than once: {runs:#?}");
    }
    // Ticks that fall while a run holds the lock are skipped ("held"), never run alongside it.
    let mut spans: Vec<(Instant, Instant)> =
        runs.values().flatten().map(|r| (r.started, r.ended.expect("ended"))).collect();
    spans.sort();
    for pair in spans.windows(2) {
        assert!(pair[1].0 >= pair[0].1, "two runs overlapped: {runs:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_can_wait_for_running_jobs_through_in_flight() {
    init_tracing();
    let server = RedisServer::start();
    let client = client(&server, "pod-1");
    let in_flight = InFlight::new();
    let (starts, ends) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let job = {
        let (starts, ends) = (starts.clone(), ends.clone());
        OncePerTick::new(&client, "lock:tcs-drain", "* * * * * *").in_flight(&in_flight).job(move || {
            let (starts, ends) = (starts.clone(), ends.clone());
            async move {
                starts.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(3)).await;
                ends.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let mut sched = JobScheduler::new().await.expect("a JobScheduler");
    sched.add(job.expect("a valid job")).await.expect("job added");
    sched.start().await.expect("scheduler starts");
    assert!(wait_until(Duration::from_secs(10), || starts.load(Ordering::SeqCst) > 0).await);

    sched.shutdown().await.expect("scheduler stops");
    // tokio-cron-scheduler's shutdown returned with the run still going; the count knows.
    assert_eq!(ends.load(Ordering::SeqCst), 0);
    assert!(in_flight.running() >= 1);
    assert!(in_flight.wait_idle(Duration::from_secs(10)).await, "{} still running", in_flight.running());
    assert_eq!(in_flight.running(), 0);
    assert_eq!(starts.load(Ordering::SeqCst), 1);
    assert_eq!(ends.load(Ordering::SeqCst), 1);
    // The run's lock was released when it ended.
    assert_eq!(server.cli(&["EXISTS", "lock:tcs-drain"]).trim(), "0");
}

#[tokio::test]
async fn the_one_liner_adds_to_an_existing_job_scheduler_and_bad_input_is_a_typed_error() {
    let client = LockClient::from_url("redis://127.0.0.1:1/").expect("lazy client");
    let sched = JobScheduler::new().await.expect("a JobScheduler");
    let id = sched
        .add(
            once_per_tick(&client, "lock:report", "0 0 2 * * *", || async { Ok::<_, std::io::Error>(()) })
                .expect("valid"),
        )
        .await
        .expect("added");
    let mut sched = sched;
    assert!(sched.next_tick_for_job(id).await.expect("next tick").is_some());

    let Err(err) = once_per_tick(&client, "lock:report", "0 61 2 * * *", || async {}) else {
        panic!("an invalid minute was accepted")
    };
    let chain = format!("{:#}", anyhow::Error::from(err));
    assert!(
        chain.starts_with("job on `lock:report`: invalid schedule: invalid cron expression `0 61 2 * * *`"),
        "{chain}"
    );
}
