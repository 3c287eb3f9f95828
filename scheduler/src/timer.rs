//! The one timer task of a scheduler: every job's next slot in a queue ordered by time, a
//! single sleep until the earliest, each due slot fired as a run on its own task.
//!
//! A job's next slot is computed when the job is added and after each of its slots fires,
//! never while idle: an idle job costs nothing but its place in the queue. The timer wakes at
//! least every [`RECHECK`] to compare the wall clock with the monotonic one; a step of the
//! wall clock (a suspended VM, an NTP correction) recomputes every job's next slot.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::report::RunOutcome;
use crate::run::{self, Running};
use crate::schedule::Due;
use crate::scheduler::{JobEntry, Shared, State};

/// Longest sleep between readings of the wall clock: a clock step is noticed within this.
const RECHECK: Duration = Duration::from_secs(1);

/// A difference between wall-clock and monotonic time elapsed larger than this is a step of
/// the wall clock (timers fire within milliseconds; a busy runtime delays both clocks alike).
const JUMP: TimeDelta = TimeDelta::milliseconds(500);

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

/// Changes to the set of jobs of a running scheduler.
pub(crate) enum Command {
    /// Schedule a (validated) job from now on.
    Add(Arc<JobEntry>),
    /// Stop scheduling a job; its run in flight, if any, goes on (and is waited for at
    /// shutdown).
    Remove(Arc<str>),
}

/// Spawns the timer of a scheduler whose slots before `started` are not its own.
pub(crate) fn spawn(
    shared: Arc<Shared>,
    jobs: Vec<Arc<JobEntry>>,
    started: DateTime<Utc>,
    state: watch::Receiver<State>,
    commands: mpsc::UnboundedReceiver<Command>,
) -> JoinHandle<Vec<RunExit>> {
    let span = tracing::info_span!(parent: None, "scheduler", instance = %shared.instance);
    let mut timer = Timer {
        anchor: (shared.clock.now(), Instant::now()),
        shared,
        jobs: HashMap::with_capacity(jobs.len()),
        queue: BinaryHeap::with_capacity(jobs.len()),
        seq: 0,
        orphans: Vec::new(),
        state,
        commands: Some(commands),
    };
    for job in jobs {
        timer.add(job, started);
    }
    tokio::spawn(timer.drive().instrument(span))
}

/// A queue entry: a job's next slot, the job's `seq` when it was queued, the job.
type Queued = (DateTime<Utc>, u64, Arc<str>);

/// One job as the timer sees it.
struct Scheduled {
    entry: Arc<JobEntry>,
    /// Every slot up to `floor` has been dealt with; slots before the start are not ours.
    floor: DateTime<Utc>,
    /// Identifies this job's live entry in the queue (older entries are stale).
    seq: u64,
    current: Option<Running>,
}

struct Timer {
    shared: Arc<Shared>,
    jobs: HashMap<Arc<str>, Scheduled>,
    /// (next slot, seq, job): the earliest slot on top.
    queue: BinaryHeap<Reverse<Queued>>,
    seq: u64,
    /// Runs in flight of removed jobs, waited for at shutdown.
    orphans: Vec<(Arc<JobEntry>, Running)>,
    /// Wall and monotonic time at the last reading, to notice wall-clock steps.
    anchor: (DateTime<Utc>, Instant),
    state: watch::Receiver<State>,
    /// `None` once the handle (the sender) is gone.
    commands: Option<mpsc::UnboundedReceiver<Command>>,
}

impl Timer {
    async fn drive(mut self) -> Vec<RunExit> {
        loop {
            let stopping = self.state.borrow().deadline();
            if let Some(deadline) = stopping {
                return self.finish_runs(deadline).await;
            }
            let now = self.shared.clock.now();
            self.notice_jump(now);
            self.fire_due(now);
            let wait = match self.queue.peek() {
                Some(Reverse((next, _, _))) => (*next - now).to_std().unwrap_or_default().min(RECHECK),
                None => RECHECK,
            };
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
            }
        }
    }

    /// Queues `entry`'s first slot after `floor`.
    fn add(&mut self, entry: Arc<JobEntry>, floor: DateTime<Utc>) {
        self.seq += 1;
        let name = entry.name.clone();
        let job = Scheduled { entry, floor, seq: self.seq, current: None };
        if let Some(old) = self.jobs.insert(name.clone(), job) {
            self.orphan(old);
        }
        self.requeue(&name);
    }

    fn apply(&mut self, command: Command) {
        match command {
            Command::Add(entry) => {
                tracing::info!(job = %entry.name, schedule = %entry.schedule, "job added");
                self.add(entry, crate::schedule::truncate(self.shared.clock.now()));
            }
            Command::Remove(name) => {
                if let Some(job) = self.jobs.remove(&name) {
                    tracing::info!(job = %name, "job removed");
                    self.orphan(job);
                }
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
    fn requeue(&mut self, name: &Arc<str>) {
        self.seq += 1;
        let seq = self.seq;
        let Some(job) = self.jobs.get_mut(name) else { return };
        job.seq = seq;
        match job.entry.schedule.next_after(job.floor) {
            Some(next) => self.queue.push(Reverse((next.with_timezone(&Utc), seq, name.clone()))),
            None => tracing::warn!(
                job = %name,
                "the schedule has no further fire times; the job will not run again"
            ),
        }
    }

    /// Recomputes every job's next slot if the wall clock stepped since the last reading.
    fn notice_jump(&mut self, now: DateTime<Utc>) {
        let mono = Instant::now();
        let (wall_then, mono_then) = self.anchor;
        self.anchor = (now, mono);
        let elapsed = TimeDelta::from_std(mono - mono_then).unwrap_or(TimeDelta::MAX);
        let step = (now - wall_then) - elapsed;
        if step.abs() <= JUMP {
            return;
        }
        tracing::warn!(
            step_ms = step.num_milliseconds(),
            "the wall clock stepped; recomputing every job's next slot"
        );
        self.queue.clear();
        let names: Vec<Arc<str>> = self.jobs.keys().cloned().collect();
        for name in names {
            self.requeue(&name);
        }
    }

    /// Fires every job whose queued slot is due.
    fn fire_due(&mut self, now: DateTime<Utc>) {
        while let Some(Reverse((slot, seq, _))) = self.queue.peek() {
            if *slot > now {
                break;
            }
            let seq = *seq;
            let Some(Reverse((_, _, name))) = self.queue.pop() else { break };
            if self.jobs.get(&name).is_none_or(|job| job.seq != seq) {
                continue; // stale: the job was removed or requeued
            }
            self.fire_job(&name, now);
            self.requeue(&name);
        }
    }

    /// Deals with `name`'s slots in `(floor, now]`: reports those missed, fires the one to run.
    fn fire_job(&mut self, name: &Arc<str>, now: DateTime<Utc>) {
        let shared = self.shared.clone();
        let Some(job) = self.jobs.get_mut(name) else { return };
        let Some(due) = job.entry.schedule.due(job.floor, now, job.entry.catch_up) else { return };
        job.floor = due.floor;
        report_missed(&shared, &job.entry, &due, now);
        let Some(slot) = due.run else { return };
        if let Some(running) = job.current.as_ref()
            && !running.is_finished()
        {
            let local = |t: DateTime<Utc>| t.with_timezone(&job.entry.schedule.time_zone()).to_rfc3339();
            tracing::info!(
                job = %name,
                tick = %local(slot),
                running_tick = %local(running.slot),
                outcome = "skipped: still running",
                "the previous run is still running on this instance, skipping this tick"
            );
            shared.report(&job.entry, slot, now, RunOutcome::SkippedStillRunning, Duration::ZERO);
            return;
        }
        // The preferred replica claims at once, the others after the grace: a live preferred
        // replica wins; a dead or slow one costs the grace, never the tick. A job known to take
        // no lock runs everywhere anyway: no point waiting.
        let preferred = job.entry.warned_unlocked.load(std::sync::atomic::Ordering::Relaxed)
            || shared.members.preferred(name, slot.timestamp_millis());
        let delay = if preferred { Duration::ZERO } else { shared.claim_grace };
        job.current = Some(run::spawn(&shared, &job.entry, slot, now, delay));
    }

    /// At shutdown: waits for the runs in flight until the deadline (which a forced shutdown
    /// moves to now), then cancels the rest. Runs still waiting for their turn to claim are
    /// dropped at once.
    async fn finish_runs(&mut self, mut deadline: Instant) -> Vec<RunExit> {
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
            if entry.running.load(std::sync::atomic::Ordering::SeqCst) {
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

/// Logs, records and reports the slots of `due` that were missed.
fn report_missed(shared: &Arc<Shared>, job: &Arc<JobEntry>, due: &Due, now: DateTime<Utc>) {
    let Some(last_missed) = due.last_missed.filter(|_| due.missed > 0) else { return };
    tracing::warn!(
        job = %job.name,
        missed = due.missed,
        last_missed = %last_missed.with_timezone(&job.schedule.time_zone()).to_rfc3339(),
        "{} slot(s) could not run on time and were not run (catch-up policy: {:?})",
        due.missed,
        job.catch_up
    );
    let missed = RunOutcome::Missed(due.missed);
    let (shared_, job_) = (shared.clone(), job.clone());
    let recorded = missed.clone();
    tokio::spawn(
        async move { shared_.record(&job_, last_missed, &recorded, Duration::ZERO).await }.in_current_span(),
    );
    shared.report(job, last_missed, now, missed, Duration::ZERO);
}
