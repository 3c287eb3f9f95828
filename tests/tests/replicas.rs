//! What scheduler replicas say about themselves next to their announcement (version, host,
//! start time, running jobs), read back as `lockctl replicas` and the console read it, against
//! a real redis-server with two replicas.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_scheduler::control::{self, Replica};
use lock_scheduler::{Job, Scheduler, schema};
use tests::harness::{RedisServer, client, init_tracing, wait_until};
use tokio::sync::Semaphore;

/// The replicas as read, once `done` holds for them, or `None` after `timeout`.
async fn replicas_when(
    operator: &lock_core::LockClient,
    timeout: Duration,
    done: impl Fn(&[Replica]) -> bool,
) -> Option<Vec<Replica>> {
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        let replicas = control::replicas(operator).await.expect("replicas");
        if done(&replicas) {
            return Some(replicas);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

fn running<'a>(replicas: &'a [Replica], instance: &str) -> Option<&'a [String]> {
    let about = replicas.iter().find(|r| r.instance == instance)?.about.as_ref()?;
    Some(&about.running)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_report_version_host_uptime_and_what_they_run() {
    init_tracing();
    let server = RedisServer::start();
    let gate = Arc::new(Semaphore::new(0));
    let now_ms = || SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_millis() as i64;
    let before = now_ms() - 1_000;
    let mut handles = Vec::new();
    for (instance, version) in [("pod-a", Some("1.2.3")), ("pod-b", None)] {
        let gate = gate.clone();
        // Every second, under a lock; a run blocks until the gate opens.
        let job = Job::new("slow", "* * * * * *", move || {
            let gate = gate.clone();
            async move {
                let _permit = gate.acquire().await.map_err(|e| e.to_string())?;
                Ok::<(), String>(())
            }
        })
        .lock("lock:replicas:slow");
        let mut builder = Scheduler::builder().client(client(&server, instance)).job(job);
        if let Some(version) = version {
            builder = builder.version(version);
        }
        handles.push(builder.build().expect("valid scheduler").start().await.expect("starts"));
    }
    let after = now_ms() + 1_000;
    let operator = client(&server, "operator");
    // One replica runs the job (blocked in its body) and says so at its next announcement.
    let seen = replicas_when(&operator, Duration::from_secs(15), |r| {
        ["pod-a", "pod-b"].iter().any(|i| running(r, i).is_some_and(|jobs| jobs == ["slow"]))
    })
    .await
    .expect("a replica reports the job it runs");
    assert_eq!(seen.len(), 2, "{seen:?}");
    for replica in &seen {
        let about = replica.about.as_ref().expect("both replicas said what they are");
        let want = if replica.instance == "pod-a" { "1.2.3" } else { "" };
        assert_eq!(about.version, want, "{replica:?}");
        assert!(!about.host.is_empty(), "a host name: {replica:?}");
        assert!((before..=after).contains(&about.started_at.timestamp_millis()), "{replica:?}");
    }
    // The one that says it runs the job holds its lock.
    let runner =
        seen.iter().find(|r| running(&seen, &r.instance).is_some_and(|j| !j.is_empty())).expect("runner");
    let lock = operator.inspect("lock:replicas:slow").await.expect("inspect");
    let holder = lock.holder.as_ref().and_then(|h| h.instance.clone());
    assert_eq!(holder.as_deref(), Some(runner.instance.as_str()), "{lock:?}");
    // Once the run ends, neither says it runs anything (the next runs end at once).
    gate.add_permits(1_000_000);
    replicas_when(&operator, Duration::from_secs(15), |r| {
        r.len() == 2 && ["pod-a", "pod-b"].iter().all(|i| running(r, i).is_some_and(|j| j.is_empty()))
    })
    .await
    .expect("no replica reports a run once they ended");
    // Announcements survive Redis forgetting the scripts (they are sent by hash, and loaded
    // again only on NOSCRIPT): the members' lapse times keep moving after a SCRIPT FLUSH.
    let members = schema::members_key(lock_scheduler::DEFAULT_GROUP);
    let score = || server.cli(&["ZSCORE", &members, "pod-a"]).trim().parse::<f64>().unwrap_or(0.0);
    let flushed_at = score();
    server.cli(&["SCRIPT", "FLUSH"]);
    assert!(
        wait_until(Duration::from_secs(10), || score() > flushed_at).await,
        "pod-a announced itself again after the scripts were flushed"
    );
    // A replica that leaves takes what it said with it.
    let about_key = schema::replicas_key(lock_scheduler::DEFAULT_GROUP);
    assert_eq!(server.cli(&["HEXISTS", &about_key, "pod-b"]), "1");
    handles.pop().expect("pod-b").shutdown().await;
    // (The announcer withdraws in the background as the scheduler stops.)
    assert!(
        wait_until(Duration::from_secs(5), || server.cli(&["HEXISTS", &about_key, "pod-b"]) == "0").await,
        "pod-b's entry left with it"
    );
    assert_eq!(server.cli(&["HEXISTS", &about_key, "pod-a"]), "1");
    let ttl: i64 = server.cli(&["PTTL", &about_key]).trim().parse().expect("PTTL");
    assert!(ttl > 0, "the hash expires: {ttl}");
    for handle in handles {
        handle.shutdown().await;
    }
}
