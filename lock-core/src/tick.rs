//! Run each slot of a job once across replicas: claim the slot (its *tick*) atomically with
//! the job's lock.
//!
//! A job that fires on every replica is identified per run by its scheduled fire time, the
//! tick (epoch milliseconds). The replica whose acquisition of the job's lock also records the
//! tick (in [`schema::tick_key`](crate::schema::tick_key)) runs it; a replica that finds the tick already recorded, even after
//! the lock was released, skips it. That is "once per tick", which a lock alone ("not at the
//! same time") does not give: a fast run that ends before a slow replica fires would
//! otherwise run twice.
//!
//! Two doors:
//! - [`LockClient::run_tick`]: take the job's lock and claim the tick in one call, and learn
//!   whether the body ran, the tick was claimed elsewhere, or the lock was held.
//! - [`LockClient::claim_ticks`]: claim one slot's tick for many locks at once (one round trip
//!   per Redis node), then run each body with [`ClaimedTick::run`]. This is how the
//!   `scheduler` crate claims the slots of jobs whose lock it knows.
//! - [`scope`]: run a future as the run of a tick; its first locked section
//!   ([`LockClient::with_lock`] or a `#[distributed_lock]` fn) claims the tick with its lock.
//!   This is how the `scheduler` crate runs jobs whose fn carries the attribute.
//!
//! ```no_run
//! use lock_core::{LockClient, LockOptions, tick::TickRun};
//!
//! # async fn demo(client: LockClient, slot_ms: i64) -> Result<(), lock_core::LockError> {
//! match client.run_tick("lock:daily-report", slot_ms, LockOptions::new(), async { 42 }).await? {
//!     TickRun::Ran(n) => println!("this replica ran the slot: {n}"),
//!     TickRun::ClaimedElsewhere { .. } => println!("the slot already ran elsewhere"),
//!     TickRun::Held { .. } => println!("another replica is running the job"),
//!     _ => {}
//! }
//! # Ok(()) }
//! ```

use std::future::Future;
use std::time::Duration;

use std::sync::Arc;

use crate::client::LockClient;
use crate::core::{Core, Target};
use crate::error::{LockError, Result};
use crate::guard::LockGuard;
use crate::options::{LockOptions, OnLost};
use crate::scope;
use crate::section;

pub use crate::scope::TickOutcome;

/// How long a claimed tick is remembered after its last claim: 7 days ([`schema::tick_key`](crate::schema::tick_key)
/// expires then; the acquire script gets it as an argument).
///
/// Every claim resets it, so the key of a job that keeps running never expires, and the key of
/// a job that stopped (removed, renamed) goes away on its own. The once-per-tick guarantee
/// holds as long as nobody claims a slot older than this: the `scheduler` crate never runs a
/// slot more than `TICK_TTL` late (its catch-up windows are capped to it), and callers of
/// [`LockClient::run_tick`] should do the same.
pub use crate::schema::TICK_TTL;

/// Runs `fut` as the run of `tick` (epoch milliseconds of the slot's scheduled fire time).
///
/// The first outermost locked section inside `fut` claims the tick atomically with its lock
/// and reports how it went: the second value, `None` if `fut` took no lock. Later locked
/// sections of the same run (a loop over an annotated fn, say) take plain locks, as do
/// sections nested inside the first.
pub async fn scope<F: Future>(tick: i64, fut: F) -> (F::Output, Option<TickOutcome>) {
    scope::tick_scope(Some(tick), fut).await
}

/// Runs `fut` as a run outside any slot (a run started by hand): its first outermost locked
/// section reports how it went, as in [`scope`], but claims no tick, so the slots' own runs
/// are not affected. [`TickOutcome::Ran`] then means the lock was taken and the body ran;
/// [`TickOutcome::Claimed`] does not occur.
pub async fn unslotted<F: Future>(fut: F) -> (F::Output, Option<TickOutcome>) {
    scope::tick_scope(None, fut).await
}

/// What [`LockClient::run_tick`] did with a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TickRun<T> {
    /// This call claimed the tick and the body ran; its output.
    Ran(T),
    /// The tick (or a later one) had already been claimed; the body did not run.
    ClaimedElsewhere {
        /// The last claimed tick.
        last_tick: i64,
    },
    /// Another owner held the lock (past the wait bound, if one was given); the tick was not
    /// claimed and the body did not run.
    Held {
        /// The holder's remaining lease, when Redis reported one.
        remaining: Option<Duration>,
    },
}

impl LockClient {
    /// Takes `key` and claims `tick` with it in one step; if both succeed, runs `fut` holding
    /// the lock (per `options`, `on_lost` included) and releases it.
    ///
    /// A tick is claimed at most once per key: ticks are compared as numbers, so claiming an
    /// older tick than the last claimed one also reports [`TickRun::ClaimedElsewhere`].
    /// Inside a locked section that already holds `key`, the hold is shared and nothing is
    /// claimed. Errors are Redis failures, invalid input, and [`LockError::Lost`] when the lock was lost
    /// and the body cancelled.
    pub async fn run_tick<F: Future>(
        &self,
        key: &str,
        tick: i64,
        options: LockOptions,
        fut: F,
    ) -> Result<TickRun<F::Output>> {
        // Its own scope, so that the outcome is not reported to an enclosing run's scope.
        let (section, _) = scope::tick_scope(
            Some(tick),
            section::run(self.core(), Target::lock(key), options, Some(scope::TickClaim(Some(tick))), fut),
        )
        .await;
        match section.result {
            Ok(output) => Ok(TickRun::Ran(output)),
            Err(LockError::TickClaimed { tick, .. }) => Ok(TickRun::ClaimedElsewhere { last_tick: tick }),
            Err(LockError::Held { remaining, .. }) => Ok(TickRun::Held { remaining }),
            Err(LockError::Timeout { .. }) => Ok(TickRun::Held { remaining: None }),
            Err(e) => Err(e),
        }
    }
}

/// One lock of a batched claim ([`LockClient::claim_ticks`]): its key, the tick to claim with
/// it, and how to take it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClaimRequest<'a> {
    /// The lock's key.
    pub key: &'a str,
    /// The tick (epoch milliseconds of the slot's scheduled fire time).
    pub tick: i64,
    /// Lease, minimum hold, `on_lost`; a wait or fencing makes the claim go on its own.
    pub options: LockOptions,
}

impl<'a> ClaimRequest<'a> {
    /// Claim `tick` with the lock `key`, taken per `options`.
    pub fn new(key: &'a str, tick: i64, options: LockOptions) -> Self {
        ClaimRequest { key, tick, options }
    }
}

/// What [`LockClient::claim_ticks`] did for one lock.
#[derive(Debug)]
#[non_exhaustive]
pub enum Claim {
    /// The lock is held and the tick claimed: run the body with [`ClaimedTick::run`] (or drop
    /// it to release the lock without running anything).
    Claimed(ClaimedTick),
    /// The tick (or a later one) had already been claimed; nothing was taken.
    ClaimedElsewhere {
        /// The last claimed tick.
        last_tick: i64,
    },
    /// Another owner held the lock; the tick was not claimed.
    Held {
        /// The holder's remaining lease, when known (the batch does not ask for it).
        remaining: Option<Duration>,
    },
}

/// A lock taken with its tick claimed by [`LockClient::claim_ticks`]: the proof of ownership,
/// waiting for its body. Dropping it releases the lock in the background.
#[derive(Debug)]
pub struct ClaimedTick {
    core: Arc<Core>,
    guard: LockGuard,
    on_lost: OnLost,
    tick: i64,
}

impl ClaimedTick {
    pub(crate) fn new(core: Arc<Core>, guard: LockGuard, request: &ClaimRequest<'_>) -> Self {
        ClaimedTick { core, guard, on_lost: request.options.on_lost, tick: request.tick }
    }

    /// The lock's guard (key, token, lease, whether it is still held).
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// The claimed tick.
    pub fn tick(&self) -> i64 {
        self.tick
    }

    /// Runs `fut` holding the lock, as a locked section ([`LockClient::with_lock`]): locked
    /// sections inside it that ask for the same key share the hold, a loss is handled per the
    /// request's `on_lost` ([`LockError::Lost`] when the body was cancelled), and the lock is
    /// released when `fut` ends. Releases of claimed ticks' locks go out in groups, at most
    /// one round trip per Redis node every 10 ms: a release sends at once unless a group went
    /// out in the last 10 ms, in which case it waits (its lock held that much longer) and
    /// goes with the releases asked for meanwhile.
    pub async fn run<F: Future>(self, fut: F) -> Result<F::Output> {
        section::hold(&self.core, self.guard, self.on_lost, true, fut).await
    }
}

impl LockClient {
    /// Claims many ticks, each with its lock, in one round trip per Redis node: a single node
    /// gets one pipeline (a script call per 200 claims), a cluster one pipeline per node (a
    /// script call per hash slot). Each claim does what [`run_tick`](Self::run_tick)'s would:
    /// the lock is taken and the tick recorded together, or neither; a tick claimed before
    /// (or a later one) is [`Claim::ClaimedElsewhere`], a held lock [`Claim::Held`] (a holder
    /// whose client is dead is taken over).
    ///
    /// Claims with a wait or fencing, on a client with replica acknowledgement, or of a lock
    /// the current task already holds, are made one by one (concurrently) through the same
    /// path as [`run_tick`](Self::run_tick). The results are in the order of `requests`; an
    /// error (invalid key or options, Redis failing) is that claim's alone. A batch whose reply
    /// is lost gives up every token it sent, in the background, as a single acquisition does.
    pub async fn claim_ticks(&self, requests: &[ClaimRequest<'_>]) -> Vec<Result<Claim>> {
        self.core().claim_ticks(requests).await
    }
}
