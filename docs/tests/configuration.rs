//! The configuration reference (docs/guide/src/configuration.md) against the builders: every
//! public method of `LockClientBuilder` and `SchedulerBuilder` is listed, and the defaults the
//! chapter states are the constants of the code.

use std::fs;
use std::path::Path;
use std::time::Duration;

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(relative);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The `pub fn` names in `impl <ty> {` of `source`.
fn builder_methods(source: &str, ty: &str) -> Vec<String> {
    let start = source.find(&format!("impl {ty} {{")).unwrap_or_else(|| panic!("impl {ty} not found"));
    let body = &source[start..];
    // The impl block ends at the first line that is a lone `}`.
    let end = body.find("\n}\n").expect("the impl block ends");
    body[..end]
        .lines()
        .filter_map(|line| line.trim().strip_prefix("pub fn "))
        .map(|rest| rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect())
        .filter(|name: &String| name != "build")
        .collect()
}

#[test]
fn every_builder_method_is_in_the_configuration_chapter() {
    let chapter = read("docs/guide/src/configuration.md");
    let mut missing = Vec::new();
    let mut checked = 0;
    for (file, ty) in [
        ("lock-core/src/client/builder.rs", "LockClientBuilder"),
        ("scheduler/src/scheduler.rs", "SchedulerBuilder"),
    ] {
        for method in builder_methods(&read(file), ty) {
            checked += 1;
            if !chapter.contains(&format!("| `{method}` |")) {
                missing.push(format!("{ty}::{method}"));
            }
        }
    }
    assert!(checked >= 20, "only {checked} builder methods found: is the parser still reading the code?");
    assert!(missing.is_empty(), "not in configuration.md: {missing:?}");
}

#[test]
fn the_defaults_stated_are_the_codes() {
    let chapter = read("docs/guide/src/configuration.md");
    let stated = |text: &str| assert!(chapter.contains(text), "configuration.md must say {text}");
    assert_eq!(lock_core::DEFAULT_WATCHDOG_LEASE, Duration::from_secs(30));
    stated("30 s (`DEFAULT_WATCHDOG_LEASE`)");
    assert_eq!(lock_core::DEFAULT_LIVENESS_TTL, Duration::from_secs(6));
    stated("6 s (`DEFAULT_LIVENESS_TTL`)");
    assert_eq!(lock_core::DEFAULT_COMMAND_TIMEOUT, Duration::from_secs(2));
    stated("2 s (`DEFAULT_COMMAND_TIMEOUT`)");
    assert_eq!(
        (lock_core::DEFAULT_WAIT_BACKOFF, lock_core::DEFAULT_MAX_WAIT_BACKOFF),
        (Duration::from_millis(50), Duration::from_secs(1))
    );
    stated("50 ms, doubling to 1 s");
    assert_eq!(lock_scheduler::DEFAULT_SHUTDOWN_GRACE, Duration::from_secs(25));
    stated("25 s (`DEFAULT_SHUTDOWN_GRACE`)");
    assert_eq!(lock_scheduler::DEFAULT_CLAIM_GRACE, Duration::from_millis(500));
    stated("500 ms (`DEFAULT_CLAIM_GRACE`)");
    assert_eq!(lock_scheduler::DEFAULT_GROUP, "default");
    stated("`default` (`DEFAULT_GROUP`)");
}
