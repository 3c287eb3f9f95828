//! Replica acknowledgement (opt-in): `WAIT n timeout` after an acquisition, so that a
//! failover right after it is less likely to lose the lock.
//!
//! It narrows the failover window, it does not close it: Redis replication is asynchronous,
//! `WAIT` only reports how many replicas had received the write when it returned, and a
//! failover may still promote a replica that had not (Sentinel and Cluster pick by replication
//! offset, not by who acknowledged). It is not consensus. For correctness across a failover,
//! use fencing tokens and have the store reject stale writers.
//!
//! `WAIT` counts the writes of the connection it is sent on, so it goes on the connection
//! that wrote the lock, which every lock command of the client shares; Redis runs nothing else
//! from that connection until `WAIT` returns. While replicas lag, each acquisition therefore
//! holds up this client's other lock commands for up to the timeout: keep it short. Renewals
//! are not followed by `WAIT` for that reason (they would stall every few seconds).

use std::time::Duration;

/// What an acquisition does when fewer replicas than wanted acknowledged its write in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AckShortfall {
    /// Release the lock and fail with [`LockError::ReplicaAck`](crate::LockError::ReplicaAck)
    /// (not a contention error; transient, so callers may retry). The default.
    #[default]
    Error,
    /// Keep the lock and log a warning (`tracing`, target `lock_core`).
    Warn,
}

/// Replica acknowledgement settings; see [`LockClientBuilder::replica_ack`](crate::LockClientBuilder::replica_ack).
///
/// ```
/// use std::time::Duration;
/// use lock_core::{AckShortfall, ReplicaAck};
///
/// // One replica must have the lock within 100 ms, else the acquisition fails.
/// let ack = ReplicaAck::new(1, Duration::from_millis(100));
/// // Or keep the lock and log when the replica is late, and wait after releases too.
/// let lenient = ack.on_shortfall(AckShortfall::Warn).after_release(true);
/// assert_eq!(lenient.replicas, 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicaAck {
    /// Replicas that must acknowledge (`WAIT`'s first argument); at least 1.
    pub replicas: u32,
    /// How long to wait for them (`WAIT`'s timeout); must be shorter than the client's
    /// command timeout. While replicas lag, the client's other lock commands wait behind each
    /// `WAIT` for up to this long: tens to a few hundred milliseconds.
    pub timeout: Duration,
    /// What a shortfall does to an acquisition.
    pub on_shortfall: AckShortfall,
    /// Also wait after each release (a shortfall there is only logged: the lock is already
    /// released).
    pub after_release: bool,
}

impl ReplicaAck {
    /// `replicas` acknowledgements within `timeout` after each acquisition; a shortfall fails
    /// the acquisition ([`AckShortfall::Error`]).
    pub fn new(replicas: u32, timeout: Duration) -> Self {
        ReplicaAck { replicas, timeout, on_shortfall: AckShortfall::Error, after_release: false }
    }

    /// What a shortfall does (default [`AckShortfall::Error`]).
    pub fn on_shortfall(mut self, on_shortfall: AckShortfall) -> Self {
        self.on_shortfall = on_shortfall;
        self
    }

    /// Whether to wait after releases too (default no).
    pub fn after_release(mut self, after_release: bool) -> Self {
        self.after_release = after_release;
        self
    }
}
