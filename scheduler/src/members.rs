//! Which replicas of a scheduler group are alive, and which of them is preferred for a given
//! job-tick (rendezvous hashing), so that runs spread across replicas.
//!
//! Each replica announces itself in one sorted set per group,
//! `scheduler:{group:<name>}:members` (member: instance id, score: when its announcement
//! lapses, on the Redis server's clock), with one script call every [`RENEW`] that also drops
//! lapsed members and reads the live ones. The set itself expires [`MEMBER_TTL`] after the
//! last announcement, so a group that stops running leaves nothing behind.
//!
//! The preference only decides who claims a slot *first*: the claim itself is lock-core's
//! atomic tick claim, so at most one replica runs each slot whatever the replicas believe
//! about each other (stale or empty membership lists included).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use lock_core::redis;
use lock_core::{ErrorChain, LockClient};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use crate::command;
use crate::error::ControlError;
use crate::health::Beats;
use crate::index;
use crate::presence::{LastSaid, Presence};
use crate::schema::{
    ANNOUNCE, MEMBER_TTL, RETRY_TTL, jobs_key, members_key, replace_key, replicas_key, retries_key, runs_key,
};
use crate::state::State;

/// How often a replica renews its announcement.
pub(crate) const RENEW: Duration = Duration::from_secs(2);

/// How long one announcement may take.
const TIMEOUT: Duration = Duration::from_secs(2);

/// Members as read, with when each one's announcement lapses (this process's clock).
type Seen = Arc<[(Arc<str>, Instant)]>;

/// This replica's view of its group.
#[derive(Debug)]
pub(crate) struct Members {
    /// The group's name, for the group index.
    group: String,
    /// When this replica last renewed its group's entry in the group index.
    indexed: std::sync::Mutex<Option<Instant>>,
    key: String,
    /// The group's job registry, kept alive by the announcements.
    jobs_key: String,
    /// The group's pending "run now" requests.
    runs_key: String,
    /// The group's pending retries.
    retries_key: String,
    /// What the replicas say about themselves.
    replicas_key: String,
    /// What this replica says about itself (set when the scheduler starts), and what it last
    /// wrote.
    presence: std::sync::OnceLock<Presence>,
    last_said: std::sync::Mutex<LastSaid>,
    /// The group's requests to stop a running run (`Overlap::Replace`).
    replace_key: String,
    instance: Arc<str>,
    /// The members as last read, with when each announcement lapses on this process's
    /// monotonic clock; sorted.
    seen: RwLock<Seen>,
}

impl Members {
    pub(crate) fn new(group: &str, instance: Arc<str>) -> Members {
        Members {
            group: group.to_owned(),
            indexed: std::sync::Mutex::new(None),
            key: members_key(group),
            jobs_key: jobs_key(group),
            runs_key: runs_key(group),
            retries_key: retries_key(group),
            replicas_key: replicas_key(group),
            presence: std::sync::OnceLock::new(),
            last_said: std::sync::Mutex::default(),
            replace_key: replace_key(group),
            seen: RwLock::new(Arc::from(Vec::new())),
            instance,
        }
    }

    /// The live members: those whose last announcement read has not lapsed yet (a member
    /// that stopped renewing drops out here the moment it lapses, before the next read), and
    /// this replica; sorted.
    pub(crate) fn live(&self) -> Vec<Arc<str>> {
        live_at(&self.seen(), &self.instance, Instant::now())
    }

    /// Whether this replica is the preferred one for `job` at `tick` among the live members.
    /// Asked once per job-tick: scores the members where they are, without collecting them.
    pub(crate) fn preferred(&self, job: &str, tick: i64) -> bool {
        preferred_at(&self.seen(), &self.instance, Instant::now(), job, tick)
    }

    /// The members as last read (a shared snapshot: no copy).
    fn seen(&self) -> Seen {
        self.seen.read().map(|l| l.clone()).unwrap_or_else(|e| e.into_inner().clone())
    }

    /// Sets what this replica says about itself from now on (once: at start).
    pub(crate) fn present(&self, presence: Presence) {
        let _ = self.presence.set(presence);
    }

    /// Announces this replica and refreshes the list of live members (one round trip); about
    /// once every [`index::RENEWAL`], renews the group's entry in the group index at the same
    /// time (its own request, sent concurrently: the index is on another Cluster slot).
    pub(crate) async fn announce(&self, client: &LockClient) -> Result<usize, ControlError> {
        let mut invocation = ANNOUNCE.key(&self.key);
        invocation.key(&self.jobs_key).key(&self.replicas_key);
        invocation.arg(&*self.instance).arg(MEMBER_TTL.as_millis() as u64);
        let sent = Instant::now();
        // What this replica says about itself, only when it changed (or half a TTL passed).
        let about = self.presence.get().and_then(|presence| {
            let last = self.last_said.lock().unwrap_or_else(|e| e.into_inner());
            last.due(presence.describe(), sent)
        });
        if let Some(about) = &about {
            invocation.arg(about);
        }
        let action = "announcing this replica to its group";
        let announce =
            command::run_script::<Vec<(String, u64)>>(client, action, &ANNOUNCE, &invocation, TIMEOUT);
        let index_due = {
            let last = self.indexed.lock().map(|l| *l).unwrap_or_else(|e| *e.into_inner());
            last.is_none_or(|at| sent - at >= index::RENEWAL)
        };
        let renew_index = async {
            if !index_due {
                return None;
            }
            let mut pipe = redis::pipe();
            // RETRY_TTL: the group's pending retries outlive its replicas by that much, and the
            // admin reads find them through this entry.
            index::add_group(&mut pipe, &self.group, RETRY_TTL);
            Some(index::send(client, "renewing the group's index entry", &pipe).await)
        };
        let (members, indexed) = tokio::join!(announce, renew_index);
        match indexed {
            Some(Ok(())) => match self.indexed.lock() {
                Ok(mut l) => *l = Some(sent),
                Err(e) => *e.into_inner() = Some(sent),
            },
            // Tried again with the next announcement.
            Some(Err(e)) => {
                tracing::debug!(error = %ErrorChain(&e), "could not renew the group's index entry")
            }
            None => {}
        }
        let members = members?;
        if let Some(about) = about {
            self.last_said.lock().unwrap_or_else(|e| e.into_inner()).said(about, sent);
        }
        // Counted from when the script was sent: errs towards dropping a member early.
        let mut seen: Vec<(Arc<str>, Instant)> = members
            .into_iter()
            .map(|(name, left)| (Arc::from(name), sent + Duration::from_millis(left)))
            .collect();
        seen.sort();
        let count = seen.len().max(1);
        let seen: Seen = seen.into();
        match self.seen.write() {
            Ok(mut l) => *l = seen,
            Err(e) => *e.into_inner() = seen,
        }
        Ok(count)
    }

    /// The group's name.
    pub(crate) fn group(&self) -> &str {
        &self.group
    }

    /// The group's job registry key.
    pub(crate) fn jobs_key(&self) -> &str {
        &self.jobs_key
    }

    /// The group's run requests key.
    pub(crate) fn runs_key(&self) -> &str {
        &self.runs_key
    }

    /// The group's pending retries key.
    pub(crate) fn retries_key(&self) -> &str {
        &self.retries_key
    }

    /// The group's replace requests key.
    pub(crate) fn replace_key(&self) -> &str {
        &self.replace_key
    }

    /// Withdraws this replica (at shutdown), so the others stop preferring it at once.
    pub(crate) async fn leave(&self, client: &LockClient) {
        let mut pipe = redis::pipe();
        pipe.cmd("ZREM").arg(&self.key).arg(&*self.instance).ignore();
        pipe.cmd("HDEL").arg(&self.replicas_key).arg(&*self.instance).ignore();
        let action = "withdrawing this replica from its group";
        if let Err(e) = command::query_within::<()>(client, action, &pipe, TIMEOUT).await {
            tracing::debug!(error = %ErrorChain(&e), "could not withdraw from the scheduler group");
        }
    }
}

/// Renews this replica's announcement every [`RENEW`] until the scheduler stops (then
/// withdraws it) or its handle is dropped; tells `beats` whether each one reached Redis.
pub(crate) fn spawn_announcer(
    members: Arc<Members>,
    client: LockClient,
    mut state: watch::Receiver<State>,
    beats: Arc<Beats>,
) -> tokio::task::JoinHandle<()> {
    let span = tracing::debug_span!(parent: None, "scheduler_members", instance = %members.instance);
    tokio::spawn(
        async move {
            let mut failing = false;
            loop {
                tokio::select! {
                    () = tokio::time::sleep(RENEW) => {}
                    changed = state.changed() => {
                        if changed.is_err() || state.borrow().deadline().is_some() {
                            beats.stopping();
                            members.leave(&client).await;
                            return;
                        }
                        continue;
                    }
                }
                let announced = members.announce(&client).await;
                beats.announced(announced.is_ok());
                match announced {
                    Ok(count) => {
                        // The group's live replicas as this one sees them: an alert fires when
                        // no replica of a group reports it any more.
                        metrics::gauge!("scheduler_group_live_replicas", "group" => members.group().to_owned())
                            .set(count as f64);
                        if failing {
                            tracing::info!(live = count, "announcing this replica to its group works again");
                        }
                        failing = false;
                    }
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!(
                            error = %ErrorChain(&e),
                            "could not announce this replica to its group; other replicas stop preferring it \
                             for runs after {MEMBER_TTL:?} (runs stay once per tick)"
                        );
                    }
                    Err(_) => {}
                }
            }
        }
        .instrument(span),
    )
}

/// The members of `seen` still announced at `now`, and `me`; sorted.
fn live_at(seen: &[(Arc<str>, Instant)], me: &Arc<str>, now: Instant) -> Vec<Arc<str>> {
    let mut live: Vec<Arc<str>> = seen
        .iter()
        .filter(|(name, lapses)| *lapses > now || name == me)
        .map(|(name, _)| name.clone())
        .collect();
    if !live.contains(me) {
        live.push(me.clone());
        live.sort();
    }
    live
}

/// Whether `me` has the highest rendezvous score for `job` at `tick` among the members of
/// `seen` announced at `now` and itself (what `preferred_of(live_at(..))` says, without
/// building that list).
fn preferred_at(seen: &[(Arc<str>, Instant)], me: &Arc<str>, now: Instant, job: &str, tick: i64) -> bool {
    let others = seen.iter().filter(|(name, lapses)| *lapses > now && name != me).map(|(name, _)| name);
    others
        .chain(std::iter::once(me))
        .max_by_key(|instance| (score(job, tick, instance), instance.as_bytes()))
        .is_none_or(|p| p == me)
}

/// The member preferred for `job` at `tick`: the highest rendezvous score (the rule
/// `preferred_at` applies; the tests state it on lists).
#[cfg(test)]
fn preferred_of<'a>(live: &'a [Arc<str>], job: &str, tick: i64) -> Option<&'a Arc<str>> {
    live.iter().max_by_key(|instance| (score(job, tick, instance), instance.as_bytes()))
}

/// A hash of (job, tick, instance) that is the same in every process and Rust version
/// (FNV-1a then a SplitMix64 finaliser, for good spreading of close inputs).
fn score(job: &str, tick: i64, instance: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(job.as_bytes());
    eat(&[0xff]);
    eat(&tick.to_le_bytes());
    eat(&[0xff]);
    eat(instance.as_bytes());
    let mut z = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(names: &[&str]) -> Vec<Arc<str>> {
        names.iter().map(|n| Arc::from(*n)).collect()
    }

    #[test]
    fn the_preferred_replica_is_spread_evenly_and_the_same_everywhere() {
        let replicas = live(&["pod-a", "pod-b", "pod-c"]);
        let mut counts = [0usize; 3];
        for job in 0..1000 {
            for tick in 0..3 {
                let name = format!("job-{job}");
                let p = preferred_of(&replicas, &name, 1_700_000_000_000 + tick * 1000).expect("a member");
                let i = replicas.iter().position(|r| r == p).expect("one of them");
                counts[i] += 1;
            }
        }
        // 3,000 job-ticks over 3 replicas: 1,000 each, within a few percent.
        for c in counts {
            assert!((900..=1100).contains(&c), "uneven spread: {counts:?}");
        }
        // Independent of the order members are listed in.
        let reversed = live(&["pod-c", "pod-b", "pod-a"]);
        assert_eq!(preferred_of(&replicas, "x", 5), preferred_of(&reversed, "x", 5));
    }

    #[test]
    fn removing_a_replica_only_moves_its_own_job_ticks() {
        let all = live(&["a", "b", "c", "d"]);
        let without_d = live(&["a", "b", "c"]);
        for job in 0..200 {
            let name = format!("j{job}");
            let before = preferred_of(&all, &name, 0).expect("member");
            let after = preferred_of(&without_d, &name, 0).expect("member");
            if &**before != "d" {
                assert_eq!(before, after);
            }
        }
    }

    #[test]
    fn a_member_drops_out_the_moment_its_announcement_lapses() {
        let now = Instant::now();
        let (a, b, me): (Arc<str>, Arc<str>, Arc<str>) = ("pod-a".into(), "pod-b".into(), "pod-me".into());
        let seen = [(a.clone(), now + Duration::from_secs(1)), (b.clone(), now + Duration::from_secs(5))];
        assert_eq!(live_at(&seen, &me, now), [a.clone(), b.clone(), me.clone()]);
        // pod-a stopped renewing: gone at its lapse time, before the next read.
        assert_eq!(live_at(&seen, &me, now + Duration::from_secs(2)), [b.clone(), me.clone()]);
        // This replica counts itself live even when its own entry lapsed (it cannot reach
        // Redis: its claims fail anyway).
        let mine = [(me.clone(), now)];
        assert_eq!(live_at(&mine, &me, now + Duration::from_secs(9)), std::slice::from_ref(&me));
        assert_eq!(live_at(&[], &me, now), [me]);
    }

    #[test]
    fn preferred_at_agrees_with_the_live_list() {
        let now = Instant::now();
        let names: Vec<Arc<str>> = ["a", "b", "c", "d"].iter().map(|n| Arc::from(*n)).collect();
        let seen: Vec<(Arc<str>, Instant)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), now + Duration::from_secs(u64::try_from(i).unwrap_or(0))))
            .collect();
        for me in &names {
            for at in 0..5 {
                let when = now + Duration::from_millis(at * 1000 + 500);
                let live = live_at(&seen, me, when);
                for job in 0..50 {
                    let job = format!("j{job}");
                    let expected = preferred_of(&live, &job, 7).is_none_or(|p| p == me);
                    assert_eq!(preferred_at(&seen, me, when, &job, 7), expected, "{me} at {at}: {job}");
                }
            }
        }
    }

    #[test]
    fn a_replica_alone_is_always_preferred() {
        let members = Members::new("g", Arc::from("solo"));
        assert!(members.preferred("any", 42));
    }
}
