//! Jitter against a real redis-server, with two replicas: each slot fires a delay within the
//! job's window after its time, the same delay on both replicas, and still runs once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_scheduler::{Job, RunOutcome, RunReport, Scheduler};
use tests::harness::{RedisServer, init_tracing, wait_until};

const WINDOW: Duration = Duration::from_millis(1500);
/// How late after its slot plus its jitter a slot may fire on a loaded machine.
const LATE: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_slot_fires_within_the_window_the_same_delay_on_every_replica_and_runs_once() {
    init_tracing();
    let server = RedisServer::start();
    let reports: Arc<Mutex<Vec<RunReport>>> = Arc::default();
    let mut handles = Vec::new();
    for pod in ["pod-a", "pod-b"] {
        let job = Job::new("jittered", "*/2 * * * * *", || async {}).lock("lock:jittered").jitter(WINDOW);
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
    // Slots reported by both replicas.
    let by_slot = || {
        let mut by_slot: BTreeMap<i64, Vec<RunReport>> = BTreeMap::new();
        for report in reports.lock().expect("reports").iter() {
            by_slot.entry(report.tick).or_default().push(report.clone());
        }
        by_slot.retain(|_, reports| reports.len() == 2);
        by_slot
    };
    assert!(
        wait_until(Duration::from_secs(20), || by_slot().len() >= 5).await,
        "five slots on both replicas"
    );
    for handle in handles {
        handle.shutdown().await;
    }
    let by_slot = by_slot();
    let mut delays = Vec::new();
    for (tick, reports) in &by_slot {
        let (a, b) = (&reports[0], &reports[1]);
        assert_ne!(a.instance, b.instance);
        assert_eq!(a.jitter, b.jitter, "slot {tick}: the same delay on both replicas: {reports:#?}");
        assert!(a.jitter < WINDOW, "slot {tick}: within the window: {:?}", a.jitter);
        for r in reports {
            assert!(
                r.lateness >= r.jitter && r.lateness <= r.jitter + LATE,
                "slot {tick} fired {:?} after its time on {}, its jitter being {:?}",
                r.lateness,
                r.instance,
                r.jitter
            );
        }
        let ran: Vec<&str> =
            reports.iter().filter(|r| r.outcome == RunOutcome::Ran).map(|r| r.instance.as_str()).collect();
        assert_eq!(ran.len(), 1, "slot {tick} ran once: {reports:#?}");
        delays.push((a.jitter.as_millis(), a.lateness.as_millis(), b.lateness.as_millis()));
    }
    println!("jitter (ms), fired after (ms) on each replica, per slot: {delays:?}");
    let distinct: std::collections::BTreeSet<_> = delays.iter().map(|d| d.0).collect();
    assert!(distinct.len() >= 3, "the delay varies from slot to slot: {delays:?}");
}
