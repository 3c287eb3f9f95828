//! Overlap policies against a real redis-server, with two replicas and a body longer than the
//! period: `Allow` runs every slot once, alongside each other; `BufferOne` never overlaps and
//! runs the latest slot that came meanwhile right after each run ends.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::LockClient;
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
