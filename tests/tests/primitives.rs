//! Semaphores and read-write locks against a real redis-server: bad input, the declared number
//! of permits, fail fast and waiting, renewal and loss, writers not starved, the re-entrancy
//! rules, cancelled waiters, and the attribute's `permits`/`read`/`write`. The behaviour on
//! every deployment (bounds under many clients, crashed holders) is in the contract suite.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_core::{LockClient, LockError, LockOptions, LossReason, distributed_lock, schema};
use tests::harness::{RedisServer, init_tracing, wait_until};

fn client(server: &RedisServer, instance: &str) -> LockClient {
    LockClient::builder()
        .url(server.url())
        .instance_id(instance)
        .watchdog_lease(Duration::from_millis(600))
        .command_timeout(Duration::from_millis(500))
        .build()
        .expect("valid client configuration")
}

/// `name` in this run's namespace (runs may share a server through `REDIS_URL`).
fn k(name: &str) -> String {
    static RUN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let run = RUN.get_or_init(|| {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        format!("p{}-{}:", std::process::id(), nanos % 1_000_000_000)
    });
    format!("{run}{name}")
}

fn wait(ms: u64) -> LockOptions {
    LockOptions::new().wait(Duration::from_millis(ms))
}

#[tokio::test]
async fn bad_names_and_permit_counts_are_clear_errors() {
    let server = RedisServer::shared();
    let c = client(&server, "pod-1");
    assert!(matches!(c.semaphore("", 1), Err(LockError::InvalidKey { .. })));
    assert!(matches!(c.semaphore("sem\nx", 1), Err(LockError::InvalidKey { .. })));
    let zero = c.semaphore(&k("sem:zero"), 0).expect_err("0 permits");
    assert!(matches!(zero, LockError::InvalidOptions(_)), "{zero:?}");
    assert!(zero.to_string().contains("at least one permit"), "{zero}");
    assert!(matches!(c.rw_lock(""), Err(LockError::InvalidKey { .. })));
    assert!(matches!(c.rw_lock(&"x".repeat(2000)), Err(LockError::InvalidKey { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_that_disagree_on_the_permits_get_an_error_not_more_room() {
    init_tracing();
    let server = RedisServer::shared();
    let (a, b) = (client(&server, "pod-a"), client(&server, "pod-b"));
    let name = k("sem:mismatch");
    let two = a.semaphore(&name, 2).expect("semaphore");
    let held = two.acquire(LockOptions::new()).await.expect("a permit of 2");
    let three = b.semaphore(&name, 3).expect("semaphore");
    for result in [three.acquire(LockOptions::new()).await.map(|_| ()), three.available().await.map(|_| ())] {
        match result {
            Err(LockError::PermitsMismatch { name: n, permits: 3, declared: 2 }) => assert_eq!(n, name),
            other => panic!("expected a mismatch, got {other:?}"),
        }
    }
    let waiting = three.acquire(wait(2_000)).await.expect_err("waiting does not hide it");
    assert!(matches!(waiting, LockError::PermitsMismatch { .. }), "{waiting:?}");
    assert!(!waiting.is_transient(), "a mismatch is a configuration error, not retried");
    assert_eq!(two.available().await.expect("available"), 1);
    assert!(held.release().await.expect("release"));
    // Idle, the semaphore declares nothing: it may be redeclared.
    assert_eq!(three.available().await.expect("idle"), 3);
    let p = three.acquire(LockOptions::new()).await.expect("redeclared with 3");
    assert!(p.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_permit_after_the_last_fails_fast_and_a_waiter_gets_the_next_one_freed() {
    init_tracing();
    let server = RedisServer::shared();
    let (a, b) = (client(&server, "pod-a"), client(&server, "pod-b"));
    let name = k("sem:fail-fast");
    let sem_a = a.semaphore(&name, 2).expect("semaphore");
    let p1 = sem_a.acquire(LockOptions::new()).await.expect("permit 1");
    let p2 = sem_a.acquire(LockOptions::new()).await.expect("permit 2 (permits never nest)");
    assert_ne!(p1.token(), p2.token());
    assert!(!p1.is_nested() && !p2.is_nested());
    let sem_b = b.semaphore(&name, 2).expect("semaphore");
    match sem_b.acquire(LockOptions::new()).await {
        Err(LockError::Held { key, remaining }) => {
            assert_eq!(key, name);
            assert!(remaining.is_some_and(|r| r <= Duration::from_millis(600)), "{remaining:?}");
        }
        other => panic!("expected Held, got {other:?}"),
    }
    assert_eq!(sem_b.available().await.expect("available"), 0);
    let waiter = tokio::spawn(async move {
        let permit = sem_b.acquire(wait(10_000)).await;
        (permit, Instant::now())
    });
    // The waiter queues: fail-fast callers are refused while it waits, even once a permit frees.
    assert!(
        wait_until(Duration::from_secs(5), || server.cli(&["LLEN", &schema::queue_key(&name)]) == "1").await,
        "the waiter queued"
    );
    let released = Instant::now();
    assert!(p1.release().await.expect("release"));
    let (permit, got_at) =
        tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("in time").expect("task");
    let permit = permit.expect("the waiter gets the freed permit");
    eprintln!("permit handed over {:?} after the release", got_at - released);
    assert!(got_at - released < Duration::from_secs(1), "handed over by the release, not a retry timer");
    assert_ne!(server.cli(&["ZSCORE", &name, permit.token()]), "", "the waiter's permit is in Redis");
    // Held past the watchdog lease: renewed.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(permit.is_held() && p2.is_held());
    assert!(permit.release().await.expect("release") && p2.release().await.expect("release"));
    assert_eq!(server.cli(&["EXISTS", &name]), "0", "an idle semaphore leaves no key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_permit_is_given_back_and_a_removed_one_is_reported_lost() {
    init_tracing();
    let server = RedisServer::shared();
    let c = client(&server, "pod-1");
    let name = k("sem:drop");
    let sem = c.semaphore(&name, 1).expect("semaphore");
    drop(sem.acquire(LockOptions::new()).await.expect("a permit"));
    assert!(c.flush_releases(Duration::from_secs(5)).await);
    let permit = sem.acquire(LockOptions::new()).await.expect("the dropped permit came back");
    // Taken from outside (an operator, a bug): the next renewal is refused.
    assert_eq!(server.cli(&["ZREM", &name, permit.token()]), "1");
    let reason = tokio::time::timeout(Duration::from_secs(5), permit.lost()).await.expect("loss noticed");
    assert_eq!(reason, LossReason::NotOwner);
    assert!(!permit.release().await.expect("release"), "a lost permit reports it was not ours");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_that_give_up_leave_and_the_patient_one_is_served_at_once() {
    init_tracing();
    let server = RedisServer::shared();
    let (a, b) = (client(&server, "pod-a"), client(&server, "pod-b"));
    let name = k("sem:impatient");
    let holder = a.semaphore(&name, 1).expect("semaphore").acquire(LockOptions::new()).await.expect("permit");
    let sem_b = b.semaphore(&name, 1).expect("semaphore");
    // Impatient callers: a request deadline around a wait.
    let impatient: Vec<_> = (0..8)
        .map(|_| {
            let sem = sem_b.clone();
            tokio::spawn(async move {
                tokio::time::timeout(Duration::from_millis(50), sem.acquire(wait(10_000))).await
            })
        })
        .collect();
    for task in impatient {
        assert!(task.await.expect("task").is_err(), "a waiter that gave up did not get the permit");
    }
    let patient = tokio::spawn({
        let sem = a.semaphore(&name, 1).expect("semaphore");
        async move {
            let permit = sem.acquire(wait(10_000)).await;
            (permit, Instant::now())
        }
    });
    assert!(
        wait_until(Duration::from_secs(5), || server.cli(&["LLEN", &schema::queue_key(&name)]) == "1").await,
        "only the patient waiter is queued: {}",
        server.cli(&["LRANGE", &schema::queue_key(&name), "0", "-1"])
    );
    let released = Instant::now();
    assert!(holder.release().await.expect("release"));
    let (permit, at) =
        tokio::time::timeout(Duration::from_secs(5), patient).await.expect("in time").expect("task");
    let permit = permit.expect("the patient waiter is served");
    assert!(at - released < Duration::from_secs(1), "served {:?} after the release", at - released);
    assert!(permit.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_permit_runs_the_body_holding_a_permit_and_gives_it_back() {
    let server = RedisServer::shared();
    let c = client(&server, "pod-1");
    let sem = c.semaphore(&k("sem:scoped"), 2).expect("semaphore");
    let inside = sem.with_permit(LockOptions::new(), async { sem.available().await }).await.expect("section");
    assert_eq!(inside.expect("available"), 1);
    assert_eq!(sem.available().await.expect("available"), 2);
    // The body's panic gives the permit back too.
    let panicked = tokio::spawn({
        let sem = sem.clone();
        async move { sem.with_permit(LockOptions::new(), async { panic!("body failed") }).await }
    })
    .await;
    assert!(panicked.is_err());
    assert!(c.flush_releases(Duration::from_secs(5)).await);
    assert_eq!(sem.available().await.expect("available"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_a_writer_waits_and_readers_after_a_waiting_writer_wait_behind_it() {
    init_tracing();
    let server = RedisServer::shared();
    let (a, b, c) = (client(&server, "pod-a"), client(&server, "pod-b"), client(&server, "pod-c"));
    let name = k("rw:order");
    let (rw_a, rw_b, rw_c) =
        (a.rw_lock(&name).expect("rw"), b.rw_lock(&name).expect("rw"), c.rw_lock(&name).expect("rw"));
    let r1 = rw_a.read(LockOptions::new()).await.expect("reader 1");
    let r2 = rw_b.read(LockOptions::new()).await.expect("reader 2 beside reader 1");
    assert!(matches!(rw_c.write(LockOptions::new()).await, Err(LockError::Held { .. })));
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let writer = tokio::spawn({
        let (rw, order) = (rw_c.clone(), order.clone());
        async move {
            let guard = rw.write(wait(10_000)).await.expect("the writer gets it");
            order.lock().expect("order").push("writer");
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(guard.release().await.expect("release"));
        }
    });
    assert!(
        wait_until(Duration::from_secs(5), || server.cli(&["LLEN", &schema::queue_key(&name)]) == "1").await,
        "the writer queued"
    );
    // A waiting writer stops new readers: fail fast refuses, a waiting reader queues behind it.
    assert!(matches!(rw_a.read(LockOptions::new()).await, Err(LockError::Held { .. })));
    let late_reader = tokio::spawn({
        let (rw, order) = (rw_a.clone(), order.clone());
        async move {
            let guard = rw.read(wait(10_000)).await.expect("the late reader gets it");
            order.lock().expect("order").push("late reader");
            assert!(guard.release().await.expect("release"));
        }
    });
    assert!(
        wait_until(Duration::from_secs(5), || server.cli(&["LLEN", &schema::queue_key(&name)]) == "2").await,
        "the late reader queued behind the writer"
    );
    assert!(r1.release().await.expect("release"));
    assert!(r2.release().await.expect("release"));
    tokio::time::timeout(Duration::from_secs(5), writer).await.expect("writer done").expect("task");
    tokio::time::timeout(Duration::from_secs(5), late_reader).await.expect("reader done").expect("task");
    assert_eq!(*order.lock().expect("order"), ["writer", "late reader"]);
    assert_eq!(server.cli(&["EXISTS", &name, &schema::readers_key(&name)]), "0", "nothing left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_nests_reads_and_writes_inside_a_write_and_is_refused_a_write_inside_a_read() {
    let server = RedisServer::shared();
    let c = client(&server, "pod-1");
    let rw = c.rw_lock(&k("rw:nesting")).expect("rw");
    rw.with_write(LockOptions::new(), async {
        let read = rw.read(LockOptions::new()).await.expect("a read inside a write");
        assert!(read.is_nested());
        let write = rw.write(LockOptions::new()).await.expect("a write inside a write");
        assert!(write.is_nested());
        assert!(read.release().await.expect("nested release") && write.release().await.expect("nested"));
    })
    .await
    .expect("write section");
    rw.with_read(LockOptions::new(), async {
        let read = rw.read(LockOptions::new()).await.expect("a read inside a read");
        assert!(read.is_nested());
        match rw.write(wait(5_000)).await {
            Err(LockError::WriteInsideRead { key }) => assert_eq!(key, rw.name()),
            other => panic!("expected WriteInsideRead, got {other:?}"),
        }
    })
    .await
    .expect("read section");
    // A lock of another name, and a semaphore, are not nested in the read section.
    let w = rw.write(LockOptions::new()).await.expect("free again");
    assert!(!w.is_nested());
    assert!(w.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_whose_hold_is_removed_is_told_and_fences_increase_across_readers_and_writers() {
    let server = RedisServer::shared();
    let c = client(&server, "pod-1");
    let name = k("rw:fences");
    let rw = c.rw_lock(&name).expect("rw");
    let fenced = LockOptions::new().fencing(true);
    let mut last = 0;
    for _ in 0..3 {
        let r = rw.read(fenced.clone()).await.expect("read");
        let f = r.fence().expect("a fenced read");
        assert!(f > last, "{f} after {last}");
        last = f;
        assert!(r.release().await.expect("release"));
        let w = rw.write(fenced.clone()).await.expect("write");
        let f = w.fence().expect("a fenced write");
        assert!(f > last, "{f} after {last}");
        last = f;
        assert!(w.release().await.expect("release"));
    }
    let r = rw.read(LockOptions::new()).await.expect("read");
    let readers = schema::readers_key(&name);
    assert_eq!(server.cli(&["ZREM", &readers, r.token()]), "1");
    let reason = tokio::time::timeout(Duration::from_secs(5), r.lost()).await.expect("loss noticed");
    assert_eq!(reason, LossReason::NotOwner);
}

// The attribute's `permits`, `read` and `write`.

#[distributed_lock(key = "{name}", permits = 2, wait = "10s", client = client)]
async fn bounded(
    client: &LockClient,
    name: &str,
    inside: &AtomicUsize,
    max: &AtomicUsize,
) -> Result<(), LockError> {
    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
    max.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(20)).await;
    inside.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "{name}", read, client = client)]
async fn read_catalogue(client: &LockClient, name: &str) -> Result<bool, LockError> {
    Ok(lock_core::current().is_some())
}

#[distributed_lock(key = "{name}", write, client = client)]
async fn rebuild_catalogue(client: &LockClient, name: &str) -> Result<bool, LockError> {
    // A read inside the write section is nested: it does not wait for itself.
    read_catalogue(client, name).await
}

#[distributed_lock(key = "{name}", permits = 1, skip_if_held, client = client)]
async fn only_if_free(client: &LockClient, name: &str) -> Option<()> {
    Some(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_holds_permits_and_read_write_locks() {
    init_tracing();
    let server = RedisServer::shared();
    let c = client(&server, "pod-1");
    let name = k("sem:attribute");
    let (inside, max) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let calls: Vec<_> = (0..6)
        .map(|_| {
            let (c, name, inside, max) = (c.clone(), name.clone(), inside.clone(), max.clone());
            tokio::spawn(async move { bounded(&c, &name, &inside, &max).await })
        })
        .collect();
    for call in calls {
        call.await.expect("task").expect("each call runs in turn");
    }
    assert_eq!(max.load(Ordering::SeqCst), 2, "permits = 2 admits two at once, never more");

    let rw = k("rw:attribute");
    assert!(read_catalogue(&c, &rw).await.expect("read"));
    assert!(rebuild_catalogue(&c, &rw).await.expect("write with a nested read"));
    let other = client(&server, "pod-2");
    let held = other.rw_lock(&rw).expect("rw").write(LockOptions::new()).await.expect("write");
    assert!(matches!(read_catalogue(&c, &rw).await, Err(LockError::Held { .. })));
    assert!(held.release().await.expect("release"));

    let one = k("sem:skip");
    let permit =
        other.semaphore(&one, 1).expect("semaphore").acquire(LockOptions::new()).await.expect("permit");
    assert_eq!(only_if_free(&c, &one).await, None, "skipped while the only permit is held");
    assert!(permit.release().await.expect("release"));
    assert_eq!(only_if_free(&c, &one).await, Some(()));
}

/// Runs `processes` `shared_worker`s on `name` for `run` and returns each one's
/// `(holds, cancelled, violations, max inside, writer holds)`; fails if one exits non-zero.
async fn workers(
    server: &RedisServer,
    name: &str,
    kind: &str,
    processes: usize,
    run: Duration,
) -> Vec<[u64; 5]> {
    let children: Vec<_> = (0..processes)
        .map(|_| {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_shared_worker"))
                .args([
                    server.url(),
                    name.to_owned(),
                    kind.to_owned(),
                    "6".into(),
                    run.as_millis().to_string(),
                ])
                .stdout(std::process::Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("spawn shared_worker")
        })
        .collect();
    let mut results = Vec::new();
    for child in children {
        let out = tokio::time::timeout(run + Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("a worker finishes")
            .expect("worker output");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "a worker saw a violation or failed: {stdout}");
        let fields: Vec<u64> = stdout
            .trim()
            .strip_prefix("done ")
            .unwrap_or_else(|| panic!("worker said {stdout:?}"))
            .split(' ')
            .map(|n| n.parse().expect("a count"))
            .collect();
        results.push([fields[0], fields[1], fields[2], fields[3], fields[4]]);
    }
    results
}

/// Three processes of six tasks each share a 3-permit semaphore, a third of their waits cut
/// short at random points and a fifth of their permits dropped rather than released: no
/// moment with four holders (checked from inside each hold, across processes), the permits
/// were used, and nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_sharing_a_semaphore_never_exceed_its_permits_and_leave_nothing_behind() {
    init_tracing();
    let server = RedisServer::start();
    let name = "sem:shared";
    let results = workers(&server, name, "permit:3", 3, Duration::from_secs(3)).await;
    eprintln!("semaphore workers (holds, cancelled, violations, max inside): {results:?}");
    let holds: u64 = results.iter().map(|r| r[0]).sum();
    let cancelled: u64 = results.iter().map(|r| r[1]).sum();
    assert!(results.iter().all(|r| r[2] == 0), "violations: {results:?}");
    assert_eq!(results.iter().map(|r| r[3]).max(), Some(3), "three holders at once, never four");
    assert!(holds >= 100 && cancelled >= 10, "holds {holds}, cancelled {cancelled}");
    let client = client(&server, "pod-check");
    assert_eq!(client.semaphore(name, 3).expect("semaphore").available().await.expect("available"), 3);
    assert_eq!(server.cli(&["EXISTS", name, &schema::queue_key(name)]), "0", "no holder or waiter left");
}

/// Three processes share a read-write lock, one writer task and five reader tasks each, waits
/// cut short at random: a writer never beside a reader or another writer, readers side by
/// side, writers not starved, and nothing left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_sharing_a_rw_lock_never_put_a_reader_beside_a_writer() {
    init_tracing();
    let server = RedisServer::start();
    let name = "rw:shared";
    let results = workers(&server, name, "rw", 3, Duration::from_secs(3)).await;
    eprintln!("rw workers (holds, cancelled, violations, max inside): {results:?}");
    assert!(results.iter().all(|r| r[2] == 0), "violations: {results:?}");
    assert!(results.iter().map(|r| r[3]).max().unwrap_or(0) >= 2, "readers shared the lock");
    assert!(results.iter().map(|r| r[0]).sum::<u64>() >= 100, "{results:?}");
    let writes: u64 = results.iter().map(|r| r[4]).sum();
    assert!(writes >= 10, "writers were starved: {writes} writes in 3 s");
    assert_eq!(
        server.cli(&["EXISTS", name, &schema::readers_key(name), &schema::queue_key(name)]),
        "0",
        "no hold or waiter left"
    );
}

/// Redis frozen past the watchdog lease while a permit and a read hold are held: neither is
/// trusted past its deadline (`lost()` fires, `Expired`); once Redis is back, the lapsed holds
/// count for nothing (all permits available, a writer gets in) and the late renewals and
/// releases change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_are_not_trusted_past_their_deadline_when_redis_stalls() {
    init_tracing();
    let server = RedisServer::start();
    let lease = Duration::from_millis(600);
    let c = client(&server, "pod-1");
    let sem = c.semaphore("sem:stall", 2).expect("semaphore");
    let rw = c.rw_lock("rw:stall").expect("rw");
    let permit = sem.acquire(LockOptions::new()).await.expect("permit");
    let read = rw.read(LockOptions::new()).await.expect("read");
    // Each hold's deadline counts from its own send, which came before this moment.
    let both_sent = Instant::now();
    server.pause();
    tokio::time::sleep_until((both_sent + lease).into()).await;
    assert!(!permit.is_held() && !read.is_held(), "no longer trusted once the server may drop them");
    let three = Duration::from_secs(3);
    assert_eq!(tokio::time::timeout(three, permit.lost()).await.expect("permit loss"), LossReason::Expired);
    assert_eq!(tokio::time::timeout(three, read.lost()).await.expect("read loss"), LossReason::Expired);
    // Frozen long enough for both holds to lapse in Redis too.
    tokio::time::sleep(lease).await;
    server.resume();
    let other = client(&server, "pod-2");
    let ours = other.semaphore("sem:stall", 2).expect("semaphore");
    let a = ours.acquire(wait(5_000)).await.expect("a permit");
    let b = ours.acquire(wait(5_000)).await.expect("both permits: the lapsed one counts for nothing");
    let w = other
        .rw_lock("rw:stall")
        .expect("rw")
        .write(wait(5_000))
        .await
        .expect("the lapsed reader does not block");
    assert!(!permit.release().await.expect("release") && !read.release().await.expect("release"));
    assert!(a.is_held() && b.is_held() && w.is_held(), "the late releases took nothing");
    assert_eq!(ours.available().await.expect("available"), 0);
}

/// A permit's release whose hand-off message never reaches the waiter (the permit was
/// reserved for it, nothing published): its fallback retry finds the permit its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_permit_hand_off_message_is_found_by_the_waiters_retry() {
    init_tracing();
    let server = RedisServer::start();
    let name = "sem:silent";
    let holder = client(&server, "pod-1");
    let waiter = LockClient::builder()
        .url(server.url())
        .instance_id("pod-2")
        .command_timeout(Duration::from_millis(500))
        .wait_backoff(Duration::from_millis(50), Duration::from_millis(200))
        .build()
        .expect("client");
    let permit =
        holder.semaphore(name, 1).expect("semaphore").acquire(LockOptions::new()).await.expect("permit");
    let waiting = tokio::spawn({
        let sem = waiter.semaphore(name, 1).expect("semaphore");
        async move { sem.acquire(wait(20_000)).await.map(|g| (g, Instant::now())) }
    });
    let queue = schema::queue_key(name);
    assert!(wait_until(Duration::from_secs(5), || server.cli(&["LLEN", &queue]) == "1").await, "queued");
    let entry = server.cli(&["LRANGE", &queue, "0", "0"]);
    let token = schema::token_of_entry(&entry).to_owned();
    // What a release does, minus the message: the holder's permit gone, one reserved for the
    // waiter (500 ms, its hand-off time), its entry and ticket gone.
    let released_at = Instant::now();
    let until = server.cli(&["TIME"]).lines().next().and_then(|s| s.parse::<u64>().ok()).expect("time")
        * 1000
        + 1_500;
    server.cli(&["ZREM", name, permit.token()]);
    server.cli(&["ZADD", name, &until.to_string(), &token]);
    server.cli(&["LPOP", &queue]);
    server.cli(&["ZREM", &schema::tickets_key(name), &token]);
    let (got, at) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("acquired")
        .expect("task")
        .expect("permit");
    let waited = at - released_at;
    eprintln!("a lost permit hand-off message cost the waiter {waited:?}");
    assert_eq!(got.token(), token, "the reserved permit was its own");
    assert!(waited < Duration::from_millis(1_500), "found at its fallback retry: {waited:?}");
    assert!(!permit.release().await.expect("release"), "no longer the old holder's");
    assert!(got.release().await.expect("release"));
}
