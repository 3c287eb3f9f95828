//! The timer's set of jobs: jobs added and removed while it runs, runs adopted, and each job's
//! next slot queued.

use std::cmp::Reverse;
use std::collections::VecDeque;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::schedule::truncate;
use crate::shared::{Command, JobEntry};
use crate::timer::{Scheduled, Timer};

impl Timer {
    /// Queues `entry`'s first slot after `floor`.
    pub(super) fn add(&mut self, entry: Arc<JobEntry>, floor: DateTime<Utc>) {
        self.seq += 1;
        let name = entry.name.clone();
        let job = Scheduled {
            entry,
            floor,
            seq: self.seq,
            next_slot: None,
            current: None,
            deferred: None,
            backlog: VecDeque::new(),
            catching_up: None,
            resyncing: false,
        };
        if let Some(old) = self.jobs.insert(name.clone(), job) {
            self.orphan(old);
        }
        self.requeue(&name);
    }

    /// Applies a change to the set of jobs.
    pub(super) fn apply(&mut self, command: Command) {
        match command {
            Command::Add(entry) => {
                tracing::info!(job = %entry.name, schedule = %entry.schedule, "job added");
                self.add(entry, truncate(self.shared.clock.now()));
            }
            Command::Remove(name) => {
                if let Some(job) = self.jobs.remove(&name) {
                    tracing::info!(job = %name, "job removed");
                    self.orphan(job);
                }
            }
            Command::Adopt(entry, run) => {
                self.orphans.retain(|(_, run)| !run.is_finished());
                self.orphans.push((entry, run));
            }
        }
    }

    /// Keeps the run in flight of a job that is no longer scheduled.
    fn orphan(&mut self, job: Scheduled) {
        self.orphans.retain(|(_, run)| !run.is_finished());
        if let Some(run) = job.current.filter(|run| !run.is_finished()) {
            self.orphans.push((job.entry, run));
        }
    }

    /// Queues the first slot after `name`'s floor (a new entry; the previous one goes stale).
    pub(super) fn requeue(&mut self, name: &Arc<str>) {
        self.seq += 1;
        let seq = self.seq;
        let Some(job) = self.jobs.get_mut(name) else { return };
        job.seq = seq;
        // Slots before the job's start are not its own: as if dealt with.
        if let Some(start) = job.entry.start_at {
            job.floor = job.floor.max(start - chrono::TimeDelta::milliseconds(1));
        }
        match self.next_slots.next_after(&job.entry.schedule, job.floor) {
            Some(next) if job.entry.end_at.is_some_and(|end| next.with_timezone(&Utc) > end) => {
                job.next_slot = None;
                tracing::info!(job = %name, "the job's end time has passed: it will not run again");
            }
            Some(next) => {
                let next = next.with_timezone(&Utc);
                job.next_slot = Some(next);
                // Fired its jitter after the slot: the same delay on every replica.
                self.queue.push(Reverse((next + job.entry.jitter(next), seq, name.clone())));
            }
            None => tracing::warn!(
                job = %name,
                "the schedule has no further fire times; the job will not run again"
            ),
        }
    }
}
