//! The behaviour every deployment must show, each case a function of the deployment (the
//! way ShedLock runs one abstract provider test against every backend).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_core::tick::{Claim, ClaimRequest, TickRun};
use lock_core::{LockError, LockOptions};
use tests::harness::wait_until;

use crate::deployment::{Deployment, LIVENESS_TTL};

/// A key of this test run: `lock:` (the ACL user's prefix), the case, and a run id, so that
/// cases sharing a deployment never share a key.
fn key(case: &str) -> String {
    static RUN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let run = RUN.get_or_init(|| {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        format!("{}-{}", std::process::id(), nanos % 1_000_000_000)
    });
    format!("lock:contract:{case}:{run}")
}

/// Many tasks of several clients take one key in turn: never two holders at once, and every
/// acquisition ran.
pub(crate) async fn mutual_exclusion(d: &Deployment) {
    const CLIENTS: usize = 3;
    const TASKS: usize = 6;
    const ROUNDS: usize = 4;
    let key = key("mutual-exclusion");
    let holders = Arc::new(AtomicUsize::new(0));
    let max_holders = Arc::new(AtomicUsize::new(0));
    let runs = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = d.client(&format!("pod-{c}"));
        for _ in 0..TASKS {
            let (client, key) = (client.clone(), key.clone());
            let (holders, max_holders, runs) = (holders.clone(), max_holders.clone(), runs.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = client
                        .acquire(&key, LockOptions::new().wait(Duration::from_secs(30)))
                        .await
                        .unwrap_or_else(|e| panic!("a waiting task gets the lock: {e}"));
                    let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                    max_holders.fetch_max(now, Ordering::SeqCst);
                    // Hold across an await point, so another holder would have a chance to overlap.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    holders.fetch_sub(1, Ordering::SeqCst);
                    runs.fetch_add(1, Ordering::SeqCst);
                    assert!(guard.release().await.expect("release"), "released a lock it held");
                }
            }));
        }
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task).await.expect("all rounds finish").expect("task");
    }
    assert_eq!(max_holders.load(Ordering::SeqCst), 1, "two holders at once");
    assert_eq!(runs.load(Ordering::SeqCst), CLIENTS * TASKS * ROUNDS);
    assert_eq!(d.get(&key), None, "the lock is free at the end");
}

/// Releasing a guard whose lease lapsed, after another client took the lock, reports "not
/// owned" and leaves the other client's lock in place.
pub(crate) async fn owner_checked_release(d: &Deployment) {
    let key = key("owner-checked-release");
    let (a, b) = (d.client("pod-a"), d.client("pod-b"));
    let stale =
        a.try_lock(&key, LockOptions::new().lease(Duration::from_millis(300))).await.expect("a takes it");
    assert!(wait_until(Duration::from_secs(5), || !d.exists(&key)).await, "the fixed lease lapses");
    let current = b.try_lock(&key, LockOptions::new()).await.expect("b takes the lapsed lock");
    assert!(!stale.release().await.expect("release answers"), "a stale guard's release reports not owned");
    assert_eq!(d.get(&key).as_deref(), Some(current.token()), "b's lock is untouched");
    assert!(current.is_held());
    assert!(current.release().await.expect("release"));
    assert_eq!(d.get(&key), None);
}

/// A fixed lease expires on its own: the key is gone and another client takes the lock.
pub(crate) async fn expiry(d: &Deployment) {
    let key = key("expiry");
    let (a, b) = (d.client("pod-a"), d.client("pod-b"));
    let lease = Duration::from_millis(500);
    let taken = Instant::now();
    let guard = a.try_lock(&key, LockOptions::new().lease(lease)).await.expect("a takes it");
    let pttl = d.pttl(&key);
    assert!((1..=500).contains(&pttl), "the key carries the fixed lease: {pttl}");
    assert!(
        matches!(b.try_lock(&key, LockOptions::new()).await, Err(LockError::Held { .. })),
        "held while leased"
    );
    assert!(
        wait_until(Duration::from_secs(5), || !guard.is_held()).await,
        "the guard knows its lease ran out"
    );
    assert!(
        taken.elapsed() >= lease - Duration::from_millis(100),
        "not before the lease: {:?}",
        taken.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let next = loop {
        match b.try_lock(&key, LockOptions::new()).await {
            Ok(guard) => break guard,
            Err(LockError::Held { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("b takes the expired lock: {e}"),
        }
    };
    assert!(taken.elapsed() < lease + Duration::from_secs(3), "taken {:?} after the first", taken.elapsed());
    assert_eq!(d.get(&key).as_deref(), Some(next.token()));
    drop(guard);
    assert!(next.release().await.expect("release"));
}

/// The watchdog extends a lease while the guard lives: held for several leases, the key keeps
/// the holder's token and a rival is refused throughout.
pub(crate) async fn extend(d: &Deployment) {
    let key = key("extend");
    let (a, b) = (d.client("pod-a"), d.client("pod-b"));
    let guard = a.try_lock(&key, LockOptions::new()).await.expect("a takes it");
    let lease = guard.lease();
    let until = Instant::now() + lease * 3;
    while Instant::now() < until {
        assert!(guard.is_held(), "the holder still holds it");
        assert_eq!(d.get(&key).as_deref(), Some(guard.token()), "renewed, not expired");
        assert!(d.pttl(&key) > 0);
        assert!(matches!(b.try_lock(&key, LockOptions::new()).await, Err(LockError::Held { .. })));
        tokio::time::sleep(lease / 4).await;
    }
    assert!(guard.release().await.expect("release"), "still owned after 3 leases");
    assert_eq!(d.get(&key), None);
}

/// A release hands the lock to a waiter of another client, ahead of newcomers.
pub(crate) async fn hand_off_to_another_client(d: &Deployment) {
    let key = key("hand-off");
    let (a, b, c) = (d.client("pod-a"), d.client("pod-b"), d.client("pod-c"));
    let held = a.try_lock(&key, LockOptions::new()).await.expect("a takes it");
    let waiter = tokio::spawn({
        let (b, key) = (b.clone(), key.clone());
        async move { b.acquire(&key, LockOptions::new().wait(Duration::from_secs(20))).await }
    });
    assert!(wait_until(Duration::from_secs(5), || b.stats().waiters_on(&key) == 1).await, "b waits");
    // Queued on the server too (the script's ticket), not only locally.
    assert!(
        wait_until(Duration::from_secs(5), || d.cli(&key, &["LLEN", &lock_core::schema::queue_key(&key)])
            == "1")
        .await,
        "b's ticket is in the queue"
    );
    let released = Instant::now();
    assert!(held.release().await.expect("release"));
    // A newcomer right after the release does not barge ahead of the waiter.
    if let Ok(barged) = c.try_lock(&key, LockOptions::new()).await {
        panic!("a newcomer took the lock ahead of the waiter: {barged:?}");
    }
    let guard = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter is woken")
        .expect("task")
        .expect("the waiter gets the lock");
    eprintln!("hand-off to another client took {:?}", released.elapsed());
    assert_eq!(d.get(&key).as_deref(), Some(guard.token()));
    assert!(guard.token().starts_with("pod-b:"), "{}", guard.token());
    assert!(guard.release().await.expect("release"));
}

/// A holder that dies (process killed, or its liveness key gone): a waiter of another client
/// takes over within the liveness TTL + 1 s, not after the 30 s lease.
pub(crate) async fn crash_takeover(d: &Deployment) {
    let key = key("crash-takeover");
    let (mut holder, token) = spawn_holder(d, &key).await;
    let waiter_client = d.client("pod-waiter");
    let waiter = tokio::spawn({
        let (c, key) = (waiter_client.clone(), key.clone());
        async move {
            let guard = c.acquire(&key, LockOptions::new().wait(Duration::from_secs(30))).await;
            (guard, Instant::now())
        }
    });
    // Alive, the holder keeps it past its liveness TTL.
    assert!(
        !wait_until(LIVENESS_TTL * 2, || d.get(&key).as_deref() != Some(token.as_str())).await,
        "a live holder keeps its lock"
    );
    holder.kill().expect("kill -9 the holder");
    holder.wait().expect("reap the holder");
    let killed = Instant::now();
    let (guard, acquired_at) =
        tokio::time::timeout(Duration::from_secs(15), waiter).await.expect("taken over").expect("task");
    let guard = guard.expect("the waiter gets the dead holder's lock");
    let after = acquired_at - killed;
    eprintln!("crash takeover after {after:?}");
    // The liveness key outlives the kill by at most its TTL, and the waiter notices at its next
    // fallback retry, at most the maximum wait backoff later; plus a margin for a busy machine.
    let bound = LIVENESS_TTL + lock_core::DEFAULT_MAX_WAIT_BACKOFF + Duration::from_secs(1);
    assert!(after <= bound, "taken over {after:?} after the crash (bound {bound:?})");
    assert_eq!(d.get(&key).as_deref(), Some(guard.token()));
    assert!(guard.release().await.expect("release"));
}

/// Spawns `lock_holder` (watchdog lease 30 s, liveness TTL [`LIVENESS_TTL`]) on `key`; returns
/// the child and its token once it holds the lock.
async fn spawn_holder(d: &Deployment, key: &str) -> (std::process::Child, String) {
    spawn_holder_of(d, key, "lock").await
}

/// [`spawn_holder`] of `hold` (`LOCK_HOLD`: `lock`, `permit:<N>`, `read` or `write`).
async fn spawn_holder_of(d: &Deployment, key: &str, hold: &str) -> (std::process::Child, String) {
    let mut holder = std::process::Command::new(env!("CARGO_BIN_EXE_lock_holder"))
        .args([d.holder_url(), key.to_owned(), "30000".into(), LIVENESS_TTL.as_millis().to_string()])
        .env("LOCK_HOLD", hold)
        .args(d.holder_ca_file())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn lock_holder");
    let stdout = holder.stdout.take().expect("piped stdout");
    let line = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let line = match tokio::time::timeout(Duration::from_secs(15), line).await {
        Ok(line) => line.expect("reader").expect("a line from lock_holder"),
        Err(_) => {
            let _ = holder.kill();
            panic!("lock_holder did not take {key} within 15 s");
        }
    };
    let token = line
        .trim()
        .strip_prefix("acquired ")
        .unwrap_or_else(|| panic!("lock_holder said {line:?}"))
        .to_owned();
    (holder, token)
}

/// Fences drawn by successive holders, across clients, strictly increase.
pub(crate) async fn fencing_order(d: &Deployment) {
    let key = key("fencing");
    let clients: Vec<_> = (0..3).map(|i| d.client(&format!("pod-{i}"))).collect();
    let fences = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for client in &clients {
        for _ in 0..3 {
            let (client, key, fences) = (client.clone(), key.clone(), fences.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..3 {
                    let guard = client
                        .acquire(&key, LockOptions::new().fencing(true).wait(Duration::from_secs(30)))
                        .await
                        .expect("a fenced lock");
                    // Recorded while held: the order of the records is the order of the holds.
                    fences.lock().expect("fences").push(guard.fence().expect("a fenced guard has a fence"));
                    assert!(guard.release().await.expect("release"));
                }
            }));
        }
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task).await.expect("all finish").expect("task");
    }
    let fences = fences.lock().expect("fences").clone();
    assert_eq!(fences.len(), 27);
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "fences not strictly increasing: {fences:?}");
}

/// Several clients run the same ticks: each tick's body runs exactly once, and an old tick is
/// refused.
pub(crate) async fn tick_claim(d: &Deployment) {
    let key = key("tick");
    let clients: Vec<_> = (0..3).map(|i| d.client(&format!("replica-{i}"))).collect();
    let base = 1_000_000;
    for tick in base..base + 4 {
        let runs = Arc::new(AtomicUsize::new(0));
        let mut calls = Vec::new();
        for client in &clients {
            let (client, key, runs) = (client.clone(), key.clone(), runs.clone());
            calls.push(tokio::spawn(async move {
                client
                    .run_tick(&key, tick, LockOptions::new(), async {
                        runs.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    })
                    .await
                    .expect("run_tick answers")
            }));
        }
        let mut ran = 0;
        for call in calls {
            match call.await.expect("task") {
                TickRun::Ran(()) => ran += 1,
                TickRun::ClaimedElsewhere { .. } | TickRun::Held { .. } => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(ran, 1, "tick {tick} ran {ran} times");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "tick {tick}'s body ran once");
    }
    let late = clients[0].run_tick(&key, base + 1, LockOptions::new(), async {}).await.expect("answers");
    assert!(matches!(late, TickRun::ClaimedElsewhere { last_tick } if last_tick == base + 3), "{late:?}");
}

/// Several clients claim the same ticks of many locks (spread over every node and slot of a
/// cluster) in batches, at once: each lock's tick is claimed by exactly one client, whose body
/// runs under the lock; the others learn it was claimed or held; an older tick is refused
/// afterwards; a lock held outside the batch is reported held and keeps its holder.
pub(crate) async fn batched_tick_claims(d: &Deployment) {
    const KEYS: usize = 40;
    let base = key("batched");
    let keys: Vec<String> = (0..KEYS).map(|i| format!("{base}:{i}")).collect();
    let clients: Vec<_> = (0..3).map(|i| d.client(&format!("replica-{i}"))).collect();
    let outsider = d.client("outsider");
    let held = outsider.acquire(&keys[0], LockOptions::new()).await.expect("the outsider takes one lock");
    let runs: Arc<Vec<AtomicUsize>> = Arc::new((0..KEYS).map(|_| AtomicUsize::new(0)).collect());
    for tick in [1_000_i64, 2_000] {
        let mut calls = Vec::new();
        for client in &clients {
            let (client, keys, runs) = (client.clone(), keys.clone(), runs.clone());
            calls.push(tokio::spawn(async move {
                let requests: Vec<ClaimRequest<'_>> =
                    keys.iter().map(|k| ClaimRequest::new(k, tick, LockOptions::new())).collect();
                let mut bodies = Vec::new();
                for (i, claim) in client.claim_ticks(&requests).await.into_iter().enumerate() {
                    match claim.expect("the claim answers") {
                        Claim::Claimed(claimed) => {
                            assert_eq!(claimed.tick(), tick);
                            let runs = runs.clone();
                            bodies.push(tokio::spawn(claimed.run(async move {
                                runs[i].fetch_add(1, Ordering::SeqCst);
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            })));
                        }
                        Claim::ClaimedElsewhere { last_tick } => assert_eq!(last_tick, tick),
                        Claim::Held { .. } => {}
                        other => panic!("unexpected {other:?}"),
                    }
                }
                for body in bodies {
                    body.await.expect("body task").expect("ran under its lock");
                }
            }));
        }
        for call in calls {
            tokio::time::timeout(Duration::from_secs(30), call).await.expect("claims end").expect("task");
        }
        for (i, n) in runs.iter().enumerate() {
            let expected = if i == 0 { 0 } else { 1 };
            assert_eq!(
                n.swap(0, Ordering::SeqCst),
                expected,
                "tick {tick} of {} ran that many times",
                keys[i]
            );
        }
    }
    assert!(held.is_held(), "the outsider's lock was left alone");
    assert!(held.release().await.expect("release"), "the outsider still held its lock");
    let late = clients[0]
        .claim_ticks(&[ClaimRequest::new(&keys[1], 1_500, LockOptions::new())])
        .await
        .pop()
        .expect("one result")
        .expect("answers");
    assert!(matches!(late, Claim::ClaimedElsewhere { last_tick: 2_000 }), "{late:?}");
    // Every lock was released after its run (else: held) with its tick recorded.
    let again: Vec<ClaimRequest<'_>> =
        keys[1..].iter().map(|k| ClaimRequest::new(k, 2_000, LockOptions::new())).collect();
    for (key, claim) in keys[1..].iter().zip(clients[1].claim_ticks(&again).await) {
        let claim = claim.expect("answers");
        assert!(matches!(claim, Claim::ClaimedElsewhere { last_tick: 2_000 }), "{key}: {claim:?}");
    }
}

/// `get_many` reads keys spread over every node and slot in one call: values in order, `None`
/// for a missing key and for a key of another type.
pub(crate) async fn get_many_across_nodes(d: &Deployment) {
    let base = key("get-many");
    let keys: Vec<String> = (0..30).map(|i| format!("{base}:{i}")).collect();
    let client = d.client("reader");
    for (i, key) in keys.iter().enumerate().skip(2) {
        let mut pipe = lock_core::redis::pipe();
        pipe.cmd("SET").arg(key).arg(i).arg("PX").arg(60_000).ignore();
        client.query_pipeline::<()>(&pipe).await.expect("set");
    }
    let mut pipe = lock_core::redis::pipe();
    pipe.cmd("ZADD").arg(&keys[1]).arg(1).arg("m").ignore().cmd("PEXPIRE").arg(&keys[1]).arg(60_000).ignore();
    client.query_pipeline::<()>(&pipe).await.expect("zadd");
    let values = client.get_many(&keys).await.expect("read");
    assert_eq!(values.len(), keys.len());
    assert_eq!(values[0], None, "missing");
    assert_eq!(values[1], None, "not a string");
    for (i, value) in values.iter().enumerate().skip(2) {
        assert_eq!(value.as_deref(), Some(i.to_string().as_str()), "{}", keys[i]);
    }
    assert!(client.get_many(&[]).await.expect("nothing to read").is_empty());
}

/// Many tasks of several clients share a semaphore of 3 permits: never more than 3 holders at
/// once (and 3 do hold it at once), every acquisition ran, fences are unique, and nothing is
/// left in Redis.
pub(crate) async fn semaphore_bound(d: &Deployment) {
    const PERMITS: u32 = 3;
    const CLIENTS: usize = 3;
    const TASKS: usize = 4;
    const ROUNDS: usize = 4;
    let name = key("semaphore-bound");
    let holders = Arc::new(AtomicUsize::new(0));
    let max_holders = Arc::new(AtomicUsize::new(0));
    let fences = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let semaphore = d.client(&format!("pod-{c}")).semaphore(&name, PERMITS).expect("a valid semaphore");
        for _ in 0..TASKS {
            let (semaphore, holders, max_holders, fences) =
                (semaphore.clone(), holders.clone(), max_holders.clone(), fences.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let permit = semaphore
                        .acquire(LockOptions::new().fencing(true).wait(Duration::from_secs(30)))
                        .await
                        .unwrap_or_else(|e| panic!("a waiting task gets a permit: {e}"));
                    let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                    max_holders.fetch_max(now, Ordering::SeqCst);
                    fences.lock().expect("fences").push(permit.fence().expect("a fenced permit"));
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    holders.fetch_sub(1, Ordering::SeqCst);
                    assert!(permit.release().await.expect("release"), "released a permit it held");
                }
            }));
        }
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task).await.expect("all rounds finish").expect("task");
    }
    let max = max_holders.load(Ordering::SeqCst);
    assert!(max <= PERMITS as usize, "{max} holders of {PERMITS} permits at once");
    assert_eq!(max, PERMITS as usize, "36 tasks never filled the 3 permits: not a semaphore");
    let mut fences = fences.lock().expect("fences").clone();
    assert_eq!(fences.len(), CLIENTS * TASKS * ROUNDS);
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), CLIENTS * TASKS * ROUNDS, "two permits drew the same fence");
    let semaphore = d.client("pod-check").semaphore(&name, PERMITS).expect("a valid semaphore");
    assert_eq!(semaphore.available().await.expect("available"), PERMITS);
    assert!(!d.exists(&name), "an idle semaphore leaves no key behind");
}

/// A permit holder that dies is taken back within about one liveness TTL: a waiter of another
/// client gets it; the dead holder's permit is gone from Redis.
pub(crate) async fn semaphore_crash_takeover(d: &Deployment) {
    let name = key("semaphore-crash");
    let (holder, token) = spawn_holder_of(d, &name, "permit:1").await;
    let semaphore = d.client("pod-waiter").semaphore(&name, 1).expect("a valid semaphore");
    assert!(matches!(semaphore.acquire(LockOptions::new()).await, Err(LockError::Held { .. })));
    let taken = after_kill(holder, async {
        semaphore.acquire(LockOptions::new().wait(Duration::from_secs(30))).await
    })
    .await;
    let permit = taken.expect("the waiter gets the dead holder's permit");
    assert!(absent(&d.cli(&name, &["ZSCORE", &name, &token])), "the dead holder's permit is gone");
    assert!(!absent(&d.cli(&name, &["ZSCORE", &name, permit.token()])), "the waiter's permit is in Redis");
    assert!(permit.release().await.expect("release"));
}

/// Readers share a read-write lock, a writer holds it alone: across clients, a writer never
/// overlaps a reader or another writer, readers do overlap, and every hold ran.
pub(crate) async fn rw_exclusion(d: &Deployment) {
    let name = key("rw-exclusion");
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let max_readers = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let runs = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in 0..3 {
        let lock = d.client(&format!("pod-{c}")).rw_lock(&name).expect("a valid rw-lock");
        for t in 0..4 {
            let write = t == 0;
            let (lock, readers, writers, max_readers, overlaps, runs) = (
                lock.clone(),
                readers.clone(),
                writers.clone(),
                max_readers.clone(),
                overlaps.clone(),
                runs.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let wait = LockOptions::new().wait(Duration::from_secs(30));
                for _ in 0..4 {
                    if write {
                        let guard = lock.write(wait.clone()).await.unwrap_or_else(|e| panic!("write: {e}"));
                        if writers.fetch_add(1, Ordering::SeqCst) > 0 || readers.load(Ordering::SeqCst) > 0 {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(3)).await;
                        writers.fetch_sub(1, Ordering::SeqCst);
                        assert!(guard.release().await.expect("release"));
                    } else {
                        let guard = lock.read(wait.clone()).await.unwrap_or_else(|e| panic!("read: {e}"));
                        let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                        max_readers.fetch_max(now, Ordering::SeqCst);
                        if writers.load(Ordering::SeqCst) > 0 {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        readers.fetch_sub(1, Ordering::SeqCst);
                        assert!(guard.release().await.expect("release"));
                    }
                    runs.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task).await.expect("all rounds finish").expect("task");
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "a writer overlapped another holder");
    assert!(max_readers.load(Ordering::SeqCst) >= 2, "readers never shared the lock");
    assert_eq!(runs.load(Ordering::SeqCst), 48);
    assert!(!d.exists(&name), "a free rw-lock leaves no key behind");
    assert!(!d.exists(&lock_core::schema::readers_key(&name)), "no readers left behind");
}

/// A reader that dies is taken back within about one liveness TTL: a writer of another client
/// waiting behind it gets the lock.
pub(crate) async fn rw_reader_crash_takeover(d: &Deployment) {
    let name = key("rw-reader-crash");
    let (holder, token) = spawn_holder_of(d, &name, "read").await;
    let lock = d.client("pod-writer").rw_lock(&name).expect("a valid rw-lock");
    assert!(matches!(lock.write(LockOptions::new()).await, Err(LockError::Held { .. })));
    let taken =
        after_kill(holder, async { lock.write(LockOptions::new().wait(Duration::from_secs(30))).await })
            .await;
    let guard = taken.expect("the writer gets the lock the dead reader held");
    let readers = lock_core::schema::readers_key(&name);
    assert!(absent(&d.cli(&readers, &["ZSCORE", &readers, &token])), "the dead reader is gone");
    assert_eq!(d.get(&name).as_deref(), Some(guard.token()));
    assert!(guard.release().await.expect("release"));
}

/// Whether a `redis-cli` reply is nil (printed `(nil)`, or empty without a terminal).
fn absent(reply: &str) -> bool {
    reply.is_empty() || reply == "(nil)"
}

/// Runs `wait` (an acquisition that waits) while `holder` lives past its liveness TTL (it must
/// not succeed then), kills the holder with SIGKILL, and returns what `wait` got, asserting it
/// came within the crash take-over bound.
async fn after_kill<T, F>(mut holder: std::process::Child, wait: F) -> T
where
    F: std::future::Future<Output = T>,
{
    tokio::pin!(wait);
    // Alive, the holder keeps its hold past its liveness TTL.
    if let Ok(_early) = tokio::time::timeout(LIVENESS_TTL * 2, &mut wait).await {
        let _ = holder.kill();
        panic!("a live holder's hold was taken");
    }
    holder.kill().expect("kill -9 the holder");
    holder.wait().expect("reap the holder");
    let killed = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(15), wait).await.expect("taken over within 15 s");
    let after = killed.elapsed();
    eprintln!("crash takeover after {after:?}");
    let bound = LIVENESS_TTL + lock_core::DEFAULT_MAX_WAIT_BACKOFF + Duration::from_secs(1);
    assert!(after <= bound, "taken over {after:?} after the crash (bound {bound:?})");
    got
}
