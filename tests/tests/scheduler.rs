//! The scheduler against a real redis-server: once per tick across skewed replicas, no
//! self-overlap, crash recovery at lease expiry, graceful shutdown (call and SIGTERM), errors
//! and panics, missed slots, and DST on computed schedules.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool_redis::redis;
use lock_core::{LockClient, distributed_lock};
use lock_scheduler::chrono::{DateTime, DurationRound, TimeDelta, TimeZone, Utc};
use lock_scheduler::{
    CatchUp, Job, OffsetClock, RunOutcome, RunReport, Schedule, ScheduleError, Scheduler, SchedulerError,
    SchedulerHandle,
};
use tests::harness::{RedisServer, init_tracing, wait_until};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::broadcast::error::RecvError;

// ---------------------------------------------------------------------------------------------
// helpers

fn client(server: &RedisServer, instance: &str) -> LockClient {
    client_with(server, instance, Duration::from_secs(30))
}

fn client_with(server: &RedisServer, instance: &str, watchdog_lease: Duration) -> LockClient {
    LockClient::builder()
        .url(server.url())
        .instance_id(instance)
        .watchdog_lease(watchdog_lease)
        .command_timeout(Duration::from_millis(500))
        .build()
        .expect("valid client configuration")
}

type Reports = Arc<Mutex<Vec<RunReport>>>;

/// Collects every report of `scheduler` (subscribed before it starts) into a shared list.
fn collect(scheduler: &Scheduler) -> Reports {
    let reports: Reports = Arc::default();
    let (sink, mut rx) = (reports.clone(), scheduler.subscribe());
    tokio::spawn(async move {
        loop {
            match rx.recv().await {
                Ok(report) => sink.lock().expect("reports lock").push(report),
                Err(RecvError::Lagged(n)) => panic!("a report collector lagged by {n}"),
                Err(RecvError::Closed) => break,
            }
        }
    });
    reports
}

async fn start(scheduler: Scheduler) -> (SchedulerHandle, Reports) {
    let reports = collect(&scheduler);
    (scheduler.start().await.expect("scheduler starts"), reports)
}

fn of_job<'a>(reports: &'a [RunReport], job: &'a str) -> impl Iterator<Item = &'a RunReport> + 'a {
    reports.iter().filter(move |r| r.job == job)
}

fn snapshot(reports: &Reports) -> Vec<RunReport> {
    reports.lock().expect("reports lock").clone()
}

async fn redis_cmd<T: redis::FromRedisValue>(client: &LockClient, args: &[&str]) -> anyhow::Result<T> {
    let mut conn = client.pool().ok_or_else(|| anyhow::anyhow!("a single-node client"))?.get().await?;
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    Ok(cmd.query_async(&mut conn).await?)
}

/// A spawned `scheduler_replica` process with line access to its stdout.
struct ChildReplica {
    child: Child,
    stdout: Lines<BufReader<ChildStdout>>,
    seen: Vec<String>,
}

impl ChildReplica {
    fn spawn(
        server: &RedisServer,
        instance: &str,
        key: &str,
        job_ms: u64,
        lease_ms: u64,
        grace_ms: u64,
    ) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_scheduler_replica"))
            .args([server.url(), instance.into(), key.into()])
            .args([job_ms.to_string(), lease_ms.to_string(), grace_ms.to_string()])
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn scheduler_replica");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        ChildReplica { child, stdout, seen: Vec::new() }
    }

    /// The next stdout line starting with `prefix` (earlier lines are kept in `seen`).
    async fn expect_line(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let line = tokio::time::timeout_at(deadline, self.stdout.next_line())
                .await
                .unwrap_or_else(|_| panic!("no `{prefix}` line within {timeout:?}; saw {:?}", self.seen))
                .expect("read child stdout")
                .unwrap_or_else(|| panic!("child exited before printing `{prefix}`; saw {:?}", self.seen));
            self.seen.push(line.clone());
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.trim().to_owned();
            }
        }
    }
}

/// A child's stderr, read line by line in the background as it is written.
struct StderrLines {
    rx: tokio::sync::mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
}

impl StderrLines {
    fn follow(child: &mut Child) -> Self {
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        StderrLines { rx, seen: Vec::new() }
    }

    /// The next line containing `needle`.
    async fn expect(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let line = tokio::time::timeout_at(deadline, self.rx.recv())
                .await
                .unwrap_or_else(|_| {
                    panic!("no stderr line with `{needle}` within {timeout:?}; saw {:#?}", self.seen)
                })
                .unwrap_or_else(|| panic!("stderr closed before `{needle}`; saw {:#?}", self.seen));
            self.seen.push(line.clone());
            if line.contains(needle) {
                return line;
            }
        }
    }

    /// Every line, once the child has closed its stderr.
    async fn all(mut self) -> Vec<String> {
        while let Ok(Some(line)) = tokio::time::timeout(Duration::from_secs(10), self.rx.recv()).await {
            self.seen.push(line);
        }
        self.seen
    }
}

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
}

fn rfc3339(times: &[DateTime<lock_scheduler::Tz>]) -> Vec<String> {
    times.iter().map(DateTime::to_rfc3339).collect()
}

// ---------------------------------------------------------------------------------------------
// once per tick

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_skewed_replicas_run_each_tick_exactly_once() {
    init_tracing();
    let server = RedisServer::start();
    // Replica clocks 200 ms behind, exact, and 200 ms ahead: fire times spread over 400 ms.
    let offsets = [-200, 0, 200];
    let mut replicas = Vec::new();
    for (i, offset) in offsets.into_iter().enumerate() {
        let client = client(&server, &format!("pod-{}", i + 1));
        let redis = client.clone();
        let job = Job::with_context("count", "* * * * * *", move |ctx| {
            let redis = redis.clone();
            async move {
                // Counted outside the scheduler: one INCR per run of a tick.
                let tick = ctx.tick().to_string();
                redis_cmd::<i64>(&redis, &["INCR", &format!("runs:{tick}")]).await?;
                redis_cmd::<i64>(&redis, &["RPUSH", &format!("ran-by:{tick}"), ctx.instance()]).await?;
                tokio::time::sleep(Duration::from_millis(5)).await;
                anyhow::Ok(())
            }
        })
        .lock("lock:count");
        let scheduler = Scheduler::builder()
            .client(client)
            .clock(OffsetClock::new(TimeDelta::milliseconds(offset)))
            .job(job)
            .build()
            .unwrap();
        replicas.push(start(scheduler).await);
    }

    // Wait for 9 ticks that every replica has settled.
    let settled_ticks = |replicas: &[(SchedulerHandle, Reports)]| -> BTreeSet<i64> {
        let per_replica: Vec<BTreeSet<i64>> =
            replicas.iter().map(|(_, r)| snapshot(r).iter().map(|r| r.tick).collect()).collect();
        per_replica[0].iter().copied().filter(|t| per_replica.iter().all(|s| s.contains(t))).collect()
    };
    assert!(
        wait_until(Duration::from_secs(25), || settled_ticks(&replicas).len() >= 9).await,
        "9 ticks settled on all replicas"
    );
    let ticks = settled_ticks(&replicas);
    let mut all = Vec::new();
    for (handle, reports) in replicas {
        handle.shutdown().await;
        all.extend(snapshot(&reports));
    }

    // Every tick that ran anywhere ran exactly once (including partially observed ones).
    let keys: Vec<String> = server.cli(&["KEYS", "runs:*"]).lines().map(str::to_owned).collect();
    for key in &keys {
        assert_eq!(
            server.cli(&["GET", key]),
            "1",
            "{key} ran once; ran by {}",
            server.cli(&["LRANGE", &key.replace("runs", "ran-by"), "0", "-1"])
        );
    }
    // Every settled tick: consecutive seconds, slots on whole seconds, one run, counted in Redis.
    let ticks: Vec<i64> = ticks.into_iter().collect();
    assert!(ticks.windows(2).all(|w| w[1] - w[0] == 1000), "consecutive seconds: {ticks:?}");
    for &tick in &ticks {
        assert_eq!(tick % 1000, 0, "slots come from the schedule, not from the (skewed) clocks");
        assert_eq!(server.cli(&["GET", &format!("runs:{tick}")]), "1", "tick {tick} ran exactly once");
        let here: Vec<&RunReport> = all.iter().filter(|r| r.tick == tick).collect();
        assert_eq!(here.len(), 3, "each replica settled tick {tick} once: {here:#?}");
        let ran: Vec<&&RunReport> = here.iter().filter(|r| r.outcome == RunOutcome::Ran).collect();
        assert_eq!(ran.len(), 1, "tick {tick}: {here:#?}");
        assert_eq!(server.cli(&["LRANGE", &format!("ran-by:{tick}"), "0", "-1"]), ran[0].instance);
        assert!(
            here.iter().all(|r| matches!(
                r.outcome,
                RunOutcome::Ran | RunOutcome::SkippedTickDone | RunOutcome::SkippedHeld
            )),
            "{here:#?}"
        );
    }
    let last: i64 = server.cli(&["GET", "{lock:count}:tick"]).parse().unwrap();
    assert!(last >= *ticks.last().unwrap(), "the last claimed tick is in Redis");

    // The replica preferred for a tick (rendezvous over job, tick and the live replicas)
    // claims it at once and the others only after the claim grace, so which replica runs a
    // tick follows the preference, not the clocks: pod-3, whose clock is 200 ms ahead, fires
    // first every time and would run every tick if all replicas claimed at once. Preferred for
    // all 9 ticks by chance: (1/3)^9. (How late slots fire is schedbench's start lag, tracked
    // in BENCHMARKS.md, not a test's timing.)
    let winners: BTreeSet<&str> = all
        .iter()
        .filter(|r| ticks.contains(&r.tick) && r.outcome == RunOutcome::Ran)
        .map(|r| r.instance.as_str())
        .collect();
    eprintln!("ticks {ticks:?} ran on {winners:?}");
    assert!(winners.len() > 1, "one replica ran every tick: {winners:?}");
    // Fired on the slot by each replica's own clock, not polled for: within the claim grace,
    // past which a slot is no longer its preferred replica's to claim.
    assert!(all.iter().all(|r| r.lateness < Duration::from_millis(500)), "{all:#?}");
}

#[distributed_lock(key = "lock:annotated", skip_if_held, client = client)]
async fn annotated_job(client: &LockClient, ctx: lock_scheduler::RunContext) -> anyhow::Result<()> {
    redis_cmd::<i64>(client, &["INCR", &format!("annotated:{}", ctx.tick())]).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotated_fn_claims_the_tick_itself() {
    init_tracing();
    let server = RedisServer::start();
    let mut replicas = Vec::new();
    for (instance, offset) in [("pod-a", 0), ("pod-b", -300)] {
        let client = client(&server, instance);
        let lock_client = client.clone();
        let job = Job::with_context("annotated", "* * * * * *", move |ctx| {
            let client = lock_client.clone();
            async move { annotated_job(&client, ctx).await }
        });
        let scheduler = Scheduler::builder()
            .client(client)
            .clock(OffsetClock::new(TimeDelta::milliseconds(offset)))
            .job(job)
            .build()
            .unwrap();
        replicas.push(start(scheduler).await);
    }
    let ticks_on_both = |replicas: &[(SchedulerHandle, Reports)]| {
        let a: BTreeSet<i64> = snapshot(&replicas[0].1).iter().map(|r| r.tick).collect();
        let b: BTreeSet<i64> = snapshot(&replicas[1].1).iter().map(|r| r.tick).collect();
        a.intersection(&b).copied().collect::<Vec<_>>()
    };
    assert!(wait_until(Duration::from_secs(10), || ticks_on_both(&replicas).len() >= 3).await);
    let ticks = ticks_on_both(&replicas);
    let mut all = Vec::new();
    for (handle, reports) in replicas {
        handle.shutdown().await;
        all.extend(snapshot(&reports));
    }
    for tick in ticks {
        assert_eq!(server.cli(&["GET", &format!("annotated:{tick}")]), "1");
        let mut outcomes: Vec<&str> =
            all.iter().filter(|r| r.tick == tick).map(|r| r.outcome.label()).collect();
        outcomes.sort();
        assert_eq!(outcomes, ["ran", "skipped: tick done"], "tick {tick}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_longer_than_its_period_never_overlaps_itself() {
    init_tracing();
    let server = RedisServer::start();
    let in_flight = Arc::new(AtomicUsize::new(0));
    let max_in_flight = Arc::new(AtomicUsize::new(0));
    let completed = Arc::new(AtomicUsize::new(0));
    let mut replicas = Vec::new();
    for (instance, offset) in [("pod-1", 0), ("pod-2", -300)] {
        let (in_flight, max_in_flight, completed) =
            (in_flight.clone(), max_in_flight.clone(), completed.clone());
        let job = Job::new("slow", "* * * * * *", move || {
            let (in_flight, max_in_flight, completed) =
                (in_flight.clone(), max_in_flight.clone(), completed.clone());
            async move {
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                max_in_flight.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1600)).await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                completed.fetch_add(1, Ordering::SeqCst);
            }
        })
        .lock("lock:slow");
        let scheduler = Scheduler::builder()
            .client(client(&server, instance))
            .clock(OffsetClock::new(TimeDelta::milliseconds(offset)))
            .job(job)
            .build()
            .unwrap();
        replicas.push(start(scheduler).await);
    }
    assert!(wait_until(Duration::from_secs(10), || completed.load(Ordering::SeqCst) >= 2).await);
    let mut all = Vec::new();
    for (handle, reports) in replicas {
        handle.shutdown().await;
        all.extend(snapshot(&reports));
    }
    assert_eq!(max_in_flight.load(Ordering::SeqCst), 1, "never two runs at once, on any replica");
    let skipped_running = all.iter().filter(|r| r.outcome == RunOutcome::SkippedStillRunning).count();
    let skipped_held = all.iter().filter(|r| r.outcome == RunOutcome::SkippedHeld).count();
    assert!(skipped_running >= 1, "the runner's own replica skipped ticks during its run: {all:#?}");
    assert!(skipped_held >= 1, "the other replica found the lock held: {all:#?}");
    let mut ran_ticks: Vec<i64> =
        all.iter().filter(|r| r.outcome == RunOutcome::Ran).map(|r| r.tick).collect();
    ran_ticks.sort();
    assert!(
        ran_ticks.windows(2).all(|w| w[1] - w[0] >= 2000),
        "runs 1.6 s long are >= 2 ticks apart: {ran_ticks:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// crashes and shutdown

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_dying_mid_run_frees_the_lock_at_lease_expiry_and_another_runs_a_later_tick() {
    init_tracing();
    let server = RedisServer::start();
    let lease = Duration::from_millis(1000);
    // The crashing replica: its job would take a minute.
    let mut crashing =
        ChildReplica::spawn(&server, "pod-crash", "lock:crash", 60_000, lease.as_millis() as u64, 5_000);
    let crash_tick: i64 = crashing.expect_line("started ", Duration::from_secs(10)).await.parse().unwrap();
    assert!(server.cli(&["GET", "lock:crash"]).starts_with("pod-crash:"), "the token names the instance");

    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    let scheduler = Scheduler::builder()
        .client(client_with(&server, "pod-survivor", lease))
        .job(
            Job::new("replica-job", "* * * * * *", move || {
                counter.fetch_add(1, Ordering::SeqCst);
                async {}
            })
            .lock("lock:crash"),
        )
        .build()
        .unwrap();
    let (survivor, reports) = start(scheduler).await;
    // While the crashing replica lives (its watchdog renewing), the survivor skips.
    assert!(
        wait_until(Duration::from_secs(5), || snapshot(&reports)
            .iter()
            .any(|r| r.outcome == RunOutcome::SkippedHeld))
        .await
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0);

    crashing.child.kill().await.expect("kill the crashing replica");
    let killed_at = Instant::now();
    let killed_at_wall = Utc::now();
    assert!(
        server.cli(&["GET", "lock:crash"]).starts_with("pod-crash:"),
        "a killed holder does not release: the lock frees at lease expiry"
    );
    assert!(
        wait_until(Duration::from_secs(5), || snapshot(&reports)
            .iter()
            .any(|r| r.outcome == RunOutcome::Ran))
        .await,
        "a later tick runs on the survivor: {:#?}",
        snapshot(&reports)
    );
    let freed_after = killed_at.elapsed();
    survivor.shutdown().await;

    let reports = snapshot(&reports);
    let first_run = reports.iter().find(|r| r.outcome == RunOutcome::Ran).unwrap();
    assert!(first_run.tick > crash_tick, "the crashed tick is not re-run");
    assert!(first_run.fired_at > killed_at_wall - TimeDelta::milliseconds(50), "not before the crash");
    // Freed by lease expiry (at most the 1 s lease after the last renewal), then the next tick
    // (<= 1 s), plus the claim grace when the dead replica, still a member until its
    // membership lapses, is that tick's preferred replica; 0.5 s for scheduling.
    let bound =
        lease + Duration::from_secs(1) + lock_scheduler::DEFAULT_CLAIM_GRACE + Duration::from_millis(500);
    assert!(freed_after < bound, "freed after {freed_after:?} (bound {bound:?})");
    assert!(
        reports.iter().filter(|r| r.tick < first_run.tick).all(|r| r.outcome == RunOutcome::SkippedHeld),
        "{reports:#?}"
    );
    assert_eq!(server.cli(&["GET", "lock:crash"]), "(nil)", "the survivor released it");
}

/// The issue-25 scenario: 3 replica processes, a 1.5 s job on `*/2`, kill -9 of the replica
/// running it. Once the killed replica's liveness lease has lapsed (6 s, lock-core's default)
/// it is no longer preferred anywhere, so every later slot runs once, at once (not a claim
/// grace late, which made a 1.5 s run overlap the next slot and lose it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_mid_run_stops_being_preferred_and_no_later_slot_is_lost() {
    init_tracing();
    let server = RedisServer::start();
    // (replica, tick, wall ms its start was read)
    let starts: Arc<Mutex<Vec<(usize, i64, i64)>>> = Arc::default();
    let mut children = Vec::new();
    for i in 0..3 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_scheduler_replica"))
            .args([server.url(), format!("pod-{i}"), "lock:takeover".into()])
            .args(["1500", "6000", "1000", "*/2 * * * * *"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn scheduler_replica");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let starts = starts.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stdout.next_line().await {
                if let Some(tick) = line.strip_prefix("started ").and_then(|t| t.trim().parse().ok()) {
                    starts.lock().expect("starts").push((i, tick, Utc::now().timestamp_millis()));
                }
            }
        });
        children.push(child);
    }
    // A run after all three announced themselves (3 s: the announcements are every 2 s).
    let after = Utc::now().timestamp_millis() + 3000;
    let running = || starts.lock().expect("starts").iter().find(|s| s.1 >= after).map(|s| s.0);
    assert!(wait_until(Duration::from_secs(10), || running().is_some()).await, "a run started");
    let victim = running().expect("a run started");
    children[victim].start_kill().expect("kill -9 the running replica");
    let killed_ms = Utc::now().timestamp_millis();
    // Slots from one liveness TTL (6 s) plus 1.5 s after the kill, for 8 s: four slots.
    let from = killed_ms + 7500;
    let slots: Vec<i64> = ((from / 2000 + 1) * 2000..from + 8000).step_by(2000).collect();
    let last = *slots.last().expect("slots");
    assert!(
        wait_until(Duration::from_secs(25), || starts.lock().expect("starts").iter().any(|s| s.1 == last))
            .await,
        "the last slot ran: {:?}",
        starts.lock().expect("starts")
    );
    let starts = starts.lock().expect("starts").clone();
    let mut seen = BTreeSet::new();
    for (_, tick, _) in &starts {
        assert!(seen.insert(*tick), "tick {tick} ran twice: {starts:?}");
    }
    for slot in &slots {
        let run = starts.iter().find(|s| s.1 == *slot);
        let Some((replica, _, at)) = run else { panic!("slot {slot} was lost: {starts:?}") };
        assert_ne!(*replica, victim, "the killed replica ran slot {slot}");
        // The default claim grace is 500 ms: a run that late was deferred, its preferred
        // replica being the dead one.
        assert!(at - slot < 500, "slot {slot} started {} ms late on pod-{replica}: {starts:?}", at - slot);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_running_job_finish_then_releases_its_lock() {
    init_tracing();
    let server = RedisServer::start();
    // A 30 s watchdog lease: the lock must be released at shutdown, not expire.
    let mut replica = ChildReplica::spawn(&server, "pod-term", "lock:term", 1500, 30_000, 10_000);
    let tick = replica.expect_line("started ", Duration::from_secs(10)).await;
    assert!(server.cli(&["GET", "lock:term"]).starts_with("pod-term:"));

    let pid = replica.child.id().expect("running").to_string();
    let status = std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let signalled = Instant::now();

    assert_eq!(
        replica.expect_line("finished ", Duration::from_secs(5)).await,
        tick,
        "the running job finished"
    );
    let stopped = replica.expect_line("stopped ", Duration::from_secs(5)).await;
    assert_eq!(stopped, "finished=1 cancelled=0");
    let status = tokio::time::timeout(Duration::from_secs(5), replica.child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "clean exit: {status}");
    assert!(signalled.elapsed() < Duration::from_secs(3), "took {:?}", signalled.elapsed());
    assert_eq!(server.cli(&["GET", "lock:term"]), "(nil)", "released at shutdown, not left to expire");
    assert!(
        !replica.seen.iter().any(|l| l.starts_with("started ") && l != &format!("started {tick}")),
        "{:?}",
        replica.seen
    );

    // Every log line carries the instance; each run has its span fields.
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut replica.child.stderr.take().unwrap(), &mut stderr)
        .await
        .unwrap();
    let ours: Vec<&str> = stderr.lines().filter(|l| l.contains(" lock_scheduler::")).collect();
    assert!(!ours.is_empty(), "{stderr}");
    assert!(ours.iter().all(|l| l.contains("instance=pod-term")), "{stderr}");
    let ran = ours.iter().find(|l| l.contains("job ran")).unwrap_or_else(|| panic!("{stderr}"));
    for field in ["job_run{", "job=replica-job", "tick=", "outcome=", "duration_ms="] {
        assert!(ran.contains(field), "{field} in {ran}");
    }
    assert!(stderr.contains("SIGTERM received"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_the_running_job_then_releases_its_lock() {
    init_tracing();
    let server = RedisServer::start();
    let (started, finished, runs) =
        (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let (s, f, n) = (started.clone(), finished.clone(), runs.clone());
    let scheduler = Scheduler::builder()
        .client(client(&server, "pod-1"))
        .shutdown_grace(Duration::from_secs(5))
        .job(
            Job::new("graceful", "* * * * * *", move || {
                let (s, f, n) = (s.clone(), f.clone(), n.clone());
                async move {
                    n.fetch_add(1, Ordering::SeqCst);
                    s.store(true, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1200)).await;
                    f.store(true, Ordering::SeqCst);
                }
            })
            .lock("lock:graceful"),
        )
        .build()
        .unwrap();
    let (handle, _reports) = start(scheduler).await;
    assert!(wait_until(Duration::from_secs(5), || started.load(Ordering::SeqCst)).await);
    assert!(server.cli(&["GET", "lock:graceful"]).starts_with("pod-1:"));

    let t = Instant::now();
    let report = handle.shutdown().await;
    assert!(finished.load(Ordering::SeqCst), "shutdown returned only after the job finished");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(report.finished, ["graceful"]);
    assert!(report.cancelled.is_empty());
    assert_eq!(server.cli(&["GET", "lock:graceful"]), "(nil)", "released");

    // Stopped firing: no run during the next 1.5 s (this sleep is the thing under test).
    let runs_at_shutdown = runs.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(runs.load(Ordering::SeqCst), runs_at_shutdown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_cancels_a_job_past_the_grace_period_and_releases_its_lock() {
    init_tracing();
    let server = RedisServer::start();
    let (started, finished) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let (s, f) = (started.clone(), finished.clone());
    let scheduler = Scheduler::builder()
        .client(client(&server, "pod-1"))
        .shutdown_grace(Duration::from_millis(300))
        .job(
            Job::new("stuck", "* * * * * *", move || {
                let (s, f) = (s.clone(), f.clone());
                async move {
                    s.store(true, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    f.store(true, Ordering::SeqCst);
                }
            })
            .lock("lock:stuck"),
        )
        .build()
        .unwrap();
    let (handle, reports) = start(scheduler).await;
    assert!(wait_until(Duration::from_secs(5), || started.load(Ordering::SeqCst)).await);

    let t = Instant::now();
    let report = handle.shutdown().await;
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(280) && took < Duration::from_millis(1500), "{took:?}");
    assert_eq!(report.cancelled, ["stuck"]);
    assert!(!finished.load(Ordering::SeqCst));
    // Released by the cancelled run's guard, well before the 30 s lease.
    assert!(wait_until(Duration::from_secs(1), || server.cli(&["GET", "lock:stuck"]) == "(nil)").await);
    assert!(
        wait_until(Duration::from_secs(1), || snapshot(&reports)
            .iter()
            .any(|r| r.outcome == RunOutcome::Cancelled))
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_shutdown_cancels_running_jobs_at_once_and_releases_their_locks() {
    init_tracing();
    let server = RedisServer::start();
    let started = Arc::new(AtomicBool::new(false));
    let s = started.clone();
    let scheduler = Scheduler::builder()
        .client(client(&server, "pod-1"))
        .shutdown_grace(Duration::from_secs(60))
        .job(
            Job::new("long", "* * * * * *", move || {
                let s = s.clone();
                async move {
                    s.store(true, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
            })
            .lock("lock:long"),
        )
        .build()
        .unwrap();
    let (handle, reports) = start(scheduler).await;
    assert!(wait_until(Duration::from_secs(5), || started.load(Ordering::SeqCst)).await);
    assert_eq!(handle.running_jobs(), ["long"]);
    assert_eq!(handle.shutdown_grace(), Duration::from_secs(60));

    // Forced 200 ms into a 60 s grace period.
    let t = Instant::now();
    let report = handle.shutdown_forced_by(tokio::time::sleep(Duration::from_millis(200))).await;
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(190) && took < Duration::from_secs(5), "{took:?}");
    assert_eq!(report.cancelled, ["long"]);
    assert!(report.forced);
    // The release was flushed before shutdown returned.
    assert_eq!(server.cli(&["GET", "lock:long"]), "(nil)", "released, not left to its 30 s lease");
    assert!(
        wait_until(Duration::from_secs(1), || snapshot(&reports)
            .iter()
            .any(|r| r.outcome == RunOutcome::Cancelled))
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_says_at_once_what_it_waits_for_and_a_second_sigterm_forces_the_exit() {
    init_tracing();
    let server = RedisServer::start();
    // A job of a minute, a grace of 30 s and a lease of 30 s: only the second signal ends it
    // quickly, and only a release (not expiry) frees the lock within the test.
    let mut replica = ChildReplica::spawn(&server, "pod-force", "lock:force", 60_000, 30_000, 30_000);
    let mut stderr = StderrLines::follow(&mut replica.child);
    let _ = replica.expect_line("started ", Duration::from_secs(10)).await;
    assert!(server.cli(&["GET", "lock:force"]).starts_with("pod-force:"));

    let pid = replica.child.id().expect("running").to_string();
    let kill = |pid: &str| {
        let status = std::process::Command::new("kill").args(["-TERM", pid]).status().unwrap();
        assert!(status.success());
    };
    kill(&pid);
    // Said at once, not when the job ends: the signal, the running job count and the grace.
    let waiting = stderr.expect("SIGTERM received", Duration::from_secs(5)).await;
    for part in ["waiting up to 30s for 1 running job(s) (replica-job)", "again to cancel them now"] {
        assert!(waiting.contains(part), "{part:?} in {waiting}");
    }
    assert!(waiting.contains("instance=pod-force"), "{waiting}");
    assert!(server.cli(&["GET", "lock:force"]).starts_with("pod-force:"), "still running, still held");

    kill(&pid);
    let signalled = Instant::now();
    let forced = stderr.expect("received again", Duration::from_secs(5)).await;
    assert!(forced.contains("SIGTERM received again: stopping now"), "{forced}");
    let stopped = replica.expect_line("stopped ", Duration::from_secs(10)).await;
    assert_eq!(stopped, "finished=0 cancelled=1");
    let status = tokio::time::timeout(Duration::from_secs(10), replica.child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "clean exit: {status}");
    assert!(signalled.elapsed() < Duration::from_secs(8), "took {:?}", signalled.elapsed());
    assert!(!replica.seen.iter().any(|l| l.starts_with("finished ")), "cancelled: {:?}", replica.seen);
    assert_eq!(
        server.cli(&["GET", "lock:force"]),
        "(nil)",
        "released at the forced exit, not left to expire"
    );
    let lines = stderr.all().await;
    let cancelled = lines
        .iter()
        .find(|l| l.contains("the shutdown was forced: cancelled the running job and released its lock"));
    let cancelled = cancelled.unwrap_or_else(|| panic!("{lines:#?}"));
    assert!(cancelled.contains("job=replica-job") && cancelled.contains("instance=pod-force"), "{cancelled}");
}

// ---------------------------------------------------------------------------------------------
// errors and panics

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_and_panicking_jobs_keep_being_scheduled() {
    init_tracing();
    let server = RedisServer::start();
    let healthy_runs = Arc::new(AtomicUsize::new(0));
    let counter = healthy_runs.clone();
    let scheduler = Scheduler::builder()
        .client(client(&server, "pod-1"))
        .job(
            Job::new("fails", "* * * * * *", || async { Err::<(), _>(anyhow::anyhow!("boom")) })
                .lock("lock:fails"),
        )
        .job(
            Job::new("panics", "* * * * * *", || async {
                if true {
                    panic!("kaboom");
                }
            })
            .lock("lock:panics"),
        )
        .job(
            Job::new("healthy", "* * * * * *", move || {
                counter.fetch_add(1, Ordering::SeqCst);
                async {}
            })
            .lock("lock:healthy"),
        )
        .build()
        .unwrap();
    let (handle, reports) = start(scheduler).await;
    let failed_ticks = |job: &str| -> Vec<i64> {
        of_job(&snapshot(&reports), job)
            .filter(|r| matches!(r.outcome, RunOutcome::Failed(_)))
            .map(|r| r.tick)
            .collect()
    };
    // Counted from the reports (the collector may lag the runs, so the count of bodies started
    // would let the snapshot below miss the last one's report).
    let healthy_reported =
        || of_job(&snapshot(&reports), "healthy").filter(|r| r.outcome == RunOutcome::Ran).count();
    assert!(
        wait_until(Duration::from_secs(8), || failed_ticks("fails").len() >= 3
            && failed_ticks("panics").len() >= 3
            && healthy_reported() >= 3)
        .await,
        "{:#?}",
        snapshot(&reports)
    );
    handle.shutdown().await;

    let reports = snapshot(&reports);
    for (job, message) in [("fails", "boom"), ("panics", "panicked: kaboom")] {
        let runs: Vec<&RunReport> = of_job(&reports, job).collect();
        assert!(runs.iter().all(|r| r.outcome == RunOutcome::Failed(message.into())), "{job}: {runs:#?}");
        let ticks: Vec<i64> = runs.iter().map(|r| r.tick).collect();
        assert!(ticks.windows(2).all(|w| w[1] - w[0] == 1000), "{job} failed on every tick: {ticks:?}");
    }
    // The healthy job beside them ran on every tick too.
    let healthy: Vec<i64> =
        of_job(&reports, "healthy").filter(|r| r.outcome == RunOutcome::Ran).map(|r| r.tick).collect();
    assert!(healthy.windows(2).all(|w| w[1] - w[0] == 1000), "healthy ran on every tick: {healthy:?}");
    assert!(healthy.len() >= 3 && healthy_runs.load(Ordering::SeqCst) >= healthy.len(), "{healthy:?}");
    assert_eq!(server.cli(&["GET", "lock:panics"]), "(nil)", "a panicking run releases its lock");
}

// ---------------------------------------------------------------------------------------------
// missed slots

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_slots_are_caught_up_at_most_once() {
    init_tracing();
    let server = RedisServer::start();
    // Put the scheduler's clock at second 10 of a minute, so the next (minutely) slot is ~50 s away.
    let now = Utc::now();
    let target = now.duration_trunc(TimeDelta::minutes(1)).unwrap() + TimeDelta::seconds(10);
    let clock = OffsetClock::new(target - now);
    let runs: Arc<Mutex<Vec<i64>>> = Arc::default();
    let record = |runs: &Arc<Mutex<Vec<i64>>>| {
        let runs = runs.clone();
        move |ctx: lock_scheduler::RunContext| {
            runs.lock().unwrap().push(ctx.tick());
            async {}
        }
    };
    let scheduler = Scheduler::builder()
        .client(client(&server, "pod-1"))
        .clock(clock.clone())
        .job(Job::new("every-second", "* * * * * *", || async {}).lock("lock:every-second"))
        .job(Job::with_context("catch-up", "0 * * * * *", record(&runs)).lock("lock:catch-up"))
        .job(
            Job::with_context("never", "0 * * * * *", record(&runs))
                .lock("lock:never")
                .catch_up(CatchUp::Never),
        )
        .build()
        .unwrap();
    let (handle, reports) = start(scheduler).await;
    // Once a slot of the every-second job has run, the minutely drivers are long asleep,
    // re-reading the clock once a second (their next slot is ~50 s away).
    assert!(wait_until(Duration::from_secs(3), || !snapshot(&reports).is_empty()).await);

    // The clock steps forward 3 minutes (a stall, a suspended VM): slots M+1, M+2 and M+3 are
    // now ~10 s, 70 s and 130 s late.
    clock.set_offset(clock.offset() + TimeDelta::minutes(3));
    let stepped = Instant::now();
    let minute = target.duration_trunc(TimeDelta::minutes(1)).unwrap();
    let slot = |n: i64| (minute + TimeDelta::minutes(n)).timestamp_millis();
    assert!(
        wait_until(Duration::from_secs(5), || {
            let r = snapshot(&reports);
            of_job(&r, "catch-up").count() >= 2 && of_job(&r, "never").count() >= 1
        })
        .await,
        "{:#?}",
        snapshot(&reports)
    );
    // Noticed at the next reading of the clock (every second).
    assert!(stepped.elapsed() < Duration::from_millis(2500), "{:?}", stepped.elapsed());
    // Give a wrongly scheduled extra run the chance to show up (this wait is under test).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    handle.shutdown().await;

    let reports = snapshot(&reports);
    let catch_up: Vec<(i64, RunOutcome)> =
        of_job(&reports, "catch-up").map(|r| (r.tick, r.outcome.clone())).collect();
    assert_eq!(
        catch_up,
        [(slot(2), RunOutcome::Missed(2)), (slot(3), RunOutcome::Ran)],
        "only the latest is run"
    );
    let late = of_job(&reports, "catch-up").find(|r| r.outcome == RunOutcome::Ran).unwrap().lateness;
    assert!(late >= Duration::from_secs(9) && late < Duration::from_secs(13), "{late:?}");
    let never: Vec<(i64, RunOutcome)> =
        of_job(&reports, "never").map(|r| (r.tick, r.outcome.clone())).collect();
    assert_eq!(never, [(slot(3), RunOutcome::Missed(3))]);
    assert_eq!(*runs.lock().unwrap(), [slot(3)], "one late run in all");
    assert_eq!(server.cli(&["GET", "{lock:catch-up}:tick"]), slot(3).to_string());
}

// ---------------------------------------------------------------------------------------------
// computed schedules: DST, the frozen-offset gap, bad input

#[test]
fn a_0200_berlin_job_fires_at_0200_local_on_both_sides_of_each_dst_change() {
    let daily = Schedule::new("0 0 2 * * *", Some("Europe/Berlin")).unwrap();
    // Spring forward: 30 March 2025, 02:00 CET -> 03:00 CEST (02:00 does not exist).
    let spring = daily.upcoming(utc(2025, 3, 28, 12, 0, 0), 4);
    assert_eq!(
        rfc3339(&spring),
        [
            "2025-03-29T02:00:00+01:00",
            "2025-03-30T03:00:00+02:00", // the skipped hour: a fixed-time job runs at its end
            "2025-03-31T02:00:00+02:00",
            "2025-04-01T02:00:00+02:00",
        ]
    );
    let spring_utc: Vec<String> = spring.iter().map(|t| t.with_timezone(&Utc).to_rfc3339()).collect();
    assert_eq!(spring_utc[0], "2025-03-29T01:00:00+00:00");
    assert_eq!(spring_utc[2], "2025-03-31T00:00:00+00:00", "summer time: 02:00 local is 00:00 UTC");

    // Fall back: 26 October 2025, 03:00 CEST -> 02:00 CET (02:00-02:59 happen twice).
    let fall = daily.upcoming(utc(2025, 10, 24, 12, 0, 0), 3);
    assert_eq!(
        rfc3339(&fall),
        [
            "2025-10-25T02:00:00+02:00",
            "2025-10-26T02:00:00+02:00", // the repeated hour: a fixed-time job runs once, the first time
            "2025-10-27T02:00:00+01:00",
        ]
    );
    // Asked from inside the repeated hour (second pass), the day's run is not repeated.
    let second_pass = utc(2025, 10, 26, 1, 10, 0); // 02:10 CET
    assert_eq!(daily.next_after(second_pass).unwrap().to_rfc3339(), "2025-10-27T02:00:00+01:00");
}

#[test]
fn interval_jobs_skip_the_missing_hour_and_run_twice_in_the_repeated_one() {
    let quarter = Schedule::new("0 */30 * * * *", Some("Europe/Berlin")).unwrap();
    let spring = quarter.upcoming(utc(2025, 3, 30, 0, 0, 0), 4); // from 01:00 CET
    assert_eq!(
        rfc3339(&spring),
        [
            "2025-03-30T01:30:00+01:00",
            "2025-03-30T03:00:00+02:00",
            "2025-03-30T03:30:00+02:00",
            "2025-03-30T04:00:00+02:00"
        ]
    );
    let fall = quarter.upcoming(utc(2025, 10, 25, 23, 59, 0), 6); // from 01:59 CEST
    assert_eq!(
        rfc3339(&fall),
        [
            "2025-10-26T02:00:00+02:00",
            "2025-10-26T02:30:00+02:00",
            "2025-10-26T02:00:00+01:00",
            "2025-10-26T02:30:00+01:00",
            "2025-10-26T03:00:00+01:00",
            "2025-10-26T03:30:00+01:00",
        ]
    );
    let instants: Vec<DateTime<Utc>> = fall.iter().map(|t| t.with_timezone(&Utc)).collect();
    assert!(instants.windows(2).all(|w| w[1] - w[0] == TimeDelta::minutes(30)), "half-hourly in real time");

    // A fixed time inside the skipped hour runs at its end; once in the repeated hour.
    let half_two = Schedule::new("0 30 2 * * *", Some("Europe/Berlin")).unwrap();
    assert_eq!(
        rfc3339(&half_two.upcoming(utc(2025, 3, 29, 12, 0, 0), 2)),
        ["2025-03-30T03:00:00+02:00", "2025-03-31T02:30:00+02:00"]
    );
    assert_eq!(
        rfc3339(&half_two.upcoming(utc(2025, 10, 25, 12, 0, 0), 2)),
        ["2025-10-26T02:30:00+02:00", "2025-10-27T02:30:00+01:00"]
    );
    // New York: the gap is 02:00-02:59 in March, the repeat 01:00-01:59 in November.
    let ny = Schedule::new("0 0 2 * * *", Some("America/New_York")).unwrap();
    assert_eq!(
        rfc3339(&ny.upcoming(utc(2025, 3, 8, 12, 0, 0), 2)),
        ["2025-03-09T03:00:00-04:00", "2025-03-10T02:00:00-04:00"]
    );
    assert_eq!(
        rfc3339(&ny.upcoming(utc(2025, 11, 1, 12, 0, 0), 2)),
        ["2025-11-02T02:00:00-05:00", "2025-11-03T02:00:00-05:00"]
    );
}

#[test]
fn a_frozen_utc_offset_drifts_an_hour_after_a_dst_change_but_the_real_zone_does_not() {
    // tokio-cron-scheduler 0.15 evaluates a job in the zone's UTC offset at the time the job was
    // created (`FixedOffset`); for a Berlin job created in winter that is +01:00, as `Etc/GMT-1`.
    let frozen = Schedule::new("0 0 2 * * *", Some("Etc/GMT-1")).unwrap();
    let real = Schedule::new("0 0 2 * * *", Some("Europe/Berlin")).unwrap();
    let from = utc(2025, 3, 31, 12, 0, 0); // after the change
    let berlin = |t: &DateTime<lock_scheduler::Tz>| {
        t.with_timezone(&"Europe/Berlin".parse::<lock_scheduler::Tz>().unwrap()).format("%H:%M").to_string()
    };
    assert_eq!(
        frozen.upcoming(from, 2).iter().map(berlin).collect::<Vec<_>>(),
        ["03:00", "03:00"],
        "drifted"
    );
    assert_eq!(real.upcoming(from, 2).iter().map(berlin).collect::<Vec<_>>(), ["02:00", "02:00"]);
}

#[test]
fn an_invalid_cron_expression_or_time_zone_is_a_typed_error_naming_the_job() {
    // Builds lazily: no Redis is contacted.
    let client = LockClient::from_url("redis://127.0.0.1:1/").unwrap();
    let build = |job: Job| Scheduler::builder().client(client.clone()).job(job).build();

    let err = build(Job::new("report", "0 0 2 * *", || async {}).lock("lock:report")).unwrap_err();
    let SchedulerError::Schedule { job, source: ScheduleError::InvalidCron { expr, .. } } = &err else {
        panic!("{err:?}")
    };
    assert_eq!((job.as_str(), expr.as_str()), ("report", "0 0 2 * *"));
    // The message names the job; the cause is the source, printed once in the chain.
    assert_eq!(err.to_string(), "job `report`: invalid schedule");
    let chain = format!("{:#}", anyhow::Error::from(err));
    assert!(
        chain.starts_with("job `report`: invalid schedule: invalid cron expression `0 0 2 * *`"),
        "{chain}"
    );
    assert_eq!(chain.matches("invalid cron expression").count(), 1, "each cause once: {chain}");

    let err = build(Job::new("report", "0 61 2 * * *", || async {})).unwrap_err();
    let chain = format!("{:#}", anyhow::Error::from(err));
    assert_eq!(
        chain,
        "job `report`: invalid schedule: invalid cron expression `0 61 2 * * *`: \
         the minutes field `61` is out of range (minutes: 0-59)"
    );

    let err = build(Job::new("report", "0 0 2 * * *", || async {}).time_zone("Europe/Berlinn")).unwrap_err();
    assert!(
        matches!(&err, SchedulerError::Schedule { job, source: ScheduleError::InvalidTimeZone { tz } } if job == "report" && tz == "Europe/Berlinn"),
        "{err:?}"
    );
    let chain = format!("{:#}", anyhow::Error::from(err));
    assert!(chain.contains("job `report`: invalid schedule: unknown time zone `Europe/Berlinn`"), "{chain}");

    let err = build(Job::new("leap", "0 0 0 30 2 *", || async {})).unwrap_err();
    assert!(
        matches!(&err, SchedulerError::Schedule { source: ScheduleError::NeverFires { .. }, .. }),
        "{err:?}"
    );

    let err = Scheduler::builder()
        .client(client.clone())
        .job(Job::new("twice", "* * * * * *", || async {}))
        .job(Job::new("twice", "* * * * * *", || async {}))
        .build()
        .unwrap_err();
    assert!(matches!(&err, SchedulerError::DuplicateJob { job, .. } if job == "twice"), "{err:?}");

    let err = Scheduler::builder()
        .client(client.clone())
        .job(Job::new("import", "0 0 * * * *", || async {}).lock("lock:db"))
        .job(Job::new("report", "0 0 */6 * * *", || async {}).lock("lock:db"))
        .build()
        .unwrap_err();
    assert!(matches!(&err, SchedulerError::InvalidJob { job, .. } if job == "report"), "{err:?}");
    assert!(err.to_string().contains("already used by another job"), "{err}");

    let err =
        build(Job::new("keyless", "* * * * * *", || async {}).lock_options(Default::default())).unwrap_err();
    assert!(matches!(&err, SchedulerError::InvalidJob { job, .. } if job == "keyless"), "{err:?}");

    let ok =
        build(Job::new("report", "0 0 2 * * *", || async {}).time_zone("Europe/Berlin").lock("lock:report"))
            .unwrap();
    assert_eq!(ok.instance_id(), client.instance_id());
    assert_eq!(
        ok.schedule("report").unwrap().time_zone(),
        "Europe/Berlin".parse::<lock_scheduler::Tz>().unwrap()
    );
}

/// Pause / resume reach every replica: once paused, each replica reports its slots as
/// skipped: paused and none runs; the history records them; after resume one replica runs
/// each tick again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_job_is_skipped_on_every_replica_until_resumed() {
    init_tracing();
    let server = RedisServer::start();
    let mut replicas = Vec::new();
    for pod in ["pod-1", "pod-2"] {
        let job = Job::new("paused-job", "* * * * * *", || async { anyhow::Ok(()) }).lock("lock:paused-job");
        let scheduler = Scheduler::builder().client(client(&server, pod)).job(job).build().unwrap();
        replicas.push(start(scheduler).await);
    }
    let ran = |replicas: &[(SchedulerHandle, Reports)]| -> usize {
        replicas
            .iter()
            .map(|(_, r)| snapshot(r).iter().filter(|r| r.outcome == RunOutcome::Ran).count())
            .sum()
    };
    assert!(wait_until(Duration::from_secs(30), || ran(&replicas) >= 1).await, "a first run");

    let admin = client(&server, "admin");
    lock_scheduler::control::pause(&admin, "paused-job").await.expect("paused");
    assert!(
        lock_scheduler::control::pause_state(&admin, "paused-job").await.expect("state").paused.is_some()
    );
    // A tick that both replicas report as paused.
    let paused_ticks = |replicas: &[(SchedulerHandle, Reports)]| -> BTreeSet<i64> {
        let per: Vec<BTreeSet<i64>> = replicas
            .iter()
            .map(|(_, r)| {
                snapshot(r)
                    .iter()
                    .filter(|r| r.outcome == RunOutcome::SkippedPaused)
                    .map(|r| r.tick)
                    .collect()
            })
            .collect();
        per[0].intersection(&per[1]).copied().collect()
    };
    assert!(
        wait_until(Duration::from_secs(30), || paused_ticks(&replicas).len() >= 2).await,
        "two ticks paused on both replicas"
    );
    for &tick in &paused_ticks(&replicas) {
        for (_, reports) in &replicas {
            let here: Vec<RunReport> = snapshot(reports).into_iter().filter(|r| r.tick == tick).collect();
            assert_eq!(here.len(), 1, "{here:#?}");
            assert_eq!(here[0].outcome, RunOutcome::SkippedPaused, "{here:#?}");
        }
    }
    let history = lock_scheduler::control::history(&admin, "paused-job", 50).await.expect("history");
    assert!(history.iter().filter(|e| e.outcome == "skipped: paused").count() >= 4, "{history:#?}");

    assert!(replicas[0].0.resume("paused-job").await.expect("resumed"));
    let before = ran(&replicas);
    assert!(wait_until(Duration::from_secs(30), || ran(&replicas) > before).await, "runs again after resume");
    for (handle, _) in replicas {
        handle.shutdown().await;
    }
}
