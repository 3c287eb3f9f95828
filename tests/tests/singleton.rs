//! `#[singleton]` against a real redis-server: three schedulers (each through its own fault
//! proxy) declare the same singleton; its body runs on exactly one of them at a time, moves to
//! another replica when the one running it shuts down (finishing within the grace) and when it
//! is cut off from Redis (dropped before another replica is elected), with the term growing
//! each time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::LockClient;
use lock_scheduler::{
    Scheduler, SchedulerError, SchedulerHandle, Singleton, SingletonContext, State, Term, singleton,
};
use tests::harness::{FaultProxy, RedisServer, init_tracing, wait_until};

/// What the singleton's bodies record: how many run now, the most that ever ran at once, and
/// each start (instance, term).
#[derive(Clone, Default)]
struct Probe {
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    starts: Arc<Mutex<Vec<(String, u64)>>>,
}

/// Counts a body as running until it is dropped (returned or cancelled).
struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Probe {
    fn enter(&self, instance: &str, term: u64) -> Running {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        self.starts.lock().expect("starts").push((instance.to_owned(), term));
        Running(self.running.clone())
    }

    fn starts(&self) -> Vec<(String, u64)> {
        self.starts.lock().expect("starts").clone()
    }
}

#[singleton(name = "orders-feed", restart_delay = "100ms")]
async fn orders_feed(State(probe): State<Probe>, Term(term): Term, context: SingletonContext) {
    assert_eq!(context.term(), term);
    let _running = probe.enter(context.instance(), term);
    // A consumer loop would poll its feed here; it returns when asked to stop.
    context.stopping().await;
}

async fn replica(proxy: &FaultProxy, instance: &str, probe: &Probe) -> SchedulerHandle {
    let client = LockClient::builder()
        .url(proxy.url())
        .instance_id(instance)
        .liveness_ttl(Duration::from_secs(2))
        .command_timeout(Duration::from_millis(500))
        .build()
        .expect("client");
    Scheduler::builder()
        .client(client)
        .state(probe.clone())
        .singletons()
        .shutdown_grace(Duration::from_secs(3))
        .build()
        .expect("built")
        .start()
        .await
        .expect("started")
}

/// Waits until the body has been started `n` times and runs now; returns the last start.
async fn started(probe: &Probe, n: usize) -> (String, u64) {
    let ok = wait_until(Duration::from_secs(10), || {
        probe.starts().len() >= n && probe.running.load(Ordering::SeqCst) == 1
    })
    .await;
    assert!(ok, "start {n} of the singleton: {:?}", probe.starts());
    probe.starts().last().cloned().expect("a start")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_runs_on_one_replica_at_a_time_and_moves_on_shutdown_and_partition() {
    init_tracing();
    let server = RedisServer::start();
    let probe = Probe::default();
    let proxies: Vec<FaultProxy> = (0..3).map(|_| FaultProxy::start(server.port()).expect("proxy")).collect();
    let mut handles = Vec::new();
    for (i, proxy) in proxies.iter().enumerate() {
        handles.push(Some(replica(proxy, &format!("replica-{i}"), &probe).await));
    }
    let index = |instance: &str| instance.trim_start_matches("replica-").parse::<usize>().expect("an index");

    // One replica runs it.
    let (first, term) = started(&probe, 1).await;
    // Given time to go wrong, it stays on one replica.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(probe.starts().len(), 1, "not restarted while its leader is healthy: {:?}", probe.starts());

    // A graceful shutdown of that replica: the body is asked to stop, finishes within the
    // grace, and another replica starts it at once.
    let stopping = handles[index(&first)].take().expect("running");
    let stopped_at = tokio::time::Instant::now();
    let report = stopping.shutdown().await;
    assert_eq!(report.finished, ["orders-feed"], "{report:?}");
    let (second, second_term) = started(&probe, 2).await;
    let moved_in = stopped_at.elapsed();
    assert_ne!(second, first);
    assert!(second_term > term);
    assert!(moved_in < Duration::from_secs(2), "moved at the shutdown, not after a lease: {moved_in:?}");

    // The replica running it is cut off from Redis: the body is dropped there before the third
    // replica is elected (at most one body at any time), within the liveness TTL + 1 s.
    proxies[index(&second)].partition();
    let cut_at = tokio::time::Instant::now();
    let (third, third_term) = started(&probe, 3).await;
    let took = cut_at.elapsed();
    assert!(third != second && third != first, "{:?}", probe.starts());
    assert!(third_term > second_term);
    eprintln!("singleton: shutdown → restarted elsewhere in {moved_in:?}; partition → in {took:?}");
    assert!(took <= Duration::from_secs(3) + Duration::from_millis(500), "{took:?}");
    assert_eq!(probe.most.load(Ordering::SeqCst), 1, "never two bodies at once: {:?}", probe.starts());

    proxies[index(&second)].heal();
    for handle in handles.into_iter().flatten() {
        handle.shutdown().await;
    }
    assert_eq!(probe.running.load(Ordering::SeqCst), 0, "every body stopped with its scheduler");
    assert_eq!(probe.most.load(Ordering::SeqCst), 1);
}

/// A singleton taking state the scheduler was not given, or with a bad name or election, is an
/// error from `build`, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_singletons_are_refused_at_build() {
    init_tracing();
    let server = RedisServer::start();
    let client = LockClient::from_url(&server.url()).expect("client");
    let missing = Scheduler::builder().client(client.clone()).singleton(orders_feed::singleton()).build();
    assert!(
        matches!(&missing, Err(SchedulerError::MissingState { job, .. }) if job == "orders-feed"),
        "{:?}",
        missing.err()
    );
    let bad_name =
        Scheduler::builder().client(client.clone()).singleton(Singleton::new("", |_| async {})).build();
    assert!(matches!(bad_name, Err(SchedulerError::InvalidJob { .. })), "{:?}", bad_name.err());
    let twice = Scheduler::builder()
        .client(client.clone())
        .singleton(Singleton::new("a", |_| async {}))
        .singleton(Singleton::new("a", |_| async {}))
        .build();
    assert!(matches!(twice, Err(SchedulerError::DuplicateJob { .. })), "{:?}", twice.err());
    let bad_key =
        Scheduler::builder().client(client).singleton(Singleton::new("b", |_| async {}).election("")).build();
    assert!(matches!(bad_key, Err(SchedulerError::InvalidLock { .. })), "{:?}", bad_key.err());
}
