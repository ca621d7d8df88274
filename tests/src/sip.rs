//! What the SIP end-to-end tests share: a harness with the SIP ingress on
//! loopback (its own RTP range), and the SIP calls' ledger rows.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use callgate::config::Config;
use callgate_sim::SimConfig;

use crate::{Harness, Ledger};

/// A harness whose server also serves SIP on 127.0.0.1 (an ephemeral
/// port), with 100 RTP port pairs from a range of its own.
pub async fn start(sim: SimConfig, tweak: impl FnOnce(&mut Config)) -> Harness {
    let base = rtp_base();
    Harness::start(sim, move |c| {
        c.sip.enabled = true;
        c.sip.listen = "127.0.0.1:0".parse().expect("loopback");
        c.sip.rtp_port_min = base;
        c.sip.rtp_port_max = base + 199;
        tweak(c);
    })
    .await
}

/// The first of [`callgate_rig::ports::SPAN`] ports no other test process
/// is handed ([`callgate_rig::ports::claim_span`]), below the kernel's
/// ephemeral range: a test may widen its range up to that span.
fn rtp_base() -> u16 {
    callgate_rig::ports::claim_span().expect("claim an RTP port span")
}

/// The SIP listener's address.
pub fn addr(h: &Harness) -> SocketAddr {
    h.server.sip.as_ref().expect("sip enabled").addr
}

/// RTP port pairs leased now.
pub fn ports_in_use(h: &Harness) -> usize {
    h.server.sip.as_ref().expect("sip enabled").ports.in_use()
}

/// The SIP-Call-IDs of every SIP call with a ledger row.
pub async fn call_ids(h: &Harness) -> Vec<String> {
    h.db.query(
        "SELECT carrier_call_id FROM call_ledger WHERE ingress = 'sip' ORDER BY admitted_at",
        &[],
    )
    .await
    .expect("query call_ledger")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// The closed ledger rows of `n` SIP calls (waits, bounded, for them).
pub async fn closed_calls(h: &Harness, n: usize) -> Vec<Ledger> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let ids = loop {
        let ids = call_ids(h).await;
        if ids.len() >= n {
            break ids;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} SIP calls in the ledger",
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut out = Vec::new();
    for id in ids {
        out.push(h.closed_ledger(&id).await);
    }
    out
}

/// Admission refusals recorded for SIP calls, by reason, once there are
/// at least `n` (refusals are written in batches: waits, bounded).
pub async fn refusals(h: &Harness, n: usize) -> Vec<String> {
    let probe = async || {
        h.db.query(
            "SELECT reason FROM admission_rejections WHERE ingress = 'sip' ORDER BY reason",
            &[],
        )
        .await
        .expect("query admission_rejections")
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
    };
    crate::eventually(Duration::from_secs(15), "SIP refusal rows", probe, |r| {
        r.len() >= n
    })
    .await
}

/// Waits (bounded) until no RTP port is leased and no call is active.
pub async fn assert_all_free(h: &Harness) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let active = h.server.app.call.gate.snapshot().active;
        let ports = ports_in_use(h);
        if active == 0 && ports == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{active} calls active and {ports} RTP ports leased 15 s after the calls"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
