//! [`Semaphore`]: at most N holders at once, each holding a [`PermitGuard`]. A permit is a hold
//! like a lock's (renewed by the watchdog, capped by the client's liveness lease, fenced,
//! handed to the oldest waiter), kept as a member of a sorted set named by the semaphore.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use crate::acquire::section;
use crate::acquire::{Core, Target};
use crate::error::{LockError, Result};
use crate::held::guard::hold_guard;
use crate::options::LockOptions;
use crate::schema;
use crate::schema::hold::Hold;
use crate::schema::permit_count::PermitCount;

/// A distributed counting semaphore of a fixed number of permits, from
/// [`LockClient::semaphore`](crate::LockClient::semaphore). Cheap to clone.
///
/// Every caller of one semaphore must declare the same number of permits: a caller that
/// declares another while it is in use gets [`LockError::PermitsMismatch`], never a silent
/// over-admission. The number is stored only while a permit is held or a waiter queues, so an
/// idle semaphore can be redeclared.
///
/// ```no_run
/// use std::time::Duration;
/// use lock_core::{LockClient, LockOptions};
///
/// # async fn demo(client: LockClient) -> Result<(), lock_core::LockError> {
/// let exports = client.semaphore("sem:partner-exports", 4)?;
/// let permit = exports.acquire(LockOptions::new().wait(Duration::from_secs(30))).await?;
/// // ... at most four replicas' tasks are here at once ...
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    core: Arc<Core>,
    name: String,
    permits: u32,
}

hold_guard! {
    /// One permit of a [`Semaphore`], held until released or dropped (dropping releases it in the
    /// background at once). The same proof of ownership as a [`LockGuard`](crate::LockGuard):
    /// renewed by the watchdog, [`lost`](Self::lost) when a renewal is refused or the local
    /// deadline passes, and [`fence`](Self::fence)d when fencing was asked for (fences strictly
    /// increase per semaphore).
    PermitGuard, "permit"
}

impl Semaphore {
    /// The semaphore `name` of `permits` permits, validated (see
    /// [`LockClient::semaphore`](crate::LockClient::semaphore)).
    pub(crate) fn new(core: Arc<Core>, name: &str, permits: u32) -> Result<Self> {
        schema::validate_key(name)?;
        if permits == 0 {
            return Err(LockError::InvalidOptions(format!(
                "semaphore `{name}` needs at least one permit (got 0)"
            )));
        }
        Ok(Semaphore { core, name: name.to_owned(), permits })
    }
}

impl Semaphore {
    /// The semaphore's name (its Redis key).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number of permits it was declared with.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    fn target(&self) -> Target<'_> {
        Target { key: &self.name, hold: Hold::Permit { permits: self.permits } }
    }

    /// Takes a permit as `options` say: fail fast by default ([`LockError::Held`] when every
    /// permit is taken, or when waiters are queued: they are served first), or wait up to
    /// `options.wait`. Waiting is the locks' waiting: no polling, one wake-up per release, the
    /// oldest waiter across clients first. Permits never nest: a task that holds one and asks
    /// again takes a second.
    pub async fn acquire(&self, options: LockOptions) -> Result<PermitGuard> {
        self.core.take(self.target(), options).await.map(PermitGuard)
    }

    /// Takes a permit (per `options`), runs `fut` while holding it, and gives it back on every
    /// path (completion, panic, cancellation), as [`LockClient::with_lock`](crate::LockClient::with_lock) does for a lock;
    /// `options.on_lost` decides what a loss does to `fut`.
    pub async fn with_permit<F: Future>(&self, options: LockOptions, fut: F) -> Result<F::Output> {
        section::run(&self.core, self.target(), options, None, fut).await.result
    }

    /// How many permits are free now (declared minus held and not lapsed; a permit of a crashed
    /// holder counts as held until its lease runs out or a caller takes it over). One round
    /// trip, read only. [`LockError::PermitsMismatch`] if the semaphore is in use with another
    /// number of permits.
    pub async fn available(&self) -> Result<u32> {
        let eval = PermitCount { name: &self.name }.eval();
        let reply = self
            .core
            .conn
            .invoke(&eval, || format!("counting the permits of semaphore `{}`", self.name))
            .await?;
        let (declared, taken) = PermitCount::decode(reply);
        if let Some(declared) = declared.filter(|d| *d != self.permits) {
            return Err(LockError::PermitsMismatch {
                name: self.name.clone(),
                permits: self.permits,
                declared,
            });
        }
        Ok(self.permits.saturating_sub(taken))
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore").field("name", &self.name).field("permits", &self.permits).finish()
    }
}
