//! At shutdown: the runs in flight waited for until the grace period's end (or a forced
//! shutdown), the rest cancelled and their locks released.

use std::sync::Arc;

use tokio::time::Instant;

use crate::run;
use crate::running::Running;
use crate::shared::JobEntry;
use crate::timer::Timer;

/// What a run in flight became when the scheduler stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunEnd {
    /// The run finished within the grace period.
    Finished,
    /// The run was cancelled at the deadline; its lock was released.
    Cancelled,
}

/// A job whose run was in flight when the scheduler stopped, and what became of it.
pub(crate) struct RunExit {
    pub(crate) job: Arc<str>,
    pub(crate) end: RunEnd,
}

impl Timer {
    /// At shutdown: waits for the runs in flight until the deadline (which a forced shutdown
    /// moves to now), then cancels the rest. Slots still waiting for their claim grace are
    /// dropped (another replica runs them, or nobody: the scheduler is stopping).
    pub(super) async fn finish_runs(&mut self, mut deadline: Instant) -> Vec<RunExit> {
        // The runs started outside the timer before the stop (no more start after it:
        // `Shared::start_outside_timer`) are in the channel: adopted, so waited for and counted.
        if let Some(commands) = self.commands.as_mut() {
            let mut adopted = Vec::new();
            while let Ok(command) = commands.try_recv() {
                adopted.push(command);
            }
            for command in adopted {
                if matches!(command, crate::shared::Command::Adopt(..)) {
                    self.apply(command);
                }
            }
        }
        let mut pending: Vec<(Arc<JobEntry>, Running)> = std::mem::take(&mut self.orphans);
        for (_, job) in self.jobs.drain() {
            if let Some(run) = job.current {
                pending.push((job.entry, run));
            }
        }
        let mut exits = Vec::new();
        let mut waiting = Vec::new();
        for (entry, run) in pending {
            if run.is_finished() {
                continue;
            }
            if entry.running.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                waiting.push((entry, run));
            } else {
                // Not started (still waiting for its turn): nothing to wait for.
                run::cancel(&self.shared, &entry, run, "shutting down").await;
            }
        }
        if !waiting.is_empty() {
            tracing::debug!(
                runs = waiting.len(),
                "shutting down: waiting up to {:?} for the running jobs",
                deadline.saturating_duration_since(Instant::now())
            );
        }
        let grace_deadline = deadline;
        let mut watching = true;
        while !waiting.is_empty() {
            let any_done =
                futures_util::future::select_all(waiting.iter_mut().map(|(_, run)| &mut run.handle));
            tokio::select! {
                _ = any_done => {
                    waiting.retain(|(entry, run)| {
                        let done = run.is_finished();
                        if done {
                            exits.push(RunExit { job: entry.name.clone(), end: RunEnd::Finished });
                        }
                        !done
                    });
                }
                () = tokio::time::sleep_until(deadline) => break,
                changed = self.state.changed(), if watching => match changed {
                    Ok(()) => deadline = self.state.borrow_and_update().deadline().unwrap_or(deadline),
                    // The handle is gone (its shutdown future was dropped): keep the deadline.
                    Err(_) => watching = false,
                },
            }
        }
        let why = if deadline < grace_deadline {
            "the shutdown was forced"
        } else {
            "the job was still running at the end of the shutdown grace period"
        };
        for (entry, run) in waiting {
            let end = if run::cancel(&self.shared, &entry, run, why).await {
                RunEnd::Cancelled
            } else {
                RunEnd::Finished
            };
            exits.push(RunExit { job: entry.name.clone(), end });
        }
        exits
    }
}
