//! What the running scheduler replicas announce in Redis, read back for operators: each
//! group's jobs with their schedules ([`registered_jobs`]) and its live replicas
//! ([`replicas`]). The console and `lockctl` show these; nothing here writes.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use lock_core::{LockClient, redis};

use crate::command::query;
use crate::error::ControlError;
use crate::index;
use crate::overrides::ScheduleOrigin;
use crate::schema;

/// A job as a scheduler group registers it: the replicas that have the job keep its schedule
/// in the group's registry ([`schema::jobs_key`]) while they run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RegisteredJob {
    /// The scheduler group.
    pub group: String,
    /// The job's name.
    pub name: String,
    /// Its schedule in force: the cron expression, or `every ...` for an interval.
    pub cron: String,
    /// Its time zone (IANA name; UTC for an interval).
    pub time_zone: String,
    /// Where that schedule came from: the code, or an override (see `SchedulerBuilder::schedule_override`).
    pub origin: ScheduleOrigin,
}

/// A group's member set as read: instance id and when its announcement lapses (server ms).
type Members = Vec<(String, f64)>;

/// A replica announced in a scheduler group ([`schema::members_key`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Replica {
    /// The scheduler group.
    pub group: String,
    /// The replica's instance id.
    pub instance: String,
    /// How long its last announcement still counts (it renews every few seconds; zero once
    /// it lapsed, which means it stopped or cannot reach Redis).
    pub lapses_in: Duration,
    /// What it says about itself ([`schema::replicas_key`]); `None` for a replica that has
    /// not said it yet (or a version of this crate that did not).
    pub about: Option<ReplicaAbout>,
}

/// What a replica says about itself, next to its announcement: see [`Replica::about`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicaAbout {
    /// When its scheduler started (its own clock).
    pub started_at: DateTime<Utc>,
    /// Its host name (`HOSTNAME`, or the kernel's); empty if unknown.
    pub host: String,
    /// The version it was given (`SchedulerBuilder::version`); empty if none.
    pub version: String,
    /// The jobs it was running when it last said so (it says so again within one
    /// announcement period of a change).
    pub running: Vec<String>,
}

impl ReplicaAbout {
    fn parse(stored: &str) -> Option<ReplicaAbout> {
        let (started, host, version, running) = schema::parse_replica_about(stored)?;
        Some(ReplicaAbout {
            started_at: DateTime::from_timestamp_millis(started)?,
            host: host.to_owned(),
            version: version.to_owned(),
            running: running.into_iter().map(str::to_owned).collect(),
        })
    }
}

impl Replica {
    /// Whether its announcement is current.
    pub fn is_live(&self) -> bool {
        !self.lapses_in.is_zero()
    }
}

/// Every job registered by a running scheduler group, sorted by group and name: the groups from
/// their index ([`schema::group_index_key`], one command, never a `SCAN`), then one `HGETALL`
/// per group, all in one round trip. The Redis work depends on the number of groups and jobs,
/// not on how many other keys Redis holds.
pub async fn registered_jobs(client: &LockClient) -> Result<Vec<RegisteredJob>, ControlError> {
    let groups = index::groups(client).await?;
    let mut jobs = Vec::new();
    if groups.is_empty() {
        return Ok(jobs);
    }
    let mut pipe = redis::pipe();
    for group in &groups {
        pipe.cmd("HGETALL").arg(schema::jobs_key(group));
    }
    let registries: Vec<Vec<(String, String)>> = query(client, "reading the job registries", &pipe).await?;
    for (group, entries) in groups.iter().zip(registries) {
        for (name, entry) in entries {
            let (cron, time_zone, origin) =
                schema::parse_registry_entry(&entry).unwrap_or((&entry, "UTC", "code"));
            jobs.push(RegisteredJob {
                group: group.to_owned(),
                name,
                cron: cron.to_owned(),
                time_zone: time_zone.to_owned(),
                origin: ScheduleOrigin::parse(origin),
            });
        }
    }
    jobs.sort_by(|a, b| (&a.group, &a.name).cmp(&(&b.group, &b.name)));
    Ok(jobs)
}

/// Every replica announced in a scheduler group, live or lapsed but not yet dropped, sorted
/// by group and instance: the groups from their index ([`schema::group_index_key`], never a
/// `SCAN`), then the server's time and every group's member set in one round trip. Lapse times
/// are read against the Redis server's clock, as the replicas write them.
pub async fn replicas(client: &LockClient) -> Result<Vec<Replica>, ControlError> {
    let groups = index::groups(client).await?;
    let mut replicas = Vec::new();
    if groups.is_empty() {
        return Ok(replicas);
    }
    // The server's time first, on its own: its reply has another shape than the sets'.
    let mut time = redis::pipe();
    time.cmd("TIME");
    let ((secs, micros),): ((i64, i64),) = query(client, "reading the server's time", &time).await?;
    let now_ms = secs * 1000 + micros / 1000;
    // Per group, its members and what they say about themselves, all in one round trip.
    let mut pipe = redis::pipe();
    for group in &groups {
        pipe.cmd("ZRANGE").arg(schema::members_key(group)).arg(0).arg(-1).arg("WITHSCORES");
        pipe.cmd("HGETALL").arg(schema::replicas_key(group));
    }
    let action = "reading the scheduler groups' members";
    // Each reply converted on its own: a pipeline's replies typed as pairs would be taken
    // for one flat array of pairs when there is a single group.
    let replies: Vec<redis::Value> = query(client, action, &pipe).await?;
    let mut replies = replies.into_iter();
    for group in &groups {
        let (Some(members), Some(about)) = (replies.next(), replies.next()) else { break };
        let convert = |e: redis::ParsingError| ControlError::Redis {
            action,
            source: lock_core::LockError::Redis { action: action.to_owned(), source: e.into() },
        };
        let members: Members = redis::from_redis_value(members).map_err(convert)?;
        let mut about: HashMap<String, String> = redis::from_redis_value(about).map_err(convert)?;
        for (instance, lapses_at) in members {
            let left = (lapses_at as i64).saturating_sub(now_ms).max(0);
            let about = about.remove(&instance).as_deref().and_then(ReplicaAbout::parse);
            replicas.push(Replica {
                group: group.to_owned(),
                instance,
                lapses_in: Duration::from_millis(left as u64),
                about,
            });
        }
    }
    replicas.sort_by(|a, b| (&a.group, &a.instance).cmp(&(&b.group, &b.instance)));
    Ok(replicas)
}
