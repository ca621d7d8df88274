//! Scenario: capacity derived from ceilings, headroom and pins.

use std::time::Instant;

use admission::{
    Capacity, CapacitySetting, Ceilings, Decider, Dependency, Gate, GateConfig, RejectReason,
};

fn ceilings(db: Option<u32>, stt: Option<u32>, tts: Option<u32>, dialog: Option<u32>) -> Ceilings {
    Ceilings {
        db_calls: db,
        stt_sessions: stt,
        tts_sessions: tts,
        dialog_streams: dialog,
    }
}

fn auto(headroom: u32, c: &Ceilings) -> Capacity {
    Capacity::derive(CapacitySetting::Auto { headroom }, c)
}

#[test]
fn each_ceiling_can_decide() {
    let cases = [
        (
            ceilings(Some(10), Some(20), Some(30), Some(40)),
            10,
            Decider::Db,
        ),
        (
            ceilings(Some(50), Some(20), Some(30), Some(40)),
            20,
            Decider::Stt,
        ),
        (
            ceilings(Some(50), Some(60), Some(30), Some(40)),
            30,
            Decider::Tts,
        ),
        (
            ceilings(Some(50), Some(60), Some(70), Some(40)),
            40,
            Decider::Dialog,
        ),
        (ceilings(None, None, Some(7), None), 7, Decider::Tts),
    ];
    for (c, calls, decider) in cases {
        let cap = auto(0, &c);
        assert_eq!(cap.calls, calls, "{c:?}");
        assert_eq!(cap.decided_by, decider, "{c:?}");
    }
}

#[test]
fn ties_go_to_the_first_in_db_stt_tts_dialog_order() {
    let all_equal = ceilings(Some(20), Some(20), Some(20), Some(20));
    assert_eq!(auto(0, &all_equal).decided_by, Decider::Db);
    let stt_tts = ceilings(None, Some(20), Some(20), Some(30));
    assert_eq!(auto(0, &stt_tts).decided_by, Decider::Stt);
    let tts_dialog = ceilings(Some(90), None, Some(5), Some(5));
    assert_eq!(auto(0, &tts_dialog).decided_by, Decider::Tts);
    assert_eq!(tts_dialog.smallest(), Some((Dependency::Tts, 5)));
}

#[test]
fn headroom_is_subtracted_and_saturates_at_zero() {
    let c = ceilings(Some(30), Some(22), Some(25), None);
    assert_eq!(auto(2, &c).calls, 20);
    assert_eq!(auto(2, &c).decided_by, Decider::Stt);
    assert_eq!(auto(22, &c).calls, 0);
    let eaten = auto(100, &c);
    assert_eq!(eaten.calls, 0);
    assert!(eaten.admits_nothing());
}

#[test]
fn zero_capacity_admits_nothing() {
    let t0 = Instant::now();
    let cfg = GateConfig {
        capacity: CapacitySetting::Auto { headroom: 5 },
        ceilings: ceilings(Some(5), None, None, None),
        queue_max: 0,
        queue_timeout: std::time::Duration::from_secs(1),
        ..GateConfig::default()
    };
    let gate = Gate::new(cfg, t0);
    assert_eq!(
        gate.try_admit(t0).unwrap_err().reason,
        RejectReason::AtCapacity
    );
    assert_eq!(
        gate.enqueue(t0).unwrap_err().reason,
        RejectReason::QueueFull
    );
    assert_eq!(gate.snapshot().admitted_total, 0);
}

#[test]
fn pinned_ignores_ceilings_and_no_ceiling_is_unlimited() {
    let c = ceilings(Some(10), Some(20), None, None);
    let pinned = Capacity::derive(CapacitySetting::Pinned(50), &c);
    assert_eq!((pinned.calls, pinned.decided_by), (50, Decider::Pinned));
    assert_eq!(c.smallest(), Some((Dependency::Db, 10)));

    let none = Ceilings::default();
    let unlimited = auto(3, &none);
    assert_eq!(unlimited.decided_by, Decider::Unlimited);
    assert_eq!(unlimited.calls, u32::MAX);
    assert_eq!(none.smallest(), None);
}

#[test]
fn capacity_display_names_the_decider() {
    let c = ceilings(Some(30), Some(22), None, None);
    assert_eq!(auto(2, &c).to_string(), "capacity 20 decided by stt");
    let pinned = Capacity::derive(CapacitySetting::Pinned(8), &c);
    assert_eq!(pinned.to_string(), "capacity 8 decided by pinned");
    assert_eq!(Decider::Dialog.to_string(), "dialog");
}
