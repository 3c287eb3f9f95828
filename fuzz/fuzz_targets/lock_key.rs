//! `validate_key` on arbitrary text: never a panic; an accepted key has an auxiliary prefix in
//! its own hash slot.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|key: &str| {
    if lock_core::validate_key(key).is_ok() {
        let prefix = lock_core::schema::aux_prefix(key);
        assert!(prefix.ends_with(':'));
    }
});
