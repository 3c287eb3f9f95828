//! Missed slots run one at a time, oldest first
//! ([`CatchUp::Each`](crate::schedule::catch_up::CatchUp::Each)), with the slots that came due
//! meanwhile queued behind them.

use crate::pause_check::PauseCheck;
use crate::report::RunOutcome;
use crate::run::{self, Start};
use crate::timer::Timer;

/// How many times a missed slot is tried again while another replica holds the job's lock
/// (once a second), before it is given up.
const HELD_RETRIES: u32 = 30;

impl Timer {
    /// Starts the next backlog slot of each job whose previous run is over; a slot refused
    /// because another replica held the lock (running an older missed slot) is tried again.
    pub(super) fn start_backlogs(&mut self) {
        if self.backlogged.is_empty() {
            return;
        }
        let (tx, pause) = PauseCheck::pending();
        let mut started = Vec::new();
        let names = std::mem::take(&mut self.backlogged);
        for name in names {
            let Some(job) = self.jobs.get_mut(&name) else { continue };
            // A deferred slot (its grace running, or its state being read) goes first: its run
            // becomes the job's current one.
            if job.resyncing
                || job.deferred.is_some()
                || job.current.as_ref().is_some_and(|run| !run.is_finished())
            {
                self.backlogged.push(name);
                continue;
            }
            if let (Some((slot, tries)), Some(run)) = (job.catching_up.take(), job.current.as_mut()) {
                let outcome = futures_util::FutureExt::now_or_never(&mut run.handle).and_then(Result::ok);
                if outcome == Some(RunOutcome::SkippedHeld) && tries < HELD_RETRIES {
                    job.backlog.push_front(slot);
                    job.catching_up = Some((slot, tries + 1));
                }
            }
            let Some(slot) = job.backlog.pop_front() else { continue };
            let tries = job.catching_up.take().map_or(0, |(_, tries)| tries);
            job.catching_up = Some((slot, tries));
            let start = Start::Single(pause.clone());
            job.current = Some(run::spawn(&self.shared, &job.entry, slot, self.shared.clock.now(), start));
            started.push(name.clone());
            if !job.backlog.is_empty() || job.catching_up.is_some() {
                self.backlogged.push(name);
            }
        }
        if !started.is_empty() {
            PauseCheck::answer(tx, self.shared.client.clone(), started);
        }
    }
}
