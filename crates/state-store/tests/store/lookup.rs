//! Finding sessions by the carrier's own call id.

use crate::common;

use std::time::{Duration, SystemTime};

use state_store::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_found_by_carrier_call_id_oldest_first_and_bounded() {
    let env = common::env().await;
    let t0 = SystemTime::now();
    let mut ids = Vec::new();
    for (i, ingress) in ["twilio", "partner", "sip"].into_iter().enumerate() {
        let mut call = common::new_call(t0 + Duration::from_millis(10 * i as u64));
        call.ingress = ingress.into();
        call.carrier_call_id = Some("CA-shared".into());
        ids.push(call.call_id);
        env.store.open_call(call).await.unwrap();
    }
    let mut other = common::new_call(t0);
    other.carrier_call_id = Some("CA-other".into());
    env.store.open_call(other).await.unwrap();

    let found = env
        .store
        .ledger_by_carrier_call("CA-shared", 10)
        .await
        .unwrap();
    let got: Vec<(CallId, &str)> = found
        .iter()
        .map(|r| (r.call_id, r.ingress.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![(ids[0], "twilio"), (ids[1], "partner"), (ids[2], "sip")]
    );
    assert!(found.iter().all(|r| r.owner_instance == "test-a"));

    let bounded = env
        .store
        .ledger_by_carrier_call("CA-shared", 2)
        .await
        .unwrap();
    assert_eq!(bounded.len(), 2, "the limit bounds the answer");
    assert!(
        env.store
            .ledger_by_carrier_call("CA-none", 10)
            .await
            .unwrap()
            .is_empty()
    );
}
