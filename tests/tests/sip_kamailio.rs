//! Kamailio in front of two callgate instances: calls are spread across
//! both; after `POST /admin/drain` on one, Kamailio's OPTIONS probe takes it
//! out of rotation and new calls land only on the other; no call is
//! dropped, the drained instance's calls included.
//!
//! Everything is real and on loopback: the production `kamailio.cfg`
//! (dispatcher algorithm 10, call load, 1 s OPTIONS probes), two
//! `callgate::server` instances sharing one Postgres and one set of
//! simulators (each with its own SIP port and RTP range), and sipp as the
//! carrier (`tests/sip/call_pcmu.xml`: speech over RTP, silence for the
//! bot's reply, the caller's BYE; a BYE from callgate fails the call).
//!
//! The plan, on the clock of the first INVITE:
//! * 0 s: one long call, alone, so it goes to A (ties go to the first
//!   destination); it lasts about 14 s and is in progress on A throughout
//!   the drain and the calls after it.
//! * 0.5 s: eight overlapping calls (about 10 s each): call load splits
//!   them, A's long call counted, 4 and 4.
//! * about 3 s, all nine up: `POST /admin/drain` on A; its next probe gets
//!   503 and marks it inactive.
//! * then four calls, while A still has five in progress: all on B.
//!
//! Kamailio's harness blocks its thread, so it runs under `spawn_blocking`.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use callgate::server::Running;
use callgate_sim::SimConfig;
use callgate_tests::kamailio::{DsState, HarnessError, KamOpts, Kamailio, free_udp_addrs};
use callgate_tests::sipp::{Sipp, SippOpts, SippOutcome};
use callgate_tests::{Harness, eventually, sip};

/// Overlapping calls placed while both instances are in rotation.
const SPREAD_CALLS: u32 = 8;
/// Calls placed once the drained instance is out of rotation.
const AFTER_DRAIN_CALLS: u32 = 4;
/// New calls per second: each call lasts far longer than the gap, so the
/// calls of one batch overlap and call load has something to balance.
const CALLS_PER_S: u32 = 4;
/// Silence after the caller's utterance: room for the bot's reply.
const HOLD_MS: u32 = 4_000;
/// The long call's silence: it ends after the post-drain calls are up.
const LONG_HOLD_MS: u32 = 8_000;
/// Bound on every sipp run (the longest call takes about 15 s).
const SIPP_LIMIT: Duration = Duration::from_secs(40);
/// Probes a drained instance may take to leave rotation: the first 503
/// counts (`probing_threshold` 1), so one interval plus the reply suffices.
const PROBES_TO_INACTIVE: u32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drained_instance_leaves_kamailio_rotation_without_dropping_a_call() {
    let started = Instant::now();
    let h = sip::start(SimConfig::default(), |_| {}).await;
    let (b, b_name) = second_instance(&h).await;
    let a = &h.server;
    let a_name = h.instance.clone();
    let (a_sip, b_sip) = (sip_addr(a), sip_addr(&b));
    let opts = KamOpts::default();
    let interval = Duration::from_secs(opts.ping_interval_s.into());
    let kam = start_kamailio(a_sip, b_sip, opts).await;
    let proxy = kam.listen();

    // --- The call that will be in progress on A when its drain begins.
    let long = Sipp::uac("call_pcmu.xml", proxy, calls(1, LONG_HOLD_MS)).await;
    eventually(
        Duration::from_secs(10),
        "the long call up on A alone",
        async || (active(a), active(&b)),
        |&n| n == (1, 0),
    )
    .await;
    let long_id = eventually(
        Duration::from_secs(5),
        "the long call's ledger row",
        async || sip_rows(&h).await,
        |rows| rows.len() == 1,
    )
    .await[0]
        .carrier_call_id
        .clone();

    // --- Overlapping calls: spread over both instances.
    let spread = Sipp::uac("call_pcmu.xml", proxy, calls(SPREAD_CALLS, HOLD_MS)).await;
    let before_drain = eventually(
        Duration::from_secs(15),
        "every spread call up",
        async || sip_rows(&h).await,
        |rows| rows.len() == 1 + SPREAD_CALLS as usize && rows.iter().all(|r| !r.ended),
    )
    .await;
    let on_a: Vec<String> = ids_on(&before_drain, &a_name);
    let spread_a = on_a.len() - 1;
    let spread_b = ids_on(&before_drain, &b_name).len();
    eprintln!("spread: A {spread_a} (+ the long call), B {spread_b}");
    assert!(on_a.contains(&long_id), "the long call is on A: {before_drain:#?}");
    assert!(
        spread_a >= 2 && spread_b >= 2 && (spread_a + 1).abs_diff(spread_b) <= 2,
        "call load must spread overlapping calls over both: A {spread_a} + 1, B {spread_b}"
    );
    assert_eq!(active(a) as usize, on_a.len(), "every call on A is in progress");

    // --- Drain A: its next probe gets 503 and takes it out of rotation.
    let drain_began = Instant::now();
    drain(a).await;
    let inactive = blocking(&kam, move |k| {
        k.wait_for_state(a_sip, DsState::Inactive, PROBES_TO_INACTIVE * interval)
    })
    .await;
    let to_inactive = drain_began.elapsed();
    eprintln!(
        "drain: A inactive {to_inactive:?} after POST /admin/drain (polled {inactive:?}; probe every {interval:?})"
    );
    let (a_dst, b_dst) = blocking(&kam, move |k| {
        Ok((k.destination(a_sip)?, k.destination(b_sip)?))
    })
    .await;
    assert!(a_dst.probing, "A stays probed, to come back: {a_dst:?}");
    assert_eq!(b_dst.state, DsState::Active, "B still serves: {b_dst:?}");
    assert_eq!(blocking(&kam, Kamailio::keepalive).await, 200, "B keeps the pool up");
    let dispatched_before = kam.dispatched().len();

    // --- New calls while A still has its calls in progress: all on B.
    let after = Sipp::uac("call_pcmu.xml", proxy, calls(AFTER_DRAIN_CALLS, HOLD_MS)).await;
    let total = (1 + SPREAD_CALLS + AFTER_DRAIN_CALLS) as usize;
    let all_up = eventually(
        Duration::from_secs(10),
        "every call after the drain admitted",
        async || sip_rows(&h).await,
        |rows| rows.len() == total,
    )
    .await;
    let long_row = all_up.iter().find(|r| r.carrier_call_id == long_id).unwrap();
    assert!(
        !long_row.ended,
        "the long call on A is still up while B takes the new calls: {long_row:?}"
    );
    assert_eq!(ids_on(&all_up, &a_name), on_a, "no new call reached the drained A");
    assert_eq!(
        ids_on(&all_up, &b_name).len(),
        spread_b + AFTER_DRAIN_CALLS as usize,
        "every new call went to B"
    );

    // --- Every call, on either instance, ended with the caller's BYE.
    let (long, spread, after) = tokio::join!(long.wait(), spread.wait(), after.wait());
    // Without the proxy's Record-Route in the 200 (RFC 3261 §12.1.1) the
    // caller's ACK and BYE carry no Route, and Kamailio's loose_route()
    // drops the ACK and answers the BYE 404: checked first, as the cause.
    for out in [&long, &spread, &after] {
        assert_record_route_copied(out, proxy);
    }
    assert_all_completed(&long, 1);
    assert_all_completed(&spread, SPREAD_CALLS);
    assert_all_completed(&after, AFTER_DRAIN_CALLS);
    let closed = eventually(
        Duration::from_secs(15),
        "every ledger row closed",
        async || sip_rows(&h).await,
        |rows| rows.iter().all(|r| r.cleanup_status != "pending"),
    )
    .await;
    assert_eq!(closed.len(), total);
    for r in &closed {
        let drained = on_a.contains(&r.carrier_call_id);
        assert_eq!(
            (r.end_reason.as_deref(), r.cleanup_status.as_str()),
            (Some("caller_hangup"), "completed"),
            "{} call not ended by the caller's BYE: {r:?}",
            if drained { "a drained instance's" } else { "a" }
        );
        let (caller, bot) = turns(&h, r.call_id).await;
        assert!(
            caller >= 1 && bot >= 2,
            "greeted and answered: {caller} caller / {bot} bot turns in {r:?}"
        );
    }
    assert_eq!(sip::refusals(&h).await, Vec::<String>::new(), "no INVITE refused");

    // --- What the proxy saw: no failover, every BYE through it.
    let log = kam.log();
    let dispatched = kam.dispatched();
    assert_eq!(dispatched.len(), total, "one dispatch per call:\n{log}");
    let b_uri = format!("sip:{b_sip}");
    assert!(
        dispatched[dispatched_before..].iter().all(|d| *d == b_uri),
        "after the drain: {:?}",
        &dispatched[dispatched_before..]
    );
    assert!(!log.contains("callgate-failover"), "no INVITE failed over:\n{log}");
    for d in blocking(&kam, Kamailio::destinations).await {
        assert_eq!(d.load, 0, "every call's BYE passed the proxy: {d:?}");
    }

    // --- Nothing left open on either instance.
    h.assert_all_closed().await;
    eventually(
        Duration::from_secs(10),
        "no call and no RTP port left on either instance",
        async || [active(a) as usize, ports_in_use(a), active(&b) as usize, ports_in_use(&b)],
        |n| *n == [0; 4],
    )
    .await;
    assert_eq!(b.shutdown(Duration::from_secs(5)).await, 0, "B had calls left");
    drop(kam);
    h.stop().await;
    eprintln!("whole test: {:?}", started.elapsed());
}

/// `n` calls of `call_pcmu.xml` (one utterance, `hold_ms` of silence, the
/// caller's BYE) at [`CALLS_PER_S`], all allowed at once.
fn calls(n: u32, hold_ms: u32) -> SippOpts {
    SippOpts {
        calls: n,
        rate: Some(CALLS_PER_S),
        limit: Some(n),
        timeout: SIPP_LIMIT,
        ..SippOpts::default()
    }
    .var("hold_ms", &hold_ms.to_string())
    .var("turns", "1")
}

fn assert_all_completed(out: &SippOutcome, n: u32) {
    out.assert_ok();
    assert_eq!(
        (out.successful_calls, out.failed_calls),
        (n.into(), 0),
        "{out}\n{}",
        out.details()
    );
}

/// Every 200 OK to an INVITE that sipp received carries the proxy's
/// `Record-Route`, so the caller's ACK and BYE are routed back through it.
fn assert_record_route_copied(out: &SippOutcome, proxy: SocketAddr) {
    let want = format!("<sip:{proxy};lr>");
    let answers: Vec<&str> = out
        .messages
        .split("-----------------------------------------------")
        .filter(|m| m.contains("message received"))
        .filter(|m| {
            m.lines().any(|l| l.starts_with("SIP/2.0 200 "))
                && m.lines()
                    .any(|l| l.starts_with("CSeq:") && l.trim_end().ends_with("INVITE"))
        })
        .collect();
    assert!(!answers.is_empty(), "no 200 OK to an INVITE in {out}");
    for answer in answers {
        let routed = answer.lines().any(|l| {
            l.get(..13)
                .is_some_and(|h| h.eq_ignore_ascii_case("record-route:"))
                && l.contains(&want)
        });
        assert!(
            routed,
            "callgate's 200 OK must copy the INVITE's Record-Route {want} (RFC 3261 §12.1.1):\n{answer}"
        );
    }
}

/// A second server against the first one's Postgres and simulators: the
/// same configuration but its own instance name, listeners and RTP range.
async fn second_instance(h: &Harness) -> (Running, String) {
    let mut cfg = (*h.server.app.cfg()).clone();
    let name = format!("{}-b", h.instance);
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    cfg.server.instance = name.clone();
    cfg.server.listen = loopback;
    cfg.sip.listen = loopback;
    // The first range lies within 40000..60000: 10000 away is disjoint.
    let (min, max) = (cfg.sip.rtp_port_min, cfg.sip.rtp_port_max);
    (cfg.sip.rtp_port_min, cfg.sip.rtp_port_max) = if min >= 50_000 {
        (min - 10_000, max - 10_000)
    } else {
        (min + 10_000, max + 10_000)
    };
    let running = callgate::server::start(cfg, None)
        .await
        .expect("start the second instance");
    (running, name)
}

/// Kamailio in front of `[a, b]` (on equal load, `a` is chosen).
async fn start_kamailio(a: SocketAddr, b: SocketAddr, opts: KamOpts) -> Arc<Kamailio> {
    let kam = tokio::task::spawn_blocking(move || {
        let [listen] = free_udp_addrs::<1>()?;
        Kamailio::start(listen, &[a, b], &opts)
    })
    .await
    .expect("the kamailio start-up task");
    Arc::new(kam.unwrap_or_else(|e| panic!("{e}")))
}

/// Runs a blocking harness call off the runtime's threads.
async fn blocking<T: Send + 'static>(
    kam: &Arc<Kamailio>,
    f: impl FnOnce(&Kamailio) -> Result<T, HarnessError> + Send + 'static,
) -> T {
    let kam = Arc::clone(kam);
    tokio::task::spawn_blocking(move || f(&kam))
        .await
        .expect("a kamailio harness task")
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `POST /admin/drain` (allowed from loopback without a token).
async fn drain(r: &Running) {
    callgate::ensure_tls_provider();
    let resp = reqwest::Client::new()
        .post(format!("http://{}/admin/drain", r.addr))
        .send()
        .await
        .expect("POST /admin/drain");
    assert_eq!(resp.status().as_u16(), 202, "drain refused");
}

fn sip_addr(r: &Running) -> SocketAddr {
    r.sip.as_ref().expect("sip enabled").addr
}

fn active(r: &Running) -> u32 {
    r.app.gate.snapshot().active
}

fn ports_in_use(r: &Running) -> usize {
    r.sip.as_ref().expect("sip enabled").ports.in_use()
}

/// One SIP call's ledger row, as this test reads it.
#[derive(Debug, Clone)]
struct SipRow {
    call_id: uuid::Uuid,
    owner: String,
    carrier_call_id: String,
    end_reason: Option<String>,
    cleanup_status: String,
    /// The call's end was observed (a BYE, a hang-up, a failure).
    ended: bool,
}

/// Every SIP call's ledger row, both instances', in admission order.
async fn sip_rows(h: &Harness) -> Vec<SipRow> {
    h.db.query(
        "SELECT call_id, owner_instance, carrier_call_id, end_reason, cleanup_status, \
         disconnect_observed_at IS NOT NULL \
         FROM call_ledger WHERE ingress = 'sip' ORDER BY admitted_at",
        &[],
    )
    .await
    .expect("query call_ledger")
    .iter()
    .map(|r| SipRow {
        call_id: r.get(0),
        owner: r.get(1),
        carrier_call_id: r.get(2),
        end_reason: r.get(3),
        cleanup_status: r.get(4),
        ended: r.get(5),
    })
    .collect()
}

/// The SIP Call-IDs of `instance`'s calls, in admission order.
fn ids_on(rows: &[SipRow], instance: &str) -> Vec<String> {
    rows.iter()
        .filter(|r| r.owner == instance)
        .map(|r| r.carrier_call_id.clone())
        .collect()
}

/// (caller, bot) turns in the call's transcript.
async fn turns(h: &Harness, call_id: uuid::Uuid) -> (usize, usize) {
    let t = h.transcript(call_id).await;
    let caller = t.iter().filter(|(s, _, _)| s == "caller").count();
    (caller, t.len() - caller)
}
