//! Releasing locks: the owner-checked release itself, and the releases (and other clean-ups)
//! that run in the background when a guard is dropped, a release is cancelled or an
//! acquisition's outcome is unknown, counted so that a shutdown can wait for them.

pub(crate) mod group;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_redis::redis::Value;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;
use tracing::Instrument;

use crate::conn::{Conn, Sent};
use crate::error::Result;
use crate::held::state::LockState;
use crate::held::unsettled::Settles;
use crate::held::watchdog::Watchdog;
use crate::options::millis;
use crate::replica_ack::ReplicaAck;
use crate::schema::eval::Eval;
use crate::schema::hold::Hold;
use crate::schema::release::{Release, ReleaseOwn, Released};
use crate::telemetry::{self, Unclaimed};

/// The first pause of a clean-up that is not certain yet (see `Releaser::abandon`).
const FIRST_RETRY: Duration = Duration::from_millis(50);

/// Releases this client's locks; shared by its guards.
#[derive(Debug)]
pub(crate) struct Releaser {
    pub(crate) conn: Arc<Conn>,
    watchdog: Arc<Watchdog>,
    instance: String,
    /// How long a lock handed to one of this client's waiters stays reserved for it (the
    /// waiter's queue entry names it).
    handoff: Duration,
    /// `WAIT` after releases, if opted in.
    replica_ack: Option<ReplicaAck>,
    /// Guards alive and not yet released (nested ones excluded).
    held: AtomicUsize,
    /// Background tasks in flight.
    in_flight: AtomicUsize,
    /// Woken when `in_flight` drops to zero.
    idle: Notify,
    /// Grouped releases (see `group`).
    pub(crate) group: Mutex<Group>,
}

impl Releaser {
    pub(crate) fn new(
        conn: Arc<Conn>,
        watchdog: Arc<Watchdog>,
        instance: String,
        handoff: Duration,
        replica_ack: Option<ReplicaAck>,
    ) -> Self {
        Releaser {
            conn,
            watchdog,
            instance,
            handoff,
            replica_ack,
            held: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            idle: Notify::new(),
            group: Mutex::default(),
        }
    }

    /// Counts a new guard as held; [`guard_done`](Self::guard_done) uncounts it.
    pub(crate) fn guard_created(&self) {
        self.held.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn guard_done(&self) {
        self.held.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Releases `state`'s lock: compare-and-delete and announce, or, within a minimum hold,
    /// shorten the key's expiry to what is left of it. Returns whether it was still ours.
    /// `grouped`: the one-key release goes out with the other grouped releases (see
    /// `group`).
    pub(crate) async fn release(self: &Arc<Self>, state: &LockState, grouped: bool) -> Result<bool> {
        let span = tracing::info_span!("lock_release", key = %state.key, instance = %self.instance, fence = state.fence);
        self.release_in_span(state, grouped).instrument(span).await
    }

    async fn release_in_span(self: &Arc<Self>, state: &LockState, grouped: bool) -> Result<bool> {
        let released = self.give_back(state, grouped).await;
        // A try of the token whose reply was lost may still land, on the key just given back,
        // and take it for a lease with no guard to release it: its token is given up again
        // until that try is accounted for, as a waiter that leaves without the lock does.
        if let Some(unsettled) = state.unsettled {
            let token = (state.key.as_str(), state.hold, state.token.as_str());
            self.abandon(token, unsettled.since, state.lease, Settles::After(unsettled), false);
        }
        released
    }

    /// The release itself: see [`release`](Self::release).
    async fn give_back(self: &Arc<Self>, state: &LockState, grouped: bool) -> Result<bool> {
        let was_held = state.mark_released();
        self.watchdog.unregister(state.id);
        let sent_at = Instant::now();
        let held_for = sent_at.saturating_duration_since(state.acquired_at);
        let keep = state.at_least.map(|min| min.saturating_sub(held_for)).filter(|d| !d.is_zero());
        let keep_ms = keep.map_or(Ok(0), |d| millis(d, "at_least"))?;
        // The one-key release first when it can do the whole job (the holder's own lock
        // release with no minimum hold) and this client's last release of the key found
        // nobody queued. It replies -1, changing nothing, when callers queued; the full
        // release then hands over: one more round trip, only when contention starts.
        let one_key = !state.metrics.queued_last() && ReleaseOwn::applies(state.hold, keep_ms);
        let own = match (one_key, grouped) {
            (false, _) => None,
            (true, true) => {
                Some(self.release_own_grouped(&state.key, &state.token, state.lease, sent_at).await?)
            }
            (true, false) => match ReleaseOwn::of(state.hold, &state.key, &state.token, keep_ms) {
                Some(own) => Some(self.send_release(state, &own.eval(), sent_at).await?),
                None => None,
            },
        };
        let reply = match own {
            Some(Value::Int(-1)) | None => None,
            reply => reply,
        };
        let reply = match reply {
            Some(reply) => reply,
            None => {
                let full = Release {
                    hold: state.hold,
                    key: &state.key,
                    token: &state.token,
                    keep_ms,
                    for_holder: true,
                    leave: None,
                    publish: self.conn.publish_command(),
                }
                .eval();
                self.send_release(state, &full, sent_at).await?
            }
        };
        let released = decode(&state.key, state.hold, &reply);
        state.metrics.set_queued_last(released.handed_over);
        let owned = released.owned;
        if let Some(ack) = self.replica_ack.filter(|a| a.after_release && owned) {
            // The release is done either way: a shortfall is only reported.
            // Boxed: rare, and it would double the size of every release's future.
            match Box::pin(self.conn.wait_replicas(&state.key, ack.replicas, ack.timeout)).await {
                Ok(got) if got >= ack.replicas => {}
                Ok(got) => tracing::warn!(
                    wanted = ack.replicas,
                    got,
                    "fewer replicas than wanted acknowledged the release"
                ),
                Err(e) => {
                    tracing::warn!(error = %crate::error::ErrorChain(&e), "could not wait for replicas to acknowledge the release")
                }
            }
        }
        if owned {
            state.metrics.held(held_for);
            tracing::debug!(?held_for, kept_for = ?keep, "lock released");
        } else if was_held {
            tracing::warn!("lock released, but it had already expired or been taken over");
        }
        Ok(owned)
    }

    /// Sends one release script for `state`, once: a late first release would make a second
    /// report that the lock was no longer ours. After a lost reply the clean-up makes sure the
    /// token is gone.
    async fn send_release(
        self: &Arc<Self>,
        state: &LockState,
        invocation: &Eval,
        sent_at: Instant,
    ) -> Result<Value> {
        self.send_once((&state.key, state.hold, &state.token), invocation, sent_at, state.lease).await
    }

    /// Sends one release script for `token`, once; a lost reply gives the token up in the
    /// background.
    pub(crate) async fn send_once(
        self: &Arc<Self>,
        (key, hold, token): (&str, Hold, &str),
        invocation: &Eval,
        sent_at: Instant,
        lease: Duration,
    ) -> Result<Value> {
        let sent = Sent::default();
        match self.conn.invoke_once(invocation, || format!("releasing lock `{key}`"), &sent).await {
            Ok(reply) => Ok(reply),
            Err(e) => {
                // A release only ever gives the token up: one clean-up that runs settles it.
                if e.outcome_unknown() {
                    self.abandon((key, hold, token), sent_at, lease, Settles::Once, false);
                }
                Err(e)
            }
        }
    }

    /// A dropped guard's release: runs in the background on the current runtime.
    pub(crate) fn release_in_background(self: &Arc<Self>, state: &Arc<LockState>) {
        self.watchdog.unregister(state.id);
        let task_state = state.clone();
        let spawned = self.spawn(move |releaser| async move {
            if let Err(e) = releaser.release(&task_state, false).await {
                tracing::warn!(key = %task_state.key, error = %crate::error::ErrorChain(&e), "background release failed; the lock expires at the end of its lease");
            }
        });
        if !spawned {
            state.mark_released();
            tracing::warn!(key = %state.key, "lock guard dropped outside a tokio runtime; the lock expires at the end of its lease");
        }
    }

    /// Gives `token`'s hold on `key` back on behalf of someone else than its holder (handing
    /// what it frees to the oldest waiter): the takeover of a dead holder's lock, permit or
    /// hold, or an operator's force-release. Returns whether it held that token.
    pub(crate) async fn release_token(&self, key: &str, hold: Hold, token: &str) -> Result<bool> {
        let publish = self.conn.publish_command();
        let invocation =
            Release { hold, key, token, keep_ms: 0, for_holder: false, leave: None, publish }.eval();
        let reply: Value = self.conn.invoke(&invocation, || format!("taking over lock `{key}`")).await?;
        Ok(released(key, hold, &reply))
    }

    /// Gives `token` up on `key` in one round trip: out of the queue of waiters, and, if it
    /// holds the lock (or a permit, or a hold), passed on to the oldest live waiter or freed.
    /// Returns whether it held it, and the connection generation the script ran on.
    async fn give_up(&self, key: &str, hold: Hold, token: &str) -> (Result<bool>, Option<u64>) {
        // Entered by this client, so with this client's hand-off time.
        let entry = hold.queue_entry(token, millis(self.handoff, "hand-off").unwrap_or(0));
        let publish = self.conn.publish_command();
        let invocation =
            Release { hold, key, token, keep_ms: 0, for_holder: true, leave: Some(&entry), publish }.eval();
        let sent = Sent::default();
        let reply: Result<Value> =
            self.conn.invoke_once(&invocation, || format!("giving up a token of lock `{key}`"), &sent).await;
        (reply.map(|reply| released(key, hold, &reply)), sent.generation())
    }

    /// Cleans up a token that must not hold anything: an acquisition whose outcome is unknown
    /// (its reply was lost, or its future dropped while the command was out), a waiter that
    /// gave up (`queued`), or a guard's token after its release while an earlier try of it may
    /// still run. A command of the token may still run on the server later (a stalled Redis
    /// buffers it), so the token is given up (out of the queue, and what it holds passed on),
    /// and that is retried until `settles` says it is certain or the lease, counted from
    /// `last_sent` (the token's last command that may still run), has passed.
    pub(crate) fn abandon(
        self: &Arc<Self>,
        (key, hold, token): (&str, Hold, &str),
        last_sent: Instant,
        lease: Duration,
        settles: Settles,
        queued: bool,
    ) {
        let (key, token) = (key.to_owned(), token.to_owned());
        // Retries slow down to an eighth of the lease (at most a second): a late command that
        // lands meanwhile holds the key that long at most, not for its lease.
        let slowest = (lease / 8).clamp(FIRST_RETRY, Duration::from_secs(1));
        self.spawn(move |releaser| async move {
            let expires = last_sent + lease;
            let mut pause = FIRST_RETRY;
            loop {
                let sent_at = Instant::now();
                let (held, ran_on) = releaser.give_up(&key, hold, &token).await;
                if queued && held.as_ref().is_ok_and(|held| *held) {
                    // A reservation made for a waiter that had left, passed on at once.
                    telemetry::handoffs_unclaimed(&key, hold.label(), Unclaimed::WaiterLeft, 1);
                }
                if cleanup_ends(settles, &held, ran_on, sent_at, expires, lease) {
                    return;
                }
                // Never past the deadline, so that a give-up goes out right after it; past it,
                // at once after a give-up that ran before it, the pause after one that failed.
                let now = Instant::now();
                let wait = match now.checked_duration_since(expires) {
                    None => pause.min(expires - now),
                    Some(_) if held.is_ok() => Duration::ZERO,
                    Some(_) => pause,
                };
                tokio::time::sleep(wait).await;
                pause = (pause * 2).min(slowest);
            }
        });
    }

    /// Spawns `task` on the current runtime, counted until it ends so that
    /// [`flush`](Self::flush) can wait for it. False without a runtime.
    pub(crate) fn spawn<F, Fut>(self: &Arc<Self>, task: F) -> bool
    where
        F: FnOnce(Arc<Releaser>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return false };
        let counted = InFlight::enter(self.clone());
        let task = task(self.clone());
        rt.spawn(async move {
            task.await;
            drop(counted);
        });
        true
    }

    /// Waits until no background task is in flight.
    pub(crate) async fn flush(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.in_flight.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// Whether a clean-up (`Releaser::abandon`) ends after a give-up sent at `sent_at` that
/// answered `held` on connection `ran_on`, the token's last command that may still run having
/// been sent at `expires - lease`. It ends when that answer settles the token (`settles`), or
/// when the give-up *went out* at or after `expires` and ran (it answered): it ran after every
/// try that could still take the key within its lease (a try landing later is past its lease,
/// the documented limit). The reply's time proves nothing: a give-up sent before `expires` may
/// run just before a late try lands, and answer after `expires`. A failed give-up proves
/// nothing either; past `expires + lease`, whatever a try that landed in time set has expired
/// by itself, and the clean-up stops.
fn cleanup_ends(
    settles: Settles,
    held: &Result<bool>,
    ran_on: Option<u64>,
    sent_at: Instant,
    expires: Instant,
    lease: Duration,
) -> bool {
    match held {
        Ok(held) => settles.settled_by(*held, ran_on) || sent_at >= expires,
        Err(_) => Instant::now() >= expires + lease,
    }
}

/// One background task in flight; counted in `Releaser::in_flight`.
struct InFlight {
    releaser: Arc<Releaser>,
}

impl InFlight {
    fn enter(releaser: Arc<Releaser>) -> Self {
        releaser.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight { releaser }
    }
}

impl Drop for InFlight {
    // Also runs when the task is dropped unfinished (its runtime shut down).
    fn drop(&mut self) {
        if self.releaser.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.releaser.idle.notify_waiters();
        }
    }
}

/// Whether a release reply says the key held the token; lapsed hand-offs it noticed on the way
/// are counted.
fn released(key: &str, hold: Hold, reply: &Value) -> bool {
    decode(key, hold, reply).owned
}

/// A release script's reply, its lapsed hand-offs counted.
fn decode(key: &str, hold: Hold, reply: &Value) -> Released {
    let released = Released::decode(reply);
    telemetry::handoffs_unclaimed(key, hold.label(), Unclaimed::Lapsed, released.lapsed);
    released
}

/// Grouped releases (`group`): the releases waiting for the next group, whether a
/// group is out, and when the last one was sent.
#[derive(Debug, Default)]
pub(crate) struct Group {
    pub(crate) pending: Vec<Pending>,
    pub(crate) sending: bool,
    pub(crate) last_sent: Option<Instant>,
}

/// One release waiting in the group.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) key: String,
    pub(crate) token: String,
    pub(crate) lease: Duration,
    pub(crate) sent_at: Instant,
    pub(crate) reply: oneshot::Sender<Result<Value>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::LockError;
    use crate::held::unsettled::Unsettled;

    #[test]
    fn a_clean_up_ends_by_the_send_of_its_give_up_not_its_reply() {
        let lease = Duration::from_secs(10);
        let now = Instant::now();
        let expires = now + Duration::from_millis(1);
        let past = now - Duration::from_secs(1);
        let settles = Settles::After(Unsettled { since: past, on: Some(1) });
        assert!(!cleanup_ends(settles, &Ok(false), Some(2), now, expires, lease), "sent before the deadline");
        assert!(
            cleanup_ends(settles, &Ok(false), Some(2), expires, expires, lease),
            "sent at the deadline, ran"
        );
        assert!(cleanup_ends(settles, &Ok(false), Some(1), now, expires, lease), "ran after the try");
        let failed = Err(LockError::InvalidOptions("lost".into()));
        let long_ago = now - Duration::from_secs(30);
        assert!(
            !cleanup_ends(settles, &failed, None, expires, expires, lease),
            "a failed give-up proves nothing"
        );
        assert!(
            cleanup_ends(settles, &failed, None, long_ago, long_ago, lease),
            "past the deadline and a lease"
        );
    }
}
