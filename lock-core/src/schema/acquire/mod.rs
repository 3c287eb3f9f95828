//! Taking a hold: the scripted acquisition ([`Acquire`]: `acquire.lua`, `sem_acquire.lua`,
//! `rw_acquire.lua`, beside this file) and the plain one of an uncontended lock
//! ([`PlainAcquire`]: `SET key token NX PX lease GET`, no script): what each sends, and what its
//! reply says ([`Reply`]).

use std::time::Duration;

use deadpool_redis::redis::{self, Value};
use tokio::time::Instant;

use crate::error::Result;
use crate::options::millis;
use crate::schema::eval::Eval;
use crate::schema::hold::Hold;
use crate::schema::scripts::{ACQUIRE, RW_ACQUIRE, SEM_ACQUIRE};
use crate::schema::{self, TICK_TTL};

/// One scripted try to take `hold` on `key` with `token`.
pub(crate) struct Acquire<'a> {
    pub(crate) hold: Hold,
    pub(crate) key: &'a str,
    pub(crate) token: &'a str,
    pub(crate) lease: Duration,
    pub(crate) fencing: bool,
    /// A scheduler tick to claim with the lock.
    pub(crate) tick: Option<i64>,
    /// The waiter's ticket, if it waits.
    pub(crate) ticket: Option<Duration>,
    /// The caller's hand-off time.
    pub(crate) handoff: Duration,
    pub(crate) publish: &'static str,
}

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

impl Acquire<'_> {
    /// The script call (see each script's header for KEYS and ARGV).
    pub(crate) fn eval(&self) -> Result<Eval> {
        let key = self.key;
        let (queue, tickets) = (schema::queue_key(key), schema::tickets_key(key));
        let lease = millis(self.lease, "lease")?;
        let ticket = self.ticket.map_or(Ok(0), |d| millis(d, "waiter ticket"))?;
        let handoff = millis(self.handoff, "hand-off")?;
        let fencing = if self.fencing { "1" } else { "0" };
        let channels = schema::release_channel_prefix(key);
        let mut eval = match self.hold {
            Hold::Lock => {
                let mut eval = match (self.fencing, self.tick.is_some()) {
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
                eval.arg(self.token)
                    .arg(lease)
                    .arg(fencing)
                    .arg(self.tick.map(|tick| tick.to_string()).unwrap_or_default())
                    .arg(ticket)
                    .arg(handoff)
                    .arg(self.publish)
                    .arg(channels)
                    .arg(millis(TICK_TTL, "tick TTL")?);
                return Ok(eval);
            }
            Hold::Permit { permits } => {
                let mut eval = if self.fencing {
                    Eval::new(&SEM_ACQUIRE, &[key, &queue, &tickets, &schema::fence_key(key)])
                } else {
                    Eval::new(&SEM_ACQUIRE, &[key, &queue, &tickets])
                };
                eval.arg(self.token).arg(lease).arg(permits);
                eval
            }
            Hold::Read | Hold::Write => {
                let readers = schema::readers_key(key);
                let mut eval = if self.fencing {
                    Eval::new(&RW_ACQUIRE, &[key, &readers, &queue, &tickets, &schema::fence_key(key)])
                } else {
                    Eval::new(&RW_ACQUIRE, &[key, &readers, &queue, &tickets])
                };
                eval.arg(self.token).arg(lease).arg(if self.hold == Hold::Read { "r" } else { "w" });
                eval
            }
        };
        eval.arg(fencing).arg(ticket).arg(handoff).arg(self.publish).arg(channels);
        Ok(eval)
    }

    /// The reply of a call sent at `sent_at`, and the number of hand-offs it noticed to have
    /// lapsed untaken; `Err(declared)` when a semaphore is in use with another number of
    /// permits (nothing was changed).
    pub(crate) fn decode(&self, values: &[Value], sent_at: Instant) -> Result<(Reply, u64), i64> {
        match self.hold {
            Hold::Lock => Ok(lock_reply(values, self.fencing, sent_at)),
            Hold::Permit { .. } => hold_reply(values, self.fencing, sent_at),
            Hold::Read | Hold::Write => Ok(hold_reply(values, self.fencing, sent_at)
                .unwrap_or((Reply::Held { remaining: None, holders: Vec::new() }, 0))),
        }
    }
}

/// The uncontended acquisition of a lock without fence or tick: `SET key token NX PX lease
/// GET`, no script.
pub(crate) struct PlainAcquire<'a> {
    pub(crate) key: &'a str,
    pub(crate) token: &'a str,
    pub(crate) lease: Duration,
}

impl PlainAcquire<'_> {
    /// The command.
    pub(crate) fn cmd(&self) -> Result<redis::Cmd> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.key).arg(self.token).arg("NX").arg("PX").arg(millis(self.lease, "lease")?).arg("GET");
        Ok(cmd)
    }

    /// The reply of the command sent at `sent_at`: the value it replaced, if any.
    pub(crate) fn decode(&self, previous: Option<&str>, sent_at: Instant) -> Reply {
        match previous.map(schema::unmarked) {
            // Our own token can only come from an earlier send of it, which this path never
            // makes; the expiry this send set is then the one in force either way.
            None => Reply::Acquired { fence: None, sent_at },
            Some(holder) if holder == self.token => Reply::Acquired { fence: None, sent_at },
            Some(holder) => Reply::Held { remaining: None, holders: vec![holder.to_owned()] },
        }
    }
}

/// `acquire.lua`'s reply: `{1, fence, lapsed}`, `{0, pttl, holder, lapsed}` or
/// `{2, last tick, ours}`.
fn lock_reply(reply: &[Value], fencing: bool, sent_at: Instant) -> (Reply, u64) {
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

/// `sem_acquire.lua`'s or `rw_acquire.lua`'s reply: `{1, fence, lapsed}`,
/// `{0, ms, lapsed, holder...}` or `{-1, declared}`.
fn hold_reply(reply: &[Value], fencing: bool, sent_at: Instant) -> Result<(Reply, u64), i64> {
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
        assert_eq!(hold_reply(&acquired, true, at), Ok((Reply::Acquired { fence: Some(7), sent_at: at }, 0)));
        let full = [Value::Int(0), Value::Int(250), Value::Int(1), text("a"), text("b")];
        let expected = Reply::Held {
            remaining: Some(Duration::from_millis(250)),
            holders: vec!["a".into(), "b".into()],
        };
        assert_eq!(hold_reply(&full, false, at), Ok((expected, 1)));
        assert_eq!(hold_reply(&[Value::Int(-1), Value::Int(3)], false, at), Err(3));
    }

    #[test]
    fn acquire_replies() {
        let at = Instant::now();
        let acquired = [Value::Int(1), Value::Int(1_700_000_000_000_000), Value::Int(2)];
        assert_eq!(
            lock_reply(&acquired, true, at),
            (Reply::Acquired { fence: Some(1_700_000_000_000_000), sent_at: at }, 2)
        );
        assert_eq!(lock_reply(&acquired, false, at), (Reply::Acquired { fence: None, sent_at: at }, 2));
        let held = [Value::Int(0), Value::Int(1500), text("pod:0123456789ab:u"), Value::Int(1)];
        let expected = Reply::Held {
            remaining: Some(Duration::from_millis(1500)),
            holders: vec!["pod:0123456789ab:u".into()],
        };
        assert_eq!(lock_reply(&held, false, at), (expected, 1));
        // PTTL -1 (no expiry) and a holder that is not text (a value this crate did not write).
        let odd = [Value::Int(0), Value::Int(-1), Value::BulkString(vec![0xff, 0xfe]), Value::Int(0)];
        assert_eq!(lock_reply(&odd, false, at), (Reply::Held { remaining: None, holders: vec![] }, 0));
        let done = [Value::Int(2), Value::Int(60_000), Value::Int(1)];
        assert_eq!(lock_reply(&done, false, at), (Reply::TickDone { last: 60_000, ours: true }, 0));
        assert_eq!(
            lock_reply(&[], false, at).0,
            Reply::Held { remaining: None, holders: vec![] },
            "garbage is never 'acquired'"
        );
    }

    #[test]
    fn set_nx_replies() {
        let at = Instant::now();
        let plain = PlainAcquire { key: "k", token: "t", lease: Duration::from_secs(1) };
        assert_eq!(plain.decode(None, at), Reply::Acquired { fence: None, sent_at: at });
        let marked = |t: &str| format!("{t}{}", schema::QUEUED_MARK);
        assert_eq!(plain.decode(Some(&marked("t")), at), Reply::Acquired { fence: None, sent_at: at });
        assert_eq!(
            plain.decode(Some(&marked("u")), at),
            Reply::Held { remaining: None, holders: vec!["u".into()] }
        );
    }
}
