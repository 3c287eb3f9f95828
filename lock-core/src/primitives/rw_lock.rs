//! [`RwLock`]: many readers or one writer. The writer's token is the value of the lock's key (as
//! a lock's is); readers are members of a sorted set beside it (`schema::readers_key`). Both
//! share one queue of waiters, so a waiting writer stops new readers from entering and
//! everyone is served in arrival order.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use crate::acquire::section;
use crate::acquire::{Core, Target};
use crate::error::Result;
use crate::held::guard::hold_guard;
use crate::options::LockOptions;
use crate::schema;
use crate::schema::hold::Hold;

/// A distributed read-write lock, from [`LockClient::rw_lock`](crate::LockClient::rw_lock). Cheap to clone.
///
/// Many readers or one writer hold it at a time. WakeUps are served in arrival order across
/// clients; a writer that waits stops readers that arrive after it from entering, so writers
/// are not starved. Re-entrancy is per task, inside a section
/// ([`with_read`](Self::with_read), [`with_write`](Self::with_write) or the attribute): a read
/// or a write inside a write section, and a read inside a read section, are nested holds; a
/// write inside a read section fails at once with [`LockError::WriteInsideRead`](crate::LockError::WriteInsideRead)
/// (it could only wait for itself).
///
/// ```no_run
/// use std::time::Duration;
/// use lock_core::{LockClient, LockOptions};
///
/// # async fn demo(client: LockClient) -> Result<(), lock_core::LockError> {
/// let catalogue = client.rw_lock("rw:catalogue")?;
/// let wait = LockOptions::new().wait(Duration::from_secs(5));
/// let items = catalogue.with_read(wait.clone(), async { /* read the catalogue */ 42 }).await?;
/// catalogue.with_write(wait, async { /* rebuild it */ }).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock {
    core: Arc<Core>,
    name: String,
}

hold_guard! {
    /// A read hold of an [`RwLock`]: other readers may hold it too, no writer can. Given back
    /// on release or drop; renewed, lost and fenced as a [`LockGuard`](crate::LockGuard) is.
    ReadGuard, "read hold"
}

hold_guard! {
    /// The write hold of an [`RwLock`]: no one else holds it. Given back on release or drop;
    /// renewed, lost and fenced as a [`LockGuard`](crate::LockGuard) is.
    WriteGuard, "write hold"
}

impl RwLock {
    /// The read-write lock `name`, validated (see
    /// [`LockClient::rw_lock`](crate::LockClient::rw_lock)).
    pub(crate) fn new(core: Arc<Core>, name: &str) -> Result<Self> {
        schema::validate_key(name)?;
        Ok(RwLock { core, name: name.to_owned() })
    }
}

impl RwLock {
    /// The lock's name (its Redis key).
    pub fn name(&self) -> &str {
        &self.name
    }

    fn target(&self, hold: Hold) -> Target<'_> {
        Target { key: &self.name, hold }
    }

    /// Takes a read hold as `options` say: fail fast by default ([`LockError::Held`](crate::LockError::Held) while a
    /// writer holds it or waits), or wait up to `options.wait`.
    pub async fn read(&self, options: LockOptions) -> Result<ReadGuard> {
        self.core.take(self.target(Hold::Read), options).await.map(ReadGuard)
    }

    /// Takes the write hold as `options` say: fail fast by default ([`LockError::Held`](crate::LockError::Held) while
    /// anyone holds it or waits), or wait up to `options.wait`.
    pub async fn write(&self, options: LockOptions) -> Result<WriteGuard> {
        self.core.take(self.target(Hold::Write), options).await.map(WriteGuard)
    }

    /// Runs `fut` under a read hold, given back on every path (see
    /// [`LockClient::with_lock`](crate::LockClient::with_lock)).
    pub async fn with_read<F: Future>(&self, options: LockOptions, fut: F) -> Result<F::Output> {
        section::run(&self.core, self.target(Hold::Read), options, None, fut).await.result
    }

    /// Runs `fut` under the write hold, given back on every path (see
    /// [`LockClient::with_lock`](crate::LockClient::with_lock)).
    pub async fn with_write<F: Future>(&self, options: LockOptions, fut: F) -> Result<F::Output> {
        section::run(&self.core, self.target(Hold::Write), options, None, fut).await.result
    }
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock").field("name", &self.name).finish()
    }
}
