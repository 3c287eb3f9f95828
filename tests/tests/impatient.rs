//! Callers that give up waiting must not slow the others down (issue 20): request handlers put
//! a deadline around a waiting `acquire`, most of them give up while queued, and the lock must
//! stay as usable as without them. Real processes (`impatient_waiters`, `queued_waiters`)
//! against a private Redis.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use deadpool_redis::redis;
use lock_core::{LockClient, LockOptions, schema};
use tests::harness::{RedisServer, init_tracing, wait_until};

/// The hand-off time of `impatient_waiters`' clients: lock-core's default command timeout. A
/// release that reserved the lock for a caller that left without saying so would make the
/// next waiter wait this long.
const HAND_OFF: Duration = Duration::from_secs(2);

/// What one `impatient_waiters` process reported.
#[derive(Debug, Default, Clone, Copy)]
struct Report {
    acquired: u64,
    patient: u64,
    max_wait: Duration,
    gave_up: u64,
    /// Reservations this process passed on because their waiter had given up.
    waiter_left: u64,
    /// Reservations this process found lapsed untaken.
    lapsed: u64,
}

fn spawn(server: &RedisServer, key: &str, secs: f64, patient: bool, impatient: usize) -> Child {
    Command::new(env!("CARGO_BIN_EXE_impatient_waiters"))
        .args([
            server.url(),
            key.to_owned(),
            secs.to_string(),
            if patient { "1" } else { "0" }.to_owned(),
            impatient.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn impatient_waiters")
}

fn report(child: Child) -> Report {
    let out = child.wait_with_output().expect("impatient_waiters runs");
    assert!(out.status.success(), "impatient_waiters failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| -> u64 {
        text.split_whitespace()
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text:?}"))
    };
    Report {
        acquired: field("acquired"),
        patient: field("patient"),
        max_wait: Duration::from_millis(field("max_wait_ms")),
        gave_up: field("gave_up"),
        waiter_left: field("waiter_left"),
        lapsed: field("lapsed"),
    }
}

/// What one run measured, all processes together.
struct Run {
    /// Acquisitions of the key by everyone.
    acquired: u64,
    /// The patient loop's own report.
    patient: Report,
    /// Impatient calls that gave up.
    gave_up: u64,
    /// Unclaimed hand-offs, by reason, counted by every process.
    waiter_left: u64,
    lapsed: u64,
    /// The longest queue Redis held.
    longest_queue: u64,
}

/// One run: a patient loop in its own process and `impatient` request-handler tasks spread over
/// `processes` other processes, for `secs`.
fn run(server: &RedisServer, key: &str, secs: f64, processes: usize, impatient: usize) -> Run {
    let queue = schema::queue_key(key);
    let longest = Arc::new(AtomicU64::new(0));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = std::thread::spawn({
        let (url, longest, sampling) = (server.url(), longest.clone(), sampling.clone());
        move || {
            let mut con = redis_fixture_connect(&url);
            while sampling.load(Ordering::Relaxed) {
                let len: u64 = redis::cmd("LLEN").arg(&queue).query(&mut con).unwrap_or(0);
                longest.fetch_max(len, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    });
    let patient = spawn(server, key, secs, true, 0);
    let others: Vec<Child> =
        (0..processes).map(|_| spawn(server, key, secs, false, impatient / processes.max(1))).collect();
    let patient = report(patient);
    let others: Vec<Report> = others.into_iter().map(report).collect();
    sampling.store(false, Ordering::Relaxed);
    sampler.join().expect("sampler");
    let all = || std::iter::once(&patient).chain(&others);
    Run {
        acquired: all().map(|r| r.acquired).sum(),
        patient,
        gave_up: others.iter().map(|r| r.gave_up).sum(),
        waiter_left: all().map(|r| r.waiter_left).sum(),
        lapsed: all().map(|r| r.lapsed).sum(),
        longest_queue: longest.load(Ordering::Relaxed),
    }
}

fn redis_fixture_connect(url: &str) -> redis::Connection {
    redis::Client::open(url).and_then(|c| c.get_connection()).expect("connect to the test Redis")
}

/// The request-handler scenario of issue 20, with 1, 4 and 64 impatient tasks in one process
/// and 16 spread over four. Asserted is the mechanism, not a rate (the rate relative to no
/// churn is `lockbench` S5's, BENCHMARKS.md): every give-up leaves the queue in its own script,
/// so no release ever reserves the lock for a departed caller and waits a hand-off time for it
/// (no reservation lapses, the patient loop's longest wait stays below a hand-off time), the
/// queue in Redis holds no more entries than there are waiters, and nothing is left behind.
#[test]
fn callers_that_give_up_waiting_do_not_slow_the_lock_down() {
    init_tracing();
    let server = RedisServer::start();
    let secs = 2.0;
    let calm = run(&server, "lock:impatient:calm", secs, 0, 0);
    assert_eq!(calm.longest_queue, 0, "nobody queues behind a lone loop");
    assert!(calm.patient.patient > 0, "the lone loop acquires");
    eprintln!("no churn: {} acquisitions, longest wait {:?}", calm.acquired, calm.patient.max_wait);
    for (processes, impatient) in [(1, 1), (1, 4), (1, 64), (4, 16)] {
        let key = format!("lock:impatient:{processes}x{impatient}");
        let r = run(&server, &key, secs, processes, impatient);
        eprintln!(
            "{impatient} impatient tasks in {processes} process(es): {} acquisitions (no churn: {}), \
             patient {} with longest wait {:?}, {} gave up, reservations passed on from a caller \
             that left {}, lapsed {}, longest queue {}",
            r.acquired,
            calm.acquired,
            r.patient.patient,
            r.patient.max_wait,
            r.gave_up,
            r.waiter_left,
            r.lapsed,
            r.longest_queue,
        );
        assert!(r.gave_up > 0, "the scenario makes callers give up");
        assert!(r.patient.patient > 0, "the patient loop acquires");
        // The bug this guards against (issue 20): a give-up that left its ticket queued got the
        // lock reserved for it, and every such reservation lapsed after a hand-off time.
        assert_eq!(r.lapsed, 0, "no reservation lapsed: every give-up left the queue itself");
        if impatient >= 4 {
            // The check had material: releases did reserve the lock for callers that were
            // leaving (hundreds per run with 4 tasks or more), and their give-ups passed it on.
            assert!(r.waiter_left > 0, "no give-up met a reservation");
        }
        assert!(
            r.patient.max_wait < HAND_OFF,
            "the patient loop waited {:?}, a hand-off time ({HAND_OFF:?}) or more",
            r.patient.max_wait
        );
        // Every task waits for at most one lock at a time; a clean-up still in flight may leave
        // one more entry for a moment.
        let waiters = impatient as u64 + 1;
        let queue = r.longest_queue;
        assert!(queue <= waiters + waiters / 4 + 1, "{queue} entries queued for {waiters} waiters");
        assert_eq!(server.cli(&["LLEN", &schema::queue_key(&key)]), "0", "nothing left queued");
        // The sorted set also keeps the per-client hand-off records (`@<client id>`), which
        // expire with it; a waiter's ticket is its token.
        let tickets = server.cli(&["ZRANGE", &schema::tickets_key(&key), "0", "-1"]);
        assert!(
            tickets.lines().all(|t| t.trim().is_empty() || t.starts_with('@')),
            "tickets left: {tickets}"
        );
        assert_eq!(server.cli(&["EXISTS", &key]), "0", "nothing left held");
    }
}

/// A process killed with ten waiters queued costs the next live waiter one hand-off time (the
/// dead client's command timeout, 1 s here), not ten: once one reservation lapses untaken, the
/// queue skips that client's other tickets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_process_with_queued_waiters_costs_one_hand_off_time() {
    init_tracing();
    let server = RedisServer::start();
    let key = "lock:impatient:killed";
    let queue = schema::queue_key(key);
    let holder = LockClient::builder().url(server.url()).instance_id("holder").build().unwrap();
    let held = holder.try_lock(key, LockOptions::new()).await.unwrap();
    let handoff = Duration::from_secs(1);
    let mut dead: Vec<Child> = ["2", "3"]
        .iter()
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_queued_waiters"))
                .args([server.url(), key.to_owned(), "5".to_owned(), handoff.as_millis().to_string()])
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn queued_waiters")
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(10), || server.cli(&["LLEN", &queue]) == "10").await,
        "two processes queue five waiters each: {}",
        server.cli(&["LLEN", &queue])
    );
    // A live waiter behind them, retrying at most every 200 ms.
    let live = LockClient::builder()
        .url(server.url())
        .instance_id("live")
        .wait_backoff(Duration::from_millis(50), Duration::from_millis(200))
        .build()
        .unwrap();
    let waiter = tokio::spawn(async move {
        let guard = live.acquire(key, LockOptions::new().wait(Duration::from_secs(30))).await.unwrap();
        (Instant::now(), guard)
    });
    assert!(wait_until(Duration::from_secs(5), || server.cli(&["LLEN", &queue]) == "11").await);
    for child in &mut dead {
        child.kill().expect("kill -9");
        child.wait().expect("reaped");
    }
    let released = Instant::now();
    assert!(held.release().await.unwrap());
    let (acquired, guard) =
        tokio::time::timeout(Duration::from_secs(20), waiter).await.expect("acquired").unwrap();
    let waited = acquired - released;
    eprintln!("two dead clients with five waiters each cost the live waiter {waited:?}");
    // One hand-off time per dead client, plus the live waiter's retry after each lapse; ten
    // dead tickets served one by one would cost ten.
    assert!(waited >= handoff, "the first dead waiter's reservation is honoured: {waited:?}");
    assert!(waited < 2 * handoff + Duration::from_millis(1500), "{waited:?}");
    assert_eq!(server.cli(&["GET", key]), guard.token());
    assert!(guard.release().await.unwrap());
    assert_eq!(server.cli(&["LLEN", &queue]), "0", "the dead tickets are gone");
}
