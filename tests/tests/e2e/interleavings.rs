//! Seeded, reproducible interleavings of the whole call lifecycle against
//! the real server: admission, setup failure, hang-up, cancellation while
//! queued, queue timeout, disconnect during setup, abrupt disconnect mid-call
//! and a drain, all racing each other.
//!
//! The seed fixes every script (which call does what, when it arrives, how
//! long it talks, when the drain begins); the scheduler still decides how the
//! scripts interleave, which is the point. A failing run prints its seed:
//! `CALLGATE_INTERLEAVING_SEED=<seed> cargo nextest run -p callgate-tests
//! --test interleavings` replays that script alone.
//!
//! Invariants checked:
//! - while running, sampled continuously: the runtime counter never goes
//!   negative and always equals admissions minus releases, within capacity;
//! - after quiescence: every permit was released exactly once (each ledger
//!   row's measured delta is `{1, 1}`, and the gate's admissions, releases
//!   and ledger rows are the same number), nothing was admitted after the
//!   drain began, and the three counters agree — ledger open rows, runtime
//!   active, and what the agent-check responder last told the balancer.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use callgate::config::MaxCalls;
use callgate_sim::SimConfig;
use callgate_tests::raw::{RawCall, ServerMsg, speech};
use callgate_tests::{Harness, eventually};

const CAPACITY: u32 = 4;
const CALLS: usize = 22;
const DEFAULT_SEEDS: [u64; 3] = [0x5eed_0001, 0x5eed_0002, 0x5eed_0003];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_hold_over_seeded_interleavings_of_the_lifecycle() {
    let seeds: Vec<u64> = match std::env::var("CALLGATE_INTERLEAVING_SEED") {
        Ok(s) => vec![s.parse().expect("CALLGATE_INTERLEAVING_SEED is a u64")],
        Err(_) => DEFAULT_SEEDS.to_vec(),
    };
    let mut seen = std::collections::BTreeMap::<String, u32>::new();
    for seed in seeds {
        eprintln!("interleavings: seed {seed}");
        for (reason, n) in one_seed(seed).await {
            *seen.entry(reason).or_default() += n;
        }
    }
    eprintln!("interleavings: outcomes over all seeds {seen:?}");
    // The scripts exist to reach these paths; each default seed's drain comes
    // before its last arrivals, so `draining` refusals are certain.
    assert!(seen.contains_key("refused:draining"), "{seen:?}");
}

/// What one call does.
#[derive(Debug, Clone, Copy)]
enum Act {
    /// Talks for `ms`, then `stop` (a clean hang-up).
    HangUp { ms: u64 },
    /// Closes the socket `ms` after `start`, without `stop` (mid-setup).
    DropInSetup { ms: u64 },
    /// `stop` `ms` after `start`: while queued, cancels the wait.
    Cancel { ms: u64 },
    /// Sends silence and waits: a queued call meets the queue timeout.
    Wait,
    /// Talks for `ms`, then the TCP connection just goes away.
    Abort { ms: u64 },
}

/// The script of one seed: arrival gaps and acts, and after which arrival
/// the drain begins.
struct Script {
    calls: Vec<(u64, Act)>,
    drain_after: usize,
}

fn script(seed: u64) -> Script {
    let mut rng = SplitMix(seed);
    let calls = (0..CALLS)
        .map(|_| {
            let gap = rng.below(120);
            let act = match rng.below(5) {
                0 => Act::HangUp {
                    ms: 300 + rng.below(1_200),
                },
                1 => Act::DropInSetup { ms: rng.below(40) },
                2 => Act::Cancel {
                    ms: 50 + rng.below(400),
                },
                3 => Act::Wait,
                _ => Act::Abort {
                    ms: 100 + rng.below(1_000),
                },
            };
            (gap, act)
        })
        .collect();
    let drain_after = CALLS / 2 + rng.below(CALLS as u64 / 3) as usize;
    Script { calls, drain_after }
}

async fn one_seed(seed: u64) -> Vec<(String, u32)> {
    // Capacity 4 with a short queue, and a dialog service capped below it: a
    // third concurrent setup fails with `setup_failed:dialog`.
    let mut sim = SimConfig::default();
    sim.dialog.max_streams = 2;
    let h = Harness::start(sim, |c| {
        c.admission.max_concurrent_calls = MaxCalls::Pinned(CAPACITY);
        c.admission.queue_max = 3;
        c.admission.queue_timeout_ms = 300;
        c.drain.deadline_s = 60;
        c.agent.enabled = true;
        c.agent.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    })
    .await;
    let h = Arc::new(h);
    let stop = Arc::new(AtomicBool::new(false));
    let monitor = tokio::spawn(watch_the_gate(Arc::clone(&h), Arc::clone(&stop), seed));
    let script = script(seed);
    let mut tasks = Vec::new();
    let mut admitted_at_drain = None;
    for (i, (gap, act)) in script.calls.iter().copied().enumerate() {
        tokio::time::sleep(Duration::from_millis(gap)).await;
        if i == script.drain_after {
            admitted_at_drain = Some(drain(&h).await);
        }
        tasks.push(tokio::spawn(run_call(h.ws_url(), act)));
    }
    for t in tasks {
        t.await.unwrap();
    }
    quiesce(&h, seed).await;
    stop.store(true, Ordering::Relaxed);
    let samples = monitor.await.unwrap();
    assert!(
        samples > 100,
        "seed {seed}: the gate was sampled {samples} times"
    );
    let outcomes = check_after(&h, seed, admitted_at_drain.unwrap()).await;
    Arc::into_inner(h).unwrap().stop().await;
    outcomes
}

/// Samples the gate until told to stop; panics on the first violation.
async fn watch_the_gate(h: Arc<Harness>, stop: Arc<AtomicBool>, seed: u64) -> u64 {
    let mut samples = 0;
    while !stop.load(Ordering::Relaxed) {
        let s = h.server.app.call.gate.snapshot();
        assert!(
            s.admitted_total >= s.released_total,
            "seed {seed}: more releases than admissions: {s:?}"
        );
        assert_eq!(
            s.admitted_total - s.released_total,
            u64::from(s.active),
            "seed {seed}: the runtime counter is not admissions minus releases: {s:?}"
        );
        assert!(s.active <= CAPACITY, "seed {seed}: over capacity: {s:?}");
        samples += 1;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    samples
}

/// `POST /admin/drain`; returns the admissions counted once it has answered.
async fn drain(h: &Harness) -> u64 {
    let resp = reqwest::Client::new()
        .post(format!("http://{}/admin/drain", h.server.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    h.server.app.call.gate.snapshot().admitted_total
}

async fn run_call(url: String, act: Act) {
    let mut call = RawCall::connect(&url).await;
    call.start().await;
    let voice = speech(1_500, 7);
    match act {
        Act::HangUp { ms } => {
            if !talk(&mut call, &voice, ms).await {
                call.stop().await;
                drain_until_closed(&mut call).await;
            }
        }
        Act::DropInSetup { ms } => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        Act::Cancel { ms } => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            call.stop().await;
        }
        Act::Wait => {
            if !talk(&mut call, &[], 900).await {
                call.stop().await;
                drain_until_closed(&mut call).await;
            }
        }
        Act::Abort { ms } => {
            talk(&mut call, &voice, ms).await;
        }
    }
}

/// Streams for `ms`; true when the server closed the stream meanwhile.
async fn talk(call: &mut RawCall, voice: &[u8], ms: u64) -> bool {
    let got = call.stream_for(voice, Duration::from_millis(ms)).await;
    got.iter().any(|m| matches!(m, ServerMsg::Closed(_)))
}

/// After `stop`, reads what is left until the server closes (bounded).
async fn drain_until_closed(call: &mut RawCall) {
    let until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < until {
        match call.recv(Duration::from_millis(500)).await {
            Some(ServerMsg::Closed(_)) => return,
            Some(ServerMsg::Mark(name)) => call.echo_mark(&name).await,
            _ => {}
        }
    }
    panic!("the server did not close a stopped stream within 15 s");
}

/// Waits until no call task is left and the gate and the ledger are empty.
async fn quiesce(h: &Harness, seed: u64) {
    let instance = h.instance.clone();
    eventually(
        Duration::from_secs(30),
        &format!("seed {seed}: quiescence"),
        async || {
            let active = h.server.app.call.gate.snapshot().active;
            let tasks = h.server.app.call.tasks.len();
            let open = h
                .server
                .app
                .call
                .store
                .open_ledger_sessions(&instance)
                .await
                .unwrap();
            (active, tasks, open)
        },
        |(active, tasks, open)| *active == 0 && *tasks == 0 && *open == 0,
    )
    .await;
}

/// The after-quiescence invariants; returns the outcomes seen, by reason.
async fn check_after(h: &Harness, seed: u64, admitted_at_drain: u64) -> Vec<(String, u32)> {
    let snap = h.server.app.call.gate.snapshot();
    let rows =
        h.db.query(
            "SELECT end_reason, stats->'active_counter_delta' FROM call_ledger \
             WHERE owner_instance = $1",
            &[&h.instance],
        )
        .await
        .unwrap();
    let once = serde_json::json!({"increment": 1, "decrement": 1});
    for r in &rows {
        let delta: serde_json::Value = r.get(1);
        assert_eq!(
            delta, once,
            "seed {seed}: a permit not released exactly once"
        );
    }
    // An admitted call whose setup could not write its ledger row (the
    // state resource failed) is recorded as a `setup_failed:*` refusal
    // instead: every admission is one or the other, never both or neither.
    let draining = snap.rejected_total.draining as usize;
    let admitted = snap.admitted_total as usize;
    let unclaimed = snap.unclaimed_total as usize;
    let refused = eventually(
        Duration::from_secs(10),
        &format!("seed {seed}: every refusal recorded"),
        async || h.rejection_reasons().await,
        |r| {
            let setup = r.iter().filter(|r| r.starts_with("setup_failed")).count();
            let abandoned = r.iter().filter(|r| *r == "caller_abandoned").count() as u64;
            r.iter().filter(|r| *r == "draining").count() >= draining
                && rows.len() + setup + unclaimed >= admitted
                && abandoned >= snap.cancelled_total + snap.unclaimed_total
        },
    )
    .await;
    let rowless = refused
        .iter()
        .filter(|r| r.starts_with("setup_failed"))
        .count();
    // A grant the caller left before claiming (`unclaimed_total`) was never a
    // call: it is a `caller_abandoned` refusal, like a wait cancelled.
    let calls = (rows.len() + rowless) as u64;
    assert_eq!(
        (
            snap.admitted_total - snap.unclaimed_total,
            snap.released_total - snap.unclaimed_total
        ),
        (calls, calls),
        "seed {seed}: admissions, releases and (ledger rows + row-less setup failures) differ: {snap:?}"
    );
    let abandoned = refused.iter().filter(|r| *r == "caller_abandoned").count() as u64;
    assert_eq!(
        abandoned,
        snap.cancelled_total + snap.unclaimed_total,
        "seed {seed}: every caller who left the queue is one cancelled wait or one unclaimed grant"
    );
    assert_eq!(
        snap.admitted_total, admitted_at_drain,
        "seed {seed}: a call was admitted after the drain began"
    );
    let ledger_open = h
        .server
        .app
        .call
        .store
        .open_ledger_sessions(&h.instance)
        .await
        .unwrap();
    let asked = Instant::now();
    let line = agent_check(h).await;
    let (routing, told_at) = h
        .server
        .app
        .routing
        .last()
        .expect("the agent's answer was recorded");
    assert!(
        told_at >= asked,
        "seed {seed}: the routing report is older than the check"
    );
    assert_eq!(
        (ledger_open, u64::from(snap.active), routing),
        (0, 0, 0),
        "seed {seed}: ledger, runtime and routing counters differ (agent said {line:?})"
    );
    let mut outcomes = std::collections::BTreeMap::<String, u32>::new();
    for r in &rows {
        let reason: Option<String> = r.get(0);
        *outcomes.entry(reason.unwrap_or_default()).or_default() += 1;
    }
    for reason in refused {
        *outcomes.entry(format!("refused:{reason}")).or_default() += 1;
    }
    eprintln!("interleavings: seed {seed}: {outcomes:?}");
    outcomes.into_iter().collect()
}

/// One HAProxy-style agent check: connect, read the line.
async fn agent_check(h: &Harness) -> String {
    use tokio::io::AsyncReadExt;
    let addr = h.server.agent_addr.expect("the agent responder listens");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut line = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut line))
        .await
        .expect("the agent answered within 5 s")
        .unwrap();
    line
}

/// A tiny deterministic generator (SplitMix64): the script is the seed's.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
