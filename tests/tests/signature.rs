//! With an auth token configured, only upgrades signed by it are accepted.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use callgate_load::Outcome;
use callgate_sim::SimConfig;
use callgate_tests::{Harness, load};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_and_wrongly_signed_streams_are_refused() {
    let h = Harness::start(SimConfig::default(), |c| {
        c.twilio.auth_token = Some("s3cret".into())
    })
    .await;

    let unsigned = callgate_load::run(load(&h, 1, 1)).await;
    assert!(
        matches!(&unsigned.calls[0].outcome, Outcome::Rejected { how, .. } if how == "http_403"),
        "{:#?}",
        unsigned.calls[0]
    );
    let mut wrong = load(&h, 1, 1);
    wrong.auth_token = Some("guess".into());
    let wrong = callgate_load::run(wrong).await;
    assert!(matches!(&wrong.calls[0].outcome, Outcome::Rejected { how, .. } if how == "http_403"));

    let mut signed = load(&h, 1, 1);
    signed.auth_token = Some("s3cret".into());
    let signed = callgate_load::run(signed).await;
    assert_eq!(
        signed.calls[0].outcome,
        Outcome::Completed,
        "{:#?}",
        signed.calls[0]
    );
    h.assert_all_closed().await;
    h.stop().await;
}
