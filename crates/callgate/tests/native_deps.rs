//! The native build tools the workspace needs are prerequisites that are
//! true: every crate in `Cargo.lock` that builds C with `cmake` makes
//! `cmake` and `make` README prerequisites and packages the Dockerfile's
//! build stage installs; every crate that compiles C with `cc` makes "a C
//! compiler" a README prerequisite, which the build stage's `rust:*-slim`
//! base carries (gcc, libc6-dev). Builds nothing: it reads the lock file,
//! the README and the Dockerfile. `deploy/check-image-build.sh` is the
//! proof that the build stage then builds.

use std::path::Path;

fn read(rel: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Packages of `lock` that depend (normally or to build) on `tool`.
fn users_of(lock: &str, tool: &str) -> Vec<String> {
    let mut users = Vec::new();
    for block in lock.split("[[package]]").skip(1) {
        let name = block
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .map(|n| n.trim_end_matches('"').to_string());
        let deps = block.split("dependencies = [").nth(1).unwrap_or("");
        let deps = deps.split(']').next().unwrap_or("");
        let uses = deps.lines().any(|l| {
            let l = l.trim().trim_end_matches(',').trim_matches('"');
            l == tool || l.starts_with(&format!("{tool} "))
        });
        if let (Some(name), true) = (name, uses) {
            users.push(name);
        }
    }
    users
}

/// The README's prerequisites section.
fn prerequisites(readme: &str) -> &str {
    let start = readme.find("## Prerequisites").unwrap_or(0);
    let rest = &readme[start..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    &rest[..end]
}

/// The Dockerfile's build stage, from its `FROM … AS build` to the next `FROM`.
fn build_stage(dockerfile: &str) -> &str {
    let start = dockerfile.find(" AS build").unwrap_or(0);
    let from = dockerfile[..start].rfind("FROM").unwrap_or(0);
    let rest = &dockerfile[from..];
    let end = rest[4..].find("\nFROM ").map_or(rest.len(), |i| i + 4);
    &rest[..end]
}

/// What is missing, if anything.
fn problems(lock: &str, readme: &str, dockerfile: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (pre, stage) = (prerequisites(readme), build_stage(dockerfile));
    let cmake = users_of(lock, "cmake");
    if !cmake.is_empty() {
        for tool in ["`cmake`", "`make`"] {
            if !pre.contains(tool) {
                out.push(format!(
                    "{cmake:?} build with cmake: README prerequisites lack {tool}"
                ));
            }
        }
        for pkg in ["cmake=", "make="] {
            if !stage.contains(&format!(" {pkg}")) {
                out.push(format!(
                    "the Dockerfile's build stage does not install {pkg}<version>"
                ));
            }
        }
    }
    let cc = users_of(lock, "cc");
    if !cc.is_empty() {
        if !pre.contains("C compiler") {
            out.push(format!(
                "{cc:?} compile C: README prerequisites lack a C compiler"
            ));
        }
        let base = stage.lines().next().unwrap_or("");
        if !(base.contains("FROM rust:") && base.contains("-slim")) {
            out.push(format!(
                "the build stage's base {base:?} is not rust:*-slim (gcc, libc6-dev)"
            ));
        }
    }
    out
}

#[test]
fn every_native_build_tool_is_a_prerequisite_and_in_the_image_build_stage() {
    let lock = read("Cargo.lock");
    assert!(
        users_of(&lock, "cmake").contains(&"opusic-sys".to_string()),
        "the lock file reads as expected (opusic-sys builds libopus with cmake)"
    );
    let found = problems(&lock, &read("README.md"), &read("Dockerfile"));
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn a_prerequisite_dropped_from_the_readme_or_the_image_is_caught() {
    let (lock, readme, docker) = (read("Cargo.lock"), read("README.md"), read("Dockerfile"));
    let no_cmake = readme.replace("`cmake`", "cmake-less");
    assert!(!problems(&lock, &no_cmake, &docker).is_empty());
    let no_make = docker.replace("make=4.3-4.1", "");
    assert!(!problems(&lock, &readme, &no_make).is_empty());
    let no_cc = readme.replace("C compiler", "compiler");
    assert!(!problems(&lock, &no_cc, &docker).is_empty());
}
