//! lock-core against a real redis-server: exclusion, release, leases, the watchdog, loss
//! detection, waiting, re-entrancy, fencing, bad input and recovery.
//!
//! Tests that neither inject faults nor read server-wide counters use
//! `RedisServer::shared()`, so `REDIS_URL` can point them at an external server.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_core::schema;
use lock_core::{LockClient, LockError, LockOptions, LossReason};
use tests::harness::{RedisServer, init_tracing, wait_until};

/// A client with a short watchdog lease, so renewal happens within a test's time.
fn client(server: &RedisServer, instance: &str) -> LockClient {
    client_with(server, instance, Duration::from_millis(600))
}

fn client_with(server: &RedisServer, instance: &str, watchdog_lease: Duration) -> LockClient {
    LockClient::builder()
        .url(server.url())
        .instance_id(instance)
        .watchdog_lease(watchdog_lease)
        .command_timeout(Duration::from_millis(150))
        .build()
        .expect("valid client configuration")
}

/// `name` in this run's key namespace. With `REDIS_URL`, runs share a server, and a key left
/// by an earlier run (a guard dropped as its test ended) must not be seen by this one.
/// How many clients are subscribed to their release channel of `key` (one channel per key and
/// waiting client: `schema::release_channel`).
fn release_subscribers(server: &RedisServer, key: &str) -> usize {
    server
        .cli(&["PUBSUB", "CHANNELS", &format!("{}*", schema::release_channel_prefix(key))])
        .lines()
        .filter(|l| !l.is_empty())
        .count()
}

fn k(name: &str) -> String {
    static RUN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let run = RUN.get_or_init(|| {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        format!("t{}-{}:", std::process::id(), nanos % 1_000_000_000)
    });
    match name.strip_prefix('{') {
        Some(rest) => format!("{{{run}{rest}"),
        None => format!("{run}{name}"),
    }
}

fn get(server: &RedisServer, key: &str) -> String {
    server.cli(&["GET", key])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_twenty_concurrent_try_locks_wins() {
    init_tracing();
    let server = RedisServer::shared();
    let client = client(&server, "pod-1");
    let start = Arc::new(tokio::sync::Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (client, start) = (client.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                client.try_lock(&k("lock:race"), LockOptions::new()).await
            })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        match task.await.expect("task completes") {
            Ok(guard) => winners.push(guard),
            Err(LockError::Held { key, remaining }) => {
                assert_eq!(key, k("lock:race"));
                assert!(remaining.is_some_and(|r| r <= Duration::from_millis(600)), "{remaining:?}");
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one task holds the lock");
    let token = winners[0].token().to_owned();
    assert!(token.starts_with("pod-1:"), "token names the instance: {token}");
    assert_eq!(get(&server, &k("lock:race")), token, "redis-cli GET shows the holder");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_checks_the_owner_token() {
    init_tracing();
    let server = RedisServer::shared();
    let client = client(&server, "pod-1");

    // Another owner's token in the key (a takeover): our release must leave it alone.
    let guard =
        client.try_lock(&k("lock:owned"), LockOptions::new().lease(Duration::from_secs(10))).await.unwrap();
    server.cli(&["SET", &k("lock:owned"), "pod-2:someone-else", "PX", "10000"]);
    assert!(!guard.release().await.unwrap(), "release reports that we no longer owned it");
    assert_eq!(get(&server, &k("lock:owned")), "pod-2:someone-else", "the other owner's key stays");

    // Our own token: release deletes the key.
    server.cli(&["DEL", &k("lock:owned")]);
    let guard = client.try_lock(&k("lock:owned"), LockOptions::new()).await.unwrap();
    assert_eq!(get(&server, &k("lock:owned")), guard.token());
    assert!(guard.release().await.unwrap(), "release reports that we owned it");
    assert_eq!(get(&server, &k("lock:owned")), "(nil)");
    assert_eq!(client.stats().renewing, 0, "a released lock is no longer renewed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_lease_expires_on_time_and_another_client_takes_over() {
    init_tracing();
    let server = RedisServer::shared();
    let (a, b) = (client(&server, "pod-1"), client(&server, "pod-2"));
    let lease = Duration::from_millis(400);
    let started = Instant::now();
    let guard = a.try_lock(&k("lock:fixed"), LockOptions::new().lease(lease)).await.unwrap();
    let pttl: u64 = server.cli(&["PTTL", &k("lock:fixed")]).parse().unwrap();
    assert!(pttl <= 400 && pttl > 200, "PTTL is the fixed lease: {pttl}");
    assert!(b.try_lock(&k("lock:fixed"), LockOptions::new()).await.is_err(), "held during the lease");

    assert!(wait_until(Duration::from_secs(2), || get(&server, &k("lock:fixed")) == "(nil)").await);
    let expired_after = started.elapsed();
    assert!(expired_after >= Duration::from_millis(350), "not before the lease: {expired_after:?}");
    assert!(expired_after < Duration::from_millis(900), "on time: {expired_after:?}");
    assert_eq!(a.stats().renewing, 0, "fixed leases are never renewed");

    assert!(!guard.is_held(), "the holder knows its lease ran out");
    assert_eq!(guard.lost().await, LossReason::Expired);
    let taken = b.try_lock(&k("lock:fixed"), LockOptions::new()).await.expect("another client takes it");
    assert_eq!(get(&server, &k("lock:fixed")), taken.token());
    assert!(!guard.release().await.unwrap(), "the stale holder cannot release the new owner's lock");
    assert_eq!(get(&server, &k("lock:fixed")), taken.token());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_keeps_the_lock_past_its_lease_and_stops_at_release() {
    init_tracing();
    let server = RedisServer::shared();
    let lease = Duration::from_millis(300);
    let a = client_with(&server, "pod-1", lease);
    let guard = a.try_lock(&k("lock:watchdog"), LockOptions::new()).await.unwrap();
    let token = guard.token().to_owned();
    // Three leases in, it must have been renewed several times.
    let deadline = Instant::now() + lease * 3;
    while Instant::now() < deadline {
        assert_eq!(get(&server, &k("lock:watchdog")), token, "held at {:?}", deadline - Instant::now());
        assert!(guard.is_held());
        tokio::time::sleep(Duration::from_millis(50)).await; // sampling, not synchronisation
    }
    let renewals = a.stats().renewals_sent;
    assert!(renewals >= 6, "renewed every lease/3: {renewals}");

    assert!(guard.release().await.unwrap());
    assert_eq!(get(&server, &k("lock:watchdog")), "(nil)");
    assert_eq!(a.stats().renewing, 0);
    // No renewal is sent after release: wait two renewal intervals and look.
    tokio::time::sleep(lease * 2 / 3).await;
    assert!(a.stats().renewals_sent <= renewals + 1, "at most one renewal already in flight at release");
    assert_eq!(get(&server, &k("lock:watchdog")), "(nil)", "a renewal never resurrects a released lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holders_lock_expires_within_its_lease() {
    init_tracing();
    let server = RedisServer::shared();
    let lease_ms = 500;
    let mut holder = std::process::Command::new(env!("CARGO_BIN_EXE_lock_holder"))
        .args([server.url(), k("lock:crash"), lease_ms.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn lock_holder");
    let mut line = String::new();
    let stdout = holder.stdout.take().expect("piped stdout");
    let reader = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let line = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("holder acquires")
        .unwrap()
        .unwrap();
    let token = line.trim().strip_prefix("acquired ").expect("acquired line").to_owned();
    assert!(token.starts_with("crashing-holder:"));
    // The holder's watchdog keeps it alive well past one lease.
    assert!(
        !wait_until(Duration::from_millis(3 * lease_ms), || get(&server, &k("lock:crash")) != token).await,
        "renewed while the holder lives"
    );
    assert!(server.cli(&["PTTL", &k("lock:crash")]).parse::<i64>().unwrap() > 0, "and still expiring");

    holder.kill().expect("kill -9 the holder");
    holder.wait().unwrap();
    let killed = Instant::now();
    assert!(wait_until(Duration::from_secs(3), || get(&server, &k("lock:crash")) == "(nil)").await);
    let freed_after = killed.elapsed();
    assert!(freed_after <= Duration::from_millis(lease_ms + 200), "freed within the lease: {freed_after:?}");
    let b = client(&server, "pod-2");
    let _taken = b.try_lock(&k("lock:crash"), LockOptions::new()).await.expect("another replica takes it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_guard_frees_the_lock_at_once() {
    init_tracing();
    let server = RedisServer::shared();
    // A 30 s watchdog lease: freeing within a second can only come from the drop's release.
    let a = client_with(&server, "pod-1", Duration::from_secs(30));
    let freed = |server: &RedisServer| get(server, &k("lock:drop")) == "(nil)";

    // A panicking task.
    let task_client = a.clone();
    let task = tokio::spawn(async move {
        let _guard = task_client.try_lock(&k("lock:drop"), LockOptions::new()).await.unwrap();
        panic!("the job failed");
    });
    assert!(task.await.unwrap_err().is_panic());
    assert!(wait_until(Duration::from_secs(1), || freed(&server)).await, "freed after a panic");

    // A cancelled future: the scoped form, abandoned by a timeout.
    let held = Arc::new(tokio::sync::Notify::new());
    let held2 = held.clone();
    let section_client = a.clone();
    let cancelled = tokio::spawn(async move {
        section_client
            .with_lock(&k("lock:drop"), LockOptions::new(), async move {
                held2.notify_one();
                std::future::pending::<()>().await;
            })
            .await
    });
    held.notified().await;
    assert_ne!(get(&server, &k("lock:drop")), "(nil)");
    cancelled.abort();
    assert!(cancelled.await.unwrap_err().is_cancelled());
    assert!(wait_until(Duration::from_secs(1), || freed(&server)).await, "freed after cancellation");

    // A plain drop.
    drop(a.try_lock(&k("lock:drop"), LockOptions::new()).await.unwrap());
    assert!(wait_until(Duration::from_secs(1), || freed(&server)).await, "freed after drop");
    assert_eq!(a.stats().renewing, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_resolves_when_the_key_is_deleted_from_outside() {
    init_tracing();
    let server = RedisServer::shared();
    let a = client_with(&server, "pod-1", Duration::from_millis(300));
    let guard = a.try_lock(&k("lock:lost"), LockOptions::new()).await.unwrap();
    let lost = guard.lost();
    server.cli(&["DEL", &k("lock:lost")]);
    let reason =
        tokio::time::timeout(Duration::from_secs(2), lost).await.expect("loss detected by the next renewal");
    assert_eq!(reason, LossReason::NotOwner);
    assert!(!guard.is_held());
    assert_eq!(a.stats().renewing, 0, "a lost lock is no longer renewed");
    assert!(!guard.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_resolves_when_redis_stalls_past_the_deadline() {
    init_tracing();
    let server = RedisServer::start();
    let lease = Duration::from_millis(600);
    let a = client_with(&server, "pod-1", lease);
    // The deadline counts from when the acquiring command was sent: Redis cannot expire the key
    // before `sent + lease`, and the guard stops trusting it before then (lease minus drift).
    let sent = Instant::now();
    let guard = a.try_lock(&k("lock:stall"), LockOptions::new()).await.unwrap();
    server.pause();
    // Renewals cannot reach the frozen server; until its deadline the guard still holds.
    tokio::time::sleep(lease / 3).await;
    if sent.elapsed() < lease * 2 / 3 {
        assert!(guard.is_held(), "held within its deadline");
    }
    tokio::time::sleep_until((sent + lease).into()).await;
    assert!(!guard.is_held(), "no longer trusted by the time the key can expire");
    // The notification may lag a busy machine's timers, but comes, with the right reason.
    let reason = tokio::time::timeout(Duration::from_secs(3), guard.lost()).await.expect("loss detected");
    server.resume();
    assert_eq!(reason, LossReason::Expired);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_acquires_on_the_release_message() {
    init_tracing();
    let server = RedisServer::shared();
    let holder = client_with(&server, "pod-1", Duration::from_secs(30));
    // Fallback retries only every 10 s: an acquisition sooner than that came from pub/sub.
    let waiter = LockClient::builder()
        .url(server.url())
        .instance_id("pod-2")
        .wait_backoff(Duration::from_secs(10), Duration::from_secs(10))
        .build()
        .unwrap();
    let guard = holder.try_lock(&k("lock:handoff"), LockOptions::new()).await.unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            let guard =
                waiter.acquire(&k("lock:handoff"), LockOptions::new().wait(Duration::from_secs(20))).await;
            (guard, Instant::now())
        }
    });
    assert!(
        wait_until(Duration::from_secs(2), || release_subscribers(&server, &k("lock:handoff")) == 1).await,
        "the waiter subscribes to the release channel"
    );
    let released_at = Instant::now();
    assert!(guard.release().await.unwrap());
    let (acquired, acquired_at) =
        tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap();
    let acquired = acquired.expect("the waiter gets the lock");
    let gap = acquired_at - released_at;
    assert!(
        gap < Duration::from_millis(250),
        "hand-off took {gap:?}, far below the 10 s fallback and 30 s lease"
    );
    assert_eq!(get(&server, &k("lock:handoff")), acquired.token());
    assert!(acquired.token().starts_with("pod-2:"));
    // The waiter left: its subscription goes too.
    assert!(
        wait_until(Duration::from_secs(2), || release_subscribers(&server, &k("lock:handoff")) == 0).await,
        "no subscription leak"
    );
    assert!(wait_until(Duration::from_secs(1), || waiter.stats().waiting_keys == 0).await);
}

/// A client that waits on the same key over and over (a contended loop: each wait ends with
/// the lock, each hold ends with a release) keeps one subscription while it loops, and drops
/// it a linger (200 ms) after its last wait, however many waits came and went before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_coming_and_going_keeps_one_subscription_and_drops_it_after_the_last_wait() {
    init_tracing();
    let server = RedisServer::shared();
    let key = k("lock:loop");
    let (holder, waiter) = (client_with(&server, "pod-1", Duration::from_secs(30)), client(&server, "pod-2"));
    let mut waits = 0;
    let mut last_left = Instant::now();
    for round in 0..40 {
        let guard = holder.try_lock(&key, LockOptions::new()).await.unwrap();
        let waiting = tokio::spawn({
            let (waiter, key) = (waiter.clone(), key.clone());
            async move {
                let got = waiter.acquire(&key, LockOptions::new().wait(Duration::from_secs(5))).await;
                // The wait's registration on the channel is gone by now: the linger starts.
                (got, Instant::now())
            }
        });
        // Queued behind the holder (the holder's value is marked), so this is a real wait.
        assert!(
            wait_until(Duration::from_secs(2), || get(&server, &key).ends_with(schema::QUEUED_MARK)).await,
            "round {round}: the waiter queued"
        );
        assert!(guard.release().await.unwrap());
        let (got, left) = tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap();
        assert!(got.expect("the waiter gets the lock").release().await.unwrap());
        last_left = left;
        waits += 1;
        // Between waits (well inside the linger) the channel stays subscribed, and only once.
        assert!(release_subscribers(&server, &key) <= 1, "round {round}: one subscription at most");
    }
    assert_eq!(waits, 40);
    assert!(
        wait_until(Duration::from_secs(3), || release_subscribers(&server, &key) == 0).await,
        "the subscription goes after the last wait: no leak"
    );
    assert!(
        last_left.elapsed() >= Duration::from_millis(150),
        "it lingered first: {:?}",
        last_left.elapsed()
    );
    assert!(wait_until(Duration::from_secs(1), || waiter.stats().waiting_keys == 0).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_on_a_lock_never_released_times_out_at_its_bound() {
    init_tracing();
    let server = RedisServer::shared();
    let (a, b) = (client_with(&server, "pod-1", Duration::from_secs(30)), client(&server, "pod-2"));
    let _guard = a.try_lock(&k("lock:forever"), LockOptions::new()).await.unwrap();
    let started = Instant::now();
    let err =
        b.acquire(&k("lock:forever"), LockOptions::new().wait(Duration::from_millis(700))).await.unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(&err, LockError::Timeout { key, .. } if *key == k("lock:forever")), "{err}");
    assert!(err.to_string().contains("timed out after 700ms"), "{err}");
    assert!(waited >= Duration::from_millis(700) && waited < Duration::from_millis(1100), "{waited:?}");
    assert!(
        wait_until(Duration::from_secs(2), || release_subscribers(&server, &k("lock:forever")) == 0).await,
        "the timed-out waiter unsubscribed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_one_client_take_turns_in_arrival_order() {
    init_tracing();
    let server = RedisServer::shared();
    let a = client(&server, "pod-1");
    let first = a.try_lock(&k("lock:fifo"), LockOptions::new()).await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5 {
        let (task_client, order) = (a.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let guard = task_client
                .acquire(&k("lock:fifo"), LockOptions::new().wait(Duration::from_secs(10)))
                .await
                .unwrap();
            order.lock().unwrap().push(i);
            guard.release().await.unwrap();
        }));
        // Each waiter is queued in Redis (where arrival order is decided) before the next starts.
        let queue = schema::queue_key(&k("lock:fifo"));
        assert!(
            wait_until(Duration::from_secs(2), || server.cli(&["LLEN", &queue]) == (i + 1).to_string()).await
        );
        assert_eq!(a.stats().waiters_on(&k("lock:fifo")), i + 1);
    }
    first.release().await.unwrap();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(10), t).await.unwrap().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_acquisition_in_a_scope_is_reentrant_and_local() {
    init_tracing();
    let server = RedisServer::start();
    let a = client(&server, "pod-1");
    let outer_client = a.clone();
    let result = a
        .with_lock(&k("lock:reentrant"), LockOptions::new().fencing(true), async {
            let outer = lock_core::current().expect("inside a locked section");
            let calls_before = server.command_calls("evalsha");
            // The same key again, directly and through a nested scoped section.
            let nested = outer_client
                .acquire(&k("lock:reentrant"), LockOptions::new().wait(Duration::from_secs(1)))
                .await
                .unwrap();
            assert!(nested.is_nested());
            assert_eq!(nested.token(), outer.token());
            assert_eq!(nested.fence(), outer.fence());
            let inner = outer_client
                .with_lock(&k("lock:reentrant"), LockOptions::new(), async {
                    lock_core::current().unwrap().token().to_owned()
                })
                .await
                .unwrap();
            assert_eq!(inner, outer.token());
            assert!(nested.release().await.unwrap());
            assert_eq!(server.command_calls("evalsha"), calls_before, "nested holds do not touch Redis");
            assert_eq!(
                get(&server, &k("lock:reentrant")),
                outer.token(),
                "the outer hold survives the nested release"
            );

            // Another task is still excluded.
            let other = outer_client.clone();
            let elsewhere =
                tokio::spawn(async move { other.try_lock(&k("lock:reentrant"), LockOptions::new()).await })
                    .await
                    .unwrap();
            assert!(matches!(elsewhere, Err(LockError::Held { .. })), "{elsewhere:?}");
            42
        })
        .await
        .unwrap();
    assert_eq!(result, 42);
    assert_eq!(get(&server, &k("lock:reentrant")), "(nil)", "released when the outer section ends");
    assert!(lock_core::current().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_strictly_increase_even_across_expiry() {
    init_tracing();
    let server = RedisServer::shared();
    let (a, b) = (client(&server, "pod-1"), client(&server, "pod-2"));
    let fenced = LockOptions::new().fencing(true);
    let mut fences = Vec::new();
    for i in 0..6 {
        let client = if i % 2 == 0 { &a } else { &b };
        let guard = client.try_lock(&k("lock:fenced"), fenced.clone()).await.unwrap();
        fences.push(guard.fence().expect("fencing was asked for"));
        guard.release().await.unwrap();
    }
    // A holder whose fixed lease runs out, then a new holder.
    let stale =
        a.try_lock(&k("lock:fenced"), fenced.clone().lease(Duration::from_millis(100))).await.unwrap();
    fences.push(stale.fence().unwrap());
    assert!(wait_until(Duration::from_secs(2), || get(&server, &k("lock:fenced")) == "(nil)").await);
    let fresh = b.try_lock(&k("lock:fenced"), fenced.clone()).await.unwrap();
    fences.push(fresh.fence().unwrap());
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "strictly increasing: {fences:?}");
    assert_eq!(
        server.cli(&["GET", &schema::fence_key(&k("lock:fenced"))]),
        fences.last().unwrap().to_string()
    );
    let unfenced = a.try_lock(&k("lock:unfenced"), LockOptions::new()).await.unwrap();
    assert_eq!(unfenced.fence(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_typed_error() {
    init_tracing();
    for url in ["", "http://localhost:6379", "redis://host:notaport"] {
        let err = LockClient::from_url(url).unwrap_err();
        assert!(matches!(err, LockError::Config(_)), "{url}: {err:?}");
        assert!(err.to_string().contains("redis://"), "the message shows the expected form: {err}");
    }
    let err = LockClient::from_url("redis://user:s3cret@localhost:notaport").unwrap_err();
    assert!(!err.to_string().contains("s3cret"), "no password in messages: {err}");
    assert!(matches!(LockClient::builder().build(), Err(LockError::Config(_))));
    assert!(matches!(
        LockClient::builder().url("redis://127.0.0.1/").instance_id("a b").build(),
        Err(LockError::Config(_))
    ));

    let mut server = RedisServer::start();
    let a = client(&server, "pod-1");
    let err = a.try_lock("", LockOptions::new()).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidKey { .. }), "{err:?}");
    assert!(err.to_string().contains("empty"), "{err}");
    let err = a.try_lock(&k("lock:x"), LockOptions::new().lease(Duration::ZERO)).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidOptions(_)), "{err:?}");
    assert!(err.to_string().contains("lease must be at least"), "{err}");

    // Unreachable Redis, then the same client recovers once Redis is back.
    let _warm = a.try_lock(&k("lock:warm"), LockOptions::new()).await.unwrap().release().await.unwrap();
    server.stop();
    let started = Instant::now();
    let err = a.try_lock(&k("lock:x"), LockOptions::new()).await.unwrap_err();
    assert!(matches!(err, LockError::Redis { .. }), "{err:?}");
    assert!(err.to_string().contains(&format!("acquiring lock `{}`", k("lock:x"))), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2), "fails promptly: {:?}", started.elapsed());
    let err = a.acquire(&k("lock:x"), LockOptions::new().wait(Duration::from_millis(300))).await.unwrap_err();
    assert!(matches!(err, LockError::Redis { .. }), "{err:?}");
    server.restart();
    let guard = a
        .try_lock(&k("lock:x"), LockOptions::new())
        .await
        .expect("the same client works again after a restart");
    assert_eq!(get(&server, &k("lock:x")), guard.token());
    assert!(guard.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_survives_a_redis_restart() {
    init_tracing();
    let mut server = RedisServer::start();
    let a = client(&server, "pod-1");
    let b = client(&server, "pod-2");
    let guard =
        a.try_lock(&k("lock:restart"), LockOptions::new().lease(Duration::from_secs(30))).await.unwrap();
    let waiting = tokio::spawn(async move {
        b.acquire(&k("lock:restart"), LockOptions::new().wait(Duration::from_secs(10))).await
    });
    assert!(
        wait_until(Duration::from_secs(2), || release_subscribers(&server, &k("lock:restart")) == 1).await
    );
    // The restart wipes the key (no persistence here), so the waiter must get in.
    server.restart();
    let acquired = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap()
        .expect("acquired after restart");
    assert_eq!(get(&server, &k("lock:restart")), acquired.token());
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_and_fairness_hold_under_load() {
    init_tracing();
    let server = RedisServer::shared();
    let clients: Vec<_> = (1..=3).map(|i| client(&server, &format!("pod-{i}"))).collect();
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let acquisitions = Arc::new(AtomicUsize::new(0));
    let until = Instant::now() + Duration::from_secs(3);
    let per_client: Arc<[AtomicUsize; 3]> = Arc::new(Default::default());
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for _ in 0..8 {
            let (client, inside, overlaps, acquisitions) =
                (client.clone(), inside.clone(), overlaps.clone(), acquisitions.clone());
            let per_client = per_client.clone();
            let url = server.url();
            tasks.push(tokio::spawn(async move {
                let redis = lock_core::redis::Client::open(url).unwrap();
                let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
                while Instant::now() < until {
                    let guard = match client
                        .acquire(&k("lock:hammer"), LockOptions::new().wait(Duration::from_secs(5)))
                        .await
                    {
                        Ok(g) => g,
                        Err(e) => panic!("acquisition failed under load: {e}"),
                    };
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    // Redis agrees that we are the holder.
                    let holder: Option<String> = lock_core::redis::cmd("GET")
                        .arg(k("lock:hammer"))
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    // While others queue behind it, the holder's token carries the `|w` mark.
                    if holder.as_deref().map(schema::unmarked) != Some(guard.token()) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    acquisitions.fetch_add(1, Ordering::SeqCst);
                    per_client[c].fetch_add(1, Ordering::SeqCst);
                    assert!(guard.release().await.unwrap());
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let n = acquisitions.load(Ordering::SeqCst);
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    assert!(n >= 100, "the test exercised the lock: {n} acquisitions");
    // Waiters of all clients queue in Redis: no replica is starved by another.
    let per_client: Vec<usize> = per_client.iter().map(|c| c.load(Ordering::SeqCst)).collect();
    assert!(per_client.iter().all(|c| *c * 5 >= n), "each client gets at least a fifth: {per_client:?}");
    eprintln!("{n} acquisitions by 24 tasks on 3 clients ({per_client:?}), 0 overlaps");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_keeps_the_lock_for_the_minimum_and_renewal_cannot_stretch_it() {
    init_tracing();
    let server = RedisServer::shared();
    // Renewals every 100 ms: several would land during the minimum hold.
    let a = client_with(&server, "pod-1", Duration::from_millis(300));
    let b = client(&server, "pod-2");
    let started = Instant::now();
    let guard =
        a.try_lock(&k("lock:min"), LockOptions::new().at_least(Duration::from_millis(800))).await.unwrap();
    let token = guard.token().to_owned();
    assert!(guard.release().await.unwrap());
    assert_eq!(
        get(&server, &k("lock:min")),
        format!("{token}{}", schema::RELEASED_SUFFIX),
        "kept, but no longer renewable"
    );
    assert!(matches!(b.try_lock(&k("lock:min"), LockOptions::new()).await, Err(LockError::Held { .. })));
    assert!(wait_until(Duration::from_secs(3), || get(&server, &k("lock:min")) == "(nil)").await);
    let freed = started.elapsed();
    assert!(
        freed >= Duration::from_millis(750) && freed < Duration::from_millis(1300),
        "freed at the minimum: {freed:?}"
    );
    b.try_lock(&k("lock:min"), LockOptions::new())
        .await
        .expect("free after the minimum hold")
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_broken_key_does_not_fail_the_renewal_of_the_others() {
    init_tracing();
    let server = RedisServer::shared();
    let a = client_with(&server, "pod-1", Duration::from_millis(300));
    let healthy = a.try_lock(&k("lock:healthy"), LockOptions::new()).await.unwrap();
    let broken = a.try_lock(&k("lock:broken"), LockOptions::new()).await.unwrap();
    // Someone replaces the key with a hash: the renewal script's GET fails with WRONGTYPE.
    server.cli(&["DEL", &k("lock:broken")]);
    server.cli(&["HSET", &k("lock:broken"), "f", "v"]);
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(2), broken.lost()).await.unwrap(),
        LossReason::NotOwner
    );
    // Three more leases: the healthy lock keeps being renewed in the same batches.
    let until = Instant::now() + Duration::from_millis(900);
    while Instant::now() < until {
        assert_eq!(get(&server, &k("lock:healthy")), healthy.token());
        tokio::time::sleep(Duration::from_millis(50)).await; // sampling
    }
    assert!(healthy.is_held());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_release_still_frees_the_lock() {
    init_tracing();
    let server = RedisServer::start();
    let a = LockClient::builder()
        .url(server.url())
        .instance_id("pod-1")
        .command_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let guard = a.try_lock(&k("lock:cancelled-release"), LockOptions::new()).await.unwrap();
    // The release will need a second round trip (NOSCRIPT, then load and retry), and the
    // server is stopped: the caller gives up before the key is deleted.
    server.cli(&["SCRIPT", "FLUSH"]);
    server.pause();
    let cancelled = tokio::time::timeout(Duration::from_millis(100), guard.release()).await;
    assert!(cancelled.is_err(), "the release was cut short");
    server.resume();
    // Finished in the background, long before the 30 s watchdog lease would free it.
    assert!(
        wait_until(Duration::from_secs(2), || get(&server, &k("lock:cancelled-release")) == "(nil)").await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_the_server_forgot_are_loaded_again() {
    init_tracing();
    let server = RedisServer::start();
    let (a, b) = (client(&server, "pod-1"), client(&server, "pod-2"));
    let key = k("lock:noscript");
    let fenced = LockOptions::new().fencing(true);
    a.acquire(&key, fenced.clone()).await.unwrap().release().await.unwrap();
    // As after a restart or a failover to a node that never ran them: every script is gone
    // before each step, which must still do what it says.
    server.cli(&["SCRIPT", "FLUSH"]);
    let guard = a.acquire(&key, fenced.clone()).await.expect("the acquire script, loaded again");
    assert!(guard.fence().is_some());
    let waiting = tokio::spawn({
        let key = key.clone();
        async move { b.acquire(&key, LockOptions::new().wait(Duration::from_secs(5))).await }
    });
    assert!(wait_until(Duration::from_secs(2), || release_subscribers(&server, &key) == 1).await);
    server.cli(&["SCRIPT", "FLUSH"]);
    assert!(guard.release().await.expect("the release script, loaded again"));
    let handed = tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap().unwrap();
    assert_eq!(get(&server, &key), handed.token(), "handed to the waiter");
    server.cli(&["SCRIPT", "FLUSH"]);
    assert!(handed.release().await.unwrap());
    assert_eq!(get(&server, &key), "(nil)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbounded_wait_is_accepted() {
    init_tracing();
    let server = RedisServer::shared();
    let (a, b) = (client(&server, "pod-1"), client(&server, "pod-2"));
    let forever = LockOptions::new().wait(Duration::MAX);
    let guard = a.acquire(&k("lock:forever-wait"), forever.clone()).await.expect("free: acquired at once");
    let waiting = tokio::spawn(async move { b.acquire(&k("lock:forever-wait"), forever).await });
    assert!(
        wait_until(Duration::from_secs(2), || release_subscribers(&server, &k("lock:forever-wait")) == 1)
            .await
    );
    guard.release().await.unwrap();
    let acquired = tokio::time::timeout(Duration::from_secs(2), waiting).await.unwrap().unwrap().unwrap();
    assert_eq!(get(&server, &k("lock:forever-wait")), acquired.token());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_releases_waits_for_background_releases() {
    init_tracing();
    let server = RedisServer::shared();
    let a = client_with(&server, "pod-1", Duration::from_secs(30));
    for i in 0..20 {
        drop(a.try_lock(&k(&format!("lock:flush:{i}")), LockOptions::new()).await.unwrap());
    }
    assert!(a.flush_releases(Duration::from_secs(2)).await, "every background release finished");
    for i in 0..20 {
        assert_eq!(
            get(&server, &k(&format!("lock:flush:{i}"))),
            "(nil)",
            "released by the time flush returned"
        );
    }
    assert!(a.flush_releases(Duration::ZERO).await, "nothing pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_lock_to_the_oldest_waiter_and_a_dead_waiter_costs_one_hand_off() {
    init_tracing();
    let server = RedisServer::start();
    let key = k("lock:queue");
    let (a, b) = (client(&server, "pod-1"), client(&server, "pod-2"));
    let held = a.acquire(&key, LockOptions::new()).await.unwrap();
    // A waiter of another replica that died while queued, ahead of b: its ticket is live.
    let now_ms: u64 = server.cli(&["TIME"]).lines().next().unwrap().parse::<u64>().unwrap() * 1000;
    let (queue, until) = (schema::queue_key(&key), schema::tickets_key(&key));
    server.cli(&["RPUSH", &queue, "150|pod-9:dead"]);
    server.cli(&["ZADD", &until, &(now_ms + 5000).to_string(), "pod-9:dead"]);

    let waiter = tokio::spawn({
        let (b, key) = (b.clone(), key.clone());
        async move {
            let guard = b.acquire(&key, LockOptions::new().wait(Duration::from_secs(10))).await.unwrap();
            (guard, Instant::now())
        }
    });
    assert!(
        wait_until(Duration::from_secs(2), || server.cli(&["LLEN", &queue]) == "2").await,
        "b queued behind"
    );
    // The release hands the lock to the oldest waiter (the dead one): reserved, not free, so
    // nobody barges in meanwhile.
    let released_at = Instant::now();
    assert!(held.release().await.unwrap());
    // Marked: b still queues behind it.
    assert_eq!(get(&server, &key), format!("pod-9:dead{}", schema::QUEUED_MARK));
    let err = a.try_lock(&key, LockOptions::new()).await.unwrap_err();
    assert!(matches!(err, LockError::Held { .. }), "{err:?}");
    // The reservation lapses after the hand-off time (the command timeout, 150 ms here) and
    // the next waiter gets the lock.
    let (guard, acquired_at) = waiter.await.unwrap();
    let waited = acquired_at - released_at;
    assert!(waited >= Duration::from_millis(100) && waited < Duration::from_secs(3), "{waited:?}");
    assert_eq!(get(&server, &key), guard.token());
    assert_eq!(server.cli(&["LRANGE", &queue, "0", "-1"]), "", "the queue is empty again");
    assert!(guard.release().await.unwrap());
    a.try_lock(&key, LockOptions::new()).await.expect("free and owed to nobody").release().await.unwrap();
}
