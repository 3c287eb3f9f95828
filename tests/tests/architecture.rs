//! ARCHITECTURE.md names modules by their paths: each one must exist, so the map cannot drift
//! from the code unnoticed.

use std::path::Path;

#[test]
fn every_path_architecture_md_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut checked = 0;
    let mut missing = Vec::new();
    for (i, span) in text.split('`').enumerate() {
        // Odd pieces are inside backticks. A path from the repository's root starts with one
        // of its folders (`lock-core/src/...`); a name relative to the row it is in
        // (`acquire/`) is not checked.
        let top = span.split('/').next().unwrap_or_default();
        let from_root = span.contains('/')
            && !span.contains(' ')
            && [
                "lock-core",
                "lock-macros",
                "scheduler",
                "console",
                "lockctl",
                "examples",
                "tests",
                "bench",
                "fixture",
                "fuzz",
                "scripts",
                "docs",
                "deploy",
            ]
            .contains(&top);
        if i % 2 == 0 || !from_root {
            continue;
        }
        checked += 1;
        if !root.join(span).exists() {
            missing.push(span.to_owned());
        }
    }
    assert!(missing.is_empty(), "ARCHITECTURE.md names paths that do not exist: {missing:?}");
    assert!(checked > 30, "only {checked} paths found in ARCHITECTURE.md: did its format change?");
}
