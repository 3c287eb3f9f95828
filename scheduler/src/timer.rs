//! The one timer task of a scheduler: every job's next slot in a queue ordered by time, a
//! single sleep until the earliest, each due slot fired as a run on its own task.
//!
//! A job's next slot is computed when the job is added and after each of its slots fires,
//! never while idle: an idle job costs nothing but its place in the queue. The timer wakes at
//! least every [`RECHECK`] to compare the wall clock with the monotonic one; a step of the
//! wall clock (a suspended VM, an NTP correction) recomputes every job's next slot.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::control::PauseCheck;
use crate::report::RunOutcome;
use crate::run::{self, Running};
use crate::schedule::Due;
use crate::scheduler::{JobEntry, Shared, State};

/// Longest sleep between readings of the wall clock: a clock step is noticed within this.
const RECHECK: Duration = Duration::from_secs(1);

/// A difference between wall-clock and monotonic time elapsed larger than this is a step of
/// the wall clock (timers fire within milliseconds; a busy runtime delays both clocks alike).
const JUMP: TimeDelta = TimeDelta::milliseconds(500);

/// Slots are whole seconds, so a slot found less than this late is the only one due (and it
/// is on time: [`ON_TIME`](crate::ON_TIME) is a second too).
const ONLY_DUE: TimeDelta = TimeDelta::seconds(1);

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
        deferred: VecDeque::new(),
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
    /// A slot this replica is not preferred for, waiting for the claim grace to try it.
    deferred: Option<DateTime<Utc>>,
}

/// A slot to try once the claim grace is over (if the preferred replica has not run it).
struct Deferred {
    at: Instant,
    job: Arc<str>,
    slot: DateTime<Utc>,
    fired_at: DateTime<Utc>,
}

struct Timer {
    shared: Arc<Shared>,
    jobs: HashMap<Arc<str>, Scheduled>,
    /// (next slot, seq, job): the earliest slot on top.
    queue: BinaryHeap<Reverse<Queued>>,
    seq: u64,
    /// Slots waiting for the claim grace, oldest first (the grace is the same for all, so
    /// they are in time order too).
    deferred: VecDeque<Deferred>,
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
            self.start_deferred();
            let mut wait = match self.queue.peek() {
                Some(Reverse((next, _, _))) => (*next - now).to_std().unwrap_or_default().min(RECHECK),
                None => RECHECK,
            };
            if let Some(first) = self.deferred.front() {
                wait = wait.min(first.at.saturating_duration_since(Instant::now()));
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
            }
        }
    }

    /// Queues `entry`'s first slot after `floor`.
    fn add(&mut self, entry: Arc<JobEntry>, floor: DateTime<Utc>) {
        self.seq += 1;
        let name = entry.name.clone();
        let job = Scheduled { entry, floor, seq: self.seq, current: None, deferred: None };
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

    /// Fires every job whose queued slot is due. Their pause flags are read together, in one
    /// round trip, while their runs start.
    fn fire_due(&mut self, now: DateTime<Utc>) {
        let Some(Reverse((first, _, _))) = self.queue.peek() else { return };
        if *first > now {
            return;
        }
        // Filled below; the check starts once every due job is known.
        let (tx, pause) = PauseCheck::pending();
        let (mut fired, mut due) = (Vec::new(), Vec::new());
        while let Some(Reverse((slot, seq, _))) = self.queue.peek() {
            if *slot > now {
                break;
            }
            let (slot, seq) = (*slot, *seq);
            let Some(Reverse((_, _, name))) = self.queue.pop() else { break };
            if self.jobs.get(&name).is_none_or(|job| job.seq != seq) {
                continue; // stale: the job was removed or requeued
            }
            if self.fire_job(&name, slot, now, &pause) {
                fired.push(name.clone());
            }
            due.push(name);
        }
        if !fired.is_empty() {
            PauseCheck::answer(tx, self.shared.client.clone(), fired);
        }
        // Next slots only once every due run is on its way: they are what costs CPU here.
        for name in due {
            self.requeue(&name);
        }
    }

    /// Deals with `name`'s slots in `(floor, now]`: reports those missed, fires the one to run.
    /// Returns whether a run started.
    fn fire_job(
        &mut self,
        name: &Arc<str>,
        queued: DateTime<Utc>,
        now: DateTime<Utc>,
        pause: &PauseCheck,
    ) -> bool {
        let shared = self.shared.clone();
        let Some(job) = self.jobs.get_mut(name) else { return false };
        let slot = if now - queued < ONLY_DUE {
            // The queued slot is the first after the floor, and the next one is at least a
            // second after it: it is the only one due, and on time.
            job.floor = queued;
            queued
        } else {
            let Some(due) = job.entry.schedule.due(job.floor, now, job.entry.catch_up) else { return false };
            job.floor = due.floor;
            report_missed(&shared, &job.entry, &due, now);
            let Some(slot) = due.run else { return false };
            slot
        };
        let busy = match (&job.current, job.deferred) {
            (_, Some(waiting)) => Some(waiting),
            (Some(running), None) if !running.is_finished() => Some(running.slot),
            _ => None,
        };
        if let Some(busy) = busy {
            let local = |t: DateTime<Utc>| t.with_timezone(&job.entry.schedule.time_zone()).to_rfc3339();
            tracing::info!(
                job = %name,
                tick = %local(slot),
                running_tick = %local(busy),
                outcome = "skipped: still running",
                "the previous run is still running on this instance, skipping this tick"
            );
            shared.report(&job.entry, slot, now, RunOutcome::SkippedStillRunning, Duration::ZERO);
            return false;
        }
        // The preferred replica claims at once, the others after the grace: a live preferred
        // replica wins; a dead or slow one costs the grace, never the tick. A job known to take
        // no lock runs everywhere anyway: no point waiting.
        let preferred = job.entry.warned_unlocked.load(std::sync::atomic::Ordering::Relaxed)
            || shared.members.preferred(name, slot.timestamp_millis());
        if !preferred && !shared.claim_grace.is_zero() {
            job.deferred = Some(slot);
            let at = Instant::now() + shared.claim_grace;
            self.deferred.push_back(Deferred { at, job: name.clone(), slot, fired_at: now });
            return false;
        }
        job.current = Some(run::spawn(&shared, &job.entry, slot, now, pause.clone()));
        true
    }

    /// Starts the runs whose claim grace is over, their pause flags read together.
    fn start_deferred(&mut self) {
        let now = Instant::now();
        if self.deferred.front().is_none_or(|d| d.at > now) {
            return;
        }
        let (tx, pause) = PauseCheck::pending();
        let mut started = Vec::new();
        while let Some(first) = self.deferred.front()
            && first.at <= now
        {
            let Some(d) = self.deferred.pop_front() else { break };
            let Some(job) = self.jobs.get_mut(&d.job) else { continue };
            if job.deferred != Some(d.slot) {
                continue; // the job was removed and added again
            }
            job.deferred = None;
            job.current = Some(run::spawn(&self.shared, &job.entry, d.slot, d.fired_at, pause.clone()));
            started.push(d.job);
        }
        if !started.is_empty() {
            PauseCheck::answer(tx, self.shared.client.clone(), started);
        }
    }

    /// At shutdown: waits for the runs in flight until the deadline (which a forced shutdown
    /// moves to now), then cancels the rest. Slots still waiting for their claim grace are
    /// dropped (another replica runs them, or nobody: the scheduler is stopping).
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
