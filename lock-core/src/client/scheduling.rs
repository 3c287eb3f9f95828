//! The [`LockClient`] doors for schedulers: a tick claimed with its lock, one or many at once
//! (see [`crate::tick`]).

use std::future::Future;

use crate::acquire::Target;
use crate::acquire::section;
use crate::client::LockClient;
use crate::error::{LockError, Result};
use crate::held::scope;
use crate::options::LockOptions;
use crate::tick::{Claim, ClaimRequest, TickRun};

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
    ///
    /// ```no_run
    /// use lock_core::tick::{Claim, ClaimRequest};
    /// use lock_core::{LockClient, LockOptions};
    ///
    /// # async fn run_job(_: &str) {}
    /// async fn fire(client: &LockClient, slot_ms: i64) {
    ///     let keys = ["lock:job:invoices", "lock:job:reports"];
    ///     let requests: Vec<_> = keys.iter().map(|key| ClaimRequest::new(key, slot_ms, LockOptions::new())).collect();
    ///     for (key, claim) in keys.iter().zip(client.claim_ticks(&requests).await) {
    ///         match claim {
    ///             // This replica won the slot: run the job under its lock.
    ///             Ok(Claim::Claimed(claimed)) => {
    ///                 let _ = claimed.run(run_job(key)).await;
    ///             }
    ///             Ok(Claim::ClaimedElsewhere { last_tick }) => println!("{key}: ran elsewhere ({last_tick})"),
    ///             Ok(_) => println!("{key}: still running elsewhere"),
    ///             Err(e) => eprintln!("{key}: {e}"),
    ///         }
    ///     }
    /// }
    /// ```
    pub async fn claim_ticks(&self, requests: &[ClaimRequest<'_>]) -> Vec<Result<Claim>> {
        self.core().claim_ticks(requests).await
    }
}
