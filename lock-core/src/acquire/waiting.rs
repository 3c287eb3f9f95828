//! A waiting acquisition: try (joining the Redis-side queue when refused), make sure the
//! hand-off will be heard, then sleep until it is announced, a fallback retry is due, or the
//! wait bound passes; a wait that ends without the lock gives its token up at once.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::acquire::{Attempt, Core, Taken, Target};
use crate::conn::Sent;
use crate::conn::wake_ups::Ticket;
use crate::error::{LockError, Result};
use crate::held::liveness::Identity;
use crate::held::unsettled::{Settles, Unsettled};
use crate::options::LockOptions;
use crate::schema::acquire::Reply;

/// Stands in for a wait bound too large to add to an `Instant`.
const FOREVER: Duration = Duration::from_secs(60 * 60 * 24 * 365 * 30);

impl Core {
    /// A waiting acquisition, bounded by `wait` from now.
    pub(crate) async fn wait_for(
        &self,
        target: Target<'_>,
        options: &LockOptions,
        tick: Option<i64>,
        wait: Duration,
    ) -> Result<Attempt> {
        // A wait too long to represent (e.g. Duration::MAX, "forever") waits for decades.
        let now = Instant::now();
        let deadline = now.checked_add(wait).unwrap_or_else(|| now + FOREVER);
        let identity = self.identity_until(deadline).await?;
        let token = self.new_token(&identity);
        Waiting::new(self, target, options, tick, wait, deadline, identity, token).run().await
    }
    /// This client's liveness identity. Creating it (first use, or after it died) needs Redis;
    /// a waiting caller keeps trying while Redis is unreachable, up to `deadline`.
    async fn identity_until(&self, deadline: Instant) -> Result<Arc<Identity>> {
        let (mut pause, max) = self.config.backoff;
        loop {
            match self.liveness.identity(Instant::now()).await {
                Err(e) if e.is_transient() && Instant::now() + pause < deadline => {
                    tokio::time::sleep(jittered(pause)).await;
                    pause = pause.saturating_mul(2).min(max);
                }
                result => return result,
            }
        }
    }
}

/// `d` scaled by a random factor in [0.75, 1.0), so waiters of different clients spread out.
fn jittered(d: Duration) -> Duration {
    let r = (uuid::Uuid::new_v4().as_u128() % 1000) as u32;
    Duration::try_from_secs_f64(d.as_secs_f64() * (0.75 + f64::from(r) / 4000.0)).unwrap_or(d)
}

/// One waiting acquisition: try (joining the Redis-side queue when refused), make sure the
/// hand-off will be heard, then sleep until it is announced, a fallback retry is due, or the
/// wait bound passes. The token is kept across retries, so a late success of an earlier try
/// is recognised as ours; a wait that ends without the lock cleans its token up.
struct Waiting<'a> {
    core: &'a Core,
    target: Target<'a>,
    options: &'a LockOptions,
    tick: Option<i64>,
    wait: Duration,
    deadline: Instant,
    identity: Arc<Identity>,
    token: String,
    /// The waiter's ticket in the Redis-side queue; it outlives the longest pause.
    line: Duration,
    /// Registration for the hand-off message, once refused.
    ticket: Option<Ticket>,
    backoff: Duration,
    /// The holder's remaining lease, as last reported.
    remaining: Option<Duration>,
    /// The last transient failure, reported if the bound passes before Redis comes back.
    last_error: Option<LockError>,
    /// When the token's first try was sent, if one was: before it, there is nothing to clean up.
    first_sent: Option<Instant>,
    /// Tries of the token whose replies were lost and that may still run.
    unsettled: Option<Unsettled>,
    /// The try in flight, if any: the connection it went out on (filled when it is sent) and
    /// when (the last try's send, once it is back). A wait dropped while its try is out must
    /// clean up after it too.
    in_flight: Sent,
    in_flight_at: Instant,
    done: bool,
    /// A try's reply put (or kept) this waiter in the queue.
    queued: bool,
}

/// What one try of a waiting acquisition leads to.
enum Step {
    Done(Attempt),
    TryAgain,
    Wait,
}

impl<'a> Waiting<'a> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        core: &'a Core,
        target: Target<'a>,
        options: &'a LockOptions,
        tick: Option<i64>,
        wait: Duration,
        deadline: Instant,
        identity: Arc<Identity>,
        token: String,
    ) -> Self {
        let (initial, max) = core.config.backoff;
        // Registered before the first try, so a hand-off announced right after it is heard
        // when the channel is already subscribed (another waiter, or a lingering one).
        let ticket = Some(core.waiters.register(target.key, &token));
        Waiting {
            core,
            target,
            options,
            tick,
            wait,
            deadline,
            identity,
            token,
            line: max.saturating_mul(3).max(Duration::from_secs(1)),
            ticket,
            backoff: initial,
            remaining: None,
            last_error: None,
            first_sent: None,
            unsettled: None,
            in_flight: Sent::default(),
            in_flight_at: Instant::now(),
            done: false,
            queued: false,
        }
    }

    async fn run(mut self) -> Result<Attempt> {
        loop {
            match self.try_once().await? {
                Step::Done(attempt) => return Ok(attempt),
                Step::TryAgain if Instant::now() < self.deadline => continue,
                Step::TryAgain => return Err(self.timed_out()),
                Step::Wait => {}
            }
            if self.listen().await? {
                // Newly subscribed: a hand-off may have been announced before.
                continue;
            }
            // Woken by a release naming this waiter or not, the next try decides: a hand-off
            // is taken only on a reply (see `pause`).
            self.pause().await?;
        }
    }

    /// One scripted try with a ticket.
    async fn try_once(&mut self) -> Result<Step> {
        let core = self.core;
        if self.identity.is_dead() {
            self.start_afresh().await?;
        }
        #[cfg(feature = "test-hooks")]
        crate::test_hooks::pass(crate::test_hooks::Point::BeforeWaiterTry, self.target.key).await;
        self.in_flight = Sent::default();
        let try_sent_at = Instant::now();
        self.in_flight_at = try_sent_at;
        self.first_sent.get_or_insert(try_sent_at);
        let reply = core
            .script(self.target, &self.token, self.options, self.tick, Some(self.line), &self.in_flight)
            .await;
        let on = std::mem::take(&mut self.in_flight).generation();
        match (&reply, on) {
            (Err(e), Some(on)) if e.outcome_unknown() => {
                self.unsettled = Some(Unsettled::and(self.unsettled, try_sent_at, on));
            }
            // Answered: what went out before it on the same connection has run.
            (_, Some(_)) => self.unsettled = Unsettled::after_reply(self.unsettled, on),
            (_, None) => {}
        }
        match reply {
            Ok(Reply::Acquired { fence, sent_at }) => {
                self.done = true;
                let taken = Taken { unsettled: self.unsettled, ..Taken::by_reply(fence, sent_at) };
                let guard = core.guard(
                    self.target,
                    std::mem::take(&mut self.token),
                    &self.identity,
                    self.options,
                    taken,
                );
                if self.queued {
                    guard.state().metrics.handoff();
                }
                Ok(Step::Done(Attempt::Acquired(guard)))
            }
            // Not `done`: if the key holds our token, the clean-up passes it on.
            Ok(Reply::TickDone { last, .. }) => Ok(Step::Done(Attempt::TickDone(last))),
            Ok(Reply::Held { remaining, holders }) => {
                self.remaining = remaining;
                self.last_error = None;
                self.queued = true;
                if holders.is_empty() {
                    return Ok(Step::Wait);
                }
                match core.take_over_dead(self.target, &holders).await {
                    Ok(true) => Ok(Step::TryAgain),
                    Ok(false) => Ok(Step::Wait),
                    Err(e) if e.is_transient() => {
                        self.last_error = Some(e);
                        Ok(Step::Wait)
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) if e.is_transient() => {
                tracing::debug!(error = %crate::error::ErrorChain(&e), "redis unavailable while waiting; retrying");
                self.remaining = None;
                self.last_error = Some(e);
                Ok(Step::Wait)
            }
            Err(e) => Err(e),
        }
    }

    /// The client's identity died while this waiter waited (a stall or an outage longer than
    /// the liveness TTL): a lock taken with its token would be lost at once, so the token is
    /// given up and the wait goes on with a new one, at the back of the queue.
    async fn start_afresh(&mut self) -> Result<()> {
        self.abandon();
        self.identity = self.core.identity_until(self.deadline).await?;
        self.token = self.core.new_token(&self.identity);
        self.ticket = Some(self.core.waiters.register(self.target.key, &self.token));
        (self.first_sent, self.unsettled, self.queued) = (None, None, false);
        Ok(())
    }

    /// Cleans up the current token (queue entry, and the key if it was handed to it or taken
    /// by a try whose reply was lost), once no try of it can still run.
    fn abandon(&mut self) {
        let mut unsettled = self.unsettled.take();
        // A try in flight (this wait dropped while it was out) may still run.
        if let Some(on) = std::mem::take(&mut self.in_flight).generation() {
            unsettled = Some(Unsettled::and(unsettled, self.in_flight_at, on));
        }
        if self.first_sent.is_none() {
            return;
        }
        let lease = self.core.lease_of(self.options).lease;
        let last_sent = unsettled.map_or(self.in_flight_at, |u| u.since);
        let token = (self.target.key, self.target.hold, self.token.as_str());
        self.core.releaser.abandon(token, last_sent, lease, Settles::unless(unsettled), true);
    }

    /// Registers for the hand-off message and makes sure the channel is subscribed; true if
    /// it had to subscribe just now.
    async fn listen(&mut self) -> Result<bool> {
        if self.ticket.is_none() {
            tracing::debug!(wait = ?self.wait, "lock held; waiting");
        }
        let ticket =
            self.ticket.get_or_insert_with(|| self.core.waiters.register(self.target.key, &self.token));
        match tokio::time::timeout_at(self.deadline, ticket.ensure_subscribed()).await {
            Err(_) => Err(self.timed_out()),
            Ok(Ok(subscribed)) => Ok(subscribed),
            Ok(Err(e)) if e.is_transient() => {
                self.last_error = Some(e);
                Ok(false)
            }
            Ok(Err(e)) => Err(e),
        }
    }

    /// Sleeps until the hand-off is announced, the fallback retry is due (jittered backoff,
    /// never later than the holder's remaining lease), or the wait bound passes.
    ///
    /// A release naming this waiter is not taken as the lock: the next try confirms it
    /// (`acquire.lua` finds the key holding the token and extends it to the lease). The
    /// message alone cannot tell whether Redis still holds what it announced: it may come
    /// after Redis restarted without persistence (a message in flight, or heard just before
    /// the restart and acted on after it), on a connection that sends no command and so
    /// checks no liveness, while another client takes the free key. The try goes out on the
    /// lock connection, whose reconnection renews (or declares dead) the identity first.
    async fn pause(&mut self) -> Result<()> {
        let (initial, max) = self.core.config.backoff;
        let fallback = jittered(self.backoff).min(self.remaining.unwrap_or(max));
        self.backoff = self.backoff.saturating_mul(2).min(max);
        let Some(ticket) = self.ticket.as_ref() else { return Ok(()) };
        tokio::select! {
            _ = ticket.woken() => self.backoff = initial,
            () = tokio::time::sleep(fallback) => {}
            () = tokio::time::sleep_until(self.deadline) => return Err(self.timed_out()),
        }
        Ok(())
    }

    fn timed_out(&mut self) -> LockError {
        tracing::debug!(waited = ?self.wait, "timed out waiting for lock");
        self.last_error
            .take()
            .unwrap_or_else(|| LockError::Timeout { key: self.target.key.to_owned(), waited: self.wait })
    }
}

impl Drop for Waiting<'_> {
    // However the wait ends without the lock (timeout, error, cancellation, a claimed tick),
    // the token leaves the queue and, if a try's reply was lost or the lock was handed over
    // just now, the key: other waiters are not held up until the ticket or lease lapses.
    fn drop(&mut self) {
        if !self.done {
            self.abandon();
        }
    }
}
