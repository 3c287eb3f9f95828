//! The install path a new user follows (issue 51, point 1): every dependency line and
//! `cargo install` line in the documentation is the same and points at a crate of this
//! repository as it is; every tag the documentation names exists; nothing links to a home the
//! project does not have (docs.rs pages of unpublished crates, a repository host).

use std::fs;
use std::path::{Path, PathBuf};

/// The documented lines, one per crate: a clone of this repository next to the user's project.
const LINES: [(&str, &str); 3] = [
    ("lock-core", r#"lock-core = { path = "../distributed-lock/lock-core" }"#),
    ("lock-scheduler", r#"lock-scheduler = { path = "../distributed-lock/scheduler" }"#),
    ("lock-console", r#"lock-console = { path = "../distributed-lock/console" }"#),
];
/// How lockctl is installed from that clone.
const INSTALL: &str = "cargo install --path ../distributed-lock/lockctl";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every Markdown document a user reads: the READMEs, the guide, CONTRIBUTING.md.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut docs = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
    for entry in fs::read_dir(&root).expect("the repository") {
        let readme = entry.expect("an entry").path().join("README.md");
        if readme.is_file() {
            docs.push(readme);
        }
    }
    for entry in fs::read_dir(root.join("docs/guide/src")).expect("the guide") {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push(path);
        }
    }
    docs.retain(|d| d.is_file());
    docs
}

/// Every manifest of the workspace.
fn manifests() -> Vec<PathBuf> {
    let root = root();
    let mut found = vec![root.join("Cargo.toml")];
    for entry in fs::read_dir(&root).expect("the repository") {
        let manifest = entry.expect("an entry").path().join("Cargo.toml");
        if manifest.is_file() {
            found.push(manifest);
        }
    }
    found
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

#[test]
fn every_dependency_line_is_the_documented_one_and_resolves() {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for doc in documents() {
        for (n, line) in read(&doc).lines().enumerate() {
            let line = line.trim();
            for (name, documented) in LINES {
                if line.starts_with(&format!("{name} = ")) && !line.starts_with(&format!("{name} = \"0.")) {
                    checked += 1;
                    if line != documented {
                        wrong.push(format!(
                            "{}:{}: `{line}`: the documented line is `{documented}`",
                            doc.display(),
                            n + 1
                        ));
                    }
                }
            }
            if line.starts_with("cargo install") && line.contains("lockctl") {
                checked += 1;
                if !line.starts_with(INSTALL) {
                    wrong.push(format!(
                        "{}:{}: `{line}`: the documented line is `{INSTALL}`",
                        doc.display(),
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(checked >= 6, "only {checked} install lines found: is the parser still reading the docs?");
    assert!(wrong.is_empty(), "install lines that differ:\n{}", wrong.join("\n"));
    // Each path, taken from a project next to the clone, is the crate it names.
    for (name, documented) in LINES {
        let dir = documented.split('"').nth(1).expect("a path").trim_start_matches("../distributed-lock/");
        let manifest = read(&root().join(dir).join("Cargo.toml"));
        assert!(manifest.contains(&format!("name = \"{name}\"")), "{dir}/Cargo.toml is not {name}");
    }
    let lockctl = INSTALL.rsplit('/').next().expect("a path");
    assert!(read(&root().join(lockctl).join("Cargo.toml")).contains("name = \"lockctl\""));
}

#[test]
fn every_tag_the_documentation_names_exists() {
    let tags = std::process::Command::new("git")
        .args(["tag", "--list"])
        .current_dir(root())
        .output()
        .expect("git runs");
    assert!(tags.status.success(), "git tag failed");
    let tags = String::from_utf8_lossy(&tags.stdout).into_owned();
    let tags: Vec<&str> = tags.lines().map(str::trim).collect();
    let mut missing = Vec::new();
    let mut files = documents();
    files.extend(manifests());
    for file in files {
        for (n, line) in read(&file).lines().enumerate() {
            for pattern in ["tag = \"", "--tag "] {
                for (at, _) in line.match_indices(pattern) {
                    let rest = &line[at + pattern.len()..];
                    let tag: String = rest.chars().take_while(|c| !matches!(c, '"' | ' ' | '`')).collect();
                    if !tags.contains(&tag.as_str()) {
                        missing.push(format!(
                            "{}:{}: tag `{tag}` is not in `git tag`",
                            file.display(),
                            n + 1
                        ));
                    }
                }
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn nothing_points_at_a_home_the_project_does_not_have() {
    let mut found = Vec::new();
    let mut files = documents();
    files.extend(manifests());
    files.push(root().join("docs/guide/book.toml"));
    for dir in ["lock-core/src", "scheduler/src"] {
        files.push(root().join(dir).join("overview.md"));
    }
    for file in files {
        for (n, line) in read(&file).lines().enumerate() {
            // Unpublished crates have no docs.rs page (third-party crates do).
            let docs_rs =
                ["lock-core", "lock-macros", "lock-scheduler", "lock-schedule", "lock-console", "lockctl"]
                    .iter()
                    .any(|c| line.contains(&format!("docs.rs/{c}")));
            let host = line.contains("github.com/redlock-rs");
            let manifest_url = file.extension().is_some_and(|e| e == "toml")
                && ["repository", "homepage", "documentation"]
                    .iter()
                    .any(|k| line.trim_start().starts_with(k));
            if docs_rs || host || manifest_url {
                found.push(format!("{}:{}: {line}", file.display(), n + 1));
            }
        }
    }
    assert!(found.is_empty(), "links to nowhere:\n{}", found.join("\n"));
}

#[test]
fn the_stated_msrv_is_the_one_ci_checks() {
    let manifest = read(&root().join("Cargo.toml"));
    let version = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("the workspace's rust-version")
        .trim_matches('"')
        .to_owned();
    // clippy's incompatible_msrv reads rust-version; denied, so CI's clippy -D warnings fails on
    // a standard-library API newer than it.
    assert!(manifest.contains("incompatible_msrv = \"deny\""), "the workspace must deny incompatible_msrv");
    assert!(
        !read(&root().join("clippy.toml")).contains("msrv"),
        "clippy.toml must not override rust-version"
    );
    for doc in ["README.md", "docs/guide/src/getting-started.md", "docs/guide/src/compatibility.md"] {
        let text = read(&root().join(doc));
        assert!(
            text.contains(&format!("Rust {version}")) || text.contains(&format!("({version})")),
            "{doc} must state Rust {version}"
        );
    }
}
