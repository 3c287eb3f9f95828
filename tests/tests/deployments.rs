//! Self-test of the multi-server deployments the harness starts from `redis-server`: a
//! 3-master cluster with replicas, a Sentinel group, a TLS-only server, the lock ACL user.
//! Each prints how long it took to start (and to fail over), the numbers README quotes.

use std::time::{Duration, Instant};

use tests::harness::{
    AclUser, RedisCluster, RedisSentinelGroup, RedisServer, RedisTls, create_user, init_tracing, query,
    wait_until_blocking,
};

/// `SET key value` then `WAIT 1 2000` on the same connection (WAIT counts the replicas that
/// acknowledged this connection's writes; on a fresh connection it would prove nothing);
/// returns how many acknowledged.
fn set_and_wait(url: &str, key: &str, value: &str) -> i64 {
    use deadpool_redis::redis;
    let mut con = redis::Client::open(url).and_then(|c| c.get_connection()).expect("connect");
    let () = redis::cmd("SET").arg(key).arg(value).query(&mut con).expect("SET");
    redis::cmd("WAIT").arg(1).arg(2000).query(&mut con).expect("WAIT")
}

/// Runs `start` and prints how long it took.
fn timed<T>(what: &str, start: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let value = start();
    eprintln!("{what} started in {:?}", started.elapsed());
    value
}

#[test]
fn cluster_forms_routes_keys_and_fails_over() {
    init_tracing();
    let mut cluster = timed("3x1 cluster", RedisCluster::start);
    assert_eq!(cluster.urls().len(), 6);
    let masters = cluster.master_urls();
    assert_eq!(masters.len(), 3, "{masters:?}");
    assert_eq!(cluster.replica_urls().len(), 3);

    // A key and its hash-tagged auxiliary keys live on the same master.
    let key = "lock:deployments:cluster";
    assert_eq!(cluster.slot_of(key), cluster.slot_of(&lock_core::schema::fence_key(key)));
    let master = cluster.master_for_key(key);
    assert_eq!(set_and_wait(&master, key, "owner"), 1, "the replica acknowledged the write");
    let other = masters.iter().find(|m| **m != master).expect("another master");
    let moved = query(other, &["GET", key]).expect_err("GET on a master that does not serve the slot");
    assert!(moved.to_string().to_lowercase().contains("moved"), "{moved}");

    // The replica has the key (WAIT above: the write reached it), and is promoted when the
    // master dies.
    let replica = cluster.replica_of(&master).expect("the master has a replica");
    let pid = cluster.pid(&master).expect("the master runs");
    let started = Instant::now();
    let promoted = cluster.kill_master(&master).expect("failover");
    eprintln!("cluster failover took {:?}", started.elapsed());
    assert_eq!(promoted, replica);
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "the killed master still runs");
    assert_eq!(cluster.master_for_key(key), replica);
    assert_eq!(cluster.cli_for_key(key, &["GET", key]), "owner");
    assert_eq!(cluster.urls().len(), 5);
    assert_eq!(cluster.master_urls().len(), 3);
}

#[test]
fn sentinel_group_reports_the_master_and_fails_over() {
    init_tracing();
    let mut group = timed("sentinel group", RedisSentinelGroup::start);
    assert_eq!(group.sentinel_addrs().len(), 3);
    let (_, before) = group.master_addr();
    let master = group.master_url();
    assert_eq!(set_and_wait(&master, "lock:deployments:sentinel", "owner"), 1, "the replica acknowledged");
    for sentinel in group.sentinel_urls() {
        let addr =
            query(&sentinel, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", group.master_name()]).expect("ask");
        assert_eq!(addr, format!("127.0.0.1\n{before}"));
    }

    let started = Instant::now();
    let (_, after) = group.kill_master().expect("failover");
    eprintln!("sentinel failover took {:?}", started.elapsed());
    assert_ne!(after, before);
    assert_eq!(group.master_addr().1, after);
    let promoted = group.master_url();
    assert_eq!(query(&promoted, &["GET", "lock:deployments:sentinel"]).expect("GET"), "owner");
    assert_eq!(query(&promoted, &["SET", "lock:deployments:after", "x"]).expect("writable"), "OK");
    assert_eq!(group.data_urls(), [promoted]);
}

#[test]
fn tls_server_speaks_only_tls_and_takes_the_lock_user() {
    init_tracing();
    let user = AclUser::lock_user("lockuser", "fixture-pw", "lock:");
    let server = timed("TLS server", || RedisTls::start_with_user(&user));
    assert!(server.url().starts_with("rediss://127.0.0.1:"));
    assert!(server.ca_cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
    assert_eq!(server.cli(&["PING"]), "PONG");
    assert_eq!(server.cli(&["CONFIG", "GET", "port"]), "port\n0", "the plain port must be closed");
    // Plain text to the TLS port is refused.
    assert!(query(&format!("redis://127.0.0.1:{}/", server.port()), &["PING"]).is_err());
    // The user exists with the lock rules.
    let rules = server.cli(&["ACL", "GETUSER", "lockuser"]);
    assert!(rules.contains("~lock:*") && rules.contains("&lock:*"), "{rules}");
}

#[test]
fn the_lock_user_reaches_lock_keys_only() {
    init_tracing();
    let server = RedisServer::start();
    let user = AclUser::lock_user("lockuser", "fixture-pw", "lock:");
    create_user(&server.url(), &user).expect("ACL SETUSER");
    let url = user.url_on(&server.url());
    let ok = |args: &[&str]| query(&url, args).unwrap_or_else(|e| panic!("{args:?} as lockuser: {e}"));
    assert_eq!(ok(&["SET", "lock:a", "t", "NX", "PX", "1000"]), "OK");
    assert_eq!(ok(&["SET", &lock_core::schema::fence_key("lock:a"), "1"]), "OK");
    assert_eq!(ok(&["SET", "lock-client:pod:1", "1", "PX", "1000"]), "OK");
    for key in ["lock:a", "lock:{o}:1"] {
        assert_eq!(ok(&["PUBLISH", &lock_core::schema::release_channel(key, "abcdef012345"), ""]), "0");
    }
    assert_eq!(ok(&["WAIT", "0", "10"]), "0");
    for denied in [
        &["GET", "other"][..],
        &["FLUSHALL"],
        &["CONFIG", "GET", "port"],
        &["KEYS", "*"],
        &["PUBLISH", "news", "x"],
    ] {
        let err = query(&url, denied).expect_err("denied");
        assert!(err.to_string().to_lowercase().contains("noperm"), "{denied:?}: {err}");
    }
}

#[test]
fn deployments_clean_up_on_drop() {
    let server = RedisTls::start();
    let pid = server.pid().expect("runs");
    let ca = server.ca_cert_path();
    drop(server);
    assert!(wait_until_blocking(Duration::from_secs(2), || !std::path::Path::new(&format!("/proc/{pid}"))
        .exists()));
    assert!(!ca.exists(), "{} is left behind", ca.display());
}

/// Everything a service does through lock-core and the scheduler works as the lock ACL user,
/// and no server's ACL log records a denied command, key or channel: the README's ACL line is
/// enough. `url` is what clients are built from (the user's credentials in it); `nodes` are the
/// data servers, where the user is created and the logs are read.
async fn lock_user_is_enough(url_for: impl Fn(&AclUser) -> String, nodes: &[String]) {
    use lock_core::{LockClient, LockOptions};
    use lock_scheduler::{Job, Scheduler};

    let user = AclUser::lock_user("lockuser", "fixture-pw", "lock:");
    for node in nodes {
        create_user(node, &user).expect("ACL SETUSER");
        query(node, &["ACL", "LOG", "RESET"]).expect("ACL LOG RESET");
    }
    let url = url_for(&user);
    let client = |instance: &str| {
        LockClient::builder()
            .url(url.as_str())
            .instance_id(instance)
            .watchdog_lease(Duration::from_millis(600))
            .build()
            .expect("client")
    };
    let (a, b) = (client("pod-a"), client("pod-b"));

    // Fenced lock, a waiter of another client, hand-off, a tagged key, renewal.
    let key = "lock:acl:{order}:1";
    let held = a.acquire(key, LockOptions::new().fencing(true)).await.expect("lock");
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.acquire(key, LockOptions::new().wait(Duration::from_secs(10))).await }
    });
    assert!(tests::harness::wait_until(Duration::from_secs(5), || b.stats().waiters_on(key) == 1).await);
    tokio::time::sleep(Duration::from_millis(700)).await; // one watchdog renewal (the scenario)
    assert!(held.release().await.expect("release"));
    let handed = waiter.await.expect("task").expect("hand-off");
    assert!(handed.release().await.expect("release"));

    // A scheduler job: tick claim, run history, pause flag, run now.
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let scheduler = Scheduler::builder()
        .client(a.clone())
        .job(
            Job::new("acl-job", "* * * * * *", {
                let runs = runs.clone();
                move || {
                    runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    async {}
                }
            })
            .lock("lock:acl:job"),
        )
        .build()
        .expect("scheduler");
    let handle = scheduler.start().await.expect("start");
    assert!(
        tests::harness::wait_until(Duration::from_secs(5), || runs.load(std::sync::atomic::Ordering::SeqCst)
            >= 1)
        .await,
        "the job ran"
    );
    handle.pause("acl-job").await.expect("pause");
    assert!(handle.resume("acl-job").await.expect("resume"));
    // Run now: the request announced on the group's channel (PUBLISH, SPUBLISH in a cluster,
    // from the script), heard by the replica's subscription, taken.
    lock_scheduler::control::run_now(&b, "acl-job", "acl-test").await.expect("run now as the lock user");
    // A run's history entry is written after its body ends: wait for it (bounded).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let history = loop {
        let history = handle.history("acl-job", 10).await.expect("history");
        if !history.is_empty() || std::time::Instant::now() >= deadline {
            break history;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(!history.is_empty(), "run history recorded");
    handle.shutdown().await;

    for node in nodes {
        let log = query(node, &["ACL", "LOG"]).expect("ACL LOG");
        assert!(log.is_empty(), "the lock user was denied something on {node}:\n{log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_user_is_enough_on_a_single_node() {
    init_tracing();
    let server = RedisServer::start();
    lock_user_is_enough(|user| user.url_on(&server.url()), &[server.url()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_user_is_enough_on_a_cluster() {
    init_tracing();
    let cluster = tokio::task::spawn_blocking(RedisCluster::start).await.expect("cluster");
    let nodes = cluster.urls();
    let hosts: Vec<&str> =
        nodes.iter().map(|u| u.trim_start_matches("redis://").trim_end_matches('/')).collect();
    let url = format!("redis+cluster://{}", hosts.join(","));
    lock_user_is_enough(|user| user.url_on(&url), &nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_user_is_enough_behind_sentinel() {
    init_tracing();
    let group = tokio::task::spawn_blocking(RedisSentinelGroup::start).await.expect("sentinel group");
    let hosts: Vec<String> = group.sentinel_addrs().iter().map(|(h, p)| format!("{h}:{p}")).collect();
    let url = format!("redis+sentinel://{}/{}", hosts.join(","), group.master_name());
    // The credentials are the master's; the sentinels are reached without any.
    lock_user_is_enough(|user| user.url_on(&url), &group.data_urls()).await;
}

/// The guide's "TLS and an ACL user" section shows the ACL line operators copy: the one the
/// tests use.
#[test]
fn the_guide_shows_the_lock_user_acl_line() {
    let line = tests::harness::lock_user_acl_line("lockuser", "<password>", "lock:");
    let chapter = include_str!("../../docs/guide/src/redis-deployments.md");
    assert!(chapter.contains(&line), "redis-deployments.md must show the ACL line the tests use:\n{line}");
}

/// A client connecting to a Redis that may evict keys with a TTL (every lock key has one):
/// with `EvictionCheck::Error` every command fails, naming the policy and what to set, until
/// the policy is `noeviction`; the default (`Warn`) works on. No limit (`maxmemory 0`) is safe
/// whatever the policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_may_evict_lock_keys_is_refused_when_asked() {
    use lock_core::{EvictionCheck, LockClient, LockError, LockOptions};
    init_tracing();
    let server = RedisServer::start();
    let client =
        |check| LockClient::builder().url(server.url()).eviction_check(check).build().expect("client");
    server.cli(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    // No limit: nothing is ever evicted.
    client(EvictionCheck::Error)
        .try_lock("lock:evict:a", LockOptions::new())
        .await
        .expect("no maxmemory")
        .release()
        .await
        .expect("release");
    server.cli(&["CONFIG", "SET", "maxmemory", "100mb"]);
    let strict = client(EvictionCheck::Error);
    let err = strict.try_lock("lock:evict:a", LockOptions::new()).await.expect_err("may evict");
    assert!(matches!(err, LockError::Eviction { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("allkeys-lru") && message.contains("noeviction"), "{message}");
    assert_eq!(server.cli(&["EXISTS", "lock:evict:a"]), "0", "nothing was written");
    // Refused again on the next call (each connection checks), not only the first.
    assert!(matches!(
        strict.try_lock("lock:evict:a", LockOptions::new()).await,
        Err(LockError::Eviction { .. })
    ));
    // The default warns and works.
    let guard =
        client(EvictionCheck::Warn).try_lock("lock:evict:b", LockOptions::new()).await.expect("warn only");
    assert!(guard.release().await.expect("release"));
    // Fixed on the server: the strict client connects.
    server.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let guard = strict.try_lock("lock:evict:a", LockOptions::new()).await.expect("noeviction is safe");
    assert!(guard.release().await.expect("release"));
}

/// On a cluster every master is checked: one master with `volatile-lru` is enough, and the
/// error names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_master_of_a_cluster_is_checked_for_eviction() {
    use lock_core::{EvictionCheck, LockClient, LockError, LockOptions};
    init_tracing();
    let cluster = tokio::task::spawn_blocking(RedisCluster::start).await.expect("cluster");
    let masters = cluster.master_urls();
    let nodes = cluster.urls();
    let hosts: Vec<&str> =
        nodes.iter().map(|u| u.trim_start_matches("redis://").trim_end_matches('/')).collect();
    let url = format!("redis+cluster://{}", hosts.join(","));
    let risky = masters.last().expect("a master");
    query(risky, &["CONFIG", "SET", "maxmemory", "100mb"]).expect("CONFIG SET");
    query(risky, &["CONFIG", "SET", "maxmemory-policy", "volatile-lru"]).expect("CONFIG SET");
    let client =
        LockClient::builder().url(&url).eviction_check(EvictionCheck::Error).build().expect("client");
    let err =
        client.try_lock("lock:evict:cluster", LockOptions::new()).await.expect_err("one master may evict");
    let message = err.to_string();
    let port = risky.trim_end_matches('/').rsplit(':').next().expect("a port");
    assert!(
        matches!(err, LockError::Eviction { .. })
            && message.contains(&format!(":{port}"))
            && message.contains("volatile-lru"),
        "{message}"
    );
    query(risky, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]).expect("CONFIG SET");
    let guard = client.try_lock("lock:evict:cluster", LockOptions::new()).await.expect("every master safe");
    assert!(guard.release().await.expect("release"));
}
