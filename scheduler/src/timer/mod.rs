//! The one timer task of a scheduler: every job's next slot in a queue ordered by time, a
//! single sleep until the earliest, each due slot fired as a run on its own task.
//!
//! A job's next slot is computed when the job is added and after each of its slots fires,
//! never while idle: an idle job costs nothing but its place in the queue. The timer wakes at
//! least every [`RECHECK`](wake::RECHECK) to compare the wall clock with the monotonic one; a
//! step of the wall clock (a suspended VM, an NTP correction) recomputes every job's next slot.
//!
//! The [`Timer`] is built here; its work is spread over the children, one concern each:
//! - [`wake`]: the loop that sleeps until the next slot or event and dispatches it;
//! - [`jobs`]: jobs added and removed, and each one's next slot queued;
//! - [`fire`]: the due slots of a wake fired (their missed slots reported, their claims
//!   batched), or deferred for replicas that are not preferred;
//! - [`deferred`]: deferred slots after their claim grace, skipped if the preferred replica ran
//!   them, started otherwise;
//! - [`backlog`]: missed slots run one at a time
//!   ([`CatchUp::Each`](crate::schedule::catch_up::CatchUp::Each));
//! - [`resync`]: the last claimed ticks read back, so the slots nobody ran go through the
//!   catch-up policy;
//! - [`clock_jump`]: wall-clock steps noticed;
//! - [`shutdown`]: runs in flight waited for, or cancelled, when the scheduler stops.

mod backlog;
mod clock_jump;
mod deferred;
mod fire;
pub(crate) mod jobs;
pub(crate) mod resync;
pub(crate) mod shutdown;
mod wake;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::running::Running;
use crate::schedule::next_slots::NextSlots;
use crate::shared::Command;
use crate::shared::{JobEntry, Shared};
use crate::state::State;
use crate::timer::deferred::{Checked, Deferred};
use crate::timer::shutdown::RunExit;

/// What the timer listens to besides the clock and the scheduler's state.
pub(crate) struct Inputs {
    /// Jobs added and removed.
    pub(crate) commands: mpsc::UnboundedReceiver<Command>,
    /// Jobs whose last claimed tick should be re-read (their runs could not reach Redis).
    pub(crate) resync: mpsc::UnboundedReceiver<Arc<str>>,
}

/// Spawns the timer of a scheduler started at `started`. `floors` are the jobs' first floors
/// (their last claimed ticks, for the slots since then, which nobody ran, to go through the
/// jobs' [`CatchUp`](crate::schedule::catch_up::CatchUp) policies; `started` when unknown),
/// `None` when they could not be read (then each job reads its own in the background).
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
    let beats = timer.shared.beats.clone();
    let drive = async move {
        let exits = timer.drive().await;
        beats.stopped();
        exits
    };
    tokio::spawn(drive.instrument(span))
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
    /// The slot its live queue entry fires (the entry's time is the slot plus its jitter).
    next_slot: Option<DateTime<Utc>>,
    current: Option<Running>,
    /// A slot this replica is not preferred for, waiting for the claim grace to try it.
    deferred: Option<DateTime<Utc>>,
    /// Missed slots to run one at a time, oldest first
    /// ([`CatchUp::Each`](crate::schedule::catch_up::CatchUp::Each)), and new slots due
    /// meanwhile (after them, to keep ticks in order).
    backlog: VecDeque<DateTime<Utc>>,
    /// The backlog slot of `current`, and how often it was tried.
    catching_up: Option<(DateTime<Utc>, u32)>,
    /// Its last claimed tick is being read.
    resyncing: bool,
}

/// The timer's state: the jobs, their queued slots, the slots deferred and backlogged, and the
/// channels its background reads answer on.
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
