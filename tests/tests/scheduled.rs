//! `#[scheduled]`: jobs declared on their functions, found at start-up, with state and a run
//! context, on cron and interval schedules; overrides from the environment and the builder.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_scheduler::{RunContext, Scheduler, SchedulerError, State, scheduled};
use tests::harness::{RedisServer, client, init_tracing, wait_until};

#[derive(Clone, Default)]
struct Counter(Arc<AtomicUsize>);

#[scheduled(every = "1s", group = "attr-smoke")]
async fn count_ticks(State(counter): State<Counter>, run: RunContext) {
    assert_eq!(run.job(), "count-ticks");
    counter.0.fetch_add(1, Ordering::SeqCst);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_job_runs_with_its_state_and_context() {
    init_tracing();
    let server = RedisServer::start();
    let counter = Counter::default();
    let scheduler = Scheduler::builder()
        .client(client(&server, "pod-1"))
        .group("attr-smoke")
        .state(counter.clone())
        .scheduled_jobs()
        .build()
        .expect("scheduler");
    assert_eq!(scheduler.job_names().collect::<Vec<_>>(), ["count-ticks"]);
    let handle = scheduler.start().await.expect("start");
    assert!(wait_until(Duration::from_secs(10), || counter.0.load(Ordering::SeqCst) >= 2).await);
    handle.shutdown().await;
    let _ = count_ticks::job();
}

#[tokio::test]
async fn missing_state_is_an_error_naming_the_job_and_type() {
    let server = RedisServer::start();
    let err = Scheduler::builder()
        .client(client(&server, "pod-1"))
        .group("attr-smoke")
        .scheduled_jobs()
        .build()
        .expect_err("no Counter given");
    assert!(matches!(&err, SchedulerError::MissingState { job, .. } if job == "count-ticks"), "{err}");
    eprintln!("{err}");
}

/// A `declared_replica` process and the lines it prints, each with when it was read.
struct Replica {
    instance: String,
    child: std::process::Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<(String, std::time::Instant)>,
}

impl Replica {
    fn spawn(server: &RedisServer, instance: &str, env: &[(&str, &str)]) -> Replica {
        use std::io::BufRead;
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_declared_replica"));
        command.args([server.url(), instance.to_owned()]).stdout(std::process::Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("spawn declared_replica");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send((line, std::time::Instant::now())).is_err() {
                    break;
                }
            }
        });
        Replica { instance: instance.to_owned(), child, lines }
    }

    /// Lines until one equals `line`; panics if none within `within`.
    async fn until(&mut self, line: &str, within: Duration) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some((l, _))) if l == line => return seen,
                Ok(Some((l, _))) => seen.push(l),
                _ => panic!("{}: no {line:?} within {within:?}; saw {seen:?}", self.instance),
            }
        }
    }

    /// Every `ran` line read so far: (job, tick, instance, prefix, when read).
    fn runs(&mut self) -> Vec<(String, i64, String, String, std::time::Instant)> {
        let mut runs = Vec::new();
        while let Ok((line, at)) = self.lines.try_recv() {
            let f: Vec<&str> = line.split(' ').collect();
            if let ["ran", job, tick, instance, prefix] = f.as_slice() {
                runs.push((
                    (*job).to_owned(),
                    tick.parse().expect("tick"),
                    (*instance).to_owned(),
                    (*prefix).to_owned(),
                    at,
                ));
            }
        }
        runs
    }

    fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill").args([signal, &self.child.id().to_string()]).status();
        assert!(status.is_ok_and(|s| s.success()), "kill {signal} {}", self.instance);
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Each job's ticks from `runs`, asserting each ran once; sorted.
fn ticks_once(runs: &[(String, i64, String, String, std::time::Instant)], job: &str) -> Vec<i64> {
    let mut ticks: Vec<i64> = runs.iter().filter(|r| r.0 == job).map(|r| r.1).collect();
    ticks.sort_unstable();
    let mut unique = ticks.clone();
    unique.dedup();
    assert_eq!(ticks, unique, "{job}: a slot ran twice: {runs:?}");
    ticks
}

/// Three replica processes, a cron job and an interval job declared with `#[scheduled]`: every
/// slot from the first to the last runs exactly once, on one of them, with the state given to
/// the scheduler; the interval's slots sit at 1 s past each even second (offset 1 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_run_each_slot_of_a_cron_and_an_interval_job_once() {
    init_tracing();
    let server = RedisServer::start();
    let mut replicas: Vec<Replica> =
        (1..=3).map(|i| Replica::spawn(&server, &format!("pod-{i}"), &[])).collect();
    for r in &mut replicas {
        r.until("ready", Duration::from_secs(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(8)).await; // the run being observed
    let mut runs = Vec::new();
    for r in &mut replicas {
        r.signal("-TERM");
    }
    for r in &mut replicas {
        let _ = tokio::task::block_in_place(|| r.child.wait());
        runs.extend(r.runs());
    }
    runs.sort_by_key(|r| (r.1, r.0.clone()));
    for (job, tick, instance, prefix, _) in &runs {
        eprintln!("ran {job} {tick} {instance} {prefix}");
    }
    let cron = ticks_once(&runs, "declared-cron");
    let every = ticks_once(&runs, "declared-every");
    assert!(cron.len() >= 5 && every.len() >= 2, "{runs:?}");
    assert!(cron.windows(2).all(|w| w[1] - w[0] == 1000), "a cron slot was missed: {cron:?}");
    assert!(every.windows(2).all(|w| w[1] - w[0] == 2000), "an interval slot was missed: {every:?}");
    assert!(every.iter().all(|t| t % 2000 == 1000), "offset 1 s from each even second: {every:?}");
    assert!(runs.iter().all(|r| r.3 == "from-state"), "the state reached every run");
    let instances: std::collections::BTreeSet<&str> = runs.iter().map(|r| r.2.as_str()).collect();
    assert!(instances.len() >= 2, "runs spread over the replicas: {instances:?}");
}

/// The replica running an interval job is killed (SIGKILL): the others run every later slot of
/// it, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_kill_the_other_replicas_run_every_later_interval_slot_once() {
    init_tracing();
    let server = RedisServer::start();
    let mut replicas: Vec<Replica> = (1..=3)
        .map(|i| Replica::spawn(&server, &format!("pod-{i}"), &[("SCHEDULE_DECLARED_CRON", "-")]))
        .collect();
    for r in &mut replicas {
        r.until("ready", Duration::from_secs(20)).await;
    }
    // Kill the replica that runs the first interval slot seen.
    let victim = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut found = None;
        for (i, r) in replicas.iter_mut().enumerate() {
            if let Some(run) = r.runs().into_iter().find(|run| run.0 == "declared-every") {
                found = Some((i, run));
            }
        }
        if let Some(found) = found {
            break found;
        }
    };
    let (index, (_, killed_tick, instance, _, _)) = victim;
    replicas[index].signal("-KILL");
    let killed_at = std::time::Instant::now();
    eprintln!("killed {instance} after it ran slot {killed_tick}");
    tokio::time::sleep(Duration::from_secs(9)).await; // slots after the kill
    let mut runs = Vec::new();
    for (i, r) in replicas.iter_mut().enumerate() {
        if i != index {
            r.signal("-TERM");
            let _ = tokio::task::block_in_place(|| r.child.wait());
        }
        runs.extend(r.runs());
    }
    let after: Vec<_> = runs.into_iter().filter(|r| r.1 > killed_tick && r.0 == "declared-every").collect();
    let ticks = ticks_once(&after, "declared-every");
    eprintln!("after the kill: {:?}", after.iter().map(|r| (r.1, r.2.as_str())).collect::<Vec<_>>());
    assert!(after.iter().all(|r| r.2 != instance), "the killed replica ran nothing more");
    assert!(ticks.len() >= 4, "slots after the kill ran: {ticks:?}");
    assert_eq!(ticks[0], killed_tick + 2000, "the next slot after the kill ran");
    assert!(ticks.windows(2).all(|w| w[1] - w[0] == 2000), "every slot after the kill ran: {ticks:?}");
    assert!(killed_at.elapsed() < Duration::from_secs(60));
}

#[scheduled(every = "1s", name = "dupe", group = "dupe-group")]
async fn first_dupe() {}

#[scheduled(cron = "* * * * * *", name = "dupe", group = "dupe-group")]
async fn second_dupe() {}

/// Two declared jobs with one name: the build fails naming both functions.
#[tokio::test]
async fn two_jobs_with_one_name_are_an_error_naming_both_functions() {
    let server = RedisServer::start();
    let err = Scheduler::builder()
        .client(client(&server, "pod-1"))
        .group("dupe-group")
        .scheduled_jobs()
        .build()
        .expect_err("two jobs named dupe");
    let message = err.to_string();
    assert!(matches!(&err, SchedulerError::DuplicateJob { job, .. } if job == "dupe"), "{message}");
    assert!(
        message.contains("scheduled::first_dupe") && message.contains("scheduled::second_dupe"),
        "both functions named: {message}"
    );
    // One of them, added by hand, is fine: the attribute's constructor.
    let scheduler = Scheduler::builder()
        .client(client(&server, "pod-1"))
        .group("dupe-group")
        .job(first_dupe::job())
        .build()
        .expect("one job");
    assert_eq!(scheduler.job_names().collect::<Vec<_>>(), ["dupe"]);
    assert_eq!(scheduler.schedule("dupe").map(|s| s.expression().to_owned()).as_deref(), Some("every 1s"));
}

static LOCKED_RUNS: AtomicUsize = AtomicUsize::new(0);

/// Composed with `#[distributed_lock]` (below it): the job runs under that lock, which it takes
/// itself, and claims its tick with it.
#[scheduled(every = "1s", name = "locked-by-attribute", group = "locked")]
#[lock_scheduler::lock_core::distributed_lock(
    key = "lock:scheduled:attribute",
    skip_if_held,
    crate = "lock_scheduler::lock_core"
)]
async fn locked_by_attribute() {
    let held = lock_scheduler::lock_core::current().map(|lock| lock.key().to_owned());
    assert_eq!(held.as_deref(), Some("lock:scheduled:attribute"), "the body runs under the fn's own lock");
    LOCKED_RUNS.fetch_add(1, Ordering::SeqCst);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_with_distributed_lock_runs_under_its_own_lock_and_claims_its_ticks() {
    init_tracing();
    let server = RedisServer::start();
    let lock_client = client(&server, "pod-1");
    lock_client.install_default();
    let handle = Scheduler::builder()
        .client(lock_client)
        .group("locked")
        .scheduled_jobs()
        .build()
        .expect("scheduler")
        .start()
        .await
        .expect("start");
    assert!(wait_until(Duration::from_secs(10), || LOCKED_RUNS.load(Ordering::SeqCst) >= 2).await);
    handle.shutdown().await;
    let tick = server.cli(&["GET", &lock_scheduler::lock_core::schema::tick_key("lock:scheduled:attribute")]);
    assert!(tick.parse::<i64>().is_ok_and(|t| t % 1000 == 0), "the fn's lock claimed the tick: {tick}");
}

/// The builder's override replaces a declared schedule (and `-` turns a job off); one that does
/// not parse fails the build naming the job, where it came from and what is wrong.
#[tokio::test]
async fn the_builders_schedule_overrides_replace_or_turn_off_a_declared_job() {
    let server = RedisServer::start();
    let scheduler = Scheduler::builder()
        .client(client(&server, "pod-1"))
        .group("attr-smoke")
        .state(Counter::default())
        .scheduled_jobs()
        .schedule_override("count-ticks", "0 30 3 * * *")
        .time_zone_override("count-ticks", "Europe/Berlin")
        .build()
        .expect("scheduler");
    let schedule = scheduler.schedule("count-ticks").expect("the job");
    assert_eq!((schedule.expression(), schedule.time_zone().name()), ("0 30 3 * * *", "Europe/Berlin"));
    let off = Scheduler::builder()
        .client(client(&server, "pod-1"))
        .group("attr-smoke")
        .state(Counter::default())
        .scheduled_jobs()
        .schedule_override("count-ticks", "-")
        .build()
        .expect("scheduler");
    assert_eq!(off.job_names().count(), 0, "turned off");
    let err = Scheduler::builder()
        .client(client(&server, "pod-1"))
        .group("attr-smoke")
        .state(Counter::default())
        .scheduled_jobs()
        .schedule_override("count-ticks", "every 90")
        .build()
        .expect_err("a bad override");
    let chain = lock_scheduler::lock_core::ErrorChain(&err).to_string();
    assert!(
        chain.contains("count-ticks") && chain.contains("schedule_override") && chain.contains("\"90\""),
        "{chain}"
    );
}

/// An override from the environment that does not parse stops the replica at start-up with an
/// error naming the job, the variable and what is wrong.
#[tokio::test]
async fn a_bad_schedule_in_the_environment_is_a_start_up_error() {
    let server = RedisServer::start();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_declared_replica"))
        .args([server.url(), "pod-1".into()])
        .env("SCHEDULE_DECLARED_EVERY", "0 0 25 * * *")
        .output()
        .expect("run declared_replica");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "it refuses to start");
    for needle in
        ["declared-every", "SCHEDULE_DECLARED_EVERY", "the hours field `25` is out of range (hours: 0-23)"]
    {
        assert!(stderr.contains(needle), "{needle:?} in: {stderr}");
    }
}

/// Retries, pause on failure, overlap and jitter, declared in the attribute.
#[scheduled(
    every = "5s",
    name = "semantics-declared",
    group = "semantics",
    retry = "4 every 2s x3 max 1m jitter 0.2",
    pause_after_failures = "5",
    overlap = "buffer_one",
    jitter = "1500ms"
)]
async fn semantics_declared() {}

#[test]
fn retry_pause_overlap_and_jitter_declared_in_the_attribute_reach_the_job() {
    let job = format!("{:?}", semantics_declared::job());
    for expected in [
        "retry: Some(RetryPolicy { attempts: 4, base_delay: 2s, factor: 3.0, max_delay: 60s, jitter: 0.2 })",
        "pause_after_failures: Some(5)",
        "overlap: BufferOne",
        "jitter: 1.5s",
    ] {
        assert!(job.contains(expected), "`{expected}` in {job}");
    }
}

/// A time window, a run limit and the replace policy, declared in the attribute.
#[scheduled(
    every = "5s",
    name = "window-declared",
    group = "semantics",
    lock = "lock:window-declared",
    start_at = "2026-01-01T00:00:00Z",
    end_at = "2026-01-31T12:00:00+02:00",
    max_runs = 3,
    overlap = "replace"
)]
async fn window_declared() {}

#[test]
fn start_end_max_runs_and_replace_declared_in_the_attribute_reach_the_job() {
    let job = format!("{:?}", window_declared::job());
    for expected in [
        "start_at: Some(2026-01-01T00:00:00Z)",
        // The offset is applied at compile time: the job holds the instant, in UTC.
        "end_at: Some(2026-01-31T10:00:00Z)",
        "max_runs: Some(3)",
        "overlap: Replace",
    ] {
        assert!(job.contains(expected), "`{expected}` in {job}");
    }
}
