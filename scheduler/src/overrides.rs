//! Changing a job's schedule without recompiling: from the environment
//! (`SCHEDULE_<JOB>`, and `SCHEDULE_<JOB>_ZONE` for its time zone), or from a value given to
//! [`SchedulerBuilder::schedule_override`](crate::scheduler::SchedulerBuilder::schedule_override)
//! (a configuration file's, say). The value is a 6-field cron expression, `every <duration>`
//! (optionally `offset <duration>`), or `-` to turn the job off. Read once, when the scheduler
//! is built (or the job added); a value that does not parse is an error naming the job, the
//! variable and what is wrong. The environment wins over the builder's value, which wins over
//! the code.

use std::collections::HashMap;
use std::fmt;

use lock_schedule::{ScheduleError, When, schedule_variable};

use crate::error::SchedulerError;
use crate::job::{Job, Timing};
use crate::schedule::Schedule;

/// Where the schedule in force came from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScheduleOrigin {
    /// The job as declared (`#[scheduled]`, or a `Job` built in code).
    Code,
    /// [`SchedulerBuilder::schedule_override`](crate::scheduler::SchedulerBuilder::schedule_override).
    Config,
    /// The environment variable named.
    Env(String),
}

impl fmt::Display for ScheduleOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleOrigin::Code => f.write_str("code"),
            ScheduleOrigin::Config => f.write_str("config"),
            ScheduleOrigin::Env(var) => write!(f, "env {var}"),
        }
    }
}

impl ScheduleOrigin {
    /// The form [`Display`](fmt::Display) writes, read back (`code`, `config`, `env <VAR>`);
    /// anything else reads as code.
    pub fn parse(text: &str) -> ScheduleOrigin {
        match text {
            "config" => ScheduleOrigin::Config,
            _ => match text.strip_prefix("env ") {
                Some(var) => ScheduleOrigin::Env(var.to_owned()),
                None => ScheduleOrigin::Code,
            },
        }
    }
}

/// The schedule overrides a builder was given, by job name.
#[derive(Debug, Clone, Default)]
pub(crate) struct Overrides {
    pub(crate) config: HashMap<String, String>,
    pub(crate) zones: HashMap<String, String>,
}

/// What a job's schedule is, once overrides are applied: `None` when it is turned off.
pub(crate) fn resolve(
    job: &Job,
    overrides: &Overrides,
) -> Result<Option<(Schedule, ScheduleOrigin)>, SchedulerError> {
    let variable = schedule_variable(&job.name);
    let zone_variable = format!("{variable}_ZONE");
    let env_zone = std::env::var(&zone_variable).ok();
    let config_zone = overrides.zones.get(&job.name).cloned();
    let invalid = |variable: &str, source: ScheduleError| SchedulerError::Override {
        job: job.name.clone(),
        variable: variable.to_owned(),
        source,
    };
    let declared_zone = match &job.timing {
        Timing::Text { zone, .. } => zone.clone(),
        Timing::Every { .. } => None,
    };
    // The zone in force for a cron schedule: the environment's, the builder's, the code's.
    let zone = env_zone.clone().or(config_zone.clone()).or(declared_zone);
    if let Ok(text) = std::env::var(&variable) {
        let zone = zone.as_deref().filter(|_| !is_interval(&text));
        let when = When::parse(&text, zone).map_err(|e| invalid(&variable, e))?;
        let schedule =
            when.map(|when| Schedule::from_when(&when)).transpose().map_err(|e| invalid(&variable, e))?;
        return Ok(schedule.map(|schedule| (schedule, ScheduleOrigin::Env(variable))));
    }
    if let Some(text) = overrides.config.get(&job.name) {
        let zone = zone.as_deref().filter(|_| !is_interval(text));
        let from_config = |e| invalid("SchedulerBuilder::schedule_override", e);
        let when = When::parse(text, zone).map_err(from_config)?;
        let schedule = when.map(|when| Schedule::from_when(&when)).transpose().map_err(from_config)?;
        return Ok(schedule.map(|schedule| (schedule, ScheduleOrigin::Config)));
    }
    if let Some(zone) = env_zone {
        // A zone alone moves the declared cron expression to it.
        let Timing::Text { schedule, offset: None, .. } = &job.timing else {
            let reason =
                "an interval is aligned to the Unix epoch: a time zone does not apply to it".to_owned();
            return Err(invalid(&zone_variable, ScheduleError::InvalidInterval { reason }));
        };
        let when = When::parse(schedule, Some(&zone)).map_err(|e| invalid(&zone_variable, e))?;
        let schedule = when
            .map(|when| Schedule::from_when(&when))
            .transpose()
            .map_err(|e| invalid(&zone_variable, e))?;
        return Ok(schedule.map(|schedule| (schedule, ScheduleOrigin::Env(zone_variable))));
    }
    let schedule_error = |source| SchedulerError::Schedule { job: job.name.clone(), source };
    let when = declared(job)?;
    let schedule = when.map(|when| Schedule::from_when(&when)).transpose().map_err(schedule_error)?;
    Ok(schedule.map(|schedule| (schedule, ScheduleOrigin::Code)))
}

fn is_interval(text: &str) -> bool {
    text.trim_start().starts_with("every ")
}

/// The job's schedule as declared in code, checked.
fn declared(job: &Job) -> Result<Option<When>, SchedulerError> {
    let schedule_error = |source| SchedulerError::Schedule { job: job.name.clone(), source };
    match &job.timing {
        Timing::Text { schedule, zone, offset } => {
            let when = When::parse(schedule, zone.as_deref()).map_err(schedule_error)?;
            match (when, offset) {
                (when, None) => Ok(when),
                (Some(When::Every(every)), Some(offset)) => {
                    lock_schedule::Every::new(every.period(), *offset)
                        .map(|every| Some(When::Every(every)))
                        .map_err(schedule_error)
                }
                (_, Some(_)) => Err(schedule_error(ScheduleError::InvalidInterval {
                    reason: format!(
                        "`{schedule}` is not an interval: an offset applies to `every` schedules only"
                    ),
                })),
            }
        }
        Timing::Every { period, offset } => lock_schedule::Every::new(*period, *offset)
            .map(|every| Some(When::Every(every)))
            .map_err(schedule_error),
    }
}
