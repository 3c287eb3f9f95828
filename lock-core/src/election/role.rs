//! [`Role`] and [`Leader`]: what a member of an election knows about who leads.

use std::time::SystemTime;

/// The leader of an election as a member (or an operator's tool) sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's instance id (its client's [`LockClient::instance_id`](crate::LockClient::instance_id)).
    pub instance: String,
    /// The leader's owner: `<instance>:<client id>`, which names its client's liveness key.
    pub owner: String,
    /// The leader's term, once the leader has announced it (`None` for a few milliseconds after
    /// an election, while the new leader writes its record).
    pub term: Option<u64>,
    /// When the leader was elected, by its own clock, once announced.
    pub since: Option<SystemTime>,
}

/// A member's role in an election, published on a `tokio::sync::watch` channel by
/// [`Candidacy::watch`](crate::Candidacy::watch).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Role {
    /// This member leads. `term` strictly increases with every new leader of the election (it
    /// is the lock's fence, `max(previous + 1, server time in µs)`): pass it to a store that
    /// rejects writes carrying a lower term than it has seen.
    Leader {
        /// This leadership's term.
        term: u64,
        /// When this member was elected, by its own clock.
        since: SystemTime,
    },
    /// Another member leads (`Some`), or nobody does as far as this member last looked
    /// (`None`). A candidate waits in the election's queue meanwhile.
    Follower {
        /// The current leader, if any.
        leader: Option<Leader>,
    },
    /// The member left the election ([`Candidacy::leave`](crate::Candidacy::leave), or the
    /// candidacy was dropped).
    Left,
}

impl Role {
    /// The term, when this member leads.
    pub fn term(&self) -> Option<u64> {
        match self {
            Role::Leader { term, .. } => Some(*term),
            _ => None,
        }
    }

    /// Whether this member leads.
    pub fn is_leader(&self) -> bool {
        matches!(self, Role::Leader { .. })
    }

    /// The leader this member follows, if it follows a known leader.
    pub fn leader(&self) -> Option<&Leader> {
        match self {
            Role::Follower { leader } => leader.as_ref(),
            _ => None,
        }
    }
}
