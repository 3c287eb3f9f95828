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

use crate::batch::ClaimBatch;
use crate::history;
use crate::pause::PauseCheck;
use crate::report::RunOutcome;
use crate::run::{self, Running, Start};
use crate::schedule::{Due, MAX_CATCH_UP, NextSlots};
use crate::shared::{JobEntry, Shared};
use crate::state::State;
use crate::ticks;

/// Longest sleep between readings of the wall clock: a clock step is noticed within this.
const RECHECK: Duration = Duration::from_secs(1);

/// A difference between wall-clock and monotonic time elapsed larger than this is a step of
/// the wall clock (timers fire within milliseconds; a busy runtime delays both clocks alike).
const JUMP: TimeDelta = TimeDelta::milliseconds(500);

/// How often the timer looks at jobs with missed slots to run one after the other.
const BACKLOG_POLL: Duration = Duration::from_millis(50);

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
    /// Keep track of a run started outside the schedule (a "run now" request this replica
    /// took), so that shutdown waits for it, or cancels it, like a slot's run.
    Adopt(Arc<JobEntry>, Running),
}

/// What the timer listens to besides the clock and the scheduler's state.
pub(crate) struct Inputs {
    /// Jobs added and removed.
    pub(crate) commands: mpsc::UnboundedReceiver<Command>,
    /// Jobs whose last claimed tick should be re-read (their runs could not reach Redis).
    pub(crate) resync: mpsc::UnboundedReceiver<Arc<str>>,
}

/// Spawns the timer of a scheduler started at `started`. `floors` are the jobs' first floors
/// (their last claimed ticks, for the slots since then, which nobody ran, to go through the
/// jobs' [`CatchUp`](crate::CatchUp) policies; `started` when unknown), `None` when they
/// could not be read (then each job reads its own in the background).
pub(crate) fn spawn(
    shared: Arc<Shared>,
    jobs: Vec<Arc<JobEntry>>,
    started: DateTime<Utc>,
    floors: Option<Vec<DateTime<Utc>>>,
    state: watch::Receiver<State>,
    inputs: Inputs,
) -> JoinHandle<Vec<RunExit>> {
    let span = tracing::info_span!(parent: None, "scheduler", instance = %shared.instance);
    let (synced_tx, synced) = mpsc::unbounded_channel();
    let (held_tx, held) = mpsc::unbounded_channel();
    let (checked_tx, checked) = mpsc::unbounded_channel();
    let mut timer = Timer {
        anchor: (shared.clock.now(), Instant::now()),
        shared,
        jobs: HashMap::with_capacity(jobs.len()),
        queue: BinaryHeap::with_capacity(jobs.len()),
        seq: 0,
        deferred: VecDeque::new(),
        orphans: Vec::new(),
        state,
        commands: Some(inputs.commands),
        resync: inputs.resync,
        synced_tx,
        synced,
        backlogged: Vec::new(),
        held_tx,
        held,
        held_checks: Vec::new(),
        checked_tx,
        checked,
        next_slots: NextSlots::default(),
    };
    let known = floors.is_some();
    let floors = floors.unwrap_or_default();
    for (i, job) in jobs.into_iter().enumerate() {
        let name = job.name.clone();
        timer.add(job, floors.get(i).copied().unwrap_or(started).min(started));
        if !known {
            timer.start_resync(&name);
        }
    }
    tokio::spawn(timer.drive().instrument(span))
}

/// The first floor of each job: its last claimed tick if older than `started` (at most
/// [`MAX_CATCH_UP`] before it), else `started`. `None` if Redis could not tell.
pub(crate) async fn first_floors(
    shared: &Shared,
    jobs: &[Arc<JobEntry>],
    started: DateTime<Utc>,
) -> Option<Vec<DateTime<Utc>>> {
    let keys: Vec<&str> = jobs.iter().filter_map(|j| j.lock.as_ref().map(|l| l.key.as_str())).collect();
    let lasts = match ticks::last_ticks(&shared.client, &keys).await {
        Ok(lasts) => lasts,
        Err(e) => {
            tracing::warn!(error = %e, "could not read the jobs' last claimed ticks; retrying in the background");
            return None;
        }
    };
    let oldest = started - TimeDelta::from_std(MAX_CATCH_UP).unwrap_or(TimeDelta::MAX);
    let mut lasts = lasts.into_iter();
    Some(
        jobs.iter()
            .map(|job| {
                let last = if job.lock.is_some() { lasts.next().flatten() } else { None };
                match last.and_then(DateTime::from_timestamp_millis) {
                    Some(last) if last < started => last.max(oldest),
                    _ => started,
                }
            })
            .collect(),
    )
}

/// How many times a missed slot is tried again while another replica holds the job's lock
/// (once a second), before it is given up.
const HELD_RETRIES: u32 = 30;

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
    /// Missed slots to run one at a time, oldest first ([`CatchUp::Each`](crate::CatchUp::Each)),
    /// and new slots due meanwhile (after them, to keep ticks in order).
    backlog: VecDeque<DateTime<Utc>>,
    /// The backlog slot of `current`, and how often it was tried.
    catching_up: Option<(DateTime<Utc>, u32)>,
    /// Its last claimed tick is being read.
    resyncing: bool,
}

/// Deferred slots whose claim grace ended, and the last tick claimed with each one's lock (in
/// the same order), if Redis answered.
type Checked = (Vec<Deferred>, Option<Vec<Option<i64>>>);

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
    resync: mpsc::UnboundedReceiver<Arc<str>>,
    /// Last claimed ticks read (job, tick), and their sender (for the reading tasks).
    synced_tx: mpsc::UnboundedSender<(Arc<str>, Option<i64>)>,
    synced: mpsc::UnboundedReceiver<(Arc<str>, Option<i64>)>,
    /// Jobs with a backlog.
    backlogged: Vec<Arc<str>>,
    /// Deferred slots whose lock was found held at their time (job, slot), and their sender.
    held_tx: mpsc::UnboundedSender<(Arc<str>, DateTime<Utc>)>,
    held: mpsc::UnboundedReceiver<(Arc<str>, DateTime<Utc>)>,
    /// Deferred slots of this wake to check for a held lock: (job, slot, lock key).
    held_checks: Vec<(Arc<str>, DateTime<Utc>, String)>,
    /// Deferred slots whose grace ended, with what Redis said of them (`None`: it did not
    /// answer), and their sender.
    checked_tx: mpsc::UnboundedSender<Checked>,
    checked: mpsc::UnboundedReceiver<Checked>,
    /// Next slots of the jobs just fired, shared by jobs on the same schedule.
    next_slots: NextSlots,
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

    /// Queues `entry`'s first slot after `floor`.
    fn add(&mut self, entry: Arc<JobEntry>, floor: DateTime<Utc>) {
        self.seq += 1;
        let name = entry.name.clone();
        let job = Scheduled {
            entry,
            floor,
            seq: self.seq,
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

    /// Reads `name`'s last claimed tick in the background (retrying while Redis does not
    /// answer), for jobs whose lock key the scheduler knows.
    fn start_resync(&mut self, name: &Arc<str>) {
        let Some(job) = self.jobs.get_mut(name) else { return };
        let Some(lock) = job.entry.lock.as_ref() else { return };
        if job.resyncing {
            return;
        }
        job.resyncing = true;
        let (client, key, tx, name) =
            (self.shared.client.clone(), lock.key.clone(), self.synced_tx.clone(), name.clone());
        tokio::spawn(
            async move {
                loop {
                    // Paced: a run that keeps failing asks again at most once a second.
                    tokio::time::sleep(RECHECK).await;
                    match ticks::last_ticks(&client, &[&key]).await {
                        Ok(last) => {
                            let _ = tx.send((name, last.into_iter().next().flatten()));
                            return;
                        }
                        Err(e) => {
                            tracing::debug!(job = %name, error = %e, "could not read the last claimed tick; retrying");
                            if tx.is_closed() {
                                return;
                            }
                        }
                    }
                }
            }
            .in_current_span(),
        );
    }

    /// Moves `name`'s floor back to its last claimed tick (at most [`MAX_CATCH_UP`] ago): the
    /// slots after it, which nobody ran, become due and go through the job's catch-up policy.
    fn apply_resync(&mut self, name: &Arc<str>, last: Option<i64>) {
        let now = self.shared.clock.now();
        let Some(job) = self.jobs.get_mut(name) else { return };
        job.resyncing = false;
        let Some(last) = last.and_then(DateTime::from_timestamp_millis) else { return };
        let oldest = now - TimeDelta::from_std(MAX_CATCH_UP).unwrap_or(TimeDelta::MAX);
        let floor = last.max(oldest);
        if floor < job.floor {
            tracing::debug!(job = %name, last_claimed = %last, "slots since the last claimed tick were not run");
            job.floor = floor;
            // Held-back slots are found again from the new floor, in order.
            job.backlog.clear();
            self.requeue(name);
        }
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
    fn requeue(&mut self, name: &Arc<str>) {
        self.seq += 1;
        let seq = self.seq;
        let Some(job) = self.jobs.get_mut(name) else { return };
        job.seq = seq;
        match self.next_slots.next_after(&job.entry.schedule, job.floor) {
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
        // Filled below; the check starts once every due job is known, and the batch's claims
        // once it is answered.
        let (tx, pause) = PauseCheck::pending();
        let mut batch = ClaimBatch::default();
        let (mut fired, mut due) = (Vec::new(), Vec::new());
        // The slots this wake defers end their grace together: their states are then read, and
        // their claims sent, in one go each, not in as many wakes as firing took milliseconds.
        // Counted from the end of the firing (set below), so none gets less than the grace.
        let deferred_before = self.deferred.len();
        let provisional = Instant::now() + self.shared.claim_grace;
        while let Some(Reverse((slot, seq, _))) = self.queue.peek() {
            if *slot > now {
                break;
            }
            let (slot, seq) = (*slot, *seq);
            let Some(Reverse((_, _, name))) = self.queue.pop() else { break };
            if self.jobs.get(&name).is_none_or(|job| job.seq != seq) {
                continue; // stale: the job was removed or requeued
            }
            if self.fire_job(&name, slot, now, &pause, &mut batch, provisional) {
                fired.push(name.clone());
            }
            due.push(name);
        }
        if self.deferred.len() > deferred_before {
            let grace_end = Instant::now() + self.shared.claim_grace;
            for deferred in self.deferred.iter_mut().skip(deferred_before) {
                deferred.at = grace_end;
            }
        }
        if !fired.is_empty() {
            PauseCheck::answer(tx, self.shared.client.clone(), fired);
        }
        batch.send(self.shared.client.clone(), pause);
        if !self.held_checks.is_empty() {
            let checks = std::mem::take(&mut self.held_checks);
            let (client, tx) = (self.shared.client.clone(), self.held_tx.clone());
            tokio::spawn(
                async move {
                    let keys: Vec<String> = checks.iter().map(|(_, _, key)| key.clone()).collect();
                    let Some(held) = ticks::held_among(&client, &keys).await else { return };
                    for ((job, slot, _), held) in checks.into_iter().zip(held) {
                        if held {
                            let _ = tx.send((job, slot));
                        }
                    }
                }
                .in_current_span(),
            );
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
        batch: &mut ClaimBatch,
        grace_end: Instant,
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
            if !due.earlier.is_empty() {
                // CatchUp::Each: every missed slot, one at a time, oldest first.
                job.backlog.extend(due.earlier);
                job.backlog.push_back(slot);
                if !self.backlogged.contains(name) {
                    self.backlogged.push(name.clone());
                }
                return false;
            }
            slot
        };
        // Behind older missed slots (or, for CatchUp::Each, while the last claimed tick is
        // being read): claiming a newer tick first would make them unclaimable.
        let each = matches!(job.entry.catch_up, crate::CatchUp::Each(_));
        if !job.backlog.is_empty() || (job.resyncing && each) {
            job.backlog.push_back(slot);
            if !self.backlogged.contains(name) {
                self.backlogged.push(name.clone());
            }
            return false;
        }
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
            self.deferred.push_back(Deferred { at: grace_end, job: name.clone(), slot, fired_at: now });
            // A lock held at the slot's time means the slot is skipped (skip-if-held), even if
            // the lock is free by the end of the grace. Not checked for jobs seen to be short
            // (one command each, at the busiest moment).
            if let Some(lock) = &job.entry.lock
                && job.entry.may_be_held.load(std::sync::atomic::Ordering::Relaxed)
            {
                self.held_checks.push((name.clone(), slot, lock.key.clone()));
            }
            return false;
        }
        let start = start_of(&job.entry, slot, pause, batch);
        job.current = Some(run::spawn(&shared, &job.entry, slot, now, start));
        true
    }

    /// A deferred slot whose lock was held at its time: skipped, as the preferred replica
    /// skipped it (or is running it).
    fn skip_held(&mut self, name: &Arc<str>, slot: DateTime<Utc>) {
        let Some(job) = self.jobs.get_mut(name) else { return };
        if job.deferred != Some(slot) {
            return;
        }
        job.deferred = None;
        let tick = slot.with_timezone(&job.entry.schedule.time_zone()).to_rfc3339();
        tracing::info!(
            job = %name,
            tick = %tick,
            outcome = "skipped: held",
            "another instance holds the lock, skipping"
        );
        self.shared.report(&job.entry, slot, slot, RunOutcome::SkippedHeld, Duration::ZERO);
    }

    /// Looks at the slots whose claim grace is over, all in one round trip: the ticks claimed
    /// with their locks (so that the slots the preferred replica ran cost a read each, not a
    /// claim attempt). [`start_checked`](Self::start_checked) goes on with the answer; the
    /// slots stay deferred until then.
    fn start_deferred(&mut self) {
        let now = Instant::now();
        if self.deferred.front().is_none_or(|d| d.at > now) {
            return;
        }
        let mut due = Vec::new();
        while let Some(first) = self.deferred.front()
            && first.at <= now
        {
            let Some(d) = self.deferred.pop_front() else { break };
            if self.jobs.get(&d.job).is_some_and(|job| job.deferred == Some(d.slot)) {
                due.push(d);
            } // else the job was removed, or added again
        }
        if due.is_empty() {
            return;
        }
        let keys: Vec<Option<String>> = due
            .iter()
            .map(|d| {
                self.jobs.get(&d.job).and_then(|job| job.entry.lock.as_ref()).map(|lock| lock.key.clone())
            })
            .collect();
        let (client, tx) = (self.shared.client.clone(), self.checked_tx.clone());
        tokio::spawn(
            async move {
                let keys: Vec<Option<&str>> = keys.iter().map(Option::as_deref).collect();
                let claimed = ticks::claimed_ticks(&client, &keys).await;
                let _ = tx.send((due, claimed));
            }
            .in_current_span(),
        );
    }

    /// Deals with deferred slots as Redis described them: a slot whose tick was claimed (the
    /// preferred replica ran it) is skipped here; the others start (to claim the tick, or be
    /// recorded as paused), their pause flags read together while they start. The flags of
    /// the slots skipped are not read: the preferred replica claimed the tick, so the job was
    /// not paused when the slot fired. Without an answer, every slot starts, and its claim
    /// decides.
    fn start_checked(&mut self, slots: Vec<Deferred>, claimed: Option<Vec<Option<i64>>>) {
        let claimed = claimed.filter(|c| c.len() == slots.len()).unwrap_or_default();
        let (tx, pause) = PauseCheck::pending();
        let mut batch = ClaimBatch::default();
        let mut started = Vec::new();
        let mut claimed = claimed.into_iter();
        for d in slots {
            let last = claimed.next().flatten();
            let Some(job) = self.jobs.get_mut(&d.job) else { continue };
            if job.deferred != Some(d.slot) {
                continue; // removed and added again, or skipped as held meanwhile
            }
            job.deferred = None;
            if last.is_some_and(|last| last >= d.slot.timestamp_millis()) {
                run::skip_done(&self.shared, &job.entry, d.slot, d.fired_at);
                continue;
            }
            let start = start_of(&job.entry, d.slot, &pause, &mut batch);
            job.current = Some(run::spawn(&self.shared, &job.entry, d.slot, d.fired_at, start));
            started.push(d.job);
        }
        if !started.is_empty() {
            PauseCheck::answer(tx, self.shared.client.clone(), started);
        }
        batch.send(self.shared.client.clone(), pause);
    }

    /// Starts the next backlog slot of each job whose previous run is over; a slot refused
    /// because another replica held the lock (running an older missed slot) is tried again.
    fn start_backlogs(&mut self) {
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

/// How the run of `slot` of `job` starts: a job whose lock the scheduler knows is claimed in
/// `batch` (with the wake's other claims), any other claims in its run's first locked section.
fn start_of(job: &Arc<JobEntry>, slot: DateTime<Utc>, pause: &PauseCheck, batch: &mut ClaimBatch) -> Start {
    if job.lock.is_some() {
        Start::Batched(batch.add(job, slot.timestamp_millis()))
    } else {
        Start::Single(pause.clone())
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
        async move {
            // Every replica that comes back finds the same missed slots: one records them.
            if history::first_to_record_missed(&shared_.client, &job_.name, last_missed.timestamp_millis())
                .await
            {
                shared_.record(&job_, last_missed, &recorded, Duration::ZERO).await;
            }
        }
        .in_current_span(),
    );
    shared.report(job, last_missed, now, missed, Duration::ZERO);
}
