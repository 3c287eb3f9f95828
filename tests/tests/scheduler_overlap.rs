//! Overlap policies against a real redis-server, with two replicas and a body longer than the
//! period: `Allow` runs every slot once, alongside each other; `BufferOne` never overlaps and
//! runs the latest slot that came meanwhile right after each run ends; `Replace` (three
//! replicas) stops the running run at each slot and runs the slot once it has stopped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{LockClient, LossReason};
use lock_scheduler::chrono::Utc;
use lock_scheduler::control;
use lock_scheduler::{Job, Overlap, RunOutcome, RunReport, Scheduler, SchedulerError, SchedulerHandle};
use tests::harness::{RedisServer, init_tracing, wait_until};

/// (instance, tick, start wall ms, end wall ms) of each run.
type Runs = Arc<Mutex<Vec<(String, i64, i64, Option<i64>)>>>;

/// The body: 2.5 s, on a 1 s schedule.
const BODY: Duration = Duration::from_millis(2500);

fn replica(client: LockClient, name: &str, overlap: Overlap, runs: Runs) -> Scheduler {
    let job = Job::with_context(name, "* * * * * *", move |ctx| {
        let runs = runs.clone();
        async move {
            let start = Utc::now().timestamp_millis();
            let i = {
                let mut runs = runs.lock().expect("runs");
                runs.push((ctx.instance().to_owned(), ctx.tick(), start, None));
                runs.len() - 1
            };
            tokio::time::sleep(BODY).await;
            runs.lock().expect("runs")[i].3 = Some(Utc::now().timestamp_millis());
        }
    })
    .lock(format!("lock:{name}"))
    .overlap(overlap);
    Scheduler::builder().client(client).job(job).build().expect("valid")
}

async fn two_replicas(
    server: &RedisServer,
    name: &str,
    overlap: Overlap,
    runs: &Runs,
) -> (Vec<SchedulerHandle>, Arc<Mutex<Vec<RunReport>>>) {
    let reports: Arc<Mutex<Vec<RunReport>>> = Arc::default();
    let mut handles = Vec::new();
    for pod in ["pod-a", "pod-b"] {
        let scheduler = replica(tests::harness::client(server, pod), name, overlap, runs.clone());
        let mut rx = scheduler.subscribe();
        let sink = reports.clone();
        tokio::spawn(async move {
            while let Ok(report) = rx.recv().await {
                sink.lock().expect("reports").push(report);
            }
        });
        handles.push(scheduler.start().await.expect("starts"));
    }
    (handles, reports)
}

fn finished(runs: &Runs) -> Vec<(String, i64, i64, i64)> {
    let mut done: Vec<_> = runs
        .lock()
        .expect("runs")
        .iter()
        .filter_map(|(i, t, s, e)| e.map(|e| (i.clone(), *t, *s, e)))
        .collect();
    done.sort_by_key(|r| r.2);
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_runs_every_slot_once_alongside_the_previous_runs() {
    init_tracing();
    let server = RedisServer::start();
    let runs: Runs = Arc::default();
    let (handles, _) = two_replicas(&server, "allow-job", Overlap::Allow, &runs).await;
    assert!(wait_until(Duration::from_secs(20), || finished(&runs).len() >= 6).await, "six runs finished");
    for handle in handles {
        handle.shutdown().await;
    }
    let runs = finished(&runs);
    let ticks: Vec<i64> = runs.iter().map(|r| r.1).collect();
    let mut unique = ticks.clone();
    unique.dedup();
    assert_eq!(ticks, unique, "each slot ran once across the replicas: {runs:?}");
    // No slot between the first and the last was left out.
    for pair in ticks.windows(2) {
        assert_eq!(pair[1] - pair[0], 1000, "consecutive slots: {runs:?}");
    }
    // 2.5 s bodies every second: at least two at a time.
    let overlapping = runs.windows(2).filter(|w| w[1].2 < w[0].3).count();
    println!(
        "allow: {} slots, each once, {overlapping} started while the previous ran, on {:?}",
        runs.len(),
        runs.iter().map(|r| r.0.as_str()).collect::<Vec<_>>()
    );
    assert!(overlapping >= runs.len() - 2, "runs overlapped: {runs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffer_one_runs_the_latest_slot_right_after_each_run_never_alongside() {
    init_tracing();
    let server = RedisServer::start();
    let client = tests::harness::client(&server, "operator");
    let runs: Runs = Arc::default();
    let (handles, reports) = two_replicas(&server, "buffer-job", Overlap::BufferOne, &runs).await;
    assert!(wait_until(Duration::from_secs(30), || finished(&runs).len() >= 4).await, "four runs finished");
    for handle in handles {
        handle.shutdown().await;
    }
    let runs = finished(&runs);
    for pair in runs.windows(2) {
        let (prev, next) = (&pair[0], &pair[1]);
        assert!(next.1 > prev.1, "later slots only: {runs:?}");
        assert!(next.2 >= prev.3, "never alongside: {runs:?}");
        // Right after: the buffered slot starts as soon as the run before it ended.
        let gap = next.2 - prev.3;
        println!("buffer-one: slot {} started {gap} ms after slot {} ended, on {}", next.1, prev.1, next.0);
        assert!(gap < 1000, "slot {} started {gap} ms after the previous run ended: {runs:?}", next.1);
        // The slots that came meanwhile were buffered, the latest one kept: one of the last.
        assert!(next.1 >= prev.3 - 2000, "the latest buffered slot ran: {runs:?}");
    }
    let buffered =
        reports.lock().expect("reports").iter().filter(|r| r.outcome == RunOutcome::Buffered).count();
    assert!(buffered >= runs.len() - 1, "buffered slots reported: {buffered}");
    let history = control::history(&client, "buffer-job", 100).await.expect("history");
    let labels: Vec<&str> = history.iter().map(|e| e.outcome.as_str()).collect();
    assert!(labels.contains(&"buffered") && labels.contains(&"ran"), "{labels:?}");
    let buffered_ticks: Vec<i64> =
        history.iter().filter(|e| e.outcome == "buffered").map(|e| e.tick).collect();
    let mut unique = buffered_ticks.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), buffered_ticks.len(), "each buffered slot recorded once: {buffered_ticks:?}");
}

/// One run of a `Replace` job: (instance, tick, start ms, end ms, loss its body saw).
type ReplaceRuns = Arc<Mutex<Vec<(String, i64, i64, Option<i64>, Option<LossReason>)>>>;

/// Records when a run ended, however it ended (returned, or dropped when cancelled).
struct EndOnDrop(ReplaceRuns, usize);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.0.lock().expect("runs")[self.1].3 = Some(Utc::now().timestamp_millis());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_stops_the_running_run_at_each_slot_one_run_at_a_time_across_replicas() {
    init_tracing();
    let server = RedisServer::start();
    let operator = tests::harness::client(&server, "operator");
    let runs: ReplaceRuns = Arc::default();
    let reports: Arc<Mutex<Vec<RunReport>>> = Arc::default();
    let mut handles = Vec::new();
    for pod in ["pod-a", "pod-b", "pod-c"] {
        let seen = runs.clone();
        // A body four times the period: each slot finds the previous run going on.
        let job = Job::with_context("replace-job", "*/2 * * * * *", move |ctx| {
            let runs = seen.clone();
            async move {
                let i = {
                    let mut all = runs.lock().expect("runs");
                    all.push((
                        ctx.instance().to_owned(),
                        ctx.tick(),
                        Utc::now().timestamp_millis(),
                        None,
                        None,
                    ));
                    all.len() - 1
                };
                let _end = EndOnDrop(runs.clone(), i);
                let lock = lock_core::current().expect("the body runs inside the job's lock");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(8)) => {}
                    // Told as for a lost lock.
                    reason = lock.lost() => runs.lock().expect("runs")[i].4 = Some(reason),
                }
            }
        })
        .lock("lock:replace-job")
        .overlap(Overlap::Replace);
        let scheduler = Scheduler::builder()
            .client(tests::harness::client(&server, pod))
            .job(job)
            .build()
            .expect("valid");
        let mut rx = scheduler.subscribe();
        let sink = reports.clone();
        tokio::spawn(async move {
            while let Ok(report) = rx.recv().await {
                sink.lock().expect("reports").push(report);
            }
        });
        handles.push(scheduler.start().await.expect("starts"));
    }
    let replaced = |runs: &ReplaceRuns| runs.lock().expect("runs").iter().filter(|r| r.4.is_some()).count();
    assert!(wait_until(Duration::from_secs(60), || replaced(&runs) >= 5).await, "five runs replaced");
    // One after the other: a replica shutting down still reads the requests to stop its run,
    // so a later slot on a replica still up replaces it as usual.
    for handle in handles {
        handle.shutdown().await;
    }
    let mut runs = runs.lock().expect("runs").clone();
    runs.sort_by_key(|r| r.2);
    let ticks: Vec<i64> = runs.iter().map(|r| r.1).collect();
    assert!(ticks.windows(2).all(|w| w[1] > w[0]), "each slot ran at most once, in order: {runs:?}");
    let mut lags = Vec::new();
    for pair in runs.windows(2) {
        let (prev, next) = (&pair[0], &pair[1]);
        let prev_end = prev.3.expect("a run followed by another ended");
        assert!(next.2 >= prev_end, "one run at a time across the replicas: {runs:?}");
        // Every run followed by another was stopped by it, and its body was told why.
        assert_eq!(prev.4, Some(LossReason::Revoked), "the replaced body saw its lock revoked: {runs:?}");
        lags.push(next.2 - next.1);
    }
    let instances: std::collections::BTreeSet<&str> = runs.iter().map(|r| r.0.as_str()).collect();
    println!(
        "replace: {} runs on {instances:?}, slot to start (ms): {lags:?}, max {:?}",
        runs.len(),
        lags.iter().max()
    );
    // The running replica sees the request within its 500 ms poll (at once on the same one),
    // then the release hands the lock over: well under a second, bounded here with room for a
    // loaded machine.
    assert!(lags.iter().all(|lag| *lag < 3000), "slot to start bounded: {lags:?}");
    let expected: Vec<i64> = runs.iter().filter(|r| r.4 == Some(LossReason::Revoked)).map(|r| r.1).collect();
    let reported =
        || reports.lock().expect("reports").iter().filter(|r| r.outcome == RunOutcome::Replaced).count();
    assert!(
        wait_until(Duration::from_secs(5), || reported() == expected.len()).await,
        "each replaced run reported: {} of {}",
        reported(),
        expected.len()
    );
    let history = control::history(&operator, "replace-job", 100).await.expect("history");
    let mut replaced_ticks: Vec<i64> =
        history.iter().filter(|e| e.outcome == "replaced").map(|e| e.tick).collect();
    replaced_ticks.sort_unstable();
    assert_eq!(replaced_ticks, expected, "each replaced run recorded once, as replaced");
    let requests: i64 = server
        .cli(&["PTTL", &lock_scheduler::schema::replace_key(lock_scheduler::DEFAULT_GROUP)])
        .parse()
        .expect("PTTL");
    assert!((1..=60_000).contains(&requests), "the replace requests expire within a minute: {requests}");
    for key in server.cli(&["KEYS", "*"]).lines().filter(|k| !k.is_empty()) {
        let ttl: i64 = server.cli(&["PTTL", key]).parse().expect("a PTTL");
        assert!(ttl > 0 || ttl == -2, "{key} has no expiry (PTTL {ttl})");
    }
}

#[test]
fn an_overlap_policy_without_the_jobs_lock_is_a_typed_error() {
    let job = Job::new("no-lock", "* * * * * *", || async {}).overlap(Overlap::Allow);
    let err = Scheduler::builder()
        .client(LockClient::builder().url("redis://127.0.0.1:1").build().expect("client"))
        .job(job)
        .build()
        .expect_err("refused");
    assert!(matches!(&err, SchedulerError::InvalidJob { job, .. } if job == "no-lock"), "{err}");
    assert!(err.to_string().contains("call `.lock(key)`"), "{err}");
}
