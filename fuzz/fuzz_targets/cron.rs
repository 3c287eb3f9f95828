//! A schedule from an arbitrary expression and time zone: never a panic; an accepted one
//! fires and its printed expression parses back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lock_scheduler::Schedule;
use lock_scheduler::chrono::{DateTime, TimeDelta, Utc};

fuzz_target!(|input: (&str, Option<&str>)| {
    let (expr, tz) = input;
    if let Ok(schedule) = Schedule::new(expr, tz) {
        let probe = DateTime::<Utc>::UNIX_EPOCH + TimeDelta::days(365 * 56);
        assert!(schedule.next_after(probe).is_some());
        assert!(Schedule::new(schedule.expression(), Some(schedule.time_zone().name())).is_ok());
    }
});
