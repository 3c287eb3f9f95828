//! What a hold is: a lock, a semaphore's permit, or a read-write lock's read or write hold.
//! Everything above (the guard, the watchdog, waiting, the releaser, clean-up) works on any of
//! them; the operations beside this module (`acquire`, `release`, `renewal`) send each kind's
//! script.

use crate::schema;

/// The kind of a hold, with what its scripts need beyond the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// A lock: the key holds the owner token.
    Lock,
    /// A permit of the semaphore named by the key, which has this many.
    Permit { permits: u32 },
    /// A read hold of the read-write lock named by the key.
    Read,
    /// A write hold of the read-write lock named by the key (the key holds the token).
    Write,
}

impl Hold {
    /// The `kind` label of metrics and spans.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Hold::Lock => "lock",
            Hold::Permit { .. } => "semaphore",
            Hold::Read => "read",
            Hold::Write => "write",
        }
    }

    /// The kind letter of a holdings record's value (see [`schema::holding_value`]).
    pub(crate) fn record_kind(self) -> char {
        match self {
            Hold::Lock => 'l',
            Hold::Permit { .. } => 'p',
            Hold::Read => 'r',
            Hold::Write => 'w',
        }
    }

    /// Whether the key's value is the holder's token (a lock, a writer), as opposed to a member
    /// of a zset (a permit, a reader).
    pub(crate) fn in_value(self) -> bool {
        matches!(self, Hold::Lock | Hold::Write)
    }

    /// The token's entry in the queue of waiters of `key`.
    pub(crate) fn queue_entry(self, token: &str, handoff_ms: u64) -> String {
        match self {
            Hold::Read => schema::reader_queue_entry(token, handoff_ms),
            _ => schema::queue_entry(token, handoff_ms),
        }
    }
}
