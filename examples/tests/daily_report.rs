//! Runs the built `daily_report` example (3 replica processes against a private Redis) and
//! checks its output: exactly one "Starting" line per tick, and a skip line from every other
//! replica.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

/// `cargo test` builds the package's examples next to its test binaries:
/// target/<profile>/examples/daily_report.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    let path = profile_dir.join("examples").join(format!("daily_report{}", std::env::consts::EXE_SUFFIX));
    let hint = "run `cargo test -p examples` (not only `--test daily_report`), which builds the examples";
    let built = std::fs::metadata(&path).and_then(|m| m.modified());
    let built = built.unwrap_or_else(|_| panic!("{} is missing: {hint}", path.display()));
    // A filtered run does not rebuild the example: refuse to test a stale binary.
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/daily_report.rs");
    let edited = std::fs::metadata(&source).and_then(|m| m.modified()).expect("example source");
    assert!(built >= edited, "{} is older than its source: {hint}", path.display());
    path
}

#[test]
fn three_replicas_generate_exactly_one_report_per_tick() {
    let output = Command::new(example_binary())
        .args(["--replicas", "3", "--ticks", "4", "--cron", "* * * * * *"])
        .env_remove("REDIS_URL")
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the example failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let mut per_tick: BTreeMap<&str, (Vec<&str>, Vec<&str>)> = BTreeMap::new();
    for line in stdout.lines() {
        let Some((pod, rest)) = line.strip_prefix('[').and_then(|l| l.split_once("] ")) else { continue };
        let Some(tick) = rest.rsplit_once("(tick ").and_then(|(_, t)| t.strip_suffix(')')) else { continue };
        let entry = per_tick.entry(tick).or_default();
        if rest.starts_with("Starting daily report generation") {
            entry.0.push(pod);
        } else if rest.starts_with("Another instance is generating the report, skipping") {
            entry.1.push(pod);
        }
    }
    assert_eq!(per_tick.len(), 4, "four ticks in the output:\n{stdout}");
    for (tick, (ran, skipped)) in &per_tick {
        assert_eq!(ran.len(), 1, "tick {tick}: exactly one replica generates the report:\n{stdout}");
        assert_eq!(skipped.len(), 2, "tick {tick}: the two others skip:\n{stdout}");
        let mut pods: Vec<&str> = ran.iter().chain(skipped).copied().collect();
        pods.sort_unstable();
        assert_eq!(pods, ["pod-1", "pod-2", "pod-3"], "tick {tick}: every replica reports once");
    }
    assert!(stdout.contains("Each of the 4 ticks generated exactly one report."), "{stdout}");
}
