//! The console bounded and harmless (issue 50, points 2 and 3): embedded in a replica and
//! loaded with its heaviest requests, it costs the replica no lock, no liveness lease and no
//! job start lag (it reads through a client of its own, a few requests at a time); behind a
//! Redis that answers each reply 5 ms late, the jobs page still shows every job (their reads are
//! pipelined).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_console::Console;
use lock_core::{LockClient, LockOptions};
use lock_scheduler::{Job, Scheduler};
use tests::harness::{Direction, Fault, FaultProxy, RedisServer, client};
use tests::http;

const HISTORY: &str = include_str!("../../bench/src/lua/consolebench_history.lua");

/// `jobs` job histories of `runs` entries (one in ten failed), indexed, as replicas write them.
fn fill_histories(server: &RedisServer, jobs: usize, runs: usize) {
    let hour = lock_scheduler::schema::failure_hour(lock_scheduler::chrono::Utc::now().timestamp_millis())
        .to_string();
    let score = lock_scheduler::schema::index_score(Duration::from_secs(86_400)).to_string();
    for j in 0..jobs {
        let name = format!("job-{j}");
        let history = lock_scheduler::history_key(&name).expect("a job name");
        let failures = lock_scheduler::schema::failures_key(&name).expect("a job name");
        let (runs, failed) = (runs.to_string(), (runs / 10).to_string());
        server.cli(&[
            "EVAL",
            HISTORY,
            "3",
            &history,
            &failures,
            lock_scheduler::schema::job_index_key(),
            &runs,
            &failed,
            &hour,
            &score,
            &name,
        ]);
    }
}

fn p99(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    let i = ((samples.len() as f64) * 0.99).ceil() as usize;
    samples.get(i.saturating_sub(1)).copied().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_redis_still_shows_every_job() {
    let server = RedisServer::start();
    fill_histories(&server, 100, 20);
    let proxy = FaultProxy::start(server.port()).expect("a proxy");
    let console_client =
        LockClient::builder().url(proxy.url()).instance_id("console").build().expect("a client");
    let console = Console::new(console_client);
    let addr = http::serve(console.router()).await;
    proxy.set(Direction::ToClient, Fault::Delay(Duration::from_millis(5)));
    let started = Instant::now();
    let jobs = http::get(addr, "/api/jobs").await;
    let took = started.elapsed();
    assert_eq!(jobs.status, 200, "{}", jobs.body);
    let json = jobs.json();
    let names: Vec<&str> =
        json["jobs"].as_array().into_iter().flatten().filter_map(|j| j["name"].as_str()).collect();
    assert_eq!(names.len(), 100, "every job behind a 5 ms-per-reply Redis: {json}");
    assert_eq!(json["partial"], false, "{json}");
    assert!(json["jobs"].as_array().into_iter().flatten().all(|j| j["last_outcome"].is_string()), "{json}");
    eprintln!("console_budget: 100 jobs behind a 5 ms-per-reply proxy in {took:?}");
    let page = http::get(addr, "/jobs").await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("id=\"partial\""), "{}", page.body);
    assert!((0..100).all(|j| page.body.contains(&format!(">job-{j}<"))), "every job on the page");

    // A budget too short for the replies: what was read is shown, the rest named as missing.
    let hurried = Console::new(
        LockClient::builder().url(proxy.url()).instance_id("hurried").build().expect("a client"),
    )
    .snapshot_budget(Duration::from_secs(60), Duration::from_millis(1), 100_000)
    .expect("a budget");
    let hurried = http::serve(hurried.router()).await;
    proxy.set(Direction::ToClient, Fault::Delay(Duration::from_millis(50)));
    let page = http::get(hurried, "/jobs").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("id=\"partial\""), "the page says it is partial: {}", page.body);
    proxy.set(Direction::ToClient, Fault::Pass);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_embedded_console_under_load_costs_its_replica_nothing() {
    let server = RedisServer::start();
    fill_histories(&server, 20, 1000);
    let replica = client(&server, "pod-1");
    // Locks the replica holds throughout, renewed every 333 ms.
    let mut guards = Vec::new();
    for i in 0..20 {
        let options = LockOptions::new().watchdog();
        guards.push(replica.acquire(&format!("lock:held-{i}"), options).await.expect("a lock"));
    }
    // Each run's start lag, and whether the console was under load when it started.
    let lags: Arc<Mutex<Vec<(bool, Duration)>>> = Arc::default();
    let loaded_now = Arc::new(AtomicBool::new(false));
    let (sink, flag) = (lags.clone(), loaded_now.clone());
    let scheduler = Scheduler::builder()
        .client(replica.clone())
        .job(
            Job::with_context("tick", "* * * * * *", move |ctx| {
                let lag = (lock_scheduler::chrono::Utc::now() - ctx.slot()).to_std().unwrap_or_default();
                sink.lock().expect("lags").push((flag.load(Ordering::SeqCst), lag));
                async {}
            })
            .lock("lock:tick"),
        )
        .build()
        .expect("a scheduler");
    let handle = scheduler.start().await.expect("started");
    let console = Console::new(replica.clone());
    let addr = http::serve(console.router()).await;

    // Unloaded and loaded windows alternate, so the machine's own load weighs on both alike:
    // 20 s of load in all.
    const WINDOW: Duration = Duration::from_millis(2500);
    const ROUNDS: u32 = 8;
    let paths = [
        "/api/locks?pattern=*&limit=1000",
        "/",
        "/api/jobs",
        "/api/jobs/job-0/history?n=1000",
        "/api/jobs/job-1/stats",
        "/locks?pattern=*&limit=1000",
        "/jobs/job-2",
        "/locks/lock:held-0",
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let loops: Vec<_> = (0..8)
        .map(|i| {
            let (loaded_now, stop) = (loaded_now.clone(), stop.clone());
            tokio::spawn(async move {
                let (mut ok, mut busy, mut other) = (0u32, 0u32, Vec::new());
                let mut n = i;
                while !stop.load(Ordering::SeqCst) {
                    if !loaded_now.load(Ordering::SeqCst) {
                        // Load generation, not synchronisation: idle until the next loaded window.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                    match http::get(addr, paths[n % paths.len()]).await.status {
                        200 => ok += 1,
                        429 => busy += 1,
                        status => other.push((status, paths[n % paths.len()])),
                    }
                    n += 1;
                }
                (ok, busy, other)
            })
        })
        .collect();
    for _ in 0..ROUNDS {
        tokio::time::sleep(WINDOW).await;
        loaded_now.store(true, Ordering::SeqCst);
        tokio::time::sleep(WINDOW).await;
        loaded_now.store(false, Ordering::SeqCst);
    }
    stop.store(true, Ordering::SeqCst);
    let (mut ok, mut busy, mut other) = (0, 0, Vec::new());
    for task in loops {
        let (o, b, x) = task.await.expect("a load loop");
        (ok, busy) = (ok + o, busy + b);
        other.extend(x);
    }
    let samples = lags.lock().expect("lags").clone();
    let mut unloaded: Vec<Duration> = samples.iter().filter(|(l, _)| !l).map(|(_, d)| *d).collect();
    let mut loaded: Vec<Duration> = samples.iter().filter(|(l, _)| *l).map(|(_, d)| *d).collect();
    const LOADED: Duration = Duration::from_secs(20);
    let lost = guards.iter().filter(|g| !g.is_held()).count();
    let liveness = lock_core::inspect::parse_token(guards[0].token())
        .and_then(|h| h.liveness_key)
        .expect("a liveness key");
    let (unloaded_p99, loaded_p99) = (p99(&mut unloaded), p99(&mut loaded));
    eprintln!(
        "console_budget: {} requests in {LOADED:?} from 8 loops ({ok} answered 200, {busy} 429, other {other:?}); \
         lost locks {lost}; job start lag p99 unloaded {unloaded_p99:?} ({} runs), loaded {loaded_p99:?} ({} runs)",
        ok + busy + other.len() as u32,
        unloaded.len(),
        loaded.len()
    );
    assert!(ok > 0, "the console answered under load");
    assert!(other.is_empty(), "only 200s and 429s: {other:?}");
    assert_eq!(lost, 0, "no lock lost");
    assert_eq!(server.cli(&["EXISTS", &liveness]), "1", "the replica's liveness lease never expired");
    for guard in &guards {
        assert_eq!(
            guard.token().split(':').take(2).collect::<Vec<_>>(),
            ["pod-1", lock_core::schema::client_id_of(guards[0].token())]
        );
    }
    assert!(
        unloaded.len() >= 5 && loaded.len() >= 10,
        "the job ran: {} and {} runs",
        unloaded.len(),
        loaded.len()
    );
    assert!(
        loaded_p99 <= unloaded_p99 + Duration::from_millis(50),
        "start lag p99 loaded {loaded_p99:?} vs unloaded {unloaded_p99:?}"
    );
    handle.shutdown().await;
    for guard in guards {
        assert!(guard.release().await.expect("released"), "still ours at the end");
    }
}
