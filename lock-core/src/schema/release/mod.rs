//! Giving a hold back, or a token up: the holder's one-key release when nobody queued
//! ([`ReleaseOwn`]: `release_own.lua`), and the full release that hands over to the oldest live
//! waiter ([`Release`]: `release.lua`, `abandon.lua`, `sem_release.lua`, `rw_release.lua`,
//! beside this file), with what their replies say ([`Released`]).

use deadpool_redis::redis::Value;

use crate::schema;
use crate::schema::eval::Eval;
use crate::schema::hold::Hold;
use crate::schema::scripts::{ABANDON, RELEASE, RELEASE_OWN, RW_RELEASE, SEM_RELEASE};

/// The holder's own release of a lock with no minimum hold left, on the one key: it replies
/// -1, changing nothing, when callers queued (the key's value carries the mark); [`Release`]
/// is needed then.
pub(crate) struct ReleaseOwn<'a> {
    pub(crate) key: &'a str,
    pub(crate) token: &'a str,
}

impl<'a> ReleaseOwn<'a> {
    /// The one-key release of `token`'s hold on `key`, where it can replace [`Release`]: a lock
    /// (not a permit or a read-write hold) with no minimum hold left.
    pub(crate) fn of(hold: Hold, key: &'a str, token: &'a str, keep_ms: u64) -> Option<Self> {
        Self::applies(hold, keep_ms).then_some(ReleaseOwn { key, token })
    }

    /// Whether the one-key release can replace [`Release`] for `hold` with `keep_ms` of minimum
    /// hold left.
    pub(crate) fn applies(hold: Hold, keep_ms: u64) -> bool {
        hold == Hold::Lock && keep_ms == 0
    }

    pub(crate) fn eval(&self) -> Eval {
        let mut eval = Eval::new(&RELEASE_OWN, &[self.key]);
        eval.arg(self.token);
        eval
    }
}

/// Giving `token`'s hold on `key` back, handing what it frees to the oldest live waiter.
pub(crate) struct Release<'a> {
    pub(crate) hold: Hold,
    pub(crate) key: &'a str,
    pub(crate) token: &'a str,
    /// A minimum hold left: the hold is kept taken that long instead.
    pub(crate) keep_ms: u64,
    /// The holder's own release (its client is alive), not a take-over or a force-release.
    pub(crate) for_holder: bool,
    /// Also leave the queue of waiters with this entry: a token given up rather than released.
    pub(crate) leave: Option<&'a str>,
    pub(crate) publish: &'static str,
}

impl Release<'_> {
    /// The script call (see each script's header for KEYS and ARGV).
    pub(crate) fn eval(&self) -> Eval {
        let key = self.key;
        let (queue, tickets) = (schema::queue_key(key), schema::tickets_key(key));
        let channels = schema::release_channel_prefix(key);
        let holder = if self.for_holder { "0" } else { "1" };
        match self.hold {
            Hold::Lock => match self.leave {
                Some(entry) => {
                    let mut eval = Eval::new(&ABANDON, &[key, &queue, &tickets]);
                    eval.arg(self.token).arg(entry).arg(self.publish).arg(channels);
                    eval
                }
                None => {
                    let mut eval = Eval::new(&RELEASE, &[key, &queue, &tickets]);
                    eval.arg(self.token).arg(channels);
                    // The rest only when not the defaults: each argument measurably slows
                    // EVALSHA, and this is the uncontended release.
                    if self.keep_ms > 0 || self.publish != "PUBLISH" || !self.for_holder {
                        eval.arg(self.keep_ms).arg(self.publish).arg(holder);
                    }
                    eval
                }
            },
            Hold::Permit { .. } => {
                let mut eval = Eval::new(&SEM_RELEASE, &[key, &queue, &tickets]);
                eval.arg(self.token)
                    .arg(self.keep_ms)
                    .arg(self.publish)
                    .arg(channels)
                    .arg(holder)
                    .arg(self.leave.unwrap_or(""));
                eval
            }
            Hold::Read | Hold::Write => {
                // Another client's token (a take-over, a force-release) may hold either mode.
                let mode = match self.hold {
                    _ if !self.for_holder => "?",
                    Hold::Read => "r",
                    _ => "w",
                };
                let mut eval = Eval::new(&RW_RELEASE, &[key, &schema::readers_key(key), &queue, &tickets]);
                eval.arg(self.token)
                    .arg(mode)
                    .arg(self.keep_ms)
                    .arg(self.publish)
                    .arg(channels)
                    .arg(holder)
                    .arg(self.leave.unwrap_or(""));
                eval
            }
        }
    }
}

/// A release script's reply, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Released {
    /// The key held the token.
    pub(crate) owned: bool,
    /// The lock went to a waiter (release.lua's 2): callers queue on this key.
    pub(crate) handed_over: bool,
    /// Hand-offs noticed on the way to have lapsed untaken.
    pub(crate) lapsed: u64,
}

impl Released {
    /// A release script reply: `1` (owned), `2` (owned, handed over), `0`, `-1` (the one-key
    /// release deferring to the full one: not a release), or `{that, lapsed}`.
    pub(crate) fn decode(reply: &Value) -> Released {
        let (owned, lapsed) = match reply {
            Value::Int(owned) => (*owned, 0),
            Value::Array(items) => {
                let owned = match items.first() {
                    Some(Value::Int(n)) => *n,
                    _ => 0,
                };
                let lapsed = match items.get(1) {
                    Some(Value::Int(n)) => u64::try_from(*n).unwrap_or(0),
                    _ => 0,
                };
                (owned, lapsed)
            }
            _ => (0, 0),
        };
        Released { owned: owned == 1 || owned == 2, handed_over: owned == 2, lapsed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_and_abandon_replies() {
        let r = |owned, handed_over, lapsed| Released { owned, handed_over, lapsed };
        assert_eq!(Released::decode(&Value::Int(1)), r(true, false, 0));
        assert_eq!(Released::decode(&Value::Int(2)), r(true, true, 0));
        assert_eq!(Released::decode(&Value::Int(0)), r(false, false, 0));
        assert_eq!(
            Released::decode(&Value::Int(-1)),
            r(false, false, 0),
            "release_own's defer is not a release"
        );
        assert_eq!(Released::decode(&Value::Array(vec![Value::Int(1), Value::Int(3)])), r(true, false, 3));
        assert_eq!(Released::decode(&Value::Array(vec![Value::Int(2), Value::Int(1)])), r(true, true, 1));
        assert_eq!(Released::decode(&Value::Nil), r(false, false, 0));
        assert_eq!(Released::decode(&Value::Array(vec![Value::Int(0), Value::Int(0)])), r(false, false, 0));
    }
}
