//! The documentation's links and structure: every relative link of README.md, the guide and
//! the other top-level documents names a file that exists (and, with `#anchor`, a heading in
//! it); every chapter file is in the guide's SUMMARY.md and compiled by `lib.rs`; the
//! README's `rust,ignore` blocks are verbatim copies of compiled snippets; every fence names
//! its language (rustdoc would compile a bare one as Rust, mdBook would not highlight it).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn guide_src() -> PathBuf {
    root().join("docs/guide/src")
}

/// The Markdown files whose links are checked.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> =
        ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md", "CHANGELOG.md", "CONTRIBUTING.md"]
            .iter()
            .map(|name| root().join(name))
            .filter(|path| path.exists())
            .collect();
    for crate_dir in
        ["lock-core", "lock-macros", "scheduler", "scheduler-macros", "schedule", "console", "lockctl"]
    {
        let readme = root().join(crate_dir).join("README.md");
        if readme.exists() {
            docs.push(readme);
        }
    }
    docs.extend(chapter_files());
    docs
}

fn chapter_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(guide_src())
        .expect("docs/guide/src exists")
        .map(|entry| entry.expect("readable directory").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    files.sort();
    files
}

fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|e| panic!("cannot resolve {}: {e}", path.display()))
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The text outside fenced code blocks, line by line (links inside code are not links).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut inside = false;
    let mut lines = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            inside = !inside;
            continue;
        }
        if !inside {
            lines.push((n + 1, line));
        }
    }
    lines
}

/// The inline links `[text](target)` and the reference definitions `[name]: target` of the
/// prose, with their line numbers.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in prose_lines(text) {
        // Inline code is not a link either.
        let mut prose = String::new();
        let mut in_code = false;
        for ch in line.chars() {
            if ch == '`' {
                in_code = !in_code;
            } else if !in_code {
                prose.push(ch);
            }
        }
        let mut rest = prose.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            found.push((n, after[..end].to_owned()));
            rest = &after[end..];
        }
        let trimmed = prose.trim_start();
        if trimmed.starts_with('[')
            && let Some(i) = trimmed.find("]: ")
        {
            found.push((n, trimmed[i + 3..].trim().to_owned()));
        }
    }
    found
}

/// GitHub's and mdBook's anchor of a heading: lower case, punctuation dropped, spaces to
/// hyphens.
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

fn anchors(text: &str) -> BTreeSet<String> {
    prose_lines(text)
        .into_iter()
        .filter_map(|(_, line)| {
            let hashes = line.chars().take_while(|&c| c == '#').count();
            (hashes > 0 && line[hashes..].starts_with(' ')).then(|| anchor(&line[hashes..]))
        })
        .collect()
}

/// A repository host this project has no home on: a link there points nowhere. The guide names
/// files outside the book as code (`deploy/kubernetes/`), never as links (a relative link would
/// leave the rendered site). Links of this shape are still checked against this checkout, so
/// that an old one fails with its path.
const REPOSITORY: &str = "https://github.com/redlock-rs/distributed-lock/";

/// The local path of a link into this repository's `main` on GitHub.
fn repository_path(target: &str) -> Option<&str> {
    let rest = target.strip_prefix(REPOSITORY)?;
    rest.strip_prefix("blob/main/").or_else(|| rest.strip_prefix("tree/main/"))
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = read(&doc);
        let dir = doc.parent().expect("a file has a directory");
        for (line, target) in links(&text) {
            let in_repository = repository_path(&target);
            if in_repository.is_none()
                && (target.starts_with("http://")
                    || target.starts_with("https://")
                    || target.starts_with("mailto:"))
            {
                continue;
            }
            checked += 1;
            if in_repository.is_some() {
                broken.push(format!(
                    "{}:{line}: `{target}`: this repository has no public home, the link points nowhere",
                    doc.display()
                ));
                continue;
            }
            let local = in_repository.unwrap_or(&target);
            let (file, fragment) = match local.split_once('#') {
                Some((file, fragment)) => (file, Some(fragment)),
                None => (local, None),
            };
            let path = match (in_repository, file.is_empty()) {
                (Some(_), _) => root().join(file),
                (None, true) => doc.clone(),
                (None, false) => dir.join(file),
            };
            if !path.exists() {
                broken.push(format!("{}:{line}: `{target}`: no such file", doc.display()));
                continue;
            }
            // A chapter must not link out of the book: the rendered site would not have it.
            if in_repository.is_none()
                && doc.starts_with(guide_src())
                && !canonical(&path).starts_with(canonical(&guide_src()))
            {
                broken.push(format!(
                    "{}:{line}: `{target}` leaves the book: name the file as code (`path` in the repository) instead",
                    doc.display()
                ));
                continue;
            }

            if let Some(fragment) = fragment {
                if path.is_dir() || path.extension().is_none_or(|ext| ext != "md") {
                    broken.push(format!(
                        "{}:{line}: `{target}`: an anchor into a non-Markdown file",
                        doc.display()
                    ));
                } else if !anchors(&read(&path)).contains(fragment) {
                    broken.push(format!("{}:{line}: `{target}`: no heading with that anchor", doc.display()));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} relative links found: is the parser still reading the documents?");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_chapter_is_in_the_summary_and_compiled() {
    let summary = read(&guide_src().join("SUMMARY.md"));
    let lib = read(&root().join("docs/lib.rs"));
    let listed: BTreeSet<String> = links(&summary).into_iter().map(|(_, target)| target).collect();
    let mut chapters = 0;
    for file in chapter_files() {
        let name = file.file_name().and_then(|n| n.to_str()).expect("a UTF-8 file name").to_owned();
        if name == "SUMMARY.md" {
            continue;
        }
        chapters += 1;
        assert!(listed.contains(&name), "docs/guide/src/{name} is not in SUMMARY.md");
        assert!(
            lib.contains(&format!("=> \"{name}\"")),
            "docs/lib.rs does not compile docs/guide/src/{name}"
        );
    }
    for target in &listed {
        assert!(guide_src().join(target).exists(), "SUMMARY.md lists {target}, which does not exist");
    }
    assert!(chapters >= 10, "only {chapters} chapters found");
}

/// The fenced blocks of a text: (line of the opening fence, its info string, its body).
fn fences(text: &str) -> Vec<(usize, String, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, String, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match open.take() {
            None if trimmed.starts_with("```") => {
                open = Some((n + 1, trimmed[3..].trim().to_owned(), String::new()))
            }
            None => {}
            Some(block) if trimmed.starts_with("```") => blocks.push(block),
            Some((start, info, mut body)) => {
                body.push_str(line);
                body.push('\n');
                open = Some((start, info, body));
            }
        }
    }
    assert!(open.is_none(), "an unclosed code fence");
    blocks
}

#[test]
fn every_fence_names_its_language() {
    let mut bare = Vec::new();
    for doc in documents() {
        for (line, info, _) in fences(&read(&doc)) {
            if info.is_empty() {
                bare.push(format!("{}:{line}", doc.display()));
            }
        }
    }
    assert!(
        bare.is_empty(),
        "code fences without a language (rustdoc compiles them as Rust):\n{}",
        bare.join("\n")
    );
}

#[test]
fn the_readme_shows_its_code_as_compiled() {
    let readme = read(&root().join("README.md"));
    let mut snippets = String::new();
    for entry in fs::read_dir(root().join("docs/snippets")).expect("docs/snippets exists") {
        snippets.push_str(&read(&entry.expect("readable directory").path()));
    }
    let mut rust_blocks = 0;
    for (line, info, body) in fences(&readme) {
        if !info.starts_with("rust") {
            continue;
        }
        rust_blocks += 1;
        // No hidden `# ` lines: GitHub shows them.
        assert!(
            !body.lines().any(|l| l.starts_with("# ") || l == "#"),
            "README.md:{line}: hidden `# ` lines show on GitHub; make the block complete"
        );
        match info.as_str() {
            "rust" | "rust,no_run" => {}
            "rust,ignore" => assert!(
                snippets.contains(&body),
                "README.md:{line}: a `rust,ignore` block must be a verbatim copy of a snippet in docs/snippets"
            ),
            other => {
                panic!("README.md:{line}: `{other}`: use rust, rust,no_run, or rust,ignore with a snippet")
            }
        }
    }
    assert!(rust_blocks >= 4, "only {rust_blocks} Rust blocks in README.md");
}

#[test]
fn the_readme_stays_one_screenful_of_pages() {
    let lines = read(&root().join("README.md")).lines().count();
    assert!(lines <= 320, "README.md has {lines} lines: move detail into the guide (docs/guide)");
}

/// `{{#include path:anchor}}` directives of a block: (path, anchor).
fn includes(body: &str) -> Vec<(String, Option<String>)> {
    body.lines()
        .filter_map(|line| {
            let inner = line.trim().strip_prefix("{{#include ")?.strip_suffix("}}")?;
            Some(match inner.split_once(':') {
                Some((path, anchor)) => (path.to_owned(), Some(anchor.to_owned())),
                None => (inner.to_owned(), None),
            })
        })
        .collect()
}

#[test]
fn the_guide_shows_uncompiled_code_only_through_includes_of_compiled_files() {
    let mut included = 0;
    for chapter in chapter_files() {
        let text = read(&chapter);
        for (line, info, body) in fences(&text) {
            let directives = includes(&body);
            if info == "rust,ignore" {
                let other = body
                    .lines()
                    .filter(|l| !l.trim().is_empty() && !l.trim().starts_with("{{#include "))
                    .count();
                assert!(
                    other == 0 && !directives.is_empty(),
                    "{}:{line}: a `rust,ignore` block may only include compiled code (`{{{{#include path:anchor}}}}`)",
                    chapter.display()
                );
            }
            for (path, anchor) in directives {
                included += 1;
                let file = guide_src().join(&path);
                assert!(file.exists(), "{}:{line}: includes {path}, which does not exist", chapter.display());
                if let Some(anchor) = anchor {
                    let source = read(&file);
                    assert!(
                        source.contains(&format!("ANCHOR: {anchor}\n"))
                            && source.contains(&format!("ANCHOR_END: {anchor}\n")),
                        "{}:{line}: {path} has no anchor `{anchor}`",
                        chapter.display()
                    );
                }
            }
        }
    }
    assert!(included > 0, "no includes found: is the parser still reading the chapters?");
}
