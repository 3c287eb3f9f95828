//! The network breaking between a client and Redis while both stay up: a partition (nothing
//! gets through, sockets stay open), late replies, connections reset. A [`FaultProxy`] sits
//! between the faulty client and its Redis; the other clients talk to Redis directly.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lock_core::{LockClient, LockError, LockOptions, schema};
use tests::harness::{Direction, Fault, FaultProxy, RedisServer, init_tracing, wait_until};
use tokio::sync::mpsc;

/// The faulty clients' liveness TTL: how long a cut-off holder keeps a lock at most.
const LIVENESS_TTL: Duration = Duration::from_secs(1);
/// Their command timeout.
const COMMAND_TIMEOUT: Duration = Duration::from_millis(200);
/// Scheduling noise on a loaded 2-core machine, added to every bound.
const SLACK: Duration = Duration::from_millis(1500);

fn client(url: &str, instance: &str) -> LockClient {
    LockClient::builder()
        .url(url)
        .instance_id(instance)
        .command_timeout(COMMAND_TIMEOUT)
        .liveness_ttl(LIVENESS_TTL)
        .watchdog_lease(Duration::from_secs(3))
        .build()
        .expect("client")
}

fn get(server: &RedisServer, key: &str) -> String {
    server.cli(&["GET", key])
}

/// A `lock_holder` process and the lines it prints, each with when it was read.
struct Holder {
    child: Child,
    lines: mpsc::UnboundedReceiver<(String, Instant)>,
}

impl Holder {
    fn spawn(url: &str, key: &str) -> Holder {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lock_holder"))
            .args([url, key, "3000", &LIVENESS_TTL.as_millis().to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn lock_holder");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send((line, Instant::now())).is_err() {
                    break;
                }
            }
        });
        Holder { child, lines }
    }

    /// The next line starting with `prefix` (the rest of it), and when it came.
    async fn line(&mut self, prefix: &str, within: Duration) -> (String, Instant) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some((line, at))) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return (rest.trim().to_owned(), at);
                    }
                }
                Ok(None) => panic!("lock_holder exited before printing {prefix:?}"),
                Err(_) => panic!("lock_holder printed no {prefix:?} line within {within:?}"),
            }
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A holder process cut off from Redis learns it lost the lock before anyone can take it; a
/// waiting replica takes it within about the liveness TTL; the holder's renewals, delivered
/// late once the partition heals, change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_holder_stops_trusting_its_lock_before_another_takes_it() {
    init_tracing();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).expect("proxy");
    let key = "lock:partitioned";
    let mut holder = Holder::spawn(&proxy.url(), key);
    let (token, _) = holder.line("acquired ", Duration::from_secs(15)).await;
    assert_eq!(get(&server, key), token);

    let waiter = client(&server.url(), "pod-waiter");
    let cut = Instant::now();
    proxy.partition();
    let wait = tokio::spawn(async move {
        let guard = waiter.acquire(key, LockOptions::new().wait(Duration::from_secs(20))).await;
        (guard, Instant::now(), waiter)
    });
    let (reason, lost_at) = holder.line("lost ", Duration::from_secs(10)).await;
    let (guard, taken_at, _waiter) = wait.await.expect("waiter task");
    let guard = guard.expect("the waiter takes the lock over");
    assert!(lost_at <= taken_at, "the holder lost it {:?} after the waiter took it", lost_at - taken_at);
    assert!(lost_at - cut <= LIVENESS_TTL + SLACK, "told after {:?} ({reason})", lost_at - cut);
    let bound = LIVENESS_TTL + lock_core::DEFAULT_MAX_WAIT_BACKOFF + SLACK;
    assert!(taken_at - cut <= bound, "taken over {:?} after the cut (bound {bound:?})", taken_at - cut);
    assert_eq!(get(&server, key), guard.token());
    eprintln!("partition: holder told after {:?}, lock taken over after {:?}", lost_at - cut, taken_at - cut);

    // Healed: what the holder sent meanwhile (renewals, liveness) lands now, late.
    let before = proxy.stats();
    proxy.heal();
    assert!(
        wait_until(Duration::from_secs(5), || proxy.stats().to_redis > before.to_redis).await,
        "the held commands are delivered"
    );
    // Through two of the old holder's renewal periods (1 s each), the key stays the new holder's.
    let watch_until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < watch_until {
        assert_eq!(get(&server, key), guard.token(), "the old holder's late commands changed the key");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(guard.is_held());
    assert!(guard.release().await.expect("release"));
}

/// A client's own view, in process: cut off, its guard is lost; after the heal its release
/// reports that and deletes nothing of the new holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_partition_the_old_holders_release_changes_nothing() {
    init_tracing();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).expect("proxy");
    let key = "lock:partition-release";
    let cut_off = client(&proxy.url(), "pod-cut");
    let other = client(&server.url(), "pod-other");
    let old = cut_off.acquire(key, LockOptions::new().fencing(true)).await.expect("lock");
    let lost = old.lost();
    proxy.partition();
    let cut = Instant::now();
    let reason = tokio::time::timeout(LIVENESS_TTL + SLACK, lost).await.expect("lost() fires");
    assert!(!old.is_held(), "{reason:?}");
    let new = other
        .acquire(key, LockOptions::new().fencing(true).wait(Duration::from_secs(10)))
        .await
        .expect("taken over");
    assert!(
        cut.elapsed() <= LIVENESS_TTL + lock_core::DEFAULT_MAX_WAIT_BACKOFF + SLACK,
        "{:?}",
        cut.elapsed()
    );
    assert!(new.fence() > old.fence(), "the new holder's fence is higher");
    proxy.heal();
    let released = old.release().await;
    assert!(matches!(released, Ok(false) | Err(LockError::Lost { .. })), "{released:?}");
    assert_eq!(get(&server, key), new.token(), "the new holder keeps the lock");
    // The cut-off client works again, under a new identity, and waits its turn.
    let busy = cut_off.try_lock(key, LockOptions::new()).await;
    assert!(matches!(busy, Err(LockError::Held { .. })), "{busy:?}");
    assert!(new.release().await.expect("release"));
    let again =
        cut_off.acquire(key, LockOptions::new().wait(Duration::from_secs(5))).await.expect("lock again");
    assert!(again.release().await.expect("release"));
}

/// An acquisition whose reply comes after the command timeout (a latency spike): the caller
/// got an error, but the lock was taken in Redis; it is released in the background once Redis
/// answers in time again, not left to its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_answered_too_late_leaves_no_orphaned_lock() {
    init_tracing();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).expect("proxy");
    let key = "lock:late-reply";
    let slow = client(&proxy.url(), "pod-slow");
    // Connected (and its liveness lease made) before the replies slow down.
    slow.try_lock("lock:warm-up", LockOptions::new())
        .await
        .expect("warm-up")
        .release()
        .await
        .expect("release");
    let spike = Duration::from_secs(1);
    proxy.set_for(Direction::ToClient, Fault::Delay(Duration::from_millis(700)), spike);
    let spiked = Instant::now();
    let lease = Duration::from_secs(10);
    let late = slow.try_lock(key, LockOptions::new().lease(lease)).await;
    assert!(matches!(&late, Err(e) if e.is_transient()), "{late:?}");
    assert!(
        get(&server, key).starts_with("pod-slow:"),
        "the acquisition ran in Redis although its reply was late"
    );
    // Freed by the clean-up of unknown outcomes about a second after the spike, not by the
    // 10 s lease.
    assert!(
        wait_until(Duration::from_secs(8), || server.cli(&["EXISTS", key]) == "0").await,
        "the orphaned lock is released"
    );
    let freed = spiked.elapsed();
    assert!(freed <= spike + Duration::from_secs(1) + SLACK, "freed {freed:?} after the spike began");
    eprintln!("late reply: orphaned lock freed {freed:?} after a {spike:?} latency spike began");
    let other = client(&server.url(), "pod-other");
    other.try_lock(key, LockOptions::new()).await.expect("free").release().await.expect("release");
}

/// A batched tick claim (a scheduler slot's claims) whose reply comes after the command
/// timeout, and whose one resend is late too: every claim of the batch reports an unknown
/// outcome, and every lock it took in Redis is released in the background, not left to its
/// lease. The ticks stay claimed: those job-ticks run nowhere (at most once), and claiming them
/// again is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batched_claim_answered_too_late_leaves_no_orphaned_lock() {
    use lock_core::tick::{Claim, ClaimRequest};
    init_tracing();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).expect("proxy");
    let slow = client(&proxy.url(), "pod-slow");
    // Connected, its liveness key made and the claim script loaded (a first EVALSHA would
    // only get NOSCRIPT, late).
    for claim in slow.claim_ticks(&[ClaimRequest::new("lock:warm-up", 1, LockOptions::new())]).await {
        let Ok(Claim::Claimed(claimed)) = claim else { panic!("warm-up claim: {claim:?}") };
        claimed.run(async {}).await.expect("warm-up run");
    }
    let keys: Vec<String> = (0..250).map(|i| format!("lock:late-batch:{i}")).collect();
    let lease = Duration::from_secs(10);
    let requests: Vec<ClaimRequest<'_>> =
        keys.iter().map(|k| ClaimRequest::new(k, 42, LockOptions::new().lease(lease))).collect();
    let spike = Duration::from_secs(1);
    proxy.set_for(Direction::ToClient, Fault::Delay(Duration::from_millis(700)), spike);
    let spiked = Instant::now();
    let claims = slow.claim_ticks(&requests).await;
    assert_eq!(claims.len(), keys.len());
    for claim in &claims {
        assert!(matches!(claim, Err(e) if e.is_transient()), "{claim:?}");
    }
    drop(claims);
    let ticks: Vec<String> = keys.iter().map(|k| schema::tick_key(k)).collect();
    let mget: Vec<&str> = std::iter::once("MGET").chain(ticks.iter().map(String::as_str)).collect();
    let claimed = server.cli(&mget).lines().filter(|tick| tick.trim() == "42").count();
    assert_eq!(claimed, keys.len(), "the claims ran in Redis although their reply was late");
    let exists: Vec<&str> = std::iter::once("EXISTS").chain(keys.iter().map(String::as_str)).collect();
    let held = || server.cli(&exists).trim().parse::<usize>().unwrap_or(usize::MAX);
    assert!(wait_until(Duration::from_secs(8), || held() == 0).await, "{} orphaned locks left", held());
    let freed = spiked.elapsed();
    assert!(freed <= spike + Duration::from_secs(1) + SLACK, "freed {freed:?} after the spike began");
    eprintln!("late batched claim: {} orphaned locks freed {freed:?} after the spike began", keys.len());
    // The ticks stay claimed: another replica's claim of the same tick is refused.
    let other = client(&server.url(), "pod-other");
    for claim in other.claim_ticks(&requests).await {
        assert!(matches!(claim, Ok(Claim::ClaimedElsewhere { last_tick: 42 })), "{claim:?}");
    }
}

/// A batched tick claim whose reply is lost to the command timeout once (a slow moment, not
/// an outage): it is sent again with the same tokens, finds each lock holding its own token,
/// and reports the claims as this client's, so the ticks run here, once, instead of being
/// claimed by a run that never happens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batched_claim_whose_reply_was_lost_once_runs_its_ticks() {
    use lock_core::tick::{Claim, ClaimRequest};
    init_tracing();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).expect("proxy");
    let timeout = Duration::from_millis(500);
    let slow = LockClient::builder()
        .url(proxy.url())
        .instance_id("pod-slow")
        .command_timeout(timeout)
        .liveness_ttl(Duration::from_secs(3))
        .build()
        .expect("client");
    for claim in slow.claim_ticks(&[ClaimRequest::new("lock:warm-up", 1, LockOptions::new())]).await {
        let Ok(Claim::Claimed(claimed)) = claim else { panic!("warm-up claim: {claim:?}") };
        claimed.run(async {}).await.expect("warm-up run");
    }
    let keys: Vec<String> = (0..50).map(|i| format!("lock:lost-once:{i}")).collect();
    let requests: Vec<ClaimRequest<'_>> = keys
        .iter()
        .map(|k| ClaimRequest::new(k, 42, LockOptions::new().lease(Duration::from_secs(10))))
        .collect();
    // Replies leaving Redis are held for the next 700 ms: the first reply misses the 500 ms
    // timeout; the resend goes out then, and its reply is let through with the first one's
    // when the spike ends, within its own timeout.
    let scripts_before = server.command_calls("evalsha");
    proxy.set_for(Direction::ToClient, Fault::Delay(Duration::from_secs(5)), Duration::from_millis(700));
    let claims = slow.claim_ticks(&requests).await;
    let mut ran = 0;
    for claim in claims {
        let Ok(Claim::Claimed(claimed)) = claim else { panic!("claim after one lost reply: {claim:?}") };
        claimed.run(async { ran += 1 }).await.expect("run");
    }
    assert_eq!(ran, keys.len(), "every tick ran here");
    // The material: the claim script ran twice (the lost call and its resend), plus the
    // grouped releases after the runs.
    let scripts = server.command_calls("evalsha") - scripts_before;
    assert!(scripts >= 2, "the claim was sent again: {scripts} script calls");
    let exists: Vec<&str> = std::iter::once("EXISTS").chain(keys.iter().map(String::as_str)).collect();
    assert!(
        wait_until(Duration::from_secs(5), || server.cli(&exists).trim() == "0").await,
        "the locks were released after the runs"
    );
    let other = client(&server.url(), "pod-other");
    for claim in other.claim_ticks(&requests).await {
        assert!(matches!(claim, Ok(Claim::ClaimedElsewhere { last_tick: 42 })), "{claim:?}");
    }
}

/// A release delayed in the network until after the lock's lease ran out and another caller
/// took it: when it finally lands, it deletes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_lands_late_never_deletes_a_newer_holders_key() {
    init_tracing();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).expect("proxy");
    let key = "lock:late-release";
    let slow = client(&proxy.url(), "pod-slow");
    let other = client(&server.url(), "pod-other");
    let old = slow.acquire(key, LockOptions::new().lease(Duration::from_millis(300))).await.expect("lock");
    proxy.set(Direction::ToRedis, Fault::Delay(Duration::from_millis(1500)));
    let release = tokio::spawn(async move { old.release().await });
    let new = other
        .acquire(key, LockOptions::new().wait(Duration::from_secs(5)))
        .await
        .expect("taken after the fixed lease");
    let released = release.await.expect("release task");
    assert!(!matches!(released, Ok(true)), "a late release cannot have freed the lock: {released:?}");
    // Everything the slow client sent so far, the release included, reaches Redis.
    let sent = proxy.stats().from_clients;
    assert!(
        wait_until(Duration::from_secs(10), || proxy.stats().to_redis >= sent).await,
        "the late release is delivered"
    );
    assert_eq!(get(&server, key), new.token(), "the newer holder's key survived the late release");
    proxy.heal();
    assert!(new.release().await.expect("release"));
}

/// The same for a grouped release (a claimed tick's lock released with others): delayed until
/// after the lease ran out and another caller took the lock, it deletes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_release_that_lands_late_never_deletes_a_newer_holders_key() {
    use lock_core::tick::{Claim, ClaimRequest};
    init_tracing();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).expect("proxy");
    let slow = client(&proxy.url(), "pod-slow");
    let other = client(&server.url(), "pod-other");
    let keys = ["lock:late-group:a", "lock:late-group:b"];
    let requests: Vec<ClaimRequest<'_>> = keys
        .iter()
        .map(|k| ClaimRequest::new(k, 1, LockOptions::new().lease(Duration::from_millis(300))))
        .collect();
    let mut runs = Vec::new();
    for claim in slow.claim_ticks(&requests).await {
        let Ok(Claim::Claimed(claimed)) = claim else { panic!("claimed: {claim:?}") };
        runs.push(claimed);
    }
    proxy.set(Direction::ToRedis, Fault::Delay(Duration::from_millis(1500)));
    let releases: Vec<_> = runs.into_iter().map(|run| tokio::spawn(run.run(async {}))).collect();
    let mut newer = Vec::new();
    for key in keys {
        let guard = other
            .acquire(key, LockOptions::new().wait(Duration::from_secs(5)))
            .await
            .expect("taken after the fixed lease");
        newer.push(guard);
    }
    for release in releases {
        let _ = release.await.expect("run task");
    }
    let sent = proxy.stats().from_clients;
    assert!(
        wait_until(Duration::from_secs(10), || proxy.stats().to_redis >= sent).await,
        "the late releases are delivered"
    );
    for (key, guard) in keys.iter().zip(&newer) {
        assert_eq!(get(&server, key), guard.token(), "{key}: the newer holder's key survived");
    }
    proxy.heal();
    for guard in newer {
        assert!(guard.release().await.expect("release"));
    }
}

/// Connections reset again and again while a waiter waits, while the lock is handed to it and
/// while a holder's watchdog renews: no wake-up is lost, no lock lost, nothing left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_resets_lose_no_wake_up_and_leak_nothing() {
    init_tracing();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).expect("proxy");
    let key = "lock:resets";
    let holder = client(&server.url(), "pod-holder");
    let waiter = client(&proxy.url(), "pod-waiter");

    // A waiter whose connections are reset while it waits still gets the lock at the release.
    for round in 0..3 {
        let guard = holder.acquire(key, LockOptions::new()).await.expect("lock");
        let waiter_ = waiter.clone();
        let waiting = tokio::spawn(async move {
            let guard = waiter_.acquire(key, LockOptions::new().wait(Duration::from_secs(15))).await;
            (guard, Instant::now())
        });
        assert!(
            wait_until(Duration::from_secs(5), || server.cli(&["LLEN", &schema::queue_key(key)]) == "1")
                .await,
            "round {round}: the waiter queued"
        );
        for _ in 0..3 {
            proxy.reset_connections();
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        let released = Instant::now();
        assert!(guard.release().await.expect("release"));
        let (got, at) = waiting.await.expect("waiter task");
        let got = got.unwrap_or_else(|e| panic!("round {round}: the waiter failed: {e}"));
        let gap = at - released;
        assert!(
            gap <= lock_core::DEFAULT_MAX_WAIT_BACKOFF + SLACK,
            "round {round}: woke {gap:?} after the release"
        );
        eprintln!("resets: round {round}, the waiter got the lock {gap:?} after the release");
        assert!(got.release().await.expect("release"));
    }

    // A holder whose connections are reset while its watchdog renews keeps the lock.
    let guard = waiter.acquire(key, LockOptions::new()).await.expect("lock");
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        proxy.reset_connections();
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(guard.is_held(), "lost through resets");
        assert_eq!(get(&server, key), guard.token());
    }
    // The release may be the first command on a connection reset moments ago: redis-rs learns
    // of a reset only when a command on it fails, and a release is never sent twice (a late
    // first one would make the second report someone else's lock). Then it reports the error
    // and the clean-up of unknown outcomes deletes the key (checked below).
    match guard.release().await {
        Ok(held) => assert!(held, "the holder's release found its key"),
        Err(e) => {
            assert!(e.is_transient(), "{e:?}");
            eprintln!("resets: the release after a reset failed ({e}); the clean-up removes the key");
        }
    }

    // Nothing left behind: no queue, no tickets, no lock.
    let leftovers = [key.to_owned(), schema::queue_key(key), schema::tickets_key(key)];
    let left = || server.cli(&["EXISTS", &leftovers[0], &leftovers[1], &leftovers[2]]) == "0";
    assert!(wait_until(Duration::from_secs(5), left).await, "keys left: {}", server.cli(&["KEYS", "*"]));
    assert!(proxy.stats().reset >= 9, "{:?}", proxy.stats());
}

/// A `scheduler_replica` process; every `started <tick>` it prints lands in `runs`.
fn spawn_replica(url: &str, instance: &str, key: &str, runs: &Runs) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_scheduler_replica"))
        .args([url, instance, key, "100", "3000", "1000"])
        .env("RUST_LOG", std::env::var("REPLICA_LOG").unwrap_or_else(|_| "error".into()))
        .stdout(Stdio::piped())
        .stderr(match std::env::var("REPLICA_LOG_DIR") {
            Ok(dir) => Stdio::from(std::fs::File::create(format!("{dir}/{instance}.log")).expect("log file")),
            Err(_) => Stdio::null(),
        })
        .spawn()
        .expect("spawn scheduler_replica");
    let stdout = child.stdout.take().expect("piped stdout");
    let (runs, instance) = (runs.clone(), instance.to_owned());
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(tick) = line.strip_prefix("started ").and_then(|t| t.trim().parse::<i64>().ok()) {
                runs.lock().expect("runs").push((instance.clone(), tick));
            }
        }
    });
    child
}

type Runs = std::sync::Arc<std::sync::Mutex<Vec<(String, i64)>>>;

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as i64
}

/// Three scheduler replicas, one of them cut off from Redis for four seconds: every slot runs
/// once (the others take the cut-off replica's slots after the claim grace) except those its
/// lock outlives it if it was running the job at the cut, the cut-off replica runs nothing
/// while it cannot claim, and nothing runs twice once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_scheduler_replica_runs_nothing_and_loses_no_slot() {
    init_tracing();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).expect("proxy");
    let runs: Runs = Default::default();
    let key = "lock:partitioned-job";
    let mut children = [
        spawn_replica(&server.url(), "pod-a", key, &runs),
        spawn_replica(&server.url(), "pod-b", key, &runs),
        spawn_replica(&proxy.url(), "pod-cut", key, &runs),
    ];
    let ran = |n: usize| runs.lock().expect("runs").len() >= n;
    assert!(wait_until(Duration::from_secs(15), || ran(2)).await, "the replicas run the job");
    let start = now_ms();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cut = now_ms();
    proxy.partition();
    // Longer than the job lock's 3 s lease plus a slot and the claim grace: if the cut-off
    // replica held the lock at the cut, the others still get slots to run before it heals
    // (with 4 s, a renewal just before the cut left them none: seen in CI).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let healed = now_ms();
    proxy.heal();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let end = now_ms();
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }

    let runs = runs.lock().expect("runs").clone();
    let mut per_tick = std::collections::BTreeMap::<i64, Vec<&str>>::new();
    for (instance, tick) in &runs {
        per_tick.entry(*tick).or_default().push(instance);
    }
    for (tick, instances) in &per_tick {
        assert_eq!(instances.len(), 1, "tick {tick} ran more than once: {instances:?}");
    }
    // Every slot from 1 s after the start to 1.5 s before the end ran, except:
    // - perhaps one claimed by the cut-off replica as the partition began (its reply never
    //   came: at most once, as for any replica that loses Redis mid-claim);
    // - if the cut-off replica was running the job at the cut, the slots while its lock
    //   outlives it: a cut-off holder looks like a run still going until its lock's lease
    //   (here 3 s, shorter than the liveness TTL) or its liveness lease runs out, so those
    //   slots are skipped as held, as behind an overrunning run.
    let first = (start / 1000 + 1) * 1000;
    let last = (end - 1500) / 1000 * 1000;
    let missing: Vec<i64> = (first..=last).step_by(1000).filter(|t| !per_tick.contains_key(t)).collect();
    let held_at_cut = runs.iter().any(|(i, t)| i == "pod-cut" && (cut - 1000..=cut).contains(t));
    let excused = |t: &i64| {
        (cut - 1000..=cut + 1000).contains(t) || (held_at_cut && (cut..=cut + 3000 + 1000).contains(t))
    };
    assert!(
        missing.iter().all(excused) && (held_at_cut || missing.len() <= 1),
        "slots missed: {missing:?} (cut at {cut}, healed at {healed}); runs {per_tick:?}"
    );
    // Nothing ran on the cut-off replica while it was cut off (a claim sent in the partition's
    // last second may land when it heals, and win: still once).
    let cut_off_runs: Vec<i64> = runs
        .iter()
        .filter(|(instance, tick)| instance == "pod-cut" && *tick > cut + 1000 && *tick < healed - 1000)
        .map(|(_, tick)| *tick)
        .collect();
    assert!(
        cut_off_runs.is_empty(),
        "the cut-off replica ran {cut_off_runs:?} (cut at {cut}, healed at {healed})"
    );
    let others = runs.iter().filter(|(i, t)| i != "pod-cut" && *t > cut && *t < healed).count();
    let expected = if held_at_cut { 1 } else { 3 };
    assert!(others >= expected, "the other replicas ran the slots of the partition: {per_tick:?}");
    eprintln!(
        "scheduler partition: {} slots, {} skipped (cut-off replica held the lock at the cut: {held_at_cut}), \
         {others} run during the 6 s partition by the others",
        last / 1000 - first / 1000 + 1,
        missing.len(),
    );
}

/// `redis+cluster://` seeded with `urls` (`redis://host:port/` each).
fn cluster_url(urls: &[String]) -> String {
    let hosts: Vec<&str> =
        urls.iter().map(|u| u.trim_start_matches("redis://").trim_end_matches('/')).collect();
    format!("redis+cluster://{}", hosts.join(","))
}

/// One shard master cut off from every client while the cluster itself sees it healthy (its
/// client port is announced through a proxy, the cluster bus stays direct, so no failover):
/// the holder of a lock on that shard learns it lost it before the key lapses there, nobody
/// takes it meanwhile (nobody reaches it), and after the heal another client takes it and
/// the holder's late renewals change nothing. A lock on another shard is kept, unless the
/// holder's liveness key is on the cut-off shard too (then every lock of the client goes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_shard_master_cut_off_loses_only_its_locks_and_they_come_back() {
    init_tracing();
    let cluster = tokio::task::spawn_blocking(tests::harness::RedisCluster::start).await.expect("cluster");
    let key = "lock:partition:shard";
    let master = cluster.master_for_key(key);
    let port: u16 =
        master.trim_end_matches('/').rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port");
    let proxy = FaultProxy::start(port).expect("proxy");
    tests::harness::query(&master, &["CONFIG", "SET", "cluster-announce-port", &proxy.port().to_string()])
        .expect("announce the proxy's port");
    let others: Vec<String> = cluster.master_urls().into_iter().filter(|m| *m != master).collect();
    let announced = format!(":{}@", proxy.port());
    assert!(
        wait_until(Duration::from_secs(10), || {
            others.iter().all(|m| {
                tests::harness::query(m, &["CLUSTER", "NODES"]).is_ok_and(|n| n.contains(&announced))
            })
        })
        .await,
        "every master learns the announced port"
    );
    let url = cluster_url(&others);
    // The cluster now names that master by the proxy's port.
    let proxied = format!("redis://127.0.0.1:{}/", proxy.port());
    let on_cut_off_shard = |k: &str| {
        let m = cluster.master_for_key(k);
        m == master || m == proxied
    };
    let other_key =
        (0..100).map(|i| format!("lock:partition:other:{i}")).find(|k| !on_cut_off_shard(k)).expect("a key");

    let holder = client(&url, "pod-holder");
    let guard = holder.acquire(key, LockOptions::new().watchdog()).await.expect("the holder takes the lock");
    let other_guard =
        holder.acquire(&other_key, LockOptions::new().watchdog()).await.expect("and one on another shard");
    let liveness = schema::liveness_key(schema::owner_of(guard.token()).expect("a token"));
    let liveness_cut_off = on_cut_off_shard(&liveness);
    assert!(proxy.stats().accepted > 0, "the client reaches that shard through the proxy");

    let cut = Instant::now();
    proxy.partition();
    let waiter = client(&url, "pod-waiter");
    let wait = tokio::spawn(async move {
        let got = waiter.acquire(key, LockOptions::new().wait(Duration::from_secs(30))).await;
        (got, Instant::now(), waiter)
    });
    let reason =
        tokio::time::timeout(Duration::from_secs(10), guard.lost()).await.expect("the holder is told");
    let told = cut.elapsed();
    let exists = tests::harness::query(&master, &["EXISTS", key]).expect("EXISTS on the master");
    assert_eq!(exists, "1", "told {told:?} after the cut ({reason:?}), but the key had lapsed first");
    assert!(!wait.is_finished(), "nobody reaches the cut-off shard");
    if liveness_cut_off {
        assert!(!other_guard.is_held(), "its liveness key was cut off: every lock of the client goes");
    } else {
        assert!(other_guard.is_held(), "a lock on another shard is kept");
    }

    // Healed once the key lapsed on the master: the waiter takes it, late renewals land.
    assert!(
        wait_until(Duration::from_secs(10), || tests::harness::query(&master, &["EXISTS", key])
            .is_ok_and(|e| e == "0"))
        .await,
        "the key lapses on the cut-off master"
    );
    let healed = Instant::now();
    proxy.heal();
    let (got, taken_at, _waiter) =
        tokio::time::timeout(Duration::from_secs(20), wait).await.expect("waiter ends").expect("task");
    let got = got.expect("the waiter takes the lock after the heal");
    let watch_until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < watch_until {
        let value = tests::harness::query(&master, &["GET", key]).expect("GET");
        assert_eq!(schema::unmarked(&value), got.token(), "the old holder's late commands changed the key");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "cluster shard cut off: holder told after {told:?} ({reason:?}); liveness key on that shard: {liveness_cut_off}; \
         taken {:?} after the heal",
        taken_at - healed
    );
    assert!(got.release().await.expect("release"));
    drop(other_guard);
}

/// Field `name` of `SENTINEL MASTER` (the fixture's master) as the sentinel at `url` reports it.
fn sentinel_field(url: &str, name: &str) -> Option<String> {
    let reply =
        tests::harness::query(url, &["SENTINEL", "MASTER", redis_fixture::SENTINEL_MASTER_NAME]).ok()?;
    let fields: Vec<&str> = reply.lines().collect();
    fields.chunks(2).find(|kv| kv[0] == name).and_then(|kv| kv.get(1)).map(|v| (*v).to_owned())
}

/// The Sentinel master cut off from the clients, the sentinels and its replica (they all reach
/// it through a proxy): the sentinels promote the replica, the holder's
/// client follows to it, and the lock stays one holder's at a time. The holder either keeps
/// its lock (its renewal reaches the promoted replica, which has the key thanks to `WAIT`) or
/// is told before anyone else takes it; after the heal the old master is demoted and the
/// holder's held-back commands, landing there late, change nothing on the new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_master_cut_off_fails_over_with_one_holder_at_a_time() {
    init_tracing();
    let group =
        tokio::task::spawn_blocking(tests::harness::RedisSentinelGroup::start).await.expect("sentinels");
    let name = group.master_name().to_owned();
    let (_, master_port) = group.master_addr();
    let master = format!("redis://127.0.0.1:{master_port}/");
    let proxy = FaultProxy::start(master_port).expect("proxy");
    // The sentinels (and so the clients) now reach the master only through the proxy.
    for sentinel in group.sentinel_urls() {
        let q = |args: &[&str]| tests::harness::query(&sentinel, args).expect("a sentinel command");
        q(&["SENTINEL", "REMOVE", &name]);
        q(&["SENTINEL", "MONITOR", &name, "127.0.0.1", &proxy.port().to_string(), "2"]);
        q(&["SENTINEL", "SET", &name, "down-after-milliseconds", "1000", "failover-timeout", "5000"]);
    }
    // The replica too (the sentinels would move it there anyway, at a moment of their
    // choosing): replication is cut with everything else, and it is in sync before the cut.
    let replica = group.data_urls().into_iter().find(|u| *u != master).expect("a replica");
    tests::harness::query(&replica, &["REPLICAOF", "127.0.0.1", &proxy.port().to_string()])
        .expect("REPLICAOF");
    let synced_through_proxy = || {
        tests::harness::query(&replica, &["INFO", "replication"]).is_ok_and(|info| {
            info.contains(&format!("master_port:{}", proxy.port())) && info.contains("master_link_status:up")
        })
    };
    let sentinels = group.sentinel_urls();
    assert!(
        wait_until(Duration::from_secs(20), || synced_through_proxy()
            && sentinels.iter().all(|s| {
                sentinel_field(s, "num-slaves").as_deref() == Some("1")
                    && sentinel_field(s, "num-other-sentinels").as_deref() == Some("2")
                    && sentinel_field(s, "port").as_deref() == Some(&proxy.port().to_string())
            }))
        .await,
        "the sentinels monitor the master through the proxy"
    );
    let hosts: Vec<String> =
        sentinels.iter().map(|u| u.trim_start_matches("redis://").trim_end_matches('/').to_owned()).collect();
    let url = format!("redis+sentinel://{}/{name}", hosts.join(","));
    let holder = LockClient::builder()
        .url(url.as_str())
        .instance_id("pod-holder")
        .command_timeout(Duration::from_secs(1))
        .liveness_ttl(Duration::from_secs(10))
        .watchdog_lease(Duration::from_secs(8))
        .replica_ack(lock_core::ReplicaAck::new(1, Duration::from_millis(500)))
        .build()
        .expect("the holder's client");
    let key = "lock:partition:sentinel";
    let guard = holder
        .acquire(key, LockOptions::new().watchdog().fencing(true))
        .await
        .expect("the holder takes the lock");
    let holder_fence = guard.fence().expect("fenced");
    assert!(proxy.stats().accepted > 0, "the client reaches the master through the proxy");

    let waiter = client(&url, "pod-waiter");
    let cut = Instant::now();
    proxy.partition();
    let wait = tokio::spawn(async move {
        let got = waiter.acquire(key, LockOptions::new().fencing(true).wait(Duration::from_secs(40))).await;
        (got, Instant::now(), waiter)
    });
    // The sentinels promote the replica (it has the key: the holder asked for WAIT 1).
    let promoted = loop {
        let now: Vec<Option<String>> = sentinels.iter().map(|s| sentinel_field(s, "port")).collect();
        if let Some(Some(port)) = now.first()
            && *port != proxy.port().to_string()
            && now.iter().all(|p| p.as_ref() == Some(port))
        {
            break format!("redis://127.0.0.1:{port}/");
        }
        assert!(cut.elapsed() < Duration::from_secs(30), "no failover 30 s after the cut: {now:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let failover = cut.elapsed();
    assert_eq!(
        schema::unmarked(
            &tests::harness::query(&promoted, &["GET", key]).expect("GET on the promoted replica")
        ),
        guard.token(),
        "the promoted replica has the holder's lock"
    );
    // The holder either renews on the promoted replica in time (keeps it) or is told.
    let settled = wait_until(Duration::from_secs(15), || {
        !guard.is_held()
            || tests::harness::query(&promoted, &["PTTL", key])
                .ok()
                .and_then(|t| t.parse::<u64>().ok())
                .is_some_and(|ms| {
                    Duration::from_millis(ms) + cut.elapsed() > Duration::from_secs(8) + failover
                })
    })
    .await;
    assert!(settled, "the holder neither renewed on the promoted replica nor was told");
    let kept = guard.is_held();
    assert!(!wait.is_finished() || !kept, "the waiter got the lock while the holder still held it");

    proxy.heal();
    // The sentinels demote the old master; its late commands change nothing on the new one.
    assert!(
        wait_until(Duration::from_secs(20), || tests::harness::query(&master, &["ROLE"])
            .is_ok_and(|r| r.starts_with("slave")))
        .await,
        "the old master is demoted after the heal"
    );
    let release_sent = Instant::now();
    let released = guard.release().await;
    let (got, taken_at, _waiter) =
        tokio::time::timeout(Duration::from_secs(40), wait).await.expect("waiter ends").expect("task");
    let got = got.expect("the waiter takes the lock");
    if kept {
        assert!(taken_at >= release_sent, "the waiter took the lock before the holder released it");
        assert_eq!(released.ok(), Some(true), "the holder kept its lock, so its release owned it");
    }
    assert!(got.fence().is_some_and(|f| f > holder_fence), "fences increase across the failover");
    let value = tests::harness::query(&promoted, &["GET", key]).expect("GET");
    assert_eq!(schema::unmarked(&value), got.token());
    eprintln!(
        "sentinel master cut off: failover {failover:?} after the cut; holder kept the lock: {kept}; \
         waiter took it {:?} after the release was sent",
        taken_at.saturating_duration_since(release_sent)
    );
    assert!(got.release().await.expect("release"));
    drop(group);
}
