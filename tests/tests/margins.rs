//! The margins the README promises, read off the guard: a holder's deadline counts from when its
//! command was *sent*, minus the drift allowance (1% + 2 ms), so it always stops trusting a lock
//! before Redis expires the key; and a holder whose key vanished with a Redis restart (no
//! persistence) is told, its stale fence refused by a fenced store.

use std::time::Duration;

use lock_core::{LockClient, LockOptions};
use tests::harness::{Direction, Fault, FaultProxy, RedisServer, init_tracing, wait_until};
use tokio::time::Instant;

/// How late the proxy delivers every reply.
const REPLY_DELAY: Duration = Duration::from_millis(300);
const LEASE: Duration = Duration::from_secs(5);

/// The README's drift allowance.
fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// A client whose liveness lease (which also caps every guard's deadline) outlasts the lease
/// under test, so the deadline read is the key's.
fn client(url: &str, instance: &str) -> LockClient {
    LockClient::builder()
        .url(url)
        .instance_id(instance)
        .command_timeout(Duration::from_secs(2))
        .liveness_ttl(LEASE * 4)
        .build()
        .expect("client")
}

/// `valid_until` against the window its acquiring command was sent in: no earlier than the
/// call's start, no later than the reply's arrival minus the delay the proxy added; and no
/// later than Redis's own expiry of the key.
async fn check_window(server: &RedisServer, what: &str, key: &str, valid_until: Instant, started: Instant) {
    let returned = Instant::now();
    assert!(
        returned - started >= REPLY_DELAY,
        "{what}: the reply was not delayed ({:?})",
        returned - started
    );
    let earliest = started + LEASE - drift(LEASE);
    let latest = returned - REPLY_DELAY + LEASE - drift(LEASE);
    assert!(
        valid_until >= earliest && valid_until <= latest,
        "{what}: valid_until is {:?} after the call's start, outside {:?}..={:?} (counted from the reply would be {:?})",
        valid_until - started,
        earliest - started,
        latest - started,
        returned + LEASE - drift(LEASE) - started
    );
    // Redis keeps the key at least that long.
    let read_at = Instant::now();
    let pttl: u64 = server.cli(&["PTTL", key]).parse().expect("a PTTL");
    let expires = read_at + Duration::from_millis(pttl);
    assert!(
        valid_until <= expires,
        "{what}: the guard trusts the lock {:?} past Redis's expiry",
        valid_until - expires
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_until_counts_from_the_send_minus_drift() {
    init_tracing();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).expect("proxy");
    let holder = client(&proxy.url(), "pod-margins");
    // The liveness key first, so its own round trip is not inside the measured window.
    holder.try_lock("warm-up", LockOptions::new()).await.expect("warm-up").release().await.expect("release");
    proxy.set(Direction::ToClient, Fault::Delay(REPLY_DELAY));
    let fixed = LockOptions::new().lease(LEASE);

    let started = Instant::now();
    let plain = holder.try_lock("lock:margin:plain", fixed.clone()).await.expect("plain SET NX");
    check_window(&server, "SET NX", "lock:margin:plain", plain.valid_until(), started).await;

    let started = Instant::now();
    let fenced = holder.try_lock("lock:margin:fenced", fixed.clone().fencing(true)).await.expect("fenced");
    check_window(&server, "the fenced script", "lock:margin:fenced", fenced.valid_until(), started).await;

    let started = Instant::now();
    let waited = holder
        .acquire("lock:margin:waited", fixed.clone().wait(Duration::from_secs(5)))
        .await
        .expect("waited");
    check_window(&server, "a waiter's try", "lock:margin:waited", waited.valid_until(), started).await;

    let semaphore = holder.semaphore("sem:margin", 2).expect("semaphore");
    let started = Instant::now();
    let permit = semaphore.acquire(fixed.clone()).await.expect("a permit");
    let pttl_key = "sem:margin"; // the holders' zset outlives each permit
    check_window(&server, "a permit", pttl_key, permit.valid_until(), started).await;

    proxy.heal();
    for released in
        [plain.release().await, fenced.release().await, waited.release().await, permit.release().await]
    {
        assert!(released.expect("release"));
    }
}

/// A fenced store: accepts a write only with a fence above every fence it accepted before.
#[derive(Default)]
struct Store {
    newest: u64,
}

impl Store {
    fn write(&mut self, fence: u64) -> bool {
        if fence <= self.newest {
            return false;
        }
        self.newest = fence;
        true
    }
}

/// Redis restarts without persistence under a holder: its key, its liveness key and the fence
/// counter are gone. The holder is told at its next liveness renewal (a third of the TTL),
/// another client takes the lock with a higher fence (fences are floored by server time, so
/// the lost counter does not matter), and the store refuses the old holder's late write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_across_a_restart_without_persistence_is_told_and_its_fence_refused() {
    init_tracing();
    let mut server = RedisServer::start();
    let ttl = Duration::from_secs(1);
    let holder = LockClient::builder()
        .url(server.url())
        .instance_id("pod-old")
        .command_timeout(Duration::from_millis(300))
        .liveness_ttl(ttl)
        .build()
        .expect("client");
    let fenced = LockOptions::new().fencing(true);
    let guard = holder.try_lock("lock:restart", fenced.clone()).await.expect("the holder takes the lock");
    let old_fence = guard.fence().expect("a fence");
    let mut store = Store::default();
    assert!(store.write(old_fence), "the holder writes while it holds");
    let lost = guard.lost();

    server.restart();
    let restarted = Instant::now();
    assert_eq!(server.cli(&["EXISTS", "lock:restart"]), "0", "nothing survived the restart");
    let reason = tokio::time::timeout(ttl + Duration::from_secs(2), lost).await.expect("the holder is told");
    let told_after = restarted.elapsed();
    assert!(!guard.is_held(), "told ({reason:?}) but still trusting the lock");

    let other = LockClient::builder().url(server.url()).instance_id("pod-new").build().expect("client");
    let taken = other.try_lock("lock:restart", fenced).await.expect("the lock is free after the restart");
    let new_fence = taken.fence().expect("a fence");
    assert!(new_fence > old_fence, "fences go on increasing: {new_fence} after {old_fence}");
    assert!(store.write(new_fence));
    assert!(!store.write(old_fence), "the old holder's late write is refused by its stale fence");
    eprintln!("restart without persistence: the holder was told after {told_after:?} ({reason:?})");
    assert!(
        wait_until(Duration::from_secs(1), || server.cli(&["GET", "lock:restart"]) == taken.token()).await,
        "the new holder's token is the key's value"
    );
    assert!(taken.release().await.expect("release"));
    drop(guard);
}

/// Redis restarts without persistence while a client holds nothing: its liveness key is gone,
/// and it learns so at the latest at its next renewal (a third of the TTL). A lock it takes
/// *after* reconnecting must not carry the lost identity (whose missing liveness key tells
/// every other client that the holder is dead, so they would take the lock over at once):
/// the identity is checked when the connection is re-established, before any command uses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_after_a_restart_without_persistence_is_not_taken_over() {
    init_tracing();
    let mut server = RedisServer::start();
    // A long TTL: no liveness renewal (every 10 s) falls inside the test, so only the
    // reconnection can tell the client that its liveness key is gone.
    let client = |instance: &str| {
        LockClient::builder()
            .url(server.url())
            .instance_id(instance)
            .command_timeout(Duration::from_secs(1))
            .liveness_ttl(Duration::from_secs(30))
            .build()
            .expect("client")
    };
    let (a, b) = (client("pod-a"), client("pod-b"));
    // Both liveness keys exist and both clients are connected; nothing is held.
    for c in [&a, &b] {
        let warm = c.try_lock("lock:warm-up", LockOptions::new()).await.expect("warm-up");
        assert!(warm.release().await.expect("release"));
    }
    assert_eq!(server.cli(&["KEYS", "lock-client:*"]).lines().count(), 2, "two liveness keys");

    server.restart_losing_data();
    assert_eq!(server.cli(&["DBSIZE"]), "0", "nothing survived the restart");

    // A's first command after the restart may fail on its broken connection; it takes the
    // lock as soon as it has reconnected.
    let deadline = Instant::now() + Duration::from_secs(10);
    let guard = loop {
        match a.try_lock("lock:after-restart", LockOptions::new()).await {
            Ok(guard) => break guard,
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                eprintln!("A's try after the restart failed ({e}); again");
            }
            Err(e) => panic!("A could not take the lock after the restart: {e}"),
        }
    };
    assert!(guard.is_held(), "A trusts the lock it just took");

    // B tries it, taking over dead holders as usual: A lives, so B is refused.
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        match b.try_lock("lock:after-restart", LockOptions::new()).await {
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                eprintln!("B's try after the restart failed ({e}); again");
            }
            other => break other,
        }
    };
    match refused {
        Err(lock_core::LockError::Held { .. }) => {}
        Ok(stolen) => panic!(
            "B took over A's lock taken after the restart (A's guard is_held: {}); B's token {}",
            guard.is_held(),
            stolen.token()
        ),
        Err(e) => panic!("B's try failed: {e}"),
    }
    let owner_key = format!("lock-client:{}", guard.token().rsplit_once(':').expect("a token").0);
    assert_eq!(
        server.cli(&["EXISTS", &owner_key]),
        "1",
        "the token A took the lock with names a liveness key that exists ({owner_key})"
    );
    assert!(guard.is_held(), "A still holds the lock");
    assert_eq!(server.cli(&["GET", "lock:after-restart"]), guard.token(), "A's token is the key's value");
    assert!(guard.release().await.expect("release"), "A released its own lock");
}
