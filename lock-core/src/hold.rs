//! What a hold is: a lock, a semaphore's permit, or a read-write lock's read or write hold, and
//! which script and keys take, renew and give back each (see `schema/lua/`). Everything above
//! (the guard, the watchdog, waiting, the releaser, clean-up) works on any of them through this.

use std::time::Duration;

use crate::error::Result;
use crate::options::millis;
use crate::schema::scripts::{
    ABANDON, ACQUIRE, EXTEND, Eval, MEMBER_RENEW, RELEASE, RELEASE_OWN, RW_ACQUIRE, RW_RELEASE, SEM_ACQUIRE,
    SEM_RELEASE,
};
use crate::schema::{self, TICK_TTL};

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

/// What an acquisition script needs besides the key and the hold.
pub(crate) struct Try<'a> {
    pub(crate) token: &'a str,
    pub(crate) lease: Duration,
    pub(crate) fencing: bool,
    pub(crate) tick: Option<i64>,
    /// The waiter's ticket, if it waits.
    pub(crate) ticket: Option<Duration>,
    /// The caller's hand-off time.
    pub(crate) handoff: Duration,
    pub(crate) publish: &'static str,
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

    /// Whether the key's value is the holder's token (a lock, a writer), as opposed to a member
    /// of a zset (a permit, a reader).
    fn in_value(self) -> bool {
        matches!(self, Hold::Lock | Hold::Write)
    }

    /// The token's entry in the queue of waiters of `key`.
    pub(crate) fn queue_entry(self, token: &str, handoff_ms: u64) -> String {
        match self {
            Hold::Read => schema::reader_queue_entry(token, handoff_ms),
            _ => schema::queue_entry(token, handoff_ms),
        }
    }

    /// The acquisition script for `key` (see each script's header for KEYS and ARGV).
    pub(crate) fn acquire(self, key: &str, t: &Try<'_>) -> Result<Eval> {
        let (queue, tickets) = (schema::queue_key(key), schema::tickets_key(key));
        let lease = millis(t.lease, "lease")?;
        let ticket = t.ticket.map_or(Ok(0), |d| millis(d, "waiter ticket"))?;
        let handoff = millis(t.handoff, "hand-off")?;
        let fencing = if t.fencing { "1" } else { "0" };
        let channels = schema::release_channel_prefix(key);
        let mut eval = match self {
            Hold::Lock => {
                let mut eval = match (t.fencing, t.tick.is_some()) {
                    // The fence and tick keys only when the script touches them.
                    (_, true) => Eval::new(
                        &ACQUIRE,
                        &[
                            key,
                            &queue,
                            &tickets,
                            &schema::fence_key(key),
                            &schema::tick_key(key),
                            &schema::tick_claimant_key(key),
                        ],
                    ),
                    (true, false) => Eval::new(&ACQUIRE, &[key, &queue, &tickets, &schema::fence_key(key)]),
                    (false, false) => Eval::new(&ACQUIRE, &[key, &queue, &tickets]),
                };
                eval.arg(t.token)
                    .arg(lease)
                    .arg(fencing)
                    .arg(t.tick.map(|tick| tick.to_string()).unwrap_or_default())
                    .arg(ticket)
                    .arg(handoff)
                    .arg(t.publish)
                    .arg(channels)
                    .arg(millis(TICK_TTL, "tick TTL")?);
                return Ok(eval);
            }
            Hold::Permit { permits } => {
                let mut eval = if t.fencing {
                    Eval::new(&SEM_ACQUIRE, &[key, &queue, &tickets, &schema::fence_key(key)])
                } else {
                    Eval::new(&SEM_ACQUIRE, &[key, &queue, &tickets])
                };
                eval.arg(t.token).arg(lease).arg(permits);
                eval
            }
            Hold::Read | Hold::Write => {
                let readers = schema::readers_key(key);
                let mut eval = if t.fencing {
                    Eval::new(&RW_ACQUIRE, &[key, &readers, &queue, &tickets, &schema::fence_key(key)])
                } else {
                    Eval::new(&RW_ACQUIRE, &[key, &readers, &queue, &tickets])
                };
                eval.arg(t.token).arg(lease).arg(if self == Hold::Read { "r" } else { "w" });
                eval
            }
        };
        eval.arg(fencing).arg(ticket).arg(handoff).arg(t.publish).arg(channels);
        Ok(eval)
    }

    /// The renewal of `token`'s hold on `key` to `lease` (EXTEND, or MEMBER_RENEW for a hold
    /// kept in a zset): 1 when renewed, 0 when the hold is gone.
    pub(crate) fn renewal(self, key: &str, token: &str, lease_ms: u64) -> Eval {
        let mut eval = Eval::new(self.renewal_script(), &[self.renewal_key(key)]);
        eval.arg(token).arg(lease_ms);
        eval
    }

    /// The script of [`renewal`](Self::renewal), for a pipeline that sends it by hash.
    pub(crate) fn renewal_script(self) -> &'static deadpool_redis::redis::Script {
        if self.in_value() { &EXTEND } else { &MEMBER_RENEW }
    }

    /// The one key a renewal of this hold on `key` touches (in `key`'s slot).
    pub(crate) fn renewal_key(self, key: &str) -> std::borrow::Cow<'_, str> {
        match self {
            Hold::Read => std::borrow::Cow::Owned(schema::readers_key(key)),
            _ => std::borrow::Cow::Borrowed(key),
        }
    }

    /// Whether the one-key release can replace [`release`](Self::release) (see
    /// [`release_own`](Self::release_own)).
    pub(crate) fn has_own_release(self, keep_ms: u64) -> bool {
        self == Hold::Lock && keep_ms == 0
    }

    /// The one-key release (`release_own.lua`) where it can replace [`release`](Self::release):
    /// the holder's own lock release with no minimum hold left. It replies -1, changing
    /// nothing, when callers queued; the full release is then needed.
    pub(crate) fn release_own(self, key: &str, token: &str, keep_ms: u64) -> Option<Eval> {
        if !self.has_own_release(keep_ms) {
            return None;
        }
        let mut eval = Eval::new(&RELEASE_OWN, &[key]);
        eval.arg(token);
        Some(eval)
    }

    /// Giving `token`'s hold on `key` back. `keep_ms`: a minimum hold left (keep it taken that
    /// long instead); `for_holder`: the holder's own release (its client is alive), not a
    /// take-over or a force-release; `leave`: also leave the queue of waiters with this entry
    /// (a token given up rather than released). Replies `1`/`{1, lapsed}` or `{held, lapsed}`
    /// (see `reply::release`).
    pub(crate) fn release(
        self,
        key: &str,
        token: &str,
        keep_ms: u64,
        for_holder: bool,
        leave: Option<&str>,
        publish: &'static str,
    ) -> Eval {
        let (queue, tickets) = (schema::queue_key(key), schema::tickets_key(key));
        let channels = schema::release_channel_prefix(key);
        let holder = if for_holder { "0" } else { "1" };
        match self {
            Hold::Lock => match leave {
                Some(entry) => {
                    let mut eval = Eval::new(&ABANDON, &[key, &queue, &tickets]);
                    eval.arg(token).arg(entry).arg(publish).arg(channels);
                    eval
                }
                None => {
                    let mut eval = Eval::new(&RELEASE, &[key, &queue, &tickets]);
                    eval.arg(token).arg(channels);
                    // The rest only when not the defaults: each argument measurably slows
                    // EVALSHA, and this is the uncontended release.
                    if keep_ms > 0 || publish != "PUBLISH" || !for_holder {
                        eval.arg(keep_ms).arg(publish).arg(holder);
                    }
                    eval
                }
            },
            Hold::Permit { .. } => {
                let mut eval = Eval::new(&SEM_RELEASE, &[key, &queue, &tickets]);
                eval.arg(token).arg(keep_ms).arg(publish).arg(channels).arg(holder).arg(leave.unwrap_or(""));
                eval
            }
            Hold::Read | Hold::Write => {
                // Another client's token (a take-over, a force-release) may hold either mode.
                let mode = match self {
                    _ if !for_holder => "?",
                    Hold::Read => "r",
                    _ => "w",
                };
                let mut eval = Eval::new(&RW_RELEASE, &[key, &schema::readers_key(key), &queue, &tickets]);
                eval.arg(token)
                    .arg(mode)
                    .arg(keep_ms)
                    .arg(publish)
                    .arg(channels)
                    .arg(holder)
                    .arg(leave.unwrap_or(""));
                eval
            }
        }
    }
}
