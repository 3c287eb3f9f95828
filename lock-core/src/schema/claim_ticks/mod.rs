//! Claiming one scheduler tick for many locks at once (`claim_ticks.lua`, beside this file): a
//! call per chunk of locks sharing a tick, a lease and (in a cluster) a hash slot, and what its
//! reply says of each lock.

use deadpool_redis::redis::{self, ErrorKind, Script, Value};

use crate::error::{LockError, Result, is_redirect};
use crate::options::millis;
use crate::schema::scripts::CLAIM_TICKS;
use crate::schema::{self, TICK_TTL};

/// One call: claim `tick` with each lock of `claims` (its key and a fresh token) for `lease`.
pub(crate) struct ClaimTicks<'a> {
    pub(crate) tick: i64,
    pub(crate) lease: std::time::Duration,
    pub(crate) claims: &'a [(&'a str, &'a str)],
}

impl ClaimTicks<'_> {
    /// The call by hash, added to `pipe` (the caller loads the script again on NOSCRIPT).
    pub(crate) fn push(&self, pipe: &mut redis::Pipeline) -> Result<()> {
        let lease = millis(self.lease, "lease")?;
        let ttl = millis(TICK_TTL, "tick TTL")?;
        let cmd = pipe.cmd("EVALSHA").arg(CLAIM_TICKS.get_hash()).arg(self.claims.len() * 2);
        for (key, _) in self.claims {
            cmd.arg(*key).arg(schema::tick_key(key));
        }
        cmd.arg(self.tick).arg(lease).arg(ttl);
        for (_, token) in self.claims {
            cmd.arg(*token);
        }
        Ok(())
    }
}

/// The script, for a pipeline's NOSCRIPT resend.
pub(crate) fn script() -> &'static Script {
    &CLAIM_TICKS
}

/// What the script said of one claim.
pub(crate) enum ClaimReply {
    /// The lock is the token's for the lease, the tick recorded.
    Claimed,
    /// The tick, or a later one (this one), was already claimed; nothing changed.
    Done(i64),
    /// Held, by this value of the lock key (its queue mark included).
    Held(String),
    /// The call did not run (redirected to another node in a cluster): claim it singly.
    NotRun,
    /// The call failed on the server (a key of the wrong type, say).
    Failed(LockError),
}

/// Appends the replies of one call of `n` claims to `out`.
pub(crate) fn decode(reply: redis::RedisResult<Value>, n: usize, out: &mut Vec<ClaimReply>) {
    let values = match reply {
        Ok(Value::Array(values)) if values.len() == 2 * n => values,
        Ok(other) => {
            let e = LockError::redis(
                "claiming scheduler ticks".to_owned(),
                redis::RedisError::from((
                    ErrorKind::Parse,
                    "unexpected reply of claim_ticks.lua",
                    format!("{other:?}"),
                )),
            );
            out.extend((0..n).map(|_| ClaimReply::Failed(e.clone())));
            return;
        }
        Err(e) if is_redirect(&e) => {
            out.extend((0..n).map(|_| ClaimReply::NotRun));
            return;
        }
        Err(e) => {
            let e = LockError::redis("claiming scheduler ticks".to_owned(), e);
            out.extend((0..n).map(|_| ClaimReply::Failed(e.clone())));
            return;
        }
    };
    let mut values = values.into_iter();
    while let (Some(code), Some(detail)) = (values.next(), values.next()) {
        out.push(match (code, detail) {
            (Value::Int(1), _) => ClaimReply::Claimed,
            (Value::Int(2), Value::Int(last)) => ClaimReply::Done(last),
            (Value::Int(0), Value::BulkString(holder)) => {
                ClaimReply::Held(String::from_utf8_lossy(&holder).into_owned())
            }
            _ => ClaimReply::NotRun,
        });
    }
}
