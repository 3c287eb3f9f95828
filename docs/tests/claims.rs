//! Numbers the guide states about the code, read off the code: a count in prose goes stale
//! silently otherwise.

use std::fs;
use std::path::Path;

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(relative);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

#[test]
fn the_contract_suite_counts_match_the_testing_chapter() {
    let suite = read("tests/tests/contract/main.rs");
    let start = suite.find("contract!(@cases").expect("the contract macro lists its cases");
    let list = &suite[start + "contract!(@cases".len()..];
    let list = &list[..list.find(");").expect("the case list ends")];
    let cases: Vec<&str> = list.split(',').map(str::trim).filter(|c| !c.is_empty()).collect();
    let deployments = suite.lines().filter(|l| l.starts_with("contract!(") && !l.contains("@cases")).count();
    assert!(
        cases.len() >= 8 && deployments >= 5,
        "parsed {} cases and {deployments} deployments",
        cases.len()
    );

    let chapter = read("CONTRIBUTING.md");
    assert!(
        chapter.contains(&format!("{} behaviour tests", cases.len())),
        "CONTRIBUTING.md must say {} behaviour tests",
        cases.len()
    );
    assert!(
        chapter.contains(&format!("All {} ({} × {deployments})", cases.len() * deployments, cases.len())),
        "CONTRIBUTING.md must say how many contract tests run"
    );
    for case in cases {
        assert!(
            chapter.contains(&format!("`{case}`")),
            "CONTRIBUTING.md does not name the contract case `{case}`"
        );
    }
}

/// Every metric the crates record, with its labels, from their source: `metrics::counter!(
/// "name", "label" => ...)` and the like.
fn recorded_metrics() -> Vec<(String, Vec<String>)> {
    // Every source file of the published crates that records metrics.
    let mut sources = Vec::new();
    for dir in ["lock-core/src", "scheduler/src", "console/src", "lockctl/src"] {
        rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir), &mut sources);
    }
    let mut found: Vec<(String, Vec<String>)> = Vec::new();
    for source in sources {
        let text =
            fs::read_to_string(&source).unwrap_or_else(|e| panic!("reading {}: {e}", source.display()));
        for kind in ["counter!(", "gauge!(", "histogram!("] {
            for (at, _) in text.match_indices(&format!("metrics::{kind}")) {
                let call = &text[at + "metrics::".len() + kind.len()..];
                let call = &call[..closing_paren(call)];
                let mut parts = split_top_level(call).into_iter().map(str::trim);
                let name = parts.next().expect("a name").trim_matches('"').to_owned();
                let labels: Vec<String> = parts
                    .filter_map(|p| p.split_once("=>"))
                    .map(|(label, _)| label.trim().trim_matches('"').to_owned())
                    .collect();
                match found.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, known)) => {
                        for label in labels {
                            if !known.contains(&label) {
                                known.push(label);
                            }
                        }
                    }
                    None => found.push((name, labels)),
                }
            }
        }
    }
    found
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Where the call whose arguments `text` starts with ends: its `)`, nested calls skipped.
fn closing_paren(text: &str) -> usize {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => return i,
            ')' => depth -= 1,
            _ => {}
        }
    }
    panic!("a metrics macro call does not end: {text:.80}")
}

/// `text` split at the commas outside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

#[test]
fn the_metrics_table_lists_every_metric_with_its_labels() {
    let metrics = recorded_metrics();
    assert!(metrics.len() >= 14, "parsed {metrics:?}");
    let acquisitions = metrics.iter().find(|(n, _)| n == "lock_acquisitions_total").expect("parsed");
    assert_eq!(acquisitions.1, ["key", "kind", "outcome"], "the parser reads every label");
    let chapter = read("docs/guide/src/operating.md");
    let table: Vec<&str> = chapter.lines().filter(|l| l.starts_with("| `")).collect();
    for (name, labels) in &metrics {
        let row = table
            .iter()
            .find(|row| row.starts_with(&format!("| `{name}` |")))
            .unwrap_or_else(|| panic!("operating.md's metrics table lacks {name}"));
        let label_cell = row.split('|').nth(3).expect("a labels column");
        for label in labels {
            assert!(
                label_cell.contains(&format!("`{label}`")),
                "operating.md: {name} lacks its `{label}` label"
            );
        }
    }
    // And names nothing the code does not record.
    for row in table
        .iter()
        .filter(|r| r.contains("| counter |") || r.contains("| gauge |") || r.contains("| histogram |"))
    {
        let name = row.split('`').nth(1).expect("a name");
        assert!(metrics.iter().any(|(n, _)| n == name), "operating.md lists {name}, which nothing records");
    }
    // The alert rules use only metrics the code records (histograms through _sum / _count).
    let rules = read("deploy/prometheus/alerts.yml");
    for line in rules.lines().filter(|l| l.contains("expr:") || l.trim_start().starts_with("sum ")) {
        for word in line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("lock_") || word.starts_with("scheduler_") {
                let base =
                    word.trim_end_matches("_sum").trim_end_matches("_count").trim_end_matches("_bucket");
                assert!(
                    metrics.iter().any(|(n, _)| n == base),
                    "alerts.yml uses {word}, which nothing records"
                );
            }
        }
    }
}
