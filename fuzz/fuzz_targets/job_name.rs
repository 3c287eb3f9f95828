//! Job names: one rule for the scheduler and its control functions, and a valid name comes back
//! out of its keys.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|name: &str| {
    let ok = lock_scheduler::schema::job_name_problem(name).is_none();
    assert_eq!(lock_scheduler::pause_key(name).is_ok(), ok);
    if let Ok(key) = lock_scheduler::history_key(name) {
        assert_eq!(lock_scheduler::schema::job_of_key(&key), Some(name));
    }
});
