//! The one error type of the crate, and the classification of Redis errors.

use std::time::Duration;

use deadpool_redis::redis::{ErrorKind, RedisError, ServerErrorKind};

/// Everything that can go wrong when taking, holding or releasing a lock.
///
/// Each variant's message says what happened and, where it helps, what to change; its cause,
/// if any, is its [`source`](std::error::Error::source), not repeated in the message (print the
/// whole chain with [`ErrorChain`], or `{:#}` through `anyhow`). Cheap to clone.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock is held by someone else and the caller asked not to wait.
    #[error("lock `{key}` is held by another owner{}", frees_in(remaining))]
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

    /// Redis refused this client's credentials, or asked for some: a wrong or missing
    /// password or user, or an ACL user not allowed a command or key. Never transient.
    #[error("redis refused access while {action}: {hint}")]
    Auth {
        /// What the client was doing.
        action: String,
        /// What to check.
        hint: &'static str,
        /// The underlying error.
        #[source]
        source: deadpool_redis::redis::RedisError,
    },

    /// Fewer replicas than [`ReplicaAck::replicas`](crate::ReplicaAck::replicas) acknowledged
    /// the acquisition within its timeout, and [`AckShortfall::Error`](crate::AckShortfall::Error)
    /// was chosen: the lock was released (best effort) and not granted. Transient: a replica
    /// that is back, or a retry, may succeed.
    #[error(
        "lock `{key}` was acquired but only {got} of {wanted} replicas acknowledged it in time; it \
         was released (check the replicas' health, or choose AckShortfall::Warn)"
    )]
    ReplicaAck {
        /// The lock's key.
        key: String,
        /// Replicas wanted.
        wanted: u32,
        /// Replicas that acknowledged.
        got: u32,
    },

    /// Redis could not be reached or a command failed.
    #[error("redis command failed while {action}")]
    Redis {
        /// What the client was doing, e.g. "acquiring lock `k`".
        action: String,
        /// The underlying error.
        #[source]
        source: deadpool_redis::redis::RedisError,
    },

    /// No connection could be taken from the pool.
    #[error("could not get a redis connection while {action}")]
    Pool {
        /// What the client was doing.
        action: String,
        /// The underlying pool error.
        #[source]
        source: std::sync::Arc<deadpool_redis::PoolError>,
    },

    /// The TLS connection could not be set up: the server's certificate is not trusted (an
    /// unknown issuer, a name that does not match, an expired certificate) or the handshake
    /// failed. Never transient: a wait fails at once, as on a wrong password.
    #[error("TLS failed while {action}: {hint}")]
    Tls {
        /// What the client was doing.
        action: String,
        /// What to check.
        hint: &'static str,
        /// The underlying error.
        #[source]
        source: deadpool_redis::redis::RedisError,
    },

    /// The semaphore is in use with another number of permits: every replica must declare the
    /// same count, or some would admit more holders than others expect. Nothing was taken.
    /// The count can change once the semaphore is idle (no holder, nobody waiting).
    #[error(
        "semaphore `{name}` is in use with {declared} permits, not {permits}: give every replica the same count \
         (it can change once nobody holds or waits for it)"
    )]
    PermitsMismatch {
        /// The semaphore's name.
        name: String,
        /// The number of permits this caller declared.
        permits: u32,
        /// The number of permits the semaphore is in use with.
        declared: u32,
    },

    /// A write hold was asked for inside a read section of the same read-write lock on the
    /// same task: it could only deadlock (the task's own read hold keeps the writer out), so it
    /// is refused at once. Take the write hold first (a read inside a write section is fine).
    #[error(
        "a write hold of `{key}` was asked for inside a read section of it on the same task: it would wait \
         for itself; take the write hold first (reads inside a write section are fine)"
    )]
    WriteInsideRead {
        /// The read-write lock's name.
        key: String,
    },

    /// The lock changed hands every time it was read while being force-released
    /// ([`LockClient::force_unlock`](crate::LockClient::force_unlock)): its holders release and
    /// take it faster than the operator's compare-and-delete can catch one. Nothing was
    /// released; try again.
    #[error(
        "lock `{key}` changed hands {attempts} times while being force-released; nothing was released, try again"
    )]
    ChangedHands {
        /// The lock's key.
        key: String,
        /// How many holders were tried.
        attempts: u32,
    },

    /// The client configuration is invalid (URL, instance id, pool).
    #[error("invalid lock client configuration: {0}")]
    Config(String),

    /// Redis may evict keys that have a TTL (`maxmemory-policy` other than `noeviction` with a
    /// `maxmemory` limit), so a held lock could vanish under memory pressure, and
    /// [`EvictionCheck::Error`](crate::EvictionCheck::Error) was chosen. Not transient: it
    /// lasts until Redis is reconfigured (each reconnection checks again).
    #[error("redis may evict lock keys: {detail}")]
    Eviction {
        /// Which master, its policy and limit, and what to change.
        detail: String,
    },

    /// No default client was installed, but code asked for it.
    #[error(
        "no default lock client is installed: call `LockClient::install_default()` at startup, \
         or pass a client explicitly"
    )]
    NotConfigured,

    /// The key cannot be used as a lock key.
    #[error("invalid lock key {}: {reason}", shortened(key))]
    InvalidKey {
        /// The rejected key (in full; the message shows at most its first 64 characters).
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A lease, wait or minimum-hold duration is unusable.
    #[error("invalid lock options: {0}")]
    InvalidOptions(String),

    /// An operator's tool ([`LockClient::inspect`](crate::LockClient::inspect),
    /// [`force_unlock`](crate::LockClient::force_unlock),
    /// [`force_release`](crate::LockClient::force_release)) was pointed at a key that is not a
    /// lock, a semaphore or a read-write lock by the protocol's own markers: another
    /// application's data, a client's liveness key, or an auxiliary key of a lock. Nothing was
    /// read from it or changed, and the message never shows its value.
    #[error(
        "{} is not a lock, semaphore or read-write lock: it is {found}; nothing was read from it or changed",
        shortened(key)
    )]
    NotALock {
        /// The key (in full; the message shows at most its first 64 characters).
        key: String,
        /// What the key is instead, e.g. "a hash", "a string that is not an owner token".
        found: &'static str,
    },
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
    /// The holder gave the lock up on request, through [`CurrentLock::revoke`](crate::CurrentLock::revoke):
    /// a scheduler run replaced by a later slot of its job. The key was still this owner's,
    /// and the locked section's release frees it.
    Revoked,
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LossReason::Expired => "the lease expired before it could be renewed",
            LossReason::NotOwner => "the key no longer holds this owner's token",
            LossReason::Revoked => "the holder was asked to give it up",
        })
    }
}

impl LockError {
    /// A failed Redis command; credential problems become [`LockError::Auth`].
    pub(crate) fn redis(action: impl Into<String>, source: deadpool_redis::redis::RedisError) -> Self {
        let action = action.into();
        if let Some(hint) = auth_hint(&source) {
            return LockError::Auth { action, hint, source };
        }
        match tls_hint(&source) {
            Some(hint) => LockError::Tls { action, hint, source },
            None => LockError::Redis { action, source },
        }
    }

    /// Whether this error may go away by itself: Redis unreachable, a connection dropped, a
    /// command timed out, the server loading its data or failing over.
    pub fn is_transient(&self) -> bool {
        match self {
            LockError::Redis { source, .. } => is_transient(source),
            LockError::Auth { .. } | LockError::Tls { .. } => false,
            LockError::Pool { .. } | LockError::ReplicaAck { .. } => true,
            _ => false,
        }
    }

    /// Whether a command that failed with this error may still have run on the server (a
    /// timeout, or a connection lost after sending): its effect must then be cleaned up.
    pub(crate) fn outcome_unknown(&self) -> bool {
        match self {
            LockError::Redis { source, .. } => source.is_timeout() || is_connection_error(source),
            _ => false,
        }
    }

    /// Whether a command failed because its connection was broken (reset, closed), not
    /// because it timed out: a new connection may well work at once.
    pub(crate) fn connection_broken(&self) -> bool {
        match self {
            LockError::Redis { source, .. } => !source.is_timeout() && is_connection_error(source),
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

/// " (it frees in at most 1.5s)", or nothing when Redis reported no expiry.
fn frees_in(remaining: &Option<Duration>) -> String {
    match remaining {
        Some(d) => format!(" (it frees in at most {d:.1?})"),
        None => String::new(),
    }
}

/// A key as error messages show it: quoted, and cut after 64 characters so that a huge key
/// does not flood logs.
fn shortened(key: &str) -> String {
    const SHOWN: usize = 64;
    match key.char_indices().nth(SHOWN) {
        None => format!("{key:?}"),
        Some((end, _)) => format!("{:?}... ({} bytes)", &key[..end], key.len()),
    }
}

/// What to tell the user about a credential error, or `None` if `e` is not one.
fn auth_hint(e: &RedisError) -> Option<&'static str> {
    if e.code() == Some("NOAUTH") || e.to_string().contains("unauthenticated") {
        Some(
            "the server requires a password: put it in the URL, redis://:PASSWORD@host:port/ (or redis://USER:PASSWORD@... for an ACL user)",
        )
    } else if e.code() == Some("NOPERM") || e.to_string().contains("NOPERM") {
        Some(
            "the ACL user lacks a permission the lock client needs (the guide's \"TLS and an ACL user\" lists every permission)",
        )
    } else if is_auth_error(e) {
        Some("check the user and password in the Redis URL")
    } else {
        None
    }
}

/// What to tell the user about a TLS failure, or `None` if `e` is not one. rustls reports a
/// certificate it does not trust as `invalid peer certificate: ...` inside an I/O error.
fn tls_hint(e: &RedisError) -> Option<&'static str> {
    let text = format!("{e} {e:?}");
    if text.contains("invalid peer certificate") || text.contains("InvalidCertificate") {
        Some(
            "the server's certificate is not trusted: give its CA with `tls_root_ca`, or check the host name it was issued for",
        )
    } else if text.contains("received fatal alert")
        || text.contains("HandshakeFailure")
        || text.contains("peer is incompatible")
    {
        Some(
            "the TLS handshake failed: check that the server speaks TLS on this port and the versions and ciphers both sides allow",
        )
    } else {
        None
    }
}

/// Displays an error and each of its causes once, joined by `: ` (what `{:#}` shows for an
/// `anyhow::Error`): the way to log a [`LockError`] or a scheduler error, whose `Display` shows
/// only its own level.
///
/// ```
/// use lock_core::{ErrorChain, LockError};
/// let e = LockError::Config("bad URL".into());
/// assert_eq!(ErrorChain(&e).to_string(), "invalid lock client configuration: bad URL");
/// ```
#[derive(Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'a));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut last = self.0.to_string();
        f.write_str(&last)?;
        let mut cause = self.0.source();
        while let Some(e) = cause {
            // Some errors (redis-rs's among them) already print their own cause: once is enough.
            let text = e.to_string();
            if !last.contains(&text) {
                write!(f, ": {text}")?;
            }
            last = text;
            cause = e.source();
        }
        Ok(())
    }
}

impl std::fmt::Debug for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = LockError> = std::result::Result<T, E>;

/// Whether `e` means the connection it came from is unusable: the caller drops it and the
/// next command connects again.
pub(crate) fn is_connection_error(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
        // A failover behind a stable address leaves us on a replica: reconnect.
        || e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
}

/// Whether a command's error means it did not run here: a cluster redirection (MOVED, ASK).
pub(crate) fn is_redirect(e: &RedisError) -> bool {
    matches!(e.kind(), ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask))
}

/// Errors that may go away by themselves: connection trouble, or a server that is loading its
/// data or failing over (a cluster that is down, Sentinel naming no healthy master). An authentication failure is not one of them: retrying a wrong
/// password until a deadline only hides the real problem.
pub(crate) fn is_transient(e: &RedisError) -> bool {
    if is_auth_error(e) {
        return false;
    }
    is_connection_error(e)
        || e.is_timeout()
        // A redirection redis-rs could not follow within its retries: to a master that is down
        // (a failover: the other nodes point at it until its replica is promoted) or amid a
        // slot migration. The command did not run; once the slot has a master, it will.
        || is_redirect(e)
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ClusterDown
            )
            // No sentinel names a healthy master: during a failover the old one is marked
            // down until a replica is promoted. (A misspelt master name reads the same: it
            // then persists, and the error names the master looked for.)
            | ErrorKind::MasterNameNotFoundBySentinel
        )
}

/// A refused or missing password (`WRONGPASS`, `NOAUTH`, or a failed AUTH at connect).
pub(crate) fn is_auth_error(e: &RedisError) -> bool {
    e.kind() == ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"))
        || e.to_string().contains("WRONGPASS")
        // A script's command refused by the ACL comes back wrapped in a script error.
        || e.to_string().contains("NOPERM")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_short_and_readable() {
        let held = LockError::Held { key: "k".into(), remaining: Some(Duration::from_millis(28_140)) };
        assert_eq!(held.to_string(), "lock `k` is held by another owner (it frees in at most 28.1s)");
        let held = LockError::Held { key: "k".into(), remaining: None };
        assert_eq!(held.to_string(), "lock `k` is held by another owner");
        let huge =
            LockError::InvalidKey { key: "x".repeat(1 << 20), reason: "the key is longer than 1024 bytes" };
        let message = huge.to_string();
        assert!(message.len() < 200, "{message}");
        assert!(message.contains("1048576 bytes"), "{message}");
    }

    #[test]
    fn a_display_never_repeats_its_source() {
        let source =
            || RedisError::from(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused here"));
        for e in [
            LockError::redis("acquiring lock `k`", source()),
            LockError::Auth { action: "connecting".into(), hint: "check the password", source: source() },
            LockError::Tls { action: "connecting".into(), hint: "check the CA", source: source() },
        ] {
            let cause = std::error::Error::source(&e).expect("a cause").to_string();
            assert!(!e.to_string().contains(&cause), "{e} repeats {cause}");
            let chain = ErrorChain(&e).to_string();
            assert_eq!(chain.matches("refused here").count(), 1, "{chain}");
            assert!(chain.starts_with(&e.to_string()), "{chain}");
        }
    }

    #[test]
    fn a_redirection_left_unfollowed_is_transient_and_did_not_run() {
        // What a waiter got back during a cluster failover once redis-rs's retries ran out:
        // the slot's master was down and the other nodes still pointed at it.
        let moved = RedisError::from((
            ErrorKind::Server(ServerErrorKind::Moved),
            "An error was signalled by the server",
            "10669 127.0.0.1:44269".to_owned(),
        ));
        assert!(is_redirect(&moved), "{moved:?}");
        let e = LockError::redis("acquiring lock `k`", moved);
        assert!(e.is_transient(), "{e:?}");
        assert!(!e.outcome_unknown(), "a redirected command did not run: {e:?}");
    }

    #[test]
    fn untrusted_certificates_are_not_transient() {
        let e = LockError::redis(
            "connecting",
            RedisError::from(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "invalid peer certificate: UnknownIssuer",
            )),
        );
        assert!(matches!(e, LockError::Tls { .. }), "{e:?}");
        assert!(!e.is_transient());
        assert!(e.to_string().contains("tls_root_ca"), "{e}");
    }
}
