//! The timer's loop: each wake fires what is due, then sleeps until the next slot, the end of a
//! claim grace, or an event (a job added or removed, a read answered, a shutdown).

use std::cmp::Reverse;
use std::time::Duration;

use tokio::time::Instant;

use crate::timer::Timer;
use crate::timer::shutdown::RunExit;

/// Longest sleep between readings of the wall clock: a clock step is noticed within this.
pub(super) const RECHECK: Duration = Duration::from_secs(1);

/// How often the timer looks at jobs with missed slots to run one after the other.
const BACKLOG_POLL: Duration = Duration::from_millis(50);

impl Timer {
    /// Runs the timer until the scheduler stops (then waits for, or cancels, the runs in
    /// flight) or its handle is dropped (then leaves them alone).
    pub(super) async fn drive(mut self) -> Vec<RunExit> {
        loop {
            self.shared.beats.turned();
            let stopping = self.state.borrow().deadline();
            if let Some(deadline) = stopping {
                return self.finish_runs(deadline).await;
            }
            let now = self.shared.clock.now();
            self.notice_jump(now);
            self.fire_due(now);
            self.start_deferred();
            self.start_backlogs();
            // Read again: firing a thousand jobs takes milliseconds, and a wait computed from
            // the time before it would wake that much after the next slot.
            let now = self.shared.clock.now();
            let mut wait = match self.queue.peek() {
                Some(Reverse((next, _, _))) => (*next - now).to_std().unwrap_or_default().min(RECHECK),
                None => RECHECK,
            };
            if let Some(first) = self.deferred.front() {
                wait = wait.min(first.at.saturating_duration_since(Instant::now()));
            }
            if !self.backlogged.is_empty() {
                // Nothing wakes the timer when a catch-up run ends: look again soon.
                wait = wait.min(BACKLOG_POLL);
            }
            let listening = self.commands.is_some();
            let commands = self.commands.as_mut();
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                command = async { commands?.recv().await }, if listening => match command {
                    Some(command) => self.apply(command),
                    None => self.commands = None,
                },
                changed = self.state.changed() => if changed.is_err() {
                    // The handle was dropped: stop firing, leave running jobs alone.
                    return Vec::new();
                },
                Some(job) = self.resync.recv() => self.start_resync(&job),
                Some((job, last)) = self.synced.recv() => self.apply_resync(&job, last),
                Some((job, slot)) = self.held.recv() => self.skip_held(&job, slot),
                Some((slots, states)) = self.checked.recv() => self.start_checked(slots, states),
            }
        }
    }
}
