//! What the expansion of `#[distributed_lock]` calls, and nothing else. Not a stable API:
//! applications use [`LockClient`] and [`crate::tick`] instead.

use std::future::Future;

use crate::client::LockClient;
use crate::error::{LockError, Result};
use crate::options::LockOptions;
use crate::outcome::{LockResult, Skippable};
use crate::scope;
use crate::section;

pub use crate::outcome::{LockResult as __LockResult, Skippable as __Skippable};

/// What the macro knows about one call: everything but the body.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The formatted key.
    pub key: String,
    /// The options given to the attribute (`on_lost` included).
    pub options: LockOptions,
}

impl Spec {
    /// A spec for `key` with `options`.
    pub fn new(key: String, options: LockOptions) -> Self {
        Spec { key, options }
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
    match section::run(client.core(), &spec.key, spec.options, scope::claim_tick(), body).await.result {
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
    let section = section::run(client.core(), &spec.key, spec.options, scope::claim_tick(), body).await;
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
