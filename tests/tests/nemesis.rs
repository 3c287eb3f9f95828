//! The nemesis: several replica processes contend for locks, a semaphore and a read-write lock,
//! write to a fenced store and run a scheduled job, while a seeded schedule injects faults:
//! partitions, late replies, lossy links and connection resets between a replica and Redis (a
//! [`FaultProxy`] per replica), SIGSTOP/SIGCONT, kill -9 and SIGTERM (a graceful shutdown) of
//! replicas (a killed or stopped one is replaced), Redis restarts from its append-only file and Redis frozen (SIGSTOP), and the
//! faults of one command: a reply lost (the command runs, its connection's replies are held
//! until the client drops it) and a command held in the network past its timeout that lands
//! late, on a connection the client dropped. Impatient callers are built into the workers. The
//! test samples the locks' keys in Redis as it goes, and the checker (`tests::nemesis::check`)
//! then proves from the recorded history alone that no safety property broke.
//!
//! Every run injects every kind of fault: the schedule deals each kind once, in an order drawn
//! from the seed, between random extra faults, and goes on past `NEMESIS_SECS` until every
//! kind was dealt. Every property must have had something to check (windows of every mode,
//! fenced writes, job-ticks, key samples), the workers' output is read to its end, and a line
//! that does not parse fails the run. CI runs the fixed seeds in [`FIXED_SEEDS`] and one fresh
//! seed, printed for replay.
//!
//! The canaries: workers broken on purpose (`tests::nemesis::Canary`) run through the same
//! pipeline, and the checker must flag each of them; one it does not flag fails the suite.
//!
//! `NEMESIS_SEED` replays one schedule (a failing run prints its seed); `NEMESIS_SECS` sets the
//! least length of each run (default 20 s; the README's long run: `NEMESIS_SECS=600`).

use std::collections::HashMap;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use deadpool_redis::redis;
use lock_core::schema;
use tests::harness::{Backend, Direction, Fault, FaultProxy, Hold, RedisServer, init_tracing};
use tests::nemesis::{
    self, Bounds, Canary, Event, LIVENESS_TTL, LOCKS, Report, Rng, SEMAPHORE, StoreWrite, What, now_us,
};
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
/// How far from every fault a job-tick must be to be due (it must then run): the claim grace
/// (500 ms), a replacement replica starting, and noise.
const TICK_QUIET: Duration = Duration::from_millis(1500);
/// How long the workers run on after the last fault healed: a take-back's room, and job-ticks
/// far enough from every fault to be due.
const SETTLE: Duration = Duration::from_secs(5);
/// How often the test samples the locks' keys.
const SAMPLE_EVERY: Duration = Duration::from_millis(25);
/// Every kind of fault the schedule injects; each run injects each at least once.
const FAULT_KINDS: [&str; 13] = [
    "partition",
    "clock-step",
    "delay",
    "lossy",
    "reset",
    "stop",
    "kill",
    "shutdown",
    "redis-restart",
    nemesis::WIPE,
    "redis-pause",
    "lost-reply",
    "late-command",
];
/// Seeds CI always runs, besides a fresh one, so that the same schedules are replayed on every
/// change: the 600 s run README reports, and a second one. (No seed is on record as having
/// found a bug: failures were replayed from their printed seed and fixed, not kept.)
const FIXED_SEEDS: [u64; 2] = [1_796_321_995_676_647, 44];
/// How long a canary may run before it counts as not caught.
const CANARY_FOR: Duration = Duration::from_secs(25);

/// The checker's bounds for these timings.
fn bounds() -> Bounds {
    Bounds {
        take_back: LIVENESS_TTL + SLACK,
        stall: MAX_FAULT + LIVENESS_TTL + SLACK + Duration::from_millis(800),
        orphan: ORPHAN,
        tick_quiet: TICK_QUIET,
    }
}

/// One run at a time: each starts its own Redis and three replica processes, and the bounds
/// assume a machine not shared with another run.
static ONE_RUN_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The history, shared by the readers of every worker's stdout and the schedule.
type History = Arc<Mutex<Vec<Event>>>;

/// The fenced store: accepts a write under a resource unless its fence is older than the
/// newest it accepted there; records every write attempted (accepted or not), and every
/// job-tick's runs.
#[derive(Default)]
struct Store {
    newest: HashMap<String, u64>,
    attempts: Vec<StoreWrite>,
    ticks: HashMap<i64, Vec<(String, u64)>>,
}

impl Store {
    fn apply(&mut self, line: &str) -> &'static str {
        let f: Vec<&str> = line.split(' ').collect();
        match f.as_slice() {
            ["w", resource, fence, who] => {
                let Ok(fence) = fence.parse::<u64>() else { return "bad" };
                let newest = self.newest.entry((*resource).to_owned()).or_default();
                let accepted = fence >= *newest;
                if accepted {
                    *newest = fence;
                }
                self.attempts.push(StoreWrite {
                    at_us: now_us(),
                    resource: (*resource).to_owned(),
                    fence,
                    who: (*who).to_owned(),
                    accepted,
                });
                if accepted { "ok" } else { "stale" }
            }
            ["t", tick, who] => {
                let Ok(tick) = tick.parse::<i64>() else { return "bad" };
                self.ticks.entry(tick).or_default().push(((*who).to_owned(), now_us()));
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

/// Where the workers' output goes: the history, and every line that did not parse.
#[derive(Clone, Default)]
struct Sink {
    history: History,
    unparsed: Arc<Mutex<Vec<String>>>,
}

/// One replica process, behind its own proxy.
struct Worker {
    instance: String,
    child: Child,
    proxy: FaultProxy,
    /// Reads its stdout to the end (the process's exit closes it).
    reader: Option<JoinHandle<()>>,
}

impl Worker {
    fn spawn(
        redis: &RedisServer,
        store: &str,
        instance: String,
        seed: u64,
        mode: &str,
        sink: &Sink,
    ) -> Worker {
        let proxy = FaultProxy::start(redis.port()).expect("a fault proxy");
        let mut child = Command::new(env!("CARGO_BIN_EXE_nemesis_worker"))
            .args([&proxy.url(), store, &instance, &seed.to_string(), mode])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn nemesis_worker");
        let stdout = child.stdout.take().expect("piped stdout");
        let (sink, who) = (sink.clone(), instance.clone());
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let line = match line {
                    Ok(line) => line,
                    Err(e) => {
                        sink.unparsed
                            .lock()
                            .expect("unparsed")
                            .push(format!("{who}: unreadable output: {e}"));
                        break;
                    }
                };
                match Event::parse(&who, &line) {
                    Some(event) => sink.history.lock().expect("history").push(event),
                    None if line == "ready" => {}
                    None => sink.unparsed.lock().expect("unparsed").push(format!("{who}: {line}")),
                }
            }
        });
        Worker { instance, child, proxy, reader: Some(reader) }
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
        // Its stdout is closed now: the reader has seen every line once it ends.
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// Samples the locks' keys every [`SAMPLE_EVERY`] until `stop`, straight from Redis (not
/// through a worker's proxy), into the history.
fn sample_locks(url: String, history: History, stop: Arc<AtomicBool>) -> JoinHandle<()> {
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

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("{name}={v:?}: expected a number")))
}

/// One run: Redis, the store, the workers (of one mode), the sampler, and the history.
struct Run {
    redis: RedisServer,
    store: Arc<Mutex<Store>>,
    store_addr: String,
    sink: Sink,
    workers: Vec<Worker>,
    mode: &'static str,
    generation: usize,
    sampling: Arc<AtomicBool>,
    sampler: Option<JoinHandle<()>>,
}

/// What a finished run left to check.
struct Finished {
    report: Report,
    /// Job-ticks the store saw run more than once.
    store_twice: Vec<(i64, Vec<String>)>,
    /// Writes the store refused as stale.
    stale: usize,
    /// Lines of the workers' output that did not parse.
    unparsed: Vec<String>,
}

impl Run {
    async fn start(mode: &'static str, rng: &mut Rng) -> Run {
        // Every write acknowledged is on disk before the reply: a restart loses nothing.
        let config =
            tests::harness::ServerConfig::new().option("appendonly", "yes").option("appendfsync", "always");
        let redis = RedisServer::start_with_config(Backend::Process, &config);
        let store = Arc::new(Mutex::new(Store::default()));
        let store_addr = serve_store(store.clone()).await;
        let sink = Sink::default();
        let workers = (0..WORKERS)
            .map(|i| Worker::spawn(&redis, &store_addr, format!("w{i}-0"), rng.next_u64(), mode, &sink))
            .collect();
        let sampling = Arc::new(AtomicBool::new(false));
        let sampler = Some(sample_locks(redis.url(), sink.history.clone(), sampling.clone()));
        Run { redis, store, store_addr, sink, workers, mode, generation: 0, sampling, sampler }
    }

    fn record(&self, kind: &str, target: &str, ms: u64) {
        let at_us = now_us();
        eprintln!("nemesis: {at_us} fault {kind} on {target} for {ms} ms");
        let what = What::Fault { kind: kind.to_owned(), target: target.to_owned(), ms };
        self.sink.history.lock().expect("history").push(Event { at_us, who: "test".to_owned(), what });
    }

    /// Injects one fault of `kind` on worker `w` (or Redis), lasting about `ms`; returns whether
    /// it may have cut a holder off for longer than the liveness TTL. A late-replies or lossy
    /// link fault `overlapped` is left to heal by itself while the schedule goes on, so the
    /// next fault starts inside it.
    async fn inject(&mut self, kind: &str, w: usize, ms: u64, overlapped: bool, rng: &mut Rng) -> bool {
        let lasting = Duration::from_millis(ms);
        let target = self.workers[w].instance.clone();
        if overlapped && matches!(kind, "delay" | "lossy") {
            self.record(kind, &target, ms);
            let fault = match kind {
                "delay" => Fault::Delay(Duration::from_millis(rng.range(50, 600))),
                _ => Fault::Lossy { fraction: 0.2, retransmit: Duration::from_millis(200) },
            };
            let direction = if kind == "delay" { Direction::ToClient } else { Direction::Both };
            self.workers[w].proxy.set_for(direction, fault, lasting);
            return false;
        }
        match kind {
            "partition" => {
                self.record(kind, &target, ms);
                self.workers[w].proxy.set_for(Direction::Both, Fault::Blackhole, lasting);
                tokio::time::sleep(lasting).await;
                ms >= LIVENESS_TTL.as_millis() as u64
            }
            "delay" => {
                // Late replies, some past the command timeout (unknown outcomes).
                let late = Duration::from_millis(rng.range(50, 600));
                self.record(kind, &target, ms);
                self.workers[w].proxy.set_for(Direction::ToClient, Fault::Delay(late), lasting);
                tokio::time::sleep(lasting).await;
                false
            }
            "lossy" => {
                self.record(kind, &target, ms);
                let fault = Fault::Lossy { fraction: 0.2, retransmit: Duration::from_millis(200) };
                self.workers[w].proxy.set_for(Direction::Both, fault, lasting);
                tokio::time::sleep(lasting).await;
                false
            }
            "reset" => {
                self.record(kind, &target, 0);
                self.workers[w].proxy.reset_connections();
                false
            }
            "stop" => {
                self.record(kind, &target, ms);
                self.workers[w].signal("-STOP");
                tokio::time::sleep(lasting).await;
                self.workers[w].signal("-CONT");
                ms >= LIVENESS_TTL.as_millis() as u64
            }
            "clock-step" => {
                // The replica's scheduler clock jumps 1 s ahead, and back after `ms`.
                self.record(kind, &target, ms);
                self.workers[w].signal("-USR1");
                tokio::time::sleep(lasting).await;
                self.workers[w].signal("-USR2");
                false
            }
            "kill" => {
                self.record(kind, &target, 0);
                self.generation += 1;
                let instance = format!("w{w}-{}", self.generation);
                let fresh = Worker::spawn(
                    &self.redis,
                    &self.store_addr,
                    instance,
                    rng.next_u64(),
                    self.mode,
                    &self.sink,
                );
                // The old one dies (SIGKILL) as its replacement starts; its output is read to
                // the end first.
                drop(std::mem::replace(&mut self.workers[w], fresh));
                true
            }
            "shutdown" => {
                // SIGTERM: the worker stamps `shutdown`, stops its scheduler (which must start
                // nothing from then on) and exits; it is replaced, as a killed one is. Its
                // contending tasks end with the process, their locks left to expire.
                self.record(kind, &target, 0);
                self.workers[w].signal("-TERM");
                let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                while self.workers[w].child.try_wait().ok().flatten().is_none()
                    && tokio::time::Instant::now() < deadline
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                self.generation += 1;
                let instance = format!("w{w}-{}", self.generation);
                let fresh = Worker::spawn(
                    &self.redis,
                    &self.store_addr,
                    instance,
                    rng.next_u64(),
                    self.mode,
                    &self.sink,
                );
                drop(std::mem::replace(&mut self.workers[w], fresh));
                true
            }
            "redis-restart" => {
                let down = rng.range(100, 800);
                self.record(kind, "redis", down);
                self.redis.stop();
                tokio::time::sleep(Duration::from_millis(down)).await;
                self.redis.restart();
                false
            }
            nemesis::WIPE => {
                // Killed, its append-only files deleted, started empty: a restart without
                // persistence. What README says it may cost is checked (`nemesis::check`).
                let down = rng.range(100, 800);
                self.record(kind, "redis", down);
                self.redis.stop();
                tokio::time::sleep(Duration::from_millis(down)).await;
                self.redis.restart_losing_data();
                false
            }
            "redis-pause" => {
                // Redis frozen (SIGSTOP): every client's commands wait, keys expire meanwhile
                // by the wall clock, and everything queued runs at once on SIGCONT.
                let frozen = rng.range(100, 1500);
                self.record(kind, "redis", frozen);
                self.redis.pause();
                tokio::time::sleep(Duration::from_millis(frozen)).await;
                self.redis.resume();
                false
            }
            "lost-reply" => {
                // The next command naming a contended key runs, but its connection's replies
                // are held: the client times out and drops the connection (a lost reply,
                // mostly a waiter's try).
                self.record(kind, &target, ms);
                self.workers[w].proxy.on_command(contended_key(rng), Hold::Replies);
                tokio::time::sleep(lasting).await;
                self.workers[w].proxy.release_held();
                false
            }
            "late-command" => {
                // The next command naming a contended key is held in the network past the
                // client's timeout, and lands late on the connection it dropped.
                self.record(kind, &target, ms);
                self.workers[w].proxy.on_command(contended_key(rng), Hold::Command);
                tokio::time::sleep(lasting).await;
                self.workers[w].proxy.release_held();
                false
            }
            other => panic!("unknown fault kind {other}"),
        }
    }

    /// Heals everything, lets the workers run on a moment, stops them and checks the history.
    async fn finish(mut self, settle: Duration) -> Finished {
        for w in &self.workers {
            w.proxy.heal();
        }
        tokio::time::sleep(settle).await;
        self.sampling.store(true, Ordering::Relaxed);
        if let Some(sampler) = self.sampler.take() {
            sampler.join().expect("the sampler");
        }
        // Killed, and their output read to its end.
        self.workers.clear();
        let events = self.sink.history.lock().expect("history").clone();
        let store = self.store.lock().expect("store");
        let report = nemesis::check(&events, &store.attempts, bounds());
        // Run more than once by the store's count, unless the runs straddle a restart without
        // persistence (its forgotten claim is what README says such a restart may cost).
        let mut store_twice: Vec<(i64, Vec<String>)> = store
            .ticks
            .iter()
            .filter(|(_, runs)| runs.len() > 1)
            .filter(|(_, runs)| {
                !nemesis::rerun_after_wipe(&events, runs.iter().map(|r| r.1).max().unwrap_or(0))
            })
            .map(|(t, runs)| (*t, runs.iter().map(|r| r.0.clone()).collect()))
            .collect();
        store_twice.sort();
        Finished {
            report,
            store_twice,
            stale: store.attempts.iter().filter(|w| !w.accepted).count(),
            unparsed: self.sink.unparsed.lock().expect("unparsed").clone(),
        }
    }
}

/// Runs the schedule of `seed` for at least `secs` and until every kind of fault was dealt, and
/// asserts that no property broke and that every property had something to check.
async fn run_schedule(seed: u64, secs: u64) {
    let replay =
        format!("NEMESIS_SEED={seed} NEMESIS_SECS={secs} cargo test -p tests --test nemesis -- --nocapture");
    eprintln!("nemesis: seed {seed}, at least {secs} s (replay: {replay})");
    let mut rng = Rng::new(seed);
    let mut run = Run::start("correct", &mut rng).await;
    // Every kind once, in an order drawn from the seed.
    let mut deck: Vec<&str> = FAULT_KINDS.to_vec();
    for i in (1..deck.len()).rev() {
        let j = usize::try_from(rng.range(0, i as u64 + 1)).unwrap_or(0);
        deck.swap(i, j);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    let mut overlaps = 0;
    while tokio::time::Instant::now() < deadline || !deck.is_empty() {
        tokio::time::sleep(Duration::from_millis(rng.range(200, 800))).await;
        let w = usize::try_from(rng.range(0, WORKERS as u64)).unwrap_or(0);
        let ms = rng.range(300, u64::try_from(MAX_FAULT.as_millis()).unwrap_or(2500));
        // The next card of the deck, or (one time in three, and once the deck is out) a random
        // extra fault or a quiet period.
        let kind = if !deck.is_empty() && (rng.chance(67) || tokio::time::Instant::now() >= deadline) {
            deck.pop()
        } else {
            let pick = usize::try_from(rng.range(0, FAULT_KINDS.len() as u64 + 1)).unwrap_or(0);
            FAULT_KINDS.get(pick).copied()
        };
        let Some(kind) = kind else { continue };
        // The first late-replies or lossy fault of the run, and one in five after it, overlaps
        // the next fault: it lasts past the next pause (200-800 ms) and heals by itself.
        let overlapped = matches!(kind, "delay" | "lossy") && (overlaps == 0 || rng.chance(20));
        let ms = if overlapped { ms.max(1500) } else { ms };
        overlaps += usize::from(overlapped);
        if run.inject(kind, w, ms, overlapped, &mut rng).await {
            // Room for the take-back to happen before the next fault can get in its way.
            tokio::time::sleep(LIVENESS_TTL + SLACK).await;
        }
    }
    let finished = run.finish(SETTLE).await;
    let report = &finished.report;
    eprintln!(
        "nemesis: seed {seed}: {report}; store: {} stale writes refused, {} job-ticks run twice",
        finished.stale,
        finished.store_twice.len()
    );
    assert!(
        finished.unparsed.is_empty(),
        "lines that did not parse: {:?}\nreplay: {replay}",
        finished.unparsed
    );
    assert!(
        finished.store_twice.is_empty(),
        "job-ticks run twice (store): {:?}\nreplay: {replay}",
        finished.store_twice
    );
    assert!(
        report.violations.is_empty(),
        "{} violations:\n{}\nreplay: {replay}",
        report.violations.len(),
        report.violations.join("\n")
    );
    // Every property had material: every fault kind injected, every mode held and checked
    // valid (windows to compare), fenced writes attempted and accepted, job-ticks run, keys
    // sampled. An empty history fails here rather than passing every property.
    for kind in FAULT_KINDS {
        assert!(report.faults.get(kind).is_some_and(|&n| n > 0), "no `{kind}` fault injected: {report}");
    }
    assert!(report.overlapping_faults > 0, "no two faults overlapped: {report}");
    for mode in ["lock", "permit", "read", "write"] {
        assert!(report.acquisitions.get(mode).is_some_and(|&n| n > 0), "no {mode} acquired: {report}");
        assert!(report.windows.get(mode).is_some_and(|&n| n > 0), "no {mode} hold checked valid: {report}");
    }
    assert!(report.attempted_writes > 0 && report.writes > 0, "no fenced writes: {report}");
    assert!(report.ticks > 0, "the job never ran: {report}");
    assert!(report.ticks_due > 0, "no job-tick was away from every fault: nothing checked it ran: {report}");
    assert!(report.observations > 0, "the locks' keys were never sampled: {report}");
    assert!(report.shutdowns > 0, "no worker was told to shut down: {report}");
    assert!(report.lateness_checked > 0, "no reported lateness was checked: {report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_kind_under_fixed_and_fresh_seeds_breaks_no_safety_property() {
    init_tracing();
    let _alone = ONE_RUN_AT_A_TIME.lock().await;
    let secs = env_u64("NEMESIS_SECS").unwrap_or(20);
    let seeds: Vec<u64> = match env_u64("NEMESIS_SEED") {
        Some(seed) => vec![seed],
        None => FIXED_SEEDS.into_iter().chain([now_us()]).collect(),
    };
    for seed in seeds {
        run_schedule(seed, secs).await;
    }
}

/// The worker that holds one of the locks now, and since when (µs), from the history.
fn current_holder(history: &History) -> Option<(String, u64)> {
    let events = history.lock().expect("history");
    let mut open: HashMap<(String, String, u64), u64> = HashMap::new();
    for e in events.iter() {
        match &e.what {
            What::Acquired { resource, id, .. } => {
                open.insert((e.who.clone(), resource.clone(), *id), e.at_us);
            }
            What::Released { resource, id } => {
                open.remove(&(e.who.clone(), resource.clone(), *id));
            }
            _ => {}
        }
    }
    open.into_iter().map(|((who, _, _), at)| (who, at)).max_by_key(|(_, at)| *at)
}

/// The violation each canary must produce.
fn expected(canary: Canary) -> &'static str {
    match canary {
        Canary::NoNx | Canary::IgnoreLiveness | Canary::NoOwnerCheck => "overlaps",
        Canary::NoTickClaim => "ran 3 times",
        Canary::LosesTicks => "never ran",
    }
}

/// Runs the broken workers of `canary` until the checker flags them (or [`CANARY_FOR`]
/// passes); returns the violation that flagged them, if any, and how long it took.
async fn run_canary(canary: Canary, seed: u64) -> (Option<String>, Duration) {
    let mut rng = Rng::new(seed);
    let mut run = Run::start(canary.name(), &mut rng).await;
    let started = tokio::time::Instant::now();
    let flagged = |run: &Run| {
        let events = run.sink.history.lock().expect("history").clone();
        let attempts = run.store.lock().expect("store").attempts.clone();
        let report = nemesis::check(&events, &attempts, bounds());
        report.violations.into_iter().find(|v| v.contains(expected(canary)))
    };
    while started.elapsed() < CANARY_FOR {
        match canary {
            // Broken whatever happens: no fault needed.
            Canary::NoNx | Canary::NoTickClaim | Canary::LosesTicks => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            // Broken only when a holder loses its lock: cut the newest holder off for longer
            // than the liveness TTL, so that another worker takes its lock over.
            Canary::IgnoreLiveness | Canary::NoOwnerCheck => {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let Some((holder, _)) = current_holder(&run.sink.history) else { continue };
                let Some(w) = run.workers.iter().position(|w| w.instance == holder) else { continue };
                let ms =
                    u64::try_from((LIVENESS_TTL + Duration::from_millis(700)).as_millis()).unwrap_or(1700);
                run.inject("partition", w, ms, false, &mut rng).await;
                tokio::time::sleep(Duration::from_millis(1500)).await;
            }
        }
        if flagged(&run).is_some() {
            break;
        }
    }
    let took = started.elapsed();
    let finished = run.finish(Duration::ZERO).await;
    let found = finished.report.violations.into_iter().find(|v| v.contains(expected(canary)));
    (found, took)
}

/// Each broken worker, run through the same pipeline (processes, proxies, store, sampler,
/// checker), is flagged by the checker: a canary that is not caught fails the suite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_canary_is_flagged_by_the_checker() {
    init_tracing();
    let _alone = ONE_RUN_AT_A_TIME.lock().await;
    let seed = env_u64("NEMESIS_SEED").unwrap_or_else(now_us);
    let mut missed = Vec::new();
    for canary in Canary::ALL {
        let (found, took) = run_canary(canary, seed).await;
        match found {
            Some(violation) => {
                eprintln!("canary {}: flagged after {took:?}: {violation}", canary.name());
            }
            None => missed.push(canary.name()),
        }
    }
    assert!(missed.is_empty(), "canaries the checker did not flag (seed {seed}): {missed:?}");
}
