//! Kamailio in front of two callgate instances: calls are spread across
//! both; after `POST /admin/drain` on one, Kamailio's OPTIONS probe takes it
//! out of rotation and new calls land only on the other; no call is
//! dropped, the drained instance's calls included.
//!
//! Everything is real and on loopback: the production `kamailio.cfg`
//! (dispatcher algorithm 10, call load, 1 s OPTIONS probes), two
//! `callgate::server` instances sharing one Postgres and one set of
//! simulators (each with its own SIP port and RTP range), and sipp as the
//! carrier (`tests/sip/call_pcmu.xml` through the proxy: speech over RTP,
//! silence for the bot's reply, then the caller's BYE; a BYE from callgate
//! fails the call).
//!
//! The plan, on the clock of the first INVITE:
//! * 0 s: one long call, alone, so it goes to A (on equal load the first
//!   destination wins); it lasts about 14 s, through the drain and past
//!   the calls placed after it.
//! * 0.5 s: eight overlapping calls of about 10 s: call load splits them,
//!   A's long call counted (4 to A, 4 to B).
//! * about 3 s, all nine up: `POST /admin/drain` on A; its next probe gets
//!   503 and marks it inactive.
//! * then four calls, while A still has five in progress: all to B.
//! * every call ends with the caller's BYE, through the proxy, the drained
//!   A's included; nothing is left open.
//!
//! Kamailio's harness blocks its thread, so it runs under `spawn_blocking`.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use callgate::server::Running;
use callgate_sim::SimConfig;
use callgate_tests::kamailio::{DsState, HarnessError, KamOpts, Kamailio, free_udp_addrs};
use callgate_tests::sipp::{Sipp, SippOpts, SippOutcome, SippRun};
use callgate_tests::{Harness, drain, eventually, second_instance, sip};

/// Overlapping calls placed while both instances are in rotation.
const SPREAD_CALLS: u32 = 8;
/// Calls placed once the drained instance is out of rotation.
const AFTER_DRAIN_CALLS: u32 = 4;
/// Every call of the test.
const TOTAL_CALLS: usize = (1 + SPREAD_CALLS + AFTER_DRAIN_CALLS) as usize;
/// New calls per second: each call lasts far longer than the gap, so the
/// calls of one batch overlap and call load has something to balance
/// (with no call up, every call goes to the first destination).
const CALLS_PER_S: u32 = 4;
/// Silence after the caller's utterance: room for the bot's reply.
const HOLD_MS: u32 = 4_000;
/// The long call's silence: it ends after the post-drain calls are up.
const LONG_HOLD_MS: u32 = 8_000;
/// Bound on every sipp run (the longest call takes about 15 s).
const SIPP_LIMIT: Duration = Duration::from_secs(40);
/// Probe intervals a drained instance may take to leave rotation: the
/// first 503 counts (`probing_threshold` 1), so one interval suffices.
const PROBES_TO_INACTIVE: u32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drained_instance_leaves_kamailio_rotation_without_dropping_a_call() {
    let started = Instant::now();
    let pool = Pool::start().await;

    let long = pool.place(1, LONG_HOLD_MS).await;
    let long_id = long_call_up_on_a(&pool).await;
    let spread = pool.place(SPREAD_CALLS, HOLD_MS).await;
    let before_drain = spread_over_both(&pool, &long_id).await;

    drain_a(&pool).await;
    let dispatched_before = pool.kam.dispatched().len();
    let after = pool.place(AFTER_DRAIN_CALLS, HOLD_MS).await;
    new_calls_only_on_b(&pool, &before_drain, &long_id).await;

    let (long, spread, after) = tokio::join!(long.wait(), spread.wait(), after.wait());
    // Without the proxy's Record-Route in the 200 (RFC 3261 §12.1.1) the
    // caller's ACK and BYE carry no Route: Kamailio's loose_route() fails,
    // it drops the ACK and answers the BYE 404. Checked first, as the cause.
    for out in [&long, &spread, &after] {
        assert_record_route_copied(out, pool.kam.listen());
    }
    assert_all_completed(&long, 1);
    assert_all_completed(&spread, SPREAD_CALLS);
    assert_all_completed(&after, AFTER_DRAIN_CALLS);
    every_call_ended_by_the_caller(&pool, &before_drain).await;
    proxy_routed_every_call(&pool, dispatched_before).await;

    pool.stop().await;
    eprintln!("whole test: {:?}", started.elapsed());
}

/// The long call is up on A, alone; returns its SIP Call-ID.
async fn long_call_up_on_a(pool: &Pool) -> String {
    eventually(
        Duration::from_secs(10),
        "the long call up on A alone",
        async || (active(pool.a()), active(&pool.b)),
        |&n| n == (1, 0),
    )
    .await;
    let rows = pool
        .wait_rows("the long call's ledger row", |rows| rows.len() == 1)
        .await;
    assert_eq!(rows[0].owner, pool.a_name, "{rows:?}");
    rows[0].carrier_call_id.clone()
}

/// Every spread call is up, on both instances; returns the rows then.
async fn spread_over_both(pool: &Pool, long_id: &str) -> Vec<SipRow> {
    let rows = pool
        .wait_rows("every spread call up", |rows| {
            rows.len() == 1 + SPREAD_CALLS as usize && rows.iter().all(|r| r.in_progress)
        })
        .await;
    let on_a = ids_on(&rows, &pool.a_name);
    let (spread_a, spread_b) = (on_a.len() - 1, ids_on(&rows, &pool.b_name).len());
    eprintln!("spread: A {spread_a} (+ the long call), B {spread_b}");
    assert!(
        on_a.iter().any(|id| id == long_id),
        "the long call is on A: {rows:#?}"
    );
    assert!(
        spread_a >= 2 && spread_b >= 2 && (spread_a + 1).abs_diff(spread_b) <= 2,
        "call load must spread overlapping calls over both: A {spread_a} + 1, B {spread_b}"
    );
    assert_eq!(
        active(pool.a()) as usize,
        on_a.len(),
        "A's calls are all up"
    );
    rows
}

/// `POST /admin/drain` on A; Kamailio's probe must take A out of rotation
/// within [`PROBES_TO_INACTIVE`] intervals, and only A.
async fn drain_a(pool: &Pool) {
    let (a_sip, b_sip) = (pool.a_sip, pool.b_sip);
    let limit = PROBES_TO_INACTIVE * pool.probe_interval;
    let began = Instant::now();
    drain(pool.a()).await;
    blocking(&pool.kam, move |k| {
        k.wait_for_state(a_sip, DsState::Inactive, limit)
    })
    .await;
    eprintln!(
        "drain: A inactive {:?} after POST /admin/drain (probe every {:?})",
        began.elapsed(),
        pool.probe_interval
    );
    let (a_dst, b_dst) = blocking(&pool.kam, move |k| {
        Ok((k.destination(a_sip)?, k.destination(b_sip)?))
    })
    .await;
    assert!(a_dst.probing, "A stays probed, to come back: {a_dst:?}");
    assert_eq!(b_dst.state, DsState::Active, "B still serves: {b_dst:?}");
    assert_eq!(
        blocking(&pool.kam, Kamailio::keepalive).await,
        200,
        "B keeps the pool up"
    );
    // The probe took A down (the event names the probe's Request-URI),
    // not a refused call.
    let down = format!("callgate-instance-down ru=sip:{a_sip}");
    eventually(
        Duration::from_secs(2),
        &format!("'{down}' in Kamailio's log"),
        async || pool.kam.log().contains(&down),
        |&logged| logged,
    )
    .await;
}

/// Every post-drain call is up, all on B, while A's calls (the long one
/// among them) go on.
async fn new_calls_only_on_b(pool: &Pool, before_drain: &[SipRow], long_id: &str) {
    let rows = pool
        .wait_rows("every call after the drain admitted", |rows| {
            rows.len() == TOTAL_CALLS
        })
        .await;
    let long = rows.iter().find(|r| r.carrier_call_id == long_id).unwrap();
    assert!(
        long.in_progress,
        "the long call on A is still up while B takes the new calls: {long:?}"
    );
    let on_a = ids_on(before_drain, &pool.a_name);
    assert_eq!(
        ids_on(&rows, &pool.a_name),
        on_a,
        "no new call reached the drained A"
    );
    assert_eq!(
        ids_on(&rows, &pool.b_name).len(),
        ids_on(before_drain, &pool.b_name).len() + AFTER_DRAIN_CALLS as usize,
        "every new call went to B"
    );
}

/// Every call's receipt: ended by the caller's BYE (the calls in progress
/// on A when it began draining included), closed, greeted and answered;
/// no call refused.
async fn every_call_ended_by_the_caller(pool: &Pool, before_drain: &[SipRow]) {
    let on_a = ids_on(before_drain, &pool.a_name);
    let closed = pool
        .wait_rows("every ledger row closed", |rows| {
            rows.iter().all(|r| r.cleanup_status != "pending")
        })
        .await;
    assert_eq!(closed.len(), TOTAL_CALLS);
    for r in &closed {
        let drained = on_a.contains(&r.carrier_call_id);
        assert_eq!(
            (r.end_reason.as_deref(), r.cleanup_status.as_str()),
            (Some("caller_hangup"), "completed"),
            "{} call not ended by the caller's BYE: {r:?}",
            if drained { "the drained A's" } else { "a" }
        );
        let (caller, bot) = turns(&pool.h, r.call_id).await;
        assert!(
            caller >= 1 && bot >= 2,
            "greeted and answered: {caller} caller / {bot} bot turns in {r:?}"
        );
    }
    assert_eq!(
        refused(pool.a()),
        0,
        "no INVITE refused, by either instance"
    );
    assert_eq!(refusal_rows(&pool.h).await, 0, "no refusal recorded");
}

/// What the proxy saw: one dispatch per call, only B after the drain, no
/// failover, and every call's load released by its BYE.
async fn proxy_routed_every_call(pool: &Pool, dispatched_before: usize) {
    let log = pool.kam.log();
    let dispatched = pool.kam.dispatched();
    assert_eq!(
        dispatched.len(),
        TOTAL_CALLS,
        "one dispatch per call:\n{log}"
    );
    let b_uri = format!("sip:{}", pool.b_sip);
    let after = &dispatched[dispatched_before..];
    assert!(
        after.iter().all(|d| *d == b_uri),
        "after the drain: {after:?}"
    );
    assert!(
        !log.contains("callgate-failover"),
        "no INVITE failed over:\n{log}"
    );
    for d in blocking(&pool.kam, Kamailio::destinations).await {
        assert_eq!(d.load, 0, "every call's BYE passed the proxy: {d:?}");
    }
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
    // Kamailio adds parameters of its own after `lr` (`ftag`).
    let want = format!("<sip:{proxy};lr");
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
            "callgate's 200 OK must copy the INVITE's Record-Route {want}...> (RFC 3261 §12.1.1):\n{answer}"
        );
    }
}

/// Two instances and the proxy in front of them.
struct Pool {
    /// Instance A, with the Postgres and the simulators both use.
    h: Harness,
    /// Instance B.
    b: Running,
    a_name: String,
    b_name: String,
    a_sip: SocketAddr,
    b_sip: SocketAddr,
    /// Shared with the blocking tasks that query it.
    kam: Arc<Kamailio>,
    probe_interval: Duration,
}

impl Pool {
    /// A, then B against A's Postgres and simulators, then Kamailio with
    /// `[A, B]` as dispatcher set 1 (on equal load, A is chosen).
    async fn start() -> Pool {
        let h = sip::start(SimConfig::default(), |_| {}).await;
        let (b, b_name) = second_instance(&h, |_| {}).await;
        let (a_sip, b_sip) = (sip_addr(&h.server), sip_addr(&b));
        let opts = KamOpts::default();
        let probe_interval = Duration::from_secs(opts.ping_interval_s.into());
        let kam = tokio::task::spawn_blocking(move || {
            let [listen] = free_udp_addrs::<1>()?;
            Kamailio::start(listen, &[a_sip, b_sip], &opts)
        })
        .await
        .expect("the kamailio start-up task")
        .unwrap_or_else(|e| panic!("{e}"));
        Pool {
            a_name: h.instance.clone(),
            h,
            b,
            b_name,
            a_sip,
            b_sip,
            kam: Arc::new(kam),
            probe_interval,
        }
    }

    fn a(&self) -> &Running {
        &self.h.server
    }

    /// Starts `n` calls through the proxy.
    async fn place(&self, n: u32, hold_ms: u32) -> SippRun {
        Sipp::uac("call_pcmu.xml", self.kam.listen(), calls(n, hold_ms)).await
    }

    /// Polls both instances' SIP ledger rows (15 s at most) until `done`.
    async fn wait_rows(&self, what: &str, done: impl Fn(&[SipRow]) -> bool) -> Vec<SipRow> {
        eventually(
            Duration::from_secs(15),
            what,
            async || sip_rows(&self.h).await,
            |rows| done(rows),
        )
        .await
    }

    /// Checks that nothing is left open on either instance (calls, RTP
    /// ports, provider sessions), then stops B, Kamailio and A.
    async fn stop(self) {
        self.h.assert_all_closed().await;
        let (a, b) = (self.a(), &self.b);
        eventually(
            Duration::from_secs(10),
            "no call and no RTP port left on either instance",
            async || {
                let (a_calls, b_calls) = (active(a) as usize, active(b) as usize);
                [a_calls, ports_in_use(a), b_calls, ports_in_use(b)]
            },
            |n| *n == [0; 4],
        )
        .await;
        let left = self.b.shutdown(Duration::from_secs(5)).await.calls_left;
        assert_eq!(left, 0, "B had calls left at shutdown");
        drop(self.kam);
        self.h.stop().await;
    }
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

fn sip_addr(r: &Running) -> SocketAddr {
    r.sip.as_ref().expect("sip enabled").addr
}

fn active(r: &Running) -> u32 {
    r.app.call.gate.snapshot().active
}

fn ports_in_use(r: &Running) -> usize {
    r.sip.as_ref().expect("sip enabled").ports.in_use()
}

/// `callgate_admission_rejections_total`, every label: the recorder is
/// the process's, so this counts both instances' refusals.
fn refused(r: &Running) -> u64 {
    r.app
        .metrics
        .render()
        .lines()
        .filter(|l| l.starts_with("callgate_admission_rejections_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

async fn refusal_rows(h: &Harness) -> i64 {
    h.db.query_one("SELECT count(*) FROM admission_rejections", &[])
        .await
        .expect("query admission_rejections")
        .get(0)
}

/// One SIP call's ledger row, as this test reads it.
#[derive(Debug, Clone)]
struct SipRow {
    call_id: uuid::Uuid,
    owner: String,
    carrier_call_id: String,
    end_reason: Option<String>,
    cleanup_status: String,
    /// Neither an end reason nor a disconnect recorded yet.
    in_progress: bool,
}

/// Every SIP call's ledger row, both instances', in admission order.
async fn sip_rows(h: &Harness) -> Vec<SipRow> {
    h.db.query(
        "SELECT call_id, owner_instance, carrier_call_id, end_reason, cleanup_status, \
         end_reason IS NULL AND disconnect_observed_at IS NULL \
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
        in_progress: r.get(5),
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
