//! One replica of the nemesis (tests/nemesis.rs): contends, until killed, for every primitive
//! and runs a scheduled job, printing each step as a `tests::nemesis::Event` line on stdout.
//!
//! Usage: `nemesis_worker <redis-url> <store-addr> <instance> <seed> [<mode>]`.
//!
//! `<mode>` is `correct` (the default) or a deliberately broken worker, a canary the checker
//! must flag (`tests::nemesis::Canary`): `no-nx` takes the locks with a plain `SET` (no `NX`),
//! `ignore-liveness` trusts a lock until it releases it (never asks `is_held()`, so a lock its
//! lost liveness gave away is still used), `no-owner-check` releases with a plain `DEL`,
//! `no-tick-claim` runs the job every second on every replica, claiming nothing, and
//! `loses-ticks` runs only the even seconds' ticks, on one replica. The broken
//! lock modes contend for `LOCKS` only, and hold each lock for seconds, so that a fault lands
//! mid-hold.
//!
//! One task per resource: each lock of `LOCKS` (fenced writes to the store while held; half of
//! the lock acquisitions unfenced, which take a hand-off without a confirming round trip), two
//! on the semaphore, one on the read-write lock (reads, and fenced writes as a writer). A
//! quarter of the acquisitions are impatient: a deadline shorter than their wait cancels them. The
//! scheduler runs job `nemesis-tick` every second under `JOB_LOCK`; its body records the tick.
//! The store (`<store-addr>`, served by the test) takes lines `w <resource> <fence> <instance>`
//! and `t <tick> <instance>`, and answers `ok` or `stale`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadpool_redis::redis;
use lock_core::{LockClient, LockOptions};
use lock_scheduler::chrono::TimeDelta;
use lock_scheduler::{Job, OffsetClock, Scheduler};
use tests::nemesis::{
    COMMAND_TIMEOUT, Canary, Event, JOB_LOCK, LIVENESS_TTL, LOCKS, Mode, PERMITS, RW_LOCK, Rng, SEMAPHORE,
    WATCHDOG_LEASE, What, now_us,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

/// The id of the next hold of this worker (its tasks share it: two contend for the semaphore).
static NEXT_HOLD: AtomicU64 = AtomicU64::new(0);

/// Prints one event, stamped `at`.
fn emit(at: u64, what: &What) {
    println!("{}", Event::line(at, what));
}

/// A connection to the test's fenced store.
struct Store {
    addr: String,
    con: Mutex<Option<BufReader<TcpStream>>>,
}

impl Store {
    /// Sends one line; true when the store accepted it. A broken connection is reopened once.
    async fn send(&self, line: &str) -> bool {
        let mut con = self.con.lock().await;
        for _ in 0..2 {
            if con.is_none() {
                *con = TcpStream::connect(&self.addr).await.ok().map(BufReader::new);
            }
            let Some(stream) = con.as_mut() else { continue };
            let mut reply = String::new();
            let sent = stream.get_mut().write_all(format!("{line}\n").as_bytes()).await.is_ok()
                && stream.read_line(&mut reply).await.is_ok_and(|n| n > 0);
            if sent {
                return reply.trim() == "ok";
            }
            *con = None;
        }
        false
    }
}

/// A hold of any primitive.
enum Guard {
    Lock(lock_core::LockGuard),
    Permit(lock_core::PermitGuard),
    Read(lock_core::ReadGuard),
    Write(lock_core::WriteGuard),
}

impl Guard {
    fn is_held(&self) -> bool {
        match self {
            Guard::Lock(g) => g.is_held(),
            Guard::Permit(g) => g.is_held(),
            Guard::Read(g) => g.is_held(),
            Guard::Write(g) => g.is_held(),
        }
    }

    fn token(&self) -> &str {
        match self {
            Guard::Lock(g) => g.token(),
            Guard::Permit(g) => g.token(),
            Guard::Read(g) => g.token(),
            Guard::Write(g) => g.token(),
        }
    }

    fn fence(&self) -> u64 {
        match self {
            Guard::Lock(g) => g.fence(),
            Guard::Permit(g) => g.fence(),
            Guard::Read(g) => g.fence(),
            Guard::Write(g) => g.fence(),
        }
        .unwrap_or(0)
    }

    async fn release(self) {
        // The outcome does not matter here: the history says what was held, and when.
        let _ = match self {
            Guard::Lock(g) => g.release().await,
            Guard::Permit(g) => g.release().await,
            Guard::Read(g) => g.release().await,
            Guard::Write(g) => g.release().await,
        };
    }
}

/// One contender: acquires `resource` in a loop, holds it for a few fenced steps, releases.
async fn contend(client: LockClient, store: Arc<Store>, instance: String, resource: &'static str, seed: u64) {
    let mut rng = Rng::new(seed);
    let semaphore = client.semaphore(SEMAPHORE, PERMITS).expect("a valid semaphore");
    let rw = client.rw_lock(RW_LOCK).expect("a valid rw-lock");
    loop {
        let mode = match resource {
            SEMAPHORE => Mode::Permit,
            RW_LOCK if rng.chance(70) => Mode::Read,
            RW_LOCK => Mode::Write,
            _ => Mode::Lock,
        };
        let fencing = mode != Mode::Lock || rng.chance(50);
        let options =
            LockOptions::new().watchdog().fencing(fencing).wait(Duration::from_millis(rng.range(200, 1500)));
        let acquire = async {
            match mode {
                Mode::Lock => client.acquire(resource, options).await.map(Guard::Lock),
                Mode::Permit => semaphore.acquire(options).await.map(Guard::Permit),
                Mode::Read => rw.read(options).await.map(Guard::Read),
                Mode::Write => rw.write(options).await.map(Guard::Write),
            }
        };
        let outcome = if rng.chance(25) {
            match tokio::time::timeout(Duration::from_millis(rng.range(5, 400)), acquire).await {
                Ok(outcome) => outcome,
                Err(_) => {
                    emit(now_us(), &What::Cancelled { resource: resource.to_owned() });
                    continue;
                }
            }
        } else {
            acquire.await
        };
        let guard = match outcome {
            Ok(guard) => guard,
            Err(e) => {
                emit(now_us(), &What::Failed { resource: resource.to_owned(), reason: e.to_string() });
                tokio::time::sleep(Duration::from_millis(rng.range(10, 50))).await;
                continue;
            }
        };
        let (fence, token) = (guard.fence(), guard.token().to_owned());
        let id = NEXT_HOLD.fetch_add(1, Ordering::Relaxed);
        emit(now_us(), &What::Acquired { resource: resource.to_owned(), mode, fence, id, token });
        for _ in 0..rng.range(1, 4) {
            // Stamped before asking: the instant recorded was inside the hold's validity.
            let at = now_us();
            if !guard.is_held() {
                break;
            }
            emit(at, &What::Valid { resource: resource.to_owned(), id });
            if matches!(mode, Mode::Lock | Mode::Write) && fence > 0 {
                store.send(&format!("w {resource} {fence} {instance}")).await;
            }
            tokio::time::sleep(Duration::from_millis(rng.range(5, 40))).await;
        }
        // Stamped once the release completed: until then the key may still hold the token.
        guard.release().await;
        emit(now_us(), &What::Released { resource: resource.to_owned(), id });
        tokio::time::sleep(Duration::from_millis(rng.range(0, 20))).await;
    }
}

/// How long a canary holds a lock: seconds, so that a fault the test aims at its holder lands
/// while it still holds.
fn canary_steps(rng: &mut Rng) -> u64 {
    rng.range(60, 120)
}

/// A broken contender for the lock `resource` (see the module's doc): its acquisition, belief
/// and release are the canary's, the rest (events, fenced writes) as a correct worker's.
async fn contend_broken(
    client: LockClient,
    raw: redis::aio::MultiplexedConnection,
    store: Arc<Store>,
    instance: String,
    resource: &'static str,
    seed: u64,
    canary: Canary,
) {
    let mut rng = Rng::new(seed);
    loop {
        let id = NEXT_HOLD.fetch_add(1, Ordering::Relaxed);
        if canary == Canary::NoNx {
            // "Acquired" whatever the key held: SET without NX.
            let token = format!("{instance}:canary:{:016x}", rng.next_u64());
            let set = redis::cmd("SET")
                .arg(resource)
                .arg(&token)
                .arg("PX")
                .arg(WATCHDOG_LEASE.as_millis().to_string())
                .query_async::<()>(&mut raw.clone())
                .await;
            if let Err(e) = set {
                emit(now_us(), &What::Failed { resource: resource.to_owned(), reason: e.to_string() });
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            emit(
                now_us(),
                &What::Acquired { resource: resource.to_owned(), mode: Mode::Lock, fence: 0, id, token },
            );
            for _ in 0..rng.range(2, 6) {
                emit(now_us(), &What::Valid { resource: resource.to_owned(), id });
                tokio::time::sleep(Duration::from_millis(rng.range(5, 40))).await;
            }
            let _ = redis::cmd("DEL").arg(resource).query_async::<()>(&mut raw.clone()).await;
            emit(now_us(), &What::Released { resource: resource.to_owned(), id });
            continue;
        }
        let options =
            LockOptions::new().watchdog().fencing(true).wait(Duration::from_millis(rng.range(500, 3000)));
        let guard = match client.acquire(resource, options).await {
            Ok(guard) => guard,
            Err(e) => {
                emit(now_us(), &What::Failed { resource: resource.to_owned(), reason: e.to_string() });
                tokio::time::sleep(Duration::from_millis(rng.range(10, 50))).await;
                continue;
            }
        };
        let fence = guard.fence().unwrap_or(0);
        let token = guard.token().to_owned();
        emit(now_us(), &What::Acquired { resource: resource.to_owned(), mode: Mode::Lock, fence, id, token });
        for _ in 0..canary_steps(&mut rng) {
            let at = now_us();
            // ignore-liveness: the lock is trusted until released, whatever happened to it.
            if canary != Canary::IgnoreLiveness && !guard.is_held() {
                break;
            }
            emit(at, &What::Valid { resource: resource.to_owned(), id });
            store.send(&format!("w {resource} {fence} {instance}")).await;
            tokio::time::sleep(Duration::from_millis(rng.range(5, 40))).await;
        }
        if canary == Canary::NoOwnerCheck {
            // Whoever holds the key now loses it.
            let _ = redis::cmd("DEL").arg(resource).query_async::<()>(&mut raw.clone()).await;
            drop(guard);
        } else {
            let _ = guard.release().await;
        }
        emit(now_us(), &What::Released { resource: resource.to_owned(), id });
        tokio::time::sleep(Duration::from_millis(rng.range(0, 20))).await;
    }
}

/// The job of a scheduler that claims no tick: every replica runs every second's tick (or, with
/// `even_only`, only the even seconds' ticks).
async fn ticks_without_claims(store: Arc<Store>, instance: String, even_only: bool) {
    loop {
        let now_ms = now_us() / 1000;
        let next = (now_ms / 1000 + 1) * 1000;
        tokio::time::sleep(Duration::from_millis(next - now_ms)).await;
        if even_only && (next / 1000) % 2 == 1 {
            continue;
        }
        let tick = i64::try_from(next).unwrap_or(i64::MAX);
        emit(now_us(), &What::Tick { tick });
        store.send(&format!("t {tick} {instance}")).await;
    }
}

/// Steps `clock` 1 s ahead on SIGUSR1 (`ahead`) and back to the true time on SIGUSR2
/// (`back`).
async fn step_clock_on_signals(
    clock: OffsetClock,
    mut ahead: tokio::signal::unix::Signal,
    mut back: tokio::signal::unix::Signal,
) {
    loop {
        tokio::select! {
            Some(()) = ahead.recv() => clock.set_offset(TimeDelta::milliseconds(1000)),
            Some(()) = back.recv() => clock.set_offset(TimeDelta::zero()),
            else => return,
        }
    }
}

fn spawn<F: Future<Output = ()> + Send + 'static>(f: F) {
    tokio::spawn(f);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    // Clock steps: SIGUSR1 sets the scheduler's clock 1 s ahead, SIGUSR2 back to the true
    // time (a step back). Only the scheduler reads it; leases run on Redis's clock and the
    // process's monotonic one, and events are stamped with the machine's clock. Listening
    // first thing: an unhandled SIGUSR1 would end the process.
    let clock = OffsetClock::default();
    {
        use tokio::signal::unix::{SignalKind, signal};
        let ahead = signal(SignalKind::user_defined1())?;
        let back = signal(SignalKind::user_defined2())?;
        spawn(step_clock_on_signals(clock.clone(), ahead, back));
    }
    let args: Vec<String> = std::env::args().collect();
    let (url, store_addr, instance, seed, mode) = match args.as_slice() {
        [_, url, store, instance, seed] => (url, store, instance, seed, "correct"),
        [_, url, store, instance, seed, mode] => (url, store, instance, seed, mode.as_str()),
        _ => anyhow::bail!("usage: nemesis_worker <redis-url> <store-addr> <instance> <seed> [<mode>]"),
    };
    let seed: u64 = seed.parse()?;
    let canary = match mode {
        "correct" => None,
        other => Some(Canary::parse(other).ok_or_else(|| anyhow::anyhow!("unknown mode {other:?}"))?),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
    tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false).with_writer(std::io::stderr).init();

    let mut builder = LockClient::builder()
        .url(url.as_str())
        .instance_id(instance.as_str())
        .command_timeout(COMMAND_TIMEOUT)
        .liveness_ttl(LIVENESS_TTL)
        .watchdog_lease(WATCHDOG_LEASE);
    if canary.is_some() {
        // Waiters look often: a key a canary freed under its holder is taken within its
        // holder's next renewal, while that holder still believes it holds it.
        builder = builder.wait_backoff(Duration::from_millis(20), Duration::from_millis(200));
    }
    let client = builder.build()?;
    let store = Arc::new(Store { addr: store_addr.clone(), con: Mutex::new(None) });
    if let Some(canary) = canary {
        println!("ready");
        if canary == Canary::NoTickClaim {
            ticks_without_claims(store, instance.clone(), false).await;
            return Ok(());
        }
        if canary == Canary::LosesTicks {
            // One replica runs the even seconds' ticks; nobody runs the odd ones.
            if instance.starts_with("w0-") {
                ticks_without_claims(store.clone(), instance.clone(), true).await;
            }
            std::future::pending::<()>().await;
        }
        // Through the same proxy as the client, so the test's faults cut it off too.
        let raw = redis::Client::open(url.as_str())?.get_multiplexed_async_connection().await?;
        let tasks: Vec<_> = LOCKS
            .into_iter()
            .enumerate()
            .map(|(i, resource)| {
                let seed = seed.wrapping_mul(31).wrapping_add(i as u64);
                let task = contend_broken(
                    client.clone(),
                    raw.clone(),
                    store.clone(),
                    instance.clone(),
                    resource,
                    seed,
                    canary,
                );
                tokio::spawn(task)
            })
            .collect();
        for task in tasks {
            task.await?;
        }
        return Ok(());
    }
    let resources = [LOCKS[0], LOCKS[1], SEMAPHORE, SEMAPHORE, RW_LOCK];
    for (i, resource) in resources.into_iter().enumerate() {
        let seed = seed.wrapping_mul(31).wrapping_add(i as u64);
        spawn(contend(client.clone(), store.clone(), instance.clone(), resource, seed));
    }
    let tick_store = store.clone();
    let tick_instance = instance.clone();
    let scheduler = Scheduler::builder()
        .client(client)
        .clock(clock)
        .job(
            Job::with_context("nemesis-tick", "* * * * * *", move |ctx| {
                let (store, instance) = (tick_store.clone(), tick_instance.clone());
                async move {
                    emit(now_us(), &What::Tick { tick: ctx.tick() });
                    store.send(&format!("t {} {instance}", ctx.tick())).await;
                }
            })
            .lock(JOB_LOCK),
        )
        .build()?;
    // Each run's reported lateness, for the checker to compare with its body's start.
    let mut reports = scheduler.subscribe();
    spawn(async move {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            match reports.recv().await {
                Ok(report) if report.outcome.ran_here() => {
                    let ms = u64::try_from(report.lateness.as_millis()).unwrap_or(u64::MAX);
                    emit(now_us(), &What::Late { tick: report.tick, ms });
                }
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            }
        }
    });
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let handle = scheduler.start().await?;
    println!("ready");
    terminate.recv().await;
    // Stamped before the scheduler hears it: no job-tick may start on this worker after it.
    emit(now_us(), &What::Shutdown);
    handle.shutdown().await;
    Ok(())
}
