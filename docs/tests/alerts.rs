//! The alert rules (deploy/prometheus/alerts.yml) against the runbook and their tests: every
//! alert has a `runbook_url` naming a section of the guide's Operating chapter that exists, and
//! a promtool test in alerts.test.yml whose input gives a healthy series beside the one that
//! raises it.

use std::collections::BTreeSet;
use std::path::Path;

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("reading {}: {e}", full.display()))
}

/// mdBook's anchor of a heading: lower case, spaces as `-`, other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// (alert, its runbook_url) in the order of the rules.
fn alerts() -> Vec<(String, Option<String>)> {
    let rules = read("deploy/prometheus/alerts.yml");
    let mut found: Vec<(String, Option<String>)> = Vec::new();
    for line in rules.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix("- alert: ") {
            found.push((name.to_owned(), None));
        } else if let Some(url) = line.strip_prefix("runbook_url: ") {
            let last = found.last_mut().expect("a runbook_url inside an alert");
            last.1 = Some(url.trim_matches('"').to_owned());
        }
    }
    found
}

#[test]
fn every_alert_names_a_runbook_section_that_exists() {
    let chapter = read("docs/guide/src/operating.md");
    let anchors: BTreeSet<String> = chapter
        .lines()
        .filter_map(|l| l.strip_prefix("### ").or_else(|| l.strip_prefix("## ")))
        .map(anchor)
        .collect();
    let alerts = alerts();
    assert!(alerts.len() >= 10, "parsed {alerts:?}");
    for (alert, url) in alerts {
        let url = url.unwrap_or_else(|| panic!("{alert} has no runbook_url"));
        let fragment = url
            .strip_prefix("operating.html#")
            .unwrap_or_else(|| panic!("{alert}: runbook_url {url} is not operating.html#<section>"));
        assert!(anchors.contains(fragment), "{alert}: operating.md has no section #{fragment}");
    }
}

#[test]
fn every_alert_is_tested_next_to_a_healthy_series() {
    let tests = read("deploy/prometheus/alerts.test.yml");
    // One promtool test per `- interval:` block.
    let blocks: Vec<&str> = tests.split("  - interval:").skip(1).collect();
    for (alert, _) in alerts() {
        let tested: Vec<&&str> =
            blocks.iter().filter(|b| b.contains(&format!("alertname: {alert}\n"))).collect();
        assert!(!tested.is_empty(), "alerts.test.yml does not test {alert}");
        assert!(
            tested.iter().any(|b| b.contains("exp_alerts:\n          - exp_labels")),
            "{alert} is never expected to fire"
        );
        assert!(
            tested.iter().any(|b| b.lines().any(|l| l.trim().starts_with("# healthy"))),
            "{alert}'s test has no series marked `# healthy`"
        );
    }
}
