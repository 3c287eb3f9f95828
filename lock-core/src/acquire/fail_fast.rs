//! Taking a lock without waiting: one plain `SET key token NX PX lease GET` when uncontended
//! (no fence, no tick), else the acquire script (`schema/acquire/acquire.lua`); a lock held by a
//! token whose client's liveness key is gone is taken over at once.

use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::redis::{self, Value};
use tokio::time::Instant;

use crate::acquire::cleanup::CleanupOnDrop;
use crate::acquire::{Attempt, Core, Taken, Target};
use crate::conn::Sent;
use crate::error::{LockError, Result};

use crate::held::liveness::Identity;
use crate::held::unsettled::Settles;
use crate::options::LockOptions;
use crate::schema::acquire::{Acquire, PlainAcquire, Reply};
use crate::schema::hold::Hold;
use crate::telemetry::{self, Unclaimed};

impl Core {
    /// One try (two if the holder turns out to be dead and is taken over). `started`: when
    /// the call began, standing in for the first try's send time (a little early, so the
    /// lease it implies ends a little early: safe) to spare a clock read.
    pub(crate) async fn fail_fast(
        &self,
        target: Target<'_>,
        token: String,
        identity: &Arc<Identity>,
        options: &LockOptions,
        tick: Option<i64>,
        started: Instant,
    ) -> Result<Attempt> {
        let lease = self.lease_of(options);
        let plain = target.hold == Hold::Lock && !options.fencing && tick.is_none();
        let mut taken_over = false;
        loop {
            let reply = if plain {
                let sent_at = if taken_over { Instant::now() } else { started };
                self.set_nx(target.key, &token, lease.lease, sent_at).await?
            } else {
                Box::pin(self.script(target, &token, options, tick, None, &Sent::default())).await?
            };
            match reply {
                Reply::Acquired { fence, sent_at } => {
                    return Ok(Attempt::Acquired(self.guard(
                        target,
                        token,
                        identity,
                        options,
                        Taken::by_reply(fence, sent_at),
                    )));
                }
                Reply::TickDone { last, ours } => {
                    if ours {
                        self.releaser.abandon(
                            (target.key, target.hold, &token),
                            Instant::now(),
                            lease.lease,
                            Settles::Once,
                            false,
                        );
                    }
                    return Ok(Attempt::TickDone(last));
                }
                Reply::Held { remaining, holders } => {
                    if !taken_over && !holders.is_empty() {
                        taken_over = true;
                        if Box::pin(self.take_over_dead(target, &holders)).await? {
                            continue;
                        }
                    }
                    let remaining = match remaining {
                        Some(remaining) => Some(remaining),
                        None if plain => Box::pin(self.pttl(target.key)).await?,
                        None => None,
                    };
                    tracing::trace!(?remaining, "lock is held by another owner");
                    return Ok(Attempt::Held(remaining));
                }
            }
        }
    }

    /// The uncontended path: `SET key token NX PX lease GET`, no script, sent after
    /// `sent_at`.
    async fn set_nx(&self, key: &str, token: &str, lease: Duration, sent_at: Instant) -> Result<Reply> {
        let plain = PlainAcquire { key, token, lease };
        let cmd = plain.cmd()?;
        let sent = Sent::default();
        let cleanup = CleanupOnDrop::new(&self.releaser, Target::lock(key), token, sent_at, lease, &sent);
        let previous: Option<String> =
            match self.conn.query_once(&cmd, || format!("acquiring lock `{key}`"), &sent).await {
                Ok(previous) => previous,
                Err(e) => return Err(cleanup.failed(e)),
            };
        cleanup.disarm();
        Ok(plain.decode(previous.as_deref(), sent_at))
    }

    /// The scripted path. With `ticket`, a refused caller joins (or stays in) the queue of
    /// waiters; such a caller keeps its token and cleans up when its wait ends, so an unknown
    /// outcome is left to it.
    pub(crate) async fn script(
        &self,
        target: Target<'_>,
        token: &str,
        options: &LockOptions,
        tick: Option<i64>,
        ticket: Option<Duration>,
        sent: &Sent,
    ) -> Result<Reply> {
        let key = target.key;
        let lease = self.lease_of(options).lease;
        let call = Acquire {
            hold: target.hold,
            key,
            token,
            lease,
            fencing: options.fencing,
            tick,
            ticket,
            handoff: self.config.handoff,
            publish: self.conn.publish_command(),
        };
        let invocation = call.eval()?;
        let sent_at = Instant::now();
        // A waiting caller's token is cleaned up by its `Waiting` (which knows whether it is
        // queued); a fail-fast caller's here, if its outcome is unknown.
        let cleanup =
            ticket.is_none().then(|| CleanupOnDrop::new(&self.releaser, target, token, sent_at, lease, sent));
        let values: Vec<Value> =
            match self.conn.invoke_once(&invocation, || format!("acquiring lock `{key}`"), sent).await {
                Ok(values) => values,
                Err(e) => {
                    return Err(match cleanup {
                        Some(cleanup) => cleanup.failed(e),
                        None => e,
                    });
                }
            };
        if let Some(cleanup) = cleanup {
            cleanup.disarm();
        }
        let (reply, lapsed) =
            call.decode(&values, sent_at).map_err(|declared| LockError::PermitsMismatch {
                name: key.to_owned(),
                permits: match target.hold {
                    Hold::Permit { permits } => permits,
                    _ => 0,
                },
                declared: u32::try_from(declared).unwrap_or(0),
            })?;
        telemetry::handoffs_unclaimed(key, target.hold.label(), Unclaimed::Lapsed, lapsed);
        Ok(reply)
    }

    /// The holder's remaining lease, for the error of a fail-fast caller.
    async fn pttl(&self, key: &str) -> Result<Option<Duration>> {
        let mut cmd = redis::cmd("PTTL");
        cmd.arg(key);
        let pttl: i64 = self.conn.query(&cmd, || format!("reading the lease of lock `{key}`")).await?;
        Ok(u64::try_from(pttl).ok().map(Duration::from_millis))
    }

    /// Takes over what `holders` hold on `target` whose clients are dead (their liveness key
    /// is gone): gives it back as they would have (handing it to the oldest waiter). Returns
    /// whether any was dead, so the caller tries again: none of them holds it any more,
    /// whether this call released it or something else did first (the dead holder's own
    /// clean-up, its expiry, another caller's take-over).
    pub(crate) async fn take_over_dead(&self, target: Target<'_>, holders: &[String]) -> Result<bool> {
        let mut any = false;
        for holder in holders {
            if !self.liveness.is_dead(holder).await? {
                continue;
            }
            any = true;
            if self.releaser.release_token(target.key, target.hold, holder).await? {
                tracing::warn!(
                    holder = holder.as_str(),
                    "the holder's client is gone (its liveness lease expired); took the lock over"
                );
            }
        }
        Ok(any)
    }
}
