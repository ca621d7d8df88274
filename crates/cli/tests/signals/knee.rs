//! `callgate drill --find-knee`, CI-sized: one short staircase against a
//! server it starts, pinned to CPU 0 beside a CPU burner (`taskset` only:
//! no cgroup or root needed, so any two-core machine runs it; it runs alone,
//! `.config/nextest.toml`, so the burner slows no other test). What the
//! knee is depends on the machine,
//! so the test asserts what does not: every step's figures add up, the
//! finding is the one its staircase files give, the receipt is signed and
//! `drill verify` holds, and a changed staircase file makes verify fail.

use std::path::Path;
use std::process::Command;

use callgate_drill::knee::{Finding, KneeReceipt, Staircase, Verdict};

const LEVELS: [u32; 2] = [2, 4];
const CALLS_PER_SLOT: u32 = 1;

fn callgate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_callgate"))
        .args(args)
        .env_remove("CALLGATE_DRILL_SIGNING_KEY")
        .env_remove("CALLGATE_DATABASE_URL")
        .output()
        .expect("run callgate")
}

fn said(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn read_receipt(out: &Path) -> KneeReceipt {
    let path = out.join("receipt.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let body = callgate_drill::sign::verify(&text).expect("a valid signature");
    serde_yaml_ng::from_str(body).unwrap()
}

#[test]
fn a_ci_sized_knee_staircase_signs_a_receipt_that_verifies() {
    let dir = std::env::temp_dir().join(format!("knee-ci-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("k.key");
    let out = dir.join("out");
    assert!(
        callgate(&["drill", "keygen", key.to_str().unwrap()])
            .status
            .success()
    );
    let levels = LEVELS.map(|l| l.to_string()).join(",");
    let run = callgate(&[
        "drill",
        "--find-knee",
        "--levels",
        &levels,
        "--repeats",
        "1",
        "--calls-per-slot",
        "1",
        "--utterances",
        "2",
        "--burners",
        "1",
        "--signing-key",
        key.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let text = said(&run);
    assert!(out.join("receipt.yaml").is_file(), "no receipt: {text}");
    let r = read_receipt(&out);
    // Exit 0 exactly when some level held.
    assert_eq!(run.status.success(), r.finding.knee > 0, "{text}");
    assert_eq!(r.kind, callgate_drill::knee::KIND);
    assert_eq!(r.squeeze.how, "1 burner");
    assert_eq!(r.offer.levels, LEVELS);
    assert_eq!(r.staircases.len(), 1);

    let file = out.join(&r.staircases[0].file);
    let s: Staircase = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert!(!s.steps.is_empty());
    for (i, (step, verdict)) in s.steps.iter().enumerate() {
        assert_eq!(step.level, LEVELS[i]);
        assert_eq!(step.offered, step.level * CALLS_PER_SLOT, "{step:?}");
        let refused: u32 = step.refused.values().sum();
        assert_eq!(step.admitted + refused, step.offered, "{step:?}");
        // The server may still be closing a call whose caller the rig has
        // already replaced: its count can pass the level, never the offer.
        assert!(
            (1..=u64::from(step.offered)).contains(&step.peak_active),
            "{step:?}"
        );
        assert!(step.duration_s > 0.0 && step.server_cores > 0.0, "{step:?}");
        // The verdict is the judgement of what the step observed …
        assert_eq!(
            *verdict,
            callgate_drill::knee::judge(step, &r.limits),
            "{step:?}"
        );
        // … and only the last step may be one that did not hold.
        if i + 1 < s.steps.len() {
            assert_eq!(*verdict, Verdict::Held, "{step:?}");
        }
    }
    assert_eq!(r.finding, Finding::of(&[s], r.finding.margin));

    let ok = callgate(&["drill", "verify", out.to_str().unwrap()]);
    let ok_text = said(&ok);
    assert!(ok.status.success(), "{ok_text}");
    assert!(ok_text.contains("1 files match the digests"), "{ok_text}");
    assert!(
        ok_text.contains(&format!("knee {} calls", r.finding.knee)),
        "{ok_text}"
    );

    let changed =
        std::fs::read_to_string(&file)
            .unwrap()
            .replacen("\"level\": 2", "\"level\": 3", 1);
    std::fs::write(&file, changed).unwrap();
    let bad = callgate(&["drill", "verify", out.to_str().unwrap()]);
    let bad_text = said(&bad);
    assert!(!bad.status.success(), "{bad_text}");
    assert!(bad_text.contains("differs"), "{bad_text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_committed_knee_receipt_verifies() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/drills/knee-quota-0.15");
    let out = callgate(&["drill", "verify", example.to_str().unwrap()]);
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("3 files match the digests"), "{text}");
    let r = read_receipt(&example);
    assert_eq!(r.squeeze.how, "quota 0.15");
    assert!(r.finding.found, "every staircase of the example broke");
    assert_eq!(
        r.finding.recommended_max_concurrent_calls,
        callgate_drill::knee::recommend(r.finding.knee, r.finding.margin)
    );
}
