//! Protocol v2 against a real redis-server: the one-command uncontended path, hand-off to the
//! named waiter across clients, crash takeover through liveness leases (real processes), no
//! orphaned lock after a Redis stall, and fence counters that expire yet keep increasing.
//!
//! Every test starts its own server: they pause it, or read server-wide command counters.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_core::schema;
use lock_core::{LockClient, LockError, LockOptions, LossReason};
use tests::harness::{Monitor, RedisServer, init_tracing, wait_until};

fn client_with(server: &RedisServer, instance: &str, timeout: Duration, liveness: Duration) -> LockClient {
    LockClient::builder()
        .url(server.url())
        .instance_id(instance)
        .command_timeout(timeout)
        .liveness_ttl(liveness)
        .build()
        .expect("valid client configuration")
}

fn client(server: &RedisServer, instance: &str) -> LockClient {
    client_with(server, instance, Duration::from_millis(300), Duration::from_secs(6))
}

fn get(server: &RedisServer, key: &str) -> String {
    server.cli(&["GET", key])
}

/// The holder's token: the key's value without the queue mark it carries while others queue.
fn holder_token(server: &RedisServer, key: &str) -> String {
    schema::unmarked(&get(server, key)).to_owned()
}

fn all_calls(server: &RedisServer) -> u64 {
    server
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter_map(|l| l.split("calls=").nth(1))
        .filter_map(|rest| rest.split(',').next())
        .map(|n| n.parse::<u64>().expect("numeric calls"))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_acquisition_is_one_plain_command() {
    init_tracing();
    let server = RedisServer::start();
    let a = client(&server, "pod-1");
    // The first acquisition also creates the client's liveness key; scripts get loaded.
    a.try_lock("lock:warm", LockOptions::new()).await.unwrap().release().await.unwrap();
    a.try_lock("lock:warm", LockOptions::new().fencing(true)).await.unwrap().release().await.unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    for _ in 0..20 {
        let guard = a.try_lock("lock:plain", LockOptions::new()).await.unwrap();
        assert!(guard.release().await.unwrap());
    }
    assert_eq!(server.command_calls("set"), 20, "one SET NX PX GET per acquisition");
    assert_eq!(
        server.command_calls("eval") + server.command_calls("evalsha"),
        20,
        "scripts only for the releases"
    );
    // Fenced acquisitions are scripted.
    a.try_lock("lock:fenced", LockOptions::new().fencing(true)).await.unwrap().release().await.unwrap();
    assert_eq!(server.command_calls("evalsha"), 22);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_only_the_named_waiter_of_another_client() {
    init_tracing();
    let server = RedisServer::start();
    let key = "lock:handoff";
    const CLIENTS: usize = 6;
    const ROUNDS: usize = 5;
    let clients: Vec<LockClient> = (0..CLIENTS).map(|i| client(&server, &format!("pod-{i}"))).collect();
    for c in &clients {
        c.try_lock("lock:warm", LockOptions::new()).await.unwrap().release().await.unwrap();
    }
    server.cli(&["CONFIG", "RESETSTAT"]);
    let holder = Arc::new(AtomicUsize::new(usize::MAX));
    let handoffs_to_other = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        let (c, holder, to_other) = (c.clone(), holder.clone(), handoffs_to_other.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = c.acquire(key, LockOptions::new().wait(Duration::from_secs(20))).await.unwrap();
                if holder.swap(i, Ordering::SeqCst) != i {
                    to_other.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                assert_eq!(holder.load(Ordering::SeqCst), i, "nobody else held it meanwhile");
                assert!(guard.release().await.unwrap());
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task).await.expect("all rounds finish").unwrap();
    }
    let acquisitions = (CLIENTS * ROUNDS) as u64;
    // lockbench measures about 21 per acquisition on an idle machine (the benchmark target: <= 25); waking
    // every client's waiter at each release cost about 10 per waiting client (~60 here). The
    // bound leaves room for fallback retries and liveness renewals on a loaded machine.
    let commands = all_calls(&server);
    assert!(
        commands <= 40 * acquisitions,
        "{commands} Redis commands for {acquisitions} acquisitions: a release must not wake every client"
    );
    assert!(
        handoffs_to_other.load(Ordering::SeqCst) >= CLIENTS * ROUNDS * 3 / 4,
        "hand-offs go to other clients"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_barges_in_while_a_lock_is_handed_over() {
    init_tracing();
    let server = RedisServer::start();
    let key = "lock:nobarge";
    let (a, b, c) = (client(&server, "pod-1"), client(&server, "pod-2"), client(&server, "pod-3"));
    let held = a.acquire(key, LockOptions::new()).await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.acquire(key, LockOptions::new().wait(Duration::from_secs(10))).await }
    });
    assert!(
        wait_until(Duration::from_secs(2), || server.cli(&["LLEN", &schema::queue_key("lock:nobarge")])
            == "1")
        .await
    );
    // Fail-fast callers racing the release never get the lock ahead of the waiter.
    let racers: Vec<_> = (0..10)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.try_lock(key, LockOptions::new()).await })
        })
        .collect();
    assert!(held.release().await.unwrap());
    let guard = waiter.await.unwrap().expect("the waiter gets it");
    for racer in racers {
        if let Ok(g) = racer.await.unwrap() {
            // Only possible once the waiter released, which it has not.
            panic!("a racer took the lock ahead of the waiter: {g:?}");
        }
    }
    assert_eq!(get(&server, key), guard.token());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_lock_is_reserved_for_as_long_as_its_waiter_asked() {
    init_tracing();
    let server = RedisServer::start();
    // The releasing client's own hand-off time (its command timeout, 300 ms) must not matter:
    // the waiter trusts the reservation for the time it put in its queue entry.
    let a = client(&server, "pod-1");
    // A hash-tagged key keeps its tag: the script must use the queue the schema names.
    for key in ["lock:reserve", "lock:{order-7}:reserve"] {
        let (queue, tickets) = (&schema::queue_key(key), &schema::tickets_key(key));
        let held = a.try_lock(key, LockOptions::new()).await.unwrap();
        // A waiter of another client (not running: nothing confirms or extends the hand-off).
        let waiter = "pod-9:abcdef012345:0b5e3c9a-4c1e-4d5f-9a0b-1c2d3e4f5a6b";
        let time = server.cli(&["TIME"]);
        let now_ms: u64 = time.lines().next().unwrap().parse::<u64>().unwrap() * 1000;
        server.cli(&["ZADD", tickets, &(now_ms + 60_000).to_string(), waiter]);
        server.cli(&["RPUSH", queue, &format!("5000|{waiter}")]);
        // What a queueing waiter's script does to the holder's value: the release hands over.
        server.cli(&["SET", key, &format!("{}{}", held.token(), schema::QUEUED_MARK), "KEEPTTL"]);
        assert!(held.release().await.unwrap());
        assert_eq!(get(&server, key), waiter, "handed to the queued waiter");
        let pttl: u64 = server.cli(&["PTTL", key]).parse().unwrap();
        assert!(
            (4000..=5000).contains(&pttl),
            "reserved for the waiter's 5 s, not the releaser's 300 ms: {pttl}"
        );
        assert_eq!(server.cli(&["LLEN", queue]), "0", "popped");
        // The ticket went; the zset keeps the hand-off's record for the waiter's client, scored
        // with the reservation's deadline (a lapse makes the queue skip that client's tickets).
        let record_member = schema::handoff_record("abcdef012345");
        assert_eq!(server.cli(&["ZRANGE", tickets, "0", "-1"]), record_member);
        let record: u64 = server.cli(&["ZSCORE", tickets, &record_member]).parse().unwrap();
        assert!((now_ms + 4000..=now_ms + 6000).contains(&record), "{record} vs {now_ms}");
    }
}

/// Spawns `lock_holder` with a long watchdog lease and a short liveness TTL; returns the child
/// and the token it holds.
async fn spawn_holder(server: &RedisServer, key: &str, liveness_ms: u64) -> (std::process::Child, String) {
    let mut holder = std::process::Command::new(env!("CARGO_BIN_EXE_lock_holder"))
        .args([server.url(), key.to_owned(), "30000".into(), liveness_ms.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn lock_holder");
    let stdout = holder.stdout.take().expect("piped stdout");
    let line = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let line = tokio::time::timeout(Duration::from_secs(10), line)
        .await
        .expect("holder acquires")
        .expect("reader")
        .expect("a line");
    let token = line.trim().strip_prefix("acquired ").expect("acquired line").to_owned();
    (holder, token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holders_lock_is_taken_over_within_the_liveness_ttl() {
    init_tracing();
    let server = RedisServer::start();
    let liveness = Duration::from_millis(1000);
    let (mut holder, token) = spawn_holder(&server, "lock:crash-wait", 1000).await;
    let waiter_client = client(&server, "pod-2");
    let waiter = tokio::spawn({
        let c = waiter_client.clone();
        async move {
            let guard = c.acquire("lock:crash-wait", LockOptions::new().wait(Duration::from_secs(20))).await;
            (guard, Instant::now())
        }
    });
    // Alive: the holder keeps it (its liveness key is renewed) well past its liveness TTL.
    assert!(!wait_until(3 * liveness, || holder_token(&server, "lock:crash-wait") != token).await);
    assert_eq!(
        get(&server, "lock:crash-wait"),
        format!("{token}{}", schema::QUEUED_MARK),
        "marked: someone queues behind it"
    );
    holder.kill().expect("kill -9 the holder");
    holder.wait().unwrap();
    let killed = Instant::now();
    let (guard, acquired_at) =
        tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("taken over").unwrap();
    let guard = guard.expect("the waiter gets the dead holder's lock");
    let after = acquired_at - killed;
    // The liveness key outlives the kill by at most its TTL; the waiter notices at its next
    // fallback retry (at most the maximum wait backoff later); plus a margin for a busy machine.
    let bound = liveness + lock_core::DEFAULT_MAX_WAIT_BACKOFF + Duration::from_secs(1);
    assert!(after <= bound, "taken over {after:?} after the crash (bound {bound:?}), lease was 30 s");
    assert_eq!(get(&server, "lock:crash-wait"), guard.token());
    assert!(
        server.cli(&["PTTL", "lock:crash-wait"]).parse::<i64>().unwrap() > 20_000,
        "a full lease of its own"
    );

    // A fail-fast caller (a scheduler replica at its next tick) takes over a dead holder too.
    let (mut holder, _) = spawn_holder(&server, "lock:crash-skip", 1000).await;
    holder.kill().expect("kill -9 the holder");
    holder.wait().unwrap();
    let killed = Instant::now();
    let replica = client(&server, "pod-3");
    let mut taken = None;
    while taken.is_none() && killed.elapsed() < Duration::from_secs(5) {
        match replica.try_lock("lock:crash-skip", LockOptions::new()).await {
            Ok(guard) => taken = Some(guard),
            Err(LockError::Held { .. }) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(taken.is_some(), "taken over by a fail-fast caller");
    assert!(killed.elapsed() <= liveness + Duration::from_secs(1), "{:?}", killed.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_liveness_key_is_gone_loses_its_locks_and_starts_afresh() {
    init_tracing();
    let server = RedisServer::start();
    let a = client_with(&server, "pod-1", Duration::from_millis(100), Duration::from_millis(600));
    let guard = a.acquire("lock:alive", LockOptions::new()).await.unwrap();
    let owner = guard.token().rsplit_once(':').unwrap().0.to_owned();
    let liveness_key = schema::liveness_key(&owner);
    assert_eq!(server.cli(&["EXISTS", &liveness_key]), "1");
    assert!(guard.is_held(), "held while the liveness key exists");
    // As if the process had stalled past the TTL: the key is gone; the next renewal sees it.
    server.cli(&["DEL", &liveness_key]);
    let reason = tokio::time::timeout(Duration::from_secs(2), guard.lost()).await.expect("loss is detected");
    assert_eq!(reason, LossReason::Expired);
    assert!(!guard.is_held());
    drop(guard);
    // Another client may take it over; this one comes back under a new identity.
    let b = client(&server, "pod-2");
    let taken = b.try_lock("lock:alive", LockOptions::new()).await.expect("taken over");
    let again = a.acquire("lock:other", LockOptions::new()).await.unwrap();
    assert!(!again.token().starts_with(&owner), "a new identity: {}", again.token());
    assert!(again.is_held());
    drop((taken, again));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_stall_leaves_no_orphaned_lock() {
    init_tracing();
    let server = RedisServer::start();
    let a = client_with(&server, "pod-1", Duration::from_millis(500), Duration::from_secs(6));
    a.try_lock("lock:warm", LockOptions::new()).await.unwrap().release().await.unwrap();
    let mut monitor = Monitor::start(&server);
    server.pause();
    let err = a.try_lock("lock:x", LockOptions::new()).await.expect_err("redis is stalled");
    assert!(err.is_transient(), "{err}");
    tokio::time::sleep(Duration::from_millis(1500)).await; // the stall goes on (the scenario itself)
    server.resume();
    let resumed = Instant::now();
    // The buffered SET runs when Redis resumes (proven by the server's own log of commands);
    // the clean-up, retried, deletes it.
    let ran = monitor
        .find(Duration::from_secs(5), |line| line.contains("\"SET\" \"lock:x\"") && line.contains("\"NX\""))
        .await;
    assert!(ran.is_some(), "the SET buffered during the stall never ran");
    assert!(
        wait_until(Duration::from_secs(1), || get(&server, "lock:x") == "(nil)").await,
        "still orphaned {:?} after the resume: {}",
        resumed.elapsed(),
        get(&server, "lock:x")
    );
    let guard = a.try_lock("lock:x", LockOptions::new()).await.expect("free again");
    assert!(guard.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_recognises_its_own_late_success_after_a_stall() {
    init_tracing();
    let server = RedisServer::start();
    let a = client_with(&server, "pod-1", Duration::from_millis(300), Duration::from_secs(6));
    a.try_lock("lock:warm", LockOptions::new()).await.unwrap().release().await.unwrap();
    server.pause();
    let waiter = tokio::spawn({
        let a = a.clone();
        async move { a.acquire("lock:y", LockOptions::new().wait(Duration::from_secs(10))).await }
    });
    tokio::time::sleep(Duration::from_millis(800)).await; // tries time out meanwhile
    server.resume();
    let guard =
        tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("acquires").unwrap().unwrap();
    assert_eq!(get(&server, "lock:y"), guard.token(), "the key holds the guard's own token");
    assert!(guard.release().await.unwrap());
    assert_eq!(get(&server, "lock:y"), "(nil)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_counters_expire_yet_fences_keep_increasing() {
    init_tracing();
    let server = RedisServer::start();
    let (a, b) = (client(&server, "pod-1"), client(&server, "pod-2"));
    let fenced = LockOptions::new().fencing(true).lease(Duration::from_millis(200));
    let mut fences = Vec::new();
    for round in 0..3 {
        let client = if round % 2 == 0 { &a } else { &b };
        let guard = client.acquire("lock:fencing", fenced.clone()).await.unwrap();
        fences.push(guard.fence().unwrap());
        let pttl: i64 = server.cli(&["PTTL", &schema::fence_key("lock:fencing")]).parse().unwrap();
        assert!(pttl > 0 && pttl <= 200, "the counter expires: {pttl}");
        assert!(guard.release().await.unwrap());
        // The counter's own expiry passes before the next acquisition.
        assert!(
            wait_until(Duration::from_secs(2), || server
                .cli(&["EXISTS", &schema::fence_key("lock:fencing")])
                == "0")
            .await
        );
    }
    // A counter ahead of the clock (many acquisitions within a microsecond) counts on.
    server.cli(&["SET", &schema::fence_key("lock:fencing"), "4999999999999999"]);
    let guard = a.acquire("lock:fencing", fenced.clone()).await.unwrap();
    fences.push(guard.fence().unwrap());
    assert_eq!(fences.last(), Some(&5_000_000_000_000_000));
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "strictly increasing: {fences:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_clients_first_wait_outlasts_an_unreachable_redis() {
    init_tracing();
    let mut server = RedisServer::start();
    server.stop();
    // Never connected yet: even its liveness key has to wait for Redis.
    let a = client(&server, "pod-1");
    let waiter = tokio::spawn({
        let a = a.clone();
        async move { a.acquire("lock:first", LockOptions::new().wait(Duration::from_secs(20))).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await; // Redis stays down a while (the scenario)
    assert!(!waiter.is_finished(), "the wait goes on while Redis is down");
    server.restart();
    let guard =
        tokio::time::timeout(Duration::from_secs(15), waiter).await.expect("acquires").unwrap().unwrap();
    assert_eq!(get(&server, "lock:first"), guard.token());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_beyond_exact_lua_numbers_is_rejected() {
    init_tracing();
    let server = RedisServer::start();
    let a = client(&server, "pod-1");
    let err = a.run_tick("lock:job", 1 << 60, LockOptions::new(), async {}).await.expect_err("out of range");
    assert!(matches!(err, LockError::InvalidOptions(_)), "{err:?}");
    assert!(err.to_string().contains("2^53"), "{err}");
    let ran = a.run_tick("lock:job", 1_700_000_000_000, LockOptions::new(), async { 7 }).await.unwrap();
    assert_eq!(ran, lock_core::tick::TickRun::Ran(7));
    assert_eq!(server.cli(&["GET", &schema::tick_key("lock:job")]), "1700000000000");
}

/// Batched tick claims: invalid input is that claim's error alone; a claim with a wait goes on
/// its own; a lock claimed in a batch whose holder finds callers queued at the end of its run
/// hands over to them (the grouped one-key release defers to the full release); a dead
/// holder's lock is taken over, a live one's reported held; and
/// 300 claimed locks released together cost a handful of release script calls, not 300.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_claims_check_input_hand_over_and_release_in_groups() {
    use lock_core::tick::{Claim, ClaimRequest};
    init_tracing();
    let server = RedisServer::start();
    let a = client(&server, "pod-1");
    let b = client(&server, "pod-2");
    let claims = a
        .claim_ticks(&[
            ClaimRequest::new("", 1, LockOptions::new()),
            ClaimRequest::new("lock:b1", 1 << 60, LockOptions::new()),
            ClaimRequest::new("lock:b2", 5, LockOptions::new().wait(Duration::from_secs(1))),
            ClaimRequest::new("lock:b3", 5, LockOptions::new()),
        ])
        .await;
    assert!(matches!(claims[0], Err(LockError::InvalidKey { .. })), "{:?}", claims[0]);
    assert!(matches!(claims[1], Err(LockError::InvalidOptions(_))), "{:?}", claims[1]);
    let mut claims = claims.into_iter().skip(2);
    let (Some(Ok(Claim::Claimed(waited))), Some(Ok(Claim::Claimed(b3)))) = (claims.next(), claims.next())
    else {
        panic!("both claimed");
    };
    assert_eq!(get(&server, "lock:b2"), waited.guard().token());
    assert!(waited.run(async {}).await.is_ok());
    // A caller queues behind the claimed lock while its body runs: the release hands over.
    let (queued_tx, queued_rx) = tokio::sync::oneshot::channel();
    let body = async {
        let waiter = tokio::spawn({
            let b = b.clone();
            async move { b.acquire("lock:b3", LockOptions::new().wait(Duration::from_secs(10))).await }
        });
        assert!(
            wait_until(Duration::from_secs(5), || get(&server, "lock:b3").ends_with(schema::QUEUED_MARK))
                .await,
            "the waiter queues"
        );
        let _ = queued_tx.send(());
        // In a tuple: a bare JoinHandle would make the body's output itself a future.
        (waiter,)
    };
    let (waiter,) = b3.run(body).await.expect("ran under the lock");
    queued_rx.await.expect("the waiter queued");
    let guard =
        tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("handed over").unwrap().unwrap();
    assert_eq!(holder_token(&server, "lock:b3"), guard.token());
    assert!(guard.release().await.unwrap());
    // A lock held by a client whose liveness key is gone is taken over; one whose client is
    // alive is reported held, and keeps its holder.
    let dead = "pod-9:999999999999:00000000-0000-4000-8000-000000000001";
    let alive = "pod-8:888888888888:00000000-0000-4000-8000-000000000002";
    server.cli(&["SET", "lock:dead", dead, "PX", "60000"]);
    server.cli(&["SET", "lock:alive", alive, "PX", "60000"]);
    server.cli(&["SET", &schema::liveness_key("pod-8:888888888888"), "1", "PX", "60000"]);
    let mut claims = a
        .claim_ticks(&[
            ClaimRequest::new("lock:dead", 9, LockOptions::new()),
            ClaimRequest::new("lock:alive", 9, LockOptions::new()),
        ])
        .await
        .into_iter();
    let Some(Ok(Claim::Claimed(taken))) = claims.next() else {
        panic!("the dead holder's lock is taken over")
    };
    assert_eq!(get(&server, "lock:dead"), taken.guard().token());
    assert!(matches!(claims.next(), Some(Ok(Claim::Held { .. }))));
    assert_eq!(get(&server, "lock:alive"), alive);
    assert!(taken.run(async {}).await.is_ok());
    // 300 locks claimed and released together.
    let keys: Vec<String> = (0..300).map(|i| format!("lock:many:{i}")).collect();
    let requests: Vec<ClaimRequest<'_>> =
        keys.iter().map(|k| ClaimRequest::new(k, 7, LockOptions::new())).collect();
    server.cli(&["CONFIG", "RESETSTAT"]);
    let mut runs = Vec::new();
    for claim in a.claim_ticks(&requests).await {
        let Ok(Claim::Claimed(claimed)) = claim else { panic!("claimed: {claim:?}") };
        runs.push(tokio::spawn(claimed.run(async {})));
    }
    for run in runs {
        run.await.expect("task").expect("ran");
    }
    let stats = server.cli(&["INFO", "commandstats"]);
    let evalsha = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|l| l.split(',').next())
        .and_then(|n| n.parse::<u64>().ok())
        .expect("evalsha counted");
    // Two claim calls (200 + 100), then the releases in groups.
    assert!(evalsha <= 40, "{evalsha} script calls for 300 claims and releases");
    for key in &keys {
        assert_eq!(server.cli(&["EXISTS", key]), "0", "{key} released");
        assert_eq!(get(&server, &schema::tick_key(key)), "7");
    }
}
