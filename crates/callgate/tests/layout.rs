//! The layout rules of the server crate and the repository, checked on the
//! source text so that a change which breaks one fails the suite instead
//! of a rule in a document.
//!
//! 1. **No import circle inside `callgate`.** Every file is a module; a
//!    file depends on another when it names it — `use crate::…`,
//!    `super::…`, or a `crate::…` path in code. A module reaching into its
//!    own descendants is ownership, not an import, and is not an edge
//!    (`call::core` naming `call::core::barge`); a child naming its parent
//!    is. The graph must have no cycle: dependencies point one way, so each
//!    layer can be read, tested and replaced without the ones above it.
//! 2. **Wire types stay in their carrier's home.** Outside `carrier/`,
//!    no file names a carrier's wire module or the SIP stack; the SIP user
//!    agent (`carrier/sip/ua`) names nothing else in the server and, outside
//!    its tests, no runtime, socket or clock.
//! 3. **Repository rules**, over the whole repository from the workspace
//!    root: no Rust file over 800 lines; no `path` attribute outside the
//!    root's `fuzz/` (every module file sits where `mod` finds it; only the
//!    fuzz targets include the crates' invariants files by path); nothing
//!    tracked pointing outside the repository (the steering notes beside
//!    it). `the_repository_rules_catch_planted_breaks` shows each can fail.
//!
//! The scanner strips comments and string literals and reads paths
//! lexically; it does not resolve `use` re-exports, so a module that
//! re-exports a child is an edge to the re-exporting module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, skip: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !name.starts_with('.') && !skip.contains(&name.as_str()) {
                rust_files(&path, skip, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// `carrier/sip/leg/mod.rs` → `[carrier, sip, leg]`; `lib.rs` → `[]`.
fn module_of(rel: &Path) -> Module {
    let mut parts: Module = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The text with comments, string and char literals blanked out.
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        match (b[i], b.get(i + 1).copied()) {
            (b'/', Some(b'/')) => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            (b'/', Some(b'*')) => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            (b'r', Some(b'#' | b'"')) if !ident_byte(prev(b, i)) => i = skip_raw(b, i),
            (b'"', _) => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            _ => {
                let ch = src[i..].chars().next().unwrap_or(' ');
                out.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    out
}

fn prev(b: &[u8], i: usize) -> u8 {
    if i == 0 { b' ' } else { b[i - 1] }
}

fn ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Skips a raw string `r#"…"#` starting at `i`; a lone `r` is kept.
fn skip_raw(b: &[u8], i: usize) -> usize {
    let mut j = i + 1;
    let mut hashes = 0;
    while j < b.len() && b[j] == b'#' {
        hashes += 1;
        j += 1;
    }
    if j >= b.len() || b[j] != b'"' {
        return i + 1;
    }
    j += 1;
    while j < b.len() {
        if b[j] == b'"'
            && b[j + 1..]
                .iter()
                .take(hashes)
                .filter(|&&c| c == b'#')
                .count()
                == hashes
        {
            return j + 1 + hashes;
        }
        j += 1;
    }
    j
}

/// Every path the text names that starts at `crate`, `super` or `self`,
/// with `use` groups expanded one level (`use crate::{a::X, b}` names
/// `crate::a::X` and `crate::b`).
fn named_paths(text: &str) -> Vec<Vec<String>> {
    let tokens = tokenize(text);
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i].as_str();
        let starts = matches!(t, "crate" | "super" | "self")
            && (i == 0 || tokens[i - 1] != "::")
            && tokens.get(i + 1).map(String::as_str) == Some("::");
        if !starts {
            i += 1;
            continue;
        }
        let mut path = vec![t.to_owned()];
        let mut j = i + 1;
        while tokens.get(j).map(String::as_str) == Some("::") {
            match tokens.get(j + 1).map(String::as_str) {
                Some("{") => {
                    for item in group_items(&tokens, j + 2) {
                        let mut p = path.clone();
                        p.extend(item);
                        out.push(p);
                    }
                    break;
                }
                Some(seg) if is_ident(seg) => path.push(seg.to_owned()),
                _ => break,
            }
            j += 2;
        }
        out.push(path);
        i = j;
    }
    out
}

/// The leading segments of each top-level item of a `{…}` group that opens
/// at `start`.
fn group_items(tokens: &[String], start: usize) -> Vec<Vec<String>> {
    let mut items = Vec::new();
    let mut cur: Vec<String> = Vec::new();
    let mut depth = 0;
    let mut lead = true;
    for t in &tokens[start..] {
        match t.as_str() {
            "{" => {
                depth += 1;
                lead = false;
            }
            "}" if depth == 0 => break,
            "}" => depth -= 1,
            "," if depth == 0 => {
                items.push(std::mem::take(&mut cur));
                lead = true;
            }
            "::" => {}
            seg if depth == 0 && lead && is_ident(seg) => cur.push(seg.to_owned()),
            _ => lead = false,
        }
    }
    items.push(cur);
    items.retain(|i| !i.is_empty());
    items
}

fn is_ident(s: &str) -> bool {
    s.bytes()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && s.bytes().all(ident_byte)
}

fn tokenize(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if ident_byte(c) {
            let s = i;
            while i < b.len() && ident_byte(b[i]) {
                i += 1;
            }
            out.push(text[s..i].to_owned());
        } else if c == b':' && b.get(i + 1) == Some(&b':') {
            out.push("::".into());
            i += 2;
        } else {
            if !c.is_ascii_whitespace() {
                out.push((c as char).to_string());
            }
            i += 1;
        }
    }
    out
}

/// The module a path lands in: its longest prefix that is a file.
fn resolve(path: &[String], from: &Module, modules: &BTreeSet<Module>) -> Option<Module> {
    let mut target: Module = Vec::new();
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => rest = &path[1..],
        Some("super" | "self") => {
            target = from.clone();
            while let Some(seg) = rest.first().map(String::as_str) {
                match seg {
                    "super" => {
                        target.pop()?;
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    target.extend(rest.iter().cloned());
    (0..=target.len())
        .rev()
        .map(|n| target[..n].to_vec())
        .find(|m| modules.contains(m))
}

/// file module → the modules it imports (ownership edges left out).
fn import_graph() -> BTreeMap<Module, BTreeSet<Module>> {
    let root = src_dir();
    let mut files = Vec::new();
    rust_files(&root, &[], &mut files);
    let texts: BTreeMap<Module, String> = files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(&root).expect("under src");
            let text = std::fs::read_to_string(f).expect("readable");
            (module_of(rel), strip(&text))
        })
        .collect();
    let modules: BTreeSet<Module> = texts.keys().cloned().collect();
    let mut graph = BTreeMap::new();
    for (m, text) in &texts {
        // A bare `super::*` is, in practice, an inline `mod tests` reading
        // its own file: not an edge (the scanner does not track inline
        // modules, so it would read as one to the parent).
        let edges: BTreeSet<Module> = named_paths(text)
            .iter()
            .filter(|p| p.iter().any(|s| !matches!(s.as_str(), "super" | "self")))
            .filter_map(|p| resolve(p, m, &modules))
            .filter(|t| !t.starts_with(m))
            .filter(|t| !t.is_empty())
            .collect();
        graph.insert(m.clone(), edges);
    }
    graph
}

/// A cycle in the graph, if there is one (depth-first, three colours).
fn find_cycle(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Colour {
        Open,
        Done,
    }
    fn visit(
        m: &Module,
        graph: &BTreeMap<Module, BTreeSet<Module>>,
        colour: &mut BTreeMap<Module, Colour>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        colour.insert(m.clone(), Colour::Open);
        stack.push(m.clone());
        for next in graph.get(m).into_iter().flatten() {
            match colour.get(next) {
                Some(Colour::Open) => {
                    let at = stack.iter().position(|s| s == next).unwrap_or(0);
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Some(Colour::Done) => {}
                None => {
                    if let Some(c) = visit(next, graph, colour, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        colour.insert(m.clone(), Colour::Done);
        None
    }
    let mut colour = BTreeMap::new();
    for m in graph.keys() {
        if !colour.contains_key(m)
            && let Some(c) = visit(m, graph, &mut colour, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

fn show(m: &Module) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

#[test]
fn the_server_crate_has_no_import_circle() {
    let graph = import_graph();
    assert!(graph.len() > 50, "read the crate's files: {}", graph.len());
    let edges: usize = graph.values().map(BTreeSet::len).sum();
    assert!(edges > 100, "found its imports: {edges}");
    if let Some(cycle) = find_cycle(&graph) {
        let shown: Vec<String> = cycle.iter().map(show).collect();
        panic!("import circle: {}", shown.join(" -> "));
    }
}

/// The SIP user agent is a folder of the SIP carrier, not a crate; this is
/// the boundary a crate gave it: it names no other module of the server,
/// and outside its tests no runtime, socket or clock.
#[test]
fn the_sip_user_agent_is_sans_io_and_names_nothing_above_it() {
    let ua: Module = ["carrier", "sip", "ua"].map(String::from).to_vec();
    let graph = import_graph();
    let mut found = Vec::new();
    let mut read = 0;
    for (m, targets) in graph.iter().filter(|(m, _)| m.starts_with(&ua)) {
        read += 1;
        let above = targets.iter().filter(|t| !t.starts_with(&ua));
        found.extend(above.map(|t| format!("{} names {}", show(m), show(t))));
    }
    let mut files = Vec::new();
    rust_files(&src_dir().join("carrier/sip/ua"), &[], &mut files);
    let io = [
        "tokio",
        "Instant::now",
        "SystemTime",
        "UdpSocket",
        "TcpStream",
        "TcpListener",
        "std::thread",
    ];
    for f in files
        .iter()
        .filter(|f| !f.to_string_lossy().ends_with("tests.rs"))
    {
        let text = strip(&std::fs::read_to_string(f).expect("readable"));
        // An inline `mod tests` (at the end of a file) may read the clock.
        let text = text.split("mod tests {").next().unwrap_or_default();
        found.extend(
            io.iter()
                .filter(|w| text.contains(*w))
                .map(|w| format!("{} names {w}", f.display())),
        );
    }
    assert!(
        read > 10 && files.len() > 10,
        "read the user agent: {read} modules"
    );
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn the_scanner_sees_circles_and_ignores_ownership() {
    let modules: BTreeSet<Module> = [vec![], vec!["a".into()], vec!["a".into(), "b".into()]]
        .into_iter()
        .collect();
    let a: Module = vec!["a".into()];
    let ab: Module = vec!["a".into(), "b".into()];
    let text = strip("use super::{Foo, b::Bar}; // crate::c\nlet s = \"crate::x\";");
    let paths = named_paths(&text);
    assert_eq!(
        paths,
        [
            vec!["super".to_string(), "Foo".into()],
            vec!["super".into(), "b".into(), "Bar".into()],
            vec!["super".into()],
        ]
    );
    assert_eq!(resolve(&paths[1], &ab, &modules), Some(ab.clone()));
    assert_eq!(resolve(&paths[0], &ab, &modules), Some(a.clone()));
    let mut g: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    g.insert(a.clone(), BTreeSet::new());
    g.insert(ab.clone(), [a.clone()].into_iter().collect());
    assert_eq!(
        find_cycle(&g),
        None,
        "a child naming its parent is no circle"
    );
    g.insert(a.clone(), [ab.clone()].into_iter().collect());
    assert!(
        find_cycle(&g).is_some(),
        "two modules naming each other are"
    );
}

#[test]
fn carrier_wire_types_stay_in_their_home() {
    let root = src_dir();
    let mut files = Vec::new();
    rust_files(&root, &["carrier"], &mut files);
    let forbidden = ["sip_ua", "twilio::wire", "partner::wire", "sip::ua"];
    let mut found = Vec::new();
    for f in &files {
        let text = strip(&std::fs::read_to_string(f).expect("readable"));
        for w in forbidden {
            if text.contains(w) {
                found.push(format!("{} names {w}", f.display()));
            }
        }
    }
    assert!(files.len() > 30, "read the files outside carrier/");
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn repository_rules_hold() {
    let (read, broken) = repository_breaks(&repo_root());
    assert!(read > 200, "read the repository: {read}");
    assert!(broken.is_empty(), "{broken:#?}");
}

#[test]
fn the_repository_rules_catch_planted_breaks() {
    let root = std::env::temp_dir().join(format!("callgate-layout-{}", std::process::id()));
    let attribute = concat!("#[", "path = \"elsewhere.rs\"]\nmod m;\n");
    let files = [
        ("crates/x/src/lib.rs", attribute.to_owned()),
        // Only the root's fuzz/ may include by path, not any folder so named.
        ("crates/x/src/fuzz/deep.rs", attribute.to_owned()),
        (
            "crates/x/src/cfg.rs",
            concat!("#[cfg_attr(test, ", "path = \"t.rs\")]\nmod n;\n").to_owned(),
        ),
        ("crates/x/src/big.rs", "\n".repeat(801)),
        (
            "notes.md",
            concat!("see ..", "/shared/plan.md\n").to_owned(),
        ),
        ("fuzz/fuzz_targets/t.rs", attribute.to_owned()),
        (
            "crates/x/src/ok.rs",
            concat!(
                "// #[",
                "path] in a comment\nconst S: &str = \"#[",
                "path]\";\n"
            )
            .to_owned()
                + "#[cfg(test)]\nmod path;\n",
        ),
    ];
    for (rel, text) in &files {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("temp dir");
        std::fs::write(&path, text).expect("planted");
    }
    let (read, broken) = repository_breaks(&root);
    std::fs::remove_dir_all(&root).expect("cleaned up");
    assert_eq!(read, 6, "read every planted Rust file");
    let hit = |name: &str| broken.iter().any(|b| b.contains(name));
    for name in ["lib.rs", "deep.rs", "cfg.rs", "big.rs", "notes.md"] {
        assert!(hit(name), "{name} breaks a rule: {broken:#?}");
    }
    assert_eq!(broken.len(), 5, "fuzz/ and ok.rs break none: {broken:#?}");
}

/// How many Rust files the rules read below `root`, and each rule a file
/// there breaks: over 800 lines, a `path` attribute outside `root/fuzz`,
/// a pointer outside the repository.
fn repository_breaks(root: &Path) -> (usize, Vec<String>) {
    let fuzz = root.join("fuzz");
    let mut files = Vec::new();
    rust_files(root, &["target"], &mut files);
    let mut broken = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("readable");
        let lines = text.lines().count();
        if lines > 800 {
            broken.push(format!("{}: {lines} lines (limit 800)", f.display()));
        }
        if !f.starts_with(&fuzz) && has_path_attribute(&text) {
            broken.push(format!("{}: a path attribute outside fuzz/", f.display()));
        }
    }
    broken.extend(pointers_outside(root));
    (files.len(), broken)
}

/// Whether the code (comments and strings left out) has a `path`
/// attribute, plain or applied by `cfg_attr`.
fn has_path_attribute(src: &str) -> bool {
    let tokens = tokenize(&strip(src));
    (0..tokens.len().saturating_sub(1))
        .any(|i| tokens[i] == "#" && tokens[i + 1] == "[" && attribute_sets_path(&tokens[i + 2..]))
}

/// The attribute whose tokens follow its `[` is `path`, or a `cfg_attr`
/// with a `path = …` inside.
fn attribute_sets_path(rest: &[String]) -> bool {
    match rest.first().map(String::as_str) {
        Some("path") => true,
        Some("cfg_attr") => {
            let mut depth = 0;
            for pair in rest.windows(2) {
                match pair[0].as_str() {
                    "(" | "[" => depth += 1,
                    ")" | "]" if depth == 0 => return false,
                    ")" | "]" => depth -= 1,
                    "path" if pair[1] == "=" => return true,
                    _ => {}
                }
            }
            false
        }
        _ => false,
    }
}

/// Files (other than build output and git's own) whose text points at
/// the steering notes beside the repository, which a person who clones callgate does not have. In Rust
/// files only code counts: this file names the rule in its comments.
fn pointers_outside(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !matches!(name.as_str(), ".git" | "target" | "corpus" | "artifacts") {
                    stack.push(path);
                }
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let text = if name.ends_with(".rs") {
                strip(&text)
            } else {
                text
            };
            if text.contains(concat!("..", "/shared")) {
                out.push(format!("{}: points outside the repository", path.display()));
            }
        }
    }
    out
}

/// The names in the `[dependencies]` table of a Cargo manifest (not the
/// dev- or build-dependencies).
fn runtime_dependencies(manifest: &str) -> Vec<String> {
    let mut in_deps = false;
    let mut names = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
        } else if in_deps
            && !line.starts_with('#')
            && let Some((name, _)) = line.split_once('=')
        {
            names.push(name.trim().trim_end_matches(".workspace").to_owned());
        }
    }
    names
}

/// What the server library must never link: the simulators, the load tool
/// and the rig (test and bench code), and any SQL client (`state-store`
/// owns SQL).
const NOT_IN_THE_SERVER: &[&str] = &[
    "callgate-sim",
    "callgate-load",
    "callgate-rig",
    "callgate-test-support",
    "tokio-postgres",
    "postgres",
    "deadpool-postgres",
    "sqlx",
];

#[test]
fn the_server_library_links_no_simulator_load_tool_or_sql_client() {
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .expect("read crates/callgate/Cargo.toml");
    let deps = runtime_dependencies(&manifest);
    assert!(
        deps.iter().any(|d| d == "state-store"),
        "the reader found no dependencies: {deps:?}"
    );
    let bad: Vec<_> = deps
        .iter()
        .filter(|d| NOT_IN_THE_SERVER.contains(&d.as_str()))
        .collect();
    assert!(bad.is_empty(), "the server library depends on {bad:?}");
    // The reader sees a planted one, and ignores dev-dependencies.
    let planted = "[dependencies]\nfoo = \"1\"\ncallgate-sim.workspace = true\n[dev-dependencies]\nsqlx = \"1\"\n";
    assert_eq!(runtime_dependencies(planted), ["foo", "callgate-sim"]);
}
