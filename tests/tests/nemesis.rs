//! The nemesis: several replica processes contend for locks, a semaphore and a read-write lock,
//! write to a fenced store and run a scheduled job, while a seeded schedule injects faults one
//! at a time: partitions, late replies, lossy links and connection resets between a replica and
//! Redis (a [`FaultProxy`] per replica), SIGSTOP/SIGCONT and kill -9 of replicas (a killed one
//! is replaced), Redis restarts from its append-only file, and the faults of one command: a
//! reply lost (the command runs, its connection's replies are held until the client drops it)
//! and a command held in the network past its timeout that lands late, on a connection the
//! client dropped. Impatient callers are built into the workers. The test samples the locks'
//! keys in Redis as it goes, and the checker (`tests::nemesis::check`) then proves from the
//! recorded history alone that no safety property broke.
//!
//! `NEMESIS_SEED` replays a schedule (a failing run prints its seed); `NEMESIS_SECS` sets its
//! length (default 20 s; the README's long run: `NEMESIS_SECS=600`).

use std::collections::HashMap;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};

use deadpool_redis::redis;
use lock_core::schema;
use tests::harness::{Backend, Direction, Fault, FaultProxy, Hold, RedisServer, init_tracing};
use tests::nemesis::{self, Bounds, Event, LIVENESS_TTL, LOCKS, Rng, SEMAPHORE, StoreWrite, What, now_us};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// Replica processes running at any time.
const WORKERS: usize = 3;
/// The longest fault that lasts (a partition, a pause, a delay).
const MAX_FAULT: Duration = Duration::from_millis(2500);
/// Scheduling noise on a loaded 2-core machine (debug build), added to every bound.
const SLACK: Duration = Duration::from_millis(2000);
/// How long a lock's key may hold a token after its hold ended (a late try landing, a
/// reservation for a waiter that left) while its process reaches Redis: the clean-up's retries
/// (an eighth of the 2 s watchdog lease apart), a command timeout, and noise; well under the
/// lease that an uncleaned late try would hold it for.
const ORPHAN: Duration = Duration::from_millis(1200);
/// How often the test samples the locks' keys.
const SAMPLE_EVERY: Duration = Duration::from_millis(25);

/// The history, shared by the readers of every worker's stdout and the schedule.
type History = Arc<Mutex<Vec<Event>>>;

/// The fenced store: accepts a write under a resource unless its fence is older than the
/// newest it accepted there; records every accepted write, and every job-tick's runs.
#[derive(Default)]
struct Store {
    newest: HashMap<String, u64>,
    accepted: Vec<StoreWrite>,
    stale: usize,
    ticks: HashMap<i64, Vec<String>>,
}

impl Store {
    fn apply(&mut self, line: &str) -> &'static str {
        let f: Vec<&str> = line.split(' ').collect();
        match f.as_slice() {
            ["w", resource, fence, who] => {
                let Ok(fence) = fence.parse::<u64>() else { return "bad" };
                let newest = self.newest.entry((*resource).to_owned()).or_default();
                if fence < *newest {
                    self.stale += 1;
                    return "stale";
                }
                *newest = fence;
                self.accepted.push(StoreWrite {
                    resource: (*resource).to_owned(),
                    fence,
                    who: (*who).to_owned(),
                });
                "ok"
            }
            ["t", tick, who] => {
                let Ok(tick) = tick.parse::<i64>() else { return "bad" };
                self.ticks.entry(tick).or_default().push((*who).to_owned());
                "ok"
            }
            _ => "bad",
        }
    }
}

/// Serves the store on a loopback port; returns its address.
async fn serve_store(store: Arc<Mutex<Store>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the store");
    let addr = listener.local_addr().expect("the store's address").to_string();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let store = store.clone();
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let reply = store.lock().expect("store").apply(&line);
                    if write.write_all(format!("{reply}\n").as_bytes()).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// One replica process, behind its own proxy.
struct Worker {
    instance: String,
    child: Child,
    proxy: FaultProxy,
}

impl Worker {
    fn spawn(redis: &RedisServer, store: &str, instance: String, seed: u64, history: &History) -> Worker {
        let proxy = FaultProxy::start(redis.port()).expect("a fault proxy");
        let mut child = Command::new(env!("CARGO_BIN_EXE_nemesis_worker"))
            .args([&proxy.url(), store, &instance, &seed.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn nemesis_worker");
        let stdout = child.stdout.take().expect("piped stdout");
        let (history, who) = (history.clone(), instance.clone());
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(event) = Event::parse(&who, &line) {
                    history.lock().expect("history").push(event);
                }
            }
        });
        Worker { instance, child, proxy }
    }

    fn signal(&self, signal: &str) {
        let status =
            Command::new("kill").args([signal, &self.child.id().to_string()]).status().expect("kill");
        assert!(status.success(), "kill {signal} {}", self.instance);
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Samples the locks' keys every [`SAMPLE_EVERY`] until `stop`, straight from Redis (not
/// through a worker's proxy), into the history.
fn sample_locks(url: String, history: History, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let client = redis::Client::open(url).expect("the sampler's client");
        let mut con = None;
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(SAMPLE_EVERY);
            if con.is_none() {
                con = client.get_connection_with_timeout(Duration::from_millis(200)).ok();
                if let Some(c) = con.as_mut() {
                    let _ = c.set_read_timeout(Some(Duration::from_millis(500)));
                }
            }
            let Some(c) = con.as_mut() else { continue };
            let at = now_us();
            let values: redis::RedisResult<Vec<Option<String>>> = redis::cmd("MGET").arg(&LOCKS[..]).query(c);
            let Ok(values) = values else {
                con = None; // a restart: reconnect
                continue;
            };
            let mut history = history.lock().expect("history");
            for (resource, value) in LOCKS.iter().zip(values) {
                let token = value.map_or_else(|| "-".to_owned(), |v| schema::unmarked(&v).to_owned());
                history.push(Event {
                    at_us: at,
                    who: "test".to_owned(),
                    what: What::Observed { resource: (*resource).to_owned(), token },
                });
            }
        }
    })
}

/// A key the workers contend for, as a bulk string on the wire (see `FaultProxy::on_command`).
fn contended_key(rng: &mut Rng) -> Vec<u8> {
    let keys = [LOCKS[0], LOCKS[1], SEMAPHORE];
    let key = keys[usize::try_from(rng.range(0, keys.len() as u64)).unwrap_or(0)];
    format!("\r\n{key}\r\n").into_bytes()
}

fn record(history: &History, kind: &str, target: &str, ms: u64) {
    let what = What::Fault { kind: kind.to_owned(), target: target.to_owned(), ms };
    history.lock().expect("history").push(Event { at_us: now_us(), who: "test".to_owned(), what });
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("{name}={v:?}: expected a number")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_fault_schedule_breaks_no_safety_property() {
    init_tracing();
    let seed = env_u64("NEMESIS_SEED").unwrap_or_else(now_us);
    let secs = env_u64("NEMESIS_SECS").unwrap_or(20);
    let replay =
        format!("NEMESIS_SEED={seed} NEMESIS_SECS={secs} cargo test -p tests --test nemesis -- --nocapture");
    eprintln!("nemesis: seed {seed}, {secs} s (replay: {replay})");
    let mut rng = Rng::new(seed);

    // Every write acknowledged is on disk before the reply: a restart loses nothing.
    let config =
        tests::harness::ServerConfig::new().option("appendonly", "yes").option("appendfsync", "always");
    let mut redis = RedisServer::start_with_config(Backend::Process, &config);
    let store = Arc::new(Mutex::new(Store::default()));
    let store_addr = serve_store(store.clone()).await;
    let history: History = Arc::default();
    let mut generation = 0;
    let mut workers: Vec<Worker> = (0..WORKERS)
        .map(|i| Worker::spawn(&redis, &store_addr, format!("w{i}-0"), rng.next_u64(), &history))
        .collect();
    let sampling = Arc::new(AtomicBool::new(false));
    let sampler = sample_locks(redis.url(), history.clone(), sampling.clone());

    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(rng.range(200, 800))).await;
        let w = usize::try_from(rng.range(0, WORKERS as u64)).unwrap_or(0);
        let ms = rng.range(300, u64::try_from(MAX_FAULT.as_millis()).unwrap_or(2500));
        let lasting = Duration::from_millis(ms);
        let target = workers[w].instance.clone();
        let cuts_holder_off = match rng.range(0, 10) {
            0 => {
                record(&history, "partition", &target, ms);
                workers[w].proxy.set_for(Direction::Both, Fault::Blackhole, lasting);
                tokio::time::sleep(lasting).await;
                ms >= LIVENESS_TTL.as_millis() as u64
            }
            1 => {
                // Late replies, some past the command timeout (unknown outcomes).
                let late = Duration::from_millis(rng.range(50, 600));
                record(&history, "delay", &target, ms);
                workers[w].proxy.set_for(Direction::ToClient, Fault::Delay(late), lasting);
                tokio::time::sleep(lasting).await;
                false
            }
            2 => {
                record(&history, "lossy", &target, ms);
                let fault = Fault::Lossy { fraction: 0.2, retransmit: Duration::from_millis(200) };
                workers[w].proxy.set_for(Direction::Both, fault, lasting);
                tokio::time::sleep(lasting).await;
                false
            }
            3 => {
                record(&history, "reset", &target, 0);
                workers[w].proxy.reset_connections();
                false
            }
            4 => {
                record(&history, "stop", &target, ms);
                workers[w].signal("-STOP");
                tokio::time::sleep(lasting).await;
                workers[w].signal("-CONT");
                ms >= LIVENESS_TTL.as_millis() as u64
            }
            5 => {
                record(&history, "kill", &target, 0);
                generation += 1;
                let fresh = Worker::spawn(
                    &redis,
                    &store_addr,
                    format!("w{w}-{generation}"),
                    rng.next_u64(),
                    &history,
                );
                // The old one dies (SIGKILL) as its replacement starts.
                drop(std::mem::replace(&mut workers[w], fresh));
                true
            }
            6 => {
                let down = rng.range(100, 800);
                record(&history, "redis-restart", "redis", down);
                redis.stop();
                tokio::time::sleep(Duration::from_millis(down)).await;
                redis.restart();
                false
            }
            7 => {
                // The next command naming a contended key runs, but its connection's replies are
                // held: the client times out and drops the connection (a lost reply, mostly a
                // waiter's try).
                record(&history, "lost-reply", &target, ms);
                workers[w].proxy.on_command(contended_key(&mut rng), Hold::Replies);
                tokio::time::sleep(lasting).await;
                workers[w].proxy.release_held();
                false
            }
            8 => {
                // The next command naming a contended key is held in the network past the
                // client's timeout, and lands late on the connection it dropped.
                record(&history, "late-command", &target, ms);
                workers[w].proxy.on_command(contended_key(&mut rng), Hold::Command);
                tokio::time::sleep(lasting).await;
                workers[w].proxy.release_held();
                false
            }
            _ => false, // a quiet period
        };
        if cuts_holder_off {
            // Room for the take-back to happen before the next fault can get in its way.
            tokio::time::sleep(LIVENESS_TTL + SLACK).await;
        }
    }
    // Everything heals; the workers run on a moment, then stop.
    for w in &workers {
        w.proxy.heal();
    }
    tokio::time::sleep(LIVENESS_TTL + SLACK).await;
    sampling.store(true, Ordering::Relaxed);
    sampler.join().expect("the sampler");
    drop(workers);

    let events = history.lock().expect("history").clone();
    let store = store.lock().expect("store");
    let bounds = Bounds {
        take_back: LIVENESS_TTL + SLACK,
        stall: MAX_FAULT + LIVENESS_TTL + SLACK + Duration::from_millis(800),
        orphan: ORPHAN,
    };
    let report = nemesis::check(&events, &store.accepted, bounds);
    let store_twice: Vec<_> = store.ticks.iter().filter(|(_, who)| who.len() > 1).collect();
    eprintln!(
        "nemesis: seed {seed}, {secs} s: {report}; store: {} stale writes refused, {} job-ticks recorded",
        store.stale,
        store.ticks.len()
    );
    assert!(store_twice.is_empty(), "job-ticks run twice (store): {store_twice:?}\nreplay: {replay}");
    assert!(
        report.violations.is_empty(),
        "{} violations:\n{}\nreplay: {replay}",
        report.violations.len(),
        report.violations.join("\n")
    );
    // The run did something: every primitive was acquired, the job ran, faults were injected.
    for mode in ["lock", "permit", "read", "write"] {
        assert!(report.acquisitions.get(mode).is_some_and(|&n| n > 0), "no {mode} acquired: {report}");
    }
    assert!(report.ticks > 0 && !report.faults.is_empty(), "{report}");
    assert!(report.observations > 0, "the locks' keys were sampled: {report}");
}
