//! What the running scheduler replicas announce in Redis, read back for operators: each
//! group's jobs with their schedules ([`registered_jobs`]) and its live replicas
//! ([`replicas`]). The console and `lockctl` show these; nothing here writes.

use std::time::Duration;

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
    let mut pipe = redis::pipe();
    for group in &groups {
        pipe.cmd("ZRANGE").arg(schema::members_key(group)).arg(0).arg(-1).arg("WITHSCORES");
    }
    let sets: Vec<Vec<(String, f64)>> = query(client, "reading the scheduler groups' members", &pipe).await?;
    for (group, members) in groups.iter().zip(sets) {
        for (instance, lapses_at) in members {
            let left = (lapses_at as i64).saturating_sub(now_ms).max(0);
            replicas.push(Replica {
                group: group.to_owned(),
                instance,
                lapses_in: Duration::from_millis(left as u64),
            });
        }
    }
    replicas.sort_by(|a, b| (&a.group, &a.instance).cmp(&(&b.group, &b.instance)));
    Ok(replicas)
}
