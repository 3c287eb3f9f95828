//! The randomized fault schedule ("nemesis", tests/nemesis.rs): what its worker processes
//! record, and the checker that proves from that history alone that no safety property broke.
//!
//! Every worker (`src/bin/nemesis_worker.rs`) prints one [`Event`] per line on stdout, stamped
//! with the machine's wall clock in µs (one machine, one clock), and the test adds the faults it
//! injects. A hold's *window* runs from its first to its last [`What::Valid`] event, each
//! stamped *before* the `is_held()` that answered true: every instant of a window was covered
//! by the client's own belief that it held the resource, so windows that break the resource's
//! rule (two holders of a lock, a reader beside a writer, more permits than declared) are
//! violations, however the processes were paused or cut off.
//!
//! The test also samples the locks' keys in Redis ([`What::Observed`]): a key held by a token
//! for longer than [`Bounds::orphan`] after that token's hold ended (or by a token no hold
//! ever had), while its process could reach Redis, is an orphan: a lock nobody can use.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The workers' liveness TTL: how long a dead or cut-off client keeps what it holds at most.
pub const LIVENESS_TTL: Duration = Duration::from_secs(1);
/// The workers' watchdog lease.
pub const WATCHDOG_LEASE: Duration = Duration::from_secs(2);
/// The workers' command timeout (some injected delays are longer).
pub const COMMAND_TIMEOUT: Duration = Duration::from_millis(250);
/// The permits of the nemesis semaphore.
pub const PERMITS: u32 = 2;
/// The exclusive locks the workers contend for.
pub const LOCKS: [&str; 2] = ["nemesis:lock:0", "nemesis:lock:1"];
/// The semaphore.
pub const SEMAPHORE: &str = "nemesis:sem";
/// The read-write lock.
pub const RW_LOCK: &str = "nemesis:rw";
/// The scheduled job's lock.
pub const JOB_LOCK: &str = "nemesis:job";

/// A deliberately broken worker (`nemesis_worker`'s mode): each must be flagged by [`check`],
/// or the checker proves nothing about the bug it stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Canary {
    /// Takes locks with a plain `SET` (no `NX`): two holders at once.
    NoNx,
    /// Trusts a lock until it releases it, never asking `is_held()`: a lock its lost liveness
    /// gave away is still used.
    IgnoreLiveness,
    /// Releases with a plain `DEL`, not checking it still owns the key.
    NoOwnerCheck,
    /// Runs the job at every tick on every replica, claiming nothing.
    NoTickClaim,
    /// Loses every other job-tick: one replica runs the even seconds' ticks only.
    LosesTicks,
}

impl Canary {
    /// Every canary.
    pub const ALL: [Canary; 5] =
        [Canary::NoNx, Canary::IgnoreLiveness, Canary::NoOwnerCheck, Canary::NoTickClaim, Canary::LosesTicks];

    /// Its name on `nemesis_worker`'s command line.
    pub fn name(self) -> &'static str {
        match self {
            Canary::NoNx => "no-nx",
            Canary::IgnoreLiveness => "ignore-liveness",
            Canary::NoOwnerCheck => "no-owner-check",
            Canary::NoTickClaim => "no-tick-claim",
            Canary::LosesTicks => "loses-ticks",
        }
    }

    /// The canary named `name`.
    pub fn parse(name: &str) -> Option<Canary> {
        Canary::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// The fault kind of a Redis restart without persistence: every key is lost (locks, queues,
/// fence counters, liveness keys, tick claims).
pub const WIPE: &str = "redis-wipe";

/// Noise added to the window a restart without persistence may cost (stamps on a loaded
/// machine).
const WIPE_NOISE: Duration = Duration::from_millis(250);

/// Now, in µs since the epoch (the clock every process of the run shares).
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// How a resource is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// A lock (exclusive).
    Lock,
    /// A semaphore's permit (at most [`PERMITS`] at once).
    Permit,
    /// A read hold (shared with readers, never beside a writer).
    Read,
    /// A write hold (exclusive).
    Write,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Lock => "lock",
            Mode::Permit => "permit",
            Mode::Read => "read",
            Mode::Write => "write",
        }
    }

    fn parse(s: &str) -> Option<Mode> {
        [Mode::Lock, Mode::Permit, Mode::Read, Mode::Write].into_iter().find(|m| m.name() == s)
    }

    /// Whether holds of these two modes on one resource exclude each other.
    fn excludes(self, other: Mode) -> bool {
        !matches!((self, other), (Mode::Permit, Mode::Permit) | (Mode::Read, Mode::Read))
    }
}

/// What happened. (Fields: the resource's name, the hold's mode, fence (0: unfenced), id (one
/// per hold of a worker) and owner token, the job-tick, the fault's kind, target and duration
/// in ms.)
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum What {
    /// `acquire` returned hold `id` of `resource` with `fence`, owned by `token`.
    Acquired { resource: String, mode: Mode, fence: u64, id: u64, token: String },
    /// `is_held()` answered true for hold `id` (stamped before it was asked).
    Valid { resource: String, id: u64 },
    /// The holder is about to send the release of hold `id`.
    Released { resource: String, id: u64 },
    /// The test read `resource`'s key in Redis: held by `token` (its queue mark dropped), or
    /// free (`-`).
    Observed { resource: String, token: String },
    /// An acquisition wrapped in a deadline was cancelled by it (an impatient caller).
    Cancelled { resource: String },
    /// An acquisition failed (held until its wait ran out, or an error).
    Failed { resource: String, reason: String },
    /// The scheduled job's body started for `tick`.
    Tick { tick: i64 },
    /// The worker's scheduler reported its run of `tick` (that ran here) `ms` late
    /// (`RunReport::lateness`).
    Late { tick: i64, ms: u64 },
    /// The worker was told to shut down (SIGTERM received), stamped before it asked its
    /// scheduler to stop.
    Shutdown,
    /// The test injected a fault on `target` (a worker, or `redis`), for `ms`.
    Fault { kind: String, target: String, ms: u64 },
}

/// One line of the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// When, µs since the epoch.
    pub at_us: u64,
    /// The worker (instance id) or `test`.
    pub who: String,
    /// What happened.
    pub what: What,
}

impl Event {
    /// The worker's wire form (without `who`, which the reader adds): `<µs> <kind> <fields>`.
    pub fn line(at_us: u64, what: &What) -> String {
        match what {
            What::Acquired { resource, mode, fence, id, token } => {
                format!("{at_us} acq {resource} {} {fence} {id} {token}", mode.name())
            }
            What::Valid { resource, id } => format!("{at_us} valid {resource} {id}"),
            What::Released { resource, id } => format!("{at_us} rel {resource} {id}"),
            What::Observed { resource, token } => format!("{at_us} observed {resource} {token}"),
            What::Cancelled { resource } => format!("{at_us} cancelled {resource}"),
            What::Failed { resource, reason } => {
                format!("{at_us} failed {resource} {}", reason.replace('\n', " "))
            }
            What::Tick { tick } => format!("{at_us} tick {tick}"),
            What::Late { tick, ms } => format!("{at_us} late {tick} {ms}"),
            What::Shutdown => format!("{at_us} shutdown"),
            What::Fault { kind, target, ms } => format!("{at_us} fault {kind} {target} {ms}"),
        }
    }

    /// Parses [`Event::line`]'s form; `None` for any other line.
    pub fn parse(who: &str, line: &str) -> Option<Event> {
        let mut f = line.split(' ');
        let at_us = f.next()?.parse().ok()?;
        let kind = f.next()?;
        let mut text = || f.next().map(str::to_owned);
        let what = match kind {
            "acq" => What::Acquired {
                resource: text()?,
                mode: Mode::parse(&text()?)?,
                fence: text()?.parse().ok()?,
                id: text()?.parse().ok()?,
                token: text()?,
            },
            "valid" => What::Valid { resource: text()?, id: text()?.parse().ok()? },
            "rel" => What::Released { resource: text()?, id: text()?.parse().ok()? },
            "observed" => What::Observed { resource: text()?, token: text()? },
            "cancelled" => What::Cancelled { resource: text()? },
            "failed" => {
                let resource = text()?;
                What::Failed { resource, reason: line.splitn(4, ' ').nth(3).unwrap_or("").to_owned() }
            }
            "tick" => What::Tick { tick: text()?.parse().ok()? },
            "late" => What::Late { tick: text()?.parse().ok()?, ms: text()?.parse().ok()? },
            "shutdown" => What::Shutdown,
            "fault" => What::Fault { kind: text()?, target: text()?, ms: text()?.parse().ok()? },
            _ => return None,
        };
        Some(Event { at_us, who: who.to_owned(), what })
    }
}

/// A write a worker attempted on the fenced store, in the order the store received them:
/// every attempt, whether the store accepted it or refused it as stale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreWrite {
    /// When the store received it, µs since the epoch.
    pub at_us: u64,
    /// The resource written under.
    pub resource: String,
    /// The writer's fence.
    pub fence: u64,
    /// The writer.
    pub who: String,
    /// Whether the store accepted it (its fence was not older than the newest it accepted).
    pub accepted: bool,
}

/// The bounds the checker holds the history to.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// How long after a holder was killed or cut off (for longer than the liveness TTL)
    /// another process must have taken its lock.
    pub take_back: Duration,
    /// The longest a resource may go without a new acquisition while workers contend for it.
    pub stall: Duration,
    /// The longest a lock's key may hold a token after that token's hold ended (or a token no
    /// hold ever had: a reservation for a waiter that left), while its process reaches Redis.
    pub orphan: Duration,
    /// How far from every fault a job-tick's slot must be for the tick to be due: it must then
    /// run (once). Covers the claim grace, a late timer on a loaded machine, and the recovery
    /// after the fault (a replacement replica starting, clients reconnecting).
    pub tick_quiet: Duration,
}

/// What the checker found: the figures, and every violation.
#[derive(Debug, Default)]
pub struct Report {
    /// Acquisitions, by mode.
    pub acquisitions: BTreeMap<&'static str, usize>,
    /// Cancelled (impatient) acquisitions.
    pub cancelled: usize,
    /// Failed acquisitions.
    pub failed: usize,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, usize>,
    /// Pairs of faults that were in force at the same time.
    pub overlapping_faults: usize,
    /// Holds taken before a restart without persistence and still believed after it (within
    /// what README allows), and job-ticks run again after one: what those restarts cost.
    pub lost_to_wipes: usize,
    /// Writes the store accepted.
    pub writes: usize,
    /// Writes the workers attempted (accepted or refused as stale).
    pub attempted_writes: usize,
    /// Holds whose validity was checked at least once (they have a window), by mode: what
    /// the exclusion property had to compare.
    pub windows: BTreeMap<&'static str, usize>,
    /// Job-ticks run.
    pub ticks: usize,
    /// Job-ticks whose slot was far from every fault: each had to run.
    pub ticks_due: usize,
    /// Workers told to shut down.
    pub shutdowns: usize,
    /// Reported latenesses compared with their run's start.
    pub lateness_checked: usize,
    /// The longest take-back measured (ms), by fault kind.
    pub take_back_ms: BTreeMap<String, u64>,
    /// The longest gap between two acquisitions of one resource (ms).
    pub longest_gap_ms: u64,
    /// Samples of the locks' keys taken.
    pub observations: usize,
    /// The longest a key held a token after its hold ended, outside fault windows (ms).
    pub longest_leftover_ms: u64,
    /// Every property broken, each with the events that show it.
    pub violations: Vec<String>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let acquisitions: usize = self.acquisitions.values().sum();
        write!(
            f,
            "{acquisitions} acquisitions {:?}, {} cancelled, {} failed; ",
            self.acquisitions, self.cancelled, self.failed
        )?;
        let faults: usize = self.faults.values().sum();
        write!(f, "{faults} faults {:?}, {} overlapping pairs; ", self.faults, self.overlapping_faults)?;
        write!(f, "windows {:?}; ", self.windows)?;
        write!(
            f,
            "{} fenced writes accepted of {} attempted, {} job-ticks ({} due, away from faults); ",
            self.writes, self.attempted_writes, self.ticks, self.ticks_due
        )?;
        write!(f, "take-back max ms {:?}, longest gap {} ms; ", self.take_back_ms, self.longest_gap_ms)?;
        write!(f, "{} key samples, longest leftover {} ms; ", self.observations, self.longest_leftover_ms)?;
        write!(f, "{} lost to restarts without persistence; ", self.lost_to_wipes)?;
        write!(f, "{} shutdowns, {} latenesses checked; ", self.shutdowns, self.lateness_checked)?;
        write!(f, "violations: {}", self.violations.len())
    }
}

/// One hold, from its events.
#[derive(Debug, Clone)]
struct Hold {
    who: String,
    resource: String,
    mode: Mode,
    fence: u64,
    id: u64,
    token: String,
    acquired_us: u64,
    released_us: Option<u64>,
    window: Option<(u64, u64)>,
}

/// Checks the history: exclusion of windows (per mode), fences (unique per resource, and
/// increasing along every pair of fenced holds that exclude each other), the writes the
/// workers attempted on the store (each fence one writer's; a write refused as stale only
/// after a newer fence was drawn; the accepted ones never going back), job-ticks (each run at
/// most once), take-backs after a holder was killed or cut off, stalls, and orphaned keys.
pub fn check(events: &[Event], store: &[StoreWrite], bounds: Bounds) -> Report {
    let mut report = Report::default();
    let holds = holds(events, &mut report);
    report.overlapping_faults = overlapping_faults(events);
    for h in holds.iter().filter(|h| h.window.is_some()) {
        *report.windows.entry(h.mode.name()).or_default() += 1;
    }
    let wiped = wipe_windows(events);
    exclusion(&holds, &wiped, &mut report);
    fences(&holds, &mut report);
    store_order(store, &holds, &mut report);
    ticks(events, &wiped, &mut report);
    missed_ticks(events, bounds, &mut report);
    started_after_shutdown(events, &mut report);
    lateness(events, &mut report);
    take_backs(events, &holds, bounds, &mut report);
    stalls(&holds, bounds, &mut report);
    orphans(events, &holds, bounds, &mut report);
    report.writes = store.iter().filter(|w| w.accepted).count();
    report.attempted_writes = store.len();
    report
}

fn holds(events: &[Event], report: &mut Report) -> Vec<Hold> {
    let mut holds: Vec<Hold> = Vec::new();
    let mut index: HashMap<(String, String, u64), usize> = HashMap::new();
    for e in events {
        match &e.what {
            What::Acquired { resource, mode, fence, id, token } => {
                *report.acquisitions.entry(mode.name()).or_default() += 1;
                let at = holds.len();
                holds.push(Hold {
                    who: e.who.clone(),
                    resource: resource.clone(),
                    mode: *mode,
                    fence: *fence,
                    id: *id,
                    token: token.clone(),
                    acquired_us: e.at_us,
                    released_us: None,
                    window: None,
                });
                if index.insert((e.who.clone(), resource.clone(), *id), at).is_some() {
                    report.violations.push(format!("{} acquired {resource} twice as hold {id}", e.who));
                }
            }
            What::Valid { resource, id } => match index.get(&(e.who.clone(), resource.clone(), *id)) {
                Some(&i) => {
                    let w = holds[i].window.get_or_insert((e.at_us, e.at_us));
                    w.0 = w.0.min(e.at_us);
                    w.1 = w.1.max(e.at_us);
                }
                None => {
                    report.violations.push(format!("{} valid on {resource} hold {id} never acquired", e.who))
                }
            },
            What::Released { resource, id } => {
                if let Some(&i) = index.get(&(e.who.clone(), resource.clone(), *id)) {
                    holds[i].released_us = Some(e.at_us);
                }
            }
            What::Cancelled { .. } => report.cancelled += 1,
            What::Failed { .. } => report.failed += 1,
            What::Fault { kind, .. } => *report.faults.entry(kind.clone()).or_default() += 1,
            What::Observed { .. } => report.observations += 1,
            What::Tick { .. } | What::Late { .. } | What::Shutdown => {}
        }
    }
    holds
}

/// One restart without persistence, in µs: when Redis was stopped, when it was back (at the
/// earliest: the stop plus its `ms` down), and when what it may cost ends.
#[derive(Debug, Clone, Copy)]
struct Wipe {
    start: u64,
    back: u64,
    end: u64,
}

/// What a restart without persistence may cost, measured: from Redis's stop until the liveness
/// TTL after it is back (its `ms` down), plus noise. Redis forgets every lock and liveness key,
/// and a holder learns that its locks are gone when it next reaches Redis (its reconnection's
/// liveness check, or its next renewal: at most the TTL after the last one, made before the
/// stop). Until then a lock taken *before* the restart is still believed (README: the holder
/// learns at its next renewal) while another client takes it anew. A lock taken *after* Redis
/// is back is not part of that cost: the client checks its liveness key on reconnecting,
/// before any command, so no lock carries a forgotten identity and none can be taken over
/// while its holder lives. Hand-offs included: a waiter named by a release holds the lock only
/// once its next try's reply confirms it, so a hand-off counts from that reply like any
/// acquisition (the message alone, which may come after the restart, is never taken as the
/// lock). Overlaps with a hold taken before the restart, and job-ticks run
/// again, inside such a window are counted, not flagged; everything else is.
fn wipe_windows(events: &[Event]) -> Vec<Wipe> {
    let allowed = u64::try_from((LIVENESS_TTL + WIPE_NOISE).as_micros()).unwrap_or(u64::MAX);
    events
        .iter()
        .filter_map(|e| match &e.what {
            What::Fault { kind, ms, .. } if kind == WIPE => {
                let back = e.at_us + ms * 1000;
                Some(Wipe { start: e.at_us, back, end: back + allowed })
            }
            _ => None,
        })
        .collect()
}

/// Whether an overlap of `a` and `b` from `from` to `to` (µs) is what a restart without
/// persistence may cost: it lies inside the restart's window and one of the two was taken
/// before Redis was back (so it was held across the restart, which Redis forgot).
fn excused_by_wipe(wipes: &[Wipe], a: &Hold, b: &Hold, from: u64, to: u64) -> bool {
    wipes.iter().any(|w| w.start <= from && to <= w.end && (a.acquired_us < w.back || b.acquired_us < w.back))
}

/// Whether a job-tick run again, last at `last` (µs), is what a restart without persistence may
/// cost: the last run came inside its window (the tick's claim was forgotten).
pub fn rerun_after_wipe(events: &[Event], last: u64) -> bool {
    wipe_windows(events).into_iter().any(|w| w.start <= last && last <= w.end)
}

fn by_resource(holds: &[Hold]) -> BTreeMap<&str, Vec<&Hold>> {
    let mut map: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for h in holds {
        map.entry(h.resource.as_str()).or_default().push(h);
    }
    map
}

fn describe(h: &Hold) -> String {
    let what = format!("{} {} hold {} fence {}", h.who, h.mode.name(), h.id, h.fence);
    match h.window {
        Some((s, e)) => format!("{what} valid {s}..{e}"),
        None => format!("{what} (never checked valid)"),
    }
}

fn exclusion(holds: &[Hold], wiped: &[Wipe], report: &mut Report) {
    for (resource, mut hs) in by_resource(holds) {
        hs.retain(|h| h.window.is_some());
        hs.sort_by_key(|h| h.window.map(|w| w.0));
        // Each window against the ones that start before it ends.
        let mut permits_at_once = 0;
        for (i, a) in hs.iter().enumerate() {
            let Some((_, a_end)) = a.window else { continue };
            let mut concurrent_permits = 1;
            for b in &hs[i + 1..] {
                let Some((b_start, _)) = b.window else { continue };
                if b_start >= a_end {
                    break;
                }
                if a.mode.excludes(b.mode) {
                    let b_end = b.window.map_or(b_start, |w| w.1);
                    if excused_by_wipe(wiped, a, b, b_start, a_end.min(b_end)) {
                        report.lost_to_wipes += 1;
                    } else {
                        report.violations.push(format!(
                            "{resource}: {} overlaps {}",
                            describe(a),
                            describe(b)
                        ));
                    }
                } else if a.mode == Mode::Permit {
                    concurrent_permits += 1;
                }
            }
            permits_at_once = permits_at_once.max(concurrent_permits);
        }
        // Counting the windows that overlap `a` from the right bounds the permits held at
        // `a`'s end only from above; an exact count needs a sweep.
        if permits_at_once > PERMITS {
            let mut points: Vec<(u64, i32, usize)> = Vec::new();
            for (i, h) in hs.iter().enumerate().filter(|(_, h)| h.mode == Mode::Permit) {
                if let Some((s, e)) = h.window {
                    points.push((s, 1, i));
                    points.push((e, -1, i));
                }
            }
            // At one instant ends come before starts: windows are closed but µs stamps from
            // different processes that touch are not evidence of an overlap.
            points.sort_by_key(|&(t, d, _)| (t, d));
            let (mut held, mut worst) = (0, 0);
            let mut active: Vec<usize> = Vec::new();
            for (t, d, i) in points {
                held += d;
                if d > 0 {
                    active.push(i);
                } else {
                    active.retain(|&j| j != i);
                }
                // Excused only while a permit taken before Redis was back is among them.
                let across = |w: &Wipe| {
                    w.start <= t && t <= w.end && active.iter().any(|&j| hs[j].acquired_us < w.back)
                };
                if held > i32::try_from(PERMITS).unwrap_or(i32::MAX) && wiped.iter().any(across) {
                    report.lost_to_wipes += 1;
                    continue;
                }
                worst = worst.max(held);
            }
            if worst > i32::try_from(PERMITS).unwrap_or(i32::MAX) {
                report
                    .violations
                    .push(format!("{resource}: {worst} permits held at once (declared {PERMITS})"));
            }
        }
    }
}

fn fences(holds: &[Hold], report: &mut Report) {
    for (resource, mut hs) in by_resource(holds) {
        // Unfenced holds (fence 0) draw no fence.
        hs.retain(|h| h.fence > 0);
        let mut seen: HashMap<u64, &Hold> = HashMap::new();
        for h in &hs {
            if let Some(other) = seen.insert(h.fence, h) {
                report.violations.push(format!(
                    "{resource}: fence {} issued twice: {} and {}",
                    h.fence,
                    describe(other),
                    describe(h)
                ));
            }
        }
        // Holds that exclude each other are ordered by their windows; their fences must be too.
        let mut windowed: Vec<&&Hold> = hs.iter().filter(|h| h.window.is_some()).collect();
        windowed.sort_by_key(|h| h.window.map(|w| w.0));
        for (i, a) in windowed.iter().enumerate() {
            for b in &windowed[i + 1..] {
                if a.mode.excludes(b.mode) && a.fence >= b.fence {
                    report.violations.push(format!(
                        "{resource}: fences out of order: {} before {}",
                        describe(a),
                        describe(b)
                    ));
                }
            }
        }
    }
}

/// The writes the workers attempted, in the store's order. The store itself refuses a fence
/// older than the newest it accepted, so what it kept proves little; what was attempted is
/// checked instead: each fence is one writer's (two holders given one fence would both be
/// believed), and a write refused as stale comes from a holder that was superseded (a hold of
/// another writer with a newer fence had been acquired before the refused write arrived),
/// never from a holder whose fence the store had no reason to refuse.
fn store_order(store: &[StoreWrite], holds: &[Hold], report: &mut Report) {
    let mut last: HashMap<&str, &StoreWrite> = HashMap::new();
    let mut writer: HashMap<(&str, u64), &str> = HashMap::new();
    for w in store {
        if let Some(other) = writer.insert((&w.resource, w.fence), &w.who)
            && other != w.who
        {
            report
                .violations
                .push(format!("{}: fence {} written by {other} and {}", w.resource, w.fence, w.who));
        }
        if !w.accepted {
            let superseded = holds.iter().any(|h| {
                h.resource == w.resource && h.fence > w.fence && h.who != w.who && h.acquired_us <= w.at_us
            });
            if !superseded {
                report.violations.push(format!(
                    "{}: the store refused fence {} ({}) at {} though no newer fence had been drawn",
                    w.resource, w.fence, w.who, w.at_us
                ));
            }
            continue;
        }
        if let Some(prev) = last.get(w.resource.as_str())
            && w.fence < prev.fence
        {
            report.violations.push(format!(
                "{}: the store accepted fence {} ({}) after {} ({})",
                w.resource, w.fence, w.who, prev.fence, prev.who
            ));
        }
        last.insert(&w.resource, w);
    }
}

fn ticks(events: &[Event], wipes: &[Wipe], report: &mut Report) {
    let mut runs: HashMap<i64, Vec<(&str, u64)>> = HashMap::new();
    for e in events {
        if let What::Tick { tick } = e.what {
            runs.entry(tick).or_default().push((&e.who, e.at_us));
        }
    }
    report.ticks = runs.len();
    let mut twice: Vec<_> = runs.iter().filter(|(_, who)| who.len() > 1).collect();
    twice.sort();
    for (tick, who) in twice {
        let last = who.iter().map(|w| w.1).max().unwrap_or(0);
        if wipes.iter().any(|w| w.start <= last && last <= w.end) {
            report.lost_to_wipes += 1;
            continue;
        }
        let who: Vec<&str> = who.iter().map(|w| w.0).collect();
        report.violations.push(format!("job-tick {tick} ran {} times: {who:?}", who.len()));
    }
}

/// No run starts on a replica after it was told to shut down: a worker's job-tick stamped after
/// its own `shutdown` event is a violation.
fn started_after_shutdown(events: &[Event], report: &mut Report) {
    let mut told: HashMap<&str, u64> = HashMap::new();
    for e in events {
        if e.what == What::Shutdown {
            let at = told.entry(&e.who).or_insert(e.at_us);
            *at = (*at).min(e.at_us);
        }
    }
    report.shutdowns = told.len();
    for e in events {
        if let What::Tick { tick } = e.what
            && let Some(&at) = told.get(e.who.as_str())
            && e.at_us > at
        {
            report.violations.push(format!(
                "job-tick {tick} started on {} {} ms after it was told to shut down",
                e.who,
                (e.at_us - at) / 1000
            ));
        }
    }
}

/// How much the reported lateness may fall short of the start delay the worker measured: the
/// two clock readings around the body's call.
pub const LATENESS_SLACK_MS: i64 = 5;

/// The lateness a replica reports for a run (`RunReport::lateness`, the start-lag metric) is at
/// least the delay from the slot to its body's start, less [`LATENESS_SLACK_MS`]: a wait before
/// the body (the claim grace, the lock) is never hidden.
fn lateness(events: &[Event], report: &mut Report) {
    let mut started: HashMap<(&str, i64), u64> = HashMap::new();
    for e in events {
        if let What::Tick { tick } = e.what {
            started.entry((&e.who, tick)).or_insert(e.at_us);
        }
    }
    for e in events {
        let What::Late { tick, ms } = e.what else { continue };
        let Some(&at_us) = started.get(&(e.who.as_str(), tick)) else { continue };
        report.lateness_checked += 1;
        let delay_ms = i64::try_from(at_us / 1000).unwrap_or(i64::MAX) - tick;
        let reported = i64::try_from(ms).unwrap_or(i64::MAX);
        if reported < delay_ms - LATENESS_SLACK_MS {
            report.violations.push(format!(
                "job-tick {tick} on {}: reported {reported} ms late, its body started {delay_ms} ms after its slot",
                e.who
            ));
        }
    }
}

/// Exactly once, the other half: every second's job-tick whose slot was at least
/// [`Bounds::tick_quiet`] away from every fault (before it began, after it ended) must have
/// run. Slots run from the first tick recorded to the last event of a worker, less the quiet
/// margin (the workers are stopped at the end).
fn missed_ticks(events: &[Event], bounds: Bounds, report: &mut Report) {
    let quiet_us = u64::try_from(bounds.tick_quiet.as_micros()).unwrap_or(u64::MAX);
    let ran: std::collections::HashSet<i64> = events
        .iter()
        .filter_map(|e| match e.what {
            What::Tick { tick } => Some(tick),
            _ => None,
        })
        .collect();
    let Some(&first) = ran.iter().min() else { return };
    let Some(last_us) = events.iter().filter(|e| e.who != "test").map(|e| e.at_us).max() else { return };
    let faults: Vec<(u64, u64)> = events
        .iter()
        .filter_map(|e| match &e.what {
            What::Fault { ms, .. } => {
                Some((e.at_us.saturating_sub(quiet_us), e.at_us + ms * 1000 + quiet_us))
            }
            _ => None,
        })
        .collect();
    let end_ms = i64::try_from(last_us.saturating_sub(quiet_us) / 1000).unwrap_or(i64::MAX);
    let mut slot = first;
    while slot <= end_ms {
        let at_us = u64::try_from(slot).unwrap_or(0) * 1000;
        if !faults.iter().any(|&(from, to)| from <= at_us && at_us <= to) {
            report.ticks_due += 1;
            if !ran.contains(&slot) {
                report.violations.push(format!("job-tick {slot} never ran, though no fault was near it"));
            }
        }
        slot += 1000;
    }
}

/// Pairs of faults in force at the same time (a fault lasts from its stamp for its `ms`).
fn overlapping_faults(events: &[Event]) -> usize {
    let spans: Vec<(u64, u64)> = events
        .iter()
        .filter_map(|e| match &e.what {
            What::Fault { ms, .. } => Some((e.at_us, e.at_us + ms * 1000)),
            _ => None,
        })
        .collect();
    spans
        .iter()
        .enumerate()
        .map(|(i, a)| spans[i + 1..].iter().filter(|b| a.0 < b.1 && b.0 < a.1).count())
        .sum()
}

/// The faults that cut a worker off from Redis or kill it.
fn cuts_off(kind: &str) -> bool {
    matches!(kind, "kill" | "shutdown" | "partition" | "stop")
}

fn take_backs(events: &[Event], holds: &[Hold], bounds: Bounds, report: &mut Report) {
    for e in events {
        let What::Fault { kind, target, ms } = &e.what else { continue };
        // A cut shorter than the TTL may end with the holder renewing: nothing to take back.
        // A shut-down worker exits with its contending tasks' locks held, as a killed one.
        let exits = matches!(kind.as_str(), "kill" | "shutdown");
        if !cuts_off(kind) || (!exits && Duration::from_millis(*ms) < LIVENESS_TTL) {
            continue;
        }
        for h in holds.iter().filter(|h| &h.who == target && h.mode == Mode::Lock && h.acquired_us <= e.at_us)
        {
            if h.released_us.is_some_and(|at| at <= e.at_us) {
                continue;
            }
            let next = holds
                .iter()
                .filter(|o| o.resource == h.resource && o.who != h.who && o.acquired_us > e.at_us)
                .map(|o| o.acquired_us)
                .min();
            let taken_ms = next.map(|n| (n - e.at_us) / 1000);
            match taken_ms {
                Some(ms) if Duration::from_millis(ms) <= bounds.take_back => {
                    let worst = report.take_back_ms.entry(kind.clone()).or_default();
                    *worst = (*worst).max(ms);
                }
                _ => report.violations.push(format!(
                    "{}: held by {} (fence {}) when it got `{kind}` at {}; taken by another after {:?} ms (bound {:?})",
                    h.resource, h.who, h.fence, e.at_us, taken_ms, bounds.take_back
                )),
            }
        }
    }
}

fn stalls(holds: &[Hold], bounds: Bounds, report: &mut Report) {
    for (resource, hs) in by_resource(holds) {
        let mut at: Vec<u64> = hs.iter().map(|h| h.acquired_us).collect();
        at.sort_unstable();
        for pair in at.windows(2) {
            let gap_ms = (pair[1] - pair[0]) / 1000;
            report.longest_gap_ms = report.longest_gap_ms.max(gap_ms);
            if Duration::from_millis(gap_ms) > bounds.stall {
                report.violations.push(format!(
                    "{resource}: no acquisition for {gap_ms} ms after {} (bound {:?})",
                    pair[0], bounds.stall
                ));
            }
        }
    }
}

/// The faults during which a worker may not reach Redis (or run at all), so that what it
/// holds or left behind may outlast any bound: everything but a lost reply or a late command,
/// which each hold one of its connections only.
fn impairs(kind: &str) -> bool {
    !matches!(kind, "lost-reply" | "late-command")
}

/// The owner instance of a token `<instance>:<client id>:<uuid>`.
fn instance_of_token(token: &str) -> Option<&str> {
    let mut parts = token.rsplitn(3, ':');
    let (_uuid, _client) = (parts.next()?, parts.next()?);
    parts.next()
}

fn orphans(events: &[Event], holds: &[Hold], bounds: Bounds, report: &mut Report) {
    let slack_us = u64::try_from(bounds.orphan.as_micros()).unwrap_or(u64::MAX);
    // When each worker could not be trusted to clean up: its impairing faults (plus the bound,
    // for what they left to settle), Redis restarts (every worker), and after it was killed.
    let mut impaired: Vec<(Option<&str>, u64, u64)> = Vec::new();
    for e in events {
        let What::Fault { kind, target, ms } = &e.what else { continue };
        if !impairs(kind) {
            continue;
        }
        let end = match kind.as_str() {
            "kill" | "shutdown" => u64::MAX,
            _ => e.at_us + ms * 1000 + slack_us + u64::try_from(LIVENESS_TTL.as_micros()).unwrap_or(0),
        };
        let who = (target != "redis").then_some(target.as_str());
        impaired.push((who, e.at_us, end));
    }
    let ended: HashMap<&str, Option<u64>> =
        holds.iter().filter(|h| h.mode == Mode::Lock).map(|h| (h.token.as_str(), h.released_us)).collect();
    let mut samples: BTreeMap<&str, Vec<(u64, &str)>> = BTreeMap::new();
    for e in events {
        if let What::Observed { resource, token } = &e.what {
            samples.entry(resource.as_str()).or_default().push((e.at_us, token.as_str()));
        }
    }
    for (resource, mut seen) in samples {
        seen.sort_unstable();
        // Runs of consecutive samples of one token.
        let mut start = 0;
        while start < seen.len() {
            let token = seen[start].1;
            let mut end = start;
            while end + 1 < seen.len() && seen[end + 1].1 == token {
                end += 1;
            }
            let (first, last) = (seen[start].0, seen[end].0);
            start = end + 1;
            if token == "-" {
                continue;
            }
            // From when the token has no hold: after its release, or from the first sample of a
            // token no hold had. A hold never released (lost, or cut at the end) is left alone.
            let free_from = match ended.get(token) {
                Some(Some(released)) => (*released).max(first),
                Some(None) => continue,
                None => first,
            };
            if last <= free_from {
                continue;
            }
            let owner = instance_of_token(token);
            let excused = impaired
                .iter()
                .any(|&(who, from, to)| (who.is_none() || who == owner) && from <= last && to >= free_from);
            if excused {
                continue;
            }
            let left_ms = (last - free_from) / 1000;
            report.longest_leftover_ms = report.longest_leftover_ms.max(left_ms);
            if Duration::from_millis(left_ms) > bounds.orphan {
                report.violations.push(format!(
                    "{resource}: held by {token} for {left_ms} ms ({free_from}..{last}) after its hold ended \
                     (or with no hold), its process reaching Redis (bound {:?})",
                    bounds.orphan
                ));
            }
        }
    }
}

/// A small seeded generator (SplitMix64): the schedule and each worker's choices replay from
/// their seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `low..high` (`low` when the range is empty).
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        if high <= low { low } else { low + self.next_u64() % (high - low) }
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.range(0, 100) < percent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: Bounds = Bounds {
        take_back: Duration::from_secs(3),
        stall: Duration::from_secs(6),
        orphan: Duration::from_millis(1200),
        tick_quiet: Duration::from_millis(1500),
    };

    fn ev(at_ms: u64, who: &str, what: What) -> Event {
        Event { at_us: at_ms * 1000, who: who.to_owned(), what }
    }

    /// The token of `who`'s hold `id`.
    fn token(who: &str, id: u64) -> String {
        format!("{who}:0123456789ab:00000000-0000-4000-8000-{id:012}")
    }

    /// A hold of `resource` by `who` acquired at `from` and checked valid at `from` and `to`;
    /// its id is its fence (or, unfenced, `from`).
    fn hold(out: &mut Vec<Event>, who: &str, resource: &str, mode: Mode, fence: u64, from: u64, to: u64) {
        let r = || resource.to_owned();
        let id = if fence > 0 { fence } else { from };
        out.push(ev(from, who, What::Acquired { resource: r(), mode, fence, id, token: token(who, id) }));
        out.push(ev(from, who, What::Valid { resource: r(), id }));
        out.push(ev(to, who, What::Valid { resource: r(), id }));
        out.push(ev(to, who, What::Released { resource: r(), id }));
    }

    /// Samples of `resource` holding `token` (`-`: free) every 25 ms from `from` to `to` (ms).
    fn observed(out: &mut Vec<Event>, resource: &str, token: &str, from: u64, to: u64) {
        for at in (from..=to).step_by(25) {
            out.push(ev(at, "test", What::Observed { resource: resource.into(), token: token.into() }));
        }
    }

    fn violations(events: &[Event]) -> Vec<String> {
        check(events, &[], BOUNDS).violations
    }

    #[test]
    fn a_clean_history_has_no_violation() {
        let mut h = Vec::new();
        hold(&mut h, "a", "l", Mode::Lock, 1, 0, 10);
        hold(&mut h, "b", "l", Mode::Lock, 2, 11, 20);
        hold(&mut h, "a", "s", Mode::Permit, 1, 0, 10);
        hold(&mut h, "b", "s", Mode::Permit, 2, 5, 15);
        hold(&mut h, "a", "rw", Mode::Read, 1, 0, 10);
        hold(&mut h, "b", "rw", Mode::Read, 2, 5, 12);
        hold(&mut h, "c", "rw", Mode::Write, 3, 13, 20);
        h.push(ev(30, "a", What::Tick { tick: 1 }));
        h.push(ev(31, "b", What::Tick { tick: 2 }));
        let report = check(&h, &[], BOUNDS);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.ticks, 2);
        assert_eq!(report.acquisitions["lock"], 2);
        assert_eq!(report.windows["lock"], 2);
        assert_eq!(report.windows["read"], 2);
    }

    #[test]
    fn every_broken_property_is_reported() {
        let two_holders = {
            let mut h = Vec::new();
            hold(&mut h, "a", "l", Mode::Lock, 1, 0, 10);
            hold(&mut h, "b", "l", Mode::Lock, 2, 5, 20);
            h
        };
        assert!(violations(&two_holders)[0].contains("overlaps"));
        let reader_beside_writer = {
            let mut h = Vec::new();
            hold(&mut h, "a", "rw", Mode::Read, 1, 0, 10);
            hold(&mut h, "b", "rw", Mode::Write, 2, 9, 20);
            h
        };
        assert!(violations(&reader_beside_writer)[0].contains("overlaps"));
        let three_permits = {
            let mut h = Vec::new();
            hold(&mut h, "a", "s", Mode::Permit, 1, 0, 10);
            hold(&mut h, "b", "s", Mode::Permit, 2, 1, 10);
            hold(&mut h, "c", "s", Mode::Permit, 3, 2, 10);
            h
        };
        assert!(violations(&three_permits)[0].contains("3 permits held at once"));
        let fence_back = {
            let mut h = Vec::new();
            hold(&mut h, "a", "l", Mode::Lock, 5, 0, 10);
            hold(&mut h, "b", "l", Mode::Lock, 4, 11, 20);
            h
        };
        assert!(violations(&fence_back)[0].contains("out of order"));
        let fence_twice = {
            let mut h = Vec::new();
            hold(&mut h, "a", "s", Mode::Permit, 7, 0, 10);
            hold(&mut h, "b", "s", Mode::Permit, 7, 20, 30);
            h
        };
        assert!(violations(&fence_twice)[0].contains("issued twice"));
        let tick_twice = vec![ev(0, "a", What::Tick { tick: 9 }), ev(1, "b", What::Tick { tick: 9 })];
        assert!(violations(&tick_twice)[0].contains("ran 2 times"));
        let stall = {
            let mut h = Vec::new();
            hold(&mut h, "a", "l", Mode::Lock, 1, 0, 10);
            hold(&mut h, "b", "l", Mode::Lock, 2, 7000, 7010);
            h
        };
        assert!(violations(&stall)[0].contains("no acquisition for 7000 ms"));
        let kept_by_the_dead = {
            let mut h = Vec::new();
            h.push(ev(
                0,
                "a",
                What::Acquired {
                    resource: "l".into(),
                    mode: Mode::Lock,
                    fence: 1,
                    id: 1,
                    token: token("a", 1),
                },
            ));
            h.push(ev(1, "test", What::Fault { kind: "kill".into(), target: "a".into(), ms: 0 }));
            hold(&mut h, "b", "l", Mode::Lock, 2, 4000, 4010);
            h
        };
        assert!(violations(&kept_by_the_dead).iter().any(|v| v.contains("got `kill`")));
        let write = |at_us: u64, fence: u64, who: &str, accepted: bool| StoreWrite {
            at_us,
            resource: "l".into(),
            fence,
            who: who.into(),
            accepted,
        };
        let store = [write(1, 5, "a", true), write(2, 4, "b", true), write(3, 4, "c", true)];
        let found = check(&[], &store, BOUNDS).violations;
        assert!(found[0].contains("accepted fence 4 (b) after 5"), "{found:?}");
        assert!(found[1].contains("written by b and c"), "{found:?}");
        // Refused as stale with no newer fence drawn before it (the store got fence 9 from a
        // writer that held nothing): the fences went wrong, though the store kept nothing out
        // of order.
        let mut h = Vec::new();
        hold(&mut h, "b", "l", Mode::Lock, 4, 11, 20);
        let refused = [write(5_000, 9, "x", true), write(15_000, 4, "b", false)];
        let found = check(&h, &refused, BOUNDS).violations;
        assert!(found.iter().any(|v| v.contains("no newer fence had been drawn")), "{found:?}");
        // Refused after a newer holder drew its fence: the store did its job.
        let mut h = Vec::new();
        hold(&mut h, "a", "l", Mode::Lock, 4, 0, 10);
        hold(&mut h, "b", "l", Mode::Lock, 5, 11, 20);
        let stale = [write(12_000, 5, "b", true), write(13_000, 4, "a", false)];
        let report = check(&h, &stale, BOUNDS);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!((report.writes, report.attempted_writes), (1, 2));
    }

    /// The histories the protocol's model found (lock-core/model/): an unfenced waiter taking a
    /// lapsed hand-off while the holder holds (bug 1), and a try that lands after its waiter's
    /// release, or after its cancelled wait's clean-up, holding the key for a lease with no
    /// guard (bugs 2 and 3).
    #[test]
    fn the_models_bugs_are_flagged() {
        let two_unfenced_holders = {
            let mut h = Vec::new();
            hold(&mut h, "b", "l", Mode::Lock, 0, 0, 1000);
            hold(&mut h, "a", "l", Mode::Lock, 0, 400, 450);
            h
        };
        assert!(violations(&two_unfenced_holders)[0].contains("overlaps"), "bug 1");
        let late_try_after_release = {
            let mut h = Vec::new();
            hold(&mut h, "a", "l", Mode::Lock, 0, 0, 100);
            observed(&mut h, "l", &token("a", 0), 0, 100);
            observed(&mut h, "l", "-", 125, 500);
            // The late try lands: the token again, for the 2 s lease.
            observed(&mut h, "l", &token("a", 0), 525, 2525);
            hold(&mut h, "b", "l", Mode::Lock, 0, 2600, 2700);
            h
        };
        let found = violations(&late_try_after_release);
        assert!(found[0].contains("after its hold ended"), "bug 2: {found:?}");
        let late_try_after_a_cancelled_wait = {
            let mut h = Vec::new();
            h.push(ev(0, "a", What::Cancelled { resource: "l".into() }));
            observed(&mut h, "l", "-", 0, 300);
            observed(&mut h, "l", &token("a", 7), 325, 2325);
            h
        };
        let found = violations(&late_try_after_a_cancelled_wait);
        assert!(found[0].contains("with no hold"), "bug 3: {found:?}");
        // The same leftover during a partition of its owner is excused; a brief one is not an
        // orphan.
        let mut excused = late_try_after_release.clone();
        excused.push(ev(500, "test", What::Fault { kind: "partition".into(), target: "a".into(), ms: 1500 }));
        assert!(violations(&excused).is_empty(), "{:?}", violations(&excused));
        let brief = {
            let mut h = Vec::new();
            hold(&mut h, "a", "l", Mode::Lock, 0, 0, 100);
            observed(&mut h, "l", &token("a", 0), 0, 400);
            h
        };
        let report = check(&brief, &[], BOUNDS);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.longest_leftover_ms, 300);
    }

    #[test]
    fn a_restart_without_persistence_costs_only_its_window() {
        // Redis stopped at 1000 ms, back empty at 1300 ms: overlaps with a hold taken before
        // the restart, until 1300 + the TTL (1 s) + noise, are its cost.
        let wipe =
            |at: u64| ev(at, "test", What::Fault { kind: WIPE.into(), target: "redis".into(), ms: 300 });
        let mut h = Vec::new();
        hold(&mut h, "a", "l", Mode::Lock, 1, 0, 1500);
        hold(&mut h, "b", "l", Mode::Lock, 2, 1400, 1600);
        hold(&mut h, "c", "r", Mode::Lock, 3, 500, 2000);
        hold(&mut h, "d", "r", Mode::Lock, 4, 1300, 1400);
        h.push(wipe(1000));
        let report = check(&h, &[], BOUNDS);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.lost_to_wipes, 2);
        // Two holds both taken after Redis was back must exclude each other, inside the
        // window too: the client checks its liveness key on reconnecting.
        let mut h = Vec::new();
        hold(&mut h, "b", "l", Mode::Lock, 2, 1400, 1600);
        hold(&mut h, "c", "l", Mode::Lock, 3, 1550, 1700);
        h.push(wipe(1000));
        assert!(violations(&h)[0].contains("overlaps"), "{:?}", violations(&h));
        // An overlap that goes on past the window is flagged.
        let mut h = Vec::new();
        hold(&mut h, "a", "l", Mode::Lock, 1, 0, 2700);
        hold(&mut h, "b", "l", Mode::Lock, 2, 1400, 2700);
        h.push(wipe(1000));
        assert!(violations(&h)[0].contains("overlaps"), "{:?}", violations(&h));
        // A tick run again inside the window is its cost; twice away from it is not.
        let mut h =
            vec![ev(900, "a", What::Tick { tick: 7 }), ev(1200, "b", What::Tick { tick: 7 }), wipe(1000)];
        assert!(violations(&h).is_empty(), "{:?}", violations(&h));
        h.push(ev(3300, "c", What::Tick { tick: 8 }));
        h.push(ev(3350, "a", What::Tick { tick: 8 }));
        assert!(violations(&h)[0].contains("job-tick 8 ran 2 times"), "{:?}", violations(&h));
    }

    #[test]
    fn a_tick_due_away_from_faults_must_run() {
        let worker_until = |h: &mut Vec<Event>, ms: u64| {
            h.push(ev(ms, "a", What::Cancelled { resource: "l".into() }));
        };
        // Slots 1000..=6000 ms; 4000 never ran.
        let mut h: Vec<Event> = [1000, 2000, 3000, 5000, 6000]
            .into_iter()
            .map(|t| ev(t as u64 + 5, "a", What::Tick { tick: t }))
            .collect();
        worker_until(&mut h, 8000);
        let report = check(&h, &[], BOUNDS);
        assert_eq!(report.ticks_due, 6, "{report}");
        assert!(
            report.violations.iter().any(|v| v.contains("job-tick 4000 never ran")),
            "{:?}",
            report.violations
        );
        // A fault near slot 4000 excuses it (and the slots within the quiet margin around it).
        h.push(ev(3900, "test", What::Fault { kind: "partition".into(), target: "a".into(), ms: 200 }));
        let report = check(&h, &[], BOUNDS);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.ticks_due, 3, "{report}");
    }

    #[test]
    fn a_take_back_within_the_bound_is_measured() {
        let mut h = Vec::new();
        h.push(ev(
            0,
            "a",
            What::Acquired { resource: "l".into(), mode: Mode::Lock, fence: 1, id: 1, token: token("a", 1) },
        ));
        h.push(ev(100, "test", What::Fault { kind: "partition".into(), target: "a".into(), ms: 2000 }));
        hold(&mut h, "b", "l", Mode::Lock, 2, 1300, 1310);
        let report = check(&h, &[], BOUNDS);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.take_back_ms["partition"], 1200);
    }

    #[test]
    fn a_run_started_after_a_shutdown_and_a_hidden_start_lag_are_flagged() {
        let after_shutdown = vec![
            ev(1000, "a", What::Tick { tick: 1000 }),
            ev(1500, "a", What::Shutdown),
            ev(2000, "a", What::Tick { tick: 2000 }),
            ev(2001, "b", What::Tick { tick: 3000 }),
        ];
        let found = violations(&after_shutdown);
        assert!(
            found.iter().any(|v| v.contains("job-tick 2000 started on a 500 ms after it was told")),
            "{found:?}"
        );
        assert!(
            !found.iter().any(|v| v.contains("job-tick 1000 started") || v.contains("on b ")),
            "{found:?}"
        );
        // A run started 600 ms after its slot (the claim grace waited): reported 598 ms late is
        // within the slack, 1 ms late hides the grace.
        let late =
            |ms| vec![ev(1600, "a", What::Tick { tick: 1000 }), ev(1601, "a", What::Late { tick: 1000, ms })];
        assert!(
            !violations(&late(598)).iter().any(|v| v.contains("reported")),
            "{:?}",
            violations(&late(598))
        );
        let found = violations(&late(1));
        assert!(
            found.iter().any(|v| v.contains("reported 1 ms late, its body started 600 ms after")),
            "{found:?}"
        );
    }

    #[test]
    fn events_round_trip_through_their_line() {
        let whats = [
            What::Acquired {
                resource: "r".into(),
                mode: Mode::Write,
                fence: 17,
                id: 3,
                token: token("w", 3),
            },
            What::Valid { resource: "r".into(), id: 3 },
            What::Released { resource: "r".into(), id: 3 },
            What::Observed { resource: "r".into(), token: token("w", 3) },
            What::Observed { resource: "r".into(), token: "-".into() },
            What::Cancelled { resource: "r".into() },
            What::Failed { resource: "r".into(), reason: "the wait ran out".into() },
            What::Tick { tick: -3 },
            What::Late { tick: 5, ms: 513 },
            What::Shutdown,
            What::Fault { kind: "delay".into(), target: "w1-0".into(), ms: 400 },
        ];
        for what in whats {
            let line = Event::line(42, &what);
            assert_eq!(Event::parse("w", &line), Some(Event { at_us: 42, who: "w".into(), what }), "{line}");
        }
        assert_eq!(Event::parse("w", "ready"), None);
    }
}
