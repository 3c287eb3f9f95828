#![doc = include_str!("../README.md")]
#![doc = include_str!("overview.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[doc(hidden)]
#[path = "macro_support.rs"]
pub mod __private;
mod acquire;
mod client;
mod conn;
mod election;
mod error;
mod held;
mod options;
mod outcome;
mod primitives;
mod replica_ack;
pub mod schema;
mod sync;
pub mod telemetry;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod test_hooks;
pub mod tick;

pub use client::builder::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_LIVENESS_TTL, DEFAULT_MAX_WAIT_BACKOFF, DEFAULT_WAIT_BACKOFF,
    DEFAULT_WATCHDOG_LEASE, LockClientBuilder,
};
pub use client::elections::ElectionInfo;
pub use client::inspect;
pub use client::subscription::{Notice, Subscription};
pub use client::{ClientStats, LockClient};
pub use conn::eviction::EvictionCheck;
pub use election::role::{Leader, Role};
pub use election::{Candidacy, DEFAULT_LOOK_INTERVAL, ElectionBuilder, MAX_LOOK_INTERVAL, MIN_LOOK_INTERVAL};
pub use error::{ErrorChain, LockError, LossReason, Result};
pub use held::guard::LockGuard;
pub use held::scope::{CurrentLock, current};
pub use options::{Lease, LockOptions, MIN_LEASE, OnLost};
pub use outcome::{LockResult, Skippable};
pub use primitives::rw_lock::{ReadGuard, RwLock, WriteGuard};
pub use primitives::semaphore::{PermitGuard, Semaphore};
pub use replica_ack::{AckShortfall, ReplicaAck};
pub use schema::{MAX_KEY_LEN, validate_key};

#[cfg(feature = "macros")]
pub use lock_macros::distributed_lock;

/// The connection pool type accepted by [`LockClient::from_pool`] (single node only).
pub use deadpool_redis::Pool;
/// The `redis` crate this one is built on (re-exported by deadpool-redis).
pub use deadpool_redis::redis;
