//! `callgate drill`, CI-sized, for real: one staircase of the shipped
//! fixture (holds at their floor) against two callgate instances behind
//! the production HAProxy configuration (WebSocket legs) and the
//! production Kamailio configuration (SIP legs, placed by sipp), sharing
//! one Postgres and one set of simulators (the slow tool takes 2 s). The clean run must show zero
//! invariants, a decision computed from the thresholds, and a receipt that
//! verifies — and stops verifying when one byte changes; the same evidence
//! with one threshold tightened is a `hold` naming it. One instance whose
//! permits leak (`[faults] leak_permits`) must make the drill fail.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use callgate::config::Config;
use callgate::server::Running;
use callgate_drill::sip::{SipCall, SipDialer, SipEnded};
use callgate_drill::target::{Dialing, Instance};
use callgate_drill::{Drill, Fixture, Receipt, Verdict};
use callgate_sim::SimConfig;
use callgate_tests::haproxy::{Backend, Haproxy, HaproxyOpts};
use callgate_tests::kamailio::{KamOpts, Kamailio, free_udp_addrs};
use callgate_tests::sipp::{Sipp, SippOpts};
use callgate_tests::{Harness, add_partner, second_instance, sip};

const FIXTURE: &str = include_str!("../../../drills/voice-onboarding-v1.toml");
const PARTNER_KEY: &str = "drill-partner-key";
/// How long HAProxy may take to see both instances up.
const UP: Duration = Duration::from_secs(10);

struct Pool {
    h: Harness,
    b: Running,
    lb: Haproxy,
    kam: Kamailio,
}

/// SIP legs: sipp's `call_pcmu.xml` (speech, then RTP silence for the
/// hold, then BYE) through Kamailio, with the Call-ID the drill chose.
struct SippThroughKamailio {
    proxy: SocketAddr,
}

impl SipDialer for SippThroughKamailio {
    fn call(&self, call_id: String, hold: Duration) -> SipCall {
        let proxy = self.proxy;
        Box::pin(async move {
            let opts = SippOpts {
                timeout: hold + Duration::from_secs(60),
                trace_msg: false,
                ..SippOpts::default()
            }
            .var("hold_ms", &hold.as_millis().to_string())
            .var("turns", "1")
            .args(["-cid_str", call_id.as_str()]);
            let out = Sipp::uac("call_pcmu.xml", proxy, opts).await.wait().await;
            SipEnded {
                completed: out.succeeded(),
                detail: out.to_string(),
            }
        })
    }
}

fn tweak(c: &mut Config) {
    c.agent.enabled = true;
    c.agent.listen = "127.0.0.1:0".parse().unwrap();
    add_partner(c, "drill", PARTNER_KEY, None);
}

impl Pool {
    async fn start(second: impl FnOnce(&mut Config)) -> Pool {
        let mut sim = SimConfig::default();
        sim.dialog.tool_delay_ms = 2_000;
        let h = sip::start(sim, tweak).await;
        let (b, _) = second_instance(&h, second).await;
        let sips = [&h.server, &b].map(|r| r.sip.as_ref().expect("sip enabled").addr);
        let kam = tokio::task::spawn_blocking(move || {
            let [listen] = free_udp_addrs::<1>()?;
            Kamailio::start(listen, &sips, &KamOpts::default())
        })
        .await
        .expect("the kamailio start-up task")
        .unwrap_or_else(|e| panic!("{e}"));
        let backend = |r: &Running| Backend {
            http: r.addr,
            agent_port: r.agent_addr.expect("agent enabled").port(),
        };
        let lb = Haproxy::start([backend(&h.server), backend(&b)], &HaproxyOpts::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        lb.wait_for("both up", UP, |s| s.iter().all(|s| s.status == "UP"))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", lb.log()));
        Pool { h, b, lb, kam }
    }

    fn drill(&self, fixture: Fixture) -> Drill {
        let admin = |r: &Running| Instance::new(&format!("http://{}", r.addr), None).unwrap();
        Drill {
            fixture,
            fixture_text: FIXTURE.to_string(),
            dialing: Dialing {
                balancer: format!("ws://{}", self.lb.frontend()),
                twilio_token: None,
                partner_key: Some(PARTNER_KEY.into()),
                sip: Some(Arc::new(SippThroughKamailio {
                    proxy: self.kam.listen(),
                })),
            },
            instances: vec![admin(&self.h.server), admin(&self.b)],
            hold_scale: 0.0,
            revisions: callgate_drill::Revisions::default(),
            progress: false,
        }
    }

    /// Stops both; B's drain gets `b_deadline` (a leaking B never reaches
    /// zero calls, so it is given a short one).
    async fn stop(self, b_deadline: Duration) {
        drop(self.kam);
        self.b.shutdown(b_deadline).await;
        self.h.stop().await;
    }
}

fn one_staircase() -> Fixture {
    let mut f = Fixture::from_toml(FIXTURE).unwrap();
    f.repeats = 1;
    f
}

fn out_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("callgate-drill-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn key(dir: &Path) -> ed25519_dalek::SigningKey {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("drill.key");
    callgate_drill::sign::keygen(&path).unwrap();
    callgate_drill::sign::load_key(&path).unwrap()
}

fn check<'a>(r: &'a Receipt, step: &str, name: &str) -> &'a callgate_drill::receipt::Check {
    r.checks
        .iter()
        .find(|c| c.step == step && c.name == name)
        .unwrap_or_else(|| panic!("no check {step}/{name} in {:#?}", r.checks))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ci_sized_drill_passes_signs_and_verifies_and_a_tightened_threshold_holds() {
    let pool = Pool::start(|_| {}).await;
    let dir = out_dir("clean");
    let key = key(&dir.join("key"));
    let drill = pool.drill(one_staircase());
    let out = dir.join("out");
    let receipt = drill.run(&out, &key).await.unwrap();
    let yaml = std::fs::read_to_string(out.join("receipt.yaml")).unwrap();
    eprintln!("{yaml}");

    // Every session of the staircase was placed, found in the ledger and closed.
    assert_eq!(receipt.runs.completed, 1, "{:#?}", receipt.runs);
    assert_eq!(receipt.runs.list[0].sessions, 34);
    assert!(
        receipt.invariants.values().all(|n| *n == 0),
        "{:#?}",
        receipt.invariants
    );
    assert!(
        receipt.max_tested_concurrency >= 20,
        "{}",
        receipt.max_tested_concurrency
    );
    // The drain moved new sessions elsewhere; the drained one came through.
    assert_eq!(check(&receipt, "C", "landed_on_draining").observed, 0.0);
    assert_eq!(check(&receipt, "C", "drain_failures").observed, 0.0);
    assert_eq!(
        check(&receipt, "C", "tool_cancels_not_honoured").observed,
        0.0
    );
    for (step, name) in [
        ("A", "tool_reply_max_ms"),
        ("B", "reply_p95_ms"),
        ("C", "barge_in_stop_max_ms"),
    ] {
        let c = check(&receipt, step, name);
        assert!(c.from > 0 && c.observed > 0.0, "{c:?}");
    }
    // SIP legs ran through Kamailio, completed, and their RTP was measured.
    let sip: Vec<_> = receipt
        .checks
        .iter()
        .filter(|c| c.name == "sip_calls_failed")
        .collect();
    assert!(
        sip.iter().map(|c| c.from).sum::<usize>() >= 1,
        "no SIP leg ran"
    );
    assert!(sip.iter().all(|c| c.observed == 0.0), "{sip:?}");
    assert!(
        receipt
            .checks
            .iter()
            .any(|c| c.name == "rtp_jitter_max_ms" && c.from > 0)
    );
    assert!(
        !receipt.not_tested.iter().any(|n| n.starts_with("SIP")),
        "{:?}",
        receipt.not_tested
    );
    // Every threshold met: the decision is limited to what was tested
    // (one staircase, floor holds, no WebRTC), never promote.
    let failed: Vec<_> = receipt.checks.iter().filter(|c| !c.pass).collect();
    assert!(failed.is_empty(), "{failed:#?}");
    assert_decision(&receipt, Verdict::Limited, "1 staircase(s)");

    // The signature and every referenced session check out, against the
    // copies and the ledger.
    let a = Instance::new(&format!("http://{}", pool.h.server.addr), None).unwrap();
    let v = callgate_drill::verify::folder(&out, Some(&a))
        .await
        .unwrap();
    assert!(v.sound(), "{:?}", v.problems);
    assert_eq!(v.copies, receipt.worst_sessions.len());
    assert_eq!(v.ledger, receipt.worst_sessions.len());
    assert!(v.copies >= 3, "{:?}", receipt.worst_sessions.keys());

    // One byte changed (the first digit of the tested concurrency):
    // verification fails.
    let at = yaml.find("max_tested_concurrency: ").unwrap() + "max_tested_concurrency: ".len();
    let mut bytes = yaml.clone().into_bytes();
    bytes[at] = if bytes[at] == b'9' {
        b'8'
    } else {
        bytes[at] + 1
    };
    let tampered = String::from_utf8(bytes).unwrap();
    assert_eq!(tampered.len(), yaml.len());
    std::fs::write(out.join("receipt.yaml"), &tampered).unwrap();
    let e = callgate_drill::verify::folder(&out, None)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("changed after signing"), "{e}");

    // The same evidence under a tightened reply threshold: hold, named.
    let mut tight = one_staircase();
    tight.thresholds.reply_p95_ms = 1;
    let runs = read_runs(&out);
    let recomputed = callgate_drill::receipt::checks(&runs, &tight);
    let mut r2 = receipt.clone();
    r2.checks = recomputed;
    let d = callgate_drill::receipt::decide(&r2, &runs);
    assert_eq!(d.verdict, Verdict::Hold, "{d:?}");
    assert!(d.reason.contains("reply_p95_ms"), "{}", d.reason);
    assert!(d.reason.contains("above its threshold 1"), "{}", d.reason);
    pool.stop(Duration::from_secs(10)).await;
}

/// The receipt's verdict, and a reason that says `why`.
fn assert_decision(receipt: &Receipt, verdict: Verdict, why: &str) {
    assert_eq!(receipt.decision.verdict, verdict, "{:?}", receipt.decision);
    assert!(
        receipt.decision.reason.contains(why),
        "{}",
        receipt.decision.reason
    );
}

fn read_runs(out: &Path) -> Vec<callgate_drill::observed::Run> {
    let text = std::fs::read_to_string(out.join("runs/run-1.json")).unwrap();
    vec![serde_json::from_str(&text).unwrap()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_leaks_permits_makes_the_drill_fail() {
    let pool = Pool::start(|c| c.faults.leak_permits = true).await;
    let dir = out_dir("leak");
    let key = key(&dir.join("key"));
    let out = dir.join("out");
    let receipt = pool.drill(one_staircase()).run(&out, &key).await.unwrap();
    eprintln!(
        "{}",
        std::fs::read_to_string(out.join("receipt.yaml")).unwrap()
    );
    let leaked = receipt.invariants["leaked_counter"];
    assert!(leaked > 0, "{:#?}", receipt.invariants);
    assert_decision(&receipt, Verdict::Rollback, "leaked_counter");
    // Still a sound, signed receipt: a failed drill is evidence too.
    assert!(
        callgate_drill::verify::folder(&out, None)
            .await
            .unwrap()
            .sound()
    );
    pool.stop(Duration::from_secs(1)).await;
}
