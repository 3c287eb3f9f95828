//! README's failure-path promises, each forced rather than hoped for: a holder frozen past its
//! liveness TTL (SIGSTOP), a release whose hand-off message never arrives, and arrival order
//! across several clients. (The failover paths are in `failover.rs`.)

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lock_core::{LockClient, LockOptions, schema};
use tests::harness::{RedisServer, client, init_tracing, wait_until};

fn unix_us() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros())
}

fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill").args([signal, &pid.to_string()]).status().expect("kill runs");
    assert!(status.success(), "kill {signal} {pid}");
}

/// A holder frozen (SIGSTOP) longer than its liveness TTL: while it is frozen another replica
/// takes the lock over; when it resumes, `is_held()` is already false and `lost()` fires
/// (`Expired`) at once, and its next lock is taken under a new identity. Every moment at which
/// it still believed it held the lock came before it was frozen, so before the other replica
/// took the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_holder_stops_trusting_its_lock_before_another_takes_it_and_resumes_afresh() {
    init_tracing();
    let server = RedisServer::start();
    let key = "lock:frozen";
    let liveness = Duration::from_millis(1000);
    let mut child = Command::new(env!("CARGO_BIN_EXE_stalling_holder"))
        .args([server.url(), key.to_owned(), liveness.as_millis().to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn stalling_holder");
    let pid = child.id();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let reader = std::thread::spawn({
        let (stdout, lines) = (child.stdout.take().expect("piped"), lines.clone());
        move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        }
    });
    let has = |prefix: &str| lines.lock().unwrap().iter().any(|l| l.starts_with(prefix));
    assert!(wait_until(Duration::from_secs(10), || has("held ")).await, "the holder runs");
    let token = lines.lock().unwrap()[0].strip_prefix("acquired ").expect("acquired line").to_owned();
    let old_owner = schema::owner_of(&token).expect("a token").to_owned();
    // Alive, it keeps the lock past its liveness TTL.
    assert!(!wait_until(2 * liveness, || server.cli(&["GET", key]) != token).await);

    signal(pid, "-STOP");
    // A signal is delivered asynchronously: the process may run a moment after `kill` returns.
    // It is frozen once the kernel reports it stopped.
    let stopped = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| stat.rsplit_once(") ").map(|(_, rest)| rest.starts_with('T')))
            .unwrap_or(false)
    };
    assert!(wait_until(Duration::from_secs(5), stopped).await, "the holder stopped");
    let frozen_at = unix_us();
    // Another replica waits for the lock; it takes it over once the frozen holder's liveness
    // key has expired (at most its TTL after the last renewal).
    let other = client(&server, "pod-2");
    let taken =
        other.acquire(key, LockOptions::new().wait(Duration::from_secs(20))).await.expect("taken over");
    let taken_at = unix_us();
    assert_eq!(server.cli(&["GET", key]), taken.token());
    assert!(!has("lost "), "the frozen holder said nothing");
    signal(pid, "-CONT");
    assert!(
        wait_until(Duration::from_secs(10), || has("after ")).await,
        "the holder resumed and locked again"
    );
    let status = child.wait().expect("exits");
    reader.join().expect("reader");
    assert!(status.success());

    let lines = lines.lock().unwrap().clone();
    let believed: Vec<u128> = lines
        .iter()
        .filter_map(|l| {
            let mut f = l.strip_prefix("held ")?.split(' ');
            let at: u128 = f.next()?.parse().ok()?;
            (f.next()? == "true").then_some(at)
        })
        .collect();
    assert!(!believed.is_empty());
    let last_belief = believed.iter().copied().max().unwrap_or(0);
    assert!(
        last_belief < frozen_at,
        "believed it held the lock at {last_belief}, after it was frozen at {frozen_at}"
    );
    assert!(last_belief < taken_at);
    let lost = lines.iter().find(|l| l.starts_with("lost ")).expect("lost() fired");
    assert!(lost.starts_with("lost Expired "), "{lost}");
    let lost_at: u128 = lost.rsplit(' ').next().and_then(|t| t.parse().ok()).expect("a time");
    assert!(lost_at > taken_at, "told once it ran again");
    let after = lines.iter().find_map(|l| l.strip_prefix("after ")).expect("a new lock");
    let new_owner = schema::owner_of(after).expect("a token");
    assert_ne!(new_owner, old_owner, "a new identity (a new liveness key) after the stall");
    assert!(taken.release().await.expect("release"));
}

/// A release whose hand-off message never reaches the waiter (the lock was reserved for it, but
/// nothing was published): the waiter's fallback retry finds the key holding its own token and
/// takes it, well within one hand-off time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_release_message_costs_at_most_one_hand_off_time() {
    init_tracing();
    let server = RedisServer::start();
    let key = "lock:silent";
    let holder = client(&server, "pod-1");
    let handoff = Duration::from_millis(500); // the waiter's command timeout
    let waiter = LockClient::builder()
        .url(server.url())
        .instance_id("pod-2")
        .command_timeout(handoff)
        .wait_backoff(Duration::from_millis(50), Duration::from_millis(200))
        .build()
        .unwrap();
    let guard = holder.try_lock(key, LockOptions::new()).await.unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            waiter
                .acquire(key, LockOptions::new().wait(Duration::from_secs(20)))
                .await
                .map(|g| (g, Instant::now()))
        }
    });
    let queue = schema::queue_key(key);
    assert!(wait_until(Duration::from_secs(5), || server.cli(&["LLEN", &queue]) == "1").await, "queued");
    let entry = server.cli(&["LRANGE", &queue, "0", "0"]);
    let waiter_token = schema::token_of_entry(&entry).to_owned();
    // What a release does, minus the message: the key reserved for the waiter, its entry popped.
    let released_at = Instant::now();
    server.cli(&["SET", key, &waiter_token, "PX", &handoff.as_millis().to_string()]);
    server.cli(&["LPOP", &queue]);
    server.cli(&["ZREM", &schema::tickets_key(key), &waiter_token]);
    let (got, at) =
        tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("acquired").unwrap().unwrap();
    let waited = at - released_at;
    eprintln!("a lost hand-off message cost the waiter {waited:?}");
    assert_eq!(got.token(), waiter_token, "the reservation was its own");
    assert!(waited < handoff, "found at its fallback retry, within the hand-off time: {waited:?}");
    assert!(server.cli(&["PTTL", key]).parse::<i64>().unwrap() > 10_000, "confirmed with its full lease");
    assert!(!guard.release().await.unwrap(), "no longer the old holder's to release");
    assert_eq!(server.cli(&["GET", key]), got.token(), "and its late release changed nothing");
    assert!(got.release().await.unwrap());
}

/// Waiters of five clients (replicas), queued one after another, get the lock in exactly the
/// order they queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_several_clients_get_the_lock_in_arrival_order() {
    init_tracing();
    let server = RedisServer::start();
    let key = "lock:fifo-clients";
    let holder = client(&server, "pod-0");
    let guard = holder.try_lock(key, LockOptions::new()).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let queue = schema::queue_key(key);
    let mut tasks = Vec::new();
    for i in 1..=5 {
        let c = client(&server, &format!("pod-{i}"));
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let guard =
                c.acquire(key, LockOptions::new().wait(Duration::from_secs(30))).await.expect("acquired");
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(guard.release().await.expect("released"));
        }));
        // The next one queues only once this one is in the Redis queue.
        assert!(
            wait_until(Duration::from_secs(5), || server.cli(&["LLEN", &queue]) == i.to_string()).await,
            "waiter {i} queued"
        );
    }
    assert!(guard.release().await.unwrap());
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task).await.expect("done").expect("task");
    }
    assert_eq!(*order.lock().unwrap(), [1, 2, 3, 4, 5]);
}
