#![doc = include_str!("../README.md")]

mod cron;
mod duration;
mod error;
mod every;
mod field;
mod name;
mod when;
mod zone;

pub use cron::parse_cron;
pub use duration::{format_duration, parse_duration};
pub use error::ScheduleError;
pub use every::Every;
pub use field::CronField;
pub use name::{MAX_JOB_NAME_LEN, default_job_name, job_name_problem, schedule_variable};
pub use when::When;
pub use zone::parse_zone;

/// The time zone crate ([`parse_zone`] returns its `Tz`).
pub use chrono_tz;
/// The cron crate the expressions are parsed with ([`parse_cron`] returns its `Cron`).
pub use croner;
