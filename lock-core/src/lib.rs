#![doc = include_str!("../README.md")]

#[doc(hidden)]
#[path = "macro_support.rs"]
pub mod __private;
mod acquire;
mod batches;
mod builder;
mod claims;
mod cleanup;
mod client;
mod conn;
mod core;
mod deploy;
mod error;
mod guard;
mod hold;
pub mod inspect;
mod liveness;
mod options;
mod outcome;
mod release;
mod release_group;
mod replica_ack;
mod reply;
mod rw_lock;
pub mod schema;
mod scope;
mod section;
mod semaphore;
mod state;
mod sync;
pub mod telemetry;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod test_hooks;
pub mod tick;
mod unsettled;
mod waiters;
mod waiting;
mod watchdog;

pub use builder::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_LIVENESS_TTL, DEFAULT_MAX_WAIT_BACKOFF, DEFAULT_WAIT_BACKOFF,
    DEFAULT_WATCHDOG_LEASE, LockClientBuilder,
};
pub use client::{ClientStats, LockClient};
pub use error::{ErrorChain, LockError, LossReason, Result};
pub use guard::LockGuard;
pub use options::{Lease, LockOptions, MIN_LEASE, OnLost};
pub use outcome::{LockResult, Skippable};
pub use replica_ack::{AckShortfall, ReplicaAck};
pub use rw_lock::{ReadGuard, RwLock, WriteGuard};
pub use schema::{MAX_KEY_LEN, validate_key};
pub use scope::{CurrentLock, current};
pub use semaphore::{PermitGuard, Semaphore};

#[cfg(feature = "macros")]
pub use lock_macros::distributed_lock;

/// The connection pool type accepted by [`LockClient::from_pool`] (single node only).
pub use deadpool_redis::Pool;
/// The `redis` crate this one is built on (re-exported by deadpool-redis).
pub use deadpool_redis::redis;
