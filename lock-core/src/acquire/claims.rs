//! Batched tick claims: many locks taken, each claiming a scheduler tick, in one round trip per
//! Redis node (`schema/claim_ticks/claim_ticks.lua`). The public door is
//! [`LockClient::claim_ticks`](crate::LockClient::claim_ticks).
//!
//! A single node gets one pipeline of script calls of up to [`batches::CHUNK`] claims each; a cluster one
//! pipeline per node, with one call per hash slot (a script's keys must share a slot). Claims
//! the batch cannot take (a wait, fencing, replica acknowledgement, a lock the task already
//! holds) and claims a cluster redirected go through the single acquisition path, concurrently.

use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::redis;
use tokio::time::Instant;

use crate::acquire::cleanup::CleanupOnDrop;
use crate::acquire::section;
use crate::acquire::{Attempt, Core, Taken, Target, check_input};
use crate::conn::Sent;
use crate::conn::batches;
use crate::conn::deploy::slots::Node;
use crate::error::{LockError, Result};
use crate::held::guard::LockGuard;
use crate::held::liveness::Identity;
use crate::held::scope;
use crate::options::{LockOptions, OnLost};
use crate::schema;
use crate::schema::claim_ticks::{self, ClaimReply, ClaimTicks, decode};
use crate::schema::hold::Hold;
use crate::telemetry::Acquisition;
use std::future::Future;

/// One lock of a batched claim ([`LockClient::claim_ticks`](crate::LockClient::claim_ticks)): its key, the tick to claim with
/// it, and how to take it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClaimRequest<'a> {
    /// The lock's key.
    pub key: &'a str,
    /// The tick (epoch milliseconds of the slot's scheduled fire time).
    pub tick: i64,
    /// Lease, minimum hold, `on_lost`; a wait or fencing makes the claim go on its own.
    pub options: LockOptions,
}

impl<'a> ClaimRequest<'a> {
    /// Claim `tick` with the lock `key`, taken per `options`.
    pub fn new(key: &'a str, tick: i64, options: LockOptions) -> Self {
        ClaimRequest { key, tick, options }
    }
}

/// What [`LockClient::claim_ticks`](crate::LockClient::claim_ticks) did for one lock.
#[derive(Debug)]
#[non_exhaustive]
pub enum Claim {
    /// The lock is held and the tick claimed: run the body with [`ClaimedTick::run`] (or drop
    /// it to release the lock without running anything).
    Claimed(ClaimedTick),
    /// The tick (or a later one) had already been claimed; nothing was taken.
    ClaimedElsewhere {
        /// The last claimed tick.
        last_tick: i64,
    },
    /// Another owner held the lock; the tick was not claimed.
    Held {
        /// The holder's remaining lease, when known (the batch does not ask for it).
        remaining: Option<Duration>,
    },
}

/// A lock taken with its tick claimed by [`LockClient::claim_ticks`](crate::LockClient::claim_ticks): the proof of ownership,
/// waiting for its body. Dropping it releases the lock in the background.
#[derive(Debug)]
pub struct ClaimedTick {
    core: Arc<Core>,
    guard: LockGuard,
    on_lost: OnLost,
    tick: i64,
}

impl ClaimedTick {
    pub(crate) fn new(core: Arc<Core>, guard: LockGuard, request: &ClaimRequest<'_>) -> Self {
        ClaimedTick { core, guard, on_lost: request.options.on_lost, tick: request.tick }
    }

    /// The lock's guard (key, token, lease, whether it is still held).
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// The claimed tick.
    pub fn tick(&self) -> i64 {
        self.tick
    }

    /// Runs `fut` holding the lock, as a locked section ([`LockClient::with_lock`](crate::LockClient::with_lock)): locked
    /// sections inside it that ask for the same key share the hold, a loss is handled per the
    /// request's `on_lost` ([`LockError::Lost`] when the body was cancelled), and the lock is
    /// released when `fut` ends. Releases of claimed ticks' locks go out in groups, at most
    /// one round trip per Redis node every 10 ms: a release sends at once unless a group went
    /// out in the last 10 ms, in which case it waits (its lock held that much longer) and
    /// goes with the releases asked for meanwhile.
    pub async fn run<F: Future>(self, fut: F) -> Result<F::Output> {
        section::hold(&self.core, self.guard, self.on_lost, true, fut).await
    }
}

/// One claim of the batch: the request's index, its fresh token, and its lease.
struct Item<'r> {
    index: usize,
    key: &'r str,
    token: String,
    lease: Duration,
}

impl Core {
    /// See [`LockClient::claim_ticks`](crate::LockClient::claim_ticks).
    pub(crate) async fn claim_ticks(self: &Arc<Self>, requests: &[ClaimRequest<'_>]) -> Vec<Result<Claim>> {
        let started = Instant::now();
        let mut results: Vec<Option<Result<Claim>>> = requests.iter().map(|_| None).collect();
        let mut batched = Vec::new();
        let mut single = Vec::new();
        for (index, request) in requests.iter().enumerate() {
            if let Err(e) = check_input(request.key, &request.options, Some(request.tick)) {
                results[index] = Some(Err(e));
            } else if self.batchable(request) {
                batched.push(index);
            } else {
                single.push(index);
            }
        }
        if !batched.is_empty() {
            match self.liveness.identity(started).await {
                Ok(identity) => {
                    let redo = self.claim_batched(requests, &batched, &identity, &mut results).await;
                    single.extend(redo);
                }
                Err(e) => {
                    for &index in &batched {
                        results[index] = Some(Err(e.clone()));
                    }
                }
            }
        }
        // The rest one by one, concurrently: each is its own round trip.
        let each = single.iter().map(|&index| self.claim_one(&requests[index]));
        for (index, result) in single.iter().zip(futures_util::future::join_all(each).await) {
            results[*index] = Some(result);
        }
        results
            .into_iter()
            .map(|result| result.unwrap_or_else(|| Err(LockError::InvalidOptions("claim not made".into()))))
            .collect()
    }

    /// Whether `request` can go in a batch: a plain fail-fast lock, not held by this task.
    fn batchable(&self, request: &ClaimRequest<'_>) -> bool {
        let o = &request.options;
        o.wait.is_none()
            && !o.fencing
            && self.config.replica_ack.is_none()
            && scope::find(self.scope_id(), request.key).is_none()
    }

    /// One claim through the single acquisition path (acquire.lua, waiting if asked to).
    async fn claim_one(self: &Arc<Self>, request: &ClaimRequest<'_>) -> Result<Claim> {
        let target = Target::lock(request.key);
        let attempt = self.hold_for(target, request.options.clone(), Some(request.tick)).await?;
        Ok(match attempt {
            Attempt::Acquired(guard) => Claim::Claimed(ClaimedTick::new(self.clone(), guard, request)),
            Attempt::TickDone(last_tick) => Claim::ClaimedElsewhere { last_tick },
            Attempt::Held(remaining) => Claim::Held { remaining },
        })
    }

    /// Claims `indices` of `requests` in batches, filling `results`; returns the indices to
    /// claim one by one (redirected in a cluster, or held by a holder that may be dead).
    async fn claim_batched(
        self: &Arc<Self>,
        requests: &[ClaimRequest<'_>],
        indices: &[usize],
        identity: &Arc<Identity>,
        results: &mut [Option<Result<Claim>>],
    ) -> Vec<usize> {
        let items: Vec<Item<'_>> = indices
            .iter()
            .map(|&index| Item {
                index,
                key: requests[index].key,
                token: self.new_token(identity),
                lease: self.lease_of(&requests[index].options).lease,
            })
            .collect();
        let groups = self.conn.split_by_node(items, |item| item.key).await;
        let sends = groups.into_iter().map(|(node, items)| self.send_group(requests, node, items));
        let mut redo = Vec::new();
        let mut held = Vec::new();
        for (items, replies, sent_at) in futures_util::future::join_all(sends).await {
            match replies {
                Ok(replies) => {
                    for (item, reply) in items.into_iter().zip(replies) {
                        let request = &requests[item.index];
                        // Our own token as the holder: the claim was sent again after a lost
                        // reply, and the lost call took the lock and claimed the tick.
                        let reply = match reply {
                            ClaimReply::Held(holder) if schema::unmarked(&holder) == item.token => {
                                ClaimReply::Claimed
                            }
                            reply => reply,
                        };
                        match reply {
                            ClaimReply::Claimed => {
                                let guard = self.guard(
                                    Target::lock(request.key),
                                    item.token,
                                    identity,
                                    &request.options,
                                    Taken::by_reply(None, sent_at),
                                );
                                guard.state().metrics.acquisition(Acquisition::Acquired, sent_at.elapsed());
                                results[item.index] =
                                    Some(Ok(Claim::Claimed(ClaimedTick::new(self.clone(), guard, request))));
                            }
                            ClaimReply::Done(last_tick) => {
                                self.metrics
                                    .of(request.key, Hold::Lock)
                                    .acquisition(Acquisition::Held, sent_at.elapsed());
                                results[item.index] = Some(Ok(Claim::ClaimedElsewhere { last_tick }));
                            }
                            // Looked at once every lock taken has its guard (a guard dropped
                            // with this future releases its lock; a bare token would not).
                            ClaimReply::Held(holder) => held.push((item.index, holder, sent_at)),
                            ClaimReply::NotRun => redo.push(item.index),
                            ClaimReply::Failed(e) => results[item.index] = Some(Err(e)),
                        }
                    }
                }
                Err(e) => {
                    for item in items {
                        results[item.index] = Some(Err(e.clone()));
                    }
                }
            }
        }
        for (index, holder, sent_at) in held {
            // A holder whose client died is taken over by the single path.
            match self.liveness.is_dead(schema::unmarked(&holder)).await {
                Ok(false) => {
                    self.metrics
                        .of(requests[index].key, Hold::Lock)
                        .acquisition(Acquisition::Held, sent_at.elapsed());
                    results[index] = Some(Ok(Claim::Held { remaining: None }));
                }
                Ok(true) | Err(_) => redo.push(index),
            }
        }
        redo
    }

    /// One pipeline to `node` (or the single node): the script once per chunk of claims
    /// sharing a tick, a lease and (in a cluster) a hash slot. The replies are in the order of
    /// the returned items.
    async fn send_group<'r>(
        &self,
        requests: &[ClaimRequest<'r>],
        node: Option<Node>,
        mut items: Vec<Item<'r>>,
    ) -> (Vec<Item<'r>>, Result<Vec<ClaimReply>>, Instant) {
        let calls = batches::calls(
            &mut items,
            node.is_some(),
            |item| item.key,
            |item| (requests[item.index].tick, item.lease),
        );
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for call in &calls {
            let first = &items[call.start];
            let claims: Vec<(&str, &str)> =
                items[call.clone()].iter().map(|i| (i.key, i.token.as_str())).collect();
            let call = ClaimTicks { tick: requests[first.index].tick, lease: first.lease, claims: &claims };
            if let Err(e) = call.push(&mut pipe) {
                return (items, Err(e), Instant::now());
            }
        }
        let sent = [Sent::default(), Sent::default()];
        let sent_at = Instant::now();
        let outcome = self.send_claims(&pipe, node, &calls, &items, &sent, sent_at).await;
        (items, outcome, sent_at)
    }

    /// Sends the claims' pipeline (again once, if the server had lost the script) and decodes
    /// the replies, one per item.
    async fn send_claims(
        &self,
        pipe: &redis::Pipeline,
        node: Option<Node>,
        calls: &[std::ops::Range<usize>],
        items: &[Item<'_>],
        // Where the first send and its one resend went out.
        [sent, again]: &[Sent; 2],
        sent_at: Instant,
    ) -> Result<Vec<ClaimReply>> {
        // A lost reply (or this future dropped while the pipeline was out) may have taken any
        // of the locks: every token is given up in the background, as a single acquisition's.
        let mut cleanups: Vec<CleanupOnDrop<'_>> = items
            .iter()
            .map(|item| {
                CleanupOnDrop::new(
                    &self.releaser,
                    Target::lock(item.key),
                    &item.token,
                    sent_at,
                    item.lease,
                    sent,
                )
            })
            .collect();
        let mut replies = batches::send(&self.conn, pipe, node.clone(), claim_ticks::script(), sent)
            .await
            .map_err(|e| LockError::redis("claiming scheduler ticks".to_owned(), e));
        // A lost reply (a slow machine, a brief stall) is sent again once with the same tokens,
        // while the leases leave time: the script finds a lock holding its own token only if
        // the lost call took it *and* claimed the tick (it drops a lock whose tick was claimed
        // already), so the tick runs here instead of being claimed by nobody's run.
        let shortest = items.iter().map(|i| i.lease).min().unwrap_or_default();
        if let Err(e) = &replies
            && e.outcome_unknown()
            && sent.generation().is_some()
            && sent_at.elapsed() < shortest / 2
        {
            tracing::debug!(error = %crate::error::ErrorChain(e), claims = items.len(), "a batched claim's reply was lost; sending it again with the same tokens");
            #[cfg(feature = "test-hooks")]
            if let Some(first) = items.first() {
                crate::test_hooks::pass(crate::test_hooks::Point::BeforeClaimResend, first.key).await;
            }
            let again_at = Instant::now();
            for cleanup in &mut cleanups {
                cleanup.sent_again(again_at, again);
            }
            replies =
                batches::send(&self.conn, pipe, node, claim_ticks::script(), again).await.map_err(|e| {
                    LockError::redis("claiming scheduler ticks (sent again after a lost reply)".to_owned(), e)
                });
        }
        let replies = match replies {
            Ok(replies) => replies,
            Err(e) => {
                for cleanup in cleanups {
                    drop(cleanup.failed(e.clone()));
                }
                return Err(e);
            }
        };
        let mut out = Vec::with_capacity(items.len());
        for (call, reply) in calls.iter().zip(replies) {
            decode(reply, call.len(), &mut out);
        }
        // A short reply (it cannot happen) leaves its claims to the single path.
        out.resize_with(items.len(), || ClaimReply::NotRun);
        for ((cleanup, item), reply) in cleanups.into_iter().zip(items).zip(&out) {
            if changed_nothing(reply, &item.token) {
                cleanup.answered_unchanged();
            } else {
                cleanup.disarm();
            }
        }
        Ok(out)
    }
}

/// Whether `reply` (to the only try, or to the second try after a lost reply) says that try
/// changed nothing of the lock, so that a first try still in flight may take it later: found
/// held by another owner, refused with an error reply, or not run. A claim, a lock found
/// holding the token (the first try claimed it) or a claimed tick leave nothing to clean up: a
/// late first try finds the tick claimed and drops the lock it took (`claim_ticks.lua`).
fn changed_nothing(reply: &ClaimReply, token: &str) -> bool {
    match reply {
        ClaimReply::Claimed | ClaimReply::Done(_) => false,
        ClaimReply::Held(holder) => schema::unmarked(holder) != token,
        ClaimReply::NotRun | ClaimReply::Failed(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_reply_that_changed_nothing_keeps_a_first_sends_clean_up() {
        let token = "pod-a:abc:1";
        assert!(!changed_nothing(&ClaimReply::Claimed, token));
        assert!(!changed_nothing(&ClaimReply::Done(7), token), "a late first send finds the tick claimed");
        assert!(!changed_nothing(&ClaimReply::Held(format!("{token}|w")), token), "the first send took it");
        assert!(changed_nothing(&ClaimReply::Held("pod-b:def:2".into()), token));
        assert!(changed_nothing(&ClaimReply::NotRun, token));
        let refused = LockError::InvalidOptions("OOM".into());
        assert!(changed_nothing(&ClaimReply::Failed(refused), token));
    }
}
