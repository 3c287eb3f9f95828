//! Locks known from the protocol's own records (issue 50, point 1): every held lock, semaphore
//! and read-write lock is listed from the clients' holdings records, never from the keyspace;
//! the values of keys no record names are never read, by lock-core (what `lockctl` runs) or the
//! console (checked with `MONITOR`), and a foreign string shaped like an owner token is neither
//! listed nor unlocked; a dead client's locks show until taken over.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lock_console::{Console, ServeOptions};
use lock_core::inspect::LockKind;
use lock_core::{LockClient, LockError, LockOptions};
use tests::harness::{Monitor, RedisServer, client};
use tests::http;
use tokio::net::TcpListener;

const TOKEN: &str = "lock-index-test-token-0123456789";
/// Another application's data: its values must never be read.
const FOREIGN: [&str; 5] = ["app:session:42", "fake:lock", "app:zset", "app:hash", "app:list"];
/// Shaped exactly like an owner token of this crate.
const TOKEN_SHAPED: &str = "pod-z:0123456789ab:01234567-89ab-cdef-0123-456789abcdef";

async fn serve(console: &Console) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    let router = console.router();
    let task = tokio::spawn(async move {
        let _ = lock_console::serve(listener, router, ServeOptions::default(), std::future::pending()).await;
    });
    (addr, task)
}

fn keys(listing: &[lock_core::inspect::LockSummary]) -> Vec<&str> {
    listing.iter().map(|l| l.key.as_str()).collect()
}

/// The command (upper case) of a MONITOR line, and its quoted arguments.
fn command_of(line: &str) -> (String, Vec<String>) {
    let rest = line.split_once("] ").map_or(line, |(_, r)| r);
    let mut parts: Vec<String> = rest.split("\" \"").map(|p| p.trim_matches('"').to_owned()).collect();
    let command = if parts.is_empty() { String::new() } else { parts.remove(0).to_uppercase() };
    (command, parts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hold_is_listed_from_the_records_and_foreign_keys_are_never_read() {
    let server = RedisServer::start();
    server.cli(&["SET", "app:session:42", "secret"]);
    server.cli(&["SET", "fake:lock", TOKEN_SHAPED]);
    server.cli(&["ZADD", "app:zset", "-3", "#permits", "99999999999999", TOKEN_SHAPED]);
    server.cli(&["HSET", "app:hash", "f", "v"]);
    server.cli(&["RPUSH", "app:list", "x"]);

    let holder = client(&server, "pod-a");
    let lock = holder.acquire("lock:a", LockOptions::new()).await.expect("lock:a");
    let other = holder
        .acquire("app:x:lock", LockOptions::new().lease(Duration::from_secs(60)))
        .await
        .expect("a lock");
    let semaphore = holder.semaphore("sem:s", 3).expect("a semaphore");
    let permits = (
        semaphore.acquire(LockOptions::new()).await.expect("a permit"),
        semaphore.acquire(LockOptions::new()).await.expect("a permit"),
    );
    let read = holder.rw_lock("rw:r").expect("rw").read(LockOptions::new()).await.expect("a read hold");
    let write = holder.rw_lock("rw:w").expect("rw").write(LockOptions::new()).await.expect("a write hold");
    assert!(holder.record_holdings().await, "the record is written");

    let mut monitor = Monitor::start(&server);
    let ops = client(&server, "ops");
    let listing = ops.list_locks("*", 1000).await.expect("a listing");
    assert_eq!(keys(&listing), ["app:x:lock", "lock:a", "rw:r", "rw:w", "sem:s"], "{listing:?}");
    let sem = listing.iter().find(|l| l.key == "sem:s").expect("the semaphore");
    assert_eq!((sem.kind, sem.holders), (LockKind::Semaphore { permits: Some(3) }, 2));
    assert_eq!(listing.iter().find(|l| l.key == "rw:r").map(|l| l.kind), Some(LockKind::RwLock));
    assert_eq!(keys(&ops.list_locks("lock:*", 10).await.expect("a listing")), ["lock:a"]);
    let info = ops.inspect("lock:a").await.expect("lock:a is shown");
    assert_eq!(info.holder.as_ref().map(|h| h.token.as_str()), Some(lock.token()));
    assert_eq!(info.holder.and_then(|h| h.alive), Some(true));
    for key in FOREIGN {
        let e = ops.inspect(key).await.expect_err("not a lock");
        assert!(matches!(e, LockError::NotALock { .. }), "{key}: {e:?}");
        let e = ops.force_unlock(key).await.expect_err("not a lock");
        assert!(matches!(e, LockError::NotALock { .. }), "{key}: {e:?}");
        let e = ops.force_release(key, TOKEN_SHAPED).await.expect_err("not a lock");
        assert!(matches!(e, LockError::NotALock { .. }), "{key}: {e:?}");
    }
    assert!(ops.inspect("lock:never-taken").await.expect("a free name").holder.is_none());

    // The console, on its own connection, the same way.
    let console = Console::new(client(&server, "console")).token(TOKEN).expect("a strong token");
    let (addr, task) = serve(&console).await;
    let listed = http::get(addr, "/api/locks?pattern=*&limit=1000").await;
    let listed_keys: Vec<String> = listed.json()["locks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["key"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(listed_keys, ["app:x:lock", "lock:a", "rw:r", "rw:w", "sem:s"], "{}", listed.body);
    let overview = http::get(addr, "/").await;
    assert!(overview.body.contains("<b id=\"locks-held\">5</b>"), "{}", overview.body);
    for key in FOREIGN {
        let path = format!("/api/locks/{key}");
        assert_eq!(http::get(addr, &path).await.status, 404, "{key}");
        let auth = format!("Bearer {TOKEN}");
        let delete = http::request(addr, "DELETE", &path, &[("Authorization", &auth)]).await;
        assert_eq!(
            (delete.status, delete.error_code().as_str()),
            (404, "not_a_lock"),
            "{key}: {}",
            delete.body
        );
    }
    assert_eq!(http::get(addr, "/locks/lock:a").await.status, 200);
    server.cli(&["ECHO", "end-of-lock-index-reads"]);
    let lines = monitor.until(Duration::from_secs(10), |l| l.contains("end-of-lock-index-reads")).await;
    assert!(lines.last().is_some_and(|l| l.contains("end-of-lock-index-reads")), "the marker came");
    assert!(lines.iter().any(|l| l.contains("HGETALL")), "the records were read: material to check");
    let mut foreign_seen = 0;
    for line in &lines {
        let (command, args) = command_of(line);
        for key in FOREIGN {
            if args.iter().any(|a| a == key) {
                foreign_seen += 1;
                assert_eq!(command, "TYPE", "only the type of a foreign key is read: {line}");
            }
        }
    }
    assert!(foreign_seen > 0, "the foreign keys were asked about (by TYPE only)");
    task.abort();

    // Nothing foreign changed; what is ours still lists and releases.
    assert_eq!(server.cli(&["GET", "fake:lock"]), TOKEN_SHAPED);
    assert_eq!(server.cli(&["ZCARD", "app:zset"]), "2");
    assert_eq!(ops.force_unlock("lock:a").await.expect("unlocked").as_deref(), Some(lock.token()));
    assert_eq!(keys(&ops.list_locks("lock:*", 10).await.expect("a listing")), Vec::<&str>::new());
    drop((lock, other, permits, read, write));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_clients_locks_show_until_taken_over() {
    let server = RedisServer::start();
    let dying = LockClient::builder()
        .url(server.url())
        .instance_id("pod-dead")
        .command_timeout(Duration::from_millis(400))
        .liveness_ttl(Duration::from_millis(1000))
        .build()
        .expect("a client");
    let guard =
        dying.acquire("lock:d", LockOptions::new().lease(Duration::from_secs(30))).await.expect("lock:d");
    assert!(dying.record_holdings().await);
    let token = guard.token().to_owned();
    // The process dies: nothing released, nothing renewed.
    std::mem::forget(guard);
    drop(dying);
    let ops = client(&server, "ops");
    let liveness =
        lock_core::inspect::parse_token(&token).and_then(|h| h.liveness_key).expect("a liveness key");
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.cli(&["EXISTS", &liveness]) == "1" {
        assert!(Instant::now() < deadline, "the dead client's liveness key expires");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let listing = ops.list_locks("lock:*", 10).await.expect("a listing");
    assert_eq!(keys(&listing), ["lock:d"], "a dead client's lock still shows");
    assert_eq!(listing[0].holder.instance.as_deref(), Some("pod-dead"));
    let info = ops.inspect("lock:d").await.expect("shown");
    assert_eq!(info.holder.and_then(|h| h.alive), Some(false), "its holder is known dead");

    // Taken over: shown with its new holder (whose record names it).
    let heir = client(&server, "pod-heir");
    let taken = heir.try_lock("lock:d", LockOptions::new()).await.expect("taken over at once");
    assert!(heir.record_holdings().await);
    let listing = ops.list_locks("lock:*", 10).await.expect("a listing");
    assert_eq!(keys(&listing), ["lock:d"]);
    assert_eq!(listing[0].holder.instance.as_deref(), Some("pod-heir"), "{listing:?}");
    assert_eq!(listing[0].holder.token, taken.token());
    drop(taken);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_appear_in_the_records_by_themselves_and_leave_on_release() {
    let server = RedisServer::start();
    let holder = client(&server, "pod-b");
    let ops = client(&server, "ops");
    let guard = holder.acquire("lock:auto", LockOptions::new()).await.expect("a lock");
    // No explicit write: the client's own task records it within about 100 ms.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let listing = ops.list_locks("lock:*", 10).await.expect("a listing");
        if keys(&listing) == ["lock:auto"] {
            break;
        }
        assert!(Instant::now() < deadline, "the lock is recorded: {listing:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(guard.release().await.expect("released"));
    assert!(
        ops.list_locks("lock:*", 10).await.expect("a listing").is_empty(),
        "a released lock is not listed"
    );
    // The record itself forgets it at its next refresh (within 5 s).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let fields = server.cli(&["EVAL", "local n = 0 for _, k in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do n = n + redis.call('HLEN', '{lock-holdings}:' .. k) end return n", "1", lock_core::schema::HOLDINGS_INDEX]);
        if fields == "0" {
            break;
        }
        assert!(Instant::now() < deadline, "the released hold leaves the record: {fields}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
