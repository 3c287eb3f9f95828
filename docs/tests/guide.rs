//! The guide reads as a guide (issue 51, point 3): no heading cuts a sentence in half, and the
//! user chapters carry no dated history, test-run logs or machine descriptions (history lives
//! in CHANGELOG.md and bench/HISTORY.md, the test suite's own notes in CONTRIBUTING.md).

use std::fs;
use std::path::{Path, PathBuf};

fn chapters() -> Vec<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("guide/src");
    let mut found: Vec<PathBuf> = fs::read_dir(&src)
        .expect("the guide")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md") && !p.ends_with("SUMMARY.md"))
        .collect();
    found.sort();
    assert!(found.len() >= 15, "only {} chapters found", found.len());
    found
}

/// The lines outside code fences, with inline code removed (sample output and literals may
/// hold anything), numbered from 1.
fn prose(text: &str) -> Vec<(usize, String)> {
    let mut inside = false;
    let mut lines = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            inside = !inside;
            continue;
        }
        if !inside {
            let without_code: String = line.split('`').step_by(2).collect::<Vec<_>>().join("");
            lines.push((n + 1, without_code));
        }
    }
    lines
}

#[test]
fn no_heading_cuts_a_sentence() {
    let mut cut = Vec::new();
    for chapter in chapters() {
        let text = fs::read_to_string(&chapter).expect("readable");
        let lines: Vec<&str> = text.lines().collect();
        let mut fenced = false;
        for (i, line) in lines.iter().enumerate() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
            }
            if fenced || !line.starts_with('#') {
                continue;
            }
            let Some(next) = lines[i + 1..].iter().find(|l| !l.trim().is_empty()) else { continue };
            let starts_mid_sentence = next.starts_with(['(', ',', ':', ';']) || next.starts_with("while ");
            if starts_mid_sentence {
                cut.push(format!("{}:{}: `{line}` is followed by `{next}`", chapter.display(), i + 1));
            }
        }
    }
    assert!(cut.is_empty(), "headings that cut a sentence:\n{}", cut.join("\n"));
}

#[test]
fn user_chapters_hold_no_dated_history_or_machine_logs() {
    const PHRASES: [&str; 10] = [
        "fixed on",
        "used to take",
        "it used to",
        "until this release",
        "before this was tested",
        "(was ",
        "this 2-core machine",
        "other builds ran",
        "shared with three other builds",
        "measured today",
    ];
    let mut found = Vec::new();
    for chapter in chapters() {
        let text = fs::read_to_string(&chapter).expect("readable");
        for (n, line) in prose(&text) {
            let lower = line.to_lowercase();
            let dated = lower.as_bytes().windows(10).any(|w| {
                w[..4].iter().all(u8::is_ascii_digit)
                    && w[4] == b'-'
                    && w[5..7].iter().all(u8::is_ascii_digit)
                    && w[7] == b'-'
                    && w[8..].iter().all(u8::is_ascii_digit)
                    && w.starts_with(b"20")
            });
            if dated || PHRASES.iter().any(|p| lower.contains(p)) {
                found.push(format!("{}:{n}: {line}", chapter.display()));
            }
        }
    }
    assert!(found.is_empty(), "history or test-run logs in user chapters:\n{}", found.join("\n"));
}

#[test]
fn the_locks_chapter_names_every_lock_error() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let source = fs::read_to_string(root.join("lock-core/src/error.rs")).expect("lock-core's errors");
    let start = source.find("pub enum LockError {").expect("the LockError enum");
    let body = &source[start..];
    let body = &body[..body.find("\n}\n").expect("the enum ends")];
    // Variants: the lines indented once that start with a capital letter.
    let variants: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("    ") && !l.starts_with("     "))
        .map(str::trim)
        .filter(|l| l.chars().next().is_some_and(char::is_uppercase))
        .map(|l| l.split(|c: char| !c.is_alphanumeric()).next().unwrap_or_default())
        .collect();
    assert!(variants.len() >= 15, "parsed {variants:?}");
    let chapter = fs::read_to_string(root.join("docs/guide/src/locks.md")).expect("locks.md");
    let errors = &chapter[chapter.find("## Errors").expect("an Errors section")..];
    let errors = &errors[..errors[3..].find("\n## ").map_or(errors.len(), |i| i + 3)];
    let missing: Vec<&&str> = variants.iter().filter(|v| !errors.contains(&format!("`{v}`"))).collect();
    assert!(missing.is_empty(), "locks.md's Errors section does not name {missing:?}");
}
