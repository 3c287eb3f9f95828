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
//! - [`LockClient::run_tick`](crate::LockClient::run_tick): take the job's lock and claim the tick in one call, and learn
//!   whether the body ran, the tick was claimed elsewhere, or the lock was held.
//! - [`LockClient::claim_ticks`](crate::LockClient::claim_ticks): claim one slot's tick for many locks at once (one round trip
//!   per Redis node), then run each body with [`ClaimedTick::run`]. This is how the
//!   `scheduler` crate claims the slots of jobs whose lock it knows.
//! - [`scope`]: run a future as the run of a tick; its first locked section
//!   ([`LockClient::with_lock`](crate::LockClient::with_lock) or a `#[distributed_lock]` fn) claims the tick with its lock.
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

use crate::held::scope;

pub use crate::acquire::claims::{Claim, ClaimRequest, ClaimedTick};
pub use crate::held::scope::TickOutcome;

/// How long a claimed tick is remembered after its last claim: 7 days ([`schema::tick_key`](crate::schema::tick_key)
/// expires then; the acquire script gets it as an argument).
///
/// Every claim resets it, so the key of a job that keeps running never expires, and the key of
/// a job that stopped (removed, renamed) goes away on its own. The once-per-tick guarantee
/// holds as long as nobody claims a slot older than this: the `scheduler` crate never runs a
/// slot more than `TICK_TTL` late (its catch-up windows are capped to it), and callers of
/// [`LockClient::run_tick`](crate::LockClient::run_tick) should do the same.
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

/// What [`LockClient::run_tick`](crate::LockClient::run_tick) did with a slot.
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
