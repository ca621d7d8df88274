//! Retention removes personal data (turns, slots) but keeps the receipt.

use crate::common;

use std::time::{Duration, SystemTime};

use state_store::*;

const DAY: Duration = Duration::from_secs(86_400);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_keeps_ledger_rows() {
    let env = common::env().await;
    let store = &env.store;
    let now = SystemTime::now();
    let old = common::new_call(now - 40 * DAY);
    let old_id = old.call_id;
    let old_epoch = store.open_call(old).await.unwrap();
    let (new_id, new_epoch) = common::open(store).await;

    for (call, epoch) in [(old_id, old_epoch), (new_id, new_epoch)] {
        for seq in 0..3 {
            store.apply(&common::turn(call, epoch, seq)).await.unwrap();
        }
        let slot = Write::Slot {
            call,
            epoch,
            name: "dob".into(),
            value: "1970-01-01".into(),
            at: now,
        };
        store.apply(&slot).await.unwrap();
    }

    let deleted = store.purge_personal_data(now - 30 * DAY).await.unwrap();
    assert_eq!(deleted, 4, "3 turns + 1 slot of the old call");
    assert!(store.turns(old_id).await.unwrap().is_empty());
    assert!(store.slots(old_id).await.unwrap().is_empty());
    let receipt = store.ledger(old_id).await.unwrap().unwrap();
    assert_eq!(receipt.ingress, "twilio");
    assert_eq!(store.turns(new_id).await.unwrap().len(), 3);
    assert_eq!(store.slots(new_id).await.unwrap().len(), 1);
    assert_eq!(store.purge_personal_data(now - 30 * DAY).await.unwrap(), 0);
}
