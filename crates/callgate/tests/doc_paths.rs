//! Every repository path the documents name exists: each backticked span
//! in `README.md`, `ARCHITECTURE.md` and `docs/**/*.md` that reads as a
//! path under a top-level folder of this repository (`crates/…`,
//! `docs/…`, `tests/…`, …) names a file or folder that is there. A
//! pointer that drifted after a move fails here, with the document and the
//! line.
//!
//! Read as a path: no spaces and no placeholders (`<name>`, `…`); a
//! `::item` suffix (a test or type inside the file) is dropped, `{a,b}` is
//! expanded, and a `*` matches by prefix.

use std::path::{Path, PathBuf};

/// Top-level folders whose paths are checked.
const ROOTS: [&str; 11] = [
    "crates/",
    "docs/",
    "deploy/",
    "config/",
    "tests/",
    "migrations/",
    "proto/",
    "drills/",
    "fuzz/",
    ".ci/",
    "checks/",
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The documents checked, relative to the repository root.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut docs = vec![PathBuf::from("README.md"), PathBuf::from("ARCHITECTURE.md")];
    let mut stack = vec![PathBuf::from("docs")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&dir)) else {
            continue;
        };
        for e in entries.flatten() {
            let rel = dir.join(e.file_name());
            if e.path().is_dir() {
                stack.push(rel);
            } else if rel.extension().is_some_and(|x| x == "md") {
                docs.push(rel);
            }
        }
    }
    docs
}

/// Backticked spans of `line`.
fn spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

/// The path a span names, if it names one.
fn as_path(span: &str) -> Option<&str> {
    if span.contains(char::is_whitespace) || span.contains(['<', '>', '…', '$', '=']) {
        return None;
    }
    let path = span.split("::").next()?.trim_end_matches([',', '.', ':']);
    ROOTS.iter().any(|r| path.starts_with(r)).then_some(path)
}

/// `a/{b,c}/d` → `a/b/d`, `a/c/d` (one level of braces, possibly several).
fn expand(path: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (path.find('{'), path.find('}')) else {
        return vec![path.to_string()];
    };
    if close < open {
        return vec![path.to_string()];
    }
    let (head, tail) = (&path[..open], &path[close + 1..]);
    path[open + 1..close]
        .split(',')
        .flat_map(|alt| expand(&format!("{head}{alt}{tail}")))
        .collect()
}

/// Whether `path` exists; a `*` matches any name that starts with what
/// comes before it in its folder.
fn exists(root: &Path, path: &str) -> bool {
    let Some(star) = path.find('*') else {
        return root.join(path).exists();
    };
    let (dir, prefix) = match path[..star].rsplit_once('/') {
        Some((d, p)) => (root.join(d), p),
        None => (root.to_path_buf(), &path[..star]),
    };
    std::fs::read_dir(dir).is_ok_and(|mut es| {
        es.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with(prefix)))
    })
}

fn missing_paths(root: &Path) -> Vec<String> {
    let mut missing = Vec::new();
    for doc in documents(root) {
        let text = std::fs::read_to_string(root.join(&doc)).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            for path in spans(line).into_iter().filter_map(as_path) {
                for p in expand(path) {
                    if !exists(root, &p) {
                        missing.push(format!("{}:{}: `{p}`", doc.display(), n + 1));
                    }
                }
            }
        }
    }
    missing
}

#[test]
fn every_repository_path_the_documents_name_exists() {
    let missing = missing_paths(&repo_root());
    assert!(
        missing.is_empty(),
        "documents name paths that are not in the repository:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_reader_of_paths_expands_skips_and_matches_as_documented() {
    assert_eq!(as_path("crates/a/b.rs::a_test"), Some("crates/a/b.rs"));
    assert_eq!(as_path("cargo run -p x"), None);
    assert_eq!(as_path("docs/drills/<name>"), None);
    assert_eq!(as_path("callgate_calls_active"), None);
    assert_eq!(
        expand("tests/{a,b}.rs"),
        ["tests/a.rs".to_string(), "tests/b.rs".to_string()]
    );
    let root = repo_root();
    assert!(exists(&root, "crates/callgate/tests/doc_*"));
    assert!(!exists(&root, "crates/callgate/tests/no_such_*"));
    assert!(!exists(&root, "crates/no-such-crate/src/lib.rs"));
}
