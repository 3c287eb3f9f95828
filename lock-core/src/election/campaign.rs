//! The task behind a [`Candidacy`](crate::Candidacy): wait in the election lock's queue (a
//! candidate is a waiter), lead while the lock is held (the watchdog renews it; the guard's
//! `lost()` ends the leadership before anyone else can take the lock), step down by releasing
//! (the lock's hand-off gives it to the next candidate at once), and meanwhile keep the role
//! watch up to date with the leader read from Redis (on an announcement, or every `look`).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::acquire::{Core, Target};
use crate::conn::wake_ups::Ticket;
use crate::election::metrics::ElectionMetrics;
use crate::election::record;
use crate::election::role::{Leader, Role};
use crate::error::{ErrorChain, LossReason, Result};
use crate::held::guard::LockGuard;
use crate::options::LockOptions;

/// How long a candidate waits before campaigning again after an acquisition failed with an
/// error (Redis unreachable for longer than the wait's own retries, a refused command).
const RETRY_AFTER_ERROR: Duration = Duration::from_secs(1);

/// What the handle asks of the task.
pub(crate) enum Command {
    /// Step down if leading and campaign again; replies whether it led and the lock was still
    /// its own when released.
    Resign(oneshot::Sender<Result<bool>>),
    /// Step down if leading and leave.
    Leave(oneshot::Sender<Result<bool>>),
}

/// The state of one member's campaign.
pub(crate) struct Campaign {
    pub(crate) core: Arc<Core>,
    pub(crate) name: String,
    /// How often a follower reads the leader without an announcement.
    pub(crate) look: Duration,
    pub(crate) role: watch::Sender<Role>,
    pub(crate) commands: mpsc::Receiver<Command>,
    pub(crate) metrics: ElectionMetrics,
    /// Since when this member has seen no leader (or since its own leadership ended).
    pub(crate) leaderless_since: Option<Instant>,
}

/// How following ended.
enum Followed {
    Elected(LockGuard),
    Leave,
}

/// A campaign's acquisition, in its own task: the follower's loop awaits reads and
/// subscriptions in its handlers, which must not stall the acquisition (the two share the
/// client's pub/sub connection). Aborted when dropped, which gives the token up (the waiter's
/// own clean-up) or, if it had just won, releases the lock (the guard is dropped).
struct Acquisition(JoinHandle<Result<LockGuard>>);

impl Drop for Acquisition {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Campaign {
    /// Runs until the member leaves (a command, or the handle dropped).
    pub(crate) async fn run(mut self) {
        let span =
            tracing::info_span!("election", election = %self.name, instance = %self.core.config.instance_id);
        async {
            let announcements = self.core.waiters.listen(&record::announce_channel(&self.name));
            if let Err(e) = announcements.ensure_subscribed().await {
                tracing::debug!(error = %ErrorChain(&e), "not subscribed to the election's announcements yet; looking on a timer");
            }
            loop {
                let guard = match self.follow(&announcements).await {
                    Followed::Elected(guard) => guard,
                    Followed::Leave => break,
                };
                if !self.lead(guard).await {
                    break;
                }
            }
            self.role.send_replace(Role::Left);
        }
        .instrument(span)
        .await;
    }

    fn campaign(&self) -> Acquisition {
        let (core, name) = (self.core.clone(), self.name.clone());
        // Fenced, so that every leadership draws a new term; waiting "forever" keeps the
        // candidate's ticket in the queue (each fallback retry renews it).
        let options = LockOptions::new().fencing(true).wait(Duration::MAX);
        Acquisition(tokio::spawn(async move { core.take(Target::lock(&name), options).await }))
    }

    /// Waits in the queue until elected, keeping the role's leader up to date meanwhile.
    async fn follow(&mut self, announcements: &Ticket) -> Followed {
        let mut acquisition = Some(self.campaign());
        let mut retry_at = None;
        let mut next_look = Instant::now();
        loop {
            tokio::select! {
                result = async {
                    match acquisition.as_mut() {
                        Some(acquisition) => (&mut acquisition.0).await,
                        None => std::future::pending().await,
                    }
                }, if acquisition.is_some() => {
                    acquisition = None;
                    match result {
                        Ok(Ok(guard)) => return Followed::Elected(guard),
                        Err(e) => {
                            tracing::error!(error = %e, "the campaign's task failed; trying again");
                            retry_at = Some(Instant::now() + RETRY_AFTER_ERROR);
                        }
                        Ok(Err(e)) => {
                            tracing::warn!(error = %ErrorChain(&e), "campaigning failed; trying again");
                            retry_at = Some(Instant::now() + RETRY_AFTER_ERROR);
                        }
                    }
                }
                () = async { tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)).await }, if retry_at.is_some() => {
                    retry_at = None;
                    acquisition = Some(self.campaign());
                }
                command = self.commands.recv() => match command {
                    Some(Command::Resign(reply)) => drop(reply.send(Ok(false))),
                    Some(Command::Leave(reply)) => {
                        drop(reply.send(Ok(false)));
                        return Followed::Leave;
                    }
                    None => return Followed::Leave,
                },
                _ = announcements.woken() => self.look().await,
                () = tokio::time::sleep_until(next_look) => {
                    if let Err(e) = announcements.ensure_subscribed().await {
                        tracing::debug!(error = %ErrorChain(&e), "re-subscribing to the election's announcements failed");
                    }
                    self.look().await;
                    next_look = Instant::now() + self.look;
                }
            }
        }
    }

    /// Reads the leader and publishes it as this follower's role.
    async fn look(&mut self) {
        match record::read(&self.core, &self.name).await {
            Ok(leader) => self.follow_leader(leader),
            Err(e) => tracing::debug!(error = %ErrorChain(&e), "reading the leader failed"),
        }
    }

    fn follow_leader(&mut self, leader: Option<Leader>) {
        match &leader {
            None => {
                self.leaderless_since.get_or_insert_with(Instant::now);
            }
            Some(_) => self.leaderless_since = None,
        }
        let role = Role::Follower { leader };
        self.role.send_if_modified(|current| {
            let changed = *current != role;
            if changed {
                *current = role;
            }
            changed
        });
    }

    /// Leads while `guard` holds the election's lock. Returns whether to campaign again.
    async fn lead(&mut self, guard: LockGuard) -> bool {
        let Some(term) = guard.fence() else {
            // Fencing was asked for: an acquisition without a fence is a bug; never lead
            // without a term.
            tracing::error!("elected without a term; stepping down");
            drop(guard);
            return true;
        };
        let since = SystemTime::now();
        let leaderless = self.leaderless_since.take().map(|t| t.elapsed());
        self.metrics.elected(term, leaderless);
        self.role.send_replace(Role::Leader { term, since });
        let span = tracing::info_span!("election_lead", term);
        async move {
            tracing::info!("elected leader");
            let lease = guard.lease();
            // The record lives a lease; renewed three times per lease.
            let every = (lease / 3).max(Duration::from_millis(10));
            self.write_record(&guard, term, since, true).await;
            let lost = guard.lost();
            tokio::pin!(lost);
            let mut next_write = Instant::now() + every;
            loop {
                tokio::select! {
                    reason = &mut lost => {
                        self.lost(reason);
                        drop(guard);
                        return true;
                    }
                    command = self.commands.recv() => return match command {
                        Some(Command::Resign(reply)) => {
                            drop(reply.send(self.step_down(guard).await));
                            true
                        }
                        Some(Command::Leave(reply)) => {
                            drop(reply.send(self.step_down(guard).await));
                            false
                        }
                        None => {
                            if let Err(e) = self.step_down(guard).await {
                                tracing::warn!(error = %ErrorChain(&e), "stepping down failed; the lock is released in the background");
                            }
                            false
                        }
                    },
                    () = tokio::time::sleep_until(next_write) => {
                        self.write_record(&guard, term, since, false).await;
                        next_write = Instant::now() + every;
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    async fn write_record(&self, guard: &LockGuard, term: u64, since: SystemTime, announce: bool) {
        if let Err(e) =
            record::write(&self.core, &self.name, (term, since, guard.token()), guard.lease(), announce).await
        {
            tracing::debug!(error = %ErrorChain(&e), "writing the leader record failed");
        }
    }

    /// The leadership ended without a release: the role says so at once (the guard's loss is
    /// known before another member can take the lock).
    fn lost(&mut self, reason: LossReason) {
        tracing::warn!(?reason, "leadership lost");
        self.metrics.stepped_down(true);
        self.leaderless_since = Some(Instant::now());
        self.role.send_replace(Role::Follower { leader: None });
    }

    /// Stops leading, then releases the lock (handed to the oldest live candidate, if any)
    /// and tells followers to look.
    async fn step_down(&mut self, guard: LockGuard) -> Result<bool> {
        // The role changes before the release: nobody here acts as leader once another may.
        self.role.send_replace(Role::Follower { leader: None });
        self.metrics.stepped_down(false);
        self.leaderless_since = Some(Instant::now());
        let released = guard.release().await;
        tracing::info!(?released, "stepped down");
        if let Err(e) = record::announce(&self.core, &self.name).await {
            tracing::debug!(error = %ErrorChain(&e), "announcing the step-down failed");
        }
        released
    }
}
