//! A background task spawned when first needed, and again when the one before has gone (its
//! runtime shut down, it panicked): what the watchdog's renewals and the holdings record share.

use std::future::Future;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::task::JoinHandle;

use crate::sync::lock_unpoisoned;

/// The handle of at most one running task, aborted when this is dropped.
#[derive(Debug, Default)]
pub(crate) struct Background {
    task: Mutex<Option<JoinHandle<()>>>,
    /// Whether the task runs: raised when it is spawned, lowered when its future is dropped
    /// (it ended, panicked, or its runtime shut down). Read on every call of `ensure` instead
    /// of locking `task`.
    running: Arc<AtomicBool>,
}

impl Background {
    /// Spawns `task` (given the flag that must live in its future) unless it already runs.
    pub(crate) fn ensure<F>(&self, task: impl FnOnce(RunningFlag) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if self.running.load(Ordering::Acquire) {
            return;
        }
        let mut handle = lock_unpoisoned(&self.task);
        // Raised before the spawn: the flag moves into the future, whose drop (a runtime
        // shutting down, a failed spawn) lowers it again.
        if !self.running.load(Ordering::Acquire) {
            self.running.store(true, Ordering::Release);
            *handle = Some(tokio::spawn(task(RunningFlag(self.running.clone()))));
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(task) = lock_unpoisoned(&self.task).take() {
            task.abort();
        }
    }
}

/// Lowers the running flag when the task's future is dropped, however it ends.
pub(crate) struct RunningFlag(Arc<AtomicBool>);

impl Drop for RunningFlag {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}
