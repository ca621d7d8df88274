//! `callgate drill verify` and `keygen` as an operator runs them, on the
//! committed example (`docs/drills/voice-onboarding-v1/`, the full-size
//! run): its signature and its session copies verify; one changed byte,
//! or a session copy that no longer matches, makes it exit 1 and say why.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/drills/voice-onboarding-v1")
}

fn drill(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_callgate"))
        .arg("drill")
        .args(args)
        .env_remove("CALLGATE_DRILL_SIGNING_KEY")
        .output()
        .expect("run callgate drill")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A copy of the example in a scratch directory, to break.
fn copy_of_example(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("drill-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("sessions")).unwrap();
    std::fs::copy(example().join("receipt.yaml"), dir.join("receipt.yaml")).unwrap();
    for e in std::fs::read_dir(example().join("sessions")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join("sessions").join(e.file_name())).unwrap();
    }
    dir
}

#[test]
fn the_committed_full_size_receipt_verifies() {
    let out = drill(&["verify", example().to_str().unwrap()]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("signature: valid (ed25519"), "{said}");
    assert!(said.contains("files match the digests"), "{said}");
    assert!(!said.contains("problem:"), "{said}");
    let receipt = std::fs::read_to_string(example().join("receipt.yaml")).unwrap();
    assert!(
        receipt.contains("repeats: 3"),
        "the example is the full-size run"
    );
    assert!(
        receipt.contains("hold_scale: 1.0"),
        "with the fixture's holds"
    );
}

#[test]
fn one_changed_byte_or_a_changed_session_copy_fails_verification() {
    let dir = copy_of_example("tamper");
    let path = dir.join("receipt.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    let key = "max_tested_concurrency: ";
    let at = yaml.find(key).unwrap() + key.len();
    let mut bytes = yaml.into_bytes();
    bytes[at] = if bytes[at] == b'9' {
        b'8'
    } else {
        bytes[at] + 1
    };
    std::fs::write(&path, &bytes).unwrap();
    let out = drill(&["verify", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("changed after signing"),
        "{}",
        text(&out)
    );

    let dir = copy_of_example("session");
    let copy = std::fs::read_dir(dir.join("sessions"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let body = std::fs::read_to_string(&copy).unwrap();
    let changed = body.replacen(
        r#""cleanup_status": "completed""#,
        r#""cleanup_status": "failed""#,
        1,
    );
    assert_ne!(changed, body);
    std::fs::write(&copy, changed).unwrap();
    let out = drill(&["verify", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("differs from the receipt it was signed with"),
        "{}",
        text(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn keygen_never_overwrites_a_key_and_a_drill_needs_one() {
    let dir = std::env::temp_dir().join(format!("drill-keygen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("drill.key");
    let first = drill(&["keygen", key.to_str().unwrap()]);
    assert!(first.status.success(), "{}", text(&first));
    assert!(text(&first).contains("public key"), "{}", text(&first));
    let again = drill(&["keygen", key.to_str().unwrap()]);
    assert!(!again.status.success(), "an existing key is kept");
    let missing = drill(&["--spawn", "2"]);
    assert!(!missing.status.success());
    assert!(
        text(&missing).contains("--signing-key is required"),
        "{}",
        text(&missing)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
