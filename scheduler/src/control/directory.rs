//! What the running scheduler replicas announce in Redis, read back for operators: each
//! group's jobs with their schedules ([`registered_jobs`]) and its live replicas
//! ([`replicas`]). The console and `lockctl` show these; nothing here writes.

use std::time::Duration;

use lock_core::{LockClient, redis};

use crate::command::{self, query};
use crate::error::ControlError;
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

/// Every job registered by a running scheduler group, sorted by group and name (`SCAN` for
/// the registries, then one `HGETALL` each).
pub async fn registered_jobs(client: &LockClient) -> Result<Vec<RegisteredJob>, ControlError> {
    let keys = command::scan(client, "listing scheduler groups", &schema::job_registries_pattern()).await?;
    let mut jobs = Vec::new();
    for key in keys {
        let Some(group) = schema::group_of_registry(&key) else { continue };
        let mut pipe = redis::pipe();
        pipe.cmd("HGETALL").arg(&key);
        let (entries,): (Vec<(String, String)>,) = query(client, "reading a job registry", &pipe).await?;
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
/// by group and instance. Lapse times are read against the Redis server's clock, as the
/// replicas write them.
pub async fn replicas(client: &LockClient) -> Result<Vec<Replica>, ControlError> {
    let keys = command::scan(client, "listing scheduler groups", &schema::member_sets_pattern()).await?;
    let mut replicas = Vec::new();
    for key in keys {
        let Some(group) = schema::group_of_members(&key) else { continue };
        let mut pipe = redis::pipe();
        pipe.cmd("TIME").cmd("ZRANGE").arg(&key).arg(0).arg(-1).arg("WITHSCORES");
        let ((secs, micros), members): ((i64, i64), Vec<(String, f64)>) =
            query(client, "reading a scheduler group's members", &pipe).await?;
        let now_ms = secs * 1000 + micros / 1000;
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
