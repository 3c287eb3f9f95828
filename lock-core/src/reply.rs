//! What the lock scripts' replies say, decoded by pure functions (see each script's header in
//! `schema/lua/` for the reply's shape).

use std::time::Duration;

use deadpool_redis::redis::Value;
use tokio::time::Instant;

use crate::schema;

/// What one acquiring round trip said.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Taken, by the command sent at `sent_at`.
    Acquired { fence: Option<u64>, sent_at: Instant },
    /// Held by `holders` (a lock's one holder, a semaphore's or read-write lock's several;
    /// values that are not text are left out: never one of this crate's tokens, never taken
    /// over), for `remaining` if Redis said.
    Held { remaining: Option<Duration>, holders: Vec<String> },
    /// The scheduler tick was already claimed (`last`); `ours`: the key holds the caller's
    /// token anyway (handed over), which must be passed on.
    TickDone { last: i64, ours: bool },
}

/// An acquire script reply, and the number of hand-offs it noticed to have lapsed untaken.
pub(crate) fn acquire(reply: &[Value], fencing: bool, sent_at: Instant) -> (Reply, u64) {
    let int = |i: usize| match reply.get(i) {
        Some(Value::Int(n)) => Some(*n),
        _ => None,
    };
    let count = |i: usize| int(i).and_then(|n| u64::try_from(n).ok()).unwrap_or(0);
    match int(0) {
        Some(1) => (Reply::Acquired { fence: fencing.then(|| count(1)), sent_at }, count(2)),
        Some(2) => (Reply::TickDone { last: int(1).unwrap_or(0), ours: int(2) == Some(1) }, 0),
        _ => {
            let holders = reply.get(2).and_then(text).into_iter().collect();
            let remaining = int(1).and_then(|n| u64::try_from(n).ok()).map(Duration::from_millis);
            (Reply::Held { remaining, holders }, count(3))
        }
    }
}

/// The reply of the uncontended `SET key token NX PX lease GET` sent at `sent_at`: the value it
/// replaced, if any.
pub(crate) fn set_nx(previous: Option<&str>, token: &str, sent_at: Instant) -> Reply {
    match previous.map(schema::unmarked) {
        // Our own token can only come from an earlier send of it, which this path never makes;
        // the expiry this send set is then the one in force either way.
        None => Reply::Acquired { fence: None, sent_at },
        Some(holder) if holder == token => Reply::Acquired { fence: None, sent_at },
        Some(holder) => Reply::Held { remaining: None, holders: vec![holder.to_owned()] },
    }
}

/// A semaphore's or read-write lock's acquire script reply (`sem_acquire.lua`,
/// `rw_acquire.lua`), and the hand-offs it noticed to have lapsed; `Err(declared)` when the
/// semaphore was declared with another number of permits.
pub(crate) fn hold_acquire(reply: &[Value], fencing: bool, sent_at: Instant) -> Result<(Reply, u64), i64> {
    let int = |i: usize| match reply.get(i) {
        Some(Value::Int(n)) => Some(*n),
        _ => None,
    };
    let count = |i: usize| int(i).and_then(|n| u64::try_from(n).ok()).unwrap_or(0);
    match int(0) {
        Some(1) => Ok((Reply::Acquired { fence: fencing.then(|| count(1)), sent_at }, count(2))),
        Some(-1) => Err(int(1).unwrap_or(0)),
        _ => {
            let holders = reply.iter().skip(3).filter_map(text).collect();
            let remaining = int(1).and_then(|n| u64::try_from(n).ok()).map(Duration::from_millis);
            Ok((Reply::Held { remaining, holders }, count(2)))
        }
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        _ => None,
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

/// A release script reply: `1` (owned), `2` (owned, handed over), `0`, or `{that, lapsed}`.
pub(crate) fn release(reply: &Value) -> Released {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn semaphore_and_rw_lock_replies() {
        let at = Instant::now();
        let acquired = [Value::Int(1), Value::Int(7), Value::Int(0)];
        assert_eq!(
            hold_acquire(&acquired, true, at),
            Ok((Reply::Acquired { fence: Some(7), sent_at: at }, 0))
        );
        let full = [Value::Int(0), Value::Int(250), Value::Int(1), text("a"), text("b")];
        let expected = Reply::Held {
            remaining: Some(Duration::from_millis(250)),
            holders: vec!["a".into(), "b".into()],
        };
        assert_eq!(hold_acquire(&full, false, at), Ok((expected, 1)));
        assert_eq!(hold_acquire(&[Value::Int(-1), Value::Int(3)], false, at), Err(3));
    }

    #[test]
    fn acquire_replies() {
        let at = Instant::now();
        let acquired = [Value::Int(1), Value::Int(1_700_000_000_000_000), Value::Int(2)];
        assert_eq!(
            acquire(&acquired, true, at),
            (Reply::Acquired { fence: Some(1_700_000_000_000_000), sent_at: at }, 2)
        );
        assert_eq!(acquire(&acquired, false, at), (Reply::Acquired { fence: None, sent_at: at }, 2));
        let held = [Value::Int(0), Value::Int(1500), text("pod:0123456789ab:u"), Value::Int(1)];
        let expected = Reply::Held {
            remaining: Some(Duration::from_millis(1500)),
            holders: vec!["pod:0123456789ab:u".into()],
        };
        assert_eq!(acquire(&held, false, at), (expected, 1));
        // PTTL -1 (no expiry) and a holder that is not text (a value this crate did not write).
        let odd = [Value::Int(0), Value::Int(-1), Value::BulkString(vec![0xff, 0xfe]), Value::Int(0)];
        assert_eq!(acquire(&odd, false, at), (Reply::Held { remaining: None, holders: vec![] }, 0));
        let done = [Value::Int(2), Value::Int(60_000), Value::Int(1)];
        assert_eq!(acquire(&done, false, at), (Reply::TickDone { last: 60_000, ours: true }, 0));
        assert_eq!(
            acquire(&[], false, at).0,
            Reply::Held { remaining: None, holders: vec![] },
            "garbage is never 'acquired'"
        );
    }

    #[test]
    fn set_nx_replies() {
        let at = Instant::now();
        assert_eq!(set_nx(None, "t", at), Reply::Acquired { fence: None, sent_at: at });
        let marked = |t: &str| format!("{t}{}", schema::QUEUED_MARK);
        assert_eq!(set_nx(Some(&marked("t")), "t", at), Reply::Acquired { fence: None, sent_at: at });
        assert_eq!(
            set_nx(Some(&marked("u")), "t", at),
            Reply::Held { remaining: None, holders: vec!["u".into()] }
        );
    }

    #[test]
    fn release_and_abandon_replies() {
        let r = |owned, handed_over, lapsed| Released { owned, handed_over, lapsed };
        assert_eq!(release(&Value::Int(1)), r(true, false, 0));
        assert_eq!(release(&Value::Int(2)), r(true, true, 0));
        assert_eq!(release(&Value::Int(0)), r(false, false, 0));
        assert_eq!(release(&Value::Int(-1)), r(false, false, 0), "release_own's defer is not a release");
        assert_eq!(release(&Value::Array(vec![Value::Int(1), Value::Int(3)])), r(true, false, 3));
        assert_eq!(release(&Value::Array(vec![Value::Int(2), Value::Int(1)])), r(true, true, 1));
        assert_eq!(release(&Value::Nil), r(false, false, 0));
        assert_eq!(release(&Value::Array(vec![Value::Int(0), Value::Int(0)])), r(false, false, 0));
    }
}
