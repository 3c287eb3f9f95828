//! lock-core's clients of each deployment, against the real servers the fixture starts:
//! Sentinel (following a failover without being rebuilt), Cluster (keys on every master,
//! renewal batches per node, hand-off through sharded pub/sub), TLS with a generated CA, ACL
//! users (what a refused password or a missing permission says), replica acknowledgement, and
//! the typed errors of bad deployment settings. The behaviour every deployment shares is in
//! the contract suite (`tests/contract`).

use std::time::{Duration, Instant};

use lock_core::{AckShortfall, LockClient, LockError, LockOptions, ReplicaAck};
use tests::harness::{
    AclUser, RedisCluster, RedisSentinelGroup, RedisServer, RedisTls, create_user, init_tracing, query,
    wait_until,
};

/// Command timeout of these clients: generous, the machine may be saturated.
const COMMAND_TIMEOUT: Duration = Duration::from_millis(500);
const LIVENESS_TTL: Duration = Duration::from_millis(1500);
const LEASE: Duration = Duration::from_millis(900);

fn client(url: &str, instance: &str) -> LockClient {
    LockClient::builder()
        .url(url)
        .instance_id(instance)
        .command_timeout(COMMAND_TIMEOUT)
        .liveness_ttl(LIVENESS_TTL)
        .watchdog_lease(LEASE)
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"))
}

/// `<scheme>://host1:port1,host2:port2/<path>` from `redis://host:port/` URLs.
fn multi_host_url(scheme: &str, urls: &[String], path: &str) -> String {
    let hosts: Vec<&str> =
        urls.iter().map(|u| u.trim_start_matches("redis://").trim_end_matches('/')).collect();
    format!("{scheme}://{}/{path}", hosts.join(","))
}

/// Retries `try_lock` on transient errors until `deadline` passes.
async fn lock_within(
    client: &LockClient,
    key: &str,
    options: LockOptions,
    within: Duration,
) -> lock_core::LockGuard {
    let deadline = Instant::now() + within;
    loop {
        match client.try_lock(key, options.clone()).await {
            Ok(guard) => return guard,
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("locking {key}: {e}"),
        }
    }
}

#[test]
fn bad_deployment_settings_are_typed_errors_naming_the_fix() {
    let config = |r: lock_core::Result<LockClient>| match r {
        Err(LockError::Config(message)) => message,
        other => panic!("expected a configuration error, got {other:?}"),
    };
    let cases: Vec<(lock_core::Result<LockClient>, &str)> = vec![
        (LockClient::from_url("redis+sentinel://:pw-secret@h1:26379,h2:26379"), "master's name"),
        (LockClient::from_url("redis+cluster://:pw-secret@h1:7000/3"), "no databases"),
        (LockClient::from_url("redis+clutser://:pw-secret@h1:7000"), "unknown Redis URL scheme"),
        (LockClient::from_url("redis+cluster://:pw-secret@h1:70000"), "invalid port"),
        (LockClient::builder().build(), "no Redis given"),
        (LockClient::builder().url("redis://h/").cluster(["redis://h:7000"]).build(), "only one of"),
        (LockClient::builder().sentinel(Vec::<String>::new(), "m").build(), "no sentinel addresses"),
        (LockClient::builder().sentinel(["redis://h:26379"], " ").build(), "master name is empty"),
        (LockClient::builder().cluster(Vec::<String>::new()).build(), "no cluster nodes"),
        (
            LockClient::builder()
                .url("redis://h/")
                .replica_ack(ReplicaAck::new(0, Duration::from_millis(10)))
                .build(),
            "at least 1 replica",
        ),
        (
            LockClient::builder()
                .url("redis://h/")
                .command_timeout(Duration::from_secs(1))
                .liveness_ttl(Duration::from_secs(5))
                .replica_ack(ReplicaAck::new(1, Duration::from_secs(1)))
                .build(),
            "shorter than the command timeout",
        ),
        (LockClient::builder().url("redis://h/").tls_root_ca("pem").build(), "no address uses TLS"),
    ];
    for (result, says) in cases {
        let message = config(result);
        assert!(message.contains(says), "{message:?} should say {says:?}");
        assert!(!message.contains("pw-secret"), "{message:?} shows the password");
    }
    // A pool is for a single node only.
    let pool = deadpool_redis::Config::from_url("redis://127.0.0.1:1/")
        .create_pool(Some(deadpool_redis::Runtime::Tokio1))
        .expect("a pool");
    let message = config(LockClient::builder().pool(pool).url("redis+cluster://h:7000").build());
    assert!(message.contains("single node only"), "{message}");
    // The builder never shows the new secrets.
    let builder = LockClient::builder()
        .sentinel(["redis://:sentinel-secret@h:26379"], "mymaster")
        .credentials("locks", "node-secret")
        .tls_root_ca("-----BEGIN CERTIFICATE-----");
    let shown = format!("{builder:?}");
    assert!(!shown.contains("secret"), "{shown}");
    assert!(shown.contains("locks:***") && shown.contains("mymaster"), "{shown}");
    let shown = format!("{:?}", LockClient::builder().url("redis+cluster://u:url-secret@a:1,b:2"));
    assert!(!shown.contains("url-secret"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_client_follows_a_failover_without_being_rebuilt() {
    init_tracing();
    let mut group = tokio::task::spawn_blocking(RedisSentinelGroup::start).await.expect("sentinel group");
    let url = multi_host_url("redis+sentinel", &group.sentinel_urls(), group.master_name());
    let locks = client(&url, "pod-sentinel");
    // WAIT 1 is met: the master has a replica.
    let acked = LockClient::builder()
        .url(&url)
        .command_timeout(COMMAND_TIMEOUT)
        .liveness_ttl(LIVENESS_TTL)
        .replica_ack(ReplicaAck::new(1, Duration::from_millis(400)))
        .build()
        .expect("client");
    let guard =
        acked.try_lock("lock:sentinel:acked", LockOptions::new()).await.expect("acknowledged by the replica");
    assert!(guard.release().await.expect("released"));

    let before = group.master_url();
    let guard =
        locks.try_lock("lock:sentinel:before", LockOptions::new()).await.expect("locked on the master");
    assert!(guard.release().await.expect("released"));
    // A lock held across the failover, and another client's caller waiting for it all along:
    // the failover window (no sentinel names a healthy master) is waited through, not an error.
    let held = locks.try_lock("lock:sentinel:held", LockOptions::new()).await.expect("locked");
    let other = client(&url, "pod-other");
    let waiter = {
        let other = other.clone();
        tokio::spawn(async move {
            other.acquire("lock:sentinel:held", LockOptions::new().wait(Duration::from_secs(30))).await
        })
    };
    assert!(wait_until(Duration::from_secs(5), || other.stats().waiters_on("lock:sentinel:held") == 1).await);

    let promoted = tokio::task::spawn_blocking(move || {
        let promoted = group.kill_master().map(|(_, port)| port);
        (group, promoted)
    });
    let (group, promoted) = promoted.await.expect("failover");
    let promoted = promoted.expect("the replica is promoted");
    assert_ne!(before, group.master_url());

    // The holder's release (or, had the key been lost, its expiry) lets the waiter in.
    let _ = held.release().await;
    let got = tokio::time::timeout(Duration::from_secs(30), waiter).await.expect("in time").expect("task");
    let got = got.unwrap_or_else(|e| panic!("the waiter waited through the failover: {e}"));
    assert!(got.release().await.expect("released"));

    // The same client, not rebuilt: it finds the new master through the sentinels.
    let key = "lock:sentinel:after";
    let guard = lock_within(&locks, key, LockOptions::new(), Duration::from_secs(15)).await;
    let on_new_master = query(&format!("redis://127.0.0.1:{promoted}/"), &["GET", key]).expect("GET");
    assert!(on_new_master.starts_with("pod-sentinel:"), "the lock is on the new master: {on_new_master:?}");
    assert!(guard.release().await.expect("released"));
    assert_eq!(query(&group.master_url(), &["EXISTS", key]).expect("EXISTS"), "0");
    drop(group);
}

/// Keys whose slots are served by each of the cluster's masters, one per master.
fn keys_on_every_master(cluster: &RedisCluster, prefix: &str) -> Vec<String> {
    let masters = cluster.master_urls();
    let mut keys: Vec<Option<String>> = vec![None; masters.len()];
    for i in 0..1000 {
        let key = format!("{prefix}{i}");
        let master = cluster.master_for_key(&key);
        if let Some(at) = masters.iter().position(|m| *m == master)
            && keys[at].is_none()
        {
            keys[at] = Some(key);
        }
        if keys.iter().all(Option::is_some) {
            break;
        }
    }
    keys.into_iter().map(|k| k.expect("a key on every master")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_client_locks_waits_and_renews_across_nodes() {
    init_tracing();
    let cluster = tokio::task::spawn_blocking(RedisCluster::start).await.expect("cluster");
    let url = multi_host_url("redis+cluster", &cluster.urls(), "");
    let a = client(&url, "pod-a");
    let keys = keys_on_every_master(&cluster, "lock:cluster:");
    assert_eq!(keys.len(), 3);

    // Locks on keys of every master, fenced (the script path) and plain (SET NX), renewed by
    // the watchdog in one pipeline per node for several leases.
    let mut guards = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let guard = a.try_lock(key, LockOptions::new().fencing(i % 2 == 0)).await.expect("locked");
        assert!(cluster.cli_for_key(key, &["GET", key]).starts_with("pod-a:"), "{key} is on its master");
        guards.push(guard);
    }
    let renewed =
        wait_until(Duration::from_secs(10), || a.stats().renewals_sent >= 3 * keys.len() as u64).await;
    assert!(renewed, "renewed every lock three times: {:?}", a.stats());
    for (guard, key) in guards.iter().zip(&keys) {
        assert!(guard.is_held(), "{key} still held after several leases");
        let pttl: i64 = cluster.cli_for_key(key, &["PTTL", key]).parse().expect("PTTL");
        assert!(pttl > 0, "{key} lives: {pttl}");
    }

    // Replica acknowledgement, routed to the key's master (each has a replica).
    let acked = LockClient::builder()
        .url(&url)
        .command_timeout(COMMAND_TIMEOUT)
        .liveness_ttl(LIVENESS_TTL)
        .replica_ack(ReplicaAck::new(1, Duration::from_millis(400)))
        .build()
        .expect("client");
    let guard = acked.try_lock("lock:cluster:acked", LockOptions::new()).await.expect("acknowledged");
    assert!(guard.release().await.expect("released"));

    // Hand-off to a waiter of another client, heard through the key's shard: its fallback
    // retry is seconds away, so only the sharded message can wake it this soon.
    let key = keys[1].clone();
    let b = LockClient::builder()
        .url(&url)
        .instance_id("pod-b")
        .command_timeout(COMMAND_TIMEOUT)
        .liveness_ttl(LIVENESS_TTL)
        .wait_backoff(Duration::from_secs(6), Duration::from_secs(8))
        .build()
        .expect("client");
    let waiter = {
        let (b, key) = (b.clone(), key.clone());
        tokio::spawn(async move {
            let guard = b.acquire(&key, LockOptions::new().wait(Duration::from_secs(12))).await;
            (guard, Instant::now())
        })
    };
    let prefix = lock_core::schema::release_channel_prefix(&key);
    let subscribed = wait_until(Duration::from_secs(5), || {
        b.stats().waiters_on(&key) == 1
            && cluster
                .cli_for_key(&key, &["PUBSUB", "SHARDCHANNELS", &format!("{prefix}*")])
                .starts_with(&prefix)
    })
    .await;
    assert!(subscribed, "the waiter listens on its shard channel of {key}");
    let guard = guards.remove(1);
    let released_at = Instant::now();
    assert!(guard.release().await.expect("released"));
    let (handed, woke_at) =
        tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("in time").expect("task");
    let handed = handed.expect("the waiter got the lock");
    let gap = woke_at.duration_since(released_at);
    assert!(
        gap < Duration::from_millis(2500),
        "woken by the sharded release message, not its fallback: {gap:?}"
    );
    assert!(cluster.cli_for_key(&key, &["GET", &key]).starts_with("pod-b:"));
    assert!(handed.release().await.expect("released"));
    // Its last waiter gone, the client leaves the shard channel (SUNSUBSCRIBE).
    let left = wait_until(Duration::from_secs(5), || {
        cluster.cli_for_key(&key, &["PUBSUB", "SHARDCHANNELS", &format!("{prefix}*")]).is_empty()
    })
    .await;
    assert!(left, "the shard channel of {key} was left");

    for (guard, key) in guards.into_iter().zip(keys.iter().filter(|k| **k != key)) {
        assert!(guard.release().await.expect("released"));
        assert_eq!(cluster.cli_for_key(key, &["EXISTS", key]), "0");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_client_trusts_the_generated_ca_as_the_lock_user() {
    init_tracing();
    let user = AclUser::lock_user("locks", "tls-pw", "lock:");
    let server =
        tokio::task::spawn_blocking(move || RedisTls::start_with_user(&user)).await.expect("TLS server");
    let url = server.url_for("locks", "tls-pw");
    let locks = LockClient::builder()
        .url(&url)
        .tls_root_ca(server.ca_cert_pem())
        .instance_id("pod-tls")
        .command_timeout(COMMAND_TIMEOUT)
        .liveness_ttl(LIVENESS_TTL)
        .watchdog_lease(LEASE)
        .build()
        .expect("client");
    let guard = locks.try_lock("lock:tls", LockOptions::new().fencing(true)).await.expect("locked over TLS");
    assert!(guard.fence().is_some());
    assert!(wait_until(Duration::from_secs(10), || locks.stats().renewals_sent >= 2).await, "renewed");
    assert!(guard.is_held());
    assert!(server.cli(&["GET", "lock:tls"]).starts_with("pod-tls:"));
    assert!(guard.release().await.expect("released"));

    // Without the CA the server's certificate is not trusted: a clear failure, not a hang.
    let untrusted = LockClient::builder()
        .url(&url)
        .command_timeout(COMMAND_TIMEOUT)
        .liveness_ttl(LIVENESS_TTL)
        .build()
        .expect("client");
    let err = untrusted.try_lock("lock:tls", LockOptions::new()).await.expect_err("untrusted certificate");
    assert!(matches!(err, LockError::Tls { .. }), "{err:?}");
    assert!(!err.is_transient(), "an untrusted certificate does not go away by itself");
    // So a waiting call fails at once too, instead of retrying until its bound.
    let started = std::time::Instant::now();
    let wait = LockOptions::new().wait(Duration::from_secs(10));
    let err = untrusted.acquire("lock:tls", wait).await.expect_err("untrusted certificate");
    assert!(matches!(err, LockError::Tls { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "failed fast: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_refusals_are_auth_errors_that_say_what_to_check() {
    init_tracing();
    let server = RedisServer::start();
    let user = AclUser::lock_user("locks", "right-pw", "lock:");
    create_user(&server.url(), &user).expect("ACL SETUSER");

    let wrong = client(&AclUser::lock_user("locks", "wrong-pw", "lock:").url_on(&server.url()), "pod-1");
    let err = wrong.try_lock("lock:acl", LockOptions::new()).await.expect_err("wrong password");
    assert!(matches!(err, LockError::Auth { .. }), "{err:?}");
    assert!(!err.is_transient());
    let message = err.to_string();
    assert!(message.contains("check the user and password"), "{message}");
    assert!(!message.contains("wrong-pw"), "{message}");

    // Right password through credentials(...), a key outside the user's patterns: NOPERM.
    let locks = LockClient::builder()
        .url(server.url())
        .credentials("locks", "right-pw")
        .instance_id("pod-1")
        .command_timeout(COMMAND_TIMEOUT)
        .liveness_ttl(LIVENESS_TTL)
        .build()
        .expect("client");
    let guard = locks.try_lock("lock:acl", LockOptions::new().fencing(true)).await.expect("allowed");
    assert!(guard.release().await.expect("released"));
    let err = locks.try_lock("other:acl", LockOptions::new().fencing(true)).await.expect_err("not its keys");
    assert!(matches!(err, LockError::Auth { .. }), "{err:?}");
    assert!(err.to_string().contains("lacks a permission"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_ack_shortfall_errors_or_warns_as_chosen() {
    init_tracing();
    let server = RedisServer::start();
    let build = |shortfall: AckShortfall| {
        LockClient::builder()
            .url(server.url())
            .command_timeout(COMMAND_TIMEOUT)
            .liveness_ttl(LIVENESS_TTL)
            .replica_ack(
                ReplicaAck::new(1, Duration::from_millis(50)).on_shortfall(shortfall).after_release(true),
            )
            .build()
            .expect("client")
    };
    // No replicas: WAIT 1 gets 0.
    let strict = build(AckShortfall::Error);
    let err = strict.try_lock("lock:ack", LockOptions::new()).await.expect_err("no replica acknowledged");
    assert!(matches!(err, LockError::ReplicaAck { wanted: 1, got: 0, .. }), "{err:?}");
    assert!(err.is_transient() && !err.is_contention());
    assert_eq!(server.cli(&["EXISTS", "lock:ack"]), "0", "the unacknowledged lock was released");

    let lenient = build(AckShortfall::Warn);
    let guard = lenient.try_lock("lock:ack", LockOptions::new()).await.expect("kept despite the shortfall");
    assert_eq!(server.cli(&["EXISTS", "lock:ack"]), "1");
    assert!(guard.release().await.expect("released"));
    assert_eq!(server.cli(&["EXISTS", "lock:ack"]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_service_and_operations_run_on_a_cluster() {
    init_tracing();
    let cluster = tokio::task::spawn_blocking(RedisCluster::start).await.expect("cluster");
    let url = multi_host_url("redis+cluster", &cluster.urls(), "");
    let dir = tempfile::TempDir::with_prefix("order-service-cluster-").expect("temp dir");
    let replicas = examples::order_service::scenarios::connect_replicas(
        &url,
        &dir.path().join("inventory.db"),
        3,
        Duration::from_millis(5),
    )
    .expect("replicas connect");
    let r = examples::order_service::scenarios::rush(
        &replicas,
        7,
        5,
        30,
        examples::order_service::scenarios::Locking::Locked,
    )
    .await
    .expect("rush");
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.sold(), 5, "exactly the stock is sold");
    assert_eq!(r.final_row.stock, 0);
    let mut fences: Vec<u64> = r.accepted.iter().filter_map(|receipt| receipt.fence).collect();
    let sorted = {
        let mut f = fences.clone();
        f.sort_unstable();
        f.dedup();
        f
    };
    fences.sort_unstable();
    assert_eq!(fences, sorted, "distinct fences");

    // What operators and the scheduler's control use: every master scanned, one-slot
    // pipelines through the lock connection, no pool.
    let ops = client(&url, "pod-ops");
    assert!(ops.pool().is_none(), "a cluster client has no single-node pool");
    let keys = keys_on_every_master(&cluster, "lock:ops:");
    let mut guards = Vec::new();
    for key in &keys {
        guards.push(ops.try_lock(key, LockOptions::new()).await.expect("locked"));
    }
    assert!(ops.record_holdings().await, "the holdings record is written");
    let listed = ops.list_locks("lock:ops:*", 100).await.expect("list");
    let listed: Vec<&str> = listed.iter().map(|l| l.key.as_str()).collect();
    let mut expected: Vec<&str> = keys.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(listed, expected, "locks on every master are listed");
    let info = ops.inspect(&keys[0]).await.expect("read");
    assert_eq!(info.holder.and_then(|h| h.alive), Some(true));
    lock_scheduler::control::pause(&ops, "cluster-job").await.expect("pause");
    assert_eq!(lock_scheduler::control::jobs(&ops).await.expect("jobs"), ["cluster-job"]);
    assert!(lock_scheduler::control::resume(&ops, "cluster-job").await.expect("resume"));
    for guard in guards {
        assert!(guard.release().await.expect("released"));
    }
}
