//! The one error type of the crate.

use std::time::Duration;

/// Everything that can go wrong when taking, holding or releasing a lock.
///
/// Each variant's message says what happened and, where it helps, what to change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock is held by someone else and the caller asked not to wait.
    #[error("lock `{key}` is held by another owner (it frees in at most {remaining:?})")]
    Held {
        /// The lock's key.
        key: String,
        /// The holder's remaining lease as Redis reported it, if it has one.
        remaining: Option<Duration>,
    },

    /// The lock stayed held for the whole wait bound.
    #[error("timed out after {waited:?} waiting for lock `{key}`")]
    Timeout {
        /// The lock's key.
        key: String,
        /// How long the caller waited.
        waited: Duration,
    },

    /// The scheduler tick this run was for was already claimed (run) by another replica.
    #[error("tick {tick} of lock `{key}` was already claimed by another instance")]
    TickClaimed {
        /// The lock's key.
        key: String,
        /// The last claimed tick (epoch milliseconds of its scheduled fire time).
        tick: i64,
    },

    /// Ownership was lost while the lock was held: the lease ran out before it could be
    /// renewed, or the key was deleted or taken over from outside.
    #[error("lock `{key}` was lost while held: {reason}")]
    Lost {
        /// The lock's key.
        key: String,
        /// Why it was lost.
        reason: LossReason,
    },

    /// Redis could not be reached or a command failed.
    #[error("redis command failed while {action}: {source}")]
    Redis {
        /// What the client was doing, e.g. "acquiring lock `k`".
        action: String,
        /// The underlying error.
        #[source]
        source: deadpool_redis::redis::RedisError,
    },

    /// No connection could be taken from the pool.
    #[error("could not get a redis connection while {action}: {source}")]
    Pool {
        /// What the client was doing.
        action: String,
        /// The underlying pool error.
        #[source]
        source: deadpool_redis::PoolError,
    },

    /// The client configuration is invalid (URL, instance id, pool).
    #[error("invalid lock client configuration: {0}")]
    Config(String),

    /// No default client was installed, but code asked for it.
    #[error(
        "no default lock client is installed: call `LockClient::install_default()` at startup, \
         or pass a client explicitly"
    )]
    NotConfigured,

    /// The key cannot be used as a lock key.
    #[error("invalid lock key {key:?}: {reason}")]
    InvalidKey {
        /// The rejected key.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A lease, wait or minimum-hold duration is unusable.
    #[error("invalid lock options: {0}")]
    InvalidOptions(String),
}

/// Why a held lock was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// The local deadline (lease minus clock-drift allowance) passed without a successful
    /// renewal, e.g. because Redis was unreachable or the holder stalled.
    Expired,
    /// Redis refused a renewal: the key is gone or holds another owner's token.
    NotOwner,
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LossReason::Expired => "the lease expired before it could be renewed",
            LossReason::NotOwner => "the key no longer holds this owner's token",
        })
    }
}

impl LockError {
    pub(crate) fn redis(action: impl Into<String>, source: deadpool_redis::redis::RedisError) -> Self {
        LockError::Redis { action: action.into(), source }
    }

    /// Whether this error may go away by itself: Redis unreachable, a connection dropped, a
    /// command timed out, the server loading its data or failing over.
    pub fn is_transient(&self) -> bool {
        match self {
            LockError::Redis { source, .. } => crate::client::is_transient(source),
            LockError::Pool { .. } => true,
            _ => false,
        }
    }

    /// Whether this error means "someone else holds it" (held, timed out, tick already
    /// claimed), as opposed to a
    /// failure of Redis, of the configuration or of ownership.
    pub fn is_contention(&self) -> bool {
        matches!(self, LockError::Held { .. } | LockError::Timeout { .. } | LockError::TickClaimed { .. })
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = LockError> = std::result::Result<T, E>;
