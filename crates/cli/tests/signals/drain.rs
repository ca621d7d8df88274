//! SIGTERM under 30 live calls — 10 Twilio, 10 partner, 10 SIP from the real
//! sipp — caught in every phase (greeting, caller speaking, bot speaking, a
//! tool pending), with each drain policy: `finish` with a deadline long
//! enough, `finish` with a short one, and `transfer`. Each time: `/readyz`
//! fails at once, calls offered during the drain are refused through their
//! ingress's overflow path, the process exits 0 with every ledger row
//! closed, and `callgate audit` finds nothing.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use callgate::config::{DrainPolicy, MaxCalls};
use callgate_load::{
    Arrival, CallRecord, LoadConfig, LoadReport, Outcome, PartnerFormat, Protocol,
};
use callgate_rig::{Database, ProcessOptions, Processes};
use callgate_sim::SimConfig;
use callgate_tests::sipp::{Sipp, SippOpts, SippOutcome};
use state_store::LocalOptions;

const KEY: &str = "drain-test-partner-key";
const PER_INGRESS: usize = 10;
/// Longest wait for each state the test expects of the server.
const PATIENCE: Duration = Duration::from_secs(60);

/// The server, its SIP address and its configuration file.
struct Rig {
    rig: Processes,
    sip: SocketAddr,
    instance: String,
}

/// What the 30 calls and the 3 late ones came to.
struct Ran {
    twilio: LoadReport,
    partner: LoadReport,
    sip: SippOutcome,
    late_twilio: LoadReport,
    late_partner: LoadReport,
    late_sip: SippOutcome,
    /// From just before `kill -TERM` to the drain's own stamp in
    /// `instance_events` (when admission closed and readiness failed).
    ready_fails_ms: u64,
    /// From just before `kill -TERM` to the first 503 a probe saw.
    probe_503_ms: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_lets_every_call_end_by_itself() {
    let mut r = Rig::start(DrainPolicy::Finish, 120).await;
    let ran = r.run(25_000).await;
    ran.assert_refused_and_ready_failed();
    for call in ran.ws_calls() {
        assert!(
            matches!(
                call.outcome,
                Outcome::Completed | Outcome::EndedByBot { .. }
            ),
            "a live call finished by itself: {call:#?}"
        );
    }
    assert_eq!(ran.sip.counter("answered"), 10, "{}", ran.sip.details());
    assert_eq!(ran.sip.counter("callgate_bye"), 0, "the callers hung up");
    let rows = r.exit_clean_and_audit().await;
    for (reason, n) in &rows {
        assert!(
            !reason.starts_with("drain") && !reason.contains("failed"),
            "{n} calls ended {reason}: {rows:?}"
        );
    }
    assert_eq!(rows.values().sum::<usize>(), 3 * PER_INGRESS, "{rows:?}");
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_deadline_says_goodbye_to_the_rest_and_leaves_nothing_open() {
    let mut r = Rig::start(DrainPolicy::Finish, 3).await;
    let ran = r.run(60_000).await;
    ran.assert_refused_and_ready_failed();
    let cut = ran.ended_by_drain(
        |o| matches!(o, Outcome::CutShort { reason } if reason == "drain_deadline"),
        |c| c.prompts_heard.goodbye >= 1,
    );
    assert!(
        cut >= 15,
        "most WebSocket calls outlived a 3 s deadline: {cut}"
    );
    assert_eq!(
        ran.sip.counter("callgate_bye"),
        10,
        "every SIP call got callgate's BYE: {}",
        ran.sip.details()
    );
    let rows = r.exit_clean_and_audit().await;
    assert_eq!(rows.get("drain_deadline"), Some(&(cut + 10)), "{rows:?}");
    assert_eq!(rows.values().sum::<usize>(), 3 * PER_INGRESS, "{rows:?}");
    r.assert_final_prompt_played("drain_deadline").await;
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_hands_each_call_over_at_its_turn_boundary() {
    let mut r = Rig::start(DrainPolicy::Transfer, 60).await;
    let ran = r.run(60_000).await;
    ran.assert_refused_and_ready_failed();
    let moved = ran.ended_by_drain(
        |o| matches!(o, Outcome::Transferred { reason } if reason == "drain"),
        |c| c.prompts_heard.transfer >= 1,
    );
    assert!(
        moved >= 15,
        "most WebSocket calls were handed over: {moved}"
    );
    assert_eq!(
        ran.sip.counter("referred"),
        10,
        "every SIP call was REFERred: {}",
        ran.sip.details()
    );
    let db = r.db().await;
    let rows = r.exit_clean_and_audit().await;
    assert_eq!(rows.get("drain_transfer"), Some(&(moved + 10)), "{rows:?}");
    // At a turn boundary: every handed-over call was asked, and no bot
    // turn still playing when it was asked was cut (SIP callers talk over
    // the greeting: those barge-ins end before the drain).
    let asked: i64 = db
        .query_one(
            "SELECT count(DISTINCT call_id) FROM call_events WHERE kind = 'drain_transfer'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(asked as usize, moved + 10);
    let cut: i64 = db
        .query_one(
            "SELECT count(*) FROM call_turns t \
             JOIN call_events e ON e.call_id = t.call_id AND e.kind = 'drain_transfer_requested' \
             WHERE t.speaker = 'bot' AND t.interrupted AND t.ended_at >= e.at",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(cut, 0, "a hand-over never cuts a reply");
    drop(db);
    r.assert_final_prompt_played("drain_transfer").await;
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_shortens_the_drain_to_the_grace_and_still_cleans_up() {
    let mut r = Rig::start(DrainPolicy::Finish, 120).await;
    let mut long = r.load(Protocol::Twilio, 1);
    long.utterances = 40;
    let live = tokio::spawn(callgate_load::run(long));
    r.wait_status("the call to be live", |s| s["admission"]["active"] == 1)
        .await;
    r.rig.server.signal("TERM").await.unwrap();
    r.wait_status("the drain with its long deadline", |s| {
        s["drain"]["deadline_in_ms"].as_u64() > Some(100_000)
    })
    .await;
    r.rig.server.signal("INT").await.unwrap();
    let s = r
        .wait_status("the deadline moved to the 5 s grace", |s| {
            s["drain"]["deadline_in_ms"].as_u64() <= Some(5_000)
        })
        .await;
    assert_eq!(s["drain"]["origin"], "signal");
    let call = live.await.unwrap();
    let call = &call.calls[0];
    assert!(
        matches!(&call.outcome, Outcome::CutShort { reason } if reason == "drain_deadline"),
        "{call:#?}"
    );
    assert!(
        call.prompts_heard.goodbye >= 1,
        "the goodbye was not skipped"
    );
    let rows = r.exit_clean_and_audit().await;
    assert_eq!(rows, BTreeMap::from([("drain_deadline".to_string(), 1)]));
    r.assert_final_prompt_played("drain_deadline").await;
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_offered_across_the_drain_instant_are_admitted_before_it_or_refused() {
    let mut r = Rig::start(DrainPolicy::Finish, 60).await;
    // 10 calls per ingress at 10/s; SIGTERM lands 200 ms into the burst.
    let burst = |protocol| {
        let mut cfg = r.load(protocol, 10);
        cfg.arrival = Arrival::Rate { per_second: 10.0 };
        cfg.utterances = 1;
        tokio::spawn(callgate_load::run(cfg))
    };
    let (twilio, partner) = (burst(Protocol::Twilio), burst(Protocol::Partner));
    let mut sipp = r.sipp(10, 1_000);
    sipp.rate = Some(10);
    let sip = Sipp::uac("load_uac.xml", r.sip, sipp).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    r.sigterm().await;
    let (twilio, partner, sip) = (
        twilio.await.unwrap(),
        partner.await.unwrap(),
        sip.wait().await,
    );
    let mut admitted = 0;
    for calls in [&twilio.calls, &partner.calls] {
        let refused = calls
            .iter()
            .filter(|c| matches!(&c.outcome, Outcome::Rejected { reason, prompt_heard: true, .. } if reason == "draining"))
            .count();
        let served = calls
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Completed | Outcome::EndedByBot { .. }))
            .count();
        assert_eq!(
            refused + served,
            10,
            "admitted and served, or refused: {calls:#?}"
        );
        assert!(refused >= 1, "the burst straddled the drain");
        admitted += served;
    }
    let sip_refused = sip.rejected_by_code();
    assert_eq!(
        sip_refused.keys().copied().collect::<Vec<_>>(),
        [503],
        "{}",
        sip.details()
    );
    assert_eq!(
        sip.counter("answered") + sip_refused[&503],
        10,
        "{}",
        sip.details()
    );
    admitted += sip.counter("answered") as usize;
    assert!(admitted >= 1, "the burst straddled the drain");
    // The auditor's check: no admission after the instance's `draining`.
    let rows = r.exit_clean_and_audit().await;
    assert_eq!(rows.values().sum::<usize>(), admitted, "{rows:?}");
    r.stop().await;
}

impl Rig {
    async fn start(policy: DrainPolicy, deadline_s: u64) -> Rig {
        let database = Database::local(LocalOptions::default()).await.unwrap();
        let instance = format!("drain-{}", uuid::Uuid::new_v4().simple());
        let sip = SocketAddr::from(([127, 0, 0, 1], free_udp_and_tcp_port()));
        let mut sim = SimConfig::default();
        // The booking tool runs long enough to be caught pending.
        sim.dialog.tool_delay_ms = 2_000;
        let opts = ProcessOptions {
            exe: env!("CARGO_BIN_EXE_callgate").into(),
            instance: instance.clone(),
            sim,
        };
        let rtp = callgate_rig::ports::claim_span().unwrap();
        let rig = Processes::start(database, opts, |c| {
            c.drain.policy = policy;
            c.drain.deadline_s = deadline_s;
            c.drain.grace_s = deadline_s.min(5);
            c.admission.max_concurrent_calls = MaxCalls::Pinned(40);
            // A debug server with 30 calls on a test machine's two loaded
            // cores: the instance ceiling would measure the machine, not
            // the drain (tests/src/lib.rs keeps it off for the same reason).
            c.admission.max_lag_ms = 0;
            c.sip.enabled = true;
            c.sip.listen = sip;
            c.sip.rtp_port_min = rtp;
            c.sip.rtp_port_max = rtp + 199;
            c.sip.human_queue_uri = Some("sip:humans@127.0.0.1:5099".into());
            callgate_tests::add_partner(c, "acme", KEY, None);
        })
        .await
        .unwrap();
        Rig { rig, sip, instance }
    }

    fn load(&self, protocol: Protocol, calls: usize) -> LoadConfig {
        let base = self.rig.base_url().replace("http://", "ws://");
        let (url, key) = match protocol {
            Protocol::Partner => (format!("{base}/v1/partner/stream"), Some(KEY.to_string())),
            _ => (self.rig.media_url(), None),
        };
        LoadConfig {
            url,
            protocol,
            partner_key: key,
            partner_format: PartnerFormat::L16,
            calls,
            arrival: Arrival::Rate { per_second: 1.25 },
            utterances: 5,
            progress: false,
            call_timeout: Duration::from_secs(150),
            ..LoadConfig::default()
        }
    }

    fn sipp(&self, calls: u32, hold_ms: u64) -> SippOpts {
        SippOpts {
            calls,
            rate: Some(1),
            limit: Some(calls),
            timeout: Duration::from_secs(150),
            trace_msg: false,
            ..SippOpts::default()
        }
        .var("hold_ms", &hold_ms.to_string())
    }

    /// Places the 30 calls, waits until all are live with a bot speaking
    /// and a tool pending, sends SIGTERM, offers one more call per ingress,
    /// and waits for every call to end.
    async fn run(&self, sip_hold_ms: u64) -> Ran {
        let twilio = tokio::spawn(callgate_load::run(self.load(Protocol::Twilio, PER_INGRESS)));
        let partner = tokio::spawn(callgate_load::run(
            self.load(Protocol::Partner, PER_INGRESS),
        ));
        let sip = Sipp::uac(
            "load_uac.xml",
            self.sip,
            self.sipp(PER_INGRESS as u32, sip_hold_ms),
        )
        .await;
        let status = self
            .wait_status("30 live calls, one speaking, one waiting on a tool", |s| {
                let c = &s["pressure"]["components"];
                s["admission"]["active"] == 30
                    && c["speaking"].as_u64() >= Some(1)
                    && c["delegating"].as_u64() >= Some(1)
            })
            .await;
        eprintln!("at SIGTERM: {}", status["pressure"]["components"]);
        let (ready_fails_ms, probe_503_ms) = self.sigterm().await;
        let late_twilio = callgate_load::run(self.load(Protocol::Twilio, 1));
        let late_partner = callgate_load::run(self.load(Protocol::Partner, 1));
        let late_sip = async {
            Sipp::uac("load_uac.xml", self.sip, self.sipp(1, 1_000))
                .await
                .wait()
                .await
        };
        let (late_twilio, late_partner, late_sip) =
            tokio::join!(late_twilio, late_partner, late_sip);
        Ran {
            twilio: twilio.await.unwrap(),
            partner: partner.await.unwrap(),
            sip: sip.wait().await,
            late_twilio,
            late_partner,
            late_sip,
            ready_fails_ms,
            probe_503_ms,
        }
    }

    /// Sends SIGTERM; returns when readiness failed by the server's own
    /// stamp and by a probe, each in ms after the signal was sent.
    async fn sigterm(&self) -> (u64, u64) {
        let probe = format!("{}/readyz", self.rig.base_url());
        let sent_wall = SystemTime::now();
        let sent = Instant::now();
        self.rig.server.signal("TERM").await.unwrap();
        let probe_503_ms = loop {
            let code = self
                .rig
                .http()
                .get(&probe)
                .send()
                .await
                .map(|r| r.status().as_u16());
            if code.ok() == Some(503) {
                break sent.elapsed().as_millis() as u64;
            }
            assert!(sent.elapsed() < PATIENCE, "readiness never failed");
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        let db = self.db().await;
        // Written by a spawned task once admission closed: wait for it.
        let stamp: SystemTime = loop {
            let row = db
                .query_opt(
                    "SELECT at FROM instance_events WHERE instance = $1 AND kind = 'draining'",
                    &[&self.instance],
                )
                .await
                .unwrap();
            if let Some(row) = row {
                break row.get(0);
            }
            assert!(sent.elapsed() < PATIENCE, "the drain was never recorded");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let ready_fails_ms = stamp
            .duration_since(sent_wall)
            .map_or(0, |d| d.as_millis() as u64);
        eprintln!(
            "readiness failed {ready_fails_ms} ms after SIGTERM (server's stamp); a probe saw 503 after {probe_503_ms} ms"
        );
        (ready_fails_ms, probe_503_ms)
    }

    async fn wait_status(
        &self,
        what: &str,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(s) = self.rig.status().await
                && done(&s)
            {
                return s;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn db(&self) -> tokio_postgres::Client {
        let (client, conn) =
            tokio_postgres::connect(self.rig.database().conninfo(), tokio_postgres::NoTls)
                .await
                .unwrap();
        tokio::spawn(conn);
        client
    }

    /// Waits for the exit (status 0), runs `callgate audit` against the
    /// same database (0 violations) and returns the ledger's end reasons.
    async fn exit_clean_and_audit(&mut self) -> BTreeMap<String, usize> {
        let code = self.rig.server.wait_exit(PATIENCE).await.unwrap();
        assert!(code.success(), "the server exits 0 after its drain: {code}");
        let db = self.db().await;
        let open: i64 = db
            .query_one(
                "SELECT count(*) FROM call_ledger WHERE cleanup_status <> 'completed'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(open, 0, "every receipt closed and completed");
        let audit = tokio::process::Command::new(env!("CARGO_BIN_EXE_callgate"))
            .arg("audit")
            .arg("--config")
            .arg(self.rig.dir().join("server.toml"))
            .output()
            .await
            .unwrap();
        let said = String::from_utf8_lossy(&audit.stdout);
        assert!(
            audit.status.success(),
            "callgate audit: {said} {}",
            String::from_utf8_lossy(&audit.stderr)
        );
        assert!(said.contains("0 violations"), "{said}");
        let mut rows = BTreeMap::new();
        for row in db
            .query("SELECT end_reason FROM call_ledger", &[])
            .await
            .unwrap()
        {
            let reason: Option<String> = row.get(0);
            *rows.entry(reason.unwrap_or_default()).or_insert(0) += 1;
        }
        eprintln!("ledger end reasons after the drain: {rows:?}");
        rows
    }

    /// Every call that ended `reason` — SIP ones too, whose callers the
    /// load tool does not hear — had its final prompt reported played to
    /// its end by the leg before it ended.
    async fn assert_final_prompt_played(&self, reason: &str) {
        let unheard: Vec<String> = self
            .db()
            .await
            .query(
                "SELECT l.ingress FROM call_ledger l WHERE l.end_reason = $1 AND NOT EXISTS \
                 (SELECT 1 FROM call_events e WHERE e.call_id = l.call_id \
                  AND e.kind = 'final_prompt_played')",
                &[&reason],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert!(
            unheard.is_empty(),
            "{reason} calls whose final prompt was not heard to its end: {unheard:?}"
        );
    }

    /// Stops the simulators and Postgres (the server has exited) and
    /// removes the rig's directory.
    async fn stop(self) {
        let dir: PathBuf = self.rig.dir().to_path_buf();
        self.rig.stop().await;
        let _ = std::fs::remove_dir_all(dir);
    }
}

impl Ran {
    fn ws_calls(&self) -> impl Iterator<Item = &CallRecord> {
        self.twilio.calls.iter().chain(&self.partner.calls)
    }

    /// Every WebSocket call ended by itself or by the drain (`by_drain`),
    /// and each the drain ended `heard` its prompt. Returns how many the
    /// drain ended.
    fn ended_by_drain(
        &self,
        by_drain: impl Fn(&Outcome) -> bool,
        heard: impl Fn(&CallRecord) -> bool,
    ) -> usize {
        let mut n = 0;
        for call in self.ws_calls() {
            if by_drain(&call.outcome) {
                n += 1;
                assert!(heard(call), "the drain's prompt was heard: {call:#?}");
            } else {
                assert!(
                    matches!(
                        call.outcome,
                        Outcome::Completed | Outcome::EndedByBot { .. }
                    ),
                    "ended by itself or by the drain: {call:#?}"
                );
            }
        }
        n
    }

    fn assert_refused_and_ready_failed(&self) {
        assert!(
            self.ready_fails_ms < 100,
            "readiness failed {} ms after SIGTERM",
            self.ready_fails_ms
        );
        assert!(
            self.probe_503_ms < 5_000,
            "a probe saw 503 after {} ms",
            self.probe_503_ms
        );
        for late in self
            .late_twilio
            .calls
            .iter()
            .chain(&self.late_partner.calls)
        {
            assert!(
                matches!(&late.outcome, Outcome::Rejected { reason, prompt_heard: true, .. } if reason == "draining"),
                "a call offered during the drain hears the overflow prompt: {late:#?}"
            );
        }
        assert_eq!(
            self.late_sip.rejected_by_code(),
            BTreeMap::from([(503, 1)]),
            "{}",
            self.late_sip.details()
        );
        assert_eq!(
            self.twilio.calls.len() + self.partner.calls.len(),
            2 * PER_INGRESS
        );
    }
}

/// A loopback port for both UDP and TCP (the SIP listener binds both)
/// that no other test process is handed.
fn free_udp_and_tcp_port() -> u16 {
    callgate_rig::ports::claim().unwrap()
}
