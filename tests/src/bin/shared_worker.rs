//! One of several processes sharing a semaphore or a read-write lock, checking from inside
//! every hold, through counters in Redis, that no more holders are in than the primitive admits:
//! the process-level half of the "N+1 holders / a reader beside a writer" tests.
//!
//! Usage: `shared_worker <redis-url> <name> <permit:N|rw> <tasks> <run-ms>`. Each task loops:
//! acquire (waiting; one try in three with a 0-3 ms deadline around it, so that waits are
//! cancelled at random points), then in the hold increments its counter and reads the
//! others', holds 0-2 ms, decrements, and gives the hold back (one in five dropped instead of
//! released). With `rw`, task 0 of each process writes and the others read. Prints `done
//! <holds> <cancelled> <violations> <max inside> <writer holds>` and exits 1 if it saw a violation.
//!
//! The counters are `<name>:inside` (permits, or readers) and `<name>:writers`. A holder
//! increments its own counter before it reads the others', so of two overlapping holds at
//! least one sees the other (Redis runs the commands in one order).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lock_core::redis;
use lock_core::{LockClient, LockOptions};

#[derive(Default)]
struct Counts {
    holds: AtomicU64,
    writes: AtomicU64,
    cancelled: AtomicU64,
    violations: AtomicU64,
    max_inside: AtomicU64,
}

/// A small xorshift generator: only the spread matters.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Increments `mine` and reads `other` in one round trip: (mine after, other).
async fn enter(client: &LockClient, mine: &str, other: &str) -> anyhow::Result<(u64, u64)> {
    let mut pipe = redis::pipe();
    pipe.cmd("INCR").arg(mine).cmd("GET").arg(other);
    let (inside, other): (u64, Option<u64>) = client.query_pipeline(&pipe).await?;
    Ok((inside, other.unwrap_or(0)))
}

async fn leave(client: &LockClient, mine: &str) -> anyhow::Result<()> {
    let mut pipe = redis::pipe();
    pipe.cmd("DECR").arg(mine).ignore();
    client.query_pipeline::<()>(&pipe).await?;
    Ok(())
}

/// Holds taken by one task until `stop`.
async fn task(
    client: LockClient,
    name: String,
    kind: String,
    writer: bool,
    seed: u64,
    stop: Instant,
    counts: Arc<Counts>,
) -> anyhow::Result<()> {
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let (inside_key, writers_key) = (format!("{name}:inside"), format!("{name}:writers"));
    let permits: Option<u64> = kind.strip_prefix("permit:").map(str::parse).transpose()?;
    let semaphore = permits.map(|n| client.semaphore(&name, n as u32)).transpose()?;
    let rw = client.rw_lock(&name)?;
    let wait = LockOptions::new().wait(Duration::from_secs(20));
    while Instant::now() < stop {
        let deadline = next(&mut rng).is_multiple_of(3).then(|| Duration::from_micros(next(&mut rng) % 3000));
        let acquire = async {
            match (&semaphore, writer) {
                (Some(sem), _) => sem.acquire(wait.clone()).await.map(|g| Box::new(g) as Box<dyn Send>),
                (None, true) => rw.write(wait.clone()).await.map(|g| Box::new(g) as Box<dyn Send>),
                (None, false) => rw.read(wait.clone()).await.map(|g| Box::new(g) as Box<dyn Send>),
            }
        };
        let guard = match deadline {
            Some(d) => match tokio::time::timeout(d, acquire).await {
                Ok(guard) => guard?,
                Err(_) => {
                    counts.cancelled.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            },
            None => acquire.await?,
        };
        let (mine, other) = if writer { (&writers_key, &inside_key) } else { (&inside_key, &writers_key) };
        let (inside, others) = enter(&client, mine, other).await?;
        counts.max_inside.fetch_max(inside, Ordering::Relaxed);
        let bad = match permits {
            Some(n) => inside > n,
            None if writer => inside > 1 || others > 0,
            None => others > 0,
        };
        if bad {
            counts.violations.fetch_add(1, Ordering::Relaxed);
            eprintln!("violation: {mine}={inside} {other}={others}");
        }
        tokio::time::sleep(Duration::from_micros(next(&mut rng) % 2000)).await;
        leave(&client, mine).await?;
        counts.holds.fetch_add(1, Ordering::Relaxed);
        if writer {
            counts.writes.fetch_add(1, Ordering::Relaxed);
        }
        // Released on drop (in the background) either way; a fifth not awaited.
        drop(guard);
        if !next(&mut rng).is_multiple_of(5) {
            client.flush_releases(Duration::from_secs(5)).await;
        }
    }
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, name, kind, tasks, run_ms] = args.as_slice() else {
        anyhow::bail!("usage: shared_worker <redis-url> <name> <permit:N|rw> <tasks> <run-ms>");
    };
    let client = LockClient::builder()
        .url(url.as_str())
        .instance_id(format!("worker-{}", std::process::id()))
        .watchdog_lease(Duration::from_secs(2))
        .command_timeout(Duration::from_secs(1))
        .build()?;
    let stop = Instant::now() + Duration::from_millis(run_ms.parse()?);
    let counts = Arc::new(Counts::default());
    let mut handles = Vec::new();
    for t in 0..tasks.parse::<u64>()? {
        let writer = kind == "rw" && t == 0;
        let seed = u64::from(std::process::id()) * 1000 + t + 1;
        handles.push(tokio::spawn(task(
            client.clone(),
            name.clone(),
            kind.clone(),
            writer,
            seed,
            stop,
            counts.clone(),
        )));
    }
    for handle in handles {
        handle.await??;
    }
    client.flush_releases(Duration::from_secs(5)).await;
    let violations = counts.violations.load(Ordering::Relaxed);
    println!(
        "done {} {} {violations} {} {}",
        counts.holds.load(Ordering::Relaxed),
        counts.cancelled.load(Ordering::Relaxed),
        counts.max_inside.load(Ordering::Relaxed),
        counts.writes.load(Ordering::Relaxed)
    );
    if violations > 0 {
        std::process::exit(1);
    }
    Ok(())
}
