#![doc = include_str!("../README.md")]

#[doc(hidden)]
#[path = "macro_support.rs"]
pub mod __private;
mod acquire;
mod builder;
mod client;
mod conn;
mod deploy;
mod error;
mod guard;
pub mod inspect;
mod keys;
mod liveness;
mod options;
mod outcome;
mod release;
mod replica_ack;
mod scope;
mod scripts;
mod section;
mod state;
pub mod telemetry;
pub mod tick;
mod waiters;
mod watchdog;

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub use builder::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_LIVENESS_TTL, DEFAULT_MAX_WAIT_BACKOFF, DEFAULT_WAIT_BACKOFF,
    DEFAULT_WATCHDOG_LEASE, LockClientBuilder,
};
pub use client::{ClientStats, LockClient};
pub use error::{LockError, LossReason, Result};
pub use guard::LockGuard;
pub use keys::MAX_KEY_LEN;
pub use options::{Lease, LockOptions, MIN_LEASE, OnLost};
pub use outcome::{LockResult, Skippable};
pub use replica_ack::{AckShortfall, ReplicaAck};
pub use scope::{CurrentLock, current};

#[cfg(feature = "macros")]
pub use lock_macros::distributed_lock;

/// Checks that `key` can name a lock, as every acquisition does first: not empty, at most
/// [`MAX_KEY_LEN`] bytes, no control characters, braces only as one Redis Cluster hash tag.
pub fn validate_key(key: &str) -> Result<()> {
    keys::validate(key)
}

/// The connection pool type accepted by [`LockClient::from_pool`] (single node only).
pub use deadpool_redis::Pool;
/// The `redis` crate this one is built on (re-exported by deadpool-redis).
pub use deadpool_redis::redis;

// A panic while one of these locks was held cannot leave its data half-updated (every
// critical section is a single insert, remove or read), so poisoning is ignored.
pub(crate) fn lock_unpoisoned<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn read_unpoisoned<T>(m: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn write_unpoisoned<T>(m: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(PoisonError::into_inner)
}
