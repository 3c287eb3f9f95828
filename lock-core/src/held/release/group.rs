//! Grouped releases: the holders' own releases of locks taken by a batched tick claim
//! ([`ClaimedTick::run`](crate::tick::ClaimedTick::run)) go out together, one pipeline per
//! Redis node of `release_own_many.lua` calls. A release sends at once when no group went out
//! in the last [`GROUP_INTERVAL`]; otherwise it waits for the next group, sent that long after
//! the last one. A burst of runs ending (a scheduler's slot of short jobs) then costs at most
//! one round trip per node per interval whatever the number of runs, and a lone release no
//! delay.

use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::redis::{self, Value};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::conn::Sent;
use crate::conn::batches;
use crate::conn::deploy::slots::Node;
use crate::error::{LockError, Result};
use crate::held::release::{Pending, Releaser};
use crate::held::unsettled::Settles;
use crate::schema::hold::Hold;
use crate::schema::release::ReleaseOwn;
use crate::schema::release_own_many::ReleaseOwnMany;
use crate::sync::lock_unpoisoned;

/// Least time between two groups of releases: how long a release in a burst may wait for the
/// others (its lock stays held that much longer), and what bounds the round trips of a burst.
pub(crate) const GROUP_INTERVAL: Duration = Duration::from_millis(10);

impl Releaser {
    /// `release_own.lua`'s reply for `token` on `key` (1, 0 or -1), sent with the releases
    /// grouped with it. A lost reply gives the token up in the background.
    pub(crate) async fn release_own_grouped(
        self: &Arc<Self>,
        key: &str,
        token: &str,
        lease: Duration,
        sent_at: Instant,
    ) -> Result<Value> {
        let (reply, answer) = oneshot::channel();
        let pending = Pending { key: key.to_owned(), token: token.to_owned(), lease, sent_at, reply };
        let lead = {
            let mut group = lock_unpoisoned(&self.group);
            group.pending.push(pending);
            !std::mem::replace(&mut group.sending, true)
        };
        // Sent from a task of its own: a caller that gives up waiting must not strand the group.
        if lead && !self.spawn(|releaser| async move { releaser.send_groups().await }) {
            // No runtime: nothing can send it.
            let mut group = lock_unpoisoned(&self.group);
            group.sending = false;
            group.pending.clear();
        }
        answer.await.unwrap_or_else(|_| {
            Err(LockError::redis(
                format!("releasing lock `{key}`"),
                redis::RedisError::from(std::io::Error::other("the release group was dropped")),
            ))
        })
    }

    /// Sends the pending releases, group after group (at least [`GROUP_INTERVAL`] apart),
    /// until none is left.
    async fn send_groups(self: Arc<Self>) {
        loop {
            let next = lock_unpoisoned(&self.group).last_sent.map(|at| at + GROUP_INTERVAL);
            if let Some(next) = next.filter(|next| *next > Instant::now()) {
                tokio::time::sleep_until(next).await;
            }
            let pending = {
                let mut group = lock_unpoisoned(&self.group);
                if group.pending.is_empty() {
                    group.sending = false;
                    return;
                }
                group.last_sent = Some(Instant::now());
                std::mem::take(&mut group.pending)
            };
            let nodes = self.conn.split_by_node(pending, |p| &p.key).await;
            let sends = nodes.into_iter().map(|(node, pending)| self.send_group(node, pending));
            futures_util::future::join_all(sends).await;
        }
    }

    /// One pipeline of grouped releases to `node` (or the single node); each caller gets its
    /// own reply.
    async fn send_group(self: &Arc<Self>, node: Option<Node>, mut pending: Vec<Pending>) {
        let calls = batches::calls(&mut pending, node.is_some(), |p| &p.key, |_| ());
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for call in &calls {
            let releases: Vec<(&str, &str)> =
                pending[call.clone()].iter().map(|p| (p.key.as_str(), p.token.as_str())).collect();
            ReleaseOwnMany { releases: &releases }.push(&mut pipe);
        }
        let sent = Sent::default();
        match batches::send(&self.conn, &pipe, node, ReleaseOwnMany::script(), &sent).await {
            Ok(replies) => {
                let mut pending = pending.into_iter();
                for (call, reply) in calls.iter().zip(replies) {
                    let group: Vec<Pending> = pending.by_ref().take(call.len()).collect();
                    self.answer(group, reply).await;
                }
                // A short reply (it cannot happen): those go one by one.
                for p in pending {
                    self.answer(vec![p], Err(redis::RedisError::from(std::io::Error::other("no reply"))))
                        .await;
                }
            }
            Err(e) => {
                let e = LockError::redis("releasing locks".to_owned(), e);
                for p in pending {
                    if e.outcome_unknown() {
                        self.abandon(
                            (&p.key, Hold::Lock, &p.token),
                            p.sent_at,
                            p.lease,
                            Settles::Once,
                            false,
                        );
                    }
                    let _ = p.reply.send(Err(e.clone()));
                }
            }
        }
    }

    /// Hands one call's reply to its callers; a call that failed on the server (a cluster
    /// redirection, a key of the wrong type) is sent again for each of them on its own.
    async fn answer(self: &Arc<Self>, group: Vec<Pending>, reply: redis::RedisResult<Value>) {
        if let Ok(Value::Array(values)) = &reply
            && values.len() == group.len()
        {
            for (p, value) in group.into_iter().zip(values.iter()) {
                let _ = p.reply.send(Ok(value.clone()));
            }
            return;
        }
        for p in group {
            let own = ReleaseOwn { key: &p.key, token: &p.token }.eval();
            let result = self.send_once((&p.key, Hold::Lock, &p.token), &own, p.sent_at, p.lease).await;
            let _ = p.reply.send(result);
        }
    }
}
