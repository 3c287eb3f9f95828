//! A failover in the middle of a hold, with real processes: the master is killed (`SIGKILL`)
//! while a lock is held and waiters of another client wait; Sentinel (or, in the cluster, the
//! master's replica) takes over. What README promises is asserted: the holder keeps the lock
//! or is told (`lost()` fires), nothing panics, no waiter holds the lock while the holder
//! still does, the same clients work afterwards without being rebuilt, and with replica
//! acknowledgement (`WAIT`) the lock survives on the promoted master with the holder's token.
//! Without `WAIT` a second holder is possible; those tests assert what is guaranteed either
//! way (a holder whose key did not survive is told within a renewal, fences increase), and two
//! more force the loss: the promoted replica made to miss the lock (Sentinel), and a client's
//! liveness key lost in a failover of another shard (Cluster).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lock_core::{LockClient, LockError, LockOptions, LossReason, ReplicaAck};
use tests::harness::{RedisCluster, RedisSentinelGroup, init_tracing, query, wait_until};

/// Command timeout of the clients: a failover makes commands fail; they must fail fast, but
/// not so fast that a busy machine fails them.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);
/// Liveness TTL: longer than a failover (about 2.5 s) plus the client's rediscovery, so a
/// holder that keeps its key also keeps its liveness lease across the failover.
const LIVENESS_TTL: Duration = Duration::from_secs(10);
/// How long waiters wait: longer than the whole test.
const WAIT: Duration = Duration::from_secs(60);
/// Watchdog lease: longer than a failover plus the client's rediscovery (so a surviving lock
/// stays renewed), renewed every 2.7 s, so a holder whose key did not survive is told within
/// seconds.
const WATCHDOG_LEASE: Duration = Duration::from_secs(8);
/// How long after the promotion a holder whose key is gone may take to be told: its next
/// renewal (a third of the lease) once its client has found the new master (a few command
/// timeouts), with a margin for a busy machine.
const TOLD_WITHIN: Duration = Duration::from_secs(15);

/// A client of `url` with the timings above, with replica acknowledgement (1 replica within
/// 500 ms, else the acquisition fails) when `ack`.
fn client(url: &str, instance: &str, ack: bool) -> LockClient {
    let mut builder = LockClient::builder()
        .url(url)
        .instance_id(instance)
        .command_timeout(COMMAND_TIMEOUT)
        .liveness_ttl(LIVENESS_TTL)
        .watchdog_lease(WATCHDOG_LEASE);
    if ack {
        builder = builder.replica_ack(ReplicaAck::new(1, Duration::from_millis(500)));
    }
    builder.build().unwrap_or_else(|e| panic!("client of {url}: {e}"))
}

/// `<scheme>://host1:port1,host2:port2/<path>` from `redis://host:port/` URLs.
fn multi_host_url(scheme: &str, urls: &[String], path: &str) -> String {
    let hosts: Vec<&str> =
        urls.iter().map(|u| u.trim_start_matches("redis://").trim_end_matches('/')).collect();
    format!("{scheme}://{}/{path}", hosts.join(","))
}

/// What the scenario needs from a deployment.
trait Failover: Send + 'static {
    /// The URL clients are built from.
    fn client_url(&self) -> String;
    /// The URL of the master that serves `key` now.
    fn master_for(&self, key: &str) -> String;
    /// Kills that master and waits for the promotion; returns the new master's URL.
    fn kill_master_for(&mut self, key: &str) -> String;
    /// Restarts the killed master, which rejoins as a replica of the promoted one.
    fn restore_replica(&mut self);
    /// The release channels some client is subscribed to on `master` (sharded in a cluster).
    fn release_channels_on(&self, master: &str) -> Vec<String> {
        let command = if self.sharded() { "SHARDCHANNELS" } else { "CHANNELS" };
        query(master, &["PUBSUB", command, "*:released:*"])
            .map(|reply| reply.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned).collect())
            .unwrap_or_default()
    }
    /// Whether clients use sharded pub/sub here.
    fn sharded(&self) -> bool;
}

impl Failover for RedisSentinelGroup {
    fn client_url(&self) -> String {
        multi_host_url("redis+sentinel", &self.sentinel_urls(), self.master_name())
    }
    fn master_for(&self, _key: &str) -> String {
        self.master_url()
    }
    fn kill_master_for(&mut self, _key: &str) -> String {
        let (host, port) = self.kill_master().expect("Sentinel fails over");
        format!("redis://{host}:{port}/")
    }
    fn restore_replica(&mut self) {
        self.restart_old_master().expect("the old master rejoins as a replica");
    }
    fn sharded(&self) -> bool {
        false
    }
}

/// A cluster and the master it lost.
struct Cluster {
    cluster: RedisCluster,
    killed: Option<String>,
}

impl Failover for Cluster {
    fn client_url(&self) -> String {
        multi_host_url("redis+cluster", &self.cluster.urls(), "")
    }
    fn master_for(&self, key: &str) -> String {
        self.cluster.master_for_key(key)
    }
    fn kill_master_for(&mut self, key: &str) -> String {
        let master = self.cluster.master_for_key(key);
        let promoted = self.cluster.kill_master(&master).expect("the replica is promoted");
        self.killed = Some(master);
        promoted
    }
    fn restore_replica(&mut self) {
        let killed = self.killed.take().expect("a master was killed");
        self.cluster.restart_node(&killed).expect("the old master rejoins as a replica");
    }
    fn sharded(&self) -> bool {
        true
    }
}

/// What one waiter saw.
#[derive(Debug)]
#[allow(dead_code)] // fields are read by printing the outcome
enum Waited {
    /// It got the lock this long after the holder's release was sent (negative: before it,
    /// i.e. while the holder still believed it held the lock).
    Got { after_release_ms: i64, fence: Option<u64> },
    /// Its `lock()` failed: the error, and whether it is marked transient.
    Failed { error: String, transient: bool },
}

/// What happened in one run of the scenario.
#[derive(Debug)]
#[allow(dead_code)] // fields are read by printing the outcome
struct Outcome {
    /// How long the failover took, kill to promotion seen by the fixture.
    failover: Duration,
    /// The key on the promoted master had the holder's token right after the failover.
    key_survived: bool,
    /// The holder's guard still held the lock once its client had settled on the new master.
    holder_kept: bool,
    /// `lost()` fired on the holder's guard.
    holder_told: bool,
    /// The holder's release after the failover: whether it still owned the lock, or the error.
    release: Result<bool, String>,
    /// The waiters of the other client.
    waiters: Vec<Waited>,
    /// With `WAIT` and no replica left on the key's shard: the new acquisition's error.
    acquire_without_replica: Option<String>,
}

/// [`Failover::kill_master_for`] off the runtime (it blocks until the promotion).
async fn kill_master_for<D: Failover>(mut deployment: D, key: &str) -> (D, String) {
    let key = key.to_owned();
    tokio::task::spawn_blocking(move || {
        let promoted = deployment.kill_master_for(&key);
        (deployment, promoted)
    })
    .await
    .expect("failover")
}

/// Kills the master while `lock:failover:<name>` is held (fenced) and 2 waiters of another
/// client wait; asserts what holds with or without acknowledgement and returns the rest.
async fn failover_mid_hold<D: Failover>(deployment: D, name: &str, ack: bool) -> Outcome {
    let key = format!("lock:failover:{name}");
    let url = deployment.client_url();
    let holder = client(&url, "holder", ack);
    let others = client(&url, "waiter", false);

    // With acknowledgement, a replica starved of CPU (a loaded CI machine) may miss the 500 ms
    // ack of the very first write; the shortfall releases the lock, so trying again is safe.
    // The failover below is what this test is about.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let guard = loop {
        match holder.acquire(&key, LockOptions::new().fencing(true)).await {
            Ok(guard) => break guard,
            Err(LockError::ReplicaAck { .. }) if tokio::time::Instant::now() < deadline => {}
            Err(e) => panic!("the holder takes the lock: {e:?}"),
        }
    };
    let token = guard.token().to_owned();
    let holder_fence = guard.fence().expect("a fenced guard");
    let master = deployment.master_for(&key);
    assert_eq!(query(&master, &["GET", &key]).expect("GET on the master"), token);

    let told = Arc::new(AtomicBool::new(false));
    tokio::spawn({
        let (lost, told) = (guard.lost(), told.clone());
        async move {
            let reason = lost.await;
            eprintln!("holder told: lost ({reason:?})");
            told.store(true, Ordering::SeqCst);
        }
    });
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let (others, key) = (others.clone(), key.clone());
            tokio::spawn(async move {
                let got = others.acquire(&key, LockOptions::new().fencing(true).wait(WAIT)).await;
                let at = Instant::now();
                let got = match got {
                    // Held briefly, then released: the other waiter's turn.
                    Ok(guard) => {
                        let fence = guard.fence();
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        let _ = guard.release().await;
                        Ok(fence)
                    }
                    Err(e) => Err(e),
                };
                (got, at)
            })
        })
        .collect();
    assert!(wait_until(Duration::from_secs(5), || others.stats().waiters_on(&key) == 2).await, "both wait");

    let started = Instant::now();
    let (mut deployment, promoted) = kill_master_for(deployment, &key).await;
    let failover = started.elapsed();
    assert_ne!(promoted, master);
    let promoted_at = Instant::now();
    let on_promoted = query(&promoted, &["GET", &key]).expect("GET on the promoted master");
    // Marked while the waiters queue behind the holder.
    let key_survived = lock_core::schema::unmarked(&on_promoted) == token;
    eprintln!("{name}: failover took {failover:?}; the promoted master has {key} = {on_promoted:?}");

    // Let the holder's client find the new master: its liveness lease must have been renewed
    // after the promotion (the key's remaining TTL shows it), or the guard must know it lost
    // the lock.
    let liveness_key = lock_core::schema::liveness_key(lock_core::schema::owner_of(&token).expect("a token"));
    let liveness_master = deployment.master_for(&liveness_key);
    let renewed_after_promotion = || {
        let pttl = query(&liveness_master, &["PTTL", &liveness_key]).ok().and_then(|t| t.parse::<u64>().ok());
        pttl.is_some_and(|ms| Duration::from_millis(ms) + promoted_at.elapsed() > LIVENESS_TTL)
    };
    let settled =
        wait_until(Duration::from_secs(15), || told.load(Ordering::SeqCst) || renewed_after_promotion())
            .await;
    assert!(settled, "the holder neither renewed its liveness lease after the failover nor was told");
    if !key_survived {
        // The promoted master lacks the lock: the holder must learn it at its next renewal.
        assert!(
            wait_until(TOLD_WITHIN, || told.load(Ordering::SeqCst)).await,
            "the lock did not survive the failover, but the holder was not told within {TOLD_WITHIN:?}"
        );
    }
    let holder_kept = guard.is_held();
    let holder_told = told.load(Ordering::SeqCst);
    assert!(holder_kept || holder_told, "the holder neither keeps the lock nor was told");
    assert!(key_survived || !holder_kept, "the key is gone, but the holder still trusts its guard");

    // Release: the lock goes on to the waiters (of the other client) on the new master.
    let released_at = Instant::now();
    let release = guard.release().await.map_err(|e| e.to_string());
    let mut waited = Vec::new();
    for waiter in waiters {
        let (got, at) = tokio::time::timeout(Duration::from_secs(30), waiter)
            .await
            .expect("waiters finish")
            .expect("task");
        waited.push(match got {
            Ok(fence) => {
                let after_release_ms = if at >= released_at {
                    i64::try_from(at.duration_since(released_at).as_millis()).unwrap_or(i64::MAX)
                } else {
                    -i64::try_from(released_at.duration_since(at).as_millis()).unwrap_or(i64::MAX)
                };
                Waited::Got { after_release_ms, fence }
            }
            Err(e) => Waited::Failed { transient: e.is_transient(), error: e.to_string() },
        });
    }
    // Fences keep increasing across the failover (the counter is floored by server time), so
    // a store that checks them rejects the older holder's writes.
    for w in &waited {
        if let Waited::Got { fence, .. } = w {
            assert!(
                fence.is_some_and(|f| f > holder_fence),
                "fence {fence:?} after {holder_fence}: {waited:?}"
            );
        }
    }
    // Never two holders while the lock survived: no waiter got it before the holder released
    // it. (When the promoted master does not have the key, a second holder is the documented
    // failover window: the test records it.)
    let second_holder =
        waited.iter().any(|w| matches!(w, Waited::Got { after_release_ms, .. } if *after_release_ms < 0));
    if second_holder {
        eprintln!(
            "{name}: a waiter got the lock before the holder released it (key survived: {key_survived}, \
             holder kept: {holder_kept}, told: {holder_told}): {waited:?}"
        );
    }
    assert!(
        !(key_survived && second_holder),
        "two holders although the lock survived the failover: {waited:?}"
    );

    // The same clients work without being rebuilt. With `WAIT` and no replica left on the
    // key's shard, an acquisition there falls short: it fails and leaves no lock behind.
    // In the key's slot (hash tag): on the promoted master, in a cluster too.
    let again_key = format!("{{{key}}}:again");
    let mut acquire_without_replica = None;
    if ack && deployment.master_for(&again_key) == promoted {
        match holder.acquire(&again_key, LockOptions::new()).await {
            Err(e @ LockError::ReplicaAck { .. }) => {
                assert!(e.is_transient());
                assert_eq!(
                    query(&promoted, &["EXISTS", &again_key]).expect("EXISTS"),
                    "0",
                    "released on shortfall"
                );
                acquire_without_replica = Some(e.to_string());
            }
            other => panic!("with no replica left, WAIT 1 must fall short: {other:?}"),
        }
        deployment = tokio::task::spawn_blocking(move || {
            deployment.restore_replica();
            deployment
        })
        .await
        .expect("restore a replica");
    }
    // A shortfall is transient (README): right after the replica is back, retry until it counts.
    let deadline = Instant::now() + Duration::from_secs(10);
    let again = loop {
        match holder.acquire(&again_key, LockOptions::new()).await {
            Ok(guard) => break guard,
            Err(e @ LockError::ReplicaAck { .. }) if Instant::now() < deadline => {
                eprintln!("{name}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the holder's client works after the failover: {e}"),
        }
    };
    assert_eq!(query(&deployment.master_for(&again_key), &["GET", &again_key]).expect("GET"), again.token());
    assert!(again.release().await.expect("release"));
    let other = others
        .acquire(&again_key, LockOptions::new().wait(Duration::from_secs(5)))
        .await
        .expect("the waiters' client works too");
    assert!(other.release().await.expect("release"));
    drop(deployment);

    Outcome {
        failover,
        key_survived,
        holder_kept,
        holder_told,
        release,
        waiters: waited,
        acquire_without_replica,
    }
}

/// How soon after the promotion a waiter's subscription must be back on the new master (the
/// background restore polls every 50 ms; before it: 0.75 s with Sentinel, never in a cluster).
const RESUBSCRIBED_WITHIN: Duration = Duration::from_millis(500);
/// How soon after a release the waiter must have the lock, failover or not: far under its
/// fallback timer (the waiter's client backs off to 5 s), so only the release message can be
/// that fast, and under the command timeout (1 s), so a try of the waiter's in flight when the
/// replica was promoted must have found the new master rather than timed out. (Measured: 0-1 ms
/// on Sentinel; in a cluster 0.7-0.85 s before its retries were made short, 1-40 ms since.)
const HEARD_WITHIN: Duration = Duration::from_millis(150);

/// Kills the master serving `lock:resubscribe:<name>` while a waiter of another client waits
/// on it. The waiter's subscription must be back on the promoted master within
/// [`RESUBSCRIBED_WITHIN`], and the holder's release right after must reach the waiter through
/// it within [`HEARD_WITHIN`]. Returns (resubscribed after the promotion, got the lock after
/// the release).
async fn waiter_hears_the_release_after_a_failover<D: Failover>(
    deployment: D,
    name: &str,
) -> (Duration, Duration) {
    let key = format!("lock:resubscribe:{name}");
    let url = deployment.client_url();
    let holder = client(&url, "holder", true);
    let others = LockClient::builder()
        .url(url.as_str())
        .instance_id("waiter")
        .command_timeout(COMMAND_TIMEOUT)
        .liveness_ttl(LIVENESS_TTL)
        .wait_backoff(Duration::from_millis(50), Duration::from_secs(5))
        .build()
        .expect("the waiter's client");
    let guard = holder.acquire(&key, LockOptions::new()).await.expect("the holder takes the lock");
    // Recorded now (not within its usual 100 ms), so an operator's release finds it at once.
    assert!(holder.record_holdings().await, "the holdings record is written");
    let master = deployment.master_for(&key);
    let waiter = tokio::spawn({
        let (others, key) = (others.clone(), key.clone());
        async move {
            let got = others.acquire(&key, LockOptions::new().wait(WAIT)).await;
            (got.map(|g| g.token().to_owned()), Instant::now())
        }
    });
    assert!(
        wait_until(Duration::from_secs(5), || !deployment.release_channels_on(&master).is_empty()).await,
        "the waiter subscribes on the master"
    );
    let (deployment, promoted) = kill_master_for(deployment, &key).await;
    let promoted_at = Instant::now();
    let resubscribed =
        wait_until(RESUBSCRIBED_WITHIN, || !deployment.release_channels_on(&promoted).is_empty()).await;
    let resubscribed_after = promoted_at.elapsed();
    assert!(
        resubscribed,
        "{name}: no release channel subscribed on the promoted master {RESUBSCRIBED_WITHIN:?} after the promotion"
    );
    // The holder's client must reach the new master before its release can: retried until then.
    let deadline = Instant::now() + Duration::from_secs(15);
    // Measured from the reply: the successful call may itself have spent a while finding the
    // new master (redis-rs retries it), and the release lands at some point inside it.
    let released_at = loop {
        match holder.force_release(&key, guard.token()).await {
            Ok(true) => break Instant::now(),
            Ok(false) => panic!("{name}: the lock did not survive the failover (WAIT 1 was asked)"),
            Err(e) if Instant::now() < deadline => {
                eprintln!("{name}: release not through yet: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{name}: the holder's client never reached the new master: {e}"),
        }
    };
    // Released above: its own release now finds another token and changes nothing.
    drop(guard);
    let (got, at) =
        tokio::time::timeout(Duration::from_secs(30), waiter).await.expect("the waiter ends").expect("task");
    got.expect("the waiter gets the lock");
    let heard_after = at.saturating_duration_since(released_at);
    eprintln!(
        "{name}: resubscribed {resubscribed_after:?} after the promotion; lock handed over {heard_after:?} after the release"
    );
    assert!(
        heard_after < HEARD_WITHIN,
        "{name}: the waiter got the lock {heard_after:?} after the release: it did not hear it"
    );
    drop(deployment);
    (resubscribed_after, heard_after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_a_sentinel_failover_a_waiter_resubscribes_and_hears_the_release() {
    init_tracing();
    let group = tokio::task::spawn_blocking(RedisSentinelGroup::start).await.expect("sentinel group");
    waiter_hears_the_release_after_a_failover(group, "sentinel").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_a_cluster_failover_a_waiter_resubscribes_and_hears_the_release() {
    init_tracing();
    let cluster = tokio::task::spawn_blocking(RedisCluster::start).await.expect("cluster");
    waiter_hears_the_release_after_a_failover(Cluster { cluster, killed: None }, "cluster").await;
}

/// With replica acknowledgement the lock is on the promoted master with the holder's token,
/// the holder keeps it, its release reports it as its own, and the waiters, who waited through
/// the failover, get it in turn after that release.
fn assert_survived(outcome: &Outcome) {
    assert!(outcome.key_survived, "WAIT: the lock must survive the failover: {outcome:#?}");
    assert!(outcome.holder_kept && !outcome.holder_told, "the holder keeps its lock: {outcome:#?}");
    assert_eq!(outcome.release, Ok(true), "{outcome:#?}");
    assert!(
        outcome
            .waiters
            .iter()
            .all(|w| matches!(w, Waited::Got { after_release_ms, .. } if *after_release_ms >= 0)),
        "waiters wait through the failover and get the lock after the release: {outcome:#?}"
    );
    // The first of them is handed the lock by the release's message, as without a failover.
    let first = outcome
        .waiters
        .iter()
        .filter_map(|w| match w {
            Waited::Got { after_release_ms, .. } => Some(*after_release_ms),
            Waited::Failed { .. } => None,
        })
        .min();
    let bound = i64::try_from(HEARD_WITHIN.as_millis()).unwrap_or(i64::MAX);
    assert!(
        first.is_some_and(|ms| ms < bound),
        "the first waiter got the lock {first:?} ms after the release, not within {HEARD_WITHIN:?}: {outcome:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_failover_mid_hold_with_wait_keeps_the_lock() {
    init_tracing();
    let group = tokio::task::spawn_blocking(RedisSentinelGroup::start).await.expect("sentinel group");
    let outcome = failover_mid_hold(group, "sentinel-wait", true).await;
    eprintln!("sentinel, WAIT 1: {outcome:#?}");
    assert_survived(&outcome);
    assert!(outcome.acquire_without_replica.is_some(), "after the failover no replica is left: {outcome:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_failover_mid_hold_without_wait_is_recorded() {
    init_tracing();
    let group = tokio::task::spawn_blocking(RedisSentinelGroup::start).await.expect("sentinel group");
    let outcome = failover_mid_hold(group, "sentinel-nowait", false).await;
    // Guaranteed without WAIT (asserted in the scenario): no panic; the holder keeps the lock,
    // or, if the promoted master lacks it, is told within a renewal; no waiter holds it while
    // it survived; fences increase; the clients work afterwards. Which of the two happened is
    // chance (replication usually wins the race): `failover_loses_the_lock` forces the loss.
    eprintln!("sentinel, no WAIT: {outcome:#?}");
    assert!(outcome.key_survived || outcome.holder_told, "{outcome:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_failover_mid_hold_with_wait_keeps_the_lock() {
    init_tracing();
    let cluster = tokio::task::spawn_blocking(RedisCluster::start).await.expect("cluster");
    let outcome = failover_mid_hold(Cluster { cluster, killed: None }, "cluster-wait", true).await;
    eprintln!("cluster, WAIT 1: {outcome:#?}");
    assert_survived(&outcome);
    assert!(outcome.acquire_without_replica.is_some(), "the promoted master has no replica: {outcome:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_failover_mid_hold_without_wait_is_recorded() {
    init_tracing();
    let cluster = tokio::task::spawn_blocking(RedisCluster::start).await.expect("cluster");
    let outcome = failover_mid_hold(Cluster { cluster, killed: None }, "cluster-nowait", false).await;
    eprintln!("cluster, no WAIT: {outcome:#?}");
    assert!(outcome.key_survived || outcome.holder_told, "{outcome:#?}");
}

/// A store that accepts a write only with a fence higher than any it accepted before (the
/// order service's `WHERE last_fence < :fence`).
#[derive(Default)]
struct FencedStore {
    last: std::sync::Mutex<u64>,
}

impl FencedStore {
    fn write(&self, fence: u64) -> bool {
        let mut last = self.last.lock().expect("not poisoned");
        let accepted = fence > *last;
        if accepted {
            *last = fence;
        }
        accepted
    }
}

/// The lock lost in a failover, forced: the replica is made to miss the lock and its fence (as
/// if the master died before replicating them), then the master is killed. Another client
/// takes the lock on the promoted master with a higher fence; the old holder is told
/// (`NotOwner`) at its next renewal, and the store rejects its stale fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lock_lost_in_a_sentinel_failover_is_noticed_and_its_stale_fence_rejected() {
    init_tracing();
    let mut group = tokio::task::spawn_blocking(RedisSentinelGroup::start).await.expect("sentinel group");
    let url = group.client_url();
    let (holder, other) = (client(&url, "holder", false), client(&url, "other", false));
    let key = "lock:failover:lost";
    let store = FencedStore::default();
    let guard = holder.acquire(key, LockOptions::new().fencing(true)).await.expect("the holder takes it");
    let old_fence = guard.fence().expect("fenced");
    assert!(store.write(old_fence));
    let master = group.master_url();
    let replica = group.data_urls().into_iter().find(|u| *u != master).expect("a replica");
    assert!(
        wait_until(Duration::from_secs(5), || query(&replica, &["GET", key]).ok().as_deref()
            == Some(guard.token()))
        .await,
        "replicated first"
    );
    query(&replica, &["CONFIG", "SET", "replica-read-only", "no"]).expect("writable replica");
    query(&replica, &["DEL", key, &lock_core::schema::fence_key(key)]).expect("the replica misses the lock");
    let lost = tokio::spawn(guard.lost());
    let promoted = tokio::task::spawn_blocking(move || {
        let promoted = group.kill_master_for(key);
        (group, promoted)
    });
    let (group, promoted) = promoted.await.expect("failover");
    assert_eq!(promoted, replica);
    let promoted_at = Instant::now();
    let second =
        other.acquire(key, LockOptions::new().fencing(true).wait(WAIT)).await.expect("a second holder");
    let new_fence = second.fence().expect("fenced");
    assert!(
        new_fence > old_fence,
        "the fence keeps increasing across the failover: {new_fence} after {old_fence}"
    );
    assert!(store.write(new_fence), "the new holder's write is accepted");
    let reason =
        tokio::time::timeout(TOLD_WITHIN, lost).await.expect("the old holder is told").expect("task");
    eprintln!("old holder told {reason:?} {:?} after the promotion", promoted_at.elapsed());
    assert_eq!(reason, LossReason::NotOwner);
    assert!(!guard.is_held());
    assert!(!store.write(old_fence), "the old holder's stale write is rejected");
    assert!(!guard.release().await.expect("release"), "no longer its own");
    assert_eq!(query(&promoted, &["GET", key]).expect("GET"), second.token(), "its release changed nothing");
    assert!(second.release().await.expect("release"));
    drop(group);
}

/// In a cluster a client's liveness key lives in whatever slot its name hashes to, usually on
/// another shard than its locks. Lose it in a failover of that shard, forced: every lock of the
/// client looks dead, on every shard, and is taken over; the holder learns it at its next
/// liveness renewal (a third of the liveness TTL) and the store rejects its stale fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn losing_the_liveness_key_in_a_cluster_failover_releases_the_clients_locks_on_every_shard() {
    init_tracing();
    let cluster = tokio::task::spawn_blocking(RedisCluster::start).await.expect("cluster");
    let mut deployment = Cluster { cluster, killed: None };
    let url = deployment.client_url();
    let (holder, other) = (client(&url, "holder", false), client(&url, "other", false));
    // The holder's identity (and so its liveness key) exists once it has taken a lock.
    let probe = holder.try_lock("lock:liveness:probe", LockOptions::new()).await.expect("a first lock");
    let liveness_key =
        lock_core::schema::liveness_key(lock_core::schema::owner_of(probe.token()).expect("a token"));
    assert!(probe.release().await.expect("release"));
    let liveness_master = deployment.master_for(&liveness_key);
    let key = (0..64)
        .map(|i| format!("lock:liveness:{i}"))
        .find(|k| deployment.master_for(k) != liveness_master)
        .expect("a key on another shard");
    let store = FencedStore::default();
    let guard = holder.acquire(&key, LockOptions::new().fencing(true)).await.expect("the holder takes it");
    let old_fence = guard.fence().expect("fenced");
    assert!(store.write(old_fence));
    let lost = tokio::spawn(guard.lost());
    // Gone from its shard (a cluster replica redirects writes, so the key goes on the master,
    // and with it on the replica), and that shard fails over.
    query(&liveness_master, &["DEL", &liveness_key]).expect("the liveness key is lost");
    let mut deployment = tokio::task::spawn_blocking(move || {
        deployment.kill_master_for(&liveness_key);
        deployment
    })
    .await
    .expect("failover");
    // The lock's own shard never failed over, yet the lock is taken over.
    let second = other.acquire(&key, LockOptions::new().fencing(true).wait(WAIT)).await.expect("taken over");
    let taken_at = Instant::now();
    let new_fence = second.fence().expect("fenced");
    assert!(new_fence > old_fence);
    assert!(store.write(new_fence));
    let reason = tokio::time::timeout(TOLD_WITHIN, lost).await.expect("the holder is told").expect("task");
    eprintln!("holder told {reason:?} {:?} after the take-over", taken_at.elapsed());
    assert!(!guard.is_held());
    assert!(!store.write(old_fence), "the holder's stale write is rejected");
    assert!(second.release().await.expect("release"));
    // The holder's client carries on with a new identity.
    let again = holder.try_lock(&key, LockOptions::new()).await.expect("the holder's client works");
    assert!(again.release().await.expect("release"));
    deployment.restore_replica();
}
