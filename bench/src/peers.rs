//! Peers (`--only peers`): lock-core beside the Rust lock crates a user would pick instead,
//! rslock (Redlock, here on one node) and redis-lock (`lock_across`, its single-resource
//! API), each used as its documentation shows, with its defaults, against one Redis and the
//! raw floor measured in the same run.
//!
//! - uncontended: 1 and 32 tasks, each on its own key, acquire -> release as fast as they can:
//!   cycles/s as a ratio to the raw two-command loop (`SET NX PX`, compare-and-delete);
//! - contended: 8 tasks on one key, acquire (waiting) -> hold 1 ms -> release: acquisitions/s,
//!   the gap from the end of one hold to the start of the next (release and hand-off), the
//!   share of acquisitions that went to another task than the one that just released (a
//!   fair queue makes it 100%; a releaser that re-acquires before sleeping waiters wake makes
//!   it ~0), and per acquisition the commands Redis ran (those a Lua script or function calls
//!   included) and Redis's CPU time.
//!
//! Each peer gets one client (or connection) per process, shared by its tasks, as a service
//! would; rounds of the four alternate so drift in the machine's speed hits them alike.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use lock_core::{LockClient, LockOptions};
use tokio::sync::Mutex;

use crate::Bench;
use crate::raw;
use crate::report::{Json, Ratios, Report, Table, fmt, ratio};

/// Lease of every peer's locks: lock-core's default watchdog lease, so no lock expires
/// mid-run and nobody renews.
const LEASE: Duration = Duration::from_secs(30);
const CONTENDERS: usize = 8;
const HOLD: Duration = Duration::from_millis(1);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Peer {
    Raw,
    LockCore,
    Rslock,
    RedisLock,
}

const PEERS: [Peer; 4] = [Peer::Raw, Peer::LockCore, Peer::Rslock, Peer::RedisLock];

impl Peer {
    fn label(self) -> &'static str {
        match self {
            Peer::Raw => "raw floor",
            Peer::LockCore => "lock-core",
            Peer::Rslock => "rslock 0.10",
            Peer::RedisLock => "redis-lock 0.5",
        }
    }
}

/// One peer's client, shared by the tasks of a run.
#[derive(Clone)]
enum Client {
    Raw(crate::conn::RawConn),
    LockCore(LockClient),
    Rslock(Arc<rslock::LockManager>),
    RedisLock(Arc<Mutex<redis027::aio::MultiplexedConnection>>),
}

impl Client {
    async fn open(b: &Bench, peer: Peer) -> Result<Client> {
        Ok(match peer {
            Peer::Raw => Client::Raw(b.conn().await?),
            Peer::LockCore => Client::LockCore(b.client("peers")?),
            Peer::Rslock => Client::Rslock(Arc::new(rslock::LockManager::new(vec![b.url.clone()]))),
            Peer::RedisLock => {
                let client = redis027::Client::open(b.url.as_str()).context("redis-lock's client")?;
                let conn =
                    client.get_multiplexed_async_connection().await.context("redis-lock's connection")?;
                Client::RedisLock(Arc::new(Mutex::new(conn)))
            }
        })
    }

    /// Takes `key` (waiting for it when `wait`), runs `hold`, releases; an error if not taken.
    async fn cycle<F: Future<Output = ()> + Send + 'static>(
        &mut self,
        key: &str,
        n: u64,
        wait: bool,
        hold: F,
    ) -> Result<()> {
        match self {
            Client::Raw(conn) => {
                let token = raw::token(n);
                while !raw::acquire(conn, key, &token, LEASE.as_millis() as u64).await? {
                    anyhow::ensure!(wait, "raw: `{key}` held");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                hold.await;
                anyhow::ensure!(raw::release(conn, key, &token).await?, "raw: `{key}` not held at release");
            }
            Client::LockCore(client) => {
                let options =
                    if wait { LockOptions::new().wait(Duration::from_secs(10)) } else { LockOptions::new() };
                let guard = client.acquire(key, options).await?;
                hold.await;
                anyhow::ensure!(guard.release().await?, "lock-core: `{key}` not held at release");
            }
            Client::Rslock(manager) => {
                let lock = if wait {
                    tokio::time::timeout(Duration::from_secs(10), manager.acquire_no_guard(key, LEASE))
                        .await
                        .map_err(|_| anyhow!("rslock: waited 10 s for `{key}`"))?
                } else {
                    manager.lock(key, LEASE).await
                }
                .map_err(|e| anyhow!("rslock: {e:?}"))?;
                hold.await;
                manager.unlock(&lock).await;
            }
            Client::RedisLock(conn) => {
                let options =
                    redis_lock::LockAcrossOptions { ttl: LEASE, ..redis_lock::LockAcrossOptions::default() };
                redis_lock::lock_across(std::slice::from_ref(conn), key, hold, options)
                    .await
                    .map_err(|e| anyhow!("redis-lock: {e}"))?;
            }
        }
        Ok(())
    }
}

pub(crate) async fn run(b: &Bench, report: &mut Report) -> Result<()> {
    let (rounds, per_round) =
        if b.quick { (3, Duration::from_millis(500)) } else { (5, Duration::from_secs(1)) };
    let mut table = Table::new(
        "Peers: lock-core, rslock and redis-lock on one Redis, as ratios to the raw floor of the same run",
        &[
            "peer",
            "1 task x raw",
            "32 tasks x raw",
            "contended acq/s",
            "hand-off gap p50 µs",
            "to another task",
            "redis cmds/acq",
            "redis CPU µs/acq",
        ],
    );
    // [peer][tasks index] -> cycles/s per round.
    let mut uncontended = vec![[Vec::new(), Vec::new()]; PEERS.len()];
    for _ in 0..rounds {
        for (p, &peer) in PEERS.iter().enumerate() {
            // One task on a current-thread runtime of its own, as S1 does: on the shared
            // 2-worker runtime its round trips are bimodal (driver on the same worker or not).
            let one =
                b.on_local_runtime(move |b| async move { uncontended_round(&b, peer, 1, per_round).await });
            uncontended[p][0].push(one.await?);
            uncontended[p][1].push(uncontended_round(b, peer, 32, per_round).await?);
        }
    }
    for (p, &peer) in PEERS.iter().enumerate() {
        let contended = contended_run(b, peer, per_round * rounds).await?;
        let vs_raw = |t: usize| Ratios::of(&uncontended[p][t], &uncontended[0][t]);
        let (one, many) = (vs_raw(0), vs_raw(1));
        table.row(vec![
            peer.label().to_owned(),
            format!("{} ({})", fmt(one.median, 2), one.iqr(2)),
            format!("{} ({})", fmt(many.median, 2), many.iqr(2)),
            fmt(contended.per_sec, 0),
            fmt(contended.gap_p50_us, 0),
            format!("{}%", fmt(contended.to_another * 100.0, 0)),
            fmt(contended.commands_per_acquisition, 1),
            fmt(contended.redis_cpu_us_per_acquisition, 1),
        ]);
        report.json.push(
            Json::new("peers")
                .str("peer", peer.label())
                .num("uncontended_1_x_raw", one.median)
                .num("uncontended_32_x_raw", many.median)
                .num("contended_per_sec", contended.per_sec)
                .num("handoff_gap_p50_us", contended.gap_p50_us)
                .num("to_another_task", contended.to_another)
                .num("redis_commands_per_acquisition", contended.commands_per_acquisition)
                .num("redis_cpu_us_per_acquisition", contended.redis_cpu_us_per_acquisition),
        );
    }
    report.tables.push(table);
    Ok(())
}

/// Cycles per second of `tasks` tasks, each on its own key, for `time`.
async fn uncontended_round(b: &Bench, peer: Peer, tasks: usize, time: Duration) -> Result<f64> {
    let client = Client::open(b, peer).await?;
    let cycles = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + time;
    let mut handles = Vec::with_capacity(tasks);
    for t in 0..tasks {
        let (mut client, cycles, key) = (client.clone(), cycles.clone(), b.key(&format!("peers:u:{t}")));
        handles.push(tokio::spawn(async move {
            let mut n = t as u64 * 1_000_000_000;
            while Instant::now() < deadline {
                n += 1;
                client.cycle(&key, n, false, async {}).await?;
                cycles.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    let started = Instant::now();
    for handle in handles {
        handle.await.context("an uncontended task panicked")??;
    }
    Ok(cycles.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}

struct Contended {
    per_sec: f64,
    gap_p50_us: f64,
    to_another: f64,
    /// Every command Redis ran, those a script calls included.
    commands_per_acquisition: f64,
    redis_cpu_us_per_acquisition: f64,
}

/// `CONTENDERS` tasks on one key for `time`: who held it, and when each hold began and ended.
async fn contended_run(b: &Bench, peer: Peer, time: Duration) -> Result<Contended> {
    let client = Client::open(b, peer).await?;
    let key = b.key("peers:contended");
    // (task, hold start, hold end), in hold order: only the holder writes.
    let holds = Arc::new(std::sync::Mutex::new(Vec::<(usize, Instant, Instant)>::new()));
    let holding = Arc::new(AtomicUsize::new(0));
    let before = b.stats().await?;
    let deadline = Instant::now() + time;
    let mut handles = Vec::with_capacity(CONTENDERS);
    for task in 0..CONTENDERS {
        let (mut client, key, holds, holding) = (client.clone(), key.clone(), holds.clone(), holding.clone());
        handles.push(tokio::spawn(async move {
            let mut n = task as u64 * 1_000_000_000;
            while Instant::now() < deadline {
                n += 1;
                let (holds, holding) = (holds.clone(), holding.clone());
                client
                    .cycle(&key, n, true, async move {
                        let start = Instant::now();
                        // Two holders at once would make every figure here meaningless.
                        assert_eq!(holding.fetch_add(1, Ordering::SeqCst), 0, "two holders at once");
                        tokio::time::sleep(HOLD).await;
                        holding.fetch_sub(1, Ordering::SeqCst);
                        holds.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((
                            task,
                            start,
                            Instant::now(),
                        ));
                    })
                    .await?;
            }
            anyhow::Ok(())
        }));
    }
    let started = Instant::now();
    for handle in handles {
        handle.await.context("a contended task panicked")??;
    }
    let elapsed = started.elapsed();
    let delta = b.stats().await?.since(&before);
    let mut holds = std::mem::take(&mut *holds.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    holds.sort_by_key(|h| h.1);
    anyhow::ensure!(holds.len() > 10, "{}: only {} acquisitions", peer.label(), holds.len());
    let mut gaps: Vec<u64> =
        holds.windows(2).map(|w| w[1].1.saturating_duration_since(w[0].2).as_micros() as u64).collect();
    gaps.sort_unstable();
    let another = holds.windows(2).filter(|w| w[0].0 != w[1].0).count();
    Ok(Contended {
        per_sec: holds.len() as f64 / elapsed.as_secs_f64(),
        gap_p50_us: crate::report::percentile(&gaps, 0.5) as f64,
        to_another: ratio(another as f64, (holds.len() - 1) as f64),
        commands_per_acquisition: ratio(delta.calls as f64, holds.len() as f64),
        redis_cpu_us_per_acquisition: ratio(delta.server_cpu_us as f64, holds.len() as f64),
    })
}
