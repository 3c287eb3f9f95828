//! Commands whose outcome a client cannot know (a reply lost, a command that lands late on a
//! connection the client dropped) and the stale beliefs they can leave: each test replays one
//! interleaving, found by the protocol's model (`lock-core/model/`), exactly, with the fault
//! proxy holding one connection's command or replies and a pause point stalling one task.
//! Each one failed before its fix.

use std::time::Duration;

use tokio::time::Instant;

use lock_core::test_hooks::{self, Point};
use lock_core::tick::{Claim, ClaimRequest};
use lock_core::{LockClient, LockOptions, schema};
use tests::harness::{Direction, Fault, FaultProxy, Hold, Monitor, RedisServer, init_tracing, wait_until};

/// The command timeout of the client behind the proxy, which is also its hand-off time (the
/// reservation of a lock handed to its waiter).
const COMMAND_TIMEOUT: Duration = Duration::from_millis(300);
/// Bound on any step of these tests that involves no timeout of the protocol's.
const WITHIN: Duration = Duration::from_secs(10);

fn client(url: &str, instance: &str) -> LockClient {
    LockClient::builder()
        .url(url)
        .instance_id(instance)
        .command_timeout(COMMAND_TIMEOUT)
        .build()
        .expect("client")
}

/// Loads the scripts and creates the client's liveness key, so that what follows goes to the
/// key under test only.
async fn warm_up(client: &LockClient) {
    let guard = client.acquire("warm-up", LockOptions::new().wait(WITHIN)).await.expect("warm-up lock");
    assert!(guard.release().await.expect("warm-up release"));
}

/// `key` as a bulk string on the wire: matches a command naming exactly that key, not the
/// `{key}:...` keys and channels around it.
fn bulk(key: &str) -> Vec<u8> {
    format!("\r\n{key}\r\n").into_bytes()
}

/// The key's value, empty when there is none.
fn get(server: &RedisServer, key: &str) -> String {
    let value = server.cli(&["GET", key]);
    if value == "(nil)" { String::new() } else { value }
}

/// Bug 1 of the model (two holders at once, unfenced). A waiter's first try queues it but its
/// reply is lost; it subscribes and, before its retry reads the clock, stalls. Meanwhile the
/// holder hands the lock to it (the message is heard), the reservation lapses untaken, and the
/// old holder takes the free key again. The retry is refused, and the wake-up heard earlier
/// must not count as a hand-off: its deadline would be counted from the refused retry, long
/// after the reservation it announced had lapsed. The waiter gets the lock once the holder
/// releases it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_hand_off_heard_before_a_refused_retry_is_not_taken_as_the_lock() {
    init_tracing();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).expect("proxy");
    let key = "lock:stale-hand-off";
    let holder = client(&server.url(), "pod-b");
    let waiter = client(&proxy.url(), "pod-a");
    warm_up(&waiter).await;
    let held = holder.acquire(key, LockOptions::new()).await.expect("the holder takes the lock");

    // The waiter's first try runs (it queues) but its reply never comes; its second try (the
    // retry right after subscribing) stalls before reading the clock.
    proxy.on_command(bulk(key), Hold::Replies);
    let mut stall = test_hooks::arm(Point::BeforeWaiterTry, key, 2);
    let wait = tokio::spawn(async move { waiter.acquire(key, LockOptions::new().wait(WITHIN * 3)).await });
    tokio::time::timeout(WITHIN, stall.reached()).await.expect("the waiter retries after subscribing");
    assert_eq!(proxy.stats().fired, 1, "the first try's reply was held");

    // The holder hands the lock over; the waiter hears it, but takes no step.
    let heard = proxy.stats().to_client;
    assert!(held.release().await.expect("release"));
    assert!(
        wait_until(WITHIN, || proxy.stats().to_client > heard).await,
        "the hand-off message reaches the waiter's client"
    );
    assert!(
        wait_until(WITHIN, || get(&server, key).is_empty()).await,
        "the reservation lapses untaken: {} (PTTL {} ms)",
        get(&server, key),
        server.cli(&["PTTL", key])
    );
    let held =
        holder.acquire(key, LockOptions::new()).await.expect("the old holder takes the free key again");
    stall.resume();

    // The waiter's retry is refused; the holder keeps the lock for a second.
    let mut wait = wait;
    tokio::select! {
        taken = &mut wait => {
            let taken = taken.expect("waiter task").expect("waiter");
            panic!(
                "two holders at once: the waiter took {:?} (is_held {}) while the holder's guard is held ({}), Redis says {}",
                taken.token(),
                taken.is_held(),
                held.is_held(),
                get(&server, key)
            );
        }
        () = tokio::time::sleep(Duration::from_secs(1)) => {}
    }
    assert!(held.is_held());
    assert_eq!(get(&server, key).trim_end_matches(schema::QUEUED_MARK), held.token());
    assert!(held.release().await.expect("release"));
    let taken = tokio::time::timeout(WITHIN, wait).await.expect("the waiter gets the lock").expect("task");
    let taken = taken.expect("the waiter gets the lock after the holder's release");
    assert!(taken.is_held());
    assert_eq!(get(&server, key), taken.token());
}

/// Bug 2 of the model (orphan for a full lease). A waiter's first try is held in the network
/// past its timeout, and the connection dropped; a later try gets the lock, and its guard is
/// released. Then the first try lands, on the free key, and takes it for a whole lease with no
/// guard: the token is given up again after the release until that try is accounted for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_that_lands_after_the_waiters_release_does_not_keep_the_lock() {
    init_tracing();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).expect("proxy");
    let key = "lock:late-try-after-release";
    let holder = client(&server.url(), "pod-b");
    let waiter = client(&proxy.url(), "pod-a");
    warm_up(&waiter).await;
    let held = holder.acquire(key, LockOptions::new()).await.expect("the holder takes the lock");

    proxy.on_command(bulk(key), Hold::Command);
    let wait = tokio::spawn(async move {
        let guard = waiter.acquire(key, LockOptions::new().wait(WITHIN * 3)).await;
        (guard, waiter)
    });
    // The first try is held; the retry after its timeout queues the waiter.
    assert!(
        wait_until(WITHIN, || server.cli(&["LLEN", &schema::queue_key(key)]) == "1").await,
        "the waiter queues with a later try"
    );
    assert_eq!(proxy.stats().fired, 1);
    assert!(held.release().await.expect("release"));
    let (taken, _waiter) =
        tokio::time::timeout(WITHIN, wait).await.expect("the waiter gets the lock").expect("task");
    let taken = taken.expect("the waiter gets the lock");
    let token = taken.token().to_owned();
    assert!(taken.release().await.expect("release"), "the caller is done with the lock");
    assert_eq!(server.cli(&["EXISTS", key]), "0");

    // The first try lands now, on the free key.
    let mut monitor = Monitor::start(&server);
    proxy.release_held();
    let landed = monitor
        .find(WITHIN, |line| line.contains(&format!("\"SET\" \"{key}\" \"{token}\"")))
        .await
        .expect("the late try runs and takes the free key");
    eprintln!("late try: {landed}");
    assert!(
        wait_until(Duration::from_secs(3), || get(&server, key) != token).await,
        "the key is held by a token nobody guards: {} (PTTL {} ms)",
        get(&server, key),
        server.cli(&["PTTL", key])
    );
}

/// Bug 3 of the model (a clean-up that stops too early). A waiter's first try takes the free
/// key but its reply is lost; its second try is held in the network past its timeout; the wait
/// is cancelled.
/// The clean-up frees what the first try took, which must not count as certain while the
/// second try can still land: when it does, on the free key, its token is given up again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waits_clean_up_outlasts_a_try_still_in_the_network() {
    init_tracing();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).expect("proxy");
    let key = "lock:clean-up-too-early";
    let waiter = client(&proxy.url(), "pod-a");
    warm_up(&waiter).await;

    proxy.on_command(bulk(key), Hold::Replies);
    proxy.on_command(bulk(key), Hold::Command);
    // Cancelled as it is about to send a third try: the second has timed out (its connection
    // dropped), so the clean-up goes out on another connection than either try.
    let mut third = test_hooks::arm(Point::BeforeWaiterTry, key, 3);
    let wait = tokio::spawn(async move { waiter.acquire(key, LockOptions::new().wait(WITHIN * 3)).await });
    tokio::time::timeout(WITHIN, third.reached()).await.expect("a first try, a second, then a third");
    assert_eq!(proxy.stats().fired, 2);
    let token = get(&server, key);
    assert!(!token.is_empty(), "the first try took the free key");
    wait.abort();
    assert!(wait.await.expect_err("cancelled").is_cancelled());
    assert!(
        wait_until(WITHIN, || get(&server, key).is_empty()).await,
        "the cancelled wait gives up what its first try took: {} (PTTL {} ms)",
        get(&server, key),
        server.cli(&["PTTL", key])
    );

    let mut monitor = Monitor::start(&server);
    proxy.release_held();
    let landed = monitor
        .find(WITHIN, |line| line.contains(&format!("\"SET\" \"{key}\" \"{token}\"")))
        .await
        .expect("the second try runs and takes the free key");
    eprintln!("late try: {landed}");
    assert!(
        wait_until(Duration::from_secs(3), || get(&server, key) != token).await,
        "the key is held by a token nobody guards: {} (PTTL {} ms)",
        get(&server, key),
        server.cli(&["PTTL", key])
    );
}

/// The lease of the batched claims below: long beside every bound of these tests, so that a
/// key kept for a lease by a token nobody guards fails them.
const CLAIM_LEASE: Duration = Duration::from_secs(30);

/// Loads the claim script on `client`'s connection (a claim of another key).
async fn warm_up_claims(client: &LockClient) {
    let claims = client.claim_ticks(&[ClaimRequest::new("warm-up-claim", 1, LockOptions::new())]).await;
    assert!(matches!(claims.as_slice(), [Ok(Claim::Claimed(_))]), "warm-up claim: {claims:?}");
}

/// A batched claim of `key` for `tick` with the long lease.
fn claim(key: &str, tick: i64) -> ClaimRequest<'_> {
    ClaimRequest::new(key, tick, LockOptions::new().lease(CLAIM_LEASE))
}

/// S1 of the scheduler's model. A batched claim's first send is held in the network past its
/// timeout (its connection dropped), and the claim is sent again: the lock is held by another
/// client, so the claim says `Held`. The holder releases; then the first send lands, on the
/// free key, and takes the lock and the tick. The resend's "held" proves nothing about the
/// first send: its clean-up stays armed and frees the key, which nobody guards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batched_claims_first_send_landing_after_its_resend_found_the_lock_held_is_given_up() {
    init_tracing();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).expect("proxy");
    let key = "lock:claim-resent-held";
    let holder = client(&server.url(), "pod-b");
    let claimer = client(&proxy.url(), "pod-a");
    warm_up(&claimer).await;
    warm_up_claims(&claimer).await;
    let held = holder.acquire(key, LockOptions::new()).await.expect("the holder takes the lock");

    proxy.on_command(bulk(key), Hold::Command);
    let claims = claimer.claim_ticks(&[claim(key, 1_000)]).await;
    assert!(
        matches!(claims.as_slice(), [Ok(Claim::Held { .. })]),
        "the resend finds the lock held: {claims:?}"
    );
    assert_eq!(proxy.stats().fired, 1, "the first send was held");
    assert!(held.release().await.expect("release"));
    assert_eq!(server.cli(&["EXISTS", key]), "0");

    // The first send lands now, on the free key.
    let mut monitor = Monitor::start(&server);
    proxy.release_held();
    let landed = monitor
        .find(WITHIN, |line| line.contains(&format!("\"SET\" \"{key}\" \"pod-a:")))
        .await
        .expect("the first send runs and takes the free key");
    eprintln!("late send: {landed}");
    assert!(
        wait_until(Duration::from_secs(5), || get(&server, key).is_empty()).await,
        "the key is held by a token nobody guards: {} (PTTL {} ms)",
        get(&server, key),
        server.cli(&["PTTL", key])
    );
}

/// S2 of the scheduler's model. A batched claim's first send takes the free lock and claims
/// the tick, but its reply is lost; the resend is answered with an error (OOM: Redis refuses
/// writes). The error says the resend did nothing, not the first send: its clean-up stays
/// armed and frees the key, which nobody guards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batched_claims_resend_refused_with_an_error_still_gives_up_what_the_first_send_took() {
    init_tracing();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).expect("proxy");
    let key = "lock:claim-resent-refused";
    let claimer = client(&proxy.url(), "pod-a");
    warm_up(&claimer).await;
    warm_up_claims(&claimer).await;

    proxy.on_command(bulk(key), Hold::Replies);
    let mut resend = test_hooks::arm(Point::BeforeClaimResend, key, 1);
    let claiming = tokio::spawn(async move {
        let claims = claimer.claim_ticks(&[claim(key, 1_000)]).await;
        (claims, claimer)
    });
    tokio::time::timeout(WITHIN, resend.reached())
        .await
        .expect("the claim is sent again after its lost reply");
    let token = get(&server, key);
    assert!(token.starts_with("pod-a:"), "the first send took the free key: {token:?}");
    // Every write refused from now on: the resend is answered OOM.
    assert_eq!(server.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]), "OK");
    assert_eq!(server.cli(&["CONFIG", "SET", "maxmemory", "1"]), "OK");
    resend.resume();
    let (claims, _claimer) =
        tokio::time::timeout(WITHIN, claiming).await.expect("the claim ends").expect("task");
    let refused = format!("{claims:?}");
    assert!(matches!(claims.as_slice(), [Err(_)]), "the resend is refused: {refused}");
    assert!(refused.contains("OOM"), "refused for memory: {refused}");
    assert_eq!(server.cli(&["CONFIG", "SET", "maxmemory", "0"]), "OK");

    assert!(
        wait_until(Duration::from_secs(5), || get(&server, key).is_empty()).await,
        "the key is held by a token nobody guards: {} (PTTL {} ms)",
        get(&server, key),
        server.cli(&["PTTL", key])
    );
}

/// Point 1 of issue 54 (a clean-up that decides by the reply's time). A fail-fast try is held
/// in the network past its timeout (sent at t0): its token is given up in the background until
/// t0 + lease. The give-up that runs last before that deadline has its reply held past it,
/// and the held try lands between the two, on the free key, before the deadline. The reply
/// after the deadline proves nothing (the give-up ran before the try): the clean-up goes on
/// until a give-up *sent* after the deadline ran, which frees the key nobody guards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_up_whose_last_reply_comes_after_the_deadline_still_frees_a_try_landing_before_it() {
    init_tracing();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).expect("proxy");
    let key = "lock:clean-up-deadline";
    // A command timeout longer than the held reply below, and no liveness renewal meanwhile:
    // the held give-up is answered late rather than failed.
    let timeout = Duration::from_secs(5);
    let lease = Duration::from_secs(10);
    let tryer = LockClient::builder()
        .url(proxy.url())
        .instance_id("pod-a")
        .command_timeout(timeout)
        .liveness_ttl(Duration::from_secs(120))
        .build()
        .expect("client");
    warm_up(&tryer).await;

    proxy.on_command(bulk(key), Hold::Command);
    let before = Instant::now();
    let trying = tokio::spawn(async move {
        let taken = tryer.try_lock(key, LockOptions::new().lease(lease)).await;
        (taken.map(|guard| guard.token().to_owned()), tryer)
    });
    assert!(wait_until(WITHIN, || proxy.stats().fired == 1).await, "the try is held");
    // The clean-up's deadline, t0 + lease, lies in [before, sent] + lease.
    let sent = Instant::now();
    let (taken, _tryer) =
        tokio::time::timeout(WITHIN, trying).await.expect("the try times out").expect("task");
    let e = taken.expect_err("the try's reply never comes");
    assert!(e.is_transient(), "{e}");

    // From 2.5 s before the deadline, replies are held: the next give-up (they are at most an
    // eighth of the lease apart) runs, and its reply waits.
    tokio::time::sleep_until(sent + lease - Duration::from_millis(2500)).await;
    let mut monitor = Monitor::start(&server);
    proxy.set(Direction::ToClient, Fault::Blackhole);
    let give_up = monitor
        .find(Duration::from_secs(2), |line| {
            line.contains("\"EVALSHA\"") && line.contains(&format!("\"{key}\""))
        })
        .await
        .expect("a give-up runs before the deadline");
    eprintln!("last give-up before the deadline: {give_up}");
    // The held try lands now, after that give-up, before the deadline.
    proxy.release_held();
    let landed = monitor
        .find(WITHIN, |line| line.contains(&format!("\"{key}\" \"pod-a:")) && !line.contains("EVALSHA"))
        .await
        .expect("the held try runs and takes the free key");
    assert!(
        Instant::now() < before + lease,
        "the held try landed before the deadline (the machine was too slow to place it)"
    );
    eprintln!("late try: {landed}");
    let token = get(&server, key);
    assert!(token.starts_with("pod-a:"), "the held try took the key: {token:?}");

    // The give-up's reply comes after the deadline.
    tokio::time::sleep_until(sent + lease + Duration::from_millis(100)).await;
    proxy.heal();
    assert!(
        wait_until(Duration::from_secs(3), || get(&server, key).is_empty()).await,
        "the key is held by a token nobody guards: {} (PTTL {} ms)",
        get(&server, key),
        server.cli(&["PTTL", key])
    );
}

/// Point 2 of issue 54 (a hand-off accepted after Redis restarted empty). A waiter is handed
/// the lock, but the message is held in the network; Redis restarts without persistence and
/// another client takes the free key; then the message arrives. It proves nothing about what
/// Redis holds now: the waiter must not hold a guard while the other client holds the lock
/// (its next try, on a reconnected lock connection, finds the key held). It gets the lock
/// once the other client releases it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_heard_after_a_restart_without_persistence_is_not_taken_as_the_lock() {
    init_tracing();
    let mut server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).expect("proxy");
    let key = "lock:hand-off-after-restart";
    let holder = client(&server.url(), "pod-b");
    // A long hand-off time (the command timeout) and no liveness renewal meanwhile: a waiter
    // trusting the message would find its deadline far ahead and its identity alive.
    let waiter = LockClient::builder()
        .url(proxy.url())
        .instance_id("pod-a")
        .command_timeout(Duration::from_secs(10))
        .liveness_ttl(Duration::from_secs(120))
        .wait_backoff(Duration::from_millis(100), Duration::from_millis(500))
        .build()
        .expect("client");
    warm_up(&waiter).await;
    let held =
        holder.acquire(key, LockOptions::new().lease(CLAIM_LEASE)).await.expect("the holder takes the lock");

    // The waiter queues and subscribes (two tries); its third try pauses until resumed.
    let mut third = test_hooks::arm(Point::BeforeWaiterTry, key, 3);
    let mut wait = tokio::spawn(async move {
        let taken = waiter.acquire(key, LockOptions::new().wait(WITHIN * 4)).await;
        (taken, waiter)
    });
    assert!(
        wait_until(WITHIN, || server.cli(&["LLEN", &schema::queue_key(key)]) == "1"
            && !server
                .cli(&["PUBSUB", "CHANNELS", &format!("{}*", schema::release_channel_prefix(key))])
                .trim()
                .is_empty())
        .await,
        "the waiter queues and subscribes"
    );

    // The hand-off's message is held; Redis restarts empty; another client takes the key.
    proxy.set(Direction::ToClient, Fault::Blackhole);
    let heard = proxy.stats().from_redis;
    assert!(held.release().await.expect("release"), "the holder hands the lock over");
    assert!(wait_until(WITHIN, || proxy.stats().from_redis > heard).await, "the hand-off is published");
    server.restart_losing_data();
    let other = client(&server.url(), "pod-c");
    let taken =
        other.try_lock(key, LockOptions::new().lease(CLAIM_LEASE)).await.expect("the free key is taken");
    proxy.heal();

    // The waiter hears the message and goes on to a try, which finds the key held.
    tokio::select! {
        done = &mut wait => {
            let (got, _waiter) = done.expect("waiter task");
            let got = got.map(|g| (g.token().to_owned(), g.is_held()));
            panic!("the waiter took the hand-off as the lock: {got:?} while {} holds it", taken.token());
        }
        () = third.reached() => {}
    }
    third.resume();
    tokio::select! {
        done = &mut wait => {
            let (got, _waiter) = done.expect("waiter task");
            let got = got.map(|g| (g.token().to_owned(), g.is_held()));
            panic!("two holders: the waiter got {got:?} while {} holds it", taken.token());
        }
        () = tokio::time::sleep(Duration::from_secs(2)) => {}
    }
    assert!(taken.is_held());
    assert_eq!(get(&server, key).trim_end_matches(schema::QUEUED_MARK), taken.token());

    // Released, the lock goes to the waiter.
    assert!(taken.release().await.expect("release"));
    let (got, _waiter) =
        tokio::time::timeout(WITHIN * 2, wait).await.expect("the waiter gets the lock").expect("task");
    let got = got.expect("the waiter gets the lock after the other client's release");
    assert!(got.is_held());
    assert_eq!(get(&server, key), got.token());
}
