//! Leader election on the lock's protocol: [`ElectionBuilder`] (from
//! [`LockClient::election`](crate::LockClient::election)) joins an election and returns a
//! [`Candidacy`], whose [`Role`] is watched.
//!
//! A candidate is a waiter in the queue of the election's lock (its name is the lock key); the
//! leader holds the lock, renewed by the watchdog, fenced (the fence is the term). So an
//! election has the lock's guarantees and adds no script: the oldest live candidate is
//! elected when the leader steps down (the release's hand-off), a dead leader is replaced
//! after about its client's liveness TTL, and a leader knows it has lost the lock before any
//! other member can take it. Beside the lock, the leader keeps a record (term, since when)
//! that followers and operators read, see `record`.

mod campaign;
mod metrics;
pub(crate) mod record;
pub(crate) mod role;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use crate::acquire::Core;
use crate::election::campaign::{Campaign, Command};
use crate::election::metrics::ElectionMetrics;
use crate::election::role::Role;
use crate::error::{LockError, Result};
use crate::schema;

/// The default interval at which a follower reads the leader when no announcement came.
pub const DEFAULT_LOOK_INTERVAL: Duration = Duration::from_secs(2);
/// The shortest look interval accepted.
pub const MIN_LOOK_INTERVAL: Duration = Duration::from_millis(50);
/// The longest look interval accepted.
pub const MAX_LOOK_INTERVAL: Duration = Duration::from_secs(60);

/// Joins an election, from [`LockClient::election`](crate::LockClient::election).
///
/// ```no_run
/// use lock_core::{LockClient, Role};
///
/// # async fn demo(client: LockClient) -> Result<(), lock_core::LockError> {
/// let candidacy = client.election("election:orders-consumer").join().await?;
/// let mut role = candidacy.watch();
/// loop {
///     if let Role::Leader { term, .. } = &*role.borrow_and_update() {
///         println!("leading, term {term}");
///     }
///     if role.changed().await.is_err() {
///         break; // the candidacy ended
///     }
/// }
/// # Ok(()) }
/// ```
#[must_use = "an election is joined by `join()`"]
pub struct ElectionBuilder {
    core: Arc<Core>,
    name: String,
    look: Duration,
}

impl ElectionBuilder {
    pub(crate) fn new(core: Arc<Core>, name: &str) -> Self {
        ElectionBuilder { core, name: name.to_owned(), look: DEFAULT_LOOK_INTERVAL }
    }

    /// How often a follower reads who leads when no announcement came (a new leader announces
    /// itself on a channel; this bounds how stale a follower's view gets if that message is
    /// lost). Between [`MIN_LOOK_INTERVAL`] and [`MAX_LOOK_INTERVAL`]; default
    /// [`DEFAULT_LOOK_INTERVAL`]. It does not change how fast a candidate is elected.
    pub fn look_every(mut self, interval: Duration) -> Self {
        self.look = interval;
        self
    }

    /// Checks the name (validated like a lock key: it is the election lock's key) and the
    /// options, as [`join`](Self::join) does.
    pub fn validate(&self) -> Result<()> {
        schema::validate_key(&self.name)?;
        if !(MIN_LOOK_INTERVAL..=MAX_LOOK_INTERVAL).contains(&self.look) {
            return Err(LockError::InvalidOptions(format!(
                "election `{}`: look_every must be between {MIN_LOOK_INTERVAL:?} and {MAX_LOOK_INTERVAL:?}, got {:?}",
                self.name, self.look
            )));
        }
        Ok(())
    }

    /// Joins the election as a candidate: reads who leads (so the returned candidacy's role
    /// names the leader if Redis answered), then campaigns in the background. Must be called
    /// inside a Tokio runtime. Fails only on invalid input ([`LockError::InvalidKey`],
    /// [`LockError::InvalidOptions`]); Redis errors are retried in the background.
    pub async fn join(self) -> Result<Candidacy> {
        self.validate()?;
        let leader = record::read(&self.core, &self.name).await.ok().flatten();
        let (role_tx, role_rx) = watch::channel(Role::Follower { leader: leader.clone() });
        let (commands_tx, commands_rx) = mpsc::channel(4);
        let campaign = Campaign {
            core: self.core.clone(),
            name: self.name.clone(),
            look: self.look,
            role: role_tx,
            commands: commands_rx,
            metrics: ElectionMetrics::new(&self.name),
            leaderless_since: leader.is_none().then(tokio::time::Instant::now),
        };
        tokio::spawn(campaign.run());
        Ok(Candidacy { name: self.name, role: role_rx, commands: commands_tx })
    }
}

impl fmt::Debug for ElectionBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ElectionBuilder").field("name", &self.name).field("look", &self.look).finish()
    }
}

/// This process's membership of an election, from [`ElectionBuilder::join`].
///
/// Its [`Role`] is on a watch channel ([`watch`](Self::watch)). While it leads, the election's
/// lock is held and renewed in the background; the role leaves `Leader` as soon as the lock is
/// known to be lost (a renewal refused, or its deadline passed while Redis was unreachable or
/// the process stalled), which is before any other member can be elected. Dropping the
/// candidacy steps down (the lock is released and handed to the next candidate) and leaves.
#[must_use = "dropping a Candidacy leaves the election at once"]
pub struct Candidacy {
    name: String,
    role: watch::Receiver<Role>,
    commands: mpsc::Sender<Command>,
}

impl Candidacy {
    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A receiver of this member's role, updated when it is elected, steps down, loses the
    /// lock, or sees another leader.
    pub fn watch(&self) -> watch::Receiver<Role> {
        self.role.clone()
    }

    /// The role now.
    pub fn role(&self) -> Role {
        self.role.borrow().clone()
    }

    /// Whether this member leads now.
    pub fn is_leader(&self) -> bool {
        self.role.borrow().is_leader()
    }

    /// The term, while this member leads: a fencing token for the leader's writes.
    pub fn term(&self) -> Option<u64> {
        self.role.borrow().term()
    }

    /// Waits until this member leads, and returns its term; `None` if the candidacy ended
    /// first.
    pub async fn elected(&self) -> Option<u64> {
        let mut role = self.role.clone();
        let result = role.wait_for(|r| r.is_leader() || *r == Role::Left).await;
        result.ok().and_then(|r| r.term())
    }

    /// Steps down if this member leads (the role leaves `Leader` first, then the lock is
    /// released and handed to the oldest live candidate at once) and campaigns again, at the
    /// back of the queue. With no other candidate, this member is elected again with a new
    /// term. Returns whether it led and the lock was still its own when released.
    pub async fn resign(&self) -> Result<bool> {
        self.ask(Command::Resign).await
    }

    /// Steps down if this member leads, and leaves the election. Returns whether it led and the
    /// lock was still its own when released. Call it on shutdown to hand leadership on at once
    /// (dropping the candidacy does the same in the background).
    pub async fn leave(self) -> Result<bool> {
        let result = self.ask(Command::Leave).await;
        let mut role = self.role.clone();
        // The task has stepped down when it replied; the role says `Left` right after.
        let _ = role.wait_for(|r| *r == Role::Left).await;
        result
    }

    async fn ask(&self, command: fn(oneshot::Sender<Result<bool>>) -> Command) -> Result<bool> {
        let (tx, rx) = oneshot::channel();
        if self.commands.send(command(tx)).await.is_err() {
            return Ok(false);
        }
        rx.await.unwrap_or(Ok(false))
    }
}

impl fmt::Debug for Candidacy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Candidacy").field("name", &self.name).field("role", &*self.role.borrow()).finish()
    }
}
