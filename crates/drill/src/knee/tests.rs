use super::*;

const LIMITS: Limits = Limits {
    reply_p95_ms: 3_000,
    max_lag_ms: 60,
    silence_ms: 2_500,
};

fn held(level: u32) -> Step {
    Step {
        level,
        offered: level * 2,
        admitted: level * 2,
        refused: BTreeMap::new(),
        silent: 0,
        replies: level * 4,
        reply_p95_ms: Some(900),
        peak_lag_p99_ms: 4.0,
        peak_active: u64::from(level),
        ceiling_at_trip: None,
        stalls: BTreeMap::new(),
        heartbeat_failures: 0,
        server_cores: 0.1,
        rig_behind: None,
        duration_s: 30.0,
    }
}

fn tripped(level: u32, ceiling: u64) -> Step {
    let mut s = held(level);
    s.refused.insert("instance_overloaded".into(), 7);
    s.admitted -= 7;
    s.peak_lag_p99_ms = 88.0;
    s.ceiling_at_trip = Some(ceiling);
    s
}

fn staircase(number: u32, steps: Vec<Step>) -> Staircase {
    let steps = steps
        .into_iter()
        .map(|s| {
            let v = judge(&s, &LIMITS);
            (s, v)
        })
        .collect();
    Staircase { number, steps }
}

#[test]
fn a_step_that_keeps_every_promise_holds() {
    assert_eq!(judge(&held(20), &LIMITS), Verdict::Held);
}

#[test]
fn each_broken_promise_is_named() {
    let mut s = tripped(40, 31);
    s.silent = 2;
    s.reply_p95_ms = Some(3_400);
    s.stalls.insert("instance".into(), 3);
    s.heartbeat_failures = 1;
    let Verdict::Broke(why) = judge(&s, &LIMITS) else {
        panic!("it broke")
    };
    let all = why.join(" | ");
    for needle in [
        "instance_overloaded×7",
        "2 callers heard over 2500 ms",
        "p95 3400 ms over 3000",
        "p99 88 ms over 60",
        "instance×3",
        "1 heartbeats lost",
    ] {
        assert!(all.contains(needle), "{needle:?} not in {all}");
    }
    assert_eq!(why.len(), 6);
}

#[test]
fn no_reply_at_all_breaks_a_step_with_admitted_calls() {
    let mut s = held(10);
    s.reply_p95_ms = None;
    assert!(matches!(judge(&s, &LIMITS), Verdict::Broke(_)));
}

#[test]
fn the_lag_bound_off_judges_no_lag() {
    let mut s = held(10);
    s.peak_lag_p99_ms = 500.0;
    let off = Limits {
        max_lag_ms: 0,
        ..LIMITS
    };
    assert_eq!(judge(&s, &off), Verdict::Held);
}

#[test]
fn a_rig_that_fell_behind_is_not_the_instances_knee() {
    let mut s = tripped(80, 60);
    s.rig_behind = Some("media clock 90 ms late".into());
    assert!(matches!(judge(&s, &LIMITS), Verdict::RigLimit(_)));
    let k = staircase(1, vec![held(20), held(40), s]).knee();
    assert_eq!((k.knee, k.broke_at, k.found), (40, None, false));
}

#[test]
fn the_knee_is_the_last_level_held_before_the_first_break() {
    let k = staircase(2, vec![held(20), held(40), tripped(60, 47), held(80)]).knee();
    assert_eq!((k.knee, k.broke_at, k.found), (40, Some(60), true));
    assert!(k.why[0].contains("instance_overloaded"));
}

#[test]
fn a_staircase_that_never_broke_found_no_knee() {
    let k = staircase(1, vec![held(20), held(40)]).knee();
    assert_eq!((k.knee, k.broke_at, k.found), (40, None, false));
}

#[test]
fn the_finding_takes_the_lowest_knee_and_the_margin() {
    let runs = [
        staircase(1, vec![held(20), held(40), tripped(60, 52)]),
        staircase(2, vec![held(20), tripped(40, 38)]),
        staircase(3, vec![held(20), held(40), held(60), tripped(80, 66)]),
    ];
    let f = Finding::of(&runs, 0.2);
    assert_eq!(f.knees, vec![40, 20, 60]);
    assert_eq!(f.knee, 20);
    assert!(f.found);
    assert_eq!(f.recommended_max_concurrent_calls, 16);
    assert_eq!(f.ceiling_at_trip, vec![52, 38, 66]);
    assert!(f.summary.contains("up to 20 calls"), "{}", f.summary);
}

#[test]
fn a_finding_without_a_break_everywhere_says_it_is_a_floor() {
    let runs = [
        staircase(1, vec![held(20), tripped(40, 30)]),
        staircase(2, vec![held(20), held(40)]),
    ];
    let f = Finding::of(&runs, 0.25);
    assert!(!f.found);
    assert_eq!((f.knee, f.recommended_max_concurrent_calls), (20, 15));
    assert!(f.summary.contains("a floor"), "{}", f.summary);
}

#[test]
fn a_first_step_that_broke_recommends_nothing() {
    let f = Finding::of(&[staircase(1, vec![tripped(10, 4)])], 0.2);
    assert_eq!((f.knee, f.recommended_max_concurrent_calls), (0, 0));
    assert!(f.summary.contains("lower the first step"));
}

#[test]
fn recommend_floors_and_clamps_the_margin() {
    assert_eq!(recommend(47, 0.2), 37);
    assert_eq!(recommend(47, 0.0), 47);
    assert_eq!(recommend(47, 1.5), 0);
    assert_eq!(recommend(47, -1.0), 47);
}

fn receipt() -> KneeReceipt {
    KneeReceipt {
        kind: String::new(),
        created_at: "2026-12-07T00:00:00Z".into(),
        signed_by: String::new(),
        client: "test".into(),
        server: ServerUnderTest {
            version: "0".into(),
            config_sha256: "00".into(),
            max_lag_ms: 60,
            lag_window_ms: 2_000,
            reply_stall_ms: 2_000,
            configured_capacity: 1_995,
        },
        squeeze: Squeeze {
            how: "quota 0.15".into(),
            server_cpus: "0".into(),
            rig_cpus: "1".into(),
            note: "n".into(),
        },
        limits: LIMITS,
        offer: Offer {
            levels: vec![20, 40, 60],
            calls_per_slot: 2,
            utterances_per_call: 3,
            dial_rate_per_s: 20.0,
            carrier: "twilio".into(),
        },
        staircases: Vec::new(),
        finding: Finding::of(&[], 0.2),
        not_tested: vec![],
    }
}

#[test]
fn a_sealed_receipt_verifies_and_a_changed_staircase_does_not() {
    let dir = std::env::temp_dir().join(format!("knee-seal-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let key = SigningKey::from_bytes(&[7; 32]);
    let runs = [staircase(1, vec![held(20), tripped(40, 33)])];
    let r = receipt().seal(&dir, &runs, 0.2, &key).unwrap();
    assert_eq!(r.kind, KIND);
    assert_eq!(r.finding.knee, 20);
    assert_eq!(r.staircases.len(), 1);
    let text = std::fs::read_to_string(dir.join("receipt.yaml")).unwrap();
    let body = sign::verify(&text).unwrap();
    let back: KneeReceipt = serde_yaml_ng::from_str(body).unwrap();
    assert_eq!(back, r);
    assert_eq!(back.check_files(&dir), (1, vec![]));
    let file = dir.join(&r.staircases[0].file);
    let changed = std::fs::read_to_string(&file)
        .unwrap()
        .replace("\"level\": 20", "\"level\": 30");
    std::fs::write(&file, changed).unwrap();
    let (ok, problems) = back.check_files(&dir);
    assert_eq!(ok, 0);
    assert!(problems[0].contains("differs"), "{problems:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
