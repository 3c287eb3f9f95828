//! What the expansion of `#[distributed_lock]` calls, and nothing else. Not a stable API:
//! applications use [`LockClient`] and [`crate::tick`] instead.

use std::future::Future;

use crate::acquire::Target;
use crate::acquire::section;
use crate::client::LockClient;
use crate::error::{LockError, Result};
use crate::held::scope;
use crate::options::MIN_LEASE;
use crate::outcome::{LockResult, Skippable};
use crate::schema::hold::Hold;

// The expansion reaches everything through this module (`use <crate>::__private as ..;`), so
// that a wrong `crate = "..."` path is one unresolved import.
pub use crate::options::{LockOptions, OnLost};

/// Checks `lease = "..."` against [`MIN_LEASE`] at compile time: the expansion calls it in a
/// `const` item, and a const-evaluation panic is a compile error at the caller, the lease's
/// literal.
#[track_caller]
pub const fn check_lease_millis(lease_ms: u64) {
    if (lease_ms as u128) < MIN_LEASE.as_millis() {
        panic!("`lease` is shorter than lock_core::MIN_LEASE, the shortest lease a lock accepts");
    }
}

/// What the macro knows about one call: everything but the body.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The formatted key.
    pub key: String,
    /// The options given to the attribute (`on_lost` included).
    pub options: LockOptions,
    hold: Hold,
}

impl Spec {
    /// A lock on `key` with `options`.
    pub fn new(key: String, options: LockOptions) -> Self {
        Spec { key, options, hold: Hold::Lock }
    }

    /// A permit of the semaphore `key` of `permits` (`permits = N`; checked at compile time
    /// to be at least 1).
    pub fn permit(key: String, options: LockOptions, permits: u32) -> Self {
        Spec { key, options, hold: Hold::Permit { permits } }
    }

    /// A read hold of the read-write lock `key` (`read`).
    pub fn read(key: String, options: LockOptions) -> Self {
        Spec { key, options, hold: Hold::Read }
    }

    /// A write hold of the read-write lock `key` (`write`).
    pub fn write(key: String, options: LockOptions) -> Self {
        Spec { key, options, hold: Hold::Write }
    }

    /// The section to run: only a lock claims a scheduler run's tick.
    fn target(&self) -> (Target<'_>, Option<scope::TickClaim>) {
        let tick = if self.hold == Hold::Lock { scope::claim_tick() } else { None };
        (Target { key: &self.key, hold: self.hold }, tick)
    }
}

/// The installed default client.
pub fn default_client() -> Result<LockClient> {
    LockClient::default_client()
}

/// The client named by `client = <expr>`.
pub fn client_from<C: AsRef<LockClient> + ?Sized>(client: &C) -> Result<LockClient> {
    Ok(client.as_ref().clone())
}

/// Fail-fast or waiting mode: a held lock or a timeout becomes the fn's error.
pub async fn run<R: LockResult, F: Future<Output = R>>(client: Result<LockClient>, spec: Spec, body: F) -> R {
    let client = match client {
        Ok(client) => client,
        Err(e) => return R::lock_failed(e),
    };
    let (target, tick) = spec.target();
    match section::run(client.core(), target, spec.options.clone(), tick, body).await.result {
        Ok(output) => output,
        Err(e) => R::lock_failed(e),
    }
}

/// `skip_if_held` mode: a held lock (or a tick already claimed) skips the body.
pub async fn run_skip<R: Skippable, F: Future<Output = R>>(
    client: Result<LockClient>,
    spec: Spec,
    body: F,
) -> R {
    let client = match client {
        Ok(client) => client,
        Err(e) => return R::lock_failed(e),
    };
    let (target, tick) = spec.target();
    let section = section::run(client.core(), target, spec.options.clone(), tick, body).await;
    match section.result {
        Ok(output) => output,
        Err(LockError::TickClaimed { .. }) => R::skipped(),
        Err(e) if e.is_contention() => {
            // A scheduler run logs its own skip, with job and tick.
            if !section.claimed_tick {
                tracing::info!(key = %spec.key, "lock {} is held by another instance, skipping", spec.key);
            }
            R::skipped()
        }
        Err(e) => R::lock_failed(e),
    }
}
