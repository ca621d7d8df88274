//! Real HAProxy in front of two callgate instances: HAProxy's own view (its
//! runtime API) shows the weight, maxconn and state each instance's agent
//! reported; the three session counters (ledger, runtime, routing) converge
//! after calls end and after forced disconnects; a drained instance gets no
//! new calls while its calls in progress finish.
//!
//! Everything is real and on loopback: the production `haproxy.cfg`
//! (leastconn, `/readyz` check, agent checks every 200 ms here), two
//! `callgate::server` instances sharing one Postgres and one set of
//! simulators, and the load tool (or a raw client) as Twilio, connecting
//! through HAProxy's frontend or straight to one instance.
//!
//! Committed pressure counts only active calls here (the extra weights are
//! 0), so a weight is exact while calls run: the weighting itself is
//! covered by `callgate::agent`'s unit tests.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::{Duration, Instant};

use callgate::config::{Config, MaxCalls};
use callgate::server::Running;
use callgate_load::{LoadConfig, Outcome};
use callgate_sim::SimConfig;
use callgate_tests::haproxy::{Backend, Haproxy, HaproxyOpts, ServerState};
use callgate_tests::raw::RawCall;
use callgate_tests::{Harness, drain, eventually, second_instance};

/// Each instance's pinned capacity.
const CAPACITY: u32 = 10;
/// How often HAProxy asks each agent.
const AGENT_INTER: Duration = Duration::from_millis(200);
/// The acceptance bound on counters converging once calls are gone.
const CONVERGE: Duration = Duration::from_secs(2);
/// Bound on waiting for HAProxy to show what an agent reported: a check is
/// due within one interval; five absorb start-up and scheduling.
const SEEN_BY_HAPROXY: Duration = Duration::from_millis(5 * 200);
/// Bound on conditions callgate reaches on its own (calls set up, ended).
const T: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_shows_the_reported_weights_and_the_counters_converge() {
    let pool = Pool::start().await;
    pool.wait_weights("both idle: 100 %", [100, 100]).await;

    // Three calls straight to A: 3 of 10 committed → 70 %, maxconn 3 + 7.
    let live = tokio::spawn(callgate_load::run(calls(&direct_url(pool.a()), 3, 4)));
    eventually(
        T,
        "three calls up on A",
        async || active(pool.a()),
        |&n| n == 3,
    )
    .await;
    let began = Instant::now();
    pool.wait_weights("A at 70 %, B at 100 %", [70, 100]).await;
    eprintln!(
        "HAProxy showed A's new weight {:?} after its third call",
        began.elapsed()
    );
    // HAProxy takes an agent's weight as the user weight at once and
    // applies it to the effective weight in a deferred server-state
    // update, so one snapshot can show the new user weight beside the old
    // effective one: wait (bounded) for the effective weight to follow.
    pool.wait_for("A's effective weight at 70 %", |s| {
        [s[0].weight, s[1].weight] == [70, 100]
    })
    .await;
    for r in [pool.a(), &pool.b] {
        let (sessions, at) = r.app.routing.last().expect("a routing report");
        assert_eq!(
            sessions,
            u64::from(active(r)),
            "routing = runtime while the calls run"
        );
        assert!(
            at.elapsed() < 3 * AGENT_INTER,
            "report {:?} old",
            at.elapsed()
        );
    }

    let report = live.await.unwrap();
    let ended = Instant::now();
    assert_all_completed(&report, 3);
    let took = pool.converged_to_zero(ended).await;
    eprintln!("counters converged {took:?} after the last call ended");
    pool.wait_weights("A back at 100 %", [100, 100]).await;

    // Forced disconnects through HAProxy: two callers vanish mid-call
    // (TCP closed, no `stop`, no close frame).
    let mut raw = Vec::new();
    for _ in 0..2 {
        let mut c = RawCall::connect(&pool.lb.ws_url()).await;
        c.start().await;
        raw.push(c);
    }
    eventually(
        T,
        "both raw calls up",
        async || active(pool.a()) + active(&pool.b),
        |&n| n == 2,
    )
    .await;
    pool.wait_for("HAProxy counting both connections", |s| {
        s[0].current + s[1].current == 2
    })
    .await;
    drop(raw);
    let cut = Instant::now();
    let took = pool.converged_to_zero(cut).await;
    eprintln!("counters converged {took:?} after two forced disconnects");
    pool.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_instance_gets_no_new_calls_through_haproxy_and_drops_none() {
    let pool = Pool::start().await;
    pool.wait_weights("both idle: 100 %", [100, 100]).await;

    // Four overlapping calls through the frontend: leastconn spreads them.
    let first = tokio::spawn(callgate_load::run(calls(&pool.lb.ws_url(), 4, 4)));
    let (on_a, on_b) = eventually(
        T,
        "four calls up, on both instances",
        async || (active(pool.a()), active(&pool.b)),
        |&(a, b)| a + b == 4,
    )
    .await;
    eprintln!("before the drain: A {on_a}, B {on_b}");
    assert!(
        on_a >= 1 && on_b >= 1,
        "leastconn spreads: A {on_a}, B {on_b}"
    );

    drain(pool.a()).await;
    let began = Instant::now();
    let drained = pool
        .wait_for("A in DRAIN by its agent", |s| s[0].admin_drain)
        .await;
    eprintln!(
        "HAProxy put A in DRAIN {:?} after POST /admin/drain ({})",
        began.elapsed(),
        drained[0].status
    );
    assert!(!drained[1].admin_drain, "only A drains: {drained:#?}");
    let (sessions, _) = pool.a().app.routing.last().unwrap();
    assert_eq!(
        sessions,
        u64::from(on_a),
        "A reports its calls while draining"
    );

    // New calls while A still holds its own: all go to B.
    let before = pool.owners().await.len();
    let after = callgate_load::run(calls(&pool.lb.ws_url(), 4, 1)).await;
    assert_all_completed(&after, 4);
    let owners = pool.owners().await;
    let new: Vec<&(String, String)> = owners
        .iter()
        .filter(|(sid, _)| after.calls.iter().any(|c| c.call_sid.to_string() == *sid))
        .collect();
    assert_eq!(new.len(), 4, "{owners:#?}");
    assert!(
        new.iter().all(|(_, owner)| *owner == pool.b_name),
        "every call after the drain lands on B: {new:#?}"
    );
    assert_eq!(owners.len(), before + 4);
    let late = pool.lb.servers().await.unwrap();
    eprintln!(
        "A once /readyz has failed too: {} (admin drain {})",
        late[0].status, late[0].admin_drain
    );
    assert!(
        late[0].admin_drain,
        "the agent's DRAIN stays set: {late:#?}"
    );

    // A's calls from before the drain run to their end through HAProxy.
    let first = first.await.unwrap();
    assert_all_completed(&first, 4);
    // The drain is logged once, not once per agent check while it lasts.
    let drained_for = began.elapsed();
    assert!(drained_for > 10 * AGENT_INTER, "{drained_for:?}");
    let log = pool.lb.log();
    let entered = log
        .lines()
        .filter(|l| l.contains("[WARNING]") && l.contains("callgate-1 enters drain state"))
        .count();
    assert_eq!(entered, 1, "one line for the state change:\n{log}");
    let remains = log
        .lines()
        .filter(|l| l.contains("[WARNING]") && l.contains("remains in forced drain"))
        .count();
    assert!(remains <= 1, "no line per agent check:\n{log}");
    let took = pool.converged_to_zero(Instant::now()).await;
    eprintln!("counters converged {took:?} after the last call");
    pool.stop().await;
}

/// The shipped file starts HAProxy under any descriptor limit with only
/// the documented variables: the connection limit follows the limit
/// (about half: two descriptors per proxied connection), and never asks
/// for more than `fd-hard-limit` allows. A pinned `VOICE_MAXCONN` the
/// limit cannot hold stops HAProxy at start, as `deploy/haproxy/README.md` warns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_starts_with_the_shipped_defaults_under_any_descriptor_limit() {
    // Nothing listens here: the servers go DOWN, which starting does not mind.
    let nowhere = Backend {
        http: "127.0.0.1:9".parse().unwrap(),
        agent_port: 9,
    };
    for nofile in [1_024, 4_096, hard_nofile().min(65_536)] {
        let opts = HaproxyOpts {
            nofile: Some(nofile),
            ..HaproxyOpts::default()
        };
        let lb = Haproxy::start([nowhere; 2], &opts)
            .await
            .unwrap_or_else(|e| panic!("under {nofile} descriptors: {e}"));
        let maxconn: u64 = lb.info("Maxconn").await.unwrap().parse().unwrap();
        let usable = nofile.min(20_000);
        eprintln!("descriptor limit {nofile}: HAProxy's Maxconn {maxconn}");
        assert!(
            maxconn <= usable / 2 && maxconn + 64 >= usable / 2,
            "limit {nofile}: maxconn {maxconn}"
        );
    }
    // The operator surface and the receipts are refused on the public side
    // (before any backend is chosen); everything else goes to the pool
    // (503 here: it is down).
    let lb = Haproxy::start([nowhere; 2], &HaproxyOpts::default())
        .await
        .unwrap();
    callgate::ensure_tls_provider();
    for (path, want) in [
        ("/v1/sessions/7c4e0d2a-9f1b-4c55-8a0e-3d2f6b1a9e77", 403),
        ("/v1/sessions?carrier_call_id=CA1", 403),
        ("/v1/sessions", 403),
        ("/metrics", 403),
        ("/admin/status", 403),
        ("/readyz", 503),
    ] {
        let url = format!("http://{}{path}", lb.frontend());
        let got = reqwest::get(url).await.unwrap().status().as_u16();
        assert_eq!(got, want, "{path} through the shipped HAProxy");
    }
    let pinned = HaproxyOpts {
        nofile: Some(4_096),
        maxconn: Some(10_000),
        ..HaproxyOpts::default()
    };
    let Err(refused) = Haproxy::start([nowhere; 2], &pinned).await else {
        panic!("10,000 pinned connections under 4,096 descriptors started");
    };
    assert!(
        refused.to_string().contains("Cannot raise FD limit"),
        "{refused}"
    );
}

/// This process's hard `RLIMIT_NOFILE` (`/proc/self/limits`).
fn hard_nofile() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let hard = line.split_whitespace().nth(4).unwrap();
    hard.parse().unwrap_or(u64::MAX)
}

/// Two instances and HAProxy in front of them.
struct Pool {
    /// Instance A (`callgate-1`), with the Postgres and simulators both use.
    h: Harness,
    /// Instance B (`callgate-2`).
    b: Running,
    b_name: String,
    lb: Haproxy,
}

impl Pool {
    async fn start() -> Pool {
        let h = Harness::start(SimConfig::default(), tweak).await;
        let (b, b_name) = second_instance(&h, |_| {}).await;
        let backend = |r: &Running| Backend {
            http: r.addr,
            agent_port: r.agent_addr.expect("agent enabled").port(),
        };
        let opts = HaproxyOpts {
            agent_inter: AGENT_INTER,
            check_inter: AGENT_INTER,
            ..HaproxyOpts::default()
        };
        let lb = Haproxy::start([backend(&h.server), backend(&b)], &opts)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        Pool { h, b, b_name, lb }
    }

    fn a(&self) -> &Running {
        &self.h.server
    }

    /// Waits until HAProxy shows both servers UP, checked by their agents,
    /// with these user weights and maxconn [`CAPACITY`] (sessions held +
    /// free slots: always the capacity while pressure counts only calls).
    async fn wait_weights(&self, what: &str, want: [u32; 2]) -> Vec<ServerState> {
        self.wait_for(what, |s| {
            s.iter()
                .all(|s| s.status == "UP" && s.agent_status == "L7OK" && s.maxconn == CAPACITY)
                && [s[0].user_weight, s[1].user_weight] == want
        })
        .await
    }

    async fn wait_for(
        &self,
        what: &str,
        done: impl Fn(&[ServerState]) -> bool,
    ) -> Vec<ServerState> {
        self.lb
            .wait_for(what, SEEN_BY_HAPROXY.max(T / 3), done)
            .await
            .unwrap_or_else(|e| panic!("{e}\nHAProxy's log:\n{}", self.lb.log()))
    }

    /// Waits (at most [`CONVERGE`] from `since`) until, on both
    /// instances, ledger, runtime and routing counts are all 0 and the
    /// routing report is newer than `since`; returns how long it took.
    async fn converged_to_zero(&self, since: Instant) -> Duration {
        let last = eventually(
            CONVERGE.saturating_sub(since.elapsed()),
            "ledger, runtime and routing at 0 on both instances",
            async || {
                let mut all = Vec::new();
                for (r, name) in [(self.a(), &self.h.instance), (&self.b, &self.b_name)] {
                    all.push(counters(r, name, since).await);
                }
                all
            },
            |all| all.iter().all(|c| *c == (0, 0, Some(0))),
        )
        .await;
        eprintln!("counters (ledger, runtime, routing): {last:?}");
        since.elapsed()
    }

    /// Every ledger row's (Twilio call sid, owner instance).
    async fn owners(&self) -> Vec<(String, String)> {
        self.h
            .db
            .query(
                "SELECT carrier_call_id, owner_instance FROM call_ledger ORDER BY admitted_at",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    }

    async fn stop(self) {
        self.h.assert_all_closed().await;
        drop(self.lb);
        let left = self.b.shutdown(Duration::from_secs(5)).await.calls_left;
        assert_eq!(left, 0, "B had calls left at shutdown");
        self.h.stop().await;
    }
}

/// Both instances: capacity pinned, pressure = active calls, agent on a
/// port the OS chooses.
fn tweak(c: &mut Config) {
    c.admission.max_concurrent_calls = MaxCalls::Pinned(CAPACITY);
    c.pressure.speaking = 0.0;
    c.pressure.delegating = 0.0;
    c.pressure.recovering = 0.0;
    c.agent.enabled = true;
    c.agent.listen = "127.0.0.1:0".parse().unwrap();
}

/// (ledger open rows, runtime active, routing reported — `None` when the
/// last report is older than `since`).
async fn counters(r: &Running, instance: &str, since: Instant) -> (i64, u32, Option<u64>) {
    let ledger = r
        .app
        .call
        .store
        .open_ledger_sessions(instance)
        .await
        .unwrap_or(-1);
    let routing = r
        .app
        .routing
        .last()
        .filter(|(_, at)| *at >= since)
        .map(|(n, _)| n);
    (ledger, active(r), routing)
}

fn calls(url: &str, n: usize, utterances: usize) -> LoadConfig {
    LoadConfig {
        url: url.to_string(),
        calls: n,
        concurrency: n,
        utterances,
        progress: false,
        ..LoadConfig::default()
    }
}

/// Every call was served to its end: the caller hung up after its last
/// answer, or the bot closed the conversation (the dialog simulator ends
/// some with `booking_confirmed`). Nothing cut short, refused or failed.
fn assert_all_completed(report: &callgate_load::LoadReport, n: usize) {
    assert_eq!(report.calls.len(), n);
    assert!(
        report
            .calls
            .iter()
            .all(|c| matches!(c.outcome, Outcome::Completed | Outcome::EndedByBot { .. })),
        "every call is served to its end: {:#?}",
        report.calls
    );
}

/// The media-stream URL of the instance itself (not through HAProxy).
fn direct_url(r: &Running) -> String {
    format!("ws://{}/v1/media-stream", r.addr)
}

fn active(r: &Running) -> u32 {
    r.app.call.gate.snapshot().active
}
