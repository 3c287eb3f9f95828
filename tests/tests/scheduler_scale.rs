//! The scheduler with many jobs and several replicas, against a real redis-server: exactly
//! once per job-tick, runs spread over the live replicas, a dead preferred replica costing only
//! the claim grace, every key written expiring, jobs added and removed at runtime, and the
//! maximum run time.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_scheduler::chrono::Utc;
use lock_scheduler::{Job, RunContext, RunOutcome, RunReport, Scheduler, SchedulerError, SchedulerHandle};
use tests::harness::{RedisServer, client, init_tracing, wait_until};
use tokio::sync::broadcast::error::RecvError;

type Reports = Arc<Mutex<Vec<RunReport>>>;

async fn start(scheduler: Scheduler) -> (SchedulerHandle, Reports) {
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
    (scheduler.start().await.expect("scheduler starts"), reports)
}

fn snapshot(reports: &Reports) -> Vec<RunReport> {
    reports.lock().expect("reports lock").clone()
}

/// Every run's (job, tick, instance, start lag), as seen by the jobs themselves.
type Runs = Arc<Mutex<Vec<(String, i64, String, Duration)>>>;

fn counted_job(name: &str, runs: &Runs) -> Job {
    let runs = runs.clone();
    Job::with_context(name.to_owned(), "* * * * * *", move |ctx: RunContext| {
        let lag = (Utc::now() - ctx.slot()).to_std().unwrap_or_default();
        runs.lock().expect("runs lock").push((
            ctx.job().to_owned(),
            ctx.tick(),
            ctx.instance().to_owned(),
            lag,
        ));
        std::future::ready(())
    })
    .lock(format!("lock:{name}"))
}

/// Starts `n` replicas of the same `jobs` jobs in `group`, and waits until each sees all.
async fn replicas(
    server: &RedisServer,
    group: &str,
    n: usize,
    jobs: usize,
    grace: Duration,
    runs: &Runs,
) -> Vec<(SchedulerHandle, Reports)> {
    let mut out = Vec::new();
    for i in 0..n {
        let mut builder = Scheduler::builder()
            .client(client(server, &format!("{group}-{i}")))
            .group(group)
            .claim_grace(grace)
            .shutdown_grace(Duration::from_secs(2));
        for j in 0..jobs {
            builder = builder.job(counted_job(&format!("{group}-job-{j}"), runs));
        }
        out.push(start(builder.build().expect("valid scheduler")).await);
    }
    assert!(
        wait_until(Duration::from_secs(10), || out.iter().all(|(h, _)| h.live_replicas().len() == n)).await,
        "every replica sees the {n} replicas: {:?}",
        out.iter().map(|(h, _)| h.live_replicas()).collect::<Vec<_>>()
    );
    out
}

/// Whether every replica has reported an outcome (ran, skipped as done, held or paused,
/// failed) for each of `jobs` at `tick`: each has dealt with that slot.
fn every_replica_reported(replicas: &[(SchedulerHandle, Reports)], jobs: &[&str], tick: i64) -> bool {
    replicas.iter().all(|(_, reports)| {
        let reports = reports.lock().expect("reports lock");
        jobs.iter().all(|job| reports.iter().any(|r| r.job == *job && r.tick == tick))
    })
}

/// Whole-second ticks in `[from, to)`.
fn ticks_between(from: i64, to: i64) -> Vec<i64> {
    let first = (from / 1000 + 1) * 1000;
    (first..to).step_by(1000).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_jobs_on_three_replicas_run_each_job_tick_once_spread_over_the_replicas() {
    init_tracing();
    let server = RedisServer::start();
    let runs: Runs = Arc::default();
    let replicas = replicas(&server, "spread", 3, 30, Duration::from_millis(500), &runs).await;
    // Five whole ticks once all replicas see each other.
    let from = Utc::now().timestamp_millis() + 1000;
    let ticks = ticks_between(from, from + 5000);
    let last = *ticks.last().expect("ticks");
    let settled = || runs.lock().expect("runs").iter().filter(|r| r.1 == last).count() == 30;
    assert!(wait_until(Duration::from_secs(15), settled).await, "the last tick ran for every job");
    // Past the grace of the last tick: late claims, if any, have happened.
    tokio::time::sleep(Duration::from_millis(700)).await;
    for (handle, _) in replicas {
        handle.shutdown().await;
    }

    let runs = runs.lock().expect("runs").clone();
    let mut per_job_tick: HashMap<(String, i64), Vec<String>> = HashMap::new();
    let mut per_replica: BTreeMap<String, usize> = BTreeMap::new();
    for (job, tick, instance, _) in &runs {
        if ticks.contains(tick) {
            per_job_tick.entry((job.clone(), *tick)).or_default().push(instance.clone());
            *per_replica.entry(instance.clone()).or_default() += 1;
        }
    }
    for j in 0..30 {
        for tick in &ticks {
            let by = per_job_tick.get(&(format!("spread-job-{j}"), *tick));
            assert_eq!(by.map(Vec::len), Some(1), "job {j} tick {tick} ran once: {by:?}");
        }
    }
    // 150 runs, 50 each if even: each replica runs a fair share (binomial spread is ±6 or so).
    assert_eq!(per_replica.len(), 3, "every replica ran some: {per_replica:?}");
    for (instance, n) in &per_replica {
        assert!((25..=75).contains(n), "{instance} ran {n} of 150: {per_replica:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_preferred_replica_costs_only_the_claim_grace() {
    init_tracing();
    let server = RedisServer::start();
    let runs: Runs = Arc::default();
    let grace = Duration::from_millis(300);
    let replicas = replicas(&server, "ghost", 1, 20, grace, &runs).await;
    // A replica that announced itself, then died: it stays a member until its announcement
    // lapses (here: for the whole test), and is preferred for about half of the job-ticks.
    let far = (Utc::now().timestamp_millis() + 600_000).to_string();
    server.cli(&["ZADD", &lock_scheduler::schema::members_key("ghost"), &far, "ghost-dead"]);
    let (handle, _) = &replicas[0];
    assert!(
        wait_until(Duration::from_secs(10), || handle.live_replicas().len() == 2).await,
        "the live replica sees the dead one: {:?}",
        handle.live_replicas()
    );
    let from = Utc::now().timestamp_millis() + 500;
    let ticks = ticks_between(from, from + 3000);
    let last = *ticks.last().expect("ticks");
    let settled = || runs.lock().expect("runs").iter().filter(|r| r.1 == last).count() == 20;
    assert!(wait_until(Duration::from_secs(15), settled).await, "every job ran its last tick");
    for (handle, _) in replicas {
        handle.shutdown().await;
    }

    let runs: Vec<_> = runs.lock().expect("runs").iter().filter(|r| ticks.contains(&r.1)).cloned().collect();
    assert_eq!(runs.len(), 20 * ticks.len(), "no job-tick lost to the dead replica");
    let (late, on_time): (Vec<_>, Vec<_>) = runs.iter().partition(|r| r.3 >= grace);
    assert!(
        !late.is_empty() && !on_time.is_empty(),
        "both kinds: {} late, {} on time",
        late.len(),
        on_time.len()
    );
    for (job, tick, _, lag) in &late {
        assert!(*lag < grace + Duration::from_secs(1), "{job} {tick}: {lag:?} late, more than the grace");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_the_scheduler_writes_expires() {
    init_tracing();
    let server = RedisServer::start();
    let runs: Runs = Arc::default();
    let replicas = replicas(&server, "ttl", 2, 5, Duration::from_millis(300), &runs).await;
    assert!(wait_until(Duration::from_secs(10), || runs.lock().expect("runs").len() >= 10).await, "jobs ran");
    // Keys while running (the members set is only there then), and after the shutdown.
    let check = |when: &str| {
        let keys = server.cli(&["KEYS", "*"]);
        let is_tick = |key: &str| lock_core::schema::lock_of_tick_key(key).is_some();
        assert!(keys.lines().any(is_tick), "{when}: tick keys exist: {keys}");
        for key in keys.lines().filter(|k| !k.is_empty()) {
            let ttl: i64 = server.cli(&["PTTL", key]).parse().expect("a PTTL");
            // -2: deleted since listed (a lock released, the members set emptied): fine.
            assert!(ttl > 0 || ttl == -2, "{when}: {key} has no expiry (PTTL {ttl})");
            if is_tick(key) {
                let week = lock_core::tick::TICK_TTL.as_millis() as i64;
                assert!(ttl <= week && ttl > week - 60_000, "{key}: PTTL {ttl}, not about TICK_TTL");
            }
        }
    };
    check("running");
    let members: i64 =
        server.cli(&["PTTL", &lock_scheduler::schema::members_key("ttl")]).parse().expect("PTTL");
    assert!((1..=10_000).contains(&members), "the members set expires within 10 s: {members}");
    for (handle, _) in replicas {
        handle.shutdown().await;
    }
    check("stopped");
}

/// A replica renews a history's expiry once a minute, not with every entry; a history deleted
/// in between (an operator's `DEL`, a flush) is created again with its expiry, never without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_deleted_while_its_job_runs_comes_back_with_an_expiry() {
    init_tracing();
    let server = RedisServer::start();
    let runs: Runs = Arc::default();
    let replicas = replicas(&server, "gone", 1, 1, Duration::from_millis(300), &runs).await;
    let key = lock_scheduler::schema::history_key("gone-job-0").expect("a valid job name");
    let exists = || server.cli(&["EXISTS", &key]) == "1";
    assert!(wait_until(Duration::from_secs(5), exists).await, "the history is written");
    server.cli(&["DEL", &key]);
    let deleted_at = runs.lock().expect("runs").len();
    assert!(
        wait_until(Duration::from_secs(5), || runs.lock().expect("runs").len() >= deleted_at + 2).await,
        "the job keeps running"
    );
    assert!(wait_until(Duration::from_secs(5), exists).await, "the history is written again");
    let ttl: i64 = server.cli(&["PTTL", &key]).parse().expect("a PTTL");
    assert!(ttl > 0, "the history came back without an expiry (PTTL {ttl})");
    let entries: i64 = server.cli(&["XLEN", &key]).parse().expect("XLEN");
    assert!(entries >= 1, "the runs after the deletion are recorded: {entries}");
    for (handle, _) in replicas {
        handle.shutdown().await;
    }
}

/// A history longer than [`lock_scheduler::HISTORY_LEN`] (a job that ran for a long time) is trimmed
/// to about that length by the first entry a replica writes to it, the one renewing its expiry
/// (the others do not trim: that would cost Redis on every run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_history_is_trimmed_when_a_replica_renews_it() {
    init_tracing();
    let server = RedisServer::start();
    let key = lock_scheduler::schema::history_key("trim-job-0").expect("a valid job name");
    let extra = lock_scheduler::HISTORY_LEN + 500;
    server.cli(&[
        "EVAL",
        "for i = 1, tonumber(ARGV[1]) do redis.call('XADD', KEYS[1], '*', 'tick', i) end",
        "1",
        &key,
        &extra.to_string(),
    ]);
    let len = || server.cli(&["XLEN", &key]).parse::<usize>().expect("XLEN");
    assert_eq!(len(), extra);
    let runs: Runs = Arc::default();
    let replicas = replicas(&server, "trim", 1, 1, Duration::from_millis(300), &runs).await;
    assert!(wait_until(Duration::from_secs(5), || len() < extra).await, "the history is trimmed");
    for (handle, _) in replicas {
        handle.shutdown().await;
    }
    // `MAXLEN ~` drops whole stream nodes (100 entries each by default); a few runs may
    // have been added since.
    let kept = len();
    assert!(
        (lock_scheduler::HISTORY_LEN..=lock_scheduler::HISTORY_LEN + 110).contains(&kept),
        "{kept} entries kept, about {} expected",
        lock_scheduler::HISTORY_LEN
    );
    let ttl: i64 = server.cli(&["PTTL", &key]).parse().expect("a PTTL");
    assert!(ttl > 0, "the trimmed history has its expiry (PTTL {ttl})");
}

/// The replicas not preferred for a slot read its jobs' claimed ticks together, then the pause
/// flags of those not claimed; one unreadable tick key (not a string) must not hide the other
/// jobs' pause flags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_job_stays_paused_beside_a_job_whose_tick_key_is_unreadable() {
    init_tracing();
    let server = RedisServer::start();
    let runs: Runs = Arc::default();
    let control = client(&server, "control");
    lock_scheduler::control::pause(&control, "bad-job-0").await.expect("pause");
    // The other job's tick key is a list: reading it fails (WRONGTYPE), as does its claim.
    server.cli(&["RPUSH", &lock_core::schema::tick_key("lock:bad-job-1"), "x"]);
    let replicas = replicas(&server, "bad", 2, 2, Duration::from_millis(200), &runs).await;
    let from = Utc::now().timestamp_millis();
    let ticks = ticks_between(from, from + 4000);
    let last = *ticks.last().expect("ticks");
    // Both replicas looked at the paused job's last slot (the preferred one at once, the other
    // after the grace, once the read of the ticks, the unreadable one among them, is answered).
    assert!(
        wait_until(Duration::from_secs(15), || every_replica_reported(&replicas, &["bad-job-0"], last)).await,
        "both replicas reported the paused job's last slot"
    );
    for (handle, _) in replicas {
        handle.shutdown().await;
    }
    let runs = runs.lock().expect("runs").clone();
    let paused: Vec<_> = runs.iter().filter(|r| r.0 == "bad-job-0").collect();
    assert!(paused.is_empty(), "the paused job ran: {paused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_added_and_removed_at_runtime_by_name() {
    init_tracing();
    let server = RedisServer::start();
    let runs: Runs = Arc::default();
    let scheduler = Scheduler::builder()
        .client(client(&server, "rt"))
        .group("runtime")
        .job(counted_job("first", &runs))
        .build()
        .expect("valid scheduler");
    let (handle, _) = start(scheduler).await;
    let ran = |job: &str| runs.lock().expect("runs").iter().filter(|r| r.0 == job).count();
    assert!(wait_until(Duration::from_secs(5), || ran("first") >= 1).await, "first runs");

    handle.add_job(counted_job("second", &runs)).expect("a new job is added");
    assert_eq!(handle.job_names(), ["first", "second"]);
    assert!(wait_until(Duration::from_secs(5), || ran("second") >= 2).await, "the added job runs");

    // Typed errors: a name taken, an invalid cron expression, a lock key taken.
    let duplicate = handle.add_job(counted_job("second", &runs));
    assert!(
        matches!(duplicate, Err(SchedulerError::DuplicateJob { ref job, .. }) if job == "second"),
        "{duplicate:?}"
    );
    let bad_cron = handle.add_job(Job::new("bad", "0 61 * * * *", || async {}));
    assert!(
        matches!(bad_cron, Err(SchedulerError::Schedule { ref job, .. }) if job == "bad"),
        "{bad_cron:?}"
    );
    let same_key = handle.add_job(Job::new("third", "* * * * * *", || async {}).lock("lock:first"));
    assert!(matches!(same_key, Err(SchedulerError::InvalidJob { .. })), "{same_key:?}");

    assert!(handle.remove_job("first"));
    assert!(!handle.remove_job("first"), "already removed");
    assert!(!handle.remove_job("never-there"));
    assert_eq!(handle.job_names(), ["second"]);
    // A run of "first" already dispatched when it was removed still finishes (documented):
    // let two ticks of "second" pass so that such a run is over, then count.
    let second_runs = ran("second");
    assert!(wait_until(Duration::from_secs(5), || ran("second") >= second_runs + 2).await);
    let first_runs = ran("first");
    let second_runs = ran("second");
    assert!(wait_until(Duration::from_secs(5), || ran("second") >= second_runs + 2).await);
    assert_eq!(ran("first"), first_runs, "a removed job does not fire again");

    // Re-adding a removed name works (it is free again).
    handle.add_job(counted_job("first", &runs)).expect("the name is free again");
    assert!(wait_until(Duration::from_secs(5), || ran("first") > first_runs).await, "re-added job runs");
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_max_run_time_is_cancelled_its_lock_released_and_the_next_tick_runs() {
    init_tracing();
    let server = RedisServer::start();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let job = Job::new("slow", "* * * * * *", move || {
        let first = counter.fetch_add(1, Ordering::SeqCst) == 0;
        async move {
            if first {
                // Far past the limit: only cancellation ends it.
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
        }
    })
    .lock("lock:slow")
    .max_run_time(Duration::from_millis(300));
    let c = client(&server, "limits");
    let scheduler = Scheduler::builder().client(c.clone()).group("limits").job(job).build().expect("valid");
    let (handle, reports) = start(scheduler).await;
    let outcomes = || snapshot(&reports).into_iter().map(|r| r.outcome).collect::<Vec<_>>();
    assert!(
        wait_until(Duration::from_secs(8), || {
            let o = outcomes();
            o.contains(&RunOutcome::TimedOut(Duration::from_millis(300))) && o.contains(&RunOutcome::Ran)
        })
        .await,
        "a timed-out run, then a normal one: {:?}",
        outcomes()
    );
    // The lock was released when the run was cancelled: the next tick could take it.
    let o = outcomes();
    let timed_out = o.iter().position(|o| matches!(o, RunOutcome::TimedOut(_))).expect("timed out");
    let ran = o.iter().position(|o| *o == RunOutcome::Ran).expect("ran");
    assert!(timed_out < ran, "the run after the timed-out one ran: {o:?}");
    let history = handle.history("slow", 10).await.expect("history");
    assert!(
        history
            .iter()
            .any(|h| h.outcome == "timed out" && h.error.as_deref().is_some_and(|e| e.contains("300ms"))),
        "{history:#?}"
    );
    handle.shutdown().await;
    assert!(
        wait_until(Duration::from_secs(3), || server.cli(&["EXISTS", "lock:slow"]) == "0").await,
        "lock free"
    );
    let zero = Job::new("zero", "* * * * * *", || async {}).max_run_time(Duration::ZERO);
    let err = Scheduler::builder().client(c).job(zero).build().expect_err("a zero limit is refused");
    assert!(matches!(err, SchedulerError::InvalidJob { ref job, .. } if job == "zero"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_not_preferred_for_a_tick_read_that_it_ran_instead_of_claiming_it() {
    init_tracing();
    let server = RedisServer::start();
    let runs: Runs = Arc::default();
    let replicas = replicas(&server, "done", 3, 30, Duration::from_millis(300), &runs).await;
    let scripts_before = server.command_calls("evalsha");
    let expiries_before = server.command_calls("pexpire");
    let since = Utc::now().timestamp_millis();
    let from = since + 500;
    let ticks = ticks_between(from, from + 4000);
    let last = *ticks.last().expect("ticks");
    // Every replica has dealt with every job's last slot: ran it, or (past the grace) found it
    // done.
    let names: Vec<String> = (0..30).map(|j| format!("done-job-{j}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert!(
        wait_until(Duration::from_secs(15), || every_replica_reported(&replicas, &names, last)).await,
        "every replica reported every job's last slot"
    );
    let scripts = server.command_calls("evalsha") - scripts_before;
    let expiries = server.command_calls("pexpire") - expiries_before;
    // The runs whose deferred looks may have fallen inside the window (a tick just before it
    // is looked at up to a grace later).
    let job_ticks = runs.lock().expect("runs").iter().filter(|r| r.1 + 1000 > since).count();
    for (handle, _) in replicas {
        handle.shutdown().await;
    }
    // Per slot and replica: one claim call for the ~10 jobs it is preferred for, and its
    // releases in a few groups (0.32 per job-tick on an idle machine; at worst each release
    // alone under load: 1.1); nothing from the other two replicas once they read that the
    // ticks were claimed. One claim and one release per job-tick, as before batching, would
    // be 2.0 (a claim attempt by each replica: 4).
    let per_job_tick = scripts as f64 / job_ticks as f64;
    assert!(job_ticks >= 30 * ticks.len(), "{job_ticks} job-ticks ran");
    assert!(per_job_tick < 1.5, "{scripts} script calls for {job_ticks} job-ticks: {per_job_tick:.2} each");
    // A history's expiry is renewed at most once a minute per replica, not with every entry:
    // 30 jobs x 3 replicas at most (a few more from elsewhere), where each run made one.
    assert!(expiries <= 30 * 3 + 10, "{expiries} PEXPIREs for {job_ticks} job-ticks");
}

/// The admin reads (what the console and `lockctl` show) find groups and jobs through their
/// indexes, not by scanning the keyspace: with 20,000 unrelated keys in Redis, the registered
/// jobs, the jobs with a history or pause flag, the replicas and the pending retries are read
/// without one `SCAN`, and a job known only by its history (no replica registers it any more)
/// or only by its pause flag is still listed (issue 42).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_reads_find_groups_and_jobs_without_scanning_the_keyspace() {
    use lock_scheduler::control;
    use lock_scheduler::schema;
    init_tracing();
    let server = RedisServer::start();
    server.cli(&["EVAL", "for i = 1, 20000 do redis.call('SET', 'other:' .. i, 'x') end return 1", "0"]);
    let runs: Runs = Arc::default();
    let mut running = replicas(&server, "indexed", 1, 1, Duration::from_millis(300), &runs).await;
    let job = "indexed-job-0";
    let history = schema::history_key(job).expect("a valid job name");
    assert!(
        wait_until(Duration::from_secs(10), || server.cli(&["EXISTS", &history]) == "1").await,
        "the job's history is written"
    );
    let admin = client(&server, "admin");
    let scans = server.command_calls("scan");

    let registered = control::registered_jobs(&admin).await.expect("registered jobs");
    assert!(registered.iter().any(|j| j.group == "indexed" && j.name == job), "{registered:?}");
    let listed = control::replicas(&admin).await.expect("replicas");
    assert!(listed.iter().any(|r| r.group == "indexed" && r.is_live()), "{listed:?}");
    control::all_pending_retries(&admin).await.expect("pending retries");

    // The group stops and what it registered is gone (as after its member set's expiry): the
    // job is known only by its history now.
    let (handle, _) = running.remove(0);
    handle.shutdown().await;
    server.cli(&["DEL", &schema::jobs_key("indexed"), &schema::members_key("indexed")]);
    let registered = control::registered_jobs(&admin).await.expect("registered jobs");
    assert!(!registered.iter().any(|j| j.name == job), "{registered:?}");
    let jobs = control::jobs(&admin).await.expect("jobs");
    assert!(jobs.iter().any(|j| j == job), "a job known only by its history is listed: {jobs:?}");

    // A job known only by its pause flag is listed while paused, and not after the resume.
    control::pause_by(&admin, "flag-only", "test").await.expect("pause");
    let jobs = control::jobs(&admin).await.expect("jobs");
    assert!(jobs.iter().any(|j| j == "flag-only"), "a paused job is listed: {jobs:?}");
    assert!(control::resume(&admin, "flag-only").await.expect("resume"));
    let jobs = control::jobs(&admin).await.expect("jobs");
    assert!(!jobs.iter().any(|j| j == "flag-only"), "{jobs:?}");
    assert!(jobs.iter().any(|j| j == job), "{jobs:?}");

    assert_eq!(server.command_calls("scan"), scans, "the admin reads sent no SCAN");
    // The indexes expire, like every key the scheduler writes.
    for key in [schema::group_index_key(), schema::job_index_key()] {
        let ttl: i64 = server.cli(&["PTTL", key]).parse().expect("a PTTL");
        assert!(ttl > 0, "{key} has no expiry (PTTL {ttl})");
    }
}
